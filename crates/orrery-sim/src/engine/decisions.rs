//! Decisions applied: places, shares, preemptions and releases of GPUs,
//! and the iteration a preempted job had not begun. Shifts, aligns, paces
//! and timetables are recorded here for the iteration loop to wait on.

use super::{NS, RESCHEDULE_ROUNDS, Sharing, Simulation, Status};
use orrery_model::{HostId, JobSpec, Work};
use orrery_policy::{Decision, JobId, Policy};
use std::collections::HashMap;

impl Simulation<'_> {
    /// Applies decisions; while they preempt jobs (freeing GPUs), asks the
    /// policy again, at most [`RESCHEDULE_ROUNDS`] times in one instant (a
    /// policy that preempts and re-places in a cycle is cut off there; the
    /// next event asks again).
    pub(super) fn apply(&mut self, decisions: Vec<Decision>, policy: &mut dyn Policy) {
        let mut freed = self.apply_once(decisions);
        for _ in 0..RESCHEDULE_ROUNDS {
            if !freed {
                return;
            }
            let Some(d) = self.decide(policy) else { return };
            freed = self.apply_once(d);
        }
        if freed {
            self.reschedules_cut += 1;
        }
    }

    /// Applies decisions; true when the policy should be asked again: one
    /// freed GPUs by preempting a job, or started or refused a job that
    /// others depend on.
    pub(super) fn apply_once(&mut self, decisions: Vec<Decision>) -> bool {
        let mut freed = false;
        for d in decisions {
            // A throttle the job already has changes nothing: re-capping its
            // flows would re-rate their components and count them as met.
            if let Decision::Throttle { job, gbps } = d
                && self.jobs.get(job).is_some_and(|j| j.throttle_gbps == gbps.filter(|g| *g > 0.0))
            {
                continue;
            }
            if let Decision::Preempt { job }
            | Decision::Shift { job, .. }
            | Decision::Align { job, .. }
            | Decision::Pace { job, .. }
            | Decision::Timetable { job, .. }
            | Decision::Pause { job }
            | Decision::Throttle { job, .. }
            | Decision::TrafficClass { job, .. }
            | Decision::Route { job, .. } = d
                && self.jobs.get(job).is_some_and(|j| j.skip.is_some())
            {
                self.materialise(job);
            }
            match d {
                Decision::Place { job, hosts } => {
                    if !self.place(job, hosts) {
                        self.invalid_decisions += 1;
                    } else if self.jobs[job].has_dependents {
                        // Jobs waiting on it may now be offered: ask again.
                        freed = true;
                    }
                }
                Decision::Reject { job, .. } if self.jobs.get(job).is_some_and(|j| j.status == Status::Queued) => {
                    self.waiting.retain(|&w| w != job);
                    self.jobs[job].status = Status::Rejected;
                    self.jobs[job].finish_ns = Some(self.now);
                    // Jobs that depend on it are refused at the next ask.
                    freed |= self.jobs[job].has_dependents;
                }
                Decision::Preempt { job } if self.is_active(job) => {
                    self.release(job);
                    let j = &mut self.jobs[job];
                    j.status = Status::Queued;
                    j.preemptions += 1;
                    let arrival = j.arrival_ns;
                    let pos = self
                        .waiting
                        .iter()
                        .position(|&w| self.jobs[w].arrival_ns > arrival)
                        .unwrap_or(self.waiting.len());
                    self.waiting.insert(pos, job);
                    freed = true;
                }
                Decision::Shift { job, ms } if self.is_active(job) && ms.is_finite() && ms >= 0.0 => {
                    self.jobs[job].pending_shift_ms += ms;
                    self.jobs[job].shifts += 1;
                    self.restart_unbegun_iteration(job);
                }
                Decision::Align { job, period_ms, offset_s }
                    if self.is_active(job) && period_ms > 0.0 && period_ms.is_finite() && offset_s.is_finite() =>
                {
                    self.jobs[job].pending_align =
                        Some(((period_ms * 1e6).round() as u64, (offset_s.max(0.0) * NS).round() as u64));
                    self.jobs[job].shifts += 1;
                    self.restart_unbegun_iteration(job);
                }
                Decision::Pace { job, period_ms, offset_s } if self.is_active(job) && offset_s.is_finite() => {
                    self.jobs[job].pace = (period_ms > 0.0 && period_ms.is_finite())
                        .then(|| ((period_ms * 1e6).round() as u64, (offset_s.max(0.0) * NS).round() as u64));
                    self.jobs[job].shifts += 1;
                    self.restart_unbegun_iteration(job);
                }
                Decision::Timetable { job, from_iteration, starts_s }
                    if self.is_active(job) && orrery_policy::slot::timetable_is_valid(&starts_s) =>
                {
                    self.jobs[job].timetable = (!starts_s.is_empty())
                        .then(|| (from_iteration, starts_s.iter().map(|t| (t.max(0.0) * NS).round() as u64).collect()));
                    self.jobs[job].shifts += 1;
                    self.restart_unbegun_iteration(job);
                }
                Decision::Pause { job } if self.jobs.get(job).is_some_and(|j| j.status == Status::Running) => {
                    self.jobs[job].pause_requested = true;
                }
                Decision::Resume { job } if self.jobs.get(job).is_some_and(|j| j.status == Status::Paused) => {
                    self.jobs[job].status = Status::Running;
                    self.start_iteration(job);
                }
                Decision::Throttle { job, gbps } if self.is_active(job) => {
                    let old = self.jobs[job].throttle_gbps;
                    let new = gbps.filter(|g| *g > 0.0);
                    self.jobs[job].throttle_gbps = new;
                    // A throttle caps what the job sends into the network
                    // (FORESIGHT §4); its transfers inside a host are not
                    // flows and keep their rate. A flow split over several
                    // paths was capped at its share of the whole
                    // (`start_collective`) and keeps that share.
                    let nic = self.nic(job);
                    let whole = |t: Option<f64>| t.map_or(nic, |t| t.min(nic));
                    let (from, to) = (whole(old), whole(new));
                    for f in self.jobs[job].flows.live(&self.net) {
                        let Some(cap) = self.net.flow(f).filter(|fl| !fl.path.is_empty()).map(|fl| fl.cap_gbps) else {
                            continue;
                        };
                        let changed = self.net.set_cap(self.now, f, to * (cap / from));
                        self.note_interactions();
                        self.reschedule(&changed);
                    }
                }
                Decision::TrafficClass { job, class } if self.is_active(job) => {
                    let changed = self.net.set_priority(self.now, job, class);
                    self.note_interactions();
                    self.reschedule(&changed);
                }
                Decision::Route { job, flow, paths } if self.is_active(job) => self.jobs[job].routes.set(flow, paths),
                Decision::Share { job, free, shared, sub_batch } => {
                    if !self.share(job, &free, &shared, sub_batch) {
                        self.invalid_decisions += 1;
                    }
                }
                Decision::Note { job, text } => self.notes.push((self.now as f64 / 1e9, job, text)),
                _ => self.invalid_decisions += 1,
            }
        }
        freed
    }

    /// A shift or alignment decided in the same instant a job's iteration was
    /// due to start (e.g. right after placing it) applies to that iteration.
    pub(super) fn restart_unbegun_iteration(&mut self, job: JobId) {
        let j = &self.jobs[job];
        if j.status == Status::Running
            && j.skip.is_none()
            && j.iter_start_ns == self.now
            && j.segment == 0
            && j.pending_flows == 0
        {
            self.jobs[job].epoch += 1;
            self.start_iteration(job);
        }
    }

    pub(super) fn is_active(&self, job: JobId) -> bool {
        self.jobs.get(job).is_some_and(|j| matches!(j.status, Status::Running | Status::Paused))
    }

    pub(super) fn nic(&self, job: JobId) -> f64 {
        self.jobs[job].hosts.iter().map(|&(h, _)| self.topo.host_nic_gbps(h)).fold(f64::INFINITY, f64::min)
    }

    /// Starts a queued job on the given GPUs; false if the decision is invalid.
    pub(super) fn place(&mut self, job: JobId, hosts: Vec<(HostId, u32)>) -> bool {
        let Some(j) = self.jobs.get(job) else { return false };
        if j.status != Status::Queued {
            return false;
        }
        let gpus: u32 = hosts.iter().map(|h| h.1).sum();
        let mut need: HashMap<HostId, u32> = HashMap::new();
        for &(h, g) in &hosts {
            *need.entry(h).or_default() += g;
        }
        // Any multiple of a worker's GPUs: a size other than the request runs
        // the job elastically (Pollux), its work converted by `ratio`.
        let per_worker = j.spec.gpus_per_worker.max(1);
        if gpus == 0
            || !gpus.is_multiple_of(per_worker)
            || need.iter().any(|(&h, &g)| h >= self.free.len() || self.free[h] < g)
        {
            return false;
        }
        let (k0, k) = (j.spec.workers.max(1), gpus / per_worker);
        // A mesh runs on its request or on the data-parallel widths its
        // user allows, at the same global batch: the same iterations.
        if let Some(mesh) = j.spec.parallelism {
            let cell = mesh.tp.max(1) * mesh.pp.max(1);
            if !gpus.is_multiple_of(cell) || !mesh.allows_dp(gpus / cell) {
                return false;
            }
        }
        let ratio = if k == k0 || j.spec.parallelism.is_some() {
            1.0
        } else {
            orrery_model::convergence::iterations_per_reference(
                &j.spec.model,
                k0.saturating_mul(j.spec.batch),
                k.saturating_mul(j.spec.batch),
            )
        };
        let Some(orrery_model::placed::Placed { workers, gpus, shape }) =
            orrery_model::placed::place(self.topo, &j.spec, &hosts)
        else {
            return false;
        };
        let (worker_gpus, held_gpus) = self.take_gpus(&workers, &gpus, &need);
        let shape = if self.cfg.ring_steps { shape.ring_steps() } else { shape };
        let period = shape.period_ms();
        for (&h, &g) in &need {
            self.free[h] -= g;
        }
        self.waiting.retain(|&w| w != job);
        let now = self.now;
        let j = &mut self.jobs[job];
        if j.ref_total == 0.0 {
            // Seconds of work become iterations at the first placement's speed.
            j.ref_total = match j.spec.work {
                Work::Iterations(n) => n.max(1) as f64,
                Work::Seconds(s) => (((s * 1e3 / period.max(1e-9)).round()).max(1.0) / ratio).max(1.0),
            };
            j.ref_left = j.ref_total;
        }
        j.forget_placement();
        j.ratio = ratio;
        j.iters_at_place = j.iterations_done;
        j.target_iterations = j.iterations_done + ((j.ref_left * ratio - 1e-9).ceil().max(1.0) as u64);
        self.placements += 1;
        j.placement = self.placements;
        j.hosts_used = need.len();
        j.hosts_ascending = hosts.windows(2).all(|w| w[0].0 < w[1].0);
        j.hosts = hosts;
        j.workers = workers;
        j.worker_gpus = worker_gpus;
        j.held_gpus = held_gpus;
        j.shape = shape;
        j.isolated_iter_ms = period;
        j.status = Status::Running;
        self.active.grow_and_insert(job);
        if j.first_start_ns.is_some() && j.preemptions > 0 {
            // Restoring from the checkpoint taken when it was preempted.
            j.pending_shift_ms += self.cfg.restart_penalty_s.max(0.0) * 1e3;
        }
        j.first_start_ns.get_or_insert(now);
        j.last_start_ns = now;
        j.epoch += 1;
        self.start_iteration(job);
        true
    }

    /// On a rail fabric, the GPUs a job placed on `need` (GPUs per host) is
    /// given, by [`SimConfig::gpus`]: each worker's first GPU (its index
    /// `aligned[w]` among the job's GPUs on its host, as
    /// [`orrery_model::placed::place`] numbers them, mapped to the GPU
    /// chosen) and the GPUs held. Off a rail fabric, `aligned` as it is and
    /// nothing held. O(hosts · G²).
    fn take_gpus(
        &mut self,
        workers: &[HostId],
        aligned: &[u32],
        need: &HashMap<HostId, u32>,
    ) -> (Vec<u32>, Vec<(HostId, u32)>) {
        if self.gpu_holders.is_empty() {
            return (aligned.to_vec(), Vec::new());
        }
        let mut hosts: Vec<HostId> = need.keys().copied().collect();
        hosts.sort_unstable();
        let want: Vec<u32> = hosts.iter().map(|h| need[h]).collect();
        let taken: Vec<&[u8]> = hosts.iter().map(|&h| self.gpu_holders[h].as_slice()).collect();
        let chosen = orrery_model::rails::choose_gpus(self.cfg.gpus, &taken, &want);
        let mut held = Vec::new();
        for (&h, ks) in hosts.iter().zip(&chosen) {
            for &k in ks {
                self.gpu_holders[h][k as usize] = self.gpu_holders[h][k as usize].saturating_add(1);
                held.push((h, k));
            }
        }
        (orrery_model::rails::worker_gpus(workers, aligned, &hosts, &chosen), held)
    }

    /// GPUs of `job` on each host that no other job holds.
    pub(super) fn solo_gpus(&self, job: JobId) -> std::borrow::Cow<'_, [(HostId, u32)]> {
        let j = &self.jobs[job];
        debug_assert_eq!(j.hosts_ascending, j.hosts.windows(2).all(|w| w[0].0 < w[1].0));
        if j.sharing.is_empty() && j.hosts_ascending {
            return std::borrow::Cow::Borrowed(&j.hosts); // the common case, on every policy call
        }
        let mut per_host: std::collections::BTreeMap<HostId, u32> = std::collections::BTreeMap::new();
        for &(h, g) in &j.hosts {
            *per_host.entry(h).or_default() += g;
        }
        std::borrow::Cow::Owned(
            per_host
                .into_iter()
                .map(|(h, g)| (h, g - j.sharing.iter().filter(|s| s.host == h).map(|s| s.gpus).sum::<u32>().min(g)))
                .collect(),
        )
    }

    /// Starts queued `job` on `free` GPUs plus `shared` GPUs of running jobs
    /// (Castor's GPU sharing) at per-GPU `sub_batch` (0: its batch); false
    /// if the decision is invalid: a GPU would hold three jobs, the pair
    /// would not fit its memory (`orrery_policy::castor::share::check`, the live
    /// driver's rule too), or the GPUs do not add up to a placement.
    /// Both jobs of each pair are slowed by their ground-truth ξ
    /// ([`SimConfig::colocation`]). O(P·S) for P partners of S sharings each.
    pub(super) fn share(
        &mut self,
        job: JobId,
        free: &[(HostId, u32)],
        shared: &[(JobId, HostId, u32)],
        sub_batch: u32,
    ) -> bool {
        let Some(j) = self.jobs.get(job).filter(|j| j.status == Status::Queued) else { return false };
        let Some(model) = orrery_model::zoo::model(&j.spec.model) else { return false };
        let batch = j.spec.batch.max(1);
        let Some(orrery_policy::castor::share::Share { sub_batch: sub, hosts, taken: take }) =
            orrery_policy::castor::share::check(self.topo, job, &j.spec, free, shared, sub_batch, &*self)
        else {
            return false;
        };
        // Lend the shared GPUs to the placement check; `place` takes them
        // again, so on success they are counted once.
        for (&(_, h), &g) in &take {
            self.free[h] += g;
        }
        if !self.place(job, hosts) {
            for (&(_, h), &g) in &take {
                self.free[h] -= g;
            }
            return false;
        }
        let gpu_of = |h: HostId| orrery_model::gpu::gpu_type(&self.topo.hosts[h].gpu_type);
        let now = self.now;
        let mut partners: Vec<JobId> = take.keys().map(|k| k.0).collect();
        partners.sort_unstable();
        partners.dedup();
        for &p in &partners {
            if self.jobs[p].skip.is_some() {
                self.materialise(p);
            }
        }
        let mut entries: Vec<(JobId, HostId, u32)> = take.iter().map(|(&(p, h), &g)| (p, h, g)).collect();
        entries.sort_unstable();
        for (p, h, g) in entries {
            let Some(gpu) = gpu_of(h) else { continue };
            let pm = orrery_model::zoo::model(&self.jobs[p].spec.model).unwrap_or(model);
            let (xi_job, xi_p) = self.cfg.colocation.pair(model, sub, pm, self.jobs[p].sub_batch, gpu);
            self.jobs[job].sharing.push(Sharing { partner: p, host: h, gpus: g, xi: xi_job, since_ns: now });
            self.jobs[p].sharing.push(Sharing { partner: job, host: h, gpus: g, xi: xi_p, since_ns: now });
        }
        let gpu = gpu_of(self.jobs[job].hosts[0].0);
        let j = &mut self.jobs[job];
        j.sub_batch = sub;
        j.accumulation = gpu.map_or(1.0, |g| orrery_model::colocation::accumulation_factor(model, g, batch, sub));
        j.shares += 1;
        for p in partners.into_iter().chain([job]) {
            let pj = &mut self.jobs[p];
            pj.xi = pj.sharing.iter().map(|s| s.xi).fold(1.0, f64::max);
            pj.solo_streak = 0;
        }
        true
    }

    /// Releases a job's GPUs and flows and invalidates its pending events.
    pub(super) fn release(&mut self, job: JobId) {
        self.released.push(job);
        // GPU-sharing partners keep the shared GPUs and run on without this job.
        let now = self.now;
        let sharing = std::mem::take(&mut self.jobs[job].sharing);
        let mut kept: HashMap<HostId, u32> = HashMap::new();
        for s in &sharing {
            *kept.entry(s.host).or_default() += s.gpus;
            let gpu_s = (now - s.since_ns) as f64 / NS * f64::from(s.gpus);
            self.jobs[job].shared_gpu_s += gpu_s;
            let o = s.partner;
            if self.jobs[o].skip.is_some() {
                self.materialise(o);
            }
            let pj = &mut self.jobs[o];
            if let Some(k) = pj.sharing.iter().position(|x| x.partner == job && x.host == s.host && x.gpus == s.gpus) {
                pj.sharing.swap_remove(k);
            }
            pj.shared_gpu_s += gpu_s;
            pj.xi = pj.sharing.iter().map(|x| x.xi).fold(1.0, f64::max);
            pj.solo_streak = 0;
        }
        self.headroom.release(&mut self.jobs[job].peaks);
        let flows = self.jobs[job].flows.take(&self.net);
        for f in flows {
            if let Some(slot) = self.flow_job.get_mut(f) {
                *slot = None;
            }
            let changed = self.net.remove(self.now, f);
            self.note_interactions();
            self.reschedule(&changed);
        }
        for (h, k) in std::mem::take(&mut self.jobs[job].held_gpus) {
            if let Some(n) = self.gpu_holders.get_mut(h).and_then(|g| g.get_mut(k as usize)) {
                *n = n.saturating_sub(1);
            }
        }
        let j = &mut self.jobs[job];
        for &(h, g) in &j.hosts {
            self.free[h] += g - kept.get(&h).copied().unwrap_or(0).min(g);
        }
        j.xi = 1.0;
        j.sub_batch = j.spec.batch;
        j.accumulation = 1.0;
        j.ref_left = (j.ref_left - j.iterations_done.saturating_sub(j.iters_at_place) as f64 / j.ratio).max(0.0);
        j.iters_at_place = j.iterations_done;
        j.count_run_until(self.now);
        j.hosts.clear();
        j.hosts_ascending = true;
        j.pace = None;
        j.timetable = None;
        j.epoch += 1;
        j.pending_flows = 0;
    }
}

impl orrery_policy::castor::share::Partners for Simulation<'_> {
    fn is_running(&self, job: JobId) -> bool {
        self.jobs.get(job).is_some_and(|j| j.status == Status::Running)
    }

    fn solo_on(&self, job: JobId, host: HostId) -> u32 {
        self.solo_gpus(job).iter().filter(|x| x.0 == host).map(|x| x.1).sum()
    }

    fn spec_and_sub_batch(&self, job: JobId) -> Option<(&JobSpec, u32)> {
        self.jobs.get(job).map(|j| (&j.spec, j.sub_batch))
    }
}
