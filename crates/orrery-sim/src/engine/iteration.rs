//! One iteration of a running job, segment by segment: its compute, its
//! collectives' flows (paths, ECMP, routes), the end of each, and the end
//! of the iteration (reports to the policy, the next iteration or the job's
//! completion).

use super::{Event, IterationRecord, NS, Simulation, Status};
use crate::network::Path;
use orrery_model::placed::rank_transfers;
use orrery_model::shape::Group;
use orrery_model::{Collective, Segment};
use orrery_policy::{ClusterView, IterationNeeds, JobId, Policy};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// A flow's (path, share) pairs: one path inline, so that the flows of a
/// collective do not each allocate (760 k flows in a 256-host run).
pub(super) type FlowPaths = smallvec::SmallVec<[(Path, f64); 1]>;

impl Simulation<'_> {
    pub(super) fn start_iteration(&mut self, job: JobId) {
        let now = self.now;
        if !self.jobs[job].at_iteration.is_empty() || !self.jobs[job].step_routes.is_empty() {
            self.apply_iteration_script(job);
        }
        if self.try_skip(job) {
            return;
        }
        let (j, net, room) = (&mut self.jobs[job], &mut self.net, &self.headroom);
        net.close_links(&j.links_used, now);
        j.iter_stats_start.clear();
        j.iter_stats_start.extend(j.links_used.iter().map(|&l| {
            let s = &net.stats[l];
            (s.bits, s.excess_bits, s.congested_ns, s.foreign)
        }));
        j.own_bits.clear();
        j.own_bits.resize(j.links_used.len(), 0.0);
        j.lost_at_start =
            j.links_used.iter().all(|&l| room.clear(l)).then(|| j.links_used.iter().map(|&l| room.lost(l)).sum());
        j.links_grew = false;
        j.interacted = false;
        j.cur_seg_ns.clear();
        j.cur_flow_ns.clear();
        j.iter_start_ns = now;
        j.segment = 0;
        let shift = std::mem::take(&mut j.pending_shift_ms);
        let delay = orrery_policy::slot::start_delay_ns(now, shift, j.pending_align.take(), j.pace);
        let delay = match &j.timetable {
            Some((from, starts)) => {
                delay.max(orrery_policy::slot::timetable_wait_ns(now, j.iterations_done, *from, starts))
            }
            None => delay,
        };
        j.iter_delay_ns = delay;
        let epoch = j.epoch;
        self.push(now + delay, Event::IterationStart(job, epoch));
    }

    /// Duration of a compute segment of `ms` with the job's noise, ns.
    pub(super) fn compute_ns(&self, ms: f64, rng: &mut ChaCha8Rng) -> u64 {
        noisy_ns(ms, (self.cfg.jitter > 0.0).then_some(&self.normal), rng)
    }

    /// [`Simulation::compute_ns`] slowed by the job's interference ratio ξ
    /// and stretched by its gradient accumulation.
    pub(super) fn job_compute_ns(&self, job: JobId, ms: f64, rng: &mut ChaCha8Rng) -> u64 {
        let j = &self.jobs[job];
        self.compute_ns(ms * j.xi * j.accumulation, rng)
    }

    /// Records the end of the current segment and moves to the next.
    pub(super) fn end_segment(&mut self, job: JobId) {
        let now = self.now;
        let j = &mut self.jobs[job];
        j.cur_seg_ns.push(now - j.seg_start_ns);
        j.seg_start_ns = now;
        j.segment += 1;
    }

    /// Marks the jobs whose flows just shared a max-min component.
    pub(super) fn note_interactions(&mut self) {
        // Drained, not taken: the list keeps its capacity for the next change.
        for owner in self.net.interacting.drain(..) {
            if let Some(j) = self.jobs.get_mut(owner) {
                j.interacted = true;
            }
        }
    }

    /// Runs segments from the current one until one takes time.
    pub(super) fn run_segment(&mut self, job: JobId, policy: &mut dyn Policy) {
        loop {
            let j = &self.jobs[job];
            let Some(seg) = j.shape.segments.get(j.segment).cloned() else {
                self.finish_iteration(job, policy);
                return;
            };
            match seg {
                Segment::Compute { ms } => {
                    let mut rng = self.jobs[job].rng.clone();
                    let dur = self.job_compute_ns(job, ms, &mut rng);
                    self.jobs[job].rng = rng;
                    let epoch = self.jobs[job].epoch;
                    self.push(self.now + dur, Event::ComputeDone(job, epoch));
                    return;
                }
                Segment::Comm { collective, payload_bytes, group, .. } => {
                    let intra = seg.intra_host_gbps();
                    let started = self.start_collective(job, (collective, payload_bytes, group, intra), None);
                    if started > 0 {
                        return;
                    }
                    self.end_segment(job);
                }
            }
        }
    }

    /// Starts the flows of a collective; `left[i]`, when given, is the
    /// fraction of flow i's bits still to send (a resumed fast-forward).
    pub(super) fn start_collective(
        &mut self,
        job: JobId,
        (collective, payload_bytes, group, intra_gbps): (Collective, f64, Group, f64),
        left: Option<&[f64]>,
    ) -> usize {
        let mut transfers = rank_transfers(self.jobs[job].workers.len(), collective, payload_bytes, group);
        if let Some(left) = left {
            for (t, &f) in transfers.iter_mut().zip(left) {
                t.2 *= f.clamp(0.0, 1.0);
            }
        }
        let throttle = self.jobs[job].throttle_gbps;
        // Flows leave at NIC rate; the network, not the shape's prediction
        // (which already counts a slower uplink), decides what they get.
        let gbps = self.nic(job);
        let epoch = self.jobs[job].epoch;
        // The flows start together: the network re-rates each component
        // they touch once (`Network::add_all`).
        let mut new = Vec::new();
        let mut index = Vec::new();
        let links = self.jobs[job].links_used.len();
        self.jobs[job].own_bits.resize(links, 0.0);
        // Transfers inside a host cross no link the network shares: each runs
        // at its cap, as a flow alone would, and ends `ceil(bits / cap)` ns
        // after it starts (`Network::finish_time`). They are timed here, not
        // made flows: one event for all of them instead of one flow each
        // (64% of the flows of the LLM workload at 4,096 hosts were TP
        // groups' and other transfers inside a host).
        let mut host_end: Option<u64> = None;
        for (i, (src, dst, bits)) in transfers.into_iter().enumerate() {
            if bits <= 0.0 {
                continue;
            }
            if self.jobs[job].workers[src] == self.jobs[job].workers[dst] {
                if intra_gbps > 0.0 {
                    let end = self.now.saturating_add((bits / intra_gbps).ceil() as u64);
                    self.record_flow_end(job, i, end);
                    host_end = host_end.max(Some(end));
                } else {
                    // A host that moves nothing: a flow that never ends, as before.
                    new.push((Path::from([]), bits, intra_gbps, job));
                    index.push(i);
                }
                continue;
            }
            let cap = throttle.map_or(gbps, |t| t.min(gbps));
            for (path, share) in self.flow_paths(job, i, (src, dst)) {
                let j = &mut self.jobs[job];
                for &l in path.iter() {
                    let pos = j.links_used.binary_search(&l).unwrap_or_else(|pos| {
                        j.links_used.insert(pos, l);
                        j.own_bits.insert(pos, 0.0);
                        j.links_grew = true;
                        pos
                    });
                    j.own_bits[pos] += bits * share;
                }
                new.push((path, bits * share, cap * share, job));
                index.push(i);
            }
        }
        // The collective's demand joins the job's peaks; fast-forwarded jobs
        // on links that may now bind rejoin the detailed simulation first
        // (on a link with headroom they run as they would beside these flows).
        self.headroom.raise(&mut self.jobs[job].peaks, new.iter().map(|(path, _, cap, _)| (&path[..], *cap)));
        if !self.skip_owners.is_empty() {
            let room = &self.headroom;
            let mut owners: Vec<JobId> = room
                .touched()
                .iter()
                .filter(|&&l| !room.clear(l))
                .filter_map(|l| self.skip_owners.get(l))
                .flatten()
                .copied()
                .filter(|&o| o != job)
                .collect();
            owners.sort_unstable();
            owners.dedup();
            for o in owners {
                self.materialise(o);
            }
        }
        let (ids, changed) = self.net.add_all(self.now, new);
        self.note_interactions();
        self.wake_transport();
        for (&f, &i) in ids.iter().zip(&index) {
            if self.flow_job.len() <= f {
                self.flow_job.resize(f + 1, None);
            }
            self.flow_job[f] = Some((job, epoch, i));
            self.jobs[job].flows.push(&self.net, f);
        }
        self.reschedule(&changed);
        let started = ids.len() + usize::from(host_end.is_some());
        if let Some(end) = host_end {
            self.push(end, Event::HostTransfersDone(job, epoch));
        }
        self.jobs[job].pending_flows = started;
        started
    }

    /// The paths of flow `i` of a job, from worker `src` to worker `dst`
    /// (ranks): by ECMP, a fixed hash of the flow's identity picks one
    /// equal-cost path, so a connection keeps its path; on a rail fabric
    /// among those of the destination GPU's rail. Unless a
    /// [`Decision::Route`] pinned the flow, in which case it is split
    /// equally over the chosen paths: (path, share of the flow) pairs.
    /// None between workers on one host.
    pub(super) fn flow_paths(&mut self, job: JobId, i: usize, (src, dst): (usize, usize)) -> FlowPaths {
        let j = &self.jobs[job];
        let (a, b) = (j.workers[src], j.workers[dst]);
        let rail = self.topo.rail_of(b, j.worker_gpus.get(dst).copied().unwrap_or(0));
        let topo = self.topo;
        let paths = self.paths.entry((a, b, rail)).or_insert_with(|| {
            let found = if topo.rails { topo.rail_paths(a, b, rail) } else { topo.paths(a, b) };
            found.into_iter().map(Path::from).collect()
        });
        if paths.is_empty() {
            return FlowPaths::new();
        }
        let j = &self.jobs[job];
        let step_route = if j.step_routes.is_empty() {
            None
        } else {
            // The current segment's index among the iteration's communication segments.
            let step = j.shape.segments[..j.segment.min(j.shape.segments.len())]
                .iter()
                .filter(|s| matches!(s, Segment::Comm { .. }))
                .count();
            j.step_routes.get(&(step, i))
        };
        if let Some(chosen) = step_route.or_else(|| j.routes.get(i)).filter(|c| !c.is_empty()) {
            let share = 1.0 / chosen.len() as f64;
            return chosen.iter().map(|&k| (paths[k % paths.len()].clone(), share)).collect();
        }
        smallvec::smallvec![(paths[orrery_model::topology::ecmp_index(job, i, paths.len())].clone(), 1.0)]
    }

    /// A flow of `job` (the `index`-th of its collective, started in
    /// `epoch`) ended: the collective ends with its last part
    /// ([`Simulation::part_done`]).
    pub(super) fn flow_ended(&mut self, job: JobId, epoch: u64, index: usize, policy: &mut dyn Policy) {
        if self.jobs[job].epoch != epoch {
            return;
        }
        self.record_flow_end(job, index, self.now);
        self.part_done(job, policy);
    }

    /// When flow `index` of the job's current collective ends (`end_ns`),
    /// for resuming a fast-forwarded job mid-collective.
    fn record_flow_end(&mut self, job: JobId, index: usize, end_ns: u64) {
        let j = &mut self.jobs[job];
        let seg = j.segment;
        if j.cur_flow_ns.len() <= seg {
            j.cur_flow_ns.resize(seg + 1, Vec::new());
        }
        let offsets = &mut j.cur_flow_ns[seg];
        if offsets.len() <= index {
            offsets.resize(index + 1, 0);
        }
        offsets[index] = end_ns - j.seg_start_ns;
    }

    /// One part of the job's current collective ended (a flow, or its
    /// transfers inside hosts): the collective ends with its last part.
    pub(super) fn part_done(&mut self, job: JobId, policy: &mut dyn Policy) {
        let j = &mut self.jobs[job];
        j.pending_flows = j.pending_flows.saturating_sub(1);
        if j.pending_flows == 0 {
            self.end_segment(job);
            self.run_segment(job, policy);
        }
    }

    pub(super) fn finish_iteration(&mut self, job: JobId, policy: &mut dyn Policy) {
        let now = self.now;
        let ms = (now - self.jobs[job].iter_start_ns) as f64 / 1e6;
        // Per-iteration traffic on the job's links, for fast-forwarding.
        {
            let (j, net) = (&mut self.jobs[job], &mut self.net);
            net.close_links(&j.links_used, now);
            j.iteration_ms.add(ms);
            if self.cfg.record_iterations {
                let routes: Vec<(usize, &Vec<usize>)> = j.routes.iter().collect();
                let list = |p: &[usize]| p.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
                let mut steps: Vec<(&(usize, usize), &Vec<usize>)> = j.step_routes.iter().collect();
                steps.sort();
                let routes = routes
                    .iter()
                    .map(|(f, p)| format!("{f}:{}", list(p)))
                    .chain(steps.iter().map(|((s, f), p)| format!("step{s}/{f}:{}", list(p))))
                    .collect::<Vec<_>>()
                    .join(";");
                j.iterations.push(IterationRecord {
                    iteration: j.iterations_done,
                    due_s: j.iter_start_ns as f64 / NS,
                    start_s: (j.iter_start_ns + j.iter_delay_ns) as f64 / NS,
                    end_s: now as f64 / NS,
                    delay_ms: j.iter_delay_ns as f64 / 1e6,
                    throttle_gbps: j.throttle_gbps,
                    routes,
                });
            }
            j.iterations_done += 1;
            // Alone all iteration: no other job's flow met it, no link was
            // added, and no other owner's traffic started on its links
            // meanwhile (a flow that did not overlap it, or a fast-forward's
            // credit): the links' excess and congested time are then its
            // own.
            let solo = !j.interacted
                && !j.links_grew
                && j.iter_stats_start.len() == j.links_used.len()
                && j.links_used.iter().zip(&j.iter_stats_start).all(|(&l, s)| net.stats[l].foreign == s.3);
            // Or beside other jobs, on links that had headroom all
            // iteration: its flows got their caps as they would alone, and
            // its own traffic is what its flows carried.
            let room = &self.headroom;
            let beside = !solo
                && !j.links_grew
                && j.iter_stats_start.len() == j.links_used.len()
                && j.own_bits.len() == j.links_used.len()
                && j.links_used.iter().all(|&l| room.clear(l))
                && j.lost_at_start == Some(j.links_used.iter().map(|&l| room.lost(l)).sum());
            let settled = solo || beside;
            j.solo_streak = if settled { j.solo_streak + 1 } else { 0 };
            std::mem::swap(&mut j.last_seg_ns, &mut j.cur_seg_ns);
            std::mem::swap(&mut j.last_flow_ns, &mut j.cur_flow_ns);
            j.per_iter_delta.clear();
            // Only when the links are those snapshot at the start (a link
            // inserted since shifts the pairing); the fast-forward needs
            // `settled` anyway.
            if beside {
                j.per_iter_delta.extend(j.own_bits.iter().map(|&bits| (bits, 0.0, 0)));
            } else if solo {
                // Its bits are its flows' own, not the links' deltas: another
                // owner's flow already on a link when the iteration began
                // adds to the link's total without meeting this job's flows
                // (on a link with headroom they share no bottleneck), and
                // credited per iteration it counted twice (`benchmark-network`,
                // seeds 1-3: 160,411 solo iterations credited over their own
                // bits, by 16% at the median and up to 11 times).
                j.per_iter_delta.extend(j.links_used.iter().zip(&j.iter_stats_start).zip(&j.own_bits).map(
                    |((&l, &(_, e, c, _)), &bits)| {
                        let s = &net.stats[l];
                        (bits, s.excess_bits - e, s.congested_ns - c)
                    },
                ));
            }
        }
        // The controller hook, only for policies that watch iterations, and
        // with only what they need of the view (the whole view is O(jobs),
        // too much for every iteration of every job).
        let it = self.observes.then(|| orrery_policy::Iteration {
            ms,
            waited_ms: self.jobs[job].iter_delay_ns as f64 / 1e6,
            comm_ms: self.jobs[job].last_comm_ms(),
        });
        let needs = it.as_ref().map_or(IterationNeeds::Nothing, |it| policy.iteration_needs(job, it));
        if let Some(it) = it.filter(|_| needs != IterationNeeds::Nothing) {
            // The view shows only the jobs needed: only their cursors move
            // (O(those jobs), not O(fast-forwarded jobs) per iteration).
            match &needs {
                IterationNeeds::Jobs(ids) => ids.iter().for_each(|&id| self.advance_skip(id, self.now)),
                _ => self.advance_skips(),
            }
            let decisions = {
                let (queue, running) = match &needs {
                    IterationNeeds::Jobs(ids) => (Vec::new(), self.running_view(ids)),
                    _ => self.view(Vec::new()),
                };
                let view =
                    ClusterView { now_s: now as f64 / NS, topology: self.topo, free_gpus: &self.free, queue, running };
                policy.on_iteration(&view, job, it)
            };
            if !decisions.is_empty() {
                self.apply(decisions, policy);
            }
        }
        let watched = self.observes && policy.watches(job);
        let j = &mut self.jobs[job];
        j.watched = watched;
        if j.status != Status::Running {
            return;
        }
        if j.iterations_done >= j.target_iterations {
            self.complete(job, policy);
        } else if std::mem::take(&mut j.pause_requested) {
            j.status = Status::Paused;
            j.pauses += 1;
        } else {
            self.start_iteration(job);
        }
    }

    /// Ends a job that ran all its iterations.
    pub(super) fn complete(&mut self, job: JobId, policy: &mut dyn Policy) {
        self.release(job);
        let j = &mut self.jobs[job];
        j.status = Status::Finished;
        j.finish_ns = Some(self.now);
        self.schedule(policy);
    }
}

/// A compute segment of `ms` ms stretched by noise drawn from `noise` (none
/// without jitter), never below a tenth of it, ns: the one formula of the
/// detailed simulation and the fast-forward's draws.
pub(super) fn noisy_ns(ms: f64, noise: Option<&Normal<f64>>, rng: &mut ChaCha8Rng) -> u64 {
    let noise = noise.map_or(0.0, |n| n.sample(rng));
    (ms * (1.0 + noise).max(0.1) * 1e6).round() as u64
}

/// A job's pinned routes ([`Decision::Route`]): flow index → the paths it is
/// split over. Read for every flow of every collective the job starts, in
/// flow order, so the first [`Routes::DENSE`] flows are a table indexed by
/// flow (a hash map's lookup was a cache miss a flow: 63% of
/// `flow_paths`' own time under `orrery` at 16,384 hosts); flows past it,
/// which only an odd script names, a map.
#[derive(Debug, Clone, Default)]
pub(super) struct Routes {
    dense: Vec<Vec<usize>>,
    far: std::collections::BTreeMap<usize, Vec<usize>>,
}

impl Routes {
    /// Flows held in the table: a million-transfer all-to-all (1,024
    /// workers) fits, and a table never outgrows 24 MiB.
    const DENSE: usize = 1 << 20;

    /// The paths of `flow`, if it is routed. O(1) in the table.
    pub(super) fn get(&self, flow: usize) -> Option<&Vec<usize>> {
        match self.dense.get(flow) {
            Some(paths) => Some(paths).filter(|p| !p.is_empty()),
            None if flow >= Self::DENSE => self.far.get(&flow),
            None => None,
        }
    }

    /// Routes `flow` over `paths`; no paths un-route it (ECMP again).
    pub(super) fn set(&mut self, flow: usize, paths: Vec<usize>) {
        if flow >= Self::DENSE {
            if paths.is_empty() {
                self.far.remove(&flow);
            } else {
                self.far.insert(flow, paths);
            }
        } else if !paths.is_empty() || flow < self.dense.len() {
            if self.dense.len() <= flow {
                self.dense.resize_with(flow + 1, Vec::new);
            }
            self.dense[flow] = paths;
        }
    }

    /// Routed flows, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, &Vec<usize>)> {
        let dense = self.dense.iter().enumerate().filter(|(_, p)| !p.is_empty());
        dense.chain(self.far.iter().map(|(&f, p)| (f, p)))
    }
}

#[cfg(test)]
mod routes_tests {
    use super::Routes;

    #[test]
    fn routes_set_replaced_and_cleared_read_back_in_flow_order() {
        let mut r = Routes::default();
        r.set(5, vec![1, 2]);
        r.set(2, vec![0]);
        r.set(Routes::DENSE + 7, vec![3]);
        r.set(9, Vec::new()); // un-routing a flow never routed adds nothing
        assert_eq!(r.get(5), Some(&vec![1, 2]));
        assert_eq!(r.get(3), None);
        assert_eq!(r.get(9), None);
        assert_eq!(r.get(Routes::DENSE + 7), Some(&vec![3]));
        r.set(5, vec![4]);
        r.set(2, Vec::new());
        let all: Vec<(usize, Vec<usize>)> = r.iter().map(|(f, p)| (f, p.clone())).collect();
        assert_eq!(all, vec![(5, vec![4]), (Routes::DENSE + 7, vec![3])]);
        r.set(Routes::DENSE + 7, Vec::new());
        assert_eq!(r.get(Routes::DENSE + 7), None);
        assert_eq!(r.dense.len(), 6, "the table grows only to the highest routed flow");
    }
}
