//! `orrery`: the five papers' decisions in one scheduler (issues 19, 38),
//! built from the parts the single-paper policies use. Each part acts only
//! where its predicted benefit is positive, judged per job and per round
//! from what the policy sees, and each can be switched off by name for
//! ablations (`orrery-no-share`, `orrery-no-bandwidth-no-routes`, ...).
//!
//! A round, from the inside out:
//! 1. **Order** (Castor's [`crate::castor::colocate::Colocator`], part
//!    `preempt`): waiting jobs by expected remaining time, backfilling;
//!    a waiting job preempts running low-priority jobs with more time left
//!    when that lets it start (shortest remaining time first). Chosen from
//!    evidence: on Philly's heavy-tailed durations `srtf` beats `sjf`,
//!    `themis` and `tiresias` at both loads, and without preemption
//!    `orrery`'s mean JCT on Philly is 16-29% longer (docs/results.md). High-priority
//!    jobs are not ordered first (a long one ahead of short ones cost the
//!    core 53% mean JCT at load 1.5); they are never preempted or shared.
//!    Nor is a job that has already waited longer than its time alone
//!    (time in the system less time on GPUs): shortest remaining time
//!    first otherwise preempts a long job again and again, and those jobs
//!    made `orrery`'s p99. The bound is Tiresias' starvation limit applied to
//!    preemption, at the job's own time alone; on benchmark-network it cut
//!    the p99 by 3-20% on all three seed sets (docs/results.md). A job
//!    that has waited 6 times its time alone goes first, preempts as a
//!    shorter job would, and otherwise holds an EASY-backfilling
//!    reservation (part `reserve`, [`reserve`]): gangs on one-GPU hosts
//!    waited up to 16 times their time alone at load 1.5.
//! 2. **Size** (Pollux's goodput, part `size`): a job the free GPUs cannot
//!    hold starts now on fewer when, by its iteration time on that many GPUs
//!    and Pollux's statistical efficiency, it would end before waiting for
//!    the next free GPUs (the running jobs' remaining times) and running at
//!    its request. When GPUs are still idle after the round and no waiting
//!    job can use them (all started or, with preemption, all needing more
//!    GPUs than are free), a job started in the round takes up to twice
//!    its request (Pollux's cap) if that ends it at least 10% sooner; when
//!    nobody waits at all, a running one does too (it restarts on the new
//!    size), the job a worker speeds up most relative to its time now
//!    first (Pollux's greedy marginal; on four-GPU hosts 245 → 237 s mean
//!    JCT at load 1, twelve seeds). On Philly a 48-GPU job waiting for hours used to hold every
//!    other job at its request beside 30-40 idle GPUs. GPU time has a
//!    price while others wait: a low-priority job starts on the k ≤ n
//!    workers that minimise its own time plus the delay its GPU-seconds
//!    impose on the jobs behind it and on those expected to arrive before
//!    the work behind it drains ([`prices::gpu_second_price`]), so
//!    a job that spends its extra GPUs on the network starts smaller when
//!    the cluster is busy, and grows back once nobody waits. On
//!    benchmark-network at load 1.5 this is what beats Pollux
//!    (docs/results.md). Every size, at the start, shrunk or grown, is
//!    judged where the host scheduler's first fit would put it now, not
//!    packed on an empty cluster (Pollux's throughput is a function of the
//!    placement, §3.2): on hosts of several GPUs a job whose request would
//!    span two NICs starts on the free GPUs of one host when that is
//!    faster (on 8-GPU hosts `orrery`'s mean JCT fell from 430 to 183 s).
//!    It holds on one-GPU hosts too, where a size that stays in one rack
//!    beats one that crosses an oversubscribed uplink. A size is judged
//!    beside the traffic already on its links: its network phase grows by
//!    the busiest link's summed duty cycles of the running jobs
//!    ([`duty::link_duty`]), so a ring that would meet others on
//!    a NIC or uplink starts where it would not (high-priority jobs on
//!    8-GPU hosts: 1.22-1.25× their time alone → 1.13-1.15×).
//! 3. **Sharing** (Castor, part `share`): otherwise it shares a running
//!    job's GPUs when Theorem 1 says the pair ends sooner together than if
//!    the newcomer waits for the next free GPUs, with each job's ξ raised
//!    by the time its network phase waits for the partner's traffic when
//!    both cross the network from the hosts they share
//!    ([`duty::shared_nic_xi`]). The paper compares with
//!    waiting for *that partner*, which on Philly shared where free GPUs
//!    came back much sooner and slowed low-priority jobs 1.3-2x.
//! 4. **Placement** (Plebiscito, part `bandwidth`, [`BidsWhenLoaded`]):
//!    consolidated first fit, unless that placement sends traffic over a
//!    fabric link (leaf to spine) running jobs already load; then the
//!    bandwidth-aware SGF bids (Eq. 9, alpha = 0.5), the centralised greedy
//!    its Theorem 1 compares the auction with. On an idle fabric bids only
//!    fragment the cluster; a host's own loaded NIC does not call them, as
//!    bidding away from it spreads the job over more NICs. A mesh keeps
//!    first fit's placement when the bids would put it on more hosts (its
//!    TP and EP groups split over partial hosts). On a rail-optimised
//!    fabric (part `rails`, [`rails`]) a host the placement fills only in
//!    part may then be swapped for one of its unit whose free GPUs put
//!    fewer bits on NICs other jobs' flows use.
//! 5. **Interleaving** (CASSINI, [`crate::cassini::Cassini`], with
//!    Metronome's priorities, part `interleave`): one time-shift per job from
//!    the Affinity graph, traversed from the highest-priority job, which is
//!    never moved (Metronome Eq. 16); only jobs that share a link get one,
//!    and a job drifting more than 5% is re-aligned. With the bids on,
//!    CASSINI shifts the host scheduler's placement and draws no other
//!    candidates (one network-aware placement at a time; random candidates
//!    cost 8-10% mean JCT on benchmark-network, and the host scheduler's
//!    first fit per rack was even on average: better on the 4:1 check,
//!    worse on four-GPU hosts, docs/results.md). Without them it ranks 10
//!    candidates, the host scheduler's first fit anchored at each rack, the
//!    less local ones last.
//! 6. **Routes** (FORESIGHT, [`crate::foresight::policy::Foresight`], part
//!    `routes`): on a fabric of several spines, cross-rack flows are spread
//!    over spines by edge colouring; flows that stay in a rack are not
//!    touched.
//!
//! Where two ideas conflict, the rule and why:
//! - *A FORESIGHT delay against a CASSINI/Metronome shift*: the shift wins.
//!   FORESIGHT contributes its routes only (its `routes` mode): its
//!   per-iteration delays and throttles re-time every job each iteration and
//!   would undo the interleaving, which costs nothing in bandwidth. With
//!   interleaving switched off, FORESIGHT's full plan (delays, throttles,
//!   routes) runs instead.
//! - *Sharing a GPU with a high-priority job*: never. Sharing slows both
//!   partners by their interference ratio ξ (1.1–2× in Gavel's
//!   measurements), and Metronome's promise is that a high-priority job is
//!   not slowed. A high-priority newcomer waits for free GPUs rather than
//!   share (or preempts low-priority jobs with more time left); it is
//!   itself never preempted.
//! - *A shared job and interleaving*: a job started on shared GPUs is not
//!   a CASSINI candidate (its GPUs are fixed by its partner); it runs
//!   outside the Affinity graph, without a time-shift.
//! - *CASSINI's loop rule against work conservation*: CASSINI drops every
//!   candidate whose Affinity graph has a loop and the job waits; here it
//!   starts on the host scheduler's (bid) placement without a time-shift
//!   ([`OnLoop::RunUnaligned`]). Measured on the benchmark before this rule
//!   (load 1, seed 1): mean queueing time 7,849 s, against 141 s with it
//!   (docs/results.md).
//!
//! Per round: the Colocator's O(Q log Q + Q·(H + R log R)), its
//! preemption's O((Q + R) log(Q + R)) plus one trial placement of the
//! deserving jobs per victim, O(n) sizes
//! per job that does not fit, the loaded links' O(Σ links of the running
//! jobs) (each job's links rebuilt only when its hosts change,
//! [`crate::memo::PerPlacement`]) and the bids' O(W·H) per job whose first
//! fit crosses them (their cluster state, O(R + H), built at the round's
//! first placement that needs it: built every round, it more than doubled
//! `orrery`'s decision median at 16,384 hosts), CASSINI's candidates each
//! scored on the region of jobs they would share links with, each region's
//! sums kept while it holds the same jobs (a round that regrows all 2,048
//! jobs of a half-idle 4,096 × 8 cluster: 2.75 s when each was scored over
//! all running jobs, 18 / 41 ms with rings inside / across racks on
//! 2026-12-01), a growing job's shape kept per size and hosts, and
//! FORESIGHT's colouring of the flows crossing racks when the set of
//! running jobs changes.

use crate::baseline::consolidated;
use crate::cassini::{Cassini, OnLoop};
pub mod duty;
#[cfg(test)]
mod engine_tests;
mod on_links;
mod preempt;
pub mod prices;
pub mod rails;
pub mod reserve;
mod sizing;

use crate::castor::colocate::{Colocator, Rule};
use crate::foresight::policy::{Foresight, Mode};
use crate::memo::PerPlacement;
use crate::placement::{Hosts, Placement, capped};
use crate::plebiscito::Bidding;
use crate::{ClusterView, Decision, JobId, Policy, RunningJob};
use on_links::OnLinks;
use orrery_model::placed::place;
use orrery_model::{HostId, JobSpec, LinkId};
use orrery_plebiscito::utility::Utility;

/// The parts, by the name that switches each off (`orrery-no-<part>`), with
/// what each does.
pub const PARTS: &[(&str, &str)] = &[
    ("share", "Castor: GPU sharing where Theorem 1 pays (off: the same order and backfilling, free GPUs only)"),
    (
        "bandwidth",
        "Plebiscito: workers placed by bandwidth-aware SGF bids, centralised, where first fit would cross a loaded fabric link (off: consolidated first fit)",
    ),
    (
        "interleave",
        "CASSINI candidates and time-shifts, the highest-priority job as reference (Metronome Eq. 16), 5% drift rule",
    ),
    ("routes", "FORESIGHT: spines by edge colouring (routes only; without interleave, its delays and throttles too)"),
    (
        "size",
        "Pollux's goodput: a job that free GPUs cannot hold starts on fewer when that ends sooner than waiting for the next free GPUs; a low-priority job starts on fewer when its GPU time, priced by the jobs it delays, costs more than the time it saves (jobs that spend their GPUs on the network); on GPUs no waiting job can use (with preemption, a job that needs more than are free cannot), a job started in the round takes up to twice its request when that is 10% faster; when nobody waits, a running job restarts on up to twice its request when that is 10% faster, the job a worker speeds up most first; every size judged where first fit would place it now (a job whose request would span two NICs starts on one host's free GPUs when that is faster)",
    ),
    (
        "preempt",
        "shortest remaining time first: a waiting job preempts running low-priority jobs with more time left, unless they have already waited longer than their time alone (off: non-preemptive SJF)",
    ),
    (
        "reserve",
        "the waiting job starved most (waited 6 times its time alone or more) goes first, may preempt as a shorter job would, and if it still cannot start holds an EASY-backfilling reservation: jobs behind it start only if they end before its GPUs free up or take GPUs it leaves over",
    ),
    (
        "rails",
        "on a rail-optimised fabric, a job gets the same GPU indices on each of its hosts where they are free, so its ranks send on their own rails (off: the lowest free GPUs, as Slurm and the device plugin give them)",
    ),
];

/// Which parts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Castor's GPU sharing.
    pub share: bool,
    /// Plebiscito's bandwidth-aware placement.
    pub bandwidth: bool,
    /// CASSINI/Metronome interleaving.
    pub interleave: bool,
    /// FORESIGHT's routes.
    pub routes: bool,
    /// Pollux's goodput-aware sizing at the start.
    pub size: bool,
    /// Preemption of running jobs with more time left (SRTF).
    pub preempt: bool,
    /// A starved job first, promoted and reserved for.
    pub reserve: bool,
    /// Rail-aligned GPUs on a rail-optimised fabric.
    pub rails: bool,
}

impl Parts {
    /// Every part on.
    pub const ALL: Parts = Parts {
        share: true,
        bandwidth: true,
        interleave: true,
        routes: true,
        size: true,
        preempt: true,
        reserve: true,
        rails: true,
    };

    /// `orrery` or `orrery-no-<part>[-no-<part>...]`, parts as in [`PARTS`].
    pub fn parse(name: &str) -> Option<Parts> {
        let mut rest = name.strip_prefix("orrery")?;
        let mut parts = Parts::ALL;
        while let Some(tail) = rest.strip_prefix("-no-") {
            let (part, next) = PARTS
                .iter()
                .map(|p| p.0)
                .find_map(|p| tail.strip_prefix(p).filter(|n| n.is_empty() || n.starts_with('-')).map(|n| (p, n)))?;
            let slot = parts.slot(part);
            if !*slot {
                return None; // named twice
            }
            *slot = false;
            rest = next;
        }
        rest.is_empty().then_some(parts)
    }

    fn slot(&mut self, part: &str) -> &mut bool {
        match part {
            "share" => &mut self.share,
            "bandwidth" => &mut self.bandwidth,
            "interleave" => &mut self.interleave,
            "size" => &mut self.size,
            "preempt" => &mut self.preempt,
            "reserve" => &mut self.reserve,
            "rails" => &mut self.rails,
            _ => &mut self.routes,
        }
    }

    /// The name that builds these parts.
    pub fn name(self) -> String {
        let mut name = String::from("orrery");
        let mut copy = self;
        for (part, _) in PARTS {
            if !*copy.slot(part) {
                name.push_str("-no-");
                name.push_str(part);
            }
        }
        name
    }

    /// The parts that run, by name (for reports and `orrery policies`).
    pub fn running(self) -> Vec<&'static str> {
        let mut copy = self;
        PARTS.iter().map(|p| p.0).filter(|p| *copy.slot(p)).collect()
    }
}

/// The combined policy: the parts composed as the module doc says,
/// reported under one name.
pub struct Combined {
    parts: Parts,
    inner: Box<dyn Policy>,
}

impl Combined {
    /// The policy with `parts`; `seed` draws CASSINI's extra candidates.
    pub fn new(parts: Parts, seed: u64) -> Self {
        let mut host = Colocator::new(Rule::Bsbf);
        host.share = parts.share;
        host.spare_high_priority = true;
        host.next_free = true;
        host.nic_interference = true;
        host.shrink = parts.size;
        host.price_gpu_time = parts.size;
        host.preempt = parts.preempt;
        host.starvation_guard = parts.preempt;
        host.reserve_after = parts.reserve.then_some(reserve::STARVED_AFTER);
        if parts.bandwidth {
            host.placement = Some(Box::new(BidsWhenLoaded { rails: parts.rails, ..BidsWhenLoaded::default() }));
        }
        let mut inner: Box<dyn Policy> = Box::new(host);
        if parts.interleave {
            let mut cassini = Cassini::new(inner, seed ^ 0xCA55);
            cassini.on_loop = OnLoop::RunUnaligned;
            // One network-aware placement at a time: with the bids on,
            // CASSINI shifts the host scheduler's choice and draws no other
            // candidates (random ones cost 8-10% mean JCT on
            // benchmark-network, seed 1; first fit per rack was even on
            // average; docs/results.md).
            if parts.bandwidth {
                cassini.candidates = 1;
            }
            inner = Box::new(cassini);
        }
        if parts.routes {
            let mode = if parts.interleave { Mode::Routes } else { Mode::Foresight };
            inner = Box::new(Foresight::new(inner, mode));
        }
        Combined { parts, inner }
    }

    /// Which parts run.
    pub fn parts(&self) -> Parts {
        self.parts
    }
}

impl Policy for Combined {
    fn name(&self) -> String {
        self.parts.name()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        self.inner.schedule(view)
    }

    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: crate::Iteration) -> Vec<Decision> {
        self.inner.on_iteration(view, job, it)
    }

    fn iteration_needs(&self, job: JobId, it: &crate::Iteration) -> crate::IterationNeeds {
        self.inner.iteration_needs(job, it)
    }

    fn observes_iterations(&self) -> bool {
        self.inner.observes_iterations()
    }

    fn watches(&self, job: JobId) -> bool {
        self.inner.watches(job)
    }

    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        self.inner.queue_order(view)
    }

    fn tick_s(&self) -> Option<f64> {
        self.inner.tick_s()
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        self.inner.counters()
    }

    fn set_colocation(&mut self, estimate: &orrery_model::colocation::Colocation) {
        self.inner.set_colocation(estimate);
    }

    fn set_flow_sharing(&mut self, sharing: crate::FlowSharing) {
        self.inner.set_flow_sharing(sharing);
    }

    fn gpu_allocation(&self) -> Option<orrery_model::rails::GpuAllocation> {
        self.parts.rails.then_some(orrery_model::rails::GpuAllocation::RailAligned)
    }
}

/// Plebiscito's bandwidth-aware bids where they can pay, consolidated first
/// fit elsewhere (issue 38): a job goes where consolidated first fit puts it
/// unless that placement sends traffic over a link that running jobs (or
/// jobs placed earlier in the round) already load; then the bids choose.
/// Bids spread workers to hosts with spare bandwidth, which on an idle
/// fabric only fragments the cluster (`plebiscito:sgf` on Philly:
/// docs/results.md). Per round O(R) plus the links of the jobs that came,
/// left or moved ([`OnLinks`]; O(Σ links of the running jobs) where the
/// driver gives no placement serials); per job O(links of its placement)
/// plus the bids' O(W·H) when they are asked.
pub struct BidsWhenLoaded {
    bids: Bidding,
    /// The round's bidding state is built when a job first needs bids
    /// (most rounds place by first fit): until then, the jobs the round
    /// preempts and the placements committed so far, replayed onto it
    /// then. The cluster's state for the bids is O(R) a round to build.
    unprepared: Option<Unprepared>,
    /// Fabric links loaded by the jobs placed this round (and by every
    /// running job where `running_on` cannot be kept in step).
    loaded: crate::memo::FastSet<LinkId>,
    /// The running jobs on each fabric link ([`fabric_links_of`]: none for
    /// a job inside one leaf, most of them), kept between rounds.
    running_on: OnLinks<()>,
    /// The jobs this round preempts: their links no longer count.
    leaving: Vec<JobId>,
    /// Each running job's fabric links, kept while its hosts are (for a
    /// rebuild where `running_on` cannot be kept in step).
    links: PerPlacement<Vec<LinkId>>,
    /// The links whose jobs changed this round (kept for its allocation).
    changed: Vec<LinkId>,
    /// Part `rails`: on a rail-optimised fabric, partial hosts chosen for
    /// their free GPUs' rails ([`rails::Held::align`]), with the GPUs held
    /// this round.
    rails: bool,
    held: rails::Held,
    /// Each running job's NIC links ([`rails::running_nics`]), kept while its hosts are.
    nics: PerPlacement<Vec<LinkId>>,
}

/// A round's bids not built yet: the jobs the round preempts and the
/// placements committed so far.
#[derive(Debug)]
struct Unprepared {
    leaving: Vec<JobId>,
    committed: Vec<(JobSpec, Hosts)>,
}

impl Default for BidsWhenLoaded {
    fn default() -> Self {
        BidsWhenLoaded {
            bids: Bidding::aware(Utility::Sgf),
            unprepared: None,
            loaded: Default::default(),
            running_on: OnLinks::default(),
            leaving: Vec::new(),
            links: PerPlacement::default(),
            changed: Vec::new(),
            rails: false,
            held: rails::Held::default(),
            nics: PerPlacement::default(),
        }
    }
}

impl BidsWhenLoaded {
    /// Adds the fabric links `spec` on `hosts` may send over.
    fn load(&mut self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) {
        self.loaded.extend(fabric_links_of(view, spec, hosts));
    }

    /// Whether `hosts` would send traffic over a fabric link (leaf to
    /// spine, or between switches) that running jobs load. A host's own
    /// NIC does not count: on hosts of several GPUs it carries the rings of
    /// the jobs beside the free GPUs, and bidding away from it spreads the
    /// job over more hosts, each a NIC crossed (on four- and eight-GPU
    /// hosts `orrery-no-bandwidth` beat `orrery` by 4-7% until this rule,
    /// docs/results.md). Plebiscito's bandwidth term (Eq. 9) is the
    /// bandwidth between nodes. O(links on the placement's paths).
    fn crosses_load(&self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) -> bool {
        let by_running = |l: LinkId| self.running_on.on(l).iter().any(|(job, ())| !self.leaving.contains(job));
        fabric_links_of(view, spec, hosts).into_iter().any(|l| self.loaded.contains(&l) || by_running(l))
    }
}

/// Every fabric link (between two switches) `spec` on `hosts` may send
/// over, on any equal-cost path (which spine ECMP or FORESIGHT's routes
/// pick is not known here); none for a job that sends nothing. Hosts' own
/// links are left out: [`BidsWhenLoaded::crosses_load`] does not count
/// them, and a job inside one leaf then keeps no links at all.
fn fabric_links_of(view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) -> Vec<LinkId> {
    let hosts_n = view.topology.hosts.len();
    let fabric = |l: &LinkId| view.topology.links[*l].from >= hosts_n && view.topology.links[*l].to >= hosts_n;
    place(view.topology, spec, hosts)
        .filter(|p| p.shape.network_ms() > 0.0)
        .map_or_else(Vec::new, |p| p.links_on_any_path(view.topology).into_iter().filter(fabric).collect())
}

impl Placement for BidsWhenLoaded {
    fn name(&self) -> &'static str {
        "bids-when-loaded"
    }

    fn prepare(&mut self, view: &ClusterView<'_>, leaving: &[JobId]) {
        self.unprepared = Some(Unprepared { leaving: leaving.to_vec(), committed: Vec::new() });
        self.loaded.clear();
        self.leaving = leaving.to_vec();
        self.changed.clear();
        let links_of =
            |r: &RunningJob<'_>| fabric_links_of(view, r.spec, r.hosts).into_iter().map(|l| (l, ())).collect();
        if !self.running_on.sync(view, |r| !r.paused, links_of, &mut self.changed) {
            self.links.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
            for r in view.running.iter().filter(|r| !r.paused && !leaving.contains(&r.id)) {
                self.loaded.extend(self.links.of(r, || fabric_links_of(view, r.spec, r.hosts)));
            }
        }
        if self.rails {
            self.nics.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
            let nics = &mut self.nics;
            self.held =
                rails::Held::of(view, leaving, |r| nics.of(r, || rails::running_nics(view.topology, r)).clone());
        }
    }

    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let capped = capped(free, spec);
        let chosen = match consolidated(view, rack_of, &capped, spec.gpus()) {
            Some(hosts) if !self.crosses_load(view, spec, &hosts) => Some(hosts),
            first_fit => {
                if let Some(Unprepared { leaving, committed }) = self.unprepared.take() {
                    self.bids.prepare(view, &leaving);
                    for (spec, hosts) in &committed {
                        self.bids.commit(view, spec, hosts);
                    }
                }
                let bid = self.bids.place(view, rack_of, free, spec);
                // A mesh keeps its groups on as few hosts as first fit
                // found: the bids spread by bandwidth, and on Lingjun they
                // put Mixtral's 512-GPU meshes (EP 8) on 65-68 hosts where
                // 64 hold them whole, its all-to-alls across hosts (1.04-1.14
                // times alone, and 7 times the simulator's events).
                let spread = |h: &Hosts| h.iter().filter(|x| x.1 > 0).count();
                match (bid, &first_fit) {
                    (Some(b), Some(f)) if spec.parallelism.is_some() && spread(&b) > spread(f) => first_fit,
                    (b, _) => b.or(first_fit),
                }
            }
        };
        if self.rails {
            return chosen.map(|hosts| self.held.align(view.topology, rack_of, &capped, spec, hosts));
        }
        chosen
    }

    fn commit(&mut self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) {
        if self.rails {
            self.held.commit(view.topology, spec, hosts);
        }
        match &mut self.unprepared {
            Some(round) => round.committed.push((spec.clone(), hosts.to_vec())),
            None => self.bids.commit(view, spec, hosts),
        }
        self.load(view, spec, hosts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QueuedJob, RunningJob};
    use orrery_model::colocation::{Colocation, SharingMode};
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Priority, Work};

    #[test]
    fn names_switch_parts_off_and_round_trip() {
        assert_eq!(Parts::parse("orrery"), Some(Parts::ALL));
        let p = Parts::parse("orrery-no-share-no-routes").expect("parses");
        assert_eq!(p, Parts { share: false, routes: false, ..Parts::ALL });
        assert_eq!(p.running(), ["bandwidth", "interleave", "size", "preempt", "reserve", "rails"]);
        // Canonical order in the reported name.
        assert_eq!(
            Parts::parse("orrery-no-routes-no-share").map(Parts::name).as_deref(),
            Some("orrery-no-share-no-routes")
        );
        for bad in ["orrery-no-share-no-share", "orrery-no-gpus", "orrery-", "orrery-no-sharex", "orreryx"] {
            assert_eq!(Parts::parse(bad), None, "{bad}");
        }
        for bits in 0..=255u8 {
            let p = Parts {
                share: bits & 1 > 0,
                bandwidth: bits & 2 > 0,
                interleave: bits & 4 > 0,
                routes: bits & 8 > 0,
                size: bits & 16 > 0,
                preempt: bits & 32 > 0,
                reserve: bits & 64 > 0,
                rails: bits & 128 > 0,
            };
            assert_eq!(Parts::parse(&p.name()), Some(p));
            assert_eq!(Combined::new(p, 0).name(), p.name());
        }
    }

    #[test]
    fn bids_place_only_where_first_fit_would_cross_a_loaded_fabric_link() {
        // Three racks of two 2-GPU hosts.
        let t = LeafSpine::with_oversubscription(3, 2, 1, 2, "a100", 50.0, 1.0).build("t").expect("valid");
        let x = JobSpec::new("x", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
        let c = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
        let choose = |free: &[u32], running: Vec<RunningJob<'_>>, first_fit: &[(HostId, u32)]| {
            let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: free, queue: Vec::new(), running };
            let rack_of = crate::baseline::racks(&view);
            let mut p = BidsWhenLoaded::default();
            p.prepare(&view, &[]);
            let chosen = p.place(&view, rack_of, free, &c);
            let mut bids = Bidding::aware(Utility::Sgf);
            bids.prepare(&view, &[]);
            (chosen, bids.place(&view, rack_of, free, &c), p.crosses_load(&view, &c, first_fit))
        };
        // Free: one GPU on each of hosts 0 and 1 (rack 0) and on host 4
        // (rack 2). First fit takes rack 0.
        let free = [1u32, 1, 0, 0, 1, 0];
        let in_rack = [(0, 1), (1, 1)];
        let (idle, _, crosses) = choose(&free, Vec::new(), &in_rack);
        assert_eq!(idle, Some(in_rack.to_vec()), "an idle fabric: first fit");
        assert!(!crosses);
        // A ring from host 0 (its other GPU) to host 2 loads host 0's NIC and
        // rack 0's uplink. First fit stays in rack 0: it shares host 0's
        // NIC only, which the bids would not spare it (they would spread it
        // over more hosts), so first fit stands.
        let hx = [(0usize, 1u32), (2, 1)];
        let (nic_only, _, crosses) = choose(&free, vec![RunningJob::new(0, &x, &hx)], &in_rack);
        assert!(!crosses);
        assert_eq!(nic_only, Some(in_rack.to_vec()));
        // One GPU free in each rack (hosts 0, 2, 4) and a ring between hosts
        // 1 and 3 that loads the uplinks of racks 0 and 1: first fit, hosts
        // 0 and 2, would cross them, so the bids choose.
        let free = [1u32, 0, 1, 0, 1, 0];
        let hx = [(1usize, 1u32), (3, 1)];
        let (loaded, bids, crosses) = choose(&free, vec![RunningJob::new(0, &x, &hx)], &[(0, 1), (2, 1)]);
        assert!(crosses);
        assert_eq!(loaded, bids);
        assert!(loaded.is_some());
    }

    /// The loaded links kept between rounds (by placement serial) say what
    /// links built anew each round say: over 200 rounds of 12 jobs starting,
    /// ending, pausing and moving on 6 racks of 2 hosts, with a random job
    /// leaving (preempted) and a placement committed in the round, for
    /// every two-host placement of a ring.
    #[test]
    fn loaded_links_kept_between_rounds_are_those_built_anew() {
        use rand::{Rng, SeedableRng};
        let t = LeafSpine::with_oversubscription(6, 2, 2, 2, "a100", 50.0, 1.0).build("t").expect("valid");
        let ring = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        // Per job while it runs: its two hosts, placement serial and whether paused.
        type Live = Option<([(HostId, u32); 2], u64, bool)>;
        let mut live: Vec<Live> = vec![None; 12];
        let (mut serial, mut kept, mut loaded_seen) = (0u64, BidsWhenLoaded::default(), 0);
        for round in 0..200 {
            for slot in live.iter_mut() {
                let roll = rng.random_range(0.0..1.0);
                match slot {
                    None if roll < 0.3 => {
                        let a = rng.random_range(0..12);
                        let b = (a + rng.random_range(1..12)) % 12;
                        serial += 1;
                        *slot = Some(([(a.min(b), 1), (a.max(b), 1)], serial, false));
                    }
                    Some(_) if roll < 0.1 => *slot = None,
                    Some((_, _, paused)) if roll < 0.15 => *paused = !*paused,
                    Some((hosts, s, _)) if roll < 0.2 => {
                        hosts[1].0 = (hosts[1].0 + 1) % 12;
                        if hosts[1].0 == hosts[0].0 {
                            hosts[1].0 = (hosts[1].0 + 1) % 12;
                        }
                        hosts.sort_unstable();
                        serial += 1;
                        *s = serial;
                    }
                    _ => {}
                }
            }
            let running = |serials: bool| -> Vec<RunningJob<'_>> {
                live.iter()
                    .enumerate()
                    .filter_map(|(id, slot)| {
                        let (hosts, s, paused) = slot.as_ref()?;
                        let placement = if serials { *s } else { 0 };
                        Some(RunningJob { paused: *paused, placement, ..RunningJob::new(id, &ring, hosts) })
                    })
                    .collect()
            };
            let view = |serials| ClusterView {
                now_s: round as f64,
                topology: &t,
                free_gpus: &[2; 12],
                queue: Vec::new(),
                running: running(serials),
            };
            let (with, without) = (view(true), view(false));
            let leaving: Vec<JobId> = with.running.iter().map(|r| r.id).filter(|_| rng.random_bool(0.1)).collect();
            let committed = [(rng.random_range(0..6), 1u32), (rng.random_range(6..12), 1)];
            let mut anew = BidsWhenLoaded::default();
            kept.prepare(&with, &leaving);
            anew.prepare(&without, &leaving);
            if rng.random_bool(0.3) {
                kept.commit(&with, &ring, &committed);
                anew.commit(&without, &ring, &committed);
            }
            for a in 0..12 {
                for b in a + 1..12 {
                    let hosts = [(a, 1), (b, 1)];
                    let crosses = anew.crosses_load(&without, &ring, &hosts);
                    assert_eq!(kept.crosses_load(&with, &ring, &hosts), crosses, "round {round}, hosts {a} and {b}");
                    loaded_seen += usize::from(crosses);
                }
            }
        }
        assert!(loaded_seen > 1_000, "{loaded_seen}");
    }

    /// Two hosts of 4 GPUs; a running job holds all of host 0 and 2 GPUs of
    /// host 1; a 4-GPU newcomer cannot fit in the 2 free GPUs.
    fn crowded<'a>(
        t: &'a orrery_model::Topology,
        running: &'a JobSpec,
        newcomer: &'a JobSpec,
        hosts: &'a [(usize, u32)],
    ) -> ClusterView<'a> {
        ClusterView {
            now_s: 0.0,
            topology: t,
            free_gpus: &[0, 2],
            queue: vec![QueuedJob::new(1, newcomer, 0.0)],
            running: vec![RunningJob::new(0, running, hosts)],
        }
    }

    #[test]
    fn a_high_priority_job_never_shares_a_gpu() {
        let t = LeafSpine::with_oversubscription(1, 2, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid");
        // A long low-priority job and a short newcomer: Theorem 1 says share
        // (the newcomer is a few iterations; the running job has 10^6).
        let long = JobSpec::new("long", "resnet18", 32, 6, Work::Iterations(1_000_000), 0.0);
        let short = JobSpec::new("short", "resnet18", 32, 4, Work::Iterations(50), 0.0);
        let hosts = [(0usize, 4u32), (1, 2)];
        let time_sliced = Colocation { mode: SharingMode::Temporal, ..Colocation::default() };
        let decide = |p: &mut Combined, run: &JobSpec, new: &JobSpec| {
            p.set_colocation(&time_sliced);
            p.schedule(&crowded(&t, run, new, &hosts))
        };
        // Without sizing, which would start the newcomer on the 2 free GPUs,
        // and preemption, which would give it the long job's GPUs.
        let all = Parts { routes: false, interleave: false, size: false, preempt: false, ..Parts::ALL };
        let d = decide(&mut Combined::new(all, 1), &long, &short);
        assert!(matches!(d.as_slice(), [Decision::Share { job: 1, .. }]), "low-priority pair shares: {d:?}");
        // The same pair with either job high priority: the newcomer waits.
        let mut high_long = long.clone();
        high_long.priority = Priority::High;
        let mut high_short = short.clone();
        high_short.priority = Priority::High;
        assert!(decide(&mut Combined::new(all, 1), &high_long, &short).is_empty());
        assert!(decide(&mut Combined::new(all, 1), &long, &high_short).is_empty());
        // Without the sharing part, nobody shares.
        assert!(decide(&mut Combined::new(Parts { share: false, ..all }, 1), &long, &short).is_empty());
    }
}
