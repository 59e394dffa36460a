//! Import from psim, the flow-level simulator FORESIGHT was evaluated on
//! (github.com/FaridZandi/psim). Its `nethint-test` protocol reads three JSON
//! files, and [`import`] turns them into an orrery experiment:
//!
//! * the **placement file**: jobs with their `machines` (in ring order),
//!   `comp_size`, `comm_size`, `layer_count` and `iter_count`;
//! * the **timing file** (optional): per job, per iteration, a delay before
//!   the iteration (`deltas`) and a rate cap as a share of the link
//!   (`throttle_rates`);
//! * the **routing file** (optional): per job, per iteration, per flow, the
//!   spines the flow is split over (`spine_rates`: spine and share).
//!
//! What psim runs for one job (`insert_simple_data_parallelism` in psim's
//! `protocol_builder.cc`): per iteration, after its delta, every machine
//! computes `comp_size` per layer forward and `comp_size` per layer
//! backward; after each layer's backward pass, a ring all-reduce of
//! `comm_size` runs as 2(n−1) steps with a barrier between steps, each step
//! one flow of `comm_size/n` on every ring edge; the all-reduces of an
//! iteration run one after another. orrery runs the same with an explicit
//! shape (compute `2·layers·comp_size`, one ring all-reduce of `comm_size`
//! in `layers` parts) and `[sim] all_reduce = "steps"`.
//!
//! **Units.** psim's are abstract: a compute task of size `c` takes `c` time
//! units, and a flow of size `s` at the full link rate `link_bandwidth`
//! takes `s / link_bandwidth` units. [`Units`] maps one time unit to
//! `ms_per_unit` milliseconds and `link_bandwidth` to `link_gbps` Gbit/s,
//! so a size unit is `ms_per_unit · link_gbps · 10⁶ / (8 · link_bandwidth)`
//! bytes (125,000 B at the defaults: 1 ms, 100 Gbit/s, bandwidth 100).
//!
//! **Where the two differ.** With `layer_count > 1` psim overlaps each
//! layer's all-reduce with the backward pass of the layers before it;
//! orrery's shape runs compute and communication one after the other, so
//! such a job's iteration is longer in orrery by up to the overlap (every
//! experiment script in psim's repository uses one layer). A cross-rack
//! flow the routing file does not route takes orrery's ECMP hash, where
//! psim's `random` scheme draws a spine. A flow split over spines in
//! unequal shares is split in orrery by repeating a spine (shares must be
//! multiples of 1/64).

use orrery_model::job::{CollectiveSpec, ShapeSpec};
use orrery_model::setups::LeafSpine;
use orrery_model::{Collective, JobSpec, Topology, Work};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What went wrong reading psim's files.
#[derive(Debug, thiserror::Error)]
pub enum PsimError {
    /// A file could not be read.
    #[error("{file}: cannot read it")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not the JSON psim writes (serde's message names line and column).
    #[error("{file}: {message}")]
    Json {
        /// The file.
        file: PathBuf,
        /// serde's message.
        message: String,
    },
    /// An entry has a field orrery cannot use.
    #[error("{file}: entry {entry} (job_id {job_id}): {field}: expected {expected}, found {found}")]
    Field {
        /// The file.
        file: PathBuf,
        /// Index of the entry in the file's list, from 0.
        entry: usize,
        /// The entry's job.
        job_id: i64,
        /// The field (its path within the entry).
        field: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// The network settings do not make a leaf-spine.
    #[error("--{flag}: expected {expected}, found {found}")]
    Network {
        /// psim's flag.
        flag: &'static str,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        found: String,
    },
}

/// psim's network flags (leaf-spine), named as psim names them. The defaults
/// are psim's own (`gconfig.h`) for machines, rack and spines, and those of
/// FORESIGHT's experiment runner (`run/utils/exp_runner.py`) for the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct PsimNetwork {
    /// `--machine-count`.
    pub machine_count: usize,
    /// `--ft-server-per-rack`.
    pub ft_server_per_rack: usize,
    /// `--ft-rack-per-pod` (psim's leaf-spine puts `server-per-rack ×
    /// rack-per-pod` machines under a leaf).
    pub ft_rack_per_pod: usize,
    /// `--ft-core-count`: spines.
    pub ft_core_count: usize,
    /// `--link-bandwidth`, in psim's units.
    pub link_bandwidth: f64,
    /// `--ft-server-tor-link-capacity-mult`.
    pub ft_server_tor_link_capacity_mult: f64,
    /// `--ft-agg-core-link-capacity-mult`: each leaf-spine link's capacity
    /// as a multiple of the link bandwidth.
    pub ft_agg_core_link_capacity_mult: f64,
}

impl Default for PsimNetwork {
    fn default() -> Self {
        PsimNetwork {
            machine_count: 128,
            ft_server_per_rack: 8,
            ft_rack_per_pod: 1,
            ft_core_count: 4,
            link_bandwidth: 100.0,
            ft_server_tor_link_capacity_mult: 1.0,
            ft_agg_core_link_capacity_mult: 1.0,
        }
    }
}

/// How psim's abstract units become orrery's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Units {
    /// Milliseconds per psim time unit.
    pub ms_per_unit: f64,
    /// Gbit/s of psim's `link_bandwidth`.
    pub link_gbps: f64,
}

impl Default for Units {
    fn default() -> Self {
        Units { ms_per_unit: 1.0, link_gbps: 100.0 }
    }
}

impl Units {
    /// Bytes per psim size unit (see the module doc).
    pub fn bytes_per_unit(&self, net: &PsimNetwork) -> f64 {
        self.ms_per_unit * 1e-3 * self.link_gbps * 1e9 / 8.0 / net.link_bandwidth
    }
}

/// One job of a placement file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PsimJob {
    /// Its id.
    #[schemars(range(min = 0, max = i64::MAX))]
    pub job_id: i64,
    /// Machines (psim only logs it; `machines` is what runs).
    #[schemars(range(min = 1, max = MAX_HOSTS))]
    pub machine_count: Option<usize>,
    /// All-reduce payload per layer, size units.
    #[schemars(range(min = 0, max = MAX_SIZE))]
    pub comm_size: f64,
    /// Compute per layer per pass, time units.
    #[schemars(range(min = 0, max = MAX_SIZE))]
    pub comp_size: f64,
    /// Layers.
    #[schemars(range(min = 1, max = 10_000))]
    pub layer_count: u32,
    /// Iterations.
    #[schemars(range(min = 1, max = orrery_model::job::MAX_ITERATIONS))]
    pub iter_count: u64,
    /// Machines, in ring order.
    #[schemars(inner(range(min = 0, max = MAX_HOSTS)))]
    pub machines: Vec<i64>,
}

/// The largest size or time in psim's units a file may give.
pub const MAX_SIZE: f64 = 1e15;
const MAX_HOSTS: usize = orrery_model::topology::MAX_HOSTS;

/// One job of a timing file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PsimTiming {
    /// Its id.
    #[schemars(range(min = 0, max = i64::MAX))]
    pub job_id: i64,
    /// Delay before each iteration, time units.
    #[schemars(inner(range(min = 0, max = MAX_SIZE)))]
    pub deltas: Vec<f64>,
    /// Rate cap per iteration, as a share of the link bandwidth (a
    /// millionth at least: psim divides by it).
    #[schemars(inner(range(min = 1e-6, max = 1)))]
    pub throttle_rates: Vec<f64>,
}

/// One flow of a routing file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PsimRoute {
    /// Its job.
    #[schemars(range(min = 0, max = i64::MAX))]
    pub job_id: i64,
    /// psim's per-job task counter within the iteration: for layer part
    /// `ℓ`, chunk `c` and step `s` of a ring among `n`,
    /// `ℓ·n·2(n−1) + c·2(n−1) + s`.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub flow_id: usize,
    /// Iteration, from 0.
    #[schemars(range(min = 0, max = orrery_model::job::MAX_ITERATIONS))]
    pub iteration: u64,
    /// Number of subflows (psim reads `spine_rates`).
    #[schemars(range(min = 0, max = 4096))]
    pub spine_count: Option<usize>,
    /// (spine, share of the flow).
    #[schemars(with = "Vec<SpineShare>")]
    pub spine_rates: Vec<(i64, f64)>,
}

/// The declared ranges of a `spine_rates` pair: (spine, share).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct SpineShare(#[schemars(range(min = 0, max = 4095))] i64, #[schemars(range(min = 0, max = 1))] f64);

/// The three files; timing and routing may be absent, as psim allows.
#[derive(Debug, Clone, Default)]
pub struct PsimFiles {
    /// Placement file.
    pub placement: PathBuf,
    /// Timing file.
    pub timing: Option<PathBuf>,
    /// Routing file.
    pub routing: Option<PathBuf>,
}

/// The experiment, and what the reader should know about the translation.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The experiment, as TOML (`orrery run` reads it).
    pub toml: String,
    /// Notes on what was approximated or left out, one per line.
    pub notes: Vec<String>,
    /// Jobs.
    pub jobs: usize,
    /// Scripted decisions (delays, throttles, routes).
    pub decisions: usize,
}

/// A psim file's entries, each number checked against its declared range
/// ([`orrery_model::ranges`]).
fn read<T>(file: &Path) -> Result<Vec<T>, PsimError>
where
    T: for<'de> Deserialize<'de> + Serialize + JsonSchema + 'static,
{
    let text = std::fs::read_to_string(file).map_err(|source| PsimError::Read { file: file.into(), source })?;
    let entries: Vec<T> =
        serde_json::from_str(&text).map_err(|e| PsimError::Json { file: file.into(), message: e.to_string() })?;
    for (entry, e) in entries.iter().enumerate() {
        orrery_model::ranges::check(e).map_err(|r| PsimError::Field {
            file: file.into(),
            entry,
            job_id: serde_json::to_value(e).ok().and_then(|v| v["job_id"].as_i64()).unwrap_or(-1),
            field: r.path,
            expected: r.expected,
            found: r.found,
        })?;
    }
    Ok(entries)
}

/// Reads psim's files and writes the experiment `name`. O(jobs · iterations
/// + routes · spines).
pub fn import(name: &str, files: &PsimFiles, net: &PsimNetwork, units: Units) -> Result<Imported, PsimError> {
    let jobs: Vec<PsimJob> = read(&files.placement)?;
    let timings: Vec<PsimTiming> = match &files.timing {
        Some(f) => read(f)?,
        None => Vec::new(),
    };
    let routes: Vec<PsimRoute> = match &files.routing {
        Some(f) => read(f)?,
        None => Vec::new(),
    };
    translate(name, files, net, units, &jobs, &timings, &routes)
}

fn network_check(net: &PsimNetwork, units: Units) -> Result<LeafSpine, PsimError> {
    let bad = |flag, expected, found: String| PsimError::Network { flag, expected, found };
    let per_rack = net.ft_server_per_rack * net.ft_rack_per_pod;
    if per_rack == 0 || net.machine_count == 0 || !net.machine_count.is_multiple_of(per_rack) {
        return Err(bad(
            "machine-count",
            "a multiple of ft-server-per-rack × ft-rack-per-pod (psim's rule)",
            format!("{} machines, {per_rack} per rack", net.machine_count),
        ));
    }
    if net.ft_core_count == 0 || net.ft_core_count > 4096 {
        return Err(bad("ft-core-count", "1 to 4,096 spines", net.ft_core_count.to_string()));
    }
    for (flag, v) in [
        ("link-bandwidth", net.link_bandwidth),
        ("ft-server-tor-link-capacity-mult", net.ft_server_tor_link_capacity_mult),
        ("ft-agg-core-link-capacity-mult", net.ft_agg_core_link_capacity_mult),
        ("ms-per-unit", units.ms_per_unit),
        ("link-gbps", units.link_gbps),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(bad(flag, "a positive number", v.to_string()));
        }
    }
    Ok(LeafSpine {
        racks: (net.machine_count / per_rack) as u32,
        hosts_per_rack: per_rack as u32,
        spines: net.ft_core_count as u32,
        gpus_per_host: 1,
        gpu_type: "v100".into(),
        host_gbps: units.link_gbps * net.ft_server_tor_link_capacity_mult,
        uplink_gbps: units.link_gbps * net.ft_agg_core_link_capacity_mult,
    })
}

/// The index, in [`Topology::paths`] between `src` and `dst`, of the path
/// over `spine{k}`.
fn spine_path(topo: &Topology, src: usize, dst: usize, spine: usize) -> Option<usize> {
    let node = topo.node_by_name(&format!("spine{spine}"))?;
    topo.paths(src, dst).iter().position(|p| p.iter().any(|&l| topo.links[l].to == node))
}

/// Shares as repeated path indices: (share, path) pairs become a list in
/// which each path appears in proportion to its share (orrery splits a
/// routed flow equally over the listed paths). None unless every share is
/// a multiple of 1/d for some d ≤ 64.
fn split(shares: &[(f64, usize)]) -> Option<Vec<usize>> {
    let total: f64 = shares.iter().map(|s| s.0).sum();
    (1..=64usize).find_map(|d| {
        let counts: Vec<f64> = shares.iter().map(|s| s.0 / total * d as f64).collect();
        counts.iter().all(|c| (c - c.round()).abs() < 1e-6 && c.round() >= 1.0).then(|| {
            shares.iter().zip(&counts).flat_map(|(s, c)| std::iter::repeat_n(s.1, c.round() as usize)).collect()
        })
    })
}

#[derive(Serialize)]
struct Out {
    name: String,
    seeds: Vec<u64>,
    policies: Vec<String>,
    topology: OutTopology,
    sim: OutSim,
    workload: OutWorkload,
}

#[derive(Serialize)]
struct OutTopology {
    leaf_spine: LeafSpine,
}

#[derive(Serialize)]
struct OutSim {
    all_reduce: String,
    skip: bool,
}

#[derive(Serialize)]
struct OutWorkload {
    pins: BTreeMap<String, Vec<(usize, u32)>>,
    job: Vec<JobSpec>,
    decision: Vec<serde_json::Value>,
}

fn translate(
    name: &str,
    files: &PsimFiles,
    net: &PsimNetwork,
    units: Units,
    jobs: &[PsimJob],
    timings: &[PsimTiming],
    routes: &[PsimRoute],
) -> Result<Imported, PsimError> {
    let leaf_spine = network_check(net, units)?;
    let topo = leaf_spine.build("psim").map_err(|e| PsimError::Network {
        flag: "machine-count",
        expected: "a topology orrery can build",
        found: e.to_string(),
    })?;
    let placement = &files.placement;
    let mut notes = Vec::new();
    let mut out_jobs = Vec::with_capacity(jobs.len());
    let mut pins = BTreeMap::new();
    let mut decisions = Vec::new();
    let mut owner: BTreeMap<i64, i64> = BTreeMap::new();
    let mut index: BTreeMap<i64, usize> = BTreeMap::new();
    let bytes_per_unit = units.bytes_per_unit(net);
    for (k, j) in jobs.iter().enumerate() {
        let field = |field: &str, expected: &str, found: String| PsimError::Field {
            file: placement.clone(),
            entry: k,
            job_id: j.job_id,
            field: field.into(),
            expected: expected.into(),
            found,
        };
        if index.insert(j.job_id, k).is_some() {
            return Err(field("job_id", "an id no other job has", j.job_id.to_string()));
        }
        if j.machines.is_empty() {
            return Err(field("machines", "at least one machine", "[]".into()));
        }
        if let Some(n) = j.machine_count.filter(|&n| n != j.machines.len()) {
            return Err(field(
                "machine_count",
                "the number of machines listed",
                format!("{n} for {} machines", j.machines.len()),
            ));
        }
        for &m in &j.machines {
            if m < 0 || m as usize >= net.machine_count {
                return Err(field("machines", &format!("machine ids 0 to {}", net.machine_count - 1), m.to_string()));
            }
            if let Some(other) = owner.insert(m, j.job_id) {
                return Err(field(
                    "machines",
                    "machines no other job uses (orrery gives each machine one GPU)",
                    format!("machine {m}, also in job {other}"),
                ));
            }
        }
        // Each number was checked against its declared range on reading.
        if j.comp_size == 0.0 && j.comm_size == 0.0 {
            return Err(field("comp_size", "some compute or some communication", "neither".into()));
        }
        if j.layer_count > 1 {
            notes.push(format!(
                "job {}: {} layers run one after the other in orrery; psim overlaps each all-reduce with the backward \
                 pass of the layers before it",
                j.job_id, j.layer_count
            ));
        }
        let id = j.job_id.to_string();
        let mut spec =
            JobSpec::new(id.clone(), "psim", 1, j.machines.len() as u32, Work::Iterations(j.iter_count), 0.0);
        spec.shape = Some(ShapeSpec {
            compute_ms: 2.0 * f64::from(j.layer_count) * j.comp_size * units.ms_per_unit,
            collectives: vec![CollectiveSpec {
                kind: Collective::RingAllReduce,
                bytes: j.comm_size * bytes_per_unit,
                layers: j.layer_count,
                group: Default::default(),
            }],
        });
        out_jobs.push(spec);
        pins.insert(id, j.machines.iter().map(|&m| (m as usize, 1)).collect());
    }

    // Timings: psim reads them by position (`timings[job_index]`).
    if let Some(file) = &files.timing {
        if timings.len() < jobs.len() {
            return Err(PsimError::Field {
                file: file.clone(),
                entry: timings.len(),
                job_id: jobs[timings.len()].job_id,
                field: "job_id".into(),
                expected: "one entry per job of the placement, in its order (psim reads them by position)".into(),
                found: format!("{} entries for {} jobs", timings.len(), jobs.len()),
            });
        }
        for (k, (t, j)) in timings.iter().zip(jobs).enumerate() {
            let field = |field: &str, expected: String, found: String| PsimError::Field {
                file: file.clone(),
                entry: k,
                job_id: t.job_id,
                field: field.into(),
                expected,
                found,
            };
            if t.job_id != j.job_id {
                return Err(field(
                    "job_id",
                    format!("job {} (psim reads timings by position)", j.job_id),
                    t.job_id.to_string(),
                ));
            }
            let n = j.iter_count as usize;
            if t.deltas.len() < n || t.throttle_rates.len() < n {
                return Err(field(
                    "deltas",
                    format!("{n} deltas and {n} throttle_rates (one per iteration)"),
                    format!("{} and {}", t.deltas.len(), t.throttle_rates.len()),
                ));
            }
            let mut cap: Option<f64> = None;
            for (i, (&delta, &rate)) in t.deltas.iter().zip(&t.throttle_rates).take(n).enumerate() {
                let id = j.job_id.to_string();
                if delta > 0.0 {
                    decisions.push(serde_json::json!({
                        "at_iteration": i, "job": id, "kind": "shift", "ms": delta * units.ms_per_unit,
                    }));
                }
                let want = (rate < 1.0).then_some(rate * units.link_gbps);
                if want != cap {
                    let mut d = serde_json::json!({ "at_iteration": i, "job": id, "kind": "throttle" });
                    if let Some(g) = want {
                        d["gbps"] = g.into();
                    }
                    decisions.push(d);
                    cap = want;
                }
            }
        }
    }

    // Routes: psim's flow id → the orrery step and ring edge it runs on.
    let (mut same_rack, mut out_of_range) = (0usize, 0usize);
    if let Some(file) = &files.routing {
        let rack = |m: usize| m / leaf_spine.hosts_per_rack as usize;
        for (k, r) in routes.iter().enumerate() {
            let field = |field: &str, expected: String, found: String| PsimError::Field {
                file: file.clone(),
                entry: k,
                job_id: r.job_id,
                field: field.into(),
                expected,
                found,
            };
            let Some(&ji) = index.get(&r.job_id) else {
                return Err(field("job_id", "a job of the placement file".into(), r.job_id.to_string()));
            };
            let j = &jobs[ji];
            let n = j.machines.len();
            let steps = 2 * n.saturating_sub(1);
            let per_part = n * steps;
            if steps == 0 || r.iteration >= j.iter_count || r.flow_id >= per_part * j.layer_count as usize {
                // psim never looks such an entry up.
                out_of_range += 1;
                continue;
            }
            let (part, rest) = (r.flow_id / per_part, r.flow_id % per_part);
            let (chunk, step) = (rest / steps, rest % steps);
            let edge = (chunk + step) % n;
            let (src, dst) = (j.machines[edge] as usize, j.machines[(edge + 1) % n] as usize);
            if rack(src) == rack(dst) {
                same_rack += 1; // psim routes only flows that cross racks
                continue;
            }
            if r.spine_rates.is_empty() {
                return Err(field("spine_rates", "at least one (spine, share) pair".into(), "[]".into()));
            }
            let mut shares = Vec::with_capacity(r.spine_rates.len());
            for &(spine, share) in &r.spine_rates {
                let path = usize::try_from(spine).ok().and_then(|s| spine_path(&topo, src, dst, s));
                let Some(path) = path else {
                    return Err(field(
                        "spine_rates",
                        format!("spines 0 to {}", net.ft_core_count - 1),
                        spine.to_string(),
                    ));
                };
                if !(share.is_finite() && share > 0.0) {
                    return Err(field("spine_rates", "positive shares".into(), share.to_string()));
                }
                shares.push((share, path));
            }
            let Some(paths) = split(&shares) else {
                return Err(field(
                    "spine_rates",
                    "shares in multiples of 1/64 (orrery splits a flow equally over the paths it lists)".into(),
                    format!("{:?}", r.spine_rates),
                ));
            };
            decisions.push(serde_json::json!({
                "at_iteration": r.iteration,
                "job": j.job_id.to_string(),
                "kind": "route",
                "step": part * steps + step,
                "flow": edge,
                "paths": paths,
            }));
        }
        let crossing: usize = jobs
            .iter()
            .map(|j| {
                let n = j.machines.len();
                let crossing_edges = (0..n)
                    .filter(|&e| n > 1 && rack(j.machines[e] as usize) != rack(j.machines[(e + 1) % n] as usize))
                    .count();
                // Every edge carries one flow per step, 2(n−1) steps per part.
                crossing_edges * 2 * n.saturating_sub(1) * j.layer_count as usize * j.iter_count as usize
            })
            .sum();
        let routed = decisions.iter().filter(|d| d["kind"] == "route").count();
        if routed < crossing {
            notes.push(format!(
                "{} of {crossing} cross-rack flows are not routed by the routing file: orrery hashes them onto a \
                 spine (ECMP), where psim's `random` scheme draws one",
                crossing - routed
            ));
        }
    }
    if same_rack + out_of_range > 0 {
        notes.push(format!(
            "{same_rack} routes of flows inside a rack and {out_of_range} for iterations or flows the jobs do not \
             have were left out (psim never uses them)"
        ));
    }
    let source = |p: &Option<PathBuf>| p.as_ref().map_or("none".into(), |p| p.display().to_string());
    let description = format!(
        "Imported from psim: placement {}, timing {}, routing {}; {} machines, {} per rack, {} spines; one psim time \
         unit = {} ms, link bandwidth {} = {} Gbit/s ({} bytes per size unit)",
        placement.display(),
        source(&files.timing),
        source(&files.routing),
        net.machine_count,
        leaf_spine.hosts_per_rack,
        net.ft_core_count,
        units.ms_per_unit,
        net.link_bandwidth,
        units.link_gbps,
        bytes_per_unit
    );
    let count = decisions.len();
    let out = Out {
        name: name.into(),
        seeds: vec![1],
        policies: vec!["pinned".into()],
        topology: OutTopology { leaf_spine },
        sim: OutSim { all_reduce: "steps".into(), skip: false },
        workload: OutWorkload { pins, job: out_jobs, decision: decisions },
    };
    let body =
        toml::to_string(&out).map_err(|e| PsimError::Json { file: placement.clone(), message: e.to_string() })?;
    let mut toml = String::new();
    for line in std::iter::once(description).chain(notes.iter().cloned()) {
        toml.push_str("# ");
        toml.push_str(&line);
        toml.push('\n');
    }
    toml.push_str(&body);
    Ok(Imported { toml, notes, jobs: jobs.len(), decisions: count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unequal_shares_repeat_a_path() {
        assert_eq!(split(&[(0.5, 0), (0.5, 1)]), Some(vec![0, 1]));
        assert_eq!(split(&[(0.75, 0), (0.25, 1)]), Some(vec![0, 0, 0, 1]));
        assert_eq!(split(&[(1.0 / 3.0, 2), (2.0 / 3.0, 0)]), Some(vec![2, 0, 0]));
        assert_eq!(split(&[(0.3141, 0), (0.6859, 1)]), None);
    }

    #[test]
    fn a_size_unit_is_a_millisecond_at_the_link_rate() {
        // 1 ms at 100 Gbit/s is 12.5 MB; psim's bandwidth 100 makes a unit 1/100 of it.
        let b = Units::default().bytes_per_unit(&PsimNetwork::default());
        assert!((b - 125_000.0).abs() < 1e-6, "{b}");
    }

    #[test]
    fn spine_k_is_the_path_over_spine_k() {
        let ls = LeafSpine {
            racks: 2,
            hosts_per_rack: 2,
            spines: 3,
            gpus_per_host: 1,
            gpu_type: "v100".into(),
            host_gbps: 100.0,
            uplink_gbps: 100.0,
        };
        let topo = ls.build("t").expect("builds");
        for k in 0..3 {
            let p = spine_path(&topo, 0, 3, k).expect("a path");
            let node = topo.node_by_name(&format!("spine{k}")).expect("spine");
            assert!(topo.paths(0, 3)[p].iter().any(|&l| topo.links[l].from == node || topo.links[l].to == node));
        }
        assert_eq!(spine_path(&topo, 0, 3, 3), None);
    }
}
