//! Markdown tables from `summary.json`. The result tables of
//! `docs/results.md` are printed by `orrery table` from an experiment's
//! summary, and the pinned tests (`tests/pinned.rs`) print the same tables on
//! short versions of the experiments, so a typed number and a moved number
//! both show.
//!
//! A cell is a path into a run of `summary.json` (`metrics.avg_jct_s`,
//! `by_priority.high.avg_iter_s`, `counters.messages`), optionally divided
//! (`metrics.avg_jct_s/3600`, hours), as a percentage (`metrics.gpu_idle%`),
//! with a number of decimals (`metrics.gpu_util:2`) and a column name
//! (`JCT (h)=metrics.avg_jct_s/3600:2`). Runs are averaged over seeds, per
//! scenario and policy, in the order they first appear. A path that starts
//! with `comparison.` reads the summary's comparison line of the scenario
//! and policy instead (`comparison.gain_avg_iter`: the baseline's mean
//! iteration over the policy's, already averaged over seeds).

use serde_json::Value;
use std::fmt::Write as _;
use std::str::FromStr;
use thiserror::Error;

/// What went wrong making a table.
#[derive(Debug, Error, PartialEq)]
pub enum TableError {
    /// A cell spec that does not parse.
    #[error(
        "cell `{spec}`: {why} (expected [NAME=]PATH[/DIVISOR][%][:DECIMALS], e.g. \"JCT (h)=metrics.avg_jct_s/3600:1\")"
    )]
    BadCell {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// The summary has no `runs` array.
    #[error("not an orrery summary.json: no `runs` array")]
    NotASummary,
    /// A cell that no run of the summary has.
    #[error(
        "no run has `{0}` (a number); summary.json's runs have e.g. metrics.avg_jct_s, by_priority.high.avg_iter_s, counters.*"
    )]
    NoSuchField(String),
    /// A policy asked for that the summary does not hold.
    #[error("policy `{0}` is not in the summary (it has: {1})")]
    NoSuchPolicy(String, String),
}

/// One cell: a path into a run, a divisor and the decimals to print.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    spec: String,
    name: String,
    path: Vec<String>,
    divisor: f64,
    percent: bool,
    decimals: Option<usize>,
}

impl FromStr for Cell {
    type Err = TableError;
    fn from_str(spec: &str) -> Result<Self, TableError> {
        let bad = |why: &str| TableError::BadCell { spec: spec.to_string(), why: why.to_string() };
        let (name, rest) = match spec.rsplit_once('=') {
            Some((name, rest)) => (name.to_string(), rest),
            None => (spec.to_string(), spec),
        };
        let (rest, decimals) = match rest.rsplit_once(':') {
            Some((rest, d)) => {
                (rest, Some(d.parse::<usize>().ok().filter(|&d| d <= 9).ok_or_else(|| bad("decimals must be 0-9"))?))
            }
            None => (rest, None),
        };
        let (rest, percent) = rest.strip_suffix('%').map_or((rest, false), |r| (r, true));
        let (path, divisor) = match rest.split_once('/') {
            Some((path, d)) => (
                path,
                d.parse::<f64>()
                    .ok()
                    .filter(|d| d.is_finite() && *d > 0.0)
                    .ok_or_else(|| bad("the divisor must be a positive number"))?,
            ),
            None => (rest, 1.0),
        };
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        if path.iter().any(|p| p.is_empty()) {
            return Err(bad("empty path segment"));
        }
        Ok(Cell { spec: spec.to_string(), name, path, divisor, percent, decimals })
    }
}

impl Cell {
    /// The summary's list this cell reads: its runs, or its comparison.
    fn source<'a>(&self, summary: &'a Value) -> &'a [Value] {
        let key = if self.path[0] == "comparison" { "comparison" } else { "runs" };
        summary.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    fn value(&self, item: &Value) -> Option<f64> {
        let path = if self.path[0] == "comparison" { &self.path[1..] } else { &self.path[..] };
        let v = path.iter().try_fold(item, |v, key| v.get(key))?;
        let scale = if self.percent { 100.0 } else { 1.0 };
        v.as_f64().map(|x| x / self.divisor * scale)
    }

    fn format(&self, v: f64) -> String {
        let default = if self.percent {
            1
        } else if v.abs() >= 100.0 {
            0
        } else {
            3
        };
        let decimals = self.decimals.unwrap_or(default);
        let number = thousands(&format!("{v:.decimals$}"));
        if self.percent { format!("{number}%") } else { number }
    }
}

/// `1234567.5` → `1,234,567.5`.
fn thousands(number: &str) -> String {
    let (sign, digits) = number.strip_prefix('-').map_or(("", number), |d| ("-", d));
    let (int, frac) = digits.split_once('.').map_or((digits, None), |(i, f)| (i, Some(f)));
    let mut out = String::from(sign);
    for (k, c) in int.chars().enumerate() {
        if k > 0 && (int.len() - k) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        let _ = write!(out, ".{f}");
    }
    out
}

/// How the table is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A row per scenario and policy, a column per cell.
    Long,
    /// A row per scenario, a column per policy; the cells joined by " / ".
    Wide,
}

/// The table of `summary` (`summary.json` as JSON). `policies` picks and
/// orders the policies (all, in the summary's order, when empty).
/// O(scenarios · policies · cells · runs): each cell scans the runs.
pub fn table(summary: &Value, cells: &[Cell], layout: Layout, policies: &[String]) -> Result<String, TableError> {
    let runs = summary.get("runs").and_then(Value::as_array).ok_or(TableError::NotASummary)?;
    let mut scenarios: Vec<&str> = Vec::new();
    let mut all: Vec<&str> = Vec::new();
    for r in runs {
        let sc = r.get("scenario").and_then(Value::as_str).unwrap_or("");
        let p = r.get("policy").and_then(Value::as_str).unwrap_or("");
        if !scenarios.contains(&sc) {
            scenarios.push(sc);
        }
        if !all.contains(&p) {
            all.push(p);
        }
    }
    for p in policies {
        if !all.contains(&p.as_str()) {
            return Err(TableError::NoSuchPolicy(p.clone(), all.join(", ")));
        }
    }
    for c in cells {
        if !c.source(summary).iter().any(|r| c.value(r).is_some()) {
            return Err(TableError::NoSuchField(c.spec.clone()));
        }
    }
    let chosen: Vec<&str> = if policies.is_empty() { all } else { policies.iter().map(String::as_str).collect() };
    // The mean over seeds of one cell, formatted; "-" where no run has it.
    let mean = |sc: &str, p: &str, c: &Cell| {
        let xs: Vec<f64> = c
            .source(summary)
            .iter()
            .filter(|r| r.get("scenario").and_then(Value::as_str) == Some(sc))
            .filter(|r| r.get("policy").and_then(Value::as_str) == Some(p))
            .filter_map(|r| c.value(r))
            .collect();
        if xs.is_empty() { "-".to_string() } else { c.format(xs.iter().sum::<f64>() / xs.len() as f64) }
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    let cell_names = cells.iter().map(|c| c.name.clone());
    match layout {
        Layout::Long => {
            rows.push(["scenario".to_string(), "policy".to_string()].into_iter().chain(cell_names).collect());
            for sc in &scenarios {
                for p in &chosen {
                    let mut row = vec![sc.to_string(), format!("`{p}`")];
                    row.extend(cells.iter().map(|c| mean(sc, p, c)));
                    rows.push(row);
                }
            }
        }
        Layout::Wide => {
            let names: Vec<String> = cell_names.collect();
            rows.push(
                [format!("scenario \\ {}", names.join(" / "))]
                    .into_iter()
                    .chain(chosen.iter().map(|p| format!("`{p}`")))
                    .collect(),
            );
            for sc in &scenarios {
                let mut row = vec![sc.to_string()];
                row.extend(chosen.iter().map(|p| cells.iter().map(|c| mean(sc, p, c)).collect::<Vec<_>>().join(" / ")));
                rows.push(row);
            }
        }
    }
    let mut out = String::new();
    for (k, row) in rows.iter().enumerate() {
        let _ = writeln!(out, "| {} |", row.join(" | "));
        if k == 0 {
            let _ = writeln!(out, "|{}", "---|".repeat(row.len()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Value {
        serde_json::json!({ "runs": [
            { "scenario": "S1", "policy": "a", "seed": 1, "metrics": { "avg_jct_s": 3600.0, "gpu_util": 0.5 } },
            { "scenario": "S1", "policy": "a", "seed": 2, "metrics": { "avg_jct_s": 5400.0, "gpu_util": 0.7 } },
            { "scenario": "S1", "policy": "b", "seed": 1, "metrics": { "avg_jct_s": 1234567.0, "gpu_util": 0.25 },
              "by_priority": { "high": { "avg_iter_s": 0.475 } } },
        ], "comparison": [
            { "scenario": "S1", "policy": "a", "gain_avg_iter": 1.0 },
            { "scenario": "S1", "policy": "b", "gain_avg_iter": 1.15 },
        ]})
    }

    #[test]
    fn cells_average_over_seeds_divide_and_round() {
        let cells: Vec<Cell> =
            ["metrics.avg_jct_s/3600:2", "metrics.gpu_util", "JCT (s)=metrics.avg_jct_s", "metrics.gpu_util%"]
                .iter()
                .map(|s| s.parse().expect("cell"))
                .collect();
        let t = table(&summary(), &cells, Layout::Long, &[]).expect("table");
        // a: (3600 + 5400) / 2 = 4500 s = 1.25 h; utilisation (0.5 + 0.7) / 2.
        assert_eq!(
            t,
            "| scenario | policy | metrics.avg_jct_s/3600:2 | metrics.gpu_util | JCT (s) | metrics.gpu_util% |\n\
             |---|---|---|---|---|---|\n\
             | S1 | `a` | 1.25 | 0.600 | 4,500 | 60.0% |\n\
             | S1 | `b` | 342.94 | 0.250 | 1,234,567 | 25.0% |\n"
        );
    }

    #[test]
    fn wide_tables_put_policies_in_columns_and_mark_what_is_missing() {
        let cells: Vec<Cell> = ["by_priority.high.avg_iter_s", "metrics.gpu_util:2", "x=comparison.gain_avg_iter:2"]
            .iter()
            .map(|s| s.parse().expect("cell"))
            .collect();
        let t = table(&summary(), &cells, Layout::Wide, &["b".into(), "a".into()]).expect("table");
        assert_eq!(
            t,
            "| scenario \\ by_priority.high.avg_iter_s / metrics.gpu_util:2 / x | `b` | `a` |\n\
             |---|---|---|\n\
             | S1 | 0.475 / 0.25 / 1.15 | - / 0.60 / 1.00 |\n"
        );
    }

    #[test]
    fn bad_cells_fields_and_policies_are_named() {
        assert!(matches!("metrics.x/0".parse::<Cell>(), Err(TableError::BadCell { .. })));
        assert!(matches!("metrics.x:z".parse::<Cell>(), Err(TableError::BadCell { .. })));
        assert!(matches!("metrics..x".parse::<Cell>(), Err(TableError::BadCell { .. })));
        let cell: Cell = "metrics.nope".parse().expect("cell");
        assert_eq!(
            table(&summary(), std::slice::from_ref(&cell), Layout::Long, &[]),
            Err(TableError::NoSuchField("metrics.nope".into()))
        );
        let cell: Cell = "metrics.gpu_util".parse().expect("cell");
        assert_eq!(
            table(&summary(), std::slice::from_ref(&cell), Layout::Long, &["c".into()]),
            Err(TableError::NoSuchPolicy("c".into(), "a, b".into()))
        );
        assert_eq!(table(&serde_json::json!({}), &[cell], Layout::Long, &[]), Err(TableError::NotASummary));
    }
}
