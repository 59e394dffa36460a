//! The scoreboard that opens `docs/results.md`: for each paper's headline,
//! the paper's number and orrery's in the simulator, on the testbed and
//! with real DDP jobs, and a verdict. `orrery table --scoreboard FILE`
//! prints it from a scoreboard file (`docs/scoreboard.toml`):
//!
//! * `[runs.NAME]`: the command that writes a run's `summary.json`, and
//!   where (`orrery table --scoreboard FILE --commands` prints them all);
//! * `[[row]]`: a headline, its links into the results, the paper's number,
//!   the verdict, and the simulator's figures as a template
//!   (`simulator = "{gain}×"`) whose `{NAME}`s are `[row.figures.NAME]`:
//!   a [`Cell`] of a run, for one policy, optionally against another
//!   policy or the best other one, over one scenario or all of them (a
//!   range, `a–b`).
//!
//! The simulator's figures are deterministic, so they are read from the
//! runs, never typed. The testbed's and real DDP's are medians over runs on
//! real TCP, stated in the sections they link to, and stay text here.

use crate::tables::{Cell, TableError, check_cells, number_over_seeds, scenarios_and_policies};
use orrery_model::setups::{LoadError, line_of, parse_config};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A scoreboard file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scoreboard {
    /// The runs its figures read, by name.
    pub runs: BTreeMap<String, Run>,
    /// Its rows, in order.
    #[serde(rename = "row")]
    pub rows: Vec<Row>,
}

/// A run of an experiment: the command that makes it and its summary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// A shell command that writes `summary`, from the repository's root.
    pub command: String,
    /// Its `summary.json`, relative to where `orrery table` runs.
    pub summary: PathBuf,
}

/// One headline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// The paper and its claim.
    pub headline: String,
    /// (label, link) pairs into the sections that explain the figures.
    #[serde(default)]
    pub links: Vec<(String, String)>,
    /// The paper's number.
    pub paper: String,
    /// The simulator's figures: text with `{NAME}` for each of `figures`.
    pub simulator: String,
    /// On the namespace testbed (real TCP); "–" if not run.
    #[serde(default)]
    pub testbed: Option<String>,
    /// With real PyTorch DDP jobs; "–" if not run.
    #[serde(default)]
    pub ddp: Option<String>,
    /// Whether the headline holds, and why not.
    pub verdict: String,
    /// The figures the template names.
    #[serde(default)]
    pub figures: BTreeMap<String, Figure>,
}

/// One number (or range) read from runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// The run, or runs (a range over all of them).
    pub run: OneOrMany,
    /// The policy whose value it is, or policies (a range over them).
    pub policy: OneOrMany,
    /// What of it: a cell of `orrery table --cell`.
    pub cell: String,
    /// Only this scenario (default: every scenario, shown as a range).
    #[serde(default)]
    pub scenario: Option<String>,
    /// Compared with this policy (`{policy}` in it stands for the
    /// figure's: `{policy}:unaware`), or `best-other`: the policy other
    /// than `policy` with the lowest `best_by` (times: lower is better).
    #[serde(default)]
    pub against: Option<String>,
    /// Policies left out of `best-other`, by prefix (ablations).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The cell that picks `best-other` (default: `cell`).
    #[serde(default)]
    pub best_by: Option<String>,
    /// How a comparison shows: `ratio` (value / reference), `gain`
    /// (reference / value), `change` (value / reference − 1, in %, signed)
    /// or `difference` (value − reference, signed); `value` without
    /// `against`.
    #[serde(default)]
    pub show: Show,
}

/// A run's name or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One run.
    One(String),
    /// Several, one range over them.
    Many(Vec<String>),
}

impl OneOrMany {
    fn names(&self) -> &[String] {
        match self {
            OneOrMany::One(n) => std::slice::from_ref(n),
            OneOrMany::Many(v) => v,
        }
    }
}

/// How a figure is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Show {
    /// The cell's value as `orrery table` prints it.
    #[default]
    Value,
    /// Value over the reference, two decimals unless the cell says.
    Ratio,
    /// The reference over the value (a speed-up when lower is better), two
    /// decimals unless the cell says.
    Gain,
    /// (value / reference − 1) in percent, signed, no decimals unless the
    /// cell says.
    Change,
    /// Value minus the reference, signed, as the cell prints numbers.
    Difference,
}

/// What is wrong with a scoreboard or the runs it reads: the place
/// (`file:line` of the field, or the run's summary), and why.
#[derive(Debug, thiserror::Error)]
#[error("{place}: {message}")]
pub struct ScoreboardError {
    /// `file:line`, `file`, a summary's path, or `row[i].figures.NAME`.
    pub place: String,
    /// What is wrong, and what to do.
    pub message: String,
}

impl Scoreboard {
    /// Reads a scoreboard file's text (TOML). `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Scoreboard, ScoreboardError> {
        let board: Scoreboard = parse_config(file, text).map_err(|e| match e {
            LoadError::Syntax { file, line, column, message } => {
                ScoreboardError { place: format!("{file}:{line}:{column}"), message }
            }
            other => ScoreboardError { place: file.to_string(), message: other.to_string() },
        })?;
        let at = |path: &str| match line_of(text, path) {
            Some(line) => format!("{file}:{line}"),
            None => file.to_string(),
        };
        for (i, row) in board.rows.iter().enumerate() {
            for name in placeholders(&row.simulator) {
                if !row.figures.contains_key(name) {
                    return Err(ScoreboardError {
                        place: at(&format!("row[{i}].simulator")),
                        message: format!("row[{i}].simulator: `{{{name}}}` is not among the row's figures"),
                    });
                }
            }
            for (name, figure) in &row.figures {
                let here = at(&format!("row[{i}].figures.{name}"));
                let bad = |message: String| ScoreboardError { place: here.clone(), message };
                if !placeholders(&row.simulator).any(|p| p == name) {
                    return Err(bad(format!("row[{i}].figures.{name}: not used in row[{i}].simulator")));
                }
                for run in figure.run.names() {
                    if !board.runs.contains_key(run) {
                        let known: Vec<&str> = board.runs.keys().map(String::as_str).collect();
                        return Err(ScoreboardError {
                            place: at(&format!("row[{i}].figures.{name}.run")),
                            message: format!(
                                "row[{i}].figures.{name}.run: no [runs.{run}] (the file has: {})",
                                known.join(", ")
                            ),
                        });
                    }
                }
                for spec in std::iter::once(&figure.cell).chain(&figure.best_by) {
                    spec.parse::<Cell>().map_err(|e| bad(format!("row[{i}].figures.{name}: {e}")))?;
                }
                if (figure.show == Show::Value) != figure.against.is_none() {
                    return Err(bad(format!(
                        "row[{i}].figures.{name}: `against` goes with show = \"ratio\", \"gain\", \"change\" or \"difference\", and they with it"
                    )));
                }
            }
        }
        Ok(board)
    }

    /// The commands that make every run the scoreboard reads, one per line.
    pub fn commands(&self) -> String {
        self.runs.values().map(|r| format!("{}\n", r.command)).collect()
    }

    /// The scoreboard as a markdown table, its figures read from the runs'
    /// summaries under `root`. O(rows · figures · runs of a summary).
    pub fn render(&self, root: &Path) -> Result<String, ScoreboardError> {
        let mut summaries: BTreeMap<&str, Value> = BTreeMap::new();
        for (name, run) in &self.runs {
            if !self.rows.iter().any(|r| r.figures.values().any(|f| f.run.names().contains(name))) {
                continue;
            }
            let path = root.join(&run.summary);
            let missing = |why: String| ScoreboardError {
                place: path.display().to_string(),
                message: format!("{why}; `{}` writes it", run.command),
            };
            let text = std::fs::read_to_string(&path).map_err(|e| missing(e.to_string()))?;
            let summary = serde_json::from_str(&text).map_err(|e| missing(format!("not JSON ({e})")))?;
            summaries.insert(name, summary);
        }
        let mut out = String::from("| paper: headline | paper | simulator | testbed | real DDP | verdict |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for (i, row) in self.rows.iter().enumerate() {
            let mut simulator = row.simulator.clone();
            for (name, figure) in &row.figures {
                let value = figure_text(figure, &summaries)
                    .map_err(|e| ScoreboardError { place: format!("row[{i}].figures.{name}"), message: e })?;
                simulator = simulator.replace(&format!("{{{name}}}"), &value);
            }
            let _ = writeln!(
                out,
                "| {} | {} | {simulator} | {} | {} | {} |",
                row.headline_cell(),
                row.paper,
                Row::or_dash(&row.testbed),
                Row::or_dash(&row.ddp),
                row.verdict
            );
        }
        Ok(out)
    }
}

impl Row {
    /// The first cell: the headline and its links, `headline ([label](link), ...)`.
    pub fn headline_cell(&self) -> String {
        let links: Vec<String> = self.links.iter().map(|(label, to)| format!("[{label}]({to})")).collect();
        if links.is_empty() { self.headline.clone() } else { format!("{} ({})", self.headline, links.join(", ")) }
    }

    /// A testbed or DDP cell: its text, or "–" where it was not run.
    pub fn or_dash(cell: &Option<String>) -> String {
        cell.clone().unwrap_or_else(|| "–".into())
    }
}

/// The `{NAME}`s of a template.
fn placeholders(template: &str) -> impl Iterator<Item = &str> {
    template.split('{').skip(1).filter_map(|s| s.split_once('}').map(|(name, _)| name))
}

/// One figure's text: its value per (run, scenario), shown as asked, and a
/// range `lo–hi` when they differ (`lo to hi` for signed figures or a
/// negative `lo`).
fn figure_text(figure: &Figure, summaries: &BTreeMap<&str, Value>) -> Result<String, String> {
    let cell: Cell = figure.cell.parse().map_err(|e: TableError| e.to_string())?;
    let best_by: Cell =
        figure.best_by.as_deref().unwrap_or(&figure.cell).parse().map_err(|e: TableError| e.to_string())?;
    let mut values: Vec<f64> = Vec::new();
    for run in figure.run.names() {
        let summary = &summaries[run.as_str()];
        let in_run = |e: TableError| format!("run `{run}`: {e}");
        check_cells(summary, std::slice::from_ref(&cell)).map_err(in_run)?;
        let (scenarios, policies) = scenarios_and_policies(summary).map_err(in_run)?;
        let known = |p: &str| {
            if policies.iter().any(|q| q == p) {
                Ok(())
            } else {
                Err(in_run(TableError::NoSuchPolicy(p.to_string(), policies.join(", "))))
            }
        };
        let chosen: Vec<&String> = match &figure.scenario {
            Some(s) if scenarios.contains(s) => vec![s],
            Some(s) => return Err(format!("run `{run}`: no scenario `{s}` (it has: {})", scenarios.join(", "))),
            None => scenarios.iter().collect(),
        };
        for policy in figure.policy.names() {
            known(policy)?;
            let against = figure.against.as_ref().map(|a| a.replace("{policy}", policy));
            for sc in &chosen {
                let of = |p: &str, c: &Cell| {
                    number_over_seeds(summary, sc, p, c)
                        .ok_or_else(|| format!("run `{run}`, scenario `{sc}`: `{p}` has no `{}`", c.spec()))
                };
                let value = of(policy, &cell)?;
                let reference = match against.as_deref() {
                    None => None,
                    Some("best-other") => {
                        let others = policies
                            .iter()
                            .filter(|p| *p != policy && !figure.exclude.iter().any(|x| p.starts_with(x.as_str())));
                        let best = others
                            .filter_map(|p| Some((of(p, &best_by).ok()?, p)))
                            .min_by(|a, b| a.0.total_cmp(&b.0))
                            .ok_or_else(|| format!("run `{run}`, scenario `{sc}`: no other policy to compare with"))?;
                        Some(of(best.1, &cell)?)
                    }
                    Some(p) => {
                        known(p)?;
                        Some(of(p, &cell)?)
                    }
                };
                values.push(match (figure.show, reference) {
                    (Show::Ratio, Some(r)) => value / r,
                    (Show::Gain, Some(r)) => r / value,
                    (Show::Change, Some(r)) => (value / r - 1.0) * 100.0,
                    (Show::Difference, Some(r)) => value - r,
                    _ => value,
                });
            }
        }
    }
    let signed = |t: String| if t.starts_with('-') { t.replacen('-', "−", 1) } else { format!("+{t}") };
    let text = |v: f64| match figure.show {
        Show::Value => cell.format(v),
        Show::Ratio | Show::Gain => format!("{v:.*}", cell.decimals().unwrap_or(2)),
        Show::Change => signed(format!("{v:.*}%", cell.decimals().unwrap_or(0))),
        Show::Difference => signed(cell.format(v)),
    };
    values.sort_by(f64::total_cmp);
    let (lo, hi) = (text(values[0]), text(values[values.len() - 1]));
    let signed = matches!(figure.show, Show::Change | Show::Difference);
    Ok(match (lo == hi, signed || values[0] < 0.0) {
        (true, _) => lo,
        (false, false) => format!("{lo}–{hi}"),
        (false, true) => format!("{lo} to {hi}"),
    })
}

/// The anchor a markdown renderer (GitHub's) gives a heading: lower case,
/// letters, digits, `-` and `_` kept, spaces as `-`, the rest dropped.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Value {
        let run = |sc: &str, policy: &str, seed: u64, jct: f64, p99: f64| {
            serde_json::json!({"scenario": sc, "policy": policy, "seed": seed,
                "metrics": {"avg_jct_s": jct, "p99_jct_s": p99}})
        };
        serde_json::json!({"baseline": "fifo", "runs": [
            run("load=1", "fifo", 1, 400.0, 2000.0), run("load=1", "fifo", 2, 420.0, 2100.0),
            run("load=1", "srtf", 1, 300.0, 2500.0), run("load=1", "srtf", 2, 320.0, 2600.0),
            run("load=1", "orrery", 1, 240.0, 2000.0), run("load=1", "orrery", 2, 260.0, 2300.0),
            run("load=1", "orrery-no-size", 1, 100.0, 100.0), run("load=1", "orrery-no-size", 2, 100.0, 100.0),
            run("load=2", "fifo", 1, 800.0, 4000.0), run("load=2", "srtf", 1, 900.0, 5000.0),
            run("load=2", "orrery", 1, 720.0, 4400.0), run("load=2", "orrery-no-size", 1, 1.0, 1.0),
        ]})
    }

    const BOARD: &str = r##"
[runs.bench]
command = "orrery run experiments/bench.toml --out out/bench"
summary = "bench/summary.json"

[[row]]
headline = "orrery: mean JCT"
links = [["sim", "#the-benchmark"]]
paper = "–"
simulator = "{mean}; p99 {p99}; {ratio}× FIFO at load 2; {jct} s; {gain}×; {later} s"
verdict = "met"
[row.figures.mean]
run = "bench"
policy = "orrery"
cell = "metrics.avg_jct_s"
against = "best-other"
exclude = ["orrery-"]
show = "change"
[row.figures.p99]
run = "bench"
policy = "orrery"
cell = "metrics.p99_jct_s:1"
against = "best-other"
best_by = "metrics.avg_jct_s"
exclude = ["orrery-"]
show = "change"
[row.figures.ratio]
run = "bench"
policy = "fifo"
cell = "metrics.avg_jct_s"
scenario = "load=2"
against = "orrery"
show = "ratio"
[row.figures.gain]
run = "bench"
policy = ["orrery", "srtf"]
cell = "metrics.avg_jct_s"
against = "fifo"
show = "gain"
[row.figures.later]
run = "bench"
policy = "orrery"
cell = "metrics.p99_jct_s"
scenario = "load=2"
against = "{policy}-no-size"
show = "difference"
[row.figures.jct]
run = "bench"
policy = "orrery"
scenario = "load=1"
cell = "metrics.avg_jct_s"
"##;

    fn rendered(board: &str) -> Result<String, ScoreboardError> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bench")).expect("mkdir");
        std::fs::write(dir.path().join("bench/summary.json"), summary().to_string()).expect("write");
        Scoreboard::parse("board.toml", board)?.render(dir.path())
    }

    #[test]
    fn figures_are_read_compared_with_the_best_other_policy_and_ranged_over_scenarios() {
        let table = rendered(BOARD).expect("renders");
        let row = table.lines().nth(2).expect("a row");
        // Mean JCT: load 1, orrery 250 against srtf's 310 (the ablation's
        // 100 is excluded): −19.4%; load 2, 720 against fifo's 800: −10%.
        // p99: load 1 against srtf's (best by mean) 2,550: 2,150 → −15.7%;
        // load 2, 4,400 against fifo's 4,000: +10.0%. FIFO over orrery at
        // load 2: 800 / 720 = 1.11. orrery's mean at load 1: 250. FIFO's
        // mean over orrery's and srtf's, in both loads: 410 / 250 = 1.64,
        // 800 / 720 = 1.11, 410 / 310 = 1.32, 800 / 900 = 0.89. orrery's p99
        // at load 2 less its ablation's: 4,400 − 1 s.
        assert_eq!(
            row,
            "| orrery: mean JCT ([sim](#the-benchmark)) | – | −19% to −10%; p99 −15.7% to +10.0%; 1.11× FIFO at \
             load 2; 250 s; 0.89–1.64×; +4,399 s | – | – | met |"
        );
    }

    #[test]
    fn a_missing_run_names_the_command_that_makes_it() {
        let board = Scoreboard::parse("board.toml", BOARD).expect("parses");
        let dir = tempfile::tempdir().expect("tempdir");
        let e = board.render(dir.path()).expect_err("no summary");
        assert!(e.place.ends_with("bench/summary.json"), "{e}");
        assert!(e.message.contains("`orrery run experiments/bench.toml --out out/bench` writes it"), "{e}");
        assert_eq!(board.commands(), "orrery run experiments/bench.toml --out out/bench\n");
    }

    #[test]
    fn bad_boards_say_which_row_field_and_line() {
        let e = Scoreboard::parse("b.toml", &BOARD.replace("{ratio}×", "{ratios}×")).expect_err("unknown name");
        assert_eq!(e.place, "b.toml:10");
        assert!(e.message.contains("`{ratios}` is not among the row's figures"), "{e}");
        let e = Scoreboard::parse(
            "b.toml",
            &BOARD.replace("run = \"bench\"\npolicy = \"fifo\"", "run = \"bnch\"\npolicy = \"fifo\""),
        )
        .expect_err("unknown run");
        assert!(e.message.contains("row[0].figures.ratio.run: no [runs.bnch] (the file has: bench)"), "{e}");
        assert_eq!(e.place, "b.toml:28");
        let e = Scoreboard::parse("b.toml", &BOARD.replace("metrics.p99_jct_s:1", "metrics.p99_jct_s:x"))
            .expect_err("cell");
        assert!(e.message.contains("decimals must be 0-9"), "{e}");
        let e = Scoreboard::parse("b.toml", &BOARD.replace("show = \"ratio\"", "")).expect_err("against without show");
        assert!(e.message.contains("`against` goes with show"), "{e}");
        let e = Scoreboard::parse("b.toml", "[runs.a]\ncommand = 1\n").expect_err("syntax");
        assert!(e.to_string().starts_with("b.toml:2:"), "{e}");
        let e = rendered(&BOARD.replacen("scenario = \"load=2\"", "scenario = \"load=3\"", 1)).expect_err("scenario");
        assert!(e.message.contains("no scenario `load=3` (it has: load=1, load=2)"), "{e}");
        assert_eq!(e.place, "row[0].figures.ratio");
    }

    #[test]
    fn anchors_are_githubs() {
        assert_eq!(
            anchor("§2.2: two VGG19 jobs on one 50 Gbps link (`experiments/cassini-pair.toml`)"),
            "22-two-vgg19-jobs-on-one-50-gbps-link-experimentscassini-pairtoml"
        );
        assert_eq!(
            anchor("Fig. 7: fragmentation × communication, job size × rack size"),
            "fig-7-fragmentation--communication-job-size--rack-size"
        );
    }
}
