//! Workload generators: Poisson arrivals at a target load, snapshots, and a
//! dynamic mix of running jobs plus arrivals.
//!
//! Load is the average fraction of the cluster's GPUs that jobs would keep busy
//! if each ran alone (CASSINI §5.1, Gavel §7): with jobs `j` of `g_j` GPUs and
//! isolated duration `d_j`, the arrival rate is
//! `λ = load · G / mean_j(g_j · d_j)`.

use crate::TraceError;
use orrery_model::zoo::{Placement, model};
use orrery_model::{JobSpec, Work};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

/// How isolated iteration times are estimated for generated jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeContext {
    /// GPU type.
    pub gpu: String,
    /// GPUs per host (workers are packed onto hosts of this size).
    pub gpus_per_host: u32,
    /// Host link rate, Gbit/s.
    pub link_gbps: f64,
}

impl Default for ShapeContext {
    fn default() -> Self {
        ShapeContext { gpu: "v100".into(), gpus_per_host: 8, link_gbps: 100.0 }
    }
}

impl ShapeContext {
    /// Isolated iteration time of `job` in ms (packed placement), if its model and GPU are known.
    pub fn iteration_ms(&self, job: &JobSpec) -> Option<f64> {
        let m = model(&job.model)?;
        let placement = Placement::packed(job.workers, self.gpus_per_host);
        Some(m.shape_on(&self.gpu, job.batch, &placement, self.link_gbps)?.period_ms())
    }

    /// Isolated run time of `job` in seconds.
    pub fn duration_s(&self, job: &JobSpec) -> Option<f64> {
        match job.work {
            Work::Seconds(s) => Some(s),
            Work::Iterations(n) => self.iteration_ms(job).map(|ms| n as f64 * ms / 1e3),
        }
    }
}

/// What generated jobs look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    /// Models, drawn with equal probability.
    pub models: Vec<String>,
    /// Worker counts and their weights.
    #[schemars(with = "Vec<WorkersWeight>")]
    pub workers: Vec<(u32, f64)>,
    /// Iterations, drawn uniformly from this inclusive range.
    #[schemars(with = "IterationRange")]
    pub iterations: (u64, u64),
    /// Fraction of jobs with high priority.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub high_priority_fraction: f64,
    /// Run time alone in seconds, drawn uniformly from this range, instead of
    /// iterations (Gavel's generator: 0.5–1.5 h in Metronome §IV-A).
    #[serde(default)]
    #[schemars(with = "Option<SecondsRange>")]
    pub seconds: Option<(f64, f64)>,
    /// Give every job pod anti-affinity (one worker per host).
    #[serde(default)]
    pub anti_affinity: bool,
    /// Per-worker batch of every job (default: each model's typical batch);
    /// smaller batches make jobs more communication-bound.
    #[serde(default)]
    #[schemars(range(min = 1, max = orrery_model::job::MAX_BATCH))]
    pub batch: Option<u32>,
}

/// The declared ranges of [`Mix::workers`]' pairs: (workers, weight).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct WorkersWeight(
    #[schemars(range(min = 1, max = orrery_model::job::MAX_WORKERS))] u32,
    #[schemars(range(min = 0, max = 1e15))] f64,
);

/// The declared ranges of [`Mix::iterations`]: (low, high).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct IterationRange(
    #[schemars(range(min = 1, max = orrery_model::job::MAX_ITERATIONS))] u64,
    #[schemars(range(min = 1, max = orrery_model::job::MAX_ITERATIONS))] u64,
);

/// The declared ranges of [`Mix::seconds`]: (low, high).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct SecondsRange(
    #[schemars(range(min = 1e-3, max = orrery_model::job::MAX_TIME_S))] f64,
    #[schemars(range(min = 1e-3, max = orrery_model::job::MAX_TIME_S))] f64,
);

impl Default for Mix {
    /// CASSINI §5.1: its 13 models with equal probability and 200–1,000
    /// iterations. Worker counts follow the multi-GPU jobs of the Philly trace
    /// (`data/philly/philly_jobs_pollux.csv`: 2 → 1,818; 4 → 1,870; 8 → 1,643;
    /// 16 → 199 jobs; larger ones are rarer than 1% and left out).
    fn default() -> Self {
        Mix {
            models: [
                "vgg11",
                "vgg16",
                "vgg19",
                "resnet50",
                "wideresnet101",
                "bert",
                "roberta",
                "xlm",
                "camembert",
                "gpt1",
                "gpt2",
                "gpt3",
                "dlrm",
            ]
            .map(String::from)
            .to_vec(),
            workers: vec![(2, 1818.0), (4, 1870.0), (8, 1643.0), (16, 199.0)],
            iterations: (200, 1000),
            high_priority_fraction: 0.0,
            seconds: None,
            anti_affinity: false,
            batch: None,
        }
    }
}

impl Mix {
    /// Checks the mix; the message names the field at fault.
    pub fn validate(&self) -> Result<(), TraceError> {
        if self.models.is_empty() {
            return Err(TraceError::field("mix.models", "expected at least one model"));
        }
        if let Some(m) = self.models.iter().find(|m| model(m).is_none()) {
            return Err(TraceError::field("mix.models", format!("{m:?} is not in the zoo (see `orrery zoo`)")));
        }
        // Each number against its declared range (the attributes on the
        // fields), then the rules between them.
        orrery_model::ranges::check(self).map_err(|e| {
            TraceError::field(format!("mix.{}", e.path), format!("expected {}, found {}", e.expected, e.found))
        })?;
        if self.workers.is_empty() {
            return Err(TraceError::field("mix.workers", "expected [workers, weight] pairs"));
        }
        if self.workers.iter().map(|w| w.1).sum::<f64>() <= 0.0 {
            return Err(TraceError::field("mix.workers", "expected a positive total weight"));
        }
        if self.iterations.0 > self.iterations.1 {
            return Err(TraceError::field(
                "mix.iterations",
                format!("expected 1 ≤ low ≤ high, found {:?}", self.iterations),
            ));
        }
        if let Some((lo, hi)) = self.seconds
            && lo > hi
        {
            return Err(TraceError::field("mix.seconds", format!("expected low ≤ high, found [{lo}, {hi}]")));
        }
        Ok(())
    }

    fn draw(&self, rng: &mut ChaCha8Rng, id: usize) -> JobSpec {
        let name = &self.models[rng.random_range(0..self.models.len())];
        let m = model(name).expect("validated");
        let total: f64 = self.workers.iter().map(|w| w.1).sum();
        let mut x = rng.random_range(0.0..total);
        let mut workers = self.workers[self.workers.len() - 1].0;
        for &(n, w) in &self.workers {
            if x < w {
                workers = n;
                break;
            }
            x -= w;
        }
        let work = match self.seconds {
            Some((lo, hi)) => Work::Seconds(rng.random_range(lo..=hi)),
            None => Work::Iterations(rng.random_range(self.iterations.0..=self.iterations.1)),
        };
        let mut job =
            JobSpec::new(format!("job-{id}"), m.name, self.batch.unwrap_or(m.default_batch), workers, work, 0.0);
        job.anti_affinity = self.anti_affinity;
        if rng.random_bool(self.high_priority_fraction) {
            job.priority = orrery_model::Priority::High;
        }
        job
    }
}

/// `n` jobs all arriving at t = 0 (CASSINI's snapshot trace).
pub fn snapshot(n: usize, mix: &Mix, seed: u64) -> Result<Vec<JobSpec>, TraceError> {
    mix.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok((0..n).map(|i| mix.draw(&mut rng, i)).collect())
}

/// Plebiscito §VII's workload: `n` jobs with Poisson arrivals `mean_gap_s`
/// apart. Each job draws its model, iterations and number of components
/// (workers) from `mix`, and the shape of one component from a pod of a
/// public pod list (`pods`, e.g. Alibaba v2023 `openb_pod_list_multigpu50`):
/// its GPUs (a fraction of a GPU counts as one), CPU cores and memory.
pub fn components(
    pods: &[JobSpec],
    n: usize,
    mean_gap_s: f64,
    mix: &Mix,
    seed: u64,
) -> Result<Vec<JobSpec>, TraceError> {
    if pods.is_empty() {
        return Err(TraceError::Data("the pod list has no GPU pods".into()));
    }
    if !(mean_gap_s > 0.0 && mean_gap_s.is_finite()) {
        return Err(TraceError::field(
            "interarrival_s",
            format!("expected a positive number of seconds, found {mean_gap_s}"),
        ));
    }
    let mut jobs = snapshot(n, mix, seed)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9D5);
    let gaps = Exp::new(1.0 / mean_gap_s).map_err(|e| TraceError::field("interarrival_s", e.to_string()))?;
    let mut t = 0.0;
    for j in &mut jobs {
        let pod = &pods[rng.random_range(0..pods.len())];
        let gpus = pod.workers.max(1);
        j.gpus_per_worker = gpus;
        j.cpus_per_worker = pod.cpus_per_worker * f64::from(gpus);
        j.memory_gib_per_worker = pod.memory_gib_per_worker * f64::from(gpus);
        j.arrival_s = t;
        t += gaps.sample(&mut rng);
    }
    Ok(jobs)
}

/// `n` jobs with Poisson arrivals such that they would keep `load` of
/// `cluster_gpus` GPUs busy on average.
pub fn poisson(
    n: usize,
    load: f64,
    cluster_gpus: u32,
    mix: &Mix,
    ctx: &ShapeContext,
    seed: u64,
) -> Result<Vec<JobSpec>, TraceError> {
    if !(load > 0.0 && load.is_finite()) {
        return Err(TraceError::field("load", format!("expected a positive fraction of GPUs, found {load}")));
    }
    if cluster_gpus == 0 {
        return Err(TraceError::Data("the cluster has no GPUs".into()));
    }
    let mut jobs = snapshot(n, mix, seed)?;
    let mut work = 0.0;
    for j in &jobs {
        let d = ctx
            .duration_s(j)
            .ok_or_else(|| TraceError::field("mix.models", format!("cannot shape {} on {}", j.model, ctx.gpu)))?;
        work += f64::from(j.gpus()) * d;
    }
    let mean_gpu_seconds = work / jobs.len().max(1) as f64;
    let rate = load * f64::from(cluster_gpus) / mean_gpu_seconds.max(1e-9);
    let exp = Exp::new(rate).map_err(|e| TraceError::field("load", format!("arrival rate {rate}: {e}")))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x5EED));
    let mut t = 0.0;
    for j in &mut jobs {
        t += exp.sample(&mut rng);
        j.arrival_s = t;
    }
    Ok(jobs)
}

/// `running` jobs at t = 0 followed by `arrivals` Poisson arrivals at `load`
/// (CASSINI's dynamic trace).
pub fn dynamic(
    running: usize,
    arrivals: usize,
    load: f64,
    cluster_gpus: u32,
    mix: &Mix,
    ctx: &ShapeContext,
    seed: u64,
) -> Result<Vec<JobSpec>, TraceError> {
    let mut jobs = snapshot(running, mix, seed)?;
    let mut later = poisson(arrivals, load, cluster_gpus, mix, ctx, seed.wrapping_add(1))?;
    for (i, j) in later.iter_mut().enumerate() {
        j.id = format!("job-{}", running + i);
    }
    jobs.extend(later);
    Ok(jobs)
}

/// Job id → GPUs per host, in ring order.
pub type Pins = std::collections::BTreeMap<String, Vec<(usize, u32)>>;

/// FORESIGHT §II's fragmentation of a placement: the share of ring flows
/// (worker i to worker i + 1, and the last to the first) that cross racks.
pub fn fragmentation(rack_of: &[usize], rings: &[Vec<usize>]) -> f64 {
    let (mut cross, mut all) = (0usize, 0usize);
    for r in rings.iter().filter(|r| r.len() > 1) {
        for i in 0..r.len() {
            all += 1;
            cross += usize::from(rack_of[r[i]] != rack_of[r[(i + 1) % r.len()]]);
        }
    }
    if all == 0 { 0.0 } else { cross as f64 / all as f64 }
}

/// FORESIGHT §IV's workloads: jobs of one GPU per machine, sizes drawn from
/// `mix.workers`, until the cluster is full or `max_jobs` are placed, on
/// machines chosen so that the fragmentation is as close to `target` as
/// possible. Starts from a random deal of the machines and swaps machines
/// (between or within jobs) while that does not move the fragmentation away
/// from the target (seeded; at most 20,000 tries; O(tries · machines)). Low
/// targets may be out of reach: a job larger than a rack crosses racks. `rack_of[h]` is host h's rack. Returns the jobs (arriving at
/// t = 0) and their pins.
pub fn fragmented(
    rack_of: &[usize],
    max_jobs: usize,
    target: f64,
    mix: &Mix,
    seed: u64,
) -> Result<(Vec<JobSpec>, Pins), TraceError> {
    mix.validate()?;
    if !(0.0..=1.0).contains(&target) {
        return Err(TraceError::field("fragmentation", format!("expected a fraction in [0, 1], found {target}")));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let smallest = mix.workers.iter().map(|w| w.0).min().unwrap_or(1) as usize;
    let mut free = rack_of.len();
    let mut jobs = Vec::new();
    while jobs.len() < max_jobs && free >= smallest {
        let mut j = mix.draw(&mut rng, jobs.len());
        j.workers = j.workers.min(free as u32);
        free -= j.workers as usize;
        jobs.push(j);
    }
    let mut machines: Vec<usize> = (0..rack_of.len()).collect();
    machines.shuffle(&mut rng);
    let mut rings: Vec<Vec<usize>> = Vec::new();
    let mut at = 0;
    for j in &jobs {
        rings.push(machines[at..at + j.workers as usize].to_vec());
        at += j.workers as usize;
    }
    let mut best = (fragmentation(rack_of, &rings) - target).abs();
    for _ in 0..20_000 {
        if best < 0.01 || rings.len() < 2 {
            break;
        }
        let (a, b) = (rng.random_range(0..rings.len()), rng.random_range(0..rings.len()));
        let (i, k) = (rng.random_range(0..rings[a].len()), rng.random_range(0..rings[b].len()));
        if a == b && i == k {
            continue;
        }
        let (x, y) = (rings[a][i], rings[b][k]);
        rings[a][i] = y;
        rings[b][k] = x;
        let d = (fragmentation(rack_of, &rings) - target).abs();
        // Sideways moves too, to walk across plateaus.
        if d <= best {
            best = d;
        } else {
            rings[b][k] = y;
            rings[a][i] = x;
        }
    }
    let pins = jobs.iter().zip(&rings).map(|(j, r)| (j.id.clone(), r.iter().map(|&h| (h, 1)).collect())).collect();
    Ok((jobs, pins))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_hits_the_target_load() {
        let ctx = ShapeContext::default();
        let jobs = poisson(4000, 0.8, 128, &Mix::default(), &ctx, 3).expect("valid");
        let span = jobs.last().map_or(0.0, |j| j.arrival_s);
        let gpu_s: f64 = jobs.iter().map(|j| f64::from(j.gpus()) * ctx.duration_s(j).unwrap_or(0.0)).sum();
        let load = gpu_s / (span * 128.0);
        // 4,000 exponential gaps: the realised rate is within a few % of the target.
        assert!((load - 0.8).abs() < 0.05, "load {load}");
        assert!(jobs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }

    #[test]
    fn generators_are_deterministic_per_seed() {
        let ctx = ShapeContext::default();
        let a = poisson(50, 0.5, 64, &Mix::default(), &ctx, 9).expect("valid");
        let b = poisson(50, 0.5, 64, &Mix::default(), &ctx, 9).expect("valid");
        assert_eq!(a, b);
        let c = poisson(50, 0.5, 64, &Mix::default(), &ctx, 10).expect("valid");
        assert_ne!(a, c);
    }

    #[test]
    fn snapshot_and_dynamic() {
        let s = snapshot(5, &Mix::default(), 1).expect("valid");
        assert!(s.iter().all(|j| j.arrival_s == 0.0));
        let d = dynamic(5, 10, 0.5, 64, &Mix::default(), &ShapeContext::default(), 1).expect("valid");
        assert_eq!(d.len(), 15);
        assert_eq!(d.iter().filter(|j| j.arrival_s == 0.0).count(), 5);
        let mut ids: Vec<_> = d.iter().map(|j| &j.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 15);
    }

    #[test]
    fn bad_mixes_are_named() {
        let mix = Mix { models: vec!["nope".into()], ..Mix::default() };
        assert!(snapshot(1, &mix, 0).expect_err("bad").to_string().contains("\"nope\" is not in the zoo"));
        let mix = Mix { iterations: (10, 5), ..Mix::default() };
        assert!(matches!(snapshot(1, &mix, 0), Err(TraceError::Field { field, .. }) if field == "mix.iterations"));
        assert!(poisson(1, -1.0, 8, &Mix::default(), &ShapeContext::default(), 0).is_err());
    }

    #[test]
    fn worker_weights_match_philly_multi_gpu_counts() {
        let p =
            crate::formats::philly::parse("philly.csv", include_str!("../../../data/philly/philly_jobs_pollux.csv"), 0);
        for (n, w) in Mix::default().workers {
            assert_eq!(p.items.iter().filter(|j| j.workers == n).count() as f64, w, "{n} GPUs");
        }
    }

    #[test]
    fn the_mix_can_fix_the_batch() {
        let mix = Mix { batch: Some(8), ..Mix::default() };
        assert!(snapshot(20, &mix, 1).expect("valid").iter().all(|j| j.batch == 8));
        let bad = Mix { batch: Some(0), ..Mix::default() };
        assert!(snapshot(1, &bad, 1).expect_err("zero batch").to_string().starts_with("mix.batch: "));
    }

    #[test]
    fn fragmented_placements_reach_their_target() {
        // FORESIGHT's 48 machines in racks of 8, jobs of 4-16 machines.
        let rack_of: Vec<usize> = (0..48).map(|h| h / 8).collect();
        let mix = Mix { workers: (4..=16).map(|n| (n, 1.0)).collect(), ..Mix::default() };
        for target in [0.3, 0.5, 0.8] {
            let (jobs, pins) = fragmented(&rack_of, 100, target, &mix, 3).expect("valid");
            assert!(jobs.iter().map(|j| j.workers).sum::<u32>() <= 48);
            let rings: Vec<Vec<usize>> = jobs.iter().map(|j| pins[&j.id].iter().map(|p| p.0).collect()).collect();
            let f = fragmentation(&rack_of, &rings);
            assert!((f - target).abs() < 0.05, "target {target}: {f}");
            // Every machine at most once.
            let mut all: Vec<usize> = rings.concat();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), rings.iter().map(Vec::len).sum::<usize>());
        }
    }
}
