//! A workload's jobs for a seed: a trace, a generator or a snapshot, with
//! the pins of pinned placements, checked against the cluster.

use crate::spec::{WorkloadSpec, in_workload};
use orrery_model::{JobSpec, Topology};
use orrery_trace::generate::{ShapeContext, poisson, snapshot};
use std::path::Path;

/// Where a workload's jobs come from, for reports.
pub(crate) fn workload_source(w: &WorkloadSpec) -> String {
    match (&w.generator, &w.trace) {
        (Some(g), _) => format!("{g} x{}", w.jobs.unwrap_or(60)),
        (_, Some(t)) => t.display().to_string(),
        _ if !w.listed.is_empty() => format!("{} listed jobs", w.listed.len()),
        _ => "workload".into(),
    }
}

/// The scenario label of a workload without named scenarios: `load=0.8` for
/// generated arrivals, else its source.
pub(crate) fn workload_label(w: &WorkloadSpec) -> String {
    match (&w.generator, w.load) {
        (Some(g), Some(l)) if g == "poisson" || g == "pollux-sample" || g == "llm-cluster" => format!("load={l}"),
        (Some(g), None) if g == "poisson" => "load=0.8".into(),
        _ => workload_source(w),
    }
}

/// The jobs of a workload for a seed; `base` resolves relative paths.
/// Job id → GPUs per host.
pub type Pins = std::collections::BTreeMap<String, Vec<(usize, u32)>>;

/// The jobs of a workload for a seed and their pins (the file's, or those a
/// `fragmented` placement draws); `base` resolves relative paths.
pub(crate) fn workload_jobs(
    w: &WorkloadSpec,
    base: &Path,
    topo: &Topology,
    seed: u64,
) -> Result<(Vec<JobSpec>, Pins), String> {
    let (jobs, pins) = generate_workload(w, base, topo, seed)?;
    check_workload(&jobs, &pins, topo).map_err(|e| format!("workload: {e}"))?;
    Ok((jobs, pins))
}

/// What no run could do anything sensible with, whatever the policy: a
/// duplicate job id, an arrival that is not a finite time, a job that can
/// never fit the cluster (more GPUs than it has, or a worker larger than its
/// largest host), a dependency on itself, on a missing job or in a cycle, a
/// pin to a missing host or job, or beyond a host's GPUs. O(jobs + deps).
pub(crate) fn check_workload(jobs: &[JobSpec], pins: &Pins, topo: &Topology) -> Result<(), String> {
    let total = u64::from(topo.gpu_count());
    let largest = topo.hosts.iter().map(|h| h.gpus).max().unwrap_or(0);
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        if let Some(first) = index.insert(j.id.as_str(), i) {
            return Err(format!("job id {:?} is used twice (jobs {} and {})", j.id, first + 1, i + 1));
        }
        // The limits every reader applies (sizes, times, iterations, model).
        if let Err(b) = j.check() {
            return Err(format!("job {}: {}: expected {}, found {}", j.id, b.field, b.expected, b.found));
        }
        if j.host_unit() > largest {
            return Err(format!(
                "job {}: parallelism: a TP group of {} GPUs must fit one host; the largest host of {} has {largest}",
                j.id,
                j.host_unit(),
                topo.name
            ));
        }
        let wanted = u64::from(j.workers) * u64::from(j.gpus_per_worker);
        if wanted > total {
            return Err(format!("job {} asks for {wanted} GPUs; the cluster {} has {total}", j.id, topo.name));
        }
        if j.gpus_per_worker > largest {
            return Err(format!(
                "job {}: a worker asks for {} GPUs; the largest host of {} has {largest}",
                j.id, j.gpus_per_worker, topo.name
            ));
        }
        // A job counted in iterations runs at most MAX_TIME_S alone, as one
        // counted in seconds does: jobs that share links are simulated
        // iteration by iteration, so 4·10⁹ iterations would never end.
        // Only long jobs are placed to find their period (a million
        // iterations stay under ten years unless one lasts over 5 minutes).
        if let orrery_model::Work::Iterations(n) = j.work
            && n >= 1_000_000
        {
            let alone = orrery_policy::baseline::isolated_seconds_on(topo, j);
            if alone > orrery_model::job::MAX_TIME_S {
                return Err(format!(
                    "job {}: work.iterations: {n} iterations of {:.1} ms run {:.0} years alone on {}; expected at most {:.0} years",
                    j.id,
                    alone / n as f64 * 1e3,
                    alone / (365.25 * 86_400.0),
                    topo.name,
                    orrery_model::job::MAX_TIME_S / (365.25 * 86_400.0)
                ));
            }
        }
    }
    // Dependencies: named, not the job itself, and no cycle (Kahn's order).
    let mut waiting_on = vec![0usize; jobs.len()];
    let mut unlocks: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, j) in jobs.iter().enumerate() {
        for d in &j.depends_on {
            let &k = index.get(d.as_str()).ok_or_else(|| format!("job {}: depends_on {d:?}: no such job", j.id))?;
            if k == i {
                return Err(format!("job {}: depends_on itself", j.id));
            }
            waiting_on[i] += 1;
            unlocks[k].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..jobs.len()).filter(|&i| waiting_on[i] == 0).collect();
    let mut ordered = 0;
    while let Some(k) = ready.pop() {
        ordered += 1;
        for &i in &unlocks[k] {
            waiting_on[i] -= 1;
            if waiting_on[i] == 0 {
                ready.push(i);
            }
        }
    }
    if ordered < jobs.len() {
        let stuck: Vec<&str> = (0..jobs.len()).filter(|&i| waiting_on[i] > 0).map(|i| jobs[i].id.as_str()).collect();
        return Err(format!("depends_on: jobs {} can never start: their dependencies form a cycle", stuck.join(", ")));
    }
    for (job, hosts) in pins {
        if !index.contains_key(job.as_str()) {
            return Err(format!("pins: {job:?}: no such job"));
        }
        for &(h, gpus) in hosts {
            let host = topo.hosts.get(h).ok_or_else(|| {
                format!("pins: {job}: host {h}: {} has hosts 0 to {}", topo.name, topo.hosts.len().saturating_sub(1))
            })?;
            if gpus > host.gpus {
                return Err(format!("pins: {job}: host {h}: {gpus} GPUs; it has {}", host.gpus));
            }
        }
    }
    Ok(())
}

fn generate_workload(
    w: &WorkloadSpec,
    base: &Path,
    topo: &Topology,
    seed: u64,
) -> Result<(Vec<JobSpec>, Pins), String> {
    if w.generator.as_deref() == Some("fragmented") {
        let rack_of: Vec<usize> = orrery_policy::foresight::logical::LogicalNetwork::of(topo)
            .ok_or("workload.generator fragmented: expected a leaf-spine topology")?
            .leaf_of_host;
        let mix = w.mix.clone().unwrap_or_default();
        let target = w.fragmentation.unwrap_or(0.5);
        return orrery_trace::generate::fragmented(&rack_of, w.jobs.unwrap_or(usize::MAX), target, &mix, seed)
            .map_err(in_workload);
    }
    if w.generator.as_deref() == Some("pollux-sample") {
        // Castor §9.1: `jobs` (240) × `load` jobs of Pollux's Philly sample.
        let n = (w.jobs.unwrap_or(240) as f64 * w.load.unwrap_or(1.0)).round() as usize;
        let population = orrery_trace::castor::pollux_population().map_err(in_workload)?;
        let mut jobs = orrery_trace::castor::sample_jobs(&population, n, seed).map_err(in_workload)?;
        if let Some(series) = &w.arrivals {
            let path = base.join(series);
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("workload.arrivals: {}: {e}", path.display()))?;
            let parsed = orrery_trace::castor::venus_series(&path.display().to_string(), &text);
            if let Some(e) = parsed.errors.first() {
                return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
            }
            let bins = orrery_trace::castor::busiest_window(&parsed.items, 8.0 * 3600.0);
            orrery_trace::castor::shape_arrivals(&mut jobs, &bins, seed)
                .map_err(|e| format!("workload.arrivals: {e}"))?;
        }
        if let Some(trace) = &w.durations {
            let path = base.join(trace);
            let (_, parsed) = orrery_trace::read_file(&path, Some(orrery_trace::Format::Philly), seed);
            if let Some(e) = parsed.errors.first() {
                return Err(format!("workload.durations: {e} ({} bad rows in all)", parsed.errors.len()));
            }
            orrery_trace::castor::philly_durations(&mut jobs, &parsed.items, seed)
                .map_err(|e| format!("workload.durations: {}: {e}", path.display()))?;
        }
        if let Some(k) = w.work_scale {
            for j in &mut jobs {
                j.work = match j.work {
                    orrery_model::Work::Iterations(n) => {
                        orrery_model::Work::Iterations(((n as f64) * k).round().max(1.0) as u64)
                    }
                    orrery_model::Work::Seconds(s) => orrery_model::Work::Seconds(s * k),
                };
            }
        }
        if let Some(fraction) = w.high_priority {
            orrery_trace::castor::mark_high_priority(&mut jobs, fraction, seed).map_err(in_workload)?;
        }
        return Ok((jobs, w.pins.clone()));
    }
    if w.generator.as_deref() == Some("components") {
        let trace = w.trace.as_ref().ok_or("workload.generator components: expected a pod list in workload.trace")?;
        let path = base.join(trace);
        let (_, parsed) = orrery_trace::read_file(&path, w.format, seed);
        if let Some(e) = parsed.errors.first() {
            return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
        }
        let mix = w.mix.clone().unwrap_or_default();
        let jobs = orrery_trace::generate::components(
            &parsed.items,
            w.jobs.unwrap_or(60),
            w.interarrival_s.unwrap_or(15.0),
            &mix,
            seed,
        )
        .map_err(in_workload)?;
        return Ok((jobs, w.pins.clone()));
    }
    workload_jobs_only(w, base, topo, seed).map(|j| (j, w.pins.clone()))
}

/// The jobs of a workload for a seed; `base` resolves relative paths.
fn workload_jobs_only(w: &WorkloadSpec, base: &Path, topo: &Topology, seed: u64) -> Result<Vec<JobSpec>, String> {
    let mix = w.mix.clone().unwrap_or_default();
    if !w.listed.is_empty() {
        if w.generator.is_some() || w.trace.is_some() {
            return Err("workload: give [[workload.job]] entries or a generator or a trace, not several".into());
        }
        for (i, j) in w.listed.iter().enumerate() {
            if let Err(b) = orrery_trace::formats::jsonl::validate(j) {
                return Err(format!(
                    "workload.job[{i}] ({}): {}: expected {}, found {}",
                    j.id, b.field, b.expected, b.found
                ));
            }
        }
        return Ok(w.listed.clone());
    }
    match (&w.generator, &w.trace) {
        (Some(g), None) => {
            let n = w.jobs.unwrap_or(60);
            match g.as_str() {
                "poisson" => {
                    let host = topo.hosts.iter().max_by_key(|h| h.gpus).ok_or("topology has no hosts")?;
                    let ctx = ShapeContext {
                        gpu: host.gpu_type.clone(),
                        gpus_per_host: host.gpus,
                        link_gbps: topo.host_nic_gbps(0),
                    };
                    poisson(n, w.load.unwrap_or(0.8), topo.gpu_count(), &mix, &ctx, seed).map_err(in_workload)
                }
                "snapshot" => snapshot(n, &mix, seed).map_err(in_workload),
                "llm-cluster" => {
                    orrery_trace::llm_cluster::llm_cluster(n, w.load.unwrap_or(0.8), topo.gpu_count(), seed)
                        .and_then(|jobs| orrery_trace::llm_cluster::allow_elastic(jobs, w.elastic.unwrap_or(0.0), seed))
                        .map_err(in_workload)
                }
                other => Err(format!(
                    "workload.generator: expected poisson, snapshot, fragmented, components, pollux-sample or llm-cluster, found {other:?}"
                )),
            }
        }
        (None, Some(trace)) => {
            let path = base.join(trace);
            let (_, parsed) = orrery_trace::read_file(&path, w.format, seed);
            if let Some(e) = parsed.errors.first() {
                return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
            }
            let mut jobs = parsed.items;
            if let Some(n) = w.jobs {
                jobs.truncate(n);
            }
            Ok(jobs)
        }
        _ => Err("workload: expected exactly one of generator, trace".into()),
    }
}
