//! Markdown tables from `summary.json`. The result tables of
//! `docs/results.md` are printed by `orrery table` from an experiment's
//! summary, and the pinned tests (`tests/lab/pinned.rs`) print the same tables on
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
//! iteration over the policy's, already averaged over seeds). A path that
//! starts with `gain.` is the baseline's value over the run's, seed by seed
//! (`gain.metrics.avg_iter_s`: one gain per placement in FORESIGHT Fig. 6).
//!
//! `@min`, `@median`, `@max` or `@below1` after the path aggregates the seeds
//! otherwise than by their mean; `@below1` counts the seeds whose value is
//! below 1 (`3 of 20`: placements where a policy loses to the baseline).
//!
//! Three more layouts: [`Layout::Wide`] (a column per policy), [`grid`] (a
//! row and a column per key of scenarios named `a=x,b=y`, FORESIGHT Fig. 7),
//! and [`job_table`] (a row per job of `jobs.csv`, CASSINI Table 2).

use serde_json::Value;
use std::fmt::Write as _;
use std::str::FromStr;
use thiserror::Error;

/// What went wrong making a table.
#[derive(Debug, Error, PartialEq)]
pub enum TableError {
    /// A cell spec that does not parse.
    #[error(
        "cell `{spec}`: {why} (expected [NAME=]PATH[/DIVISOR][%][@min|@median|@max|@below1][:DECIMALS], e.g. \"JCT (h)=metrics.avg_jct_s/3600:1\")"
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
    /// A grid needs every scenario named `a=x,b=y` with the same two keys.
    #[error("scenario `{0}` is not named KEY=VALUE,KEY=VALUE with the first scenario's keys (a grid needs them)")]
    NotAGrid(String),
    /// A CSV file that does not read.
    #[error("line {line}: {why}")]
    BadCsv {
        /// 1-based line.
        line: u64,
        /// What the CSV reader said.
        why: String,
    },
    /// A `gain.` cell in a summary without a baseline.
    #[error("`{0}` needs the summary's baseline, and it has none")]
    NoBaseline(String),
}

/// How a cell aggregates the seeds of a scenario and policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// Their mean (the default).
    Mean,
    /// The smallest.
    Min,
    /// The median (the mean of the middle two for an even count).
    Median,
    /// The largest.
    Max,
    /// How many are below 1, as `k of n`.
    Below1,
}

/// One cell: a path into a run, a divisor, an aggregate over seeds and the
/// decimals to print.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    spec: String,
    name: String,
    path: Vec<String>,
    divisor: f64,
    percent: bool,
    agg: Agg,
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
        let (rest, agg) = match rest.rsplit_once('@') {
            Some((rest, a)) => (
                rest,
                match a {
                    "mean" => Agg::Mean,
                    "min" => Agg::Min,
                    "median" => Agg::Median,
                    "max" => Agg::Max,
                    "below1" => Agg::Below1,
                    _ => return Err(bad("the aggregate must be @mean, @min, @median, @max or @below1")),
                },
            ),
            None => (rest, Agg::Mean),
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
        if path[0] == "gain" && path.len() < 2 {
            return Err(bad("`gain.` needs the path of the value to compare, e.g. gain.metrics.avg_iter_s"));
        }
        Ok(Cell { spec: spec.to_string(), name, path, divisor, percent, agg, decimals })
    }
}

impl Cell {
    /// The summary's list this cell reads: its runs, or its comparison.
    fn source<'a>(&self, summary: &'a Value) -> &'a [Value] {
        let key = if self.path[0] == "comparison" { "comparison" } else { "runs" };
        summary.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The cell's number for one item of [`Cell::source`]: a path into it,
    /// or for `gain.` the baseline run's value (same scenario and seed) over
    /// the item's.
    fn value(&self, summary: &Value, item: &Value) -> Option<f64> {
        let scale = if self.percent { 100.0 } else { 1.0 };
        let at = |v: &Value, path: &[String]| path.iter().try_fold(v, |v, key| v.get(key)).and_then(Value::as_f64);
        let v = match self.path[0].as_str() {
            "comparison" => at(item, &self.path[1..])?,
            "gain" => {
                let baseline = summary.get("baseline")?;
                let same = |r: &&Value, k: &str| r.get(k) == item.get(k);
                let base = self
                    .source(summary)
                    .iter()
                    .find(|r| r.get("policy") == Some(baseline) && same(r, "scenario") && same(r, "seed"))?;
                at(base, &self.path[1..])? / at(item, &self.path[1..])?
            }
            _ => at(item, &self.path)?,
        };
        Some(v / self.divisor * scale)
    }

    /// The seeds' values of one scenario and policy, aggregated and
    /// formatted; "-" when there are none.
    fn aggregate(&self, xs: Vec<f64>) -> String {
        if self.agg == Agg::Below1 && !xs.is_empty() {
            return format!("{} of {}", xs.iter().filter(|&&x| x < 1.0).count(), xs.len());
        }
        self.aggregate_number(xs).map_or_else(|| "-".into(), |v| self.format(v))
    }

    /// The seeds' values aggregated as a number: `None` when there are none,
    /// and for `@below1`, a count rather than a number.
    fn aggregate_number(&self, mut xs: Vec<f64>) -> Option<f64> {
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        Some(match self.agg {
            Agg::Mean => xs.iter().sum::<f64>() / n as f64,
            Agg::Min => xs[0],
            Agg::Max => xs[n - 1],
            Agg::Median if n % 2 == 1 => xs[n / 2],
            Agg::Median => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
            Agg::Below1 => return None,
        })
    }

    /// The spec as written.
    pub(crate) fn spec(&self) -> &str {
        &self.spec
    }

    /// The decimals the spec asks for, if it does.
    pub(crate) fn decimals(&self) -> Option<usize> {
        self.decimals
    }

    /// A number as this cell prints it (its decimals, `%`, thousands).
    pub(crate) fn format(&self, v: f64) -> String {
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
pub(crate) fn thousands(number: &str) -> String {
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
    for r in runs {
        let sc = r.get("scenario").and_then(Value::as_str).unwrap_or("");
        if !scenarios.contains(&sc) {
            scenarios.push(sc);
        }
    }
    let chosen = chosen_policies(runs, policies)?;
    check_cells(summary, cells)?;
    let mean = |sc: &str, p: &str, c: &Cell| over_seeds(summary, sc, p, c);
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
    Ok(markdown(&rows))
}

/// Every cell reads a number from some run, else the error naming it.
pub(crate) fn check_cells(summary: &Value, cells: &[Cell]) -> Result<(), TableError> {
    for c in cells {
        if c.path[0] == "gain" {
            let Some(b) = summary.get("baseline") else { return Err(TableError::NoBaseline(c.spec.clone())) };
            let runs = summary.get("runs").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            if !runs.iter().any(|r| r.get("policy") == Some(b)) {
                let name = b.as_str().unwrap_or_default().to_string();
                return Err(TableError::NoSuchPolicy(name, chosen_policies(runs, &[])?.join(", ")));
            }
        }
        if !c.source(summary).iter().any(|r| c.value(summary, r).is_some()) {
            return Err(TableError::NoSuchField(c.spec.clone()));
        }
    }
    Ok(())
}

/// One cell of scenario `sc` and policy `p`, aggregated over seeds.
fn over_seeds(summary: &Value, sc: &str, p: &str, c: &Cell) -> String {
    c.aggregate(seed_values(summary, sc, p, c))
}

/// The values of one cell for scenario `sc` and policy `p`, one per seed.
fn seed_values(summary: &Value, sc: &str, p: &str, c: &Cell) -> Vec<f64> {
    c.source(summary)
        .iter()
        .filter(|r| r.get("scenario").and_then(Value::as_str) == Some(sc))
        .filter(|r| r.get("policy").and_then(Value::as_str) == Some(p))
        .filter_map(|r| c.value(summary, r))
        .collect()
}

/// One cell of scenario `sc` and policy `p` as a number, aggregated over
/// seeds (`None` when no run has it, or for `@below1`).
pub(crate) fn number_over_seeds(summary: &Value, sc: &str, p: &str, c: &Cell) -> Option<f64> {
    c.aggregate_number(seed_values(summary, sc, p, c))
}

/// The scenarios and the policies of a summary, each in first-seen order.
pub(crate) fn scenarios_and_policies(summary: &Value) -> Result<(Vec<String>, Vec<String>), TableError> {
    let runs = summary.get("runs").and_then(Value::as_array).ok_or(TableError::NotASummary)?;
    let (mut scenarios, mut policies): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for r in runs {
        for (key, seen) in [("scenario", &mut scenarios), ("policy", &mut policies)] {
            let v = r.get(key).and_then(Value::as_str).unwrap_or("");
            if !seen.iter().any(|s| s == v) {
                seen.push(v.to_string());
            }
        }
    }
    Ok((scenarios, policies))
}

/// Rows as a markdown table; the first row is the header.
fn markdown(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for (k, row) in rows.iter().enumerate() {
        let _ = writeln!(out, "| {} |", row.join(" | "));
        if k == 0 {
            let _ = writeln!(out, "|{}", "---|".repeat(row.len()));
        }
    }
    out
}

/// The policies of a summary's runs, in first-seen order, checked against
/// those asked for (all when none are).
fn chosen_policies<'a>(runs: &'a [Value], policies: &'a [String]) -> Result<Vec<&'a str>, TableError> {
    let mut all: Vec<&str> = Vec::new();
    for r in runs {
        let p = r.get("policy").and_then(Value::as_str).unwrap_or("");
        if !all.contains(&p) {
            all.push(p);
        }
    }
    if let Some(p) = policies.iter().find(|p| !all.contains(&p.as_str())) {
        return Err(TableError::NoSuchPolicy(p.clone(), all.join(", ")));
    }
    Ok(if policies.is_empty() { all } else { policies.iter().map(String::as_str).collect() })
}

/// FORESIGHT Fig. 7's layout: scenarios named `a=x,b=y` as a grid, a row
/// per value of `a` and a column per value of `b` (numbers in numeric
/// order), each cell the policies' values joined by ", ", the cells by " / ".
/// O(scenarios · policies · cells · runs).
pub fn grid(summary: &Value, cells: &[Cell], policies: &[String]) -> Result<String, TableError> {
    let runs = summary.get("runs").and_then(Value::as_array).ok_or(TableError::NotASummary)?;
    let chosen = chosen_policies(runs, policies)?;
    check_cells(summary, cells)?;
    let mut keys: Option<(String, String)> = None;
    let (mut xs, mut ys): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut names: Vec<(&str, String, String)> = Vec::new();
    for r in runs {
        let sc = r.get("scenario").and_then(Value::as_str).unwrap_or("");
        let parsed = sc.split_once(',').and_then(|(a, b)| Some((a.split_once('=')?, b.split_once('=')?)));
        let Some(((ka, va), (kb, vb))) = parsed else { return Err(TableError::NotAGrid(sc.into())) };
        match &keys {
            None => keys = Some((ka.into(), kb.into())),
            Some((a, b)) if a == ka && b == kb => {}
            Some(_) => return Err(TableError::NotAGrid(sc.into())),
        }
        if !ys.iter().any(|y| y == va) {
            ys.push(va.into());
        }
        if !xs.iter().any(|x| x == vb) {
            xs.push(vb.into());
        }
        if !names.iter().any(|n| n.0 == sc) {
            names.push((sc, va.into(), vb.into()));
        }
    }
    let numeric = |v: &mut Vec<String>| {
        if v.iter().all(|x| x.parse::<f64>().is_ok()) {
            v.sort_by(|a, b| a.parse::<f64>().unwrap_or(0.0).total_cmp(&b.parse::<f64>().unwrap_or(0.0)));
        }
    };
    numeric(&mut xs);
    numeric(&mut ys);
    let (ka, kb) = keys.ok_or(TableError::NotASummary)?;
    let what = cells.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(" / ");
    let mut rows = vec![
        std::iter::once(format!("{ka} \\ {kb}: {what} of {}", chosen.join(", ")))
            .chain(xs.iter().cloned())
            .collect::<Vec<_>>(),
    ];
    for y in &ys {
        let mut row = vec![y.clone()];
        for x in &xs {
            let sc = names.iter().find(|n| &n.1 == y && &n.2 == x).map(|n| n.0);
            row.push(sc.map_or("-".into(), |sc| {
                cells
                    .iter()
                    .map(|c| chosen.iter().map(|p| over_seeds(summary, sc, p, c)).collect::<Vec<_>>().join(", "))
                    .collect::<Vec<_>>()
                    .join(" / ")
            }));
        }
        rows.push(row);
    }
    Ok(markdown(&rows))
}

/// The rows of a CSV file with a header (`jobs.csv`) as JSON objects, for
/// [`job_table`]; a field that reads as a number becomes one.
pub fn csv_rows(text: &str) -> Result<Vec<Value>, TableError> {
    let bad = |e: csv::Error| TableError::BadCsv { line: e.position().map_or(1, |p| p.line()), why: e.to_string() };
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().map_err(bad)?.clone();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(bad)?;
        let row: serde_json::Map<String, Value> = header
            .iter()
            .zip(record.iter())
            .map(|(k, v)| {
                let number = v.parse::<f64>().ok().and_then(serde_json::Number::from_f64);
                (k.to_string(), number.map_or_else(|| Value::String(v.to_string()), Value::Number))
            })
            .collect();
        rows.push(Value::Object(row));
    }
    Ok(rows)
}

/// CASSINI Table 2's layout, from the rows of `jobs.csv` (as JSON objects):
/// a row per job of the first seed (scenario, job id, model), a column per
/// cell and policy. A cell with the same value under every policy for every
/// job (a job's time alone on a pinned placement) gets one column.
/// O(jobs · policies · cells · rows).
pub fn job_table(rows: &[Value], cells: &[Cell], policies: &[String]) -> Result<String, TableError> {
    let str_of = |r: &Value, k: &str| -> String {
        match r.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }
    };
    let chosen = chosen_policies(rows, policies)?;
    let first_seed = rows.first().map(|r| str_of(r, "seed")).unwrap_or_default();
    let rows: Vec<&Value> = rows.iter().filter(|r| str_of(r, "seed") == first_seed).collect();
    for c in cells {
        if !rows.iter().any(|r| c.value(&Value::Null, r).is_some()) {
            return Err(TableError::NoSuchField(c.spec.clone()));
        }
    }
    // (scenario, job, model) in first-seen order.
    let mut jobs: Vec<(String, String, String)> = Vec::new();
    for r in &rows {
        let key = (str_of(r, "scenario"), str_of(r, "id"), str_of(r, "model"));
        if !jobs.contains(&key) {
            jobs.push(key);
        }
    }
    let value = |job: &(String, String, String), p: &str, c: &Cell| {
        rows.iter()
            .find(|r| str_of(r, "scenario") == job.0 && str_of(r, "id") == job.1 && str_of(r, "policy") == p)
            .and_then(|r| c.value(&Value::Null, r))
    };
    let shared: Vec<bool> = cells
        .iter()
        .map(|c| jobs.iter().all(|j| chosen.iter().all(|p| value(j, p, c) == value(j, chosen[0], c))))
        .collect();
    let mut header: Vec<String> = ["scenario", "job", "model"].map(String::from).to_vec();
    for (c, &one) in cells.iter().zip(&shared) {
        if one {
            header.push(c.name.clone());
        } else {
            header.extend(chosen.iter().map(|p| format!("`{p}`: {}", c.name)));
        }
    }
    let mut out = vec![header];
    for j in &jobs {
        let mut row = vec![j.0.clone(), j.1.clone(), j.2.clone()];
        for (c, &one) in cells.iter().zip(&shared) {
            let shown = |p: &str| value(j, p, c).map_or("-".into(), |v| c.format(v));
            if one {
                row.push(shown(chosen[0]));
            } else {
                row.extend(chosen.iter().map(|p| shown(p)));
            }
        }
        out.push(row);
    }
    Ok(markdown(&out))
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
    fn per_seed_gains_aggregate_by_min_median_max_and_count_below_one() {
        // ECMP against FORESIGHT on four placements: gains 2, 1, 0.5 and 4.
        let run = |p: &str, seed: u64, it: f64| serde_json::json!({ "scenario": "frag=0.5", "policy": p, "seed": seed, "metrics": { "avg_iter_s": it } });
        let summary = serde_json::json!({ "baseline": "ecmp", "runs": [
            run("ecmp", 1, 2.0), run("foresight", 1, 1.0),
            run("ecmp", 2, 1.0), run("foresight", 2, 1.0),
            run("ecmp", 3, 1.0), run("foresight", 3, 2.0),
            run("ecmp", 4, 4.0), run("foresight", 4, 1.0),
        ]});
        let cells: Vec<Cell> = [
            "mean=gain.metrics.avg_iter_s:3",
            "gain.metrics.avg_iter_s@min:2",
            "median=gain.metrics.avg_iter_s@median:2",
            "gain.metrics.avg_iter_s@max:1",
            "worse=gain.metrics.avg_iter_s@below1",
        ]
        .iter()
        .map(|s| s.parse().expect("cell"))
        .collect();
        let t = table(&summary, &cells, Layout::Long, &["foresight".into()]).expect("table");
        // Mean of the per-seed gains (2 + 1 + 0.5 + 4) / 4; median (1 + 2) / 2.
        assert!(t.ends_with("| frag=0.5 | `foresight` | 1.875 | 0.50 | 1.50 | 4.0 | 1 of 4 |\n"), "{t}");
        assert_eq!(
            table(&serde_json::json!({ "runs": [run("a", 1, 1.0)] }), &cells[..1], Layout::Long, &[]),
            Err(TableError::NoBaseline("mean=gain.metrics.avg_iter_s:3".into()))
        );
        assert!(matches!("gain.x@mode".parse::<Cell>(), Err(TableError::BadCell { .. })));
    }

    #[test]
    fn scenarios_named_by_two_keys_make_a_grid_in_numeric_order() {
        let run = |sc: &str, p: &str, g: f64| serde_json::json!({ "scenario": sc, "policy": p, "seed": 1, "metrics": { "g": g } });
        let summary = serde_json::json!({ "runs": [
            run("frag=0.8,batch=32", "a", 1.0), run("frag=0.8,batch=32", "b", 2.0),
            run("frag=0.2,batch=4", "a", 3.0), run("frag=0.2,batch=4", "b", 4.0),
            run("frag=0.2,batch=32", "a", 5.0), run("frag=0.2,batch=32", "b", 6.0),
        ]});
        let cell: Cell = "gain=metrics.g:1".parse().expect("cell");
        let t = grid(&summary, std::slice::from_ref(&cell), &[]).expect("grid");
        assert_eq!(
            t,
            "| frag \\ batch: gain of a, b | 4 | 32 |\n|---|---|---|\n| 0.2 | 3.0, 4.0 | 5.0, 6.0 |\n| 0.8 | - | 1.0, 2.0 |\n"
        );
        let odd = serde_json::json!({ "runs": [run("frag=0.2,batch=4", "a", 1.0), run("load=1", "a", 1.0)] });
        assert_eq!(grid(&odd, &[cell], &[]), Err(TableError::NotAGrid("load=1".into())));
    }

    #[test]
    fn a_job_table_has_a_row_per_job_and_one_column_for_what_every_policy_shares() {
        let csv = "policy,seed,scenario,id,model,isolated_iter_ms,iter_mean_ms\n\
                   pinned,1,T2-4,a,roberta,247.0,383.2\n\
                   pinned,1,T2-4,b,roberta,247.0,383.4\n\
                   pinned+cassini,1,T2-4,a,roberta,247.0,288.1\n\
                   pinned+cassini,1,T2-4,b,roberta,247.0,288.0\n\
                   pinned,2,T2-4,a,roberta,247.0,999.0\n";
        let rows = csv_rows(csv).expect("csv");
        let cells: Vec<Cell> =
            ["alone (ms)=isolated_iter_ms:0", "ms=iter_mean_ms:0"].iter().map(|s| s.parse().expect("cell")).collect();
        let t = job_table(&rows, &cells, &[]).expect("table");
        // The second seed's row is not read; "alone" is the same under both policies.
        assert_eq!(
            t,
            "| scenario | job | model | alone (ms) | `pinned`: ms | `pinned+cassini`: ms |\n|---|---|---|---|---|---|\n\
             | T2-4 | a | roberta | 247 | 383 | 288 |\n| T2-4 | b | roberta | 247 | 383 | 288 |\n"
        );
        assert!(matches!(csv_rows("a,b\n1\n"), Err(TableError::BadCsv { line: 2, .. })));
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
