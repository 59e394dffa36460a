//! Experiments as files: a topology, a workload, policies, seeds and limits;
//! running them and writing `summary.json`, `jobs.csv` and `links.csv`.
//!
//! ```toml
//! name = "default"
//! seeds = [1]
//! policies = ["fifo", "random", "ideal"]
//! [topology]
//! builtin = "leaf-spine"          # or file = "cluster.toml", or [topology.leaf_spine]
//! [workload]
//! generator = "poisson"            # or "snapshot"; or trace = "data/philly/muri_trace1.csv"
//! jobs = 60
//! load = 0.8
//! [sim]
//! jitter = 0.02
//! ```

//!
//! The parts: [`crate::spec`] (the file), [`crate::workload`] (its jobs),
//! [`crate::script`] (scripted decisions), [`crate::summary`] (what runs
//! measured) and [`crate::report`]; this module runs an experiment and
//! writes its outputs, and re-exports the names callers use.

pub use crate::script::Script;
use crate::script::scripted;
pub use crate::shard::Shard;
pub use crate::spec::*;
use crate::spec::{check, policy};
pub use crate::summary::*;
pub use crate::workload::Pins;
use crate::workload::{workload_jobs, workload_label, workload_source};
use orrery_model::setups::{by_name, parse_topology};
use orrery_model::{JobSpec, Priority, Topology};
use orrery_sim::engine::{SimConfig, Simulation};
use orrery_sim::metrics::{job_rows, link_rows, metrics_of};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Windows of the tenants' share over time in summary.json and the report, s.
pub const TENANT_WINDOW_S: f64 = 600.0;

impl Experiment {
    /// Builds the topology; `base` resolves relative paths.
    pub fn topology(&self, base: &Path) -> Result<Topology, ExperimentError> {
        self.topology_with_background(base).map(|t| t.0)
    }

    /// The topology and the background flows of its congested links.
    pub fn topology_with_background(&self, base: &Path) -> Result<(Topology, Vec<(usize, f64)>), ExperimentError> {
        self.cluster(base).map_err(ExperimentError::Topology)
    }

    fn cluster(&self, base: &Path) -> Result<(Topology, Vec<(usize, f64)>), String> {
        let t = &self.topology;
        let topo = match (&t.builtin, &t.file, &t.leaf_spine) {
            (Some(name), None, None) => by_name(name)
                .or_else(|| orrery_trace::machines::builtin(name))
                .ok_or_else(|| format!("topology.builtin: unknown set-up {name:?} (see `orrery topo list`)")),
            (None, Some(file), None) => {
                let path = base.join(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|e| format!("topology.file: {}: {e}", path.display()))?;
                parse_topology(&path.display().to_string(), &text).map_err(|e| e.to_string())
            }
            (None, None, Some(ls)) => ls.build(&self.name).map_err(|e| format!("topology.leaf_spine: {e}")),
            _ => Err("topology: expected exactly one of builtin, file, leaf_spine".into()),
        }?;
        congest(topo, &t.congested).map_err(|e| format!("topology.{e}"))
    }

    /// The jobs for a seed and the hosts each is pinned to (the file's pins,
    /// or those a `fragmented` placement draws).
    pub fn jobs_and_pins(
        &self,
        base: &Path,
        topo: &Topology,
        seed: u64,
    ) -> Result<(Vec<JobSpec>, Pins), ExperimentError> {
        workload_jobs(&self.workload, base, topo, seed).map_err(ExperimentError::Workload)
    }

    /// The cluster, jobs and pins of one scenario (by name; `None` for an
    /// experiment without scenarios), with its own topology if it brings one.
    /// Scenarios that congest links are refused: only the simulator adds
    /// their background traffic.
    pub fn scenario(
        &self,
        name: Option<&str>,
        base: &Path,
        seed: u64,
    ) -> Result<(Topology, Vec<JobSpec>, Pins), ExperimentError> {
        let invalid = ExperimentError::Invalid;
        let names: Vec<&str> = self.scenarios.iter().map(|s| s.name.as_str()).collect();
        let sc = match (name, self.scenarios.is_empty()) {
            (None, true) => None,
            (None, false) => return Err(invalid(format!("scenario: expected one of {}", names.join(", ")))),
            (Some(n), _) => Some(
                self.scenarios
                    .iter()
                    .find(|s| s.name == n)
                    .ok_or_else(|| invalid(format!("scenario: {n:?} is not one of [{}]", names.join(", "))))?,
            ),
        };
        if let Some(sc) = sc.filter(|sc| !sc.congested.is_empty()) {
            return Err(invalid(format!(
                "scenario {}: it congests links with background traffic, which only the simulator adds",
                sc.name
            )));
        }
        let topo = match sc.and_then(|sc| sc.topology.as_ref()) {
            Some(t) => Experiment { topology: t.clone(), ..self.clone() }.topology(base)?,
            None => self.topology(base)?,
        };
        let workload = match sc {
            Some(sc) => self
                .workloads()
                .into_iter()
                .find(|w| w.0 == sc.name)
                .map(|w| w.1)
                .ok_or_else(|| invalid(format!("scenario {}: no workload", sc.name)))?,
            None => self.workload.clone(),
        };
        let (mut jobs, pins) = workload_jobs(&workload, base, &topo, seed).map_err(ExperimentError::Workload)?;
        assign_tenants(&mut jobs, &self.tenants, seed);
        Ok((topo, jobs, pins))
    }

    /// Builds the jobs for a seed.
    pub fn jobs(&self, base: &Path, topo: &Topology, seed: u64) -> Result<Vec<JobSpec>, ExperimentError> {
        self.jobs_and_pins(base, topo, seed).map(|w| w.0)
    }

    /// The workload of each scenario, with its label.
    pub fn workloads(&self) -> Vec<(String, WorkloadSpec)> {
        if self.scenarios.is_empty() {
            return vec![(workload_label(&self.workload), self.workload.clone())];
        }
        self.scenarios
            .iter()
            .map(|sc| {
                let mut w = self.workload.clone();
                if !sc.listed.is_empty() {
                    (w.listed, w.generator, w.trace) = (sc.listed.clone(), None, None);
                }
                if !sc.pins.is_empty() {
                    w.pins = sc.pins.clone();
                }
                if !sc.decisions.is_empty() {
                    w.decisions = sc.decisions.clone();
                }
                w.load = sc.load.or(w.load);
                w.fragmentation = sc.fragmentation.or(w.fragmentation);
                w.jobs = sc.jobs.or(w.jobs);
                if sc.durations.is_some() {
                    w.durations = sc.durations.clone();
                }
                w.work_scale = sc.work_scale.or(w.work_scale);
                w.elastic = sc.elastic.or(w.elastic);
                if sc.mix.is_some() {
                    w.mix = sc.mix.clone();
                }
                (sc.name.clone(), w)
            })
            .collect()
    }
    /// The same experiment under other policies (`orrery run --policies`).
    /// The baseline stays if it is among them; otherwise the first is the
    /// baseline. Checked as a file's policies are.
    pub fn with_policies(mut self, file: &str, policies: Vec<String>) -> Result<Experiment, ExperimentError> {
        if self.baseline.as_ref().is_some_and(|b| !policies.contains(b)) {
            self.baseline = None;
        }
        if self.headline.as_ref().is_some_and(|h| !policies.contains(h)) {
            self.headline = None;
        }
        self.policies = policies;
        check(&format!("{file} (--policies)"), self).map_err(ExperimentError::Invalid)
    }

    /// The same experiment with `workload.jobs` set (`orrery run --jobs`):
    /// the first `jobs` of a trace, or that many generated. Checked as a
    /// file's value is.
    pub fn with_jobs(mut self, file: &str, jobs: usize) -> Result<Experiment, ExperimentError> {
        self.workload.jobs = Some(jobs);
        check(&format!("{file} (--jobs)"), self).map_err(ExperimentError::Invalid)
    }

    /// The experiment with these seeds instead of its file's (`orrery run
    /// --seeds 4-6`: held-out seeds without a copy of the file).
    pub fn with_seeds(mut self, file: &str, seeds: Vec<u64>) -> Result<Experiment, ExperimentError> {
        self.seeds = seeds;
        check(&format!("{file} (--seeds)"), self).map_err(ExperimentError::Invalid)
    }

    /// Runs every policy for every seed. `progress(run, runs, sim_s, finished, jobs)`.
    pub fn run(
        &self,
        base: &Path,
        progress: impl FnMut(usize, usize, f64, usize, usize) + Send,
    ) -> Result<Summary, ExperimentError> {
        self.run_shard(base, Shard::WHOLE, progress).map(|(summary, _)| summary)
    }

    /// The number of runs: scenarios × seeds × policies.
    pub fn run_count(&self) -> usize {
        self.workloads().len() * self.seeds.len() * self.policies.len()
    }

    /// Runs the runs `shard` takes, and the index of each among all runs
    /// (scenario, then seed, then policy, as [`Experiment::run`] orders them).
    /// The summary's comparison covers only these runs; [`crate::shard::merge`]
    /// rebuilds the whole one. `progress(run, runs, sim_s, finished, jobs)`
    /// counts the shard's runs.
    pub fn run_shard(
        &self,
        base: &Path,
        shard: Shard,
        progress: impl FnMut(usize, usize, f64, usize, usize) + Send,
    ) -> Result<(Summary, Vec<usize>), ExperimentError> {
        use ExperimentError::{Invalid, Panicked, Topology as Cluster, Workload};
        let progress = Mutex::new(progress);
        let (topo, base_background) = self.topology_with_background(base)?;
        let mut runs = Vec::new();
        let mut indices = Vec::new();
        let workloads = self.workloads();
        let total = (0..self.run_count()).filter(|&g| shard.takes(g)).count();
        // Gavel's measured interference, parsed once (1.2 MB of JSON).
        let gavel = orrery_trace::interference::gavel_samples(orrery_trace::interference::GAVEL_THROUGHPUTS)
            .map_err(|e| Invalid(format!("colocation: Gavel's measurements: {e}")))?;
        let base_topo = topo;
        for (k, (scenario, workload)) in workloads.iter().enumerate() {
            let congested = self.scenarios.get(k).map(|s| s.congested.as_slice()).unwrap_or_default();
            // A scenario may bring its own cluster (FORESIGHT's spine counts).
            let own = match self.scenarios.get(k).and_then(|s| s.topology.as_ref()) {
                Some(t) => {
                    let e = Experiment { topology: t.clone(), ..self.clone() };
                    Some(e.cluster(base).map_err(|e| Cluster(format!("scenario {scenario}: {e}")))?.0)
                }
                None => None,
            };
            let (topo, mut background) = congest(own.unwrap_or_else(|| base_topo.clone()), congested)
                .map_err(|e| Cluster(format!("scenario {scenario}: {e}")))?;
            background.extend_from_slice(&base_background);
            let mut sharing = self.colocation.clone();
            if let Some(sc) = self.scenarios.get(k) {
                sharing.xi = sc.xi.unwrap_or(sharing.xi);
                sharing.mode = sc.sharing.unwrap_or(sharing.mode);
            }
            let (truth, estimate) = sharing.build(&gavel).map_err(|e| Invalid(format!("scenario {scenario}: {e}")))?;
            let gpus = self.scenarios.get(k).and_then(|s| s.gpus).or(self.sim.gpus);
            for (s, &seed) in self.seeds.iter().enumerate() {
                // This (scenario, seed)'s runs in the shard, by policy index.
                let first_g = (k * self.seeds.len() + s) * self.policies.len();
                let chosen: Vec<usize> = (0..self.policies.len()).filter(|i| shard.takes(first_g + i)).collect();
                if chosen.is_empty() {
                    continue;
                }
                let (mut jobs, pins) = workload_jobs(workload, base, &topo, seed)
                    .map_err(|e| Workload(format!("scenario {scenario}: {e}")))?;
                assign_tenants(&mut jobs, &self.tenants, seed);
                // A pinned policy places only the jobs with a pin; the rest
                // would wait forever.
                if let Some(p) = self.policies.iter().find(|p| orrery_policy::PINNED_NAMES.contains(&p.as_str()))
                    && let Some(j) = jobs.iter().find(|j| !pins.contains_key(&j.id))
                {
                    return Err(Workload(format!(
                        "scenario {scenario}: workload.pins: policy {p:?} places each job where its pin says; job {:?} has no pin",
                        j.id
                    )));
                }
                let script =
                    scripted(&workload.decisions, &jobs).map_err(|e| Invalid(format!("scenario {scenario}: {e}")))?;
                // The policies run side by side, one per core; each run is
                // seeded on its own, so the results do not depend on it.
                let first_k = runs.len();
                let next = AtomicUsize::new(0);
                let results: Mutex<Vec<Option<Result<Run, ExperimentError>>>> =
                    Mutex::new(chosen.iter().map(|_| None).collect());
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(chosen.len());
                let unknown = |name: &str| Invalid(format!("policies: unknown policy {name:?}"));
                // The tenants' quotas: enforced unless `[sim]
                // enforce_quotas = false`, and what each share is measured by.
                let declared: std::collections::BTreeMap<String, orrery_policy::quota::Quota> = self
                    .tenants
                    .iter()
                    .map(|t| {
                        let q = orrery_policy::quota::Quota {
                            gpus: t.gpus,
                            borrow_limit: t.borrow_limit,
                            weight: t.weight,
                        };
                        (t.name.clone(), q)
                    })
                    .collect();
                // The `c`-th chosen run, policy `chosen[c]`.
                let one = |c: usize| -> Result<Run, ExperimentError> {
                    let name = &self.policies[chosen[c]];
                    let mut policy = policy(name, seed, &pins).ok_or_else(|| unknown(name))?;
                    policy.set_colocation(&estimate);
                    policy.set_flow_sharing(self.network.flow_sharing());
                    let cfg = SimConfig {
                        seed,
                        jitter: self.sim.jitter,
                        max_time_s: self.sim.max_time_s,
                        skip: self.sim.skip,
                        restart_penalty_s: self.sim.restart_penalty_s,
                        background: background.clone(),
                        probe: None,
                        colocation: truth.clone(),
                        ring_steps: self.sim.all_reduce == AllReduce::Steps,
                        record_iterations: self.iterations,
                        quotas: if self.sim.enforce_quotas { declared.clone() } else { Default::default() },
                        fair_share_half_life_s: self.fair_share.map(|f| f.half_life_s),
                        transport: self.network.transport(),
                        gpus: gpus.or(policy.gpu_allocation()).unwrap_or_default(),
                        schedule_period_s: self.sim.schedule_period_s,
                    };
                    let start = std::time::Instant::now();
                    let mut sim = Simulation::new(&topo, &jobs, cfg.clone(), policy.isolated_network());
                    script.apply(&mut sim);
                    let k = first_k + c;
                    sim.run(policy.as_mut(), &mut |t, done| {
                        if let Ok(mut p) = progress.lock() {
                            p(k, total, t, done, jobs.len());
                        }
                    });
                    let wall_s = start.elapsed().as_secs_f64();
                    let mut job_table = job_rows(&sim);
                    let has_high = jobs.iter().any(|j| j.priority == Priority::High);
                    let by_priority = has_high.then(|| ByPriority {
                        high: metrics_of(&sim, &job_table, |p| p == Priority::High),
                        low: metrics_of(&sim, &job_table, |p| p == Priority::Low),
                    });
                    let m = metrics_of(&sim, &job_table, |_| true);
                    let by_tenant = self
                        .tenants
                        .iter()
                        .map(|t| (t.name.clone(), orrery_sim::metrics::tenant_metrics(&sim, &job_table, &t.name)))
                        .collect();
                    // Measured against the declared quotas, enforced or not.
                    let tenant_share = orrery_sim::tenants::shares(&sim, &declared, TENANT_WINDOW_S);
                    let makespan_ns = (m.makespan_s * 1e9) as u64;
                    let mut link_table = link_rows(&sim, makespan_ns);
                    for r in &mut job_table {
                        (r.policy, r.seed, r.scenario) = (policy.name(), seed, scenario.clone());
                    }
                    for r in &mut link_table {
                        (r.policy, r.seed, r.scenario) = (policy.name(), seed, scenario.clone());
                    }
                    let mut run = Run {
                        policy: policy.name(),
                        scenario: scenario.clone(),
                        setup: format!("{} on {}", workload_source(workload), topo.name),
                        seed,
                        fidelity: if self.sim.skip { "iteration+skip" } else { "iteration" }.to_string(),
                        skipped_iterations: sim.jobs.iter().map(|j| j.skipped_iterations).sum(),
                        metrics: m,
                        by_priority,
                        by_tenant,
                        tenant_share,
                        events: sim.events_processed,
                        wall_s,
                        decisions_s: sim.decision_s.iter().sum(),
                        invalid_decisions: sim.invalid_decisions,
                        reschedules_cut: sim.reschedules_cut,
                        jobs: job_table,
                        links: link_table,
                        iterations: sim
                            .jobs
                            .iter()
                            .flat_map(|j| {
                                j.iterations.iter().map(|r| IterationRow {
                                    policy: policy.name(),
                                    scenario: scenario.clone(),
                                    seed,
                                    job: j.spec.id.clone(),
                                    iteration: r.iteration,
                                    due_s: r.due_s,
                                    start_s: r.start_s,
                                    end_s: r.end_s,
                                    delay_ms: r.delay_ms,
                                    throttle_gbps: r.throttle_gbps,
                                    routes: r.routes.clone(),
                                })
                            })
                            .collect(),
                        iteration_s: {
                            let mut all = orrery_sim::durations::Durations::new();
                            sim.jobs.iter().for_each(|j| all.merge(&j.iteration_ms));
                            all.sample(2000).into_iter().map(|ms| ms / 1e3).collect()
                        },
                        busiest: None,
                        counters: policy.counters().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                        notes: sim
                            .notes
                            .iter()
                            .map(|(at_s, job, text)| NoteRow {
                                policy: policy.name(),
                                scenario: scenario.clone(),
                                seed,
                                at_s: *at_s,
                                job: sim.jobs.get(*job).map_or_else(|| job.to_string(), |j| j.spec.id.clone()),
                                text: text.clone(),
                            })
                            .collect(),
                    };
                    if self.detail && seed == self.seeds[0] {
                        let mut fresh = self::policy(name, seed, &pins).ok_or_else(|| unknown(name))?;
                        fresh.set_colocation(&estimate);
                        fresh.set_flow_sharing(self.network.flow_sharing());
                        run.busiest = crate::report::busiest(&topo, &jobs, &run, fresh, &cfg, &script);
                    }
                    Ok(run)
                };
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(|| {
                            loop {
                                let c = next.fetch_add(1, Ordering::Relaxed);
                                if c >= chosen.len() {
                                    break;
                                }
                                // A panic is a bug; it becomes an error naming
                                // the run instead of tearing the scope down.
                                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(c)))
                                    .unwrap_or_else(|payload| {
                                        let message = payload
                                            .downcast_ref::<&str>()
                                            .map(|s| s.to_string())
                                            .or_else(|| payload.downcast_ref::<String>().cloned())
                                            .unwrap_or_else(|| "no message".into());
                                        Err(Panicked {
                                            scenario: scenario.clone(),
                                            policy: self.policies[chosen[c]].clone(),
                                            seed,
                                            message,
                                        })
                                    });
                                if let Ok(mut all) = results.lock() {
                                    all[c] = Some(r);
                                }
                            }
                        });
                    }
                });
                let lost = || Invalid(format!("scenario {scenario}, seed {seed}: a run's result was lost"));
                for (r, i) in results.into_inner().map_err(|_| lost())?.into_iter().zip(&chosen) {
                    runs.push(r.ok_or_else(lost)??);
                    indices.push(first_g + i);
                }
            }
        }
        let baseline = self.baseline.clone().unwrap_or_else(|| self.policies[0].clone());
        // The baseline is named as the policy reports itself.
        let baseline = policy(&baseline, 0, &self.workload.pins).map_or(baseline, |p| p.name());
        let comparison = compare(&runs, &baseline);
        let headline =
            self.headline.as_ref().map(|h| policy(h, 0, &self.workload.pins).map_or(h.clone(), |p| p.name()));
        let summary = Summary {
            experiment: self.name.clone(),
            description: self.description.clone(),
            paper: self.paper.clone(),
            headline,
            seed: self.seeds[0],
            runs,
            baseline,
            comparison,
        };
        Ok((summary, indices))
    }
}

/// Writes `summary.json`, `jobs.csv`, `links.csv`, the figures and
/// `report.html` into `dir`, each file atomically (written aside and renamed).
pub fn write(summary: &Summary, dir: &Path) -> Result<(), ExperimentError> {
    write_timed(summary, dir, &mut |_, _| {})
}

/// [`write`], telling `phase(name, seconds)` how long each output took
/// (`orrery run --timings`).
pub fn write_timed(
    summary: &Summary,
    dir: &Path,
    phase: &mut dyn FnMut(&'static str, f64),
) -> Result<(), ExperimentError> {
    let mut clock = std::time::Instant::now();
    let mut lap = |name: &'static str| {
        phase(name, clock.elapsed().as_secs_f64());
        clock = std::time::Instant::now();
    };
    let write = |path: PathBuf, bytes: &[u8]| {
        orrery_model::files::write_atomic(&path, bytes).map_err(|source| ExperimentError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| ExperimentError::Write { path: dir.to_path_buf(), source })?;
    let p = dir.join("summary.json");
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| ExperimentError::Serialise { path: p.clone(), message: e.to_string() })?;
    write(p, (json + "\n").as_bytes())?;
    lap("summary.json");
    fn csv_of<'a, T: Serialize + 'a>(
        path: &Path,
        rows: impl Iterator<Item = &'a T>,
    ) -> Result<Vec<u8>, ExperimentError> {
        let bad =
            |e: &dyn std::fmt::Display| ExperimentError::Serialise { path: path.to_path_buf(), message: e.to_string() };
        let mut w = csv::Writer::from_writer(Vec::new());
        for row in rows {
            w.serialize(row).map_err(|e| bad(&e))?;
        }
        w.into_inner().map_err(|e| bad(&e))
    }
    let p = dir.join("jobs.csv");
    write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.jobs))?)?;
    lap("jobs.csv");
    let p = dir.join("links.csv");
    write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.links))?)?;
    lap("links.csv");
    if summary.runs.iter().any(|r| !r.iterations.is_empty()) {
        let p = dir.join("iterations.csv");
        write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.iterations))?)?;
        lap("iterations.csv");
    }
    if summary.runs.iter().any(|r| !r.notes.is_empty()) {
        let p = dir.join("notes.csv");
        write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.notes))?)?;
    }
    let figures = crate::report::figures(summary, dir)?;
    lap("figures");
    write(dir.join("report.html"), crate::report::html(summary, &figures).as_bytes())?;
    lap("report.html");
    Ok(())
}

/// Gives each job a tenant: job `k` draws `u` in [0, 1) from the seed and
/// takes the first tenant whose cumulative share passes it (none past the
/// last share). Jobs that name a tenant keep it. O(jobs · tenants).
fn assign_tenants(jobs: &mut [JobSpec], tenants: &[crate::spec::TenantSpec], seed: u64) {
    use rand::{Rng, SeedableRng};
    if tenants.is_empty() {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7e4a_0070);
    for j in jobs.iter_mut() {
        let u: f64 = rng.random();
        if j.tenant.is_some() {
            continue;
        }
        let mut acc = 0.0;
        j.tenant = tenants
            .iter()
            .find(|t| {
                acc += t.share;
                u < acc
            })
            .map(|t| t.name.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::check_workload;

    #[test]
    fn default_experiment_parses() {
        let e = parse("default", DEFAULT).expect("valid");
        assert_eq!(e.policies, vec!["fifo", "random", "ideal"]);
        assert_eq!(e.topology(Path::new(".")).map(|t| t.gpu_count()).ok(), Some(64));
    }

    /// `work_scale` (issue 38's isolation of Castor's queueing) scales every
    /// job's iterations and nothing else; `durations` gives each job a
    /// duration Philly recorded for its GPU count; bad values are refused.
    #[test]
    fn work_scale_lengthens_the_jobs_and_durations_come_from_philly() {
        let file = |extra: &str| {
            format!(
                "name = \"w\"\npolicies = [\"sjf\"]\n[topology]\nbuiltin = \"castor\"\n\
                 [workload]\ngenerator = \"pollux-sample\"\njobs = 240\n{extra}"
            )
        };
        let jobs = |text: &str| {
            let e = parse("w.toml", text).expect("valid");
            let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
            e.scenario(None, &base, 1).expect("jobs").1
        };
        let plain = jobs(&file(""));
        let scaled = jobs(&file("work_scale = 3.2\n"));
        for (a, b) in plain.iter().zip(&scaled) {
            assert_eq!((&a.id, a.arrival_s, a.gpus()), (&b.id, b.arrival_s, b.gpus()), "only the length changes");
            let (orrery_model::Work::Iterations(n), orrery_model::Work::Iterations(m)) = (&a.work, &b.work) else {
                panic!("iterations")
            };
            assert_eq!(*m, ((*n as f64) * 3.2).round() as u64);
        }
        let philly = jobs(&file("durations = \"../data/philly/philly_jobs_pollux.csv\"\n"));
        assert!(
            philly.iter().all(|j| matches!(j.work, orrery_model::Work::Seconds(s) if s >= 60.0)),
            "Philly's kept durations"
        );
        let Err(err) = parse("w.toml", &file("work_scale = 0\n")).map_err(|e| e.to_string()) else { panic!("zero") };
        assert!(err.contains("w.toml:8: workload.work_scale: expected a number from 1e-6 to 1000, found 0.0"), "{err}");
        let other = file("work_scale = 2\n").replace("pollux-sample", "poisson");
        let Err(err) = parse("w.toml", &other).map_err(|e| e.to_string()) else { panic!("not read by poisson") };
        assert!(err.contains("workload.work_scale: only read with generator = \"pollux-sample\""), "{err}");
    }

    #[test]
    fn a_share_of_pollux_sample_jobs_is_high_priority() {
        let file = |share: &str| {
            format!(
                "name = \"hp\"\npolicies = [\"castor\"]\n[topology]\nbuiltin = \"castor\"\n\
                 [workload]\ngenerator = \"pollux-sample\"\njobs = 400\nhigh_priority = {share}\n"
            )
        };
        let e = parse("hp.toml", &file("0.15")).expect("valid");
        let high = |seed| {
            let (_, jobs, _) = e.scenario(None, Path::new("."), seed).expect("jobs");
            let n = jobs.iter().filter(|j| j.priority == orrery_model::Priority::High).count();
            (n, jobs.len())
        };
        // 400 Bernoulli(0.15) draws: mean 60, standard deviation 7.1.
        let (n, total) = high(1);
        assert_eq!(total, 400);
        assert!((39..=81).contains(&n), "{n} of 400 high priority");
        assert_ne!(high(1), high(2), "drawn per seed");
        let Err(err) = parse("hp.toml", &file("1.5")).map_err(|e| e.to_string()) else { panic!("out of range") };
        assert_eq!(err, "hp.toml:8: workload.high_priority: expected a number from 0 to 1, found 1.5");
        let other = file("0.1").replace("pollux-sample", "poisson");
        let Err(err) = parse("hp.toml", &other).map_err(|e| e.to_string()) else { panic!("not read by poisson") };
        assert!(err.contains("workload.high_priority: only read with generator = \"pollux-sample\""), "{err}");
    }

    #[test]
    fn every_shipped_experiment_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("experiments/") {
            let p = entry.expect("entry").path();
            if p.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&p).expect("read");
                // `kind = "auction-scale"` files are `orrery scale`'s, not simulations.
                if text.contains("kind = \"auction-scale\"") {
                    continue;
                }
                let e = parse(&p.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
                // Every scenario's jobs pass the workload checks for the first seed.
                let names: Vec<Option<&str>> = if e.scenarios.is_empty() {
                    vec![None]
                } else {
                    e.scenarios.iter().filter(|s| s.congested.is_empty()).map(|s| Some(s.name.as_str())).collect()
                };
                for name in names {
                    match e.scenario(name, &dir, e.seeds.first().copied().unwrap_or(1)) {
                        Ok(_) => {}
                        // Experiments on ../shared/data skip where it is absent.
                        Err(msg) if msg.to_string().contains("No such file") => eprintln!("skipped: {msg}"),
                        Err(msg) => panic!("{}: {name:?}: {msg}", p.display()),
                    }
                }
                n += 1;
            }
        }
        assert!(n >= 20, "{n} experiments");
    }

    #[test]
    fn workloads_no_run_could_serve_are_refused_with_the_reason() {
        let topo = orrery_model::setups::cassini(); // 24 hosts of 1 A100
        let job =
            |id: &str, workers: u32| JobSpec::new(id, "vgg16", 32, workers, orrery_model::Work::Iterations(10), 0.0);
        let check = |jobs: &[JobSpec], pins: &Pins| check_workload(jobs, pins, &topo).expect_err("refused").to_string();
        let none = Pins::new();
        assert_eq!(check(&[job("a", 1), job("a", 2)], &none), "job id \"a\" is used twice (jobs 1 and 2)");
        assert_eq!(check(&[job("big", 25)], &none), "job big asks for 25 GPUs; the cluster cassini has 24");
        let mut wide = job("wide", 1);
        wide.gpus_per_worker = 2;
        assert_eq!(check(&[wide], &none), "job wide: a worker asks for 2 GPUs; the largest host of cassini has 1");
        let mut endless = job("endless", 1);
        endless.work = orrery_model::Work::Iterations(u64::MAX);
        assert_eq!(
            check(&[endless], &none),
            "job endless: work.iterations: expected an integer from 1 to 1e10, found 18446744073709551615"
        );
        let mut forever = job("forever", 1);
        forever.work = orrery_model::Work::Seconds(1e300);
        assert_eq!(
            check(&[forever], &none),
            "job forever: work.seconds: expected a number from 0 to 3.15576e8, found 1e300"
        );
        // The issue's hang: 2³² − 1 iterations of a job that shares links.
        let mut ages = job("ages", 2);
        ages.work = orrery_model::Work::Iterations(4_294_967_295);
        let e = check(&[ages], &none);
        assert!(
            e.starts_with("job ages: work.iterations: 4294967295 iterations of ")
                && e.ends_with("expected at most 10 years"),
            "{e}"
        );
        let mut long = job("long", 2);
        long.work = orrery_model::Work::Iterations(1_000_000);
        assert!(check_workload(&[long], &none, &topo).is_ok());
        let mut late = job("late", 1);
        late.arrival_s = f64::NAN;
        assert_eq!(check(&[late], &none), "job late: arrival_s: expected a number from 0 to 4e9, found NaN");
        let dep =
            |id: &str, on: &[&str]| JobSpec { depends_on: on.iter().map(|s| s.to_string()).collect(), ..job(id, 1) };
        assert_eq!(check(&[dep("a", &["a"])], &none), "job a: depends_on itself");
        assert_eq!(check(&[dep("a", &["zz"])], &none), "job a: depends_on \"zz\": no such job");
        assert_eq!(
            check(&[dep("a", &["c"]), dep("b", &["a"]), dep("c", &["b"]), dep("d", &[]), dep("e", &["d"])], &none),
            "depends_on: jobs a, b, c can never start: their dependencies form a cycle"
        );
        assert!(check_workload(&[dep("a", &[]), dep("b", &["a"]), dep("c", &["a", "b"])], &none, &topo).is_ok());
        let pins: Pins = [("a".to_string(), vec![(99, 1)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: a: host 99: cassini has hosts 0 to 23");
        let pins: Pins = [("a".to_string(), vec![(0, 2)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: a: host 0: 2 GPUs; it has 1");
        let pins: Pins = [("q".to_string(), vec![(0, 1)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: \"q\": no such job");
    }

    #[test]
    fn other_policies_keep_the_baseline_when_they_can() {
        let text = "name = \"x\"\npolicies = [\"fifo\", \"sjf\"]\nbaseline = \"sjf\"\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n";
        let e = parse("x.toml", text).expect("valid");
        let kept = e.clone().with_policies("x.toml", vec!["random".into(), "sjf".into()]).expect("valid");
        assert_eq!((kept.policies.len(), kept.baseline.as_deref()), (2, Some("sjf")));
        let first = e.clone().with_policies("x.toml", vec!["random".into(), "ideal".into()]).expect("valid");
        assert_eq!(first.baseline, None, "the first policy is the baseline");
        let bad = e.with_policies("x.toml", vec!["magic".into()]).expect_err("unknown").to_string();
        assert!(bad.starts_with("x.toml (--policies): policies: unknown policy \"magic\""), "{bad}");
    }

    #[test]
    fn a_pinned_policy_needs_a_pin_for_every_job() {
        // Issue 41: `pinned` without pins placed nothing, so 0 of 2 jobs
        // finished, and the run exited 0.
        let text = "name = \"p\"\npolicies = [\"pinned\"]\n[topology]\nbuiltin = \"cassini\"\n\
                    [workload]\ngenerator = \"snapshot\"\njobs = 2\n";
        let e = parse("p.toml", text).expect("parses").run(Path::new("."), |_, _, _, _, _| {}).expect_err("no pins");
        assert_eq!(
            e.to_string(),
            "scenario snapshot x2: workload.pins: policy \"pinned\" places each job where its pin says; job \"job-0\" has no pin"
        );
    }

    #[test]
    fn bad_experiments_name_the_field() {
        let e = parse("x.toml", "name = \"x\"\npolicies = [\"magic\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect_err("bad policy").to_string();
        assert!(e.contains("unknown policy \"magic\""), "{e}");
        let e = parse(
            "y.toml",
            "name = \"y\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\njobs = \"ten\"\n",
        )
        .expect_err("bad type")
        .to_string();
        assert!(e.starts_with("y.toml:6:"), "{e}");
        let e = parse("z.toml", "name = \"z\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"nope\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect("parses")
            .topology(Path::new("."))
            .expect_err("unknown topology").to_string();
        assert!(e.contains("unknown set-up \"nope\""), "{e}");
        // Issue 21: sizes and times are range-checked before anything runs.
        let head = "name = \"w\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n";
        for (body, expected) in [
            (
                "[workload]\ngenerator = \"poisson\"\njobs = 9223372036854775807\n",
                "w.toml:7: workload.jobs: expected an integer from 1 to 1000000, found 9223372036854775807",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\nload = -0.5\n",
                "w.toml:7: workload.load: expected a number from 0.001 to 100, found -0.5",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\nload = nan\n",
                "w.toml:7: workload.load: expected a number from 0.001 to 100, found NaN",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nmax_time_s = -1.0\n",
                "w.toml:8: sim.max_time_s: expected a number from 1e-6 to 8e9, found -1.0",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nmax_time_s = 0\n",
                "w.toml:8: sim.max_time_s: expected a number from 1e-6 to 8e9, found 0.0",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\njobs = 0\n",
                "w.toml:7: workload.jobs: expected an integer from 1 to 1000000, found 0",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nrestart_penalty_s = inf\n",
                "w.toml:8: sim.restart_penalty_s: expected a number from 0 to 3.15576e8, found inf",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[[scenario]]\nname = \"a\"\n[[scenario]]\nname = \"b\"\nload = -2\n",
                "w.toml:11: scenario[1].load: expected a number from 0.001 to 100, found -2.0",
            ),
        ] {
            assert_eq!(parse("w.toml", &format!("{head}{body}")).expect_err(body).to_string(), expected);
        }
        let e = parse("j.toml", &format!("{head}[workload]\ngenerator = \"poisson\"\njob = 40\n"))
            .expect_err("job = 40")
            .to_string();
        assert!(
            e.starts_with("j.toml:7:7: workload.job: invalid type: integer `40`, expected a sequence")
                && e.ends_with("for a number of generated jobs use `jobs`)"),
            "{e}"
        );
        let text = "name = \"w\"\nseeds = []\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n";
        assert_eq!(
            parse("w.toml", text).expect_err("no seeds").to_string(),
            "w.toml:2: seeds: expected at least one seed"
        );
    }

    #[test]
    fn every_iteration_is_written_with_the_delay_it_was_given() {
        // CASSINI's §2.2 pair: under `pinned+cassini` the second job is
        // aligned once, so exactly one of its iterations starts late; under
        // `pinned` none does. Each iteration is due when the previous ends.
        let mut e = parse("cassini-pair", include_str!("../../../experiments/cassini-pair.toml")).expect("valid");
        e.iterations = true;
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        for run in &summary.runs {
            assert_eq!(run.iterations.len(), 2 * 500, "{}", run.policy);
            for job in ["a", "b"] {
                let rows: Vec<&IterationRow> = run.iterations.iter().filter(|r| r.job == job).collect();
                for w in rows.windows(2) {
                    assert_eq!(w[1].iteration, w[0].iteration + 1);
                    assert!((w[1].due_s - w[0].end_s).abs() < 1e-9, "{job}: {:?} then {:?}", w[0], w[1]);
                }
                for r in &rows {
                    assert!(r.due_s <= r.start_s && r.start_s < r.end_s, "{r:?}");
                    assert!((r.delay_ms - (r.start_s - r.due_s) * 1e3).abs() < 1e-6, "{r:?}");
                    assert!(r.throttle_gbps.is_none() && r.routes.is_empty());
                }
                let delayed = rows.iter().filter(|r| r.delay_ms > 0.0).count();
                let want = usize::from(run.policy == "pinned+cassini" && job == "b");
                assert_eq!(delayed, want, "{} {job}", run.policy);
            }
        }
        let dir_guard = tempfile::tempdir().expect("temp dir");
        let dir = dir_guard.path().to_path_buf();
        write(&summary, &dir).expect("written");
        let csv = std::fs::read_to_string(dir.join("iterations.csv")).expect("iterations.csv");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            csv.starts_with("policy,scenario,seed,job,iteration,due_s,start_s,end_s,delay_ms,throttle_gbps,routes\n")
        );
        assert_eq!(csv.lines().count(), 1 + 2 * 1000);
    }

    #[test]
    fn decisions_due_at_an_iteration_take_only_per_iteration_kinds() {
        let jobs = vec![JobSpec::new("a", "resnet50", 32, 2, orrery_model::Work::Iterations(10), 0.0)];
        let one = |v: serde_json::Value| scripted(&[v], &jobs);
        let route =
            serde_json::json!({"at_iteration": 3, "job": "a", "kind": "route", "flow": 1, "step": 2, "paths": [0]});
        let s = one(route).expect("a route for step 2 of iteration 3");
        assert!(s.at_time.is_empty());
        assert_eq!((s.at_iteration[0].0, s.at_iteration[0].1, s.at_iteration[0].2), (0, 3, Some(2)));
        let err = |v: serde_json::Value| one(v).expect_err("refused").to_string();
        assert_eq!(
            err(serde_json::json!({"at_iteration": 3, "job": "a", "kind": "pause"})),
            "workload.decision[0]: kind: expected shift, throttle or route with at_iteration, found \"pause\""
        );
        assert_eq!(
            err(serde_json::json!({"at_iteration": 1, "job": "a", "kind": "shift", "ms": 5, "step": 0})),
            "workload.decision[0]: step: expected only on a route"
        );
        assert_eq!(
            err(serde_json::json!({"at_s": 1.0, "at_iteration": 1, "job": "a", "kind": "shift", "ms": 5})),
            "workload.decision[0]: at_s: expected either at_s or at_iteration, not both"
        );
        assert_eq!(
            err(serde_json::json!({"at_iteration": -1, "job": "a", "kind": "shift", "ms": 5})),
            "workload.decision[0]: at_iteration: expected an iteration number, 0 or more"
        );
    }

    #[test]
    fn a_job_with_a_measured_shape_runs_it() {
        // 4 workers on the 4 hosts of one rack at 50 Gbit/s; 100 ms of
        // compute and a 100 MB ring all-reduce in 2 layers. Each worker puts
        // 2·3/4 · 100 MB = 150 MB = 1.2 Gbit on the wire: 24 ms at 50 Gbit/s.
        // Alone the iteration takes 100 + 24 = 124 ms.
        let text = "name = \"m\"\npolicies = [\"fifo\"]\n[topology.leaf_spine]\nracks = 1\nhosts_per_rack = 4\nspines = 1\ngpus_per_host = 1\ngpu_type = \"a100\"\nhost_gbps = 50.0\nuplink_gbps = 50.0\n[[workload.job]]\nid = \"measured\"\nmodel = \"my-net\"\nworkers = 4\nwork = { iterations = 20 }\narrival_s = 0.0\n[workload.job.shape]\ncompute_ms = 100.0\n[[workload.job.shape.collective]]\nkind = \"ring_all_reduce\"\nbytes = 1e8\nlayers = 2\n";
        let e = parse("m.toml", text).expect("valid");
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        let m = &summary.runs[0].metrics;
        assert_eq!(m.finished, 1);
        assert!((m.avg_iter_s - 0.124).abs() < 1e-6, "iteration {} s", m.avg_iter_s);
        // A label that is not a zoo model needs a shape; a bad shape is named.
        let no_shape = text.split("[workload.job.shape]").next().expect("head");
        let err = parse("m.toml", no_shape)
            .expect("parses")
            .run(Path::new("."), |_, _, _, _, _| {})
            .expect_err("no model")
            .to_string();
        assert!(err.contains("workload.job[0] (measured): model: expected a model of the zoo"), "{err}");
        let err = parse("m.toml", &text.replace("bytes = 1e8", "bytes = -1.0")).expect_err("negative").to_string();
        assert_eq!(
            err,
            "m.toml:21: workload.job[0].shape.collective[0].bytes: expected a number from 0 to 1e15, found -1.0"
        );
    }

    #[test]
    fn scenarios_vary_the_workload_and_bad_ones_are_named() {
        let base = "name = \"s\"\npolicies = [\"fifo\", \"themis\"]\nbaseline = \"themis\"\n[topology]\nbuiltin = \"metronome\"\n[workload]\ngenerator = \"poisson\"\njobs = 4\n[workload.mix]\nmodels = [\"vgg16\", \"resnet50\"]\nworkers = [[2, 0.5], [4, 0.5]]\niterations = [50, 100]\n";
        let e = parse("s.toml", &format!("{base}[[scenario]]\nname = \"load=0.5\"\nload = 0.5\n[[scenario]]\nname = \"S4\"\n[[scenario.congested]]\nhost = \"worker0\"\n[[scenario.job]]\nid = \"a\"\nmodel = \"bert\"\nbatch = 8\nworkers = 2\nwork = {{ iterations = 3 }}\narrival_s = 0.0\n"))
            .expect("valid");
        let w = e.workloads();
        assert_eq!(w.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(), vec!["load=0.5", "S4"]);
        assert_eq!(w[0].1.load, Some(0.5));
        assert_eq!((w[1].1.listed.len(), w[1].1.generator.as_deref()), (1, None));
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        assert_eq!(summary.runs.len(), 4);
        assert_eq!(summary.baseline, "themis");
        assert!(summary.comparison.iter().all(|c| c.policy != "themis" || (c.gain_avg_iter - 1.0).abs() < 1e-12));
        // One job table per scenario: job, model, alone, then one column per policy.
        let tables = job_tables(&summary);
        assert_eq!(tables.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), vec!["load=0.5", "S4"]);
        assert_eq!(tables[1].1[0].len(), 5);
        assert_eq!(tables[1].1[1][..2], ["a".to_string(), "bert".to_string()]);
        // Errors name the scenario and the field.
        let dup = parse("d.toml", &format!("{base}[[scenario]]\nname = \"x\"\n[[scenario]]\nname = \"x\"\n"))
            .expect_err("dup")
            .to_string();
        assert!(dup.contains("scenario[1]") && dup.contains("used twice"), "{dup}");
        let load =
            parse("l.toml", &format!("{base}[[scenario]]\nname = \"x\"\nload = -1\n")).expect_err("load").to_string();
        assert_eq!(load, "l.toml:15: scenario[0].load: expected a number from 0.001 to 100, found -1.0");
        let host =
            parse("h.toml", &format!("{base}[[scenario]]\nname = \"x\"\n[[scenario.congested]]\nhost = \"nope\"\n"))
                .expect("parses")
                .run(Path::new("."), |_, _, _, _, _| {})
                .expect_err("unknown host")
                .to_string();
        assert!(host.contains("scenario x") && host.contains("no host named \"nope\""), "{host}");
        let b = parse("b.toml", &base.replace("baseline = \"themis\"", "baseline = \"sjf\""))
            .expect_err("baseline")
            .to_string();
        assert!(b.contains("baseline: \"sjf\" is not one of the policies"), "{b}");
    }
}
