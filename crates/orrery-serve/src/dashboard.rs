//! The live dashboard: one page served at `/` (embedded in the binary, no
//! build step) and the snapshot it draws, `GET /v1/dashboard`.
//!
//! The page holds no token until the user types one; it sends it as a bearer
//! header, never in a URL, and keeps it in the tab's `sessionStorage`. It
//! long-polls `GET /v1/dashboard?after=VERSION&wait_s=S`, which answers as
//! soon as a batch is committed after `VERSION` (a submission, a decision, a
//! node's change, reported progress) or after `S` seconds.
//!
//! What a snapshot holds, so the first screen answers "what runs where, how
//! fast, and what did orrery decide": the nodes with their GPUs in use and
//! health, the jobs with progress, mean against alone iteration time and the
//! decision in force, the links their flows cross with their mean load, the
//! recent decision log, and for every link two or more jobs share, each
//! job's iteration as a circle with its communication arcs rotated by the
//! shift in force (CASSINI §3, Fig. 3: a job's circle has the perimeter of
//! its iteration; interleaving rotates the circles so the arcs do not
//! overlap).

use crate::api::{JobInfo, LogEntry, NodeInfo};
use crate::ledger::Ledger;
use orrery_model::placed::Placed;
use orrery_model::{Segment, Topology};
use orrery_policy::JobId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The page, served at `/`.
pub const PAGE: &str = include_str!("dashboard.html");

/// Queued jobs a snapshot lists at most (the oldest first; the count of all
/// of them is in `counts`).
pub const MAX_QUEUED: usize = 200;
/// Ended jobs a snapshot lists (the most recent).
pub const RECENT_ENDED: usize = 20;
/// Decision-log entries a snapshot carries (the most recent).
pub const RECENT_DECISIONS: u64 = 60;
/// Links a snapshot lists at most (the most loaded).
pub const MAX_LINKS: usize = 24;

/// `GET /v1/dashboard`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Changes with every committed batch: pass it back as `after`.
    pub version: u64,
    /// Topology name.
    pub topology: String,
    /// Policy name.
    pub policy: String,
    /// Cluster-clock seconds now.
    pub now_s: f64,
    /// Jobs by status.
    pub counts: BTreeMap<String, usize>,
    /// Every node.
    pub nodes: Vec<NodeInfo>,
    /// Active jobs, then queued ones (at most [`MAX_QUEUED`]), then the most
    /// recently ended ([`RECENT_ENDED`]).
    pub jobs: Vec<DashJob>,
    /// Links that active jobs' flows cross, most loaded first.
    pub links: Vec<LinkLoad>,
    /// The most recent decision-log entries, oldest first.
    pub decisions: Vec<LogEntry>,
}

/// A job row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DashJob {
    /// What `GET /v1/jobs/{id}` shows.
    #[serde(flatten)]
    pub info: JobInfo,
    /// Its iteration time alone on its (last) placement, ms; 0 if never placed.
    pub alone_ms: f64,
}

/// One directed link's load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkLoad {
    /// Link index in the topology.
    pub link: usize,
    /// `from→to` by node names.
    pub name: String,
    /// Capacity, Gbit/s.
    pub gbps: f64,
    /// Mean offered load over an iteration: Σ over its jobs of (bits each
    /// sends per iteration over it) / (iteration time), Gbit/s.
    pub load_gbps: f64,
    /// `load_gbps / gbps`.
    pub utilisation: f64,
    /// Σ of the jobs' peak rates over the capacity: above 1 their
    /// communication collides unless interleaved.
    pub peak_demand: f64,
    /// The jobs whose flows cross it (under ECMP or their routes).
    pub jobs: Vec<LinkJob>,
}

/// A job on a link, as a circle (CASSINI Fig. 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkJob {
    /// Job.
    pub id: JobId,
    /// Its spec id.
    pub name: String,
    /// Iteration time (the circle's perimeter), ms.
    pub period_ms: f64,
    /// The rotation in force, ms into the iteration: its summed time-shifts
    /// plus its slot's offset (Align/Pace), modulo the period.
    pub phase_ms: f64,
    /// Communication arcs on the network as fractions of the iteration,
    /// `[start, end)` before the rotation.
    pub arcs: Vec<(f64, f64)>,
}

/// Builds the snapshot. O(jobs · log jobs (ended jobs sorted by end) + links
/// + Σ active jobs' flows × path length).
pub fn snapshot(ledger: &Ledger, policy: &str, now_s: f64, version: u64, decisions: Vec<LogEntry>) -> Snapshot {
    let jobs = ledger.jobs();
    let active = jobs.iter().filter(|(_, j)| j.status.is_active()).map(|(id, _)| id);
    let queued = ledger.waiting().iter().copied().take(MAX_QUEUED);
    let mut ended: Vec<JobId> = jobs.iter().filter(|(_, j)| j.status.is_over()).map(|(id, _)| id).collect();
    ended.sort_by(|&a, &b| jobs[b].ended_s.unwrap_or(0.0).total_cmp(&jobs[a].ended_s.unwrap_or(0.0)));
    ended.truncate(RECENT_ENDED);
    let rows = active
        .chain(queued)
        .chain(ended)
        .filter_map(|id| ledger.job_info(id).map(|info| DashJob { info, alone_ms: jobs[id].shape.period_ms() }))
        .collect();
    Snapshot {
        version,
        topology: ledger.topology().name.clone(),
        policy: policy.to_string(),
        now_s,
        counts: ledger.counts(),
        nodes: ledger.node_infos(now_s),
        jobs: rows,
        links: link_loads(ledger),
        decisions,
    }
}

/// The links active jobs cross, with their load and circles, most loaded
/// first (at most [`MAX_LINKS`]).
pub fn link_loads(ledger: &Ledger) -> Vec<LinkLoad> {
    let topo = ledger.topology();
    let mut by_link: BTreeMap<usize, Vec<(LinkJob, f64, f64)>> = BTreeMap::new();
    for (id, j) in ledger.jobs().iter().filter(|(_, j)| j.status.is_active()) {
        let period = j.shape.period_ms();
        if period <= 0.0 || j.workers.len() < 2 {
            continue;
        }
        let placed = Placed { workers: j.workers.clone(), gpus: Vec::new(), shape: j.shape.clone() };
        let links = placed.links(topo, id);
        if links.is_empty() {
            continue;
        }
        let (arcs, bits, peak) = network_arcs(&j.shape.segments, period);
        let f = &j.in_force;
        let slot_ms = f.pace.map(|p| p.offset_s).or(f.align.map(|a| a.offset_s)).map_or(0.0, |s| s * 1e3);
        let phase_ms = (f.shift_ms_total + slot_ms).rem_euclid(period);
        let mean_gbps = bits / (period * 1e-3) / 1e9;
        for l in links {
            let circle = LinkJob { id, name: j.spec.id.clone(), period_ms: period, phase_ms, arcs: arcs.clone() };
            by_link.entry(l).or_default().push((circle, mean_gbps, peak));
        }
    }
    let mut out: Vec<LinkLoad> = by_link
        .into_iter()
        .map(|(l, js)| {
            let gbps = topo.links[l].gbps;
            let load: f64 = js.iter().map(|x| x.1).sum();
            let peak: f64 = js.iter().map(|x| x.2).sum();
            LinkLoad {
                link: l,
                name: link_name(topo, l),
                gbps,
                load_gbps: load,
                utilisation: if gbps > 0.0 { load / gbps } else { 0.0 },
                peak_demand: if gbps > 0.0 { peak / gbps } else { 0.0 },
                jobs: js.into_iter().map(|x| x.0).collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| b.utilisation.total_cmp(&a.utilisation).then(a.link.cmp(&b.link)));
    out.truncate(MAX_LINKS);
    out
}

fn link_name(topo: &Topology, l: usize) -> String {
    let link = &topo.links[l];
    format!("{}→{}", topo.node_name(link.from), topo.node_name(link.to))
}

/// The iteration's communication on the network as arcs (fractions of
/// `period_ms`), the bits each worker sends per iteration and its peak rate
/// (Gbit/s). Adjacent communication segments merge into one arc.
fn network_arcs(segments: &[Segment], period_ms: f64) -> (Vec<(f64, f64)>, f64, f64) {
    let mut arcs: Vec<(f64, f64)> = Vec::new();
    let (mut t, mut bits, mut peak) = (0.0, 0.0, 0.0f64);
    for s in segments {
        let d = s.duration_ms();
        let rate = s.network_gbps();
        if rate > 0.0 && d > 0.0 {
            let (a, b) = (t / period_ms, (t + d) / period_ms);
            match arcs.last_mut() {
                Some(last) if (last.1 - a).abs() < 1e-9 => last.1 = b,
                _ => arcs.push((a, b)),
            }
            bits += s.wire_bytes_per_worker() * 8.0;
            peak = peak.max(rate);
        }
        t += d;
    }
    (arcs, bits, peak)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::Collective;

    #[test]
    fn arcs_are_the_communication_segments_as_fractions_of_the_iteration() {
        // 60 ms compute, then a 2-host all-reduce of 50 MB at 10 Gbit/s: each
        // worker sends 2·(n−1)/n · 50 MB = 50 MB = 400 Mbit, 40 ms at 10 Gbit/s.
        let segs = [
            Segment::Compute { ms: 60.0 },
            Segment::Comm {
                collective: Collective::RingAllReduce,
                payload_bytes: 50e6,
                participants: 2,
                hosts: 2,
                gbps: 10.0,
                group: orrery_model::shape::Group::ALL,
            },
        ];
        let period: f64 = segs.iter().map(Segment::duration_ms).sum();
        assert!((period - 100.0).abs() < 1e-9, "{period}");
        let (arcs, bits, peak) = network_arcs(&segs, period);
        assert_eq!(arcs.len(), 1);
        assert!((arcs[0].0 - 0.6).abs() < 1e-9 && (arcs[0].1 - 1.0).abs() < 1e-9, "{arcs:?}");
        assert!((bits - 400e6).abs() < 1.0, "{bits}");
        assert_eq!(peak, 10.0);
    }

    #[test]
    fn communication_inside_one_host_draws_no_arc() {
        let segs = [
            Segment::Compute { ms: 10.0 },
            Segment::Comm {
                collective: Collective::RingAllReduce,
                payload_bytes: 1e6,
                participants: 4,
                hosts: 1,
                gbps: 100.0,
                group: orrery_model::shape::Group::ALL,
            },
        ];
        let (arcs, bits, _) = network_arcs(&segs, 20.0);
        assert!(arcs.is_empty() && bits == 0.0);
    }
}
