//! The fast-forward: jobs that run undisturbed are counted analytically
//! instead of simulated flow by flow (see "Fast-forward" in docs/guide/simulation.md).

use super::iteration::noisy_ns;
use super::{DrawKey, Event, JobState, Simulation, Skip, Status};
use orrery_model::placed::rank_transfers;
use orrery_model::{LinkId, Segment};
use orrery_policy::memo::FastMap;
use orrery_policy::{JobId, Policy};
use rand_chacha::ChaCha8Rng;
use rand_distr::Normal;

/// Iterations of a fast-forwarded job drawn ahead per event.
pub(super) const SKIP_STRETCH: u64 = 1024;

/// The fast-forwarded jobs, in a dense list, each with the instant before
/// which its cursor has nothing to count, so that bringing every cursor to
/// now ([`Simulation::advance_skips`]) skips a job without reading its
/// state. Order is irrelevant: a cursor's count depends on its own job
/// alone. Insert and remove O(1) (a swap with the last entry).
#[derive(Debug, Default)]
pub(super) struct Due {
    /// (due, job).
    entries: Vec<(u64, JobId)>,
    /// Each job's index in `entries`.
    slot: FastMap<JobId, usize>,
}

impl Due {
    /// A job starts being fast-forwarded: visited at the next scan.
    fn insert(&mut self, job: JobId) {
        let old = self.slot.insert(job, self.entries.len());
        debug_assert!(old.is_none(), "job {job} fast-forwarded twice");
        self.entries.push((0, job));
    }

    /// The fast-forwarded jobs by id, the order in which they rejoin the
    /// detailed simulation together (their links are credited in it).
    /// O(n log n); at the probe's start and the run's end only.
    pub(super) fn jobs_by_id(&self) -> Vec<JobId> {
        let mut jobs: Vec<JobId> = self.entries.iter().map(|e| e.1).collect();
        jobs.sort_unstable();
        jobs
    }

    fn remove(&mut self, job: JobId) {
        let Some(i) = self.slot.remove(&job) else { return };
        self.entries.swap_remove(i);
        if let Some(&(_, moved)) = self.entries.get(i) {
            self.slot.insert(moved, i);
        }
    }
}

/// The wait at `t` for the next of a paced job's TDM slots `pace`, as
/// [`orrery_policy::slot::start_delay_ns`] gives it; none when unpaced.
fn slot_wait_ns(pace: Option<(u64, u64)>, t: u64) -> u64 {
    if pace.is_some() { orrery_policy::slot::start_delay_ns(t, 0.0, None, pace) } else { 0 }
}

/// What a fast-forwarded iteration's duration is drawn from, borrowed from
/// the job's state beside its cursor, so that the cursor draws in place.
struct Draw<'a> {
    /// TDM slots every iteration starts in (Metronome's pacing).
    pace: Option<(u64, u64)>,
    segments: &'a [Segment],
    /// Each segment's duration in the last detailed iteration, ns.
    last_seg_ns: &'a [u64],
    /// Compute stretch: the interference ratio ξ and gradient accumulation.
    xi: f64,
    accumulation: f64,
    /// The compute noise, when the run has jitter.
    noise: Option<&'a Normal<f64>>,
}

impl<'a> Draw<'a> {
    /// What a job's iterations are drawn from, given its fields (borrowed
    /// one by one beside its cursor).
    fn new(
        pace: Option<(u64, u64)>,
        segments: &'a [Segment],
        last_seg_ns: &'a [u64],
        (xi, accumulation): (f64, f64),
        noise: Option<&'a Normal<f64>>,
    ) -> Self {
        Draw { pace, segments, last_seg_ns, xi, accumulation, noise }
    }

    /// The wait for the iteration's slot, compute drawn as the detailed
    /// simulation draws it ([`noisy_ns`]), communication as last measured.
    /// O(segments).
    fn iteration_ns(&self, t: u64, rng: &mut ChaCha8Rng) -> u64 {
        let work: u64 = self
            .segments
            .iter()
            .zip(self.last_seg_ns)
            .map(|(seg, &last)| match seg {
                Segment::Compute { ms } => noisy_ns(ms * self.xi * self.accumulation, self.noise, rng),
                Segment::Comm { .. } => last,
            })
            .sum();
        slot_wait_ns(self.pace, t) + work
    }
}

/// What a job's fast-forwarded iterations are drawn with that can change
/// while it is fast-forwarded: its slots, ξ and accumulation (its segments
/// and measured communication change only in detailed iterations).
fn draw_key(j: &JobState) -> DrawKey {
    (j.pace, j.xi.to_bits(), j.accumulation.to_bits())
}

/// A fast-forwarded job's cursor, its durations, and how its iterations are
/// drawn, borrowed apart (the one place a [`Draw`] is built from a job).
fn cursor<'a>(
    j: &'a mut JobState,
    noise: Option<&'a Normal<f64>>,
) -> Option<(&'a mut Skip, &'a mut crate::durations::Durations, Draw<'a>)> {
    let draw = Draw::new(j.pace, &j.shape.segments, &j.last_seg_ns, (j.xi, j.accumulation), noise);
    Some((j.skip.as_mut()?, &mut j.iteration_ms, draw))
}

/// Adds the iterations the cursor counted from its stretch's draws since the
/// last call to the job's durations, in their order. O(those iterations).
fn record_counted(j: &mut JobState) {
    if let Some(skip) = j.skip.as_mut() {
        skip.ahead.record_into(&mut j.iteration_ms);
    }
}

impl Simulation<'_> {
    /// Idle time of a fast-forwarded iteration called at `t` before it may
    /// start: the wait for the job's TDM slot when it is paced (Metronome),
    /// as [`orrery_policy::slot::start_delay_ns`] gives it; else none.
    fn pace_wait_ns(&self, job: JobId, t: u64) -> u64 {
        slot_wait_ns(self.jobs[job].pace, t)
    }

    /// An iteration's segments: compute as `compute(ms)` gives it,
    /// communication as last measured, ns. O(segments).
    fn work_ns(&self, job: JobId, mut compute: impl FnMut(f64) -> u64) -> u64 {
        let j = &self.jobs[job];
        j.shape
            .segments
            .iter()
            .zip(&j.last_seg_ns)
            .map(|(seg, &last)| match seg {
                Segment::Compute { ms } => compute(*ms),
                Segment::Comm { .. } => last,
            })
            .sum()
    }

    /// Fast-forwards a job whose last two iterations ran alone on all its
    /// links (no other job's flow in any of its max-min components) or
    /// beside others on links with headroom ([`super::headroom`]), when the
    /// policy does not watch its iterations ([`orrery_policy::Policy::watches`])
    /// and no shift or alignment is pending for it. A paced job keeps its
    /// slots: each counted iteration first idles until its slot.
    /// Its remaining iterations are counted analytically until it finishes or
    /// another job's flow needs one of its links ([`Simulation::materialise`]),
    /// [`SKIP_STRETCH`] iterations per event.
    /// Cost: O(min(remaining iterations, SKIP_STRETCH) · segments) draws.
    pub(super) fn try_skip(&mut self, job: JobId) -> bool {
        let j = &self.jobs[job];
        let eligible = self.cfg.skip && !self.cfg.record_iterations
            && !j.watched
            && j.at_iteration.is_empty()
            && j.step_routes.is_empty()
            && j.status == Status::Running
            && j.solo_streak >= 2
            && j.pending_shift_ms == 0.0
            && j.pending_align.is_none()
            && j.timetable.is_none()
            && !j.pause_requested
            && j.last_seg_ns.len() == j.shape.segments.len()
            && j.iterations_done < j.target_iterations
            // A probed link records every rate change: its jobs are detailed
            // from the window's start (`Event::ProbeStart` brings back those
            // fast-forwarded until then), so a replay for a figure costs what
            // the run cost up to the window, not all of it in detail.
            && self.cfg.probe.is_none_or(|(probed, start_s, _)| {
                !j.links_used.contains(&probed) || self.now < (start_s.max(0.0) * super::NS) as u64
            })
            // On a link that may bind, another job's flows already there would
            // meet this job's next collective without anything waking it up:
            // stay detailed. A link with headroom never binds: any jobs may
            // share it ([`super::headroom`]).
            && j.links_used.iter().all(|&l| {
                self.headroom.clear(l) || (!self.skip_owners.contains_key(&l) && !self.net.busy(l))
            });
        if !eligible {
            return false;
        }
        let snapshot = j.rng.clone();
        for &l in &self.jobs[job].links_used {
            self.skip_owners.entry(l).or_default().push(job);
        }
        let j = &mut self.jobs[job];
        j.epoch += 1;
        j.skip = Some(Skip::new(self.now, snapshot));
        self.skip_due.insert(job);
        self.next_stretch(job);
        true
    }

    /// Draws the next stretch of a fast-forwarded job (up to [`SKIP_STRETCH`]
    /// iterations from its cursor) and schedules the event at its end. A run
    /// thus pays for the iterations that fit in the simulated time it covers,
    /// never for all those a job asks for (`max_time_s` bounds it).
    fn next_stretch(&mut self, job: JobId) {
        let constant = self.constant_iteration_ns(job);
        let noise = (self.cfg.jitter > 0.0).then_some(&self.normal);
        let keep = self.keep_draws;
        let j = &mut self.jobs[job];
        record_counted(j);
        let key = draw_key(j);
        let left = j.target_iterations.saturating_sub(j.iterations_done);
        let Some((skip, _, draw)) = cursor(j, noise) else { return };
        let left = left.saturating_sub(skip.done);
        let end = match constant {
            // Every iteration alike: the whole rest is one stretch, O(1).
            Some(d) => skip.t.saturating_add(d.saturating_mul(left)),
            None => {
                // Each draw is kept for the cursor, which then reads it
                // instead of drawing it again (half of a fast-forwarded
                // iteration's cost was its second draw).
                let mut rng = skip.rng_at_t();
                let ahead = &mut skip.ahead;
                ahead.start(skip.word, key);
                let mut end = skip.t;
                let mut kept = keep;
                for _ in 0..left.min(SKIP_STRETCH) {
                    let d = draw.iteration_ns(end, &mut rng);
                    end = end.saturating_add(d);
                    kept = kept && ahead.keep(d, rng.get_word_pos());
                }
                end
            }
        };
        let j = &self.jobs[job];
        let epoch = j.epoch;
        self.push(end, Event::SkipStretch(job, epoch));
    }

    /// The end of a stretch: the job finishes here or goes on to the next one.
    pub(super) fn stretch_end(&mut self, job: JobId, policy: &mut dyn Policy) {
        self.advance_skip(job, self.now);
        let j = &self.jobs[job];
        let counted = j.skip.as_ref().map_or(0, |s| s.done);
        if j.iterations_done + counted >= j.target_iterations {
            self.replay(job, self.now);
            self.complete(job, policy);
        } else {
            self.next_stretch(job);
        }
    }

    /// Duration of every iteration of a fast-forwarded job when they are all
    /// alike: no compute noise and no slot to wait for. Then a stretch is
    /// counted in O(1) instead of one draw per iteration.
    fn constant_iteration_ns(&self, job: JobId) -> Option<u64> {
        if self.cfg.jitter > 0.0 || self.jobs[job].pace.is_some() {
            return None;
        }
        // As `iteration_ns` without noise (no draw, so no RNG to copy).
        let j = &self.jobs[job];
        let d = self.work_ns(job, |ms| (ms * j.xi * j.accumulation * 1e6).round() as u64);
        Some(d).filter(|&d| d > 0)
    }

    /// Moves a fast-forwarded job's cursor over the iterations that end by
    /// `until`. O(1) when its iterations are all alike, else O(iterations
    /// passed + 1) draws.
    pub(super) fn advance_skip(&mut self, job: JobId, until: u64) {
        // The next iteration, already drawn, ends after `until`: nothing to
        // count. Checked in place, as moving the cursor out and back copies
        // two RNG states (~0.7 kB): with thousands of jobs fast-forwarded,
        // every view paid that per job (10% of a 4,096-host simulation).
        let drawn_ends_later =
            self.jobs[job].skip.as_ref().is_some_and(|s| s.next.as_ref().is_some_and(|&(d, _)| s.t + d > until));
        if drawn_ends_later && self.constant_iteration_ns(job).is_none() {
            return;
        }
        let constant = self.constant_iteration_ns(job);
        let noise = (self.cfg.jitter > 0.0).then_some(&self.normal);
        // The cursor is advanced where it lies: moving it out and back
        // copied its two RNG states (~0.7 kB) at every visit, 5% of a
        // 16,384-host run.
        let j = &mut self.jobs[job];
        let left = j.target_iterations.saturating_sub(j.iterations_done);
        let key = draw_key(j);
        let Some((skip, iteration_ms, draw)) = cursor(j, noise) else { return };
        if skip.ahead.key != key && !skip.ahead.drawn.is_empty() {
            // Drawn with slots, ξ or accumulation that have changed since:
            // what was counted is recorded, the rest is drawn anew.
            skip.ahead.forget(iteration_ms);
        }
        if let Some(d) = constant {
            let fit = (until.saturating_sub(skip.t) / d).min(left.saturating_sub(skip.done));
            if fit > 0 {
                skip.t += fit * d;
                skip.done += fit;
                skip.last_ms = d as f64 / 1e6;
                skip.next = None;
                iteration_ms.add_n(skip.last_ms, fit);
            }
            return;
        }
        while skip.done < left {
            // Drawn on the cursor's own RNG, which then stands after the
            // draw; `word` keeps where it stood at `t` (no copy of the state).
            // The stretch's own draw is read when there is one.
            let kept = skip.ahead.get(skip.ahead.pos);
            let (d, after) = skip.next.take().unwrap_or_else(|| match kept {
                Some(k) => k,
                None => {
                    skip.rewind();
                    let d = draw.iteration_ns(skip.t, &mut skip.rng);
                    (d, skip.rng.get_word_pos())
                }
            });
            if skip.t + d > until {
                skip.next = Some((d, after));
                break;
            }
            skip.word = after;
            skip.t += d;
            skip.done += 1;
            skip.last_ms = d as f64 / 1e6;
            if kept == Some((d, after)) {
                // Recorded with the rest of the stretch's (`record_counted`).
                skip.ahead.pos += 1;
            } else {
                if !skip.ahead.drawn.is_empty() {
                    skip.ahead.forget(iteration_ms);
                }
                iteration_ms.add(skip.last_ms);
            }
        }
    }

    /// Brings every fast-forwarded job's cursor to now, so that a view shows
    /// their exact iteration counts and starts. O(fast-forwarded jobs +
    /// iterations passed), the first term a scan of 16 bytes a job: only
    /// the cursors with an iteration ending by now are visited (at 16,384
    /// hosts 6.3 M of a run's 72.9 M visits; each visit reads the job's
    /// state, a few cache lines away from the next job's).
    pub(super) fn advance_skips(&mut self) {
        let now = self.now;
        for i in 0..self.skip_due.entries.len() {
            let (due, job) = self.skip_due.entries[i];
            if due > now {
                continue;
            }
            self.advance_skip(job, now);
            self.skip_due.entries[i].0 = self.cursor_due(job);
        }
    }

    /// When `job`'s cursor next has an iteration to count: the end of the
    /// iteration it has drawn; 0 (visit at once) when it has none drawn or
    /// its iterations are counted in O(1) ([`Simulation::constant_iteration_ns`]).
    /// A cursor only moves forward and keeps a drawn iteration until it
    /// counts it, so the time kept can only be early, never late.
    fn cursor_due(&self, job: JobId) -> u64 {
        match &self.jobs[job].skip {
            Some(s) if self.constant_iteration_ns(job).is_none() => s.next.map_or(0, |(d, _)| s.t + d),
            _ => 0,
        }
    }

    /// Counts a fast-forwarded job's iterations that end by `until` and credits
    /// their traffic to its links; returns the start of the first iteration
    /// that does not end by then, with the job's RNG where the detailed
    /// simulation would have it at that point, and the duration of the last
    /// iteration counted, ms.
    pub(super) fn replay(&mut self, job: JobId, until: u64) -> (u64, f64) {
        self.advance_skip(job, until);
        record_counted(&mut self.jobs[job]);
        let Some(skip) = self.jobs[job].skip.take() else { return (self.now, 0.0) };
        self.skip_due.remove(job);
        let n = skip.done;
        let j = &mut self.jobs[job];
        j.iterations_done += n;
        j.skipped_iterations += n;
        let credits = self.per_iteration_credits(job);
        for (l, (bits, excess, congested)) in credits {
            self.net.credit(l, skip.t0, skip.t, bits * n as f64, excess * n as f64, congested * n);
        }
        for &l in &self.jobs[job].links_used {
            if let Some(owners) = self.skip_owners.get_mut(&l) {
                owners.retain(|&o| o != job);
                if owners.is_empty() {
                    self.skip_owners.remove(&l);
                }
            }
        }
        let j = &mut self.jobs[job];
        j.rng = skip.rng_at_t();
        j.epoch += 1;
        j.solo_streak = 0;
        (skip.t, skip.last_ms)
    }

    pub(super) fn per_iteration_credits(&self, job: JobId) -> Vec<(LinkId, (f64, f64, u64))> {
        let j = &self.jobs[job];
        j.links_used.iter().copied().zip(j.per_iter_delta.iter().copied()).collect()
    }

    /// Brings a fast-forwarded job back to detailed simulation at `now`: the
    /// iterations already over are counted, and the current one resumes in the
    /// segment it would be in (a collective restarts with the fraction of its
    /// bytes left). Traffic of the elapsed part of the current iteration is
    /// credited pro rata, so a link may be off by up to one iteration's bytes.
    /// A job no longer fast-forwarded is left alone: one found on several
    /// links, or brought back by another job's return, is brought back once.
    pub(super) fn materialise(&mut self, job: JobId) {
        if self.jobs[job].skip.is_none() {
            return;
        }
        let now = self.now;
        let (t, last) = self.replay(job, now);
        if self.jobs[job].iterations_done >= self.jobs[job].target_iterations {
            // It would have ended exactly now; its last stretch was cancelled, so end it here.
            let epoch = self.jobs[job].epoch;
            let j = &mut self.jobs[job];
            j.segment = j.shape.segments.len();
            j.iterations_done -= 1;
            j.skipped_iterations -= 1;
            j.iteration_ms.remove(last);
            j.iter_start_ns = now - (last * 1e6).round() as u64;
            self.push(now, Event::ComputeDone(job, epoch));
            return;
        }
        // A paced job between iterations idles until its slot: it starts there.
        let wait = self.pace_wait_ns(job, t);
        if t + wait > now {
            let epoch = self.jobs[job].epoch;
            let j = &mut self.jobs[job];
            j.iter_start_ns = t;
            j.segment = 0;
            j.cur_seg_ns.clear();
            j.cur_flow_ns.clear();
            j.interacted = true;
            j.iter_stats_start.clear();
            self.push(t + wait, Event::IterationStart(job, epoch));
            return;
        }
        // Walk the current iteration's segments up to `now`.
        let mut rng = self.jobs[job].rng.clone();
        let segments = self.jobs[job].shape.segments.clone();
        let last = self.jobs[job].last_seg_ns.clone();
        let mut start = t + wait;
        let mut resumed = None;
        let mut seg_ns = Vec::new();
        for (i, seg) in segments.iter().enumerate() {
            let d = match seg {
                Segment::Compute { ms } => self.job_compute_ns(job, *ms, &mut rng),
                Segment::Comm { .. } => last.get(i).copied().unwrap_or(0),
            };
            if start + d > now {
                resumed = Some((i, start, d));
                break;
            }
            seg_ns.push(d);
            start += d;
        }
        // Traffic of the elapsed part of this iteration: every flow of the
        // collectives already over, and the sent share of the current one's.
        let left = match resumed {
            Some((i, seg_start, d)) if matches!(segments[i], Segment::Comm { .. }) => {
                Some((i, self.flow_left(job, i, now - seg_start, d)))
            }
            _ => None,
        };
        let mut sent: FastMap<LinkId, f64> = FastMap::default();
        for (i, seg) in segments.iter().enumerate().take(resumed.map_or(segments.len(), |r| r.0 + 1)) {
            let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
            let transfers = rank_transfers(self.jobs[job].workers.len(), collective, payload_bytes, group);
            for (k, (src, dst, bits)) in transfers.into_iter().enumerate() {
                let share = match &left {
                    Some((cur, l)) if *cur == i => 1.0 - l.get(k).copied().unwrap_or(1.0),
                    _ if resumed.is_some_and(|r| r.0 == i) => 0.0,
                    _ => 1.0,
                };
                if share <= 0.0 {
                    continue;
                }
                for (p, part) in self.flow_paths(job, k, (src, dst)) {
                    for &l in p.iter() {
                        *sent.entry(l).or_default() += bits * share * part;
                    }
                }
            }
        }
        for (l, (bits, excess, congested)) in self.per_iteration_credits(job) {
            let s = sent.get(&l).copied().unwrap_or(0.0);
            // Excess and congestion in proportion to the bits this link carried.
            let frac = if bits > 0.0 { (s / bits).min(1.0) } else { 0.0 };
            self.net.credit(l, t, now, s, excess * frac, (congested as f64 * frac) as u64);
        }
        let epoch = self.jobs[job].epoch;
        let j = &mut self.jobs[job];
        j.rng = rng;
        j.iter_start_ns = t;
        j.cur_seg_ns = seg_ns;
        j.cur_flow_ns.clear();
        j.interacted = true;
        j.iter_stats_start.clear();
        let Some((i, seg_start, d)) = resumed else {
            j.segment = segments.len();
            self.push(now, Event::ComputeDone(job, epoch));
            return;
        };
        j.segment = i;
        j.seg_start_ns = seg_start;
        match segments[i] {
            Segment::Compute { .. } => self.push(seg_start + d, Event::ComputeDone(job, epoch)),
            Segment::Comm { collective, payload_bytes, group, .. } => {
                let left = self.flow_left(job, i, now - seg_start, d);
                let intra = segments[i].intra_host_gbps();
                self.start_collective(job, (collective, payload_bytes, group, intra), Some(&left));
                if self.jobs[job].pending_flows == 0 {
                    self.push(now, Event::ComputeDone(job, epoch));
                }
            }
        }
    }

    /// Share of each flow of comm segment `i` still to send `elapsed` ns into
    /// it: alone, each flow ran at a constant rate and ended at the offset
    /// recorded in the last detailed iteration (`d`, the segment's length, if
    /// none was recorded).
    pub(super) fn flow_left(&self, job: JobId, i: usize, elapsed: u64, d: u64) -> Vec<f64> {
        let j = &self.jobs[job];
        let Segment::Comm { collective, payload_bytes, group, .. } = j.shape.segments[i] else { return Vec::new() };
        let offsets = j.last_flow_ns.get(i).map(Vec::as_slice).unwrap_or_default();
        let n = rank_transfers(j.workers.len(), collective, payload_bytes, group).len();
        (0..n)
            .map(|k| {
                let end = offsets.get(k).copied().filter(|&e| e > 0).unwrap_or(d).max(1) as f64;
                (1.0 - elapsed as f64 / end).max(0.0)
            })
            .collect()
    }
}

/// What the fast-forward reads of a job's iterations belongs to its
/// placement.
impl super::JobState {
    /// Forgets what its iterations measured on its previous placement: the
    /// segments' and flows' times, the links its flows used and their
    /// traffic per iteration, and how many iterations in a row it ran
    /// undisturbed. A job placed again (after a preemption, or elastically
    /// resized) runs a new shape on new links. With these kept, its
    /// iterations there were judged undisturbed on links it no longer used,
    /// and once fast-forwarded it credited them with the other jobs'
    /// traffic it had seen there (`benchmark-network`, seed 4: a job
    /// resized from eight GPUs to one, its first iteration holding the
    /// restart's 10-s wait, put 48 times their capacity on the links it
    /// had left, for the rest of its run); without a restart's wait its
    /// first iteration could be fast-forwarded at once on the old
    /// placement's communication times. O(links + segments).
    pub(super) fn forget_placement(&mut self) {
        self.solo_streak = 0;
        self.cur_seg_ns.clear();
        self.last_seg_ns.clear();
        self.cur_flow_ns.clear();
        self.last_flow_ns.clear();
        self.links_used.clear();
        self.links_grew = false;
        self.own_bits.clear();
        self.lost_at_start = None;
        self.iter_stats_start.clear();
        self.per_iter_delta.clear();
    }
}

#[cfg(test)]
mod tests {
    use crate::{SimConfig, Simulation};
    use orrery_model::{JobSpec, Work};

    /// Each job's end, iterations, and its iteration histogram's count, sum,
    /// maximum, quartiles and p99, as bits: what a kept draw could change.
    fn outcome(topo: &orrery_model::Topology, jobs: &[JobSpec], policy: &str, keep: bool) -> (Vec<[u64; 8]>, u64) {
        let cfg = SimConfig { seed: 3, jitter: 0.05, ..Default::default() };
        let mut sim = Simulation::new(topo, jobs, cfg, false);
        sim.keep_draws = keep;
        let mut p = orrery_policy::compose::by_name(policy, 3).expect("a policy");
        sim.run(p.as_mut(), &mut |_, _| {});
        let per_job = sim
            .jobs
            .iter()
            .map(|j| {
                let h = &j.iteration_ms;
                [
                    j.finish_ns.unwrap_or(u64::MAX),
                    j.iterations_done,
                    h.len(),
                    h.sum().to_bits(),
                    h.max().to_bits(),
                    h.quantile(0.25).to_bits(),
                    h.quantile(0.5).to_bits(),
                    h.quantile(0.99).to_bits(),
                ]
            })
            .collect();
        (per_job, sim.jobs.iter().map(|j| j.skipped_iterations).sum())
    }

    #[test]
    fn a_kept_draw_reads_back_as_drawn_and_one_that_does_not_fit_is_refused() {
        let base = (1u128 << 70) + 5; // a word position past u64
        let mut a = crate::engine::Ahead { base, ..Default::default() };
        assert!(a.keep(1_234_567_890, base + 17));
        assert!(a.keep((1 << 40) - 1, base + (1 << 24) - 1)); // both at their limits
        assert_eq!(a.get(0), Some((1_234_567_890, base + 17)));
        assert_eq!(a.get(1), Some(((1 << 40) - 1, base + (1 << 24) - 1)));
        assert_eq!(a.duration(1), (1 << 40) - 1);
        assert!(!a.keep(1 << 40, base + 18), "an iteration of 2^40 ns (18 minutes) does not fit");
        assert!(!a.keep(5, base + (1 << 24)), "a stretch of 2^24 words does not fit");
        assert!(!a.keep(5, base - 1), "a word before the stretch's start");
        assert_eq!((a.drawn.len(), a.get(2)), (2, None));
    }

    #[test]
    fn kept_draws_give_the_same_bits_as_draws_made_one_by_one() {
        // CASSINI's testbed (§5.1: 24 one-GPU hosts, two per ToR, 2:1 to
        // one spine): rings across racks share uplinks, so jobs go in and out of
        // the fast-forward while others arrive, views fall inside
        // stretches, and Metronome's slots, Themis's leases and Castor's
        // colocation come and go. (Every decision that changes a job's
        // slots, ξ or accumulation brings it out of the fast-forward first,
        // so `Ahead::key` is a guard these runs do not reach.)
        let topo = orrery_model::setups::cassini();
        let models = ["resnet50", "vgg19", "bert"];
        let jobs: Vec<JobSpec> = (0..9)
            .map(|i| {
                let iterations = Work::Iterations(1500 + 700 * (i as u64 % 3));
                JobSpec::new(format!("j{i}"), models[i % 3], 32, 2 + i as u32 % 3, iterations, 7.0 * i as f64)
            })
            .collect();
        for policy in ["fifo", "metronome", "castor", "themis+cassini", "orrery"] {
            let (kept, skipped) = outcome(&topo, &jobs, policy, true);
            let (one_by_one, _) = outcome(&topo, &jobs, policy, false);
            assert!(skipped > 2 * super::SKIP_STRETCH, "{policy}: the fast-forward must run whole stretches");
            assert_eq!(kept, one_by_one, "{policy}: kept draws changed a job's result");
        }
    }
}
