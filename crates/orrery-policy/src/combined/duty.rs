//! The network a job would meet (the combined policy's parts `size` and
//! `share`): the traffic running jobs put on each link (their duty
//! cycles), a job's iteration time beside it, and the time a share's two
//! jobs lose to each other's traffic on the NICs they share.

use super::on_links::OnLinks;
use crate::ClusterView;
use crate::memo::{FastMap, PerPlacement};
use orrery_model::{HostId, JobSpec};
use std::collections::HashMap;

/// `spec`'s iteration time on `hosts` beside the traffic already there, ms
/// (None when it cannot be shaped): its time alone, plus its network phase
/// stretched by the busiest link it would cross. A link whose running jobs
/// are on it a summed fraction D of the time (their duty cycles, [`link_duty`])
/// halves the job's rate while one of them sends, in the fluid view of
/// [`shared_nic_xi`] (CASSINI's circles: unaligned phases overlap at random),
/// so the network phase takes `D` of itself longer. With `duty` empty, its
/// time alone. O(shape + links crossed).
pub(crate) fn period_on(
    view: &ClusterView<'_>,
    duty: &LinkDuty,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
) -> Option<f64> {
    let placed = orrery_model::placed::place(view.topology, spec, hosts)?;
    let (alone, network) = (placed.shape.period_ms(), placed.shape.network_ms());
    if network <= 0.0 || duty.is_empty() {
        return Some(alone);
    }
    Some(beside(alone, network, &placed.links_on_any_path(view.topology), duty))
}

/// A placement's time alone, network phase and the links on any of its
/// paths: what [`period_on`] reads of it, kept for a running job while its
/// hosts are ([`Shaped::period_on`]). O(shape + links crossed) to build.
#[derive(Debug, Clone)]
pub(crate) struct Shaped {
    alone_ms: f64,
    network_ms: f64,
    links: Vec<orrery_model::LinkId>,
}

impl Shaped {
    /// None when `spec` cannot be shaped on `hosts`.
    pub(crate) fn of(view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) -> Option<Shaped> {
        let placed = orrery_model::placed::place(view.topology, spec, hosts)?;
        let (alone_ms, network_ms) = (placed.shape.period_ms(), placed.shape.network_ms());
        let links = if network_ms > 0.0 { placed.links_on_any_path(view.topology) } else { Vec::new() };
        Some(Shaped { alone_ms, network_ms, links })
    }

    /// [`period_on`] of this placement, the same number. O(links crossed).
    pub(crate) fn period_on(&self, duty: &LinkDuty) -> f64 {
        if self.network_ms <= 0.0 || duty.is_empty() {
            return self.alone_ms;
        }
        beside(self.alone_ms, self.network_ms, &self.links, duty)
    }
}

/// Per running job and size (workers), the hosts it was last judged on at
/// that size and its shape there (None: it cannot be shaped there).
pub(crate) type KeptShapes = FastMap<(crate::JobId, u32), (Vec<(HostId, u32)>, Option<Shaped>)>;

/// The time alone plus the network phase stretched by the busiest of
/// `links` ([`period_on`]). O(links).
fn beside(alone: f64, network: f64, links: &[orrery_model::LinkId], duty: &LinkDuty) -> f64 {
    let busiest = links.iter().filter_map(|l| duty.get(l)).fold(0.0_f64, |a, &b| a.max(b));
    alone + network * busiest
}

/// Per link, the running jobs' summed duty cycles ([`link_duty`]): a
/// vector indexed by link id, with the links some job is on listed, so
/// that a round's rebuild clears only those and a read is an index where a
/// hash map's was a hash and a probe (the map, rebuilt every round, was 7%
/// of `orrery` at 16,384 hosts). Links no job is on read as absent.
#[derive(Debug, Clone, Default)]
pub struct LinkDuty {
    by_link: Vec<Option<f64>>,
    /// The links set since the last clear, each once (some may be absent
    /// again since).
    on: Vec<orrery_model::LinkId>,
    /// Per link id, whether it is in `on`.
    listed: Vec<bool>,
    /// How many links are present.
    present: usize,
}

impl LinkDuty {
    /// Link `l`'s summed duty cycle, if some running job is on it. O(1).
    pub fn get(&self, l: &orrery_model::LinkId) -> Option<&f64> {
        self.by_link.get(*l).and_then(Option::as_ref)
    }

    /// Whether no running job is on any link.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// The links some running job is on, with their summed duty cycles.
    pub fn iter(&self) -> impl Iterator<Item = (orrery_model::LinkId, f64)> + '_ {
        self.on.iter().filter_map(|&l| self.by_link[l].map(|d| (l, d)))
    }

    /// Adds `d` to link `l`. O(1) amortised.
    fn add(&mut self, l: orrery_model::LinkId, d: f64) {
        let sum = self.get(&l).map_or(d, |&s| s + d);
        self.set(l, Some(sum));
    }

    /// Sets link `l`'s sum (None: no job is on it). O(1) amortised.
    fn set(&mut self, l: orrery_model::LinkId, value: Option<f64>) {
        if self.by_link.len() <= l {
            self.by_link.resize(l + 1, None);
            self.listed.resize(l + 1, false);
        }
        match (self.by_link[l].is_some(), value.is_some()) {
            (false, true) => self.present += 1,
            (true, false) => self.present -= 1,
            _ => {}
        }
        self.by_link[l] = value;
        if value.is_some() && !self.listed[l] {
            self.listed[l] = true;
            self.on.push(l);
        }
    }

    /// Empties it, keeping its allocation. O(links it held).
    fn clear(&mut self) {
        for &l in &self.on {
            self.by_link[l] = None;
            self.listed[l] = false;
        }
        self.on.clear();
        self.present = 0;
    }
}

/// A round's [`LinkDuty`], built by the first size the round judges (not
/// in rounds that judge none) and kept, with its allocation and the jobs
/// on each link, for the next round to bring in step.
#[derive(Debug, Default)]
pub(crate) struct RoundDuty {
    duty: LinkDuty,
    /// Whether `duty` is this round's.
    current: bool,
    /// Each running job's terms of [`link_duty`], kept while its hosts are
    /// (for a rebuild from every job, where `on` cannot be kept in step).
    terms: PerPlacement<Vec<(orrery_model::LinkId, f64)>>,
    /// The jobs on each link and their terms, kept in step with the view.
    on: OnLinks<f64>,
    /// Whether `duty` holds the sums of `on`.
    in_step: bool,
    /// The links whose jobs changed this round (kept for its allocation).
    changed: Vec<orrery_model::LinkId>,
}

impl RoundDuty {
    /// A new round: the next read builds the duty again.
    pub(crate) fn new_round(&mut self) {
        self.current = false;
    }

    /// This round's duty ([`link_duty`]), built on the first read; empty
    /// unless `priced` (sizes priced by the traffic they meet). The same
    /// sums, added in the same order (ascending job id), as a rebuild from
    /// every running job: brought in step by the jobs that changed
    /// ([`OnLinks::sync`]), each link they are on summed again, O(R) plus
    /// O(links × jobs on each) per changed job; where that cannot be kept
    /// (no placement serials), O(Σ links of the running jobs). O(1) after
    /// the first read of a round.
    pub(crate) fn get(&mut self, view: &ClusterView<'_>, priced: bool) -> &LinkDuty {
        if !self.current {
            self.current = true;
            if !priced {
                self.duty.clear();
                self.on.clear();
                self.in_step = false;
                return &self.duty;
            }
            let mut changed = std::mem::take(&mut self.changed);
            changed.clear();
            if self.on.sync(view, |r| !r.paused, |r| job_terms(view, r), &mut changed) {
                if !self.in_step {
                    self.duty.clear();
                    self.in_step = true;
                }
                for &l in &changed {
                    let mut terms = self.on.on(l).iter().map(|e| e.1);
                    let sum = terms.next().map(|first| terms.fold(first, |s, d| s + d));
                    self.duty.set(l, sum);
                }
            } else {
                link_duty(view, &mut self.terms, &mut self.duty);
                self.in_step = false;
            }
            self.changed = changed;
        }
        &self.duty
    }
}

/// Per link, the running jobs' traffic on it: each job's duty cycle (the
/// fraction of its iteration alone on the network) times the share of its
/// flows the link carries, a flow split evenly over its equal-cost paths
/// (ECMP, or FORESIGHT's spreading over spines), at most 1 a job. Paused
/// jobs send nothing. Built into `duty`, emptied first (its allocation
/// kept). O(Σ flows × path length) over the running jobs the first round a
/// job is placed, O(its links) each round after (its terms are kept in
/// `terms`).
pub(crate) fn link_duty(
    view: &ClusterView<'_>,
    terms: &mut PerPlacement<Vec<(orrery_model::LinkId, f64)>>,
    duty: &mut LinkDuty,
) {
    duty.clear();
    terms.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
    for r in view.running.iter().filter(|r| !r.paused) {
        for &(l, d) in terms.of(r, || job_terms(view, r)) {
            duty.add(l, d);
        }
    }
}

/// A running job's terms of [`link_duty`]: its duty cycle times the share
/// of its flows on each link it crosses ([`link_shares`]); none when it
/// sends nothing. O(flows × path length).
fn job_terms(view: &ClusterView<'_>, r: &crate::RunningJob<'_>) -> Vec<(orrery_model::LinkId, f64)> {
    let Some(placed) = orrery_model::placed::place(view.topology, r.spec, r.hosts) else { return Vec::new() };
    let (period, network) = (placed.shape.period_ms(), placed.shape.network_ms());
    if network <= 0.0 || period <= 0.0 {
        return Vec::new();
    }
    link_shares(view.topology, &placed).into_iter().map(|(l, share)| (l, share * network / period)).collect()
}

/// The share of a placed job's network flows each link carries: every
/// flow of every network phase adds 1/(its equal-cost paths) to each link
/// of each path, capped at 1. O(flows × path length).
pub(crate) fn link_shares(
    topo: &orrery_model::Topology,
    placed: &orrery_model::placed::Placed,
) -> Vec<(orrery_model::LinkId, f64)> {
    let mut share: HashMap<orrery_model::LinkId, f64> = HashMap::new();
    for seg in &placed.shape.segments {
        let orrery_model::Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
        if seg.network_gbps() <= 0.0 {
            continue;
        }
        for (src, dst, _) in orrery_model::placed::transfers(&placed.workers, collective, payload_bytes, group) {
            if src == dst {
                continue;
            }
            let paths = topo.shared_paths(src, dst);
            let each = 1.0 / paths.len().max(1) as f64;
            for &l in paths.iter().flatten() {
                *share.entry(l).or_insert(0.0) += each;
            }
        }
    }
    let mut out: Vec<(orrery_model::LinkId, f64)> = share.into_iter().map(|(l, s)| (l, s.min(1.0))).collect();
    out.sort_unstable_by_key(|e| e.0);
    out
}

/// `spec` on `workers` of its workers, packed from host 0, as the zoo
/// shapes it alone. O(shape).
pub(crate) fn packed_placement(
    t: &orrery_model::Topology,
    spec: &JobSpec,
    workers: u32,
) -> Option<orrery_model::placed::Placed> {
    orrery_model::placed::place(t, spec, &crate::baseline::packed(t, workers * spec.gpus_per_worker.max(1)))
}

/// A share's interference ratios `(ξ_run, ξ_new)` with the time each
/// job's network phase waits for its partner's traffic on the NICs they
/// share. Castor's ξ (Gavel's, here) is a ratio of whole-iteration
/// throughputs measured on one GPU, so it says nothing of the network:
/// Castor §6.1 found no cross-node indicator of ξ on its InfiniBand
/// testbed, where cross-node bandwidth was not the bottleneck. When both
/// jobs cross the network (`network_share` f > 0: the fraction of each
/// one's iteration on the network alone), both rings leave the shared
/// hosts through the same NICs. With unaligned phases the partner is on
/// the network a fraction f_other of the time (its duty cycle), during
/// which fair sharing halves the rate, so the job's network phase takes
/// f·f_other of an iteration longer: `ξ + f·f_other`. With either job on
/// one host nothing is added. On every fabric of docs/results.md this
/// lowered `orrery`'s mean JCT (4:1 with two GPUs a host: 545 → 525 s at
/// load 2). O(1).
pub fn shared_nic_xi((xi_run, xi_new): (f64, f64), (f_run, f_new): (f64, f64)) -> (f64, f64) {
    if f_run > 0.0 && f_new > 0.0 { (xi_run + f_run * f_new, xi_new + f_new * f_run) } else { (xi_run, xi_new) }
}
