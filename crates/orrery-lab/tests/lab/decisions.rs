//! Every decision CASSINI and Metronome take on fixed scenarios, pinned
//! (issue 23: speed-ups must not change what the policies decide). A change
//! here is a change of behaviour: review the diff of the snapshot
//! (`cargo insta review`, or `INSTA_UPDATE=always cargo test`) and say why
//! in the commit.
//!
//! Times are rounded to the microsecond, so a rounding difference in the last
//! bits of a float does not count as a new decision.

use orrery_lab::experiment::parse;
use orrery_model::{JobSpec, Topology};
use orrery_policy::{ClusterView, Decision, JobId, Policy};
use orrery_sim::{SimConfig, Simulation};
use std::fmt::Write;
use std::path::Path;

/// Wraps a policy and writes down every decision it returns, with the time.
struct Recorder {
    inner: Box<dyn Policy>,
    ids: Vec<String>,
    log: String,
    /// Every decision with its time, s.
    taken: Vec<(f64, Decision)>,
}

impl Recorder {
    fn note(&mut self, now_s: f64, out: &[Decision]) {
        self.taken.extend(out.iter().map(|d| (now_s, d.clone())));
        for d in out {
            let id = |j: &JobId| self.ids.get(*j).map_or("?", String::as_str);
            let line = match d {
                Decision::Place { job, hosts } => format!("place {} on {hosts:?}", id(job)),
                Decision::Reject { job, reason } => format!("reject {}: {reason}", id(job)),
                Decision::Preempt { job } => format!("preempt {}", id(job)),
                Decision::Shift { job, ms } => format!("shift {} by {ms:.3} ms", id(job)),
                Decision::Align { job, period_ms, offset_s } => {
                    format!("align {} to {offset_s:.6} s mod {period_ms:.3} ms", id(job))
                }
                Decision::Pace { job, period_ms, offset_s } => {
                    format!("pace {} at {offset_s:.6} s every {period_ms:.3} ms", id(job))
                }
                Decision::Timetable { job, from_iteration, starts_s } => {
                    let starts: Vec<String> = starts_s.iter().map(|t| format!("{t:.6}")).collect();
                    format!("timetable {} from iteration {from_iteration}: {}", id(job), starts.join(" "))
                }
                Decision::Pause { job } => format!("pause {}", id(job)),
                Decision::Resume { job } => format!("resume {}", id(job)),
                Decision::Throttle { job, gbps } => format!("throttle {} to {gbps:?}", id(job)),
                Decision::Route { job, flow, paths } => format!("route {} flow {flow} over {paths:?}", id(job)),
                Decision::TrafficClass { job, class } => format!("traffic class {} = {class}", id(job)),
                Decision::Share { job, free, shared, sub_batch } => {
                    format!("share {} free {free:?} with {shared:?} at sub-batch {sub_batch}", id(job))
                }
                Decision::Note { job, text } => format!("note {}: {text}", id(job)),
            };
            let _ = writeln!(self.log, "{now_s:>12.6}  {line}");
        }
    }
}

impl Policy for Recorder {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let out = self.inner.schedule(view);
        self.note(view.now_s, &out);
        out
    }
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: orrery_policy::Iteration) -> Vec<Decision> {
        let out = self.inner.on_iteration(view, job, it);
        self.note(view.now_s, &out);
        out
    }
    fn observes_iterations(&self) -> bool {
        self.inner.observes_iterations()
    }
    fn watches(&self, job: JobId) -> bool {
        self.inner.watches(job)
    }
    fn tick_s(&self) -> Option<f64> {
        self.inner.tick_s()
    }
    fn isolated_network(&self) -> bool {
        self.inner.isolated_network()
    }
}

/// Runs `policy` on `jobs` and returns its decisions, one per line.
fn decisions(topo: &Topology, jobs: &[JobSpec], policy: &str, cfg: SimConfig) -> String {
    let inner = orrery_policy::by_name(policy, cfg.seed).expect("a known policy");
    let mut recorder =
        Recorder { inner, ids: jobs.iter().map(|j| j.id.clone()).collect(), log: String::new(), taken: Vec::new() };
    let mut sim = Simulation::new(topo, jobs, cfg, recorder.isolated_network());
    sim.run(&mut recorder, &mut |_, _| {});
    recorder.log
}

#[test]
fn cassini_on_its_testbed_under_poisson_arrivals() {
    // CASSINI §5.2's set-up, shortened: 24 servers of one A100 at 50 Gbit/s
    // (2:1), 20 Poisson jobs of the 13 models at load 0.9, 1-12 GPUs.
    let toml = r#"
name = "pinned-cassini"
policies = ["themis+cassini"]
[topology]
builtin = "cassini"
[workload]
generator = "poisson"
jobs = 20
load = 0.9
[workload.mix]
models = ["vgg11", "vgg16", "vgg19", "resnet50", "wideresnet101", "bert", "roberta", "xlm", "camembert", "gpt1", "gpt2", "gpt3", "dlrm"]
workers = [[1, 1.0], [2, 1.0], [3, 1.0], [4, 1.0], [5, 1.0], [6, 1.0], [7, 1.0], [8, 1.0], [9, 1.0], [10, 1.0], [11, 1.0], [12, 1.0]]
iterations = [200, 600]
"#;
    let e = parse("pinned-cassini", toml).expect("valid");
    let (topo, jobs, _) = e.scenario(None, Path::new("."), 1).expect("scenario");
    let cfg = SimConfig { seed: 1, jitter: 0.01, ..Default::default() };
    let log = decisions(&topo, &jobs, "themis+cassini", cfg);
    assert!(log.contains("align"), "the scenario must align jobs:\n{log}");
    insta::assert_snapshot!(log);
}

#[test]
fn metronome_on_its_snapshots() {
    // Metronome Table IV's snapshots S1-S3 (S4 and S5 add background traffic).
    let e =
        parse("metronome-snapshots", include_str!("../../../../experiments/metronome-snapshots.toml")).expect("valid");
    let mut log = String::new();
    for scenario in ["S1", "S2", "S3"] {
        let (topo, jobs, _) = e.scenario(Some(scenario), Path::new("."), 1).expect("scenario");
        let cfg = SimConfig { seed: 1, jitter: 0.01, ..Default::default() };
        let _ = writeln!(log, "{scenario}:\n{}", decisions(&topo, &jobs, "metronome", cfg));
    }
    assert!(log.contains("pace"), "the snapshots must pace jobs:\n{log}");
    insta::assert_snapshot!(log);
}

#[test]
fn a_schedule_made_elsewhere_replays_as_a_script() {
    // CASSINI on its §2.2 pair decides once: align the second VGG19 to the
    // first. Written as `[[workload.decision]]` entries (job by id, time,
    // the decision's fields) and replayed under `pinned`, which decides
    // nothing itself, it gives the same iterations: 351 ms, not 433 ms.
    let text = include_str!("../../../../experiments/cassini-pair.toml");
    let e = parse("cassini-pair", text).expect("valid");
    let (topo, jobs, pins) = e.scenario(None, Path::new("."), 1).expect("scenario");
    let inner = orrery_policy::with_pins("pinned+cassini", 1, &pins).expect("policy");
    let mut recorder =
        Recorder { inner, ids: jobs.iter().map(|j| j.id.clone()).collect(), log: String::new(), taken: Vec::new() };
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    sim.run(&mut recorder, &mut |_, _| {});
    let mut script = String::new();
    for (at_s, d) in recorder.taken.iter().filter(|(_, d)| !matches!(d, Decision::Place { .. })) {
        let serde_json::Value::Object(fields) = serde_json::to_value(d).expect("json") else { panic!("{d:?}") };
        let _ = writeln!(script, "[[workload.decision]]\nat_s = {at_s:?}");
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("job", v) => {
                    let job = jobs[v.as_u64().expect("index") as usize].id.clone();
                    let _ = writeln!(script, "job = {job:?}");
                }
                (k, serde_json::Value::String(s)) => {
                    let _ = writeln!(script, "{k} = {s:?}");
                }
                (k, v) => {
                    let _ = writeln!(script, "{k} = {v}");
                }
            }
        }
    }
    assert!(script.contains("kind = \"align\""), "CASSINI aligns the pair:\n{script}");
    let original = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
    let iter_ms = |s: &orrery_lab::experiment::Summary, p: &str| {
        s.runs.iter().find(|r| r.policy == p).expect("run").metrics.avg_iter_s * 1e3
    };
    let replay = text
        .replace("policies = [\"pinned\", \"pinned+cassini\"]", "policies = [\"pinned\"]")
        .replace("headline = \"pinned+cassini\"\n", "")
        + "\n"
        + &script;
    let replayed = parse("replay", &replay).expect("valid with a script").run(Path::new("."), |_, _, _, _, _| {});
    let replayed = replayed.expect("runs");
    assert_eq!(replayed.runs[0].invalid_decisions, 0);
    let (collided, cassini, scripted) =
        (iter_ms(&original, "pinned"), iter_ms(&original, "pinned+cassini"), iter_ms(&replayed, "pinned"));
    assert!(collided > 430.0 && cassini < 360.0, "{collided} / {cassini} ms");
    assert!((scripted - cassini).abs() < 1.0, "replayed {scripted} ms, CASSINI {cassini} ms");
    // A script naming a job the workload lacks is refused, naming the entry.
    let bad = parse("bad", &(replay.clone() + "[[workload.decision]]\nat_s = 1.0\njob = \"zz\"\nkind = \"pause\"\n"));
    let err = bad.expect("parses").run(Path::new("."), |_, _, _, _, _| {}).expect_err("unknown job");
    assert!(matches!(err, orrery_lab::experiment::ExperimentError::Invalid(_)), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("workload.decision[1]: job: expected the id of a job of the workload, found \"zz\""), "{err}");
}
