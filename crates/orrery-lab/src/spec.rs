//! An experiment file's types and their parsing: the topology, the
//! workload, scenarios, policies, seeds and the simulator's knobs, checked
//! with errors naming the file, line and field. The built-in default is
//! [`DEFAULT`].

use orrery_model::colocation::Colocation;
use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Topology};
use orrery_trace::generate::Mix;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What went wrong with an experiment: its file, its cluster, its
/// workload, a run, or its output. Each message names the file, field or
/// scenario it is about.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file does not parse, or a value is out of range or refers to
    /// something missing (`f.toml:7: workload.jobs: expected at most ...`).
    #[error("{0}")]
    Invalid(String),
    /// The cluster cannot be built: an unknown set-up, an unreadable or bad
    /// topology file, a bad leaf-spine or congested link.
    #[error("{0}")]
    Topology(String),
    /// A scenario's jobs cannot be made (a missing trace, a bad row) or
    /// cannot run on its cluster (a job larger than the cluster, a
    /// dependency cycle, a pin to a missing host).
    #[error("{0}")]
    Workload(String),
    /// A run panicked: a bug in orrery, named with the run that hit it so
    /// it can be reproduced (`orrery run FILE --policies P`).
    #[error(
        "scenario {scenario}, policy {policy}, seed {seed}: orrery panicked ({message}); please report this with the experiment file"
    )]
    Panicked {
        /// The scenario.
        scenario: String,
        /// The policy.
        policy: String,
        /// The seed.
        seed: u64,
        /// The panic's message.
        message: String,
    },
    /// An output file or folder could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An output table could not be serialised.
    #[error("{path}: {message}")]
    Serialise {
        /// The file.
        path: PathBuf,
        /// The serialiser's message.
        message: String,
    },
    /// A figure could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

/// An experiment file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name, for reports.
    pub name: String,
    /// What the experiment is, the first lines of its report (default: the
    /// file's leading `#` comment).
    #[serde(default)]
    pub description: Option<String>,
    /// The number the paper reports for this set-up, in the paper's words,
    /// shown beside orrery's headline.
    #[serde(default)]
    pub paper: Option<String>,
    /// The policy the report's headline measures against the baseline
    /// (default: the one with the best mean JCT gain, ideal networks aside).
    #[serde(default)]
    pub headline: Option<String>,
    /// Seeds; each policy runs once per seed.
    #[serde(default = "one_seed")]
    #[schemars(inner(range(min = 0, max = u64::MAX)))]
    pub seeds: Vec<u64>,
    /// Policies to compare (see `orrery run --help`).
    pub policies: Vec<String>,
    /// The cluster.
    pub topology: TopologySpec,
    /// The jobs.
    pub workload: WorkloadSpec,
    /// Simulation knobs.
    #[serde(default)]
    pub sim: SimOptions,
    /// Named variations of the workload (`[[scenario]]`); every policy runs
    /// in each. Without any, the workload runs as given.
    #[serde(default, rename = "scenario")]
    pub scenarios: Vec<Scenario>,
    /// The policy the comparison table measures the others against (default:
    /// the first).
    pub baseline: Option<String>,
    /// GPU sharing: how jobs on one GPU interfere (`[colocation]`, Castor).
    #[serde(default)]
    pub colocation: ColocationSpec,
    /// Teams sharing the cluster (`[[tenant]]`, issue 70): each takes a
    /// share of the workload's jobs and has a GPU quota the simulator admits
    /// them by, as the live service does.
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantSpec>,
    /// `[fair_share]`: tenants borrow idle quota by recent usage over share
    /// (Slurm's fair-share factor) instead of by borrowed GPUs over weight.
    #[serde(default)]
    pub fair_share: Option<FairShareSpec>,
    /// `[network]`: the transport the simulator models (issue 68): the
    /// max-min fluid model by default, or a congestion control over
    /// tail-drop or fair queues.
    #[serde(default)]
    pub network: NetworkSpec,
    /// Also replay each (scenario, policy)'s first seed with a probe on its
    /// busiest link, for the report's figures (set by `orrery run --out`).
    #[serde(skip)]
    pub detail: bool,
    /// Record every iteration of every run for `iterations.csv` (set by
    /// `orrery run --iterations`); every iteration is then simulated.
    #[serde(skip)]
    pub iterations: bool,
}

fn unit_weight() -> f64 {
    1.0
}

/// The simulated transport (`[network]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSpec {
    /// `fluid` (max-min rates, the default), `reno`, `cubic`, `bbr`,
    /// `dcqcn` or `mltcp-reno` (orrery_sim::transport).
    pub transport: TransportKind,
    /// `tail-drop` (one FIFO per link) or `fair` (a FIFO per flow).
    pub queueing: QueueingKind,
    /// Round trip with empty queues, µs.
    #[schemars(range(min = 1, max = 1e6))]
    pub base_rtt_us: f64,
    /// Each queue, ms of its link's rate.
    #[schemars(range(min = 0.0, max = 1e4))]
    pub buffer_ms: f64,
    /// Segment size, bytes (the testbed's 1,500 at its 0.01 rate scale is
    /// 150,000 at the model's rates).
    #[schemars(range(min = 1, max = 1e9))]
    pub mss_bytes: f64,
    /// What a full FIFO drops at once, bytes (default: a segment; the
    /// testbed's 64 KB GSO bursts at its 0.01 scale are 6,400,000).
    #[schemars(range(min = 1, max = 1e12))]
    pub burst_bytes: Option<f64>,
    /// Model time step, µs (default: the base round trip; each step costs
    /// O(flows · hops), so a step under a microsecond is refused).
    #[schemars(range(min = 1, max = 1e6))]
    pub step_us: Option<f64>,
    /// Retransmission timeout, ms: idle windows halve per timeout.
    #[schemars(range(min = 0, max = 1e6))]
    pub rto_ms: f64,
}

impl Default for NetworkSpec {
    fn default() -> Self {
        let t = orrery_sim::transport::TransportConfig::new(orrery_sim::transport::Control::Reno);
        NetworkSpec {
            transport: TransportKind::Fluid,
            queueing: QueueingKind::TailDrop,
            base_rtt_us: t.base_rtt_us,
            buffer_ms: t.buffer_ms,
            mss_bytes: t.mss_bytes,
            burst_bytes: None,
            step_us: None,
            rto_ms: t.rto_ms,
        }
    }
}

/// `[network] transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// Max-min fair rates the instant anything changes.
    #[default]
    Fluid,
    /// TCP Reno.
    Reno,
    /// TCP Cubic.
    Cubic,
    /// TCP BBR (v1).
    Bbr,
    /// RDMA's DCQCN.
    Dcqcn,
    /// Reno with MLTCP's iteration-aware increase.
    MltcpReno,
}

/// `[network] queueing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum QueueingKind {
    /// One FIFO per link.
    #[default]
    TailDrop,
    /// A FIFO per flow, served in turn.
    Fair,
    /// A FIFO per traffic class (0–7, set by a policy such as `crux`),
    /// served by strict priority.
    Priority,
}

impl NetworkSpec {
    /// How its transport shares a link among flows, for the policies
    /// ([`orrery_policy::Policy::set_flow_sharing`]): unequal for BBR over
    /// a FIFO (tail-drop, or one priority class), equal otherwise (per-flow
    /// fair queues even BBR out).
    pub fn flow_sharing(&self) -> orrery_policy::FlowSharing {
        orrery_policy::FlowSharing::of(self.transport == TransportKind::Bbr, self.queueing == QueueingKind::Fair)
    }

    /// The simulator's transport model (None: the fluid model).
    pub fn transport(&self) -> Option<orrery_sim::transport::TransportConfig> {
        use orrery_sim::transport::{Control, Queueing, TransportConfig};
        let control = match self.transport {
            TransportKind::Fluid => return None,
            TransportKind::Reno => Control::Reno,
            TransportKind::Cubic => Control::Cubic,
            TransportKind::Bbr => Control::Bbr,
            TransportKind::Dcqcn => Control::Dcqcn,
            TransportKind::MltcpReno => Control::MltcpReno,
        };
        Some(TransportConfig {
            control,
            queueing: match self.queueing {
                QueueingKind::TailDrop => Queueing::TailDrop,
                QueueingKind::Fair => Queueing::Fair,
                QueueingKind::Priority => Queueing::Priority,
            },
            base_rtt_us: self.base_rtt_us,
            buffer_ms: self.buffer_ms,
            mss_bytes: self.mss_bytes,
            burst_bytes: self.burst_bytes.unwrap_or(self.mss_bytes),
            step_us: self.step_us.unwrap_or(self.base_rtt_us),
            rto_ms: self.rto_ms,
        })
    }
}

/// A tenant of an experiment (`[[tenant]]`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Name (letters, digits, `_`).
    pub name: String,
    /// GPUs guaranteed to it.
    #[schemars(range(min = 0, max = 10_000_000))]
    pub gpus: u64,
    /// GPUs of other tenants' idle quota it may borrow beyond `gpus`.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10_000_000))]
    pub borrow_limit: u64,
    /// Its weight in fair sharing of borrowed GPUs (default 1).
    #[serde(default = "unit_weight")]
    #[schemars(range(min = 0.001, max = 1000))]
    pub weight: f64,
    /// The share of the workload's jobs that are its own, drawn per job
    /// (seeded); jobs left over by shares summing under 1 are untenanted.
    #[schemars(range(min = 0, max = 1))]
    pub share: f64,
}

/// `[fair_share]` of an experiment.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FairShareSpec {
    /// Past usage halves every this many seconds (Slurm's
    /// `PriorityDecayHalfLife`).
    #[schemars(range(min = 1, max = 1e9))]
    pub half_life_s: f64,
}

/// Where the policies' interference ratios come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum XiSource {
    /// The measured ξ the simulator also applies.
    #[default]
    True,
    /// The boosted trees' predictions (Castor §6.4).
    Predicted,
}

/// `[colocation]`: the ground truth of GPU sharing and what policies know of it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ColocationSpec {
    /// Spatial (MPS; ξ measured by Gavel) or temporal (time slicing).
    pub mode: orrery_model::colocation::SharingMode,
    /// ξ the policies see: `true` or `predicted`.
    pub xi: XiSource,
    /// GPU type whose measurements are read.
    pub gpu: String,
}

impl Default for ColocationSpec {
    fn default() -> Self {
        ColocationSpec { mode: orrery_model::colocation::SharingMode::Spatial, xi: XiSource::True, gpu: "v100".into() }
    }
}

impl ColocationSpec {
    /// (ground truth for the simulator, estimate for the policies) from
    /// Gavel's samples. The predictor is trained on 80% of Gavel's pairs
    /// (split seed 1).
    pub(crate) fn build(
        &self,
        samples: &[orrery_trace::interference::Sample],
    ) -> Result<(Colocation, Colocation), String> {
        let truth = orrery_trace::interference::xi_table(samples, &self.gpu, None)
            .map_err(|e| format!("colocation.gpu: {e}"))?;
        let seen = match self.xi {
            XiSource::True => truth.clone(),
            XiSource::Predicted => orrery_trace::interference::xi_table(samples, &self.gpu, Some(1))
                .map_err(|e| format!("colocation.xi = \"predicted\": {e}"))?,
        };
        Ok((Colocation { mode: self.mode, table: truth }, Colocation { mode: self.mode, table: seen }))
    }
}

/// A named variation of the experiment's workload: a load, a job count, or
/// its own listed jobs and pins (`S1`..`S5`, `load=0.9`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label in `summary.json` and the tables.
    pub name: String,
    /// Replaces `workload.load`.
    #[schemars(range(min = MIN_LOAD, max = MAX_LOAD))]
    pub load: Option<f64>,
    /// Replaces `workload.jobs`.
    #[schemars(range(min = 1, max = MAX_JOBS))]
    pub jobs: Option<usize>,
    /// Replaces the workload by these jobs (`[[scenario.job]]`).
    #[serde(default, rename = "job")]
    pub listed: Vec<JobSpec>,
    /// Replaces `workload.pins`.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, Vec<Pin>>")]
    pub pins: std::collections::BTreeMap<String, Vec<(usize, u32)>>,
    /// Replaces `workload.decision` (`[[scenario.decision]]`).
    #[serde(default, rename = "decision")]
    pub decisions: Vec<serde_json::Value>,
    /// Host links congested in this scenario, on top of the topology's.
    #[serde(default)]
    pub congested: Vec<Congestion>,
    /// Replaces `workload.fragmentation`.
    #[schemars(range(min = 0, max = 1))]
    pub fragmentation: Option<f64>,
    /// Replaces the experiment's topology.
    pub topology: Option<TopologySpec>,
    /// Replaces `workload.mix` (job sizes, batch: FORESIGHT's Fig. 7 grids).
    pub mix: Option<Mix>,
    /// Replaces `colocation.xi` (Castor's ablation: `xi=predicted`).
    pub xi: Option<XiSource>,
    /// Replaces `colocation.mode` (spatial or temporal sharing).
    pub sharing: Option<orrery_model::colocation::SharingMode>,
    /// Replaces `workload.durations`.
    pub durations: Option<PathBuf>,
    /// Replaces `workload.work_scale`.
    #[schemars(range(min = MIN_WORK_SCALE, max = 1e3))]
    pub work_scale: Option<f64>,
    /// Replaces `workload.elastic`.
    #[schemars(range(min = 0, max = 1))]
    pub elastic: Option<f64>,
    /// Replaces `sim.gpus` (which GPUs of a host a job is given).
    pub gpus: Option<orrery_model::rails::GpuAllocation>,
}

fn one_seed() -> Vec<u64> {
    vec![1]
}

/// Where the cluster comes from.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// A built-in set-up (`orrery topo list`).
    pub builtin: Option<String>,
    /// A topology file, relative to the experiment file.
    pub file: Option<PathBuf>,
    /// A generated leaf-spine.
    pub leaf_spine: Option<LeafSpine>,
    /// Congested host links (`[[topology.congested]]`).
    #[serde(default)]
    pub congested: Vec<Congestion>,
}

/// A host link congested by traffic the scheduler does not control
/// (Metronome §IV-A's iPerf3 node): in both directions an endless flow of
/// `share` of the link's capacity competes max-min with the jobs (so a lone
/// job flow gets half the link), and the link gains `latency_us`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Congestion {
    /// Host name.
    pub host: String,
    /// Rate of the competing flow as a fraction of the link (default 1: iPerf3 at full speed).
    #[serde(default = "full")]
    #[schemars(range(min = 1e-3, max = 1))]
    pub share: f64,
    /// Added one-way latency, µs (default 1,000).
    #[serde(default = "one_ms")]
    #[schemars(range(min = 0, max = 1e6))]
    pub latency_us: f64,
}

fn full() -> f64 {
    1.0
}

fn one_ms() -> f64 {
    1000.0
}

/// Applies congestion to a topology's host links: their added latency, and
/// the background flows for [`SimConfig::background`].
pub(crate) fn congest(mut t: Topology, congested: &[Congestion]) -> Result<(Topology, Vec<(usize, f64)>), String> {
    let mut background = Vec::new();
    for (i, c) in congested.iter().enumerate() {
        let Some(h) = t.hosts.iter().position(|h| h.name == c.host) else {
            return Err(format!("congested[{i}].host: no host named {:?} in {}", c.host, t.name));
        };
        if !(c.share > 0.0 && c.share <= 1.0 && c.latency_us >= 0.0 && c.latency_us.is_finite()) {
            return Err(format!("congested[{i}]: expected 0 < share <= 1 and latency_us >= 0"));
        }
        for (k, l) in t.links.iter_mut().enumerate().filter(|(_, l)| l.from == h || l.to == h) {
            background.push((k, c.share * l.gbps));
            l.latency_us += c.latency_us;
        }
    }
    Ok((t, background))
}

/// Where the jobs come from.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `poisson` or `snapshot` (jobs from the zoo, CASSINI's mix by default).
    pub generator: Option<String>,
    /// A trace file, relative to the experiment file.
    pub trace: Option<PathBuf>,
    /// Trace format (sniffed when absent).
    pub format: Option<orrery_trace::Format>,
    /// Number of jobs to generate, or the first N of the trace.
    #[schemars(range(min = 1, max = MAX_JOBS))]
    pub jobs: Option<usize>,
    /// Target load for `poisson`.
    #[schemars(range(min = MIN_LOAD, max = MAX_LOAD))]
    pub load: Option<f64>,
    /// Generated job mix.
    pub mix: Option<Mix>,
    /// Jobs listed in the file (`[[workload.job]]`), instead of a generator or trace.
    #[serde(default, rename = "job")]
    pub listed: Vec<JobSpec>,
    /// For `generator = "fragmented"`: the share of ring flows that cross
    /// racks (FORESIGHT §II; default 0.5).
    #[schemars(range(min = 0, max = 1))]
    pub fragmentation: Option<f64>,
    /// For `generator = "components"`: mean gap between arrivals, s.
    #[schemars(range(min = 1e-6, max = orrery_model::job::MAX_ARRIVAL_S))]
    pub interarrival_s: Option<f64>,
    /// For `generator = "pollux-sample"`: a submission series
    /// (`cluster_throughput.csv` of Lucid's Venus data) whose busiest 8 hours
    /// re-draw the arrivals (Castor's Venus workload).
    pub arrivals: Option<PathBuf>,
    /// For `generator = "pollux-sample"`: the share of jobs marked high
    /// priority (Metronome's class), drawn per seed; default 0.
    #[schemars(range(min = 0, max = 1))]
    pub high_priority: Option<f64>,
    /// For `generator = "pollux-sample"`: a Philly trace (Pollux's
    /// `philly.csv`) whose recorded durations replace the jobs' iterations to
    /// converge: each job runs, alone, a duration drawn (seeded) from the
    /// trace's jobs of its GPU count submitted in the trace's busiest 8 hours
    /// (`orrery_trace::castor::philly_durations`). Default: Pollux's
    /// iterations to converge.
    pub durations: Option<PathBuf>,
    /// For `generator = "pollux-sample"`: every job's work (iterations or
    /// seconds) times this factor, arrivals and sizes unchanged: the knob
    /// that isolates job length from everything else. Default 1.
    #[schemars(range(min = MIN_WORK_SCALE, max = 1e3))]
    pub work_scale: Option<f64>,
    /// For `generator = "llm-cluster"`: the share of SFT and pre-training
    /// jobs whose users allow elastic data parallelism (`parallelism.dp_min`
    /// = 1, or the EP width of a MoE), drawn per job; default 0 (rigid).
    #[schemars(range(min = 0, max = 1))]
    pub elastic: Option<f64>,
    /// For the `pinned` policy: job id → [[host, GPUs], ...].
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, Vec<Pin>>")]
    pub pins: std::collections::BTreeMap<String, Vec<(usize, u32)>>,
    /// Decisions applied at given times whatever the policy decides
    /// (`[[workload.decision]]`: `at_s`, `job` by id, and a decision's
    /// fields, e.g. `kind = "shift"`, `ms = 30`); docs/guide/simulation.md, "Scripted decisions", lists the kinds.
    #[serde(default, rename = "decision")]
    pub decisions: Vec<serde_json::Value>,
}

/// Simulation knobs of an experiment.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SimOptions {
    /// Relative standard deviation of compute times.
    #[schemars(range(min = 0, max = 0.99))]
    pub jitter: f64,
    /// Stop at this simulated time, s.
    #[schemars(range(min = 1e-6, max = 2.0 * orrery_model::job::MAX_ARRIVAL_S))]
    pub max_time_s: Option<f64>,
    /// Fast-forward undisturbed jobs (default on; `orrery run --no-skip` turns it off).
    pub skip: bool,
    /// Checkpoint-restore time of a preempted job when it restarts, s.
    #[schemars(range(min = 0, max = orrery_model::job::MAX_TIME_S))]
    pub restart_penalty_s: f64,
    /// How ring collectives run: `flows` (one flow per ring edge for the
    /// whole collective, the default) or `steps` (NCCL's 2(n−1) steps with a
    /// barrier between them).
    pub all_reduce: AllReduce,
    /// Which GPUs of a host a job is given: `lowest_free` (as Slurm and
    /// Kubernetes' device plugin hand them out) or `rail_aligned` (the same
    /// indices on each of its hosts where free). Unset: the policy's choice
    /// (`orrery`'s part `rails`), else the lowest free. Only a rail fabric
    /// (`h100-rails`) routes by them.
    pub gpus: Option<orrery_model::rails::GpuAllocation>,
    /// Admit jobs by the `[[tenant]]` quotas (default on). Off, the
    /// tenants only label their jobs and the report still measures each
    /// against its quota: the same cluster without quotas, for comparison.
    pub enforce_quotas: bool,
    /// Decide in rounds every this many seconds (Volcano's
    /// `schedulePeriod`, 1 s by default there): arrivals and departures
    /// wait for the next round and share its decision. Unset: a decision
    /// at each arrival and departure (kube-scheduler's way, the default).
    #[schemars(range(min = 1e-3, max = 3600))]
    pub schedule_period_s: Option<f64>,
}

/// How the simulator runs a ring collective (`[sim] all_reduce`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AllReduce {
    /// One flow per ring edge carries the whole collective.
    #[default]
    Flows,
    /// NCCL's ring steps, each a barrier.
    Steps,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            jitter: 0.0,
            max_time_s: None,
            skip: true,
            restart_penalty_s: 10.0,
            all_reduce: AllReduce::Flows,
            gpus: None,
            enforce_quotas: true,
            schedule_period_s: None,
        }
    }
}

/// The built-in default experiment: 16 hosts of 4 A100s with 50 Gbit/s NICs
/// (CASSINI's NIC rate) in 4 racks under 2 spines at 2:1, and a Poisson
/// workload of 60 jobs from CASSINI's mix at load 0.8, comparing FIFO,
/// random placement and the ideal network.
pub const DEFAULT: &str = r#"
name = "default"
description = "orrery's built-in default: 16 hosts of 4 A100s with 50 Gbit/s NICs in 4 racks under 2 spines at 2:1 oversubscription, and 60 jobs from CASSINI's model mix arriving as a Poisson process at 80% load. FIFO with packed placement, random placement, and FIFO on an ideal (non-blocking) network show what the network costs. Try `orrery run experiments/cassini-poisson.toml` for a paper's experiment."
seeds = [1]
policies = ["fifo", "random", "ideal"]
[topology.leaf_spine]
racks = 4
hosts_per_rack = 4
spines = 2
gpus_per_host = 4
gpu_type = "a100"
host_gbps = 50.0
uplink_gbps = 50.0
[workload]
generator = "poisson"
jobs = 60
load = 0.8
[sim]
jitter = 0.02
"#;

/// Parses an experiment; messages carry `file:line:column`.
pub fn parse(file: &str, text: &str) -> Result<Experiment, ExperimentError> {
    // Every number against its declared range (the attributes above).
    let e: Experiment = orrery_model::setups::parse_checked(file, text).map_err(|e| {
        let msg = e.to_string();
        if msg.contains(": workload.job: ") {
            format!(
                "{msg} (workload.job is a list of [[workload.job]] tables; for a number of generated jobs use `jobs`)"
            )
        } else {
            msg
        }
    })
    .map_err(ExperimentError::Invalid)?;
    let mut e = check(file, e).map_err(|msg| ExperimentError::Invalid(with_line(file, text, &msg)))?;
    if e.description.is_none() {
        e.description = leading_comment(text);
    }
    Ok(e)
}

/// The `#` comment lines at the top of a file, as one paragraph.
fn leading_comment(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    let joined = lines.join(" ").trim().to_string();
    (!joined.is_empty()).then_some(joined)
}

/// Adds the line of the field an error names: `f.toml: workload.jobs: ...`
/// becomes `f.toml:7: workload.jobs: ...`.
fn with_line(file: &str, text: &str, msg: &str) -> String {
    let Some(rest) = msg.strip_prefix(&format!("{file}: ")) else { return msg.to_string() };
    let path: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || "._[]".contains(*c)).collect();
    match orrery_model::setups::line_of(text, &path) {
        Some(line) if !path.is_empty() => format!("{file}:{line}: {rest}"),
        _ => msg.to_string(),
    }
}

/// The checks serde cannot make, each error naming the file and field.
pub(crate) fn check(file: &str, e: Experiment) -> Result<Experiment, String> {
    let names = || orrery_policy::CATALOGUE.iter().map(|c| c.0).collect::<Vec<_>>().join(", ");
    if e.policies.is_empty() {
        return Err(format!("{file}: policies: expected at least one of {}", names()));
    }
    if let Some(p) = e.policies.iter().find(|p| policy(p, 0, &Default::default()).is_none()) {
        return Err(format!(
            "{file}: policies: unknown policy {p:?}; expected one of {} (see `orrery policies`)",
            names()
        ));
    }
    for (i, sc) in e.scenarios.iter().enumerate() {
        if e.scenarios[..i].iter().any(|o| o.name == sc.name) {
            return Err(format!("{file}: scenario[{i}]: name {:?} is used twice", sc.name));
        }
    }
    if let Some(b) = e.baseline.as_ref().filter(|b| !e.policies.contains(b)) {
        return Err(format!("{file}: baseline: {b:?} is not one of the policies"));
    }
    if let Some(h) = e.headline.as_ref().filter(|h| !e.policies.contains(h)) {
        return Err(format!("{file}: headline: {h:?} is not one of the policies"));
    }
    if e.seeds.is_empty() {
        return Err(format!("{file}: seeds: expected at least one seed"));
    }
    for (i, t) in e.tenants.iter().enumerate() {
        if t.name.is_empty() || !t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{file}: tenant[{i}].name: expected letters, digits and '_', found {:?}", t.name));
        }
        if e.tenants[..i].iter().any(|o| o.name == t.name) {
            return Err(format!("{file}: tenant[{i}].name: {:?} is used twice", t.name));
        }
    }
    if e.fair_share.is_some() && e.tenants.is_empty() {
        return Err(format!("{file}: fair_share: shares usage between tenants; expected [[tenant]] tables"));
    }
    let shares: f64 = e.tenants.iter().map(|t| t.share).sum();
    if shares > 1.0 + 1e-9 {
        return Err(format!("{file}: tenant: the shares of the jobs sum to {shares}, expected at most 1"));
    }
    // Numbers that size work or memory (`jobs`) were checked against their
    // ranges before anything is allocated (issue 21: `jobs =
    // 9223372036854775807` aborted with "capacity overflow").
    let w = &e.workload;
    if w.high_priority.is_some() && w.generator.as_deref() != Some("pollux-sample") {
        return Err(format!("{file}: workload.high_priority: only read with generator = \"pollux-sample\""));
    }
    let durations = w.durations.is_some() || e.scenarios.iter().any(|s| s.durations.is_some());
    if durations && w.generator.as_deref() != Some("pollux-sample") {
        return Err(format!("{file}: workload.durations: only read with generator = \"pollux-sample\""));
    }
    let scales = std::iter::once(w.work_scale).chain(e.scenarios.iter().map(|s| s.work_scale)).flatten();
    if scales.count() > 0 && w.generator.as_deref() != Some("pollux-sample") {
        return Err(format!("{file}: workload.work_scale: only read with generator = \"pollux-sample\""));
    }
    Ok(e)
}

/// A trace error as a message about the workload: a field's path goes
/// under `workload.` (`workload.mix.models: ...`).
pub(crate) fn in_workload(e: orrery_trace::TraceError) -> String {
    match e {
        orrery_trace::TraceError::Field { field, problem } => format!("workload.{field}: {problem}"),
        other => format!("workload: {other}"),
    }
}

/// The most jobs one workload may ask for (the full Philly trace has 82,247).
pub const MAX_JOBS: usize = 1_000_000;
/// The lowest and highest load a generator is asked for (the fraction of
/// the cluster's GPUs jobs would keep busy alone).
pub const MIN_LOAD: f64 = 1e-3;
/// See [`MIN_LOAD`].
pub const MAX_LOAD: f64 = 100.0;
/// The smallest `work_scale`.
pub const MIN_WORK_SCALE: f64 = 1e-6;

/// The declared ranges of a pin: (host index, GPUs on it).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct Pin(
    #[schemars(range(min = 0, max = orrery_model::topology::MAX_HOSTS))] usize,
    #[schemars(range(min = 0, max = orrery_model::topology::MAX_GPUS_PER_HOST))] u32,
);

/// A policy by name, with the experiment's pins ([`orrery_policy::with_pins`]).
pub(crate) fn policy(
    name: &str,
    seed: u64,
    pins: &std::collections::BTreeMap<String, Vec<(usize, u32)>>,
) -> Option<Box<dyn orrery_policy::Policy>> {
    orrery_policy::with_pins(name, seed, pins)
}
