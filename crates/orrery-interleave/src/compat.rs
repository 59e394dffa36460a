//! The `orrery compat` request: jobs on one link, in JSON or TOML, checked
//! field by field, solved, and reported.
//!
//! ```json
//! {"link_gbps": 50, "precision": 72, "jobs": [
//!   {"name": "a", "priority": "high", "period_ms": 255, "phases": [{"start_ms": 141, "duration_ms": 114, "gbps": 50}]},
//!   {"name": "b", "model": "vgg19", "batch": 64, "workers": 4}]}
//! ```

use crate::search::{Search, Solution, range, solve};
use crate::unified::{Approximation, CircleJob, Params, UnifiedCircle, unify};
use orrery_model::topology::{MAX_LINK_GBPS, MIN_LINK_GBPS};
use orrery_model::zoo::{Placement, model};
use orrery_model::{Arc, Circle, Priority};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Link capacity, Gbit/s.
    #[schemars(range(min = MIN_LINK_GBPS, max = MAX_LINK_GBPS))]
    pub link_gbps: f64,
    /// Angular steps (default 72 = 5°).
    #[serde(default)]
    #[schemars(range(min = crate::unified::MIN_PRECISION, max = crate::unified::MAX_PRECISION))]
    pub precision: Option<usize>,
    /// Metronome's idle injection (E_T = 10%) may line periods up (default
    /// true); false scores the circles CASSINI enforces ([`Params::cassini`]).
    #[serde(default)]
    pub idle_injection: Option<bool>,
    /// Jobs on the link.
    pub jobs: Vec<JobInput>,
}

/// A job: explicit phases or a zoo model.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInput {
    /// Name.
    pub name: String,
    /// Priority (default low).
    #[serde(default)]
    pub priority: Priority,
    /// Iteration time, ms (with `phases`).
    #[schemars(range(min = MIN_PERIOD_MS, max = MAX_PERIOD_MS))]
    pub period_ms: Option<f64>,
    /// Communication phases within the iteration.
    pub phases: Option<Vec<Phase>>,
    /// Zoo model (instead of `period_ms`/`phases`).
    pub model: Option<String>,
    /// Per-worker batch (with `model`; default: the model's).
    #[schemars(range(min = 1, max = orrery_model::job::MAX_BATCH))]
    pub batch: Option<u32>,
    /// Workers, one per host (with `model`; default 2).
    #[schemars(range(min = 1, max = orrery_model::job::MAX_WORKERS))]
    pub workers: Option<u32>,
    /// GPU type (with `model`; default a100, CASSINI's testbed).
    pub gpu: Option<String>,
}

/// One communication phase.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Start within the iteration, ms.
    #[schemars(range(min = 0, max = MAX_PERIOD_MS))]
    pub start_ms: f64,
    /// Length, ms.
    #[schemars(range(min = 0, max = MAX_PERIOD_MS))]
    pub duration_ms: f64,
    /// Bandwidth, Gbit/s.
    #[schemars(range(min = 0, max = MAX_LINK_GBPS))]
    pub gbps: f64,
}

/// The shortest iteration a request may give, ms: a microsecond.
pub const MIN_PERIOD_MS: f64 = 1e-3;
/// The longest, ms: a day (CASSINI's and Metronome's circles are of
/// iterations of milliseconds to seconds).
pub const MAX_PERIOD_MS: f64 = 86_400_000.0;

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// CASSINI compatibility score after rotation.
    pub score: f64,
    /// Score with no rotation.
    pub score_unrotated: f64,
    /// Unified perimeter, ms.
    pub perimeter_ms: f64,
    /// Cushion Ψ after rotation, degrees (0 when no two jobs contend).
    pub cushion_deg: f64,
    /// How the perimeter was obtained.
    pub approximation: Approximation,
    /// Which search ran.
    pub search: Search,
    /// Per job.
    pub jobs: Vec<JobReport>,
}

/// One job of the answer.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// Name.
    pub name: String,
    /// Rotation, degrees of the unified circle.
    pub rotation_deg: f64,
    /// Time-shift (CASSINI Eq. 5), ms.
    pub shift_ms: f64,
    /// Idle time injected per iteration (Metronome E_T), ms.
    pub idle_injected_ms: f64,
    /// Iteration time used, ms.
    pub period_ms: f64,
}

/// What is wrong with a compatibility request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompatError {
    /// The text is not a request (syntax, types, unknown keys); the message
    /// gives the file, line and column.
    #[error("{0}")]
    Parse(String),
    /// A field out of range or inconsistent, named by its path
    /// (`jobs[1] (b).phases[0].start_ms`).
    #[error("{field}: {problem}")]
    Field {
        /// The field's path.
        field: String,
        /// What was expected and found.
        problem: String,
    },
    /// The jobs' circles cannot be unified within the limits (precision,
    /// iterations on the circle).
    #[error(transparent)]
    Unify(#[from] crate::unified::UnifyError),
    /// An exact search over more rotations than it may try.
    #[error(
        "search: {combinations:.1e} combinations of rotations is too many for an exact search \
         (at most {MAX_EXACT_COMBINATIONS:.0e}); use the heuristic (--search heuristic)"
    )]
    TooManyRotations {
        /// Π_j K_j for the request.
        combinations: f64,
    },
}

fn field(field: String, problem: String) -> CompatError {
    CompatError::Field { field, problem }
}

/// Parses a request from JSON (text starting with `{`) or TOML. `file` names
/// the input in messages, which give line and column.
pub fn parse(file: &str, text: &str) -> Result<Request, CompatError> {
    orrery_model::setups::parse_checked(file, text).map_err(|e| CompatError::Parse(e.to_string()))
}

impl Request {
    /// Checks every field and builds the circles; the error names the field.
    pub fn circles(&self) -> Result<Vec<CircleJob>, CompatError> {
        // Each number was checked against its declared range by `parse`;
        // a request built in code is checked here.
        orrery_model::ranges::check(self)
            .map_err(|e| field(e.path, format!("expected {}, found {}", e.expected, e.found)))?;
        if self.jobs.is_empty() || self.jobs.len() > MAX_JOBS {
            let found = self.jobs.len();
            return Err(field("jobs".into(), format!("expected 1 to {MAX_JOBS} jobs on the link, found {found}")));
        }
        self.jobs.iter().enumerate().map(|(i, j)| j.circle(i, self.link_gbps)).collect()
    }

    /// Solves the request.
    pub fn solve(&self, search: Option<Search>) -> Result<(UnifiedCircle, Solution, Report), CompatError> {
        let jobs = self.circles()?;
        let base = if self.idle_injection.unwrap_or(true) { Params::default() } else { Params::cassini() };
        let params = Params { precision: self.precision.unwrap_or(72), ..base };
        let u = unify(&jobs, &params)?;
        let search = search.unwrap_or_else(|| default_search(&u));
        let combos = combinations(&u);
        if combos > MAX_EXACT_COMBINATIONS && !matches!(search, Search::Heuristic { .. }) {
            return Err(CompatError::TooManyRotations { combinations: combos });
        }
        let sol = solve(&u, self.link_gbps, search);
        let unrotated = crate::score::compatibility(&crate::score::demand(&u, &vec![0; u.jobs.len()]), self.link_gbps);
        let shifts = sol.shifts_ms(&u);
        let report = Report {
            score: sol.score,
            score_unrotated: unrotated,
            perimeter_ms: u.perimeter_ms,
            cushion_deg: sol.cushion_deg(&u).unwrap_or(0.0),
            approximation: u.approximation,
            search,
            jobs: jobs
                .iter()
                .zip(&u.jobs)
                .zip(sol.rotations_deg(&u).iter().zip(&shifts))
                .map(|((j, uj), (&rot, &shift))| JobReport {
                    name: j.name.clone(),
                    rotation_deg: rot,
                    shift_ms: shift,
                    idle_injected_ms: uj.idle_injected_ms,
                    period_ms: uj.period_ms,
                })
                .collect(),
        };
        Ok((u, sol, report))
    }
}

/// Optimal with cushion when the combinations are few enough (≤ 2·10⁷),
/// else the heuristic.
pub fn default_search(u: &UnifiedCircle) -> Search {
    if combinations(u) <= MAX_EXACT_COMBINATIONS {
        Search::OptimalCushion
    } else {
        Search::Heuristic { restarts: 16, seed: 0 }
    }
}

/// Most jobs in one request.
pub const MAX_JOBS: usize = 64;
/// Most combinations of rotations an exact search is asked to cover.
pub const MAX_EXACT_COMBINATIONS: f64 = 2e7;

/// Combinations of rotations of the jobs of `u`: Π_j K_j.
fn combinations(u: &UnifiedCircle) -> f64 {
    (0..u.jobs.len()).fold(1f64, |acc, j| acc * range(u, j) as f64)
}

impl JobInput {
    fn circle(&self, i: usize, link_gbps: f64) -> Result<CircleJob, CompatError> {
        let at = |field: &str| format!("jobs[{i}] ({}).{field}", self.name);
        let circle = match (&self.model, self.period_ms, &self.phases) {
            (Some(name), None, None) => {
                let m = model(name).ok_or_else(|| {
                    field(at("model"), format!("expected a model of the zoo (see `orrery zoo`), found {name:?}"))
                })?;
                use orrery_model::job::{MAX_ALL_TO_ALL_WORKERS, MAX_BATCH, MAX_WORKERS};
                let workers = self.workers.unwrap_or(2);
                let most = match m.parallelism {
                    orrery_model::zoo::Parallelism::EmbeddingAllToAll { .. } => MAX_ALL_TO_ALL_WORKERS,
                    _ => MAX_WORKERS,
                };
                if !(1..=most).contains(&workers) {
                    return Err(field(at("workers"), format!("expected 1 to {most} for {name}, found {workers}")));
                }
                let batch = self.batch.unwrap_or(m.default_batch);
                if !(1..=MAX_BATCH).contains(&batch) {
                    return Err(field(at("batch"), format!("expected 1 to {MAX_BATCH} samples, found {batch}")));
                }
                let gpu = self.gpu.as_deref().unwrap_or("a100");
                m.shape_on(gpu, batch, &Placement::spread(workers), link_gbps)
                    .ok_or_else(|| field(at("gpu"), format!("unknown GPU type {gpu:?}")))?
                    .circle()
            }
            (None, Some(period), Some(phases)) => {
                let mut arcs: Vec<Arc> = Vec::with_capacity(phases.len());
                for (k, p) in phases.iter().enumerate() {
                    let f = |n: &str| at(&format!("phases[{k}].{n}"));
                    if !(p.start_ms >= 0.0 && p.start_ms < period) {
                        let found = p.start_ms;
                        return Err(field(
                            f("start_ms"),
                            format!("expected a time in [0, {period}) ms, found {found}"),
                        ));
                    }
                    if !(p.duration_ms > 0.0 && p.start_ms + p.duration_ms <= period + 1e-9) {
                        return Err(field(
                            f("duration_ms"),
                            format!(
                                "expected a positive length ending within the period ({period} ms), found {} (ends at {})",
                                p.duration_ms,
                                p.start_ms + p.duration_ms
                            ),
                        ));
                    }
                    arcs.push(Arc { start_ms: p.start_ms, duration_ms: p.duration_ms, gbps: p.gbps });
                }
                arcs.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
                let duty: f64 = arcs.iter().map(|a| a.duration_ms).sum::<f64>() / period;
                if duty > 1.0 + 1e-9 {
                    return Err(field(
                        at("phases"),
                        format!(
                            "phases cover {:.0}% of the period; expected a duty cycle of at most 100%",
                            duty * 100.0
                        ),
                    ));
                }
                if let Some(w) = arcs.windows(2).find(|w| w[0].start_ms + w[0].duration_ms > w[1].start_ms + 1e-9) {
                    let problem = format!("phases starting at {} and {} ms overlap", w[0].start_ms, w[1].start_ms);
                    return Err(field(at("phases"), problem));
                }
                Circle { period_ms: period, arcs }
            }
            _ => {
                return Err(field(
                    format!("jobs[{i}] ({})", self.name),
                    "expected either period_ms and phases, or model (with optional batch, workers, gpu)".into(),
                ));
            }
        };
        Ok(CircleJob { name: self.name.clone(), priority: self.priority, circle })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("req.json", text).and_then(|r| r.circles().map(|_| ())).expect_err("should fail").to_string()
    }

    fn request(precision: usize, periods: &[f64]) -> String {
        let jobs: Vec<String> = periods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(r#"{{"name": "j{i}", "period_ms": {p:?}, "phases": [{{"start_ms": 0, "duration_ms": 10, "gbps": 30}}]}}"#)
            })
            .collect();
        format!(r#"{{"link_gbps": 50, "precision": {precision}, "jobs": [{}]}}"#, jobs.join(","))
    }

    fn solve_err(text: &str, search: Option<Search>) -> String {
        parse("req.json", text).and_then(|r| r.solve(search).map(|_| ())).expect_err("should fail").to_string()
    }

    #[test]
    fn inputs_that_would_hang_or_exhaust_memory_are_refused() {
        // A 1e300 ms reference is out of range; a day's puts 1.44 million
        // iterations of a 60 ms job on the circle.
        let e = solve_err(&request(72, &[1e300, 60.0]), None);
        assert_eq!(e, "req.json: jobs[0].period_ms: expected a number from 0.001 to 8.64e7, found 1e300");
        let e = solve_err(&request(72, &[86_400_000.0, 60.0]), None);
        assert!(e.starts_with("job j1: 1.44e6 iterations of 60.0 ms"), "{e}");
        // Issue 71: a period of 1e-300 ms was accepted and printed.
        let e = solve_err(&request(72, &[1e-300, 60.0]), None);
        assert_eq!(e, "req.json: jobs[0].period_ms: expected a number from 0.001 to 8.64e7, found 1e-300");
        assert_eq!(
            solve_err(&request(100_000_000, &[40.0, 60.0]), None),
            "req.json: precision: expected an integer from 4 to 36000, found 100000000"
        );
        assert_eq!(err(&request(72, &[100.0; 65])), "jobs: expected 1 to 64 jobs on the link, found 65");
        // Ten jobs of mixed periods: 1.3e8 combinations, too many for an exact search...
        let ten = request(72, &[40.0, 60.0, 80.0, 100.0, 120.0, 40.0, 60.0, 80.0, 100.0, 120.0]);
        let e = solve_err(&ten, Some(Search::FastFeasible));
        assert!(e.contains("too many for an exact search") && e.contains("--search heuristic"), "{e}");
        // ...and the heuristic answers within its budget.
        let r = parse("req.json", &ten).expect("parses");
        let (_, sol, _) = r.solve(Some(Search::Heuristic { restarts: 100, seed: 1 })).expect("solves");
        assert!(sol.score > 0.0 && sol.evaluated <= crate::search::HEURISTIC_BUDGET, "{sol:?}");
    }

    #[test]
    fn explicit_and_model_jobs() {
        let r = parse(
            "r.json",
            r#"{"link_gbps": 50, "jobs": [
                {"name": "a", "priority": "high", "period_ms": 100, "phases": [{"start_ms": 0, "duration_ms": 50, "gbps": 50}]},
                {"name": "b", "period_ms": 100, "phases": [{"start_ms": 0, "duration_ms": 50, "gbps": 50}]}]}"#,
        )
        .expect("valid");
        let (_, _, rep) = r.solve(None).expect("solves");
        assert!((rep.score - 1.0).abs() < 1e-12);
        assert!((rep.score_unrotated - 0.5).abs() < 1e-12);
        assert_eq!(rep.jobs[1].shift_ms, 50.0);
        let r = parse("r.toml", "link_gbps = 50\n[[jobs]]\nname = \"v\"\nmodel = \"vgg16\"\nworkers = 4\n")
            .expect("valid toml");
        assert_eq!(r.circles().expect("ok")[0].circle.arcs.len(), 1);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let base = |job: &str| format!(r#"{{"link_gbps": 50, "jobs": [{job}]}}"#);
        assert!(
            err(&base(r#"{"name": "x", "period_ms": 0, "phases": []}"#))
                .starts_with("req.json: jobs[0].period_ms: expected a number from 0.001")
        );
        assert!(
            err(&base(r#"{"name": "x", "period_ms": 10, "phases": [{"start_ms": 12, "duration_ms": 1, "gbps": 1}]}"#))
                .starts_with("jobs[0] (x).phases[0].start_ms: expected a time in [0, 10) ms, found 12")
        );
        assert!(
            err(&base(r#"{"name": "x", "period_ms": 10, "phases": [{"start_ms": 1, "duration_ms": 1, "gbps": -3}]}"#))
                .contains("jobs[0].phases[0].gbps: expected a number from 0 to 1000000, found -3.0")
        );
        assert!(
            err(&base(r#"{"name": "x", "period_ms": 10, "phases": [{"start_ms": 5, "duration_ms": 8, "gbps": 1}]}"#))
                .contains("phases[0].duration_ms: expected a positive length ending within the period")
        );
        assert!(
            err(&base(
                r#"{"name": "x", "period_ms": 10, "phases": [{"start_ms": 0, "duration_ms": 6, "gbps": 1}, {"start_ms": 4, "duration_ms": 6, "gbps": 1}]}"#
            ))
            .contains("duty cycle of at most 100%")
        );
        assert!(err(&base(r#"{"name": "x", "model": "vgg99"}"#)).contains("(x).model: expected a model of the zoo"));
        assert!(err(&base(r#"{"name": "x"}"#)).contains("expected either period_ms and phases, or model"));
        assert!(
            err(r#"{"link_gbps": -1, "jobs": []}"#).starts_with("req.json: link_gbps: expected a number from 0.001 to")
        );
        let e = parse("q.json", "{\"link_gbps\": 50,\n \"jobz\": []}").expect_err("unknown field");
        assert!(matches!(&e, CompatError::Parse(m) if m.starts_with("q.json:2:")), "{e}");
    }
}
