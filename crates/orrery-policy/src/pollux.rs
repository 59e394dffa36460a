//! Pollux (Qiao et al., OSDI'21, §4): goodput-driven, elastic allocation.
//!
//! A job's goodput on k GPUs is its throughput times its statistical
//! efficiency (Pollux Eq. 1–2). Here both come from data: the iteration time is
//! the zoo's shape on a consolidated k-GPU placement, and the efficiency is
//! the ratio of iterations to converge from Pollux's validation profiles. So the
//! goodput is the number of *reference iterations* (at the requested size) done
//! per second: `rate(k) = 1 / (T(k) · I(k·b) / I(k₀·b))`. The speedup is
//! `rate(k) / rate(1)`.
//!
//! Every `interval_s` Pollux re-allocates all GPUs to maximise the generalised
//! mean of the speedups with p = −1 (its fairness default), greedily:
//! 1. Every job, in arrival order, gets 1 GPU while GPUs last.
//! 2. Each remaining GPU goes to the job whose 1/speedup it lowers most,
//!    up to twice the job's request.
//!
//! A running job is resized only when its new allocation is at least 10%
//! faster, or when it must shrink to make room. Resizing restarts it, and the
//! driver charges the restart penalty. Between intervals, arrivals get free
//! GPUs by the same greedy.
//!
//! Simplifications:
//! - The batch per GPU stays at the request; Pollux also tunes it.
//! - The greedy stands in for Pollux's genetic search.
//! - The scheduler knows each job's efficiency curve; Pollux fits it online
//!   from gradient statistics.

use crate::baseline::{consolidated, racks};
use crate::{ClusterView, Decision, Forget, JobId, Policy};
use orrery_model::JobSpec;
use orrery_model::convergence::iterations_per_reference;
use orrery_model::placed::place;
use std::collections::HashMap;

/// The Pollux policy.
#[derive(Debug)]
pub struct Pollux {
    /// Seconds between re-allocations (Pollux: 60).
    pub interval_s: f64,
    /// Minimum speed-up of a running job's new allocation to restart it.
    pub resize_gain: f64,
    last_full: f64,
    /// Cached reference-iteration rate per (job, GPUs).
    rates: HashMap<(JobId, u32), f64>,
    /// When `rates` drops the jobs that have left.
    forget: Forget,
}

impl Default for Pollux {
    fn default() -> Self {
        Pollux {
            interval_s: 60.0,
            resize_gain: 1.1,
            last_full: f64::NEG_INFINITY,
            rates: HashMap::new(),
            forget: Forget::default(),
        }
    }
}

/// A job competing for GPUs in a round.
struct Contender<'a> {
    id: JobId,
    spec: &'a JobSpec,
    /// GPUs held now (0 if waiting).
    now: u32,
    /// GPUs it may hold at most.
    cap: u32,
    /// Running: its hosts.
    hosts: Option<&'a [(orrery_model::HostId, u32)]>,
}

impl Pollux {
    /// Reference iterations per second on `gpus` GPUs, consolidated: goodput in
    /// units of the job's own work. 0 when it cannot be shaped.
    fn rate(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, gpus: u32) -> f64 {
        if gpus == 0 {
            return 0.0;
        }
        *self.rates.entry((id, gpus)).or_insert_with(|| {
            let t = view.topology;
            let hosts = crate::baseline::packed(t, gpus);
            let per_worker = spec.gpus_per_worker.max(1);
            let (k0, k) = (spec.workers.max(1), (gpus / per_worker).max(1));
            let ratio =
                if k == k0 { 1.0 } else { iterations_per_reference(&spec.model, k0 * spec.batch, k * spec.batch) };
            place(t, spec, &hosts).map_or(0.0, |p| 1e3 / (p.shape.period_ms().max(1e-9) * ratio))
        })
    }

    /// Greedy allocation of `budget` GPUs over the contenders (see the module
    /// doc). O(budget · jobs) rate look-ups.
    fn allocate(&mut self, view: &ClusterView<'_>, jobs: &[Contender<'_>], budget: u32) -> Vec<u32> {
        let mut alloc = vec![0u32; jobs.len()];
        let mut left = budget;
        // A mesh runs on its request only here (Pollux sizes data-parallel
        // jobs; `orrery` sizes meshes whose users allow it).
        let step = |c: &Contender<'_>| {
            if c.spec.parallelism.is_some() { c.spec.gpus().max(1) } else { c.spec.gpus_per_worker.max(1) }
        };
        for (i, c) in jobs.iter().enumerate() {
            if left >= step(c) {
                alloc[i] = step(c);
                left -= step(c);
            }
        }
        loop {
            let mut best: Option<(usize, f64)> = None;
            for (i, c) in jobs.iter().enumerate() {
                let s = step(c);
                if alloc[i] == 0 || alloc[i] + s > c.cap || s > left {
                    continue;
                }
                let one = self.rate(view, c.id, c.spec, s).max(1e-12);
                let (a, b) = (self.rate(view, c.id, c.spec, alloc[i]), self.rate(view, c.id, c.spec, alloc[i] + s));
                // p = −1: maximise −Σ 1/speedup; the gain of one more worker.
                let gain = one / a.max(1e-12) - one / b.max(1e-12);
                if gain > 1e-9 && best.is_none_or(|x| gain > x.1) {
                    best = Some((i, gain));
                }
            }
            let Some((i, _)) = best else { break };
            let s = step(&jobs[i]);
            alloc[i] += s;
            left -= s;
        }
        alloc
    }
}

/// The most GPUs Pollux gives a job: twice its request (Pollux's cap), a
/// mesh its request. O(1).
fn widest(spec: &JobSpec, total: u32) -> u32 {
    if spec.parallelism.is_some() { spec.gpus() } else { 2 * spec.gpus() }.min(total)
}

impl Policy for Pollux {
    fn name(&self) -> String {
        "pollux".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        if let Some(live) = self.forget.due(view, self.rates.len()) {
            self.rates.retain(|(j, _), _| live.contains(j));
            self.forget.pruned(self.rates.len());
        }
        let total = view.topology.gpu_count();
        let mut out = Vec::new();
        let full = view.now_s - self.last_full >= self.interval_s - 1e-9;
        if full {
            self.last_full = view.now_s;
        }
        // Contenders: waiting jobs, and on a full round the running ones.
        let mut jobs: Vec<Contender<'_>> = Vec::new();
        if full {
            for r in view.running.iter().filter(|r| !r.paused) {
                let now: u32 = r.hosts.iter().map(|h| h.1).sum();
                jobs.push(Contender { id: r.id, spec: r.spec, now, cap: widest(r.spec, total), hosts: Some(r.hosts) });
            }
        }
        for q in &view.queue {
            if q.spec.gpus_per_worker.max(1) > total {
                out.push(Decision::Reject {
                    job: q.id,
                    reason: format!("a worker needs more than the cluster's {total} GPUs"),
                });
                continue;
            }
            jobs.push(Contender { id: q.id, spec: q.spec, now: 0, cap: widest(q.spec, total), hosts: None });
        }
        jobs.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s).then(a.id.cmp(&b.id)));
        let held: u32 = jobs.iter().map(|c| c.now).sum();
        let free_now: u32 = view.free_gpus.iter().sum();
        let mut alloc = self.allocate(view, &jobs, free_now + held);
        // Hysteresis: a running job keeps its size unless the new one is
        // `resize_gain` faster or it must shrink.
        for (i, c) in jobs.iter().enumerate() {
            if c.now > 0 && alloc[i] > c.now {
                let (a, b) = (self.rate(view, c.id, c.spec, c.now), self.rate(view, c.id, c.spec, alloc[i]));
                if b < self.resize_gain * a {
                    alloc[i] = c.now;
                }
            }
        }
        // Give back what hysteresis kept, in arrival order, to jobs not yet running.
        let mut spare = (free_now + held).saturating_sub(alloc.iter().sum());
        for (i, c) in jobs.iter().enumerate() {
            if c.now == 0 && alloc[i] == 0 && spare >= c.spec.gpus_per_worker.max(1) {
                alloc[i] = c.spec.gpus_per_worker.max(1);
                spare -= alloc[i];
            }
        }
        let mut free = view.free_gpus.to_vec();
        for (i, c) in jobs.iter().enumerate() {
            if c.now > 0 && alloc[i] != c.now {
                for &(h, g) in c.hosts.unwrap_or_default() {
                    free[h] += g;
                }
                out.push(Decision::Preempt { job: c.id });
            }
        }
        let rack_of = racks(view);
        for (i, c) in jobs.iter().enumerate() {
            if alloc[i] == 0 || alloc[i] == c.now {
                continue;
            }
            // Fragmentation may leave fewer GPUs in a usable shape: shrink.
            let step = c.spec.gpus_per_worker.max(1);
            let mut k = alloc[i];
            while k >= step {
                if let Some(hosts) = consolidated(view, rack_of, &free, k) {
                    for &(h, g) in &hosts {
                        free[h] -= g;
                    }
                    out.push(Decision::Place { job: c.id, hosts });
                    break;
                }
                k -= step;
            }
        }
        out
    }

    fn tick_s(&self) -> Option<f64> {
        Some(self.interval_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QueuedJob;
    use orrery_model::Work;
    use orrery_model::setups::LeafSpine;

    fn two_hosts() -> orrery_model::Topology {
        // 2 hosts x 4 V100, 100 Gbit/s.
        LeafSpine::with_oversubscription(1, 2, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid")
    }

    fn placed_gpus(d: &[Decision], job: JobId) -> Option<u32> {
        d.iter().find_map(|x| match x {
            Decision::Place { job: j, hosts } if *j == job => Some(hosts.iter().map(|h| h.1).sum()),
            _ => None,
        })
    }

    #[test]
    fn the_rates_of_jobs_that_have_left_are_forgotten() {
        // 2,000 one-GPU jobs, each alone in its round and gone by the next:
        // each caches its rate on 1 and 2 GPUs; the cache stays within
        // twice Forget's floor.
        let t = two_hosts();
        let mut p = Pollux::default();
        let mut most = 0;
        for i in 0..2_000usize {
            let job = JobSpec::new(format!("j{i}"), "resnet50", 32, 1, Work::Iterations(100), 0.0);
            let view = ClusterView {
                now_s: 60.0 * i as f64,
                topology: &t,
                free_gpus: &[4, 4],
                queue: vec![QueuedJob::new(i, &job, 0.0)],
                running: Vec::new(),
            };
            assert!(placed_gpus(&p.schedule(&view), i).is_some());
            most = most.max(p.rates.len());
        }
        assert!((100..=2 * Forget::FLOOR + 2).contains(&most), "{most}");
    }

    #[test]
    fn a_lone_job_grows_while_goodput_grows_and_a_newcomer_gets_gpus_from_it() {
        let t = two_hosts();
        let a = JobSpec::new("a", "resnet50", 64, 2, Work::Iterations(10_000), 0.0);
        let view = |free: &'static [u32], queue, running| ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: free,
            queue,
            running,
        };
        let mut p = Pollux::default();
        let d = p.schedule(&view(&[4, 4], vec![QueuedJob::new(0, &a, 0.0)], Vec::new()));
        let k = placed_gpus(&d, 0).expect("placed");
        // ResNet50 on one host scales: more than one GPU, at most twice its request.
        assert!(k > 1 && k <= 4, "{k} GPUs");
        let v = view(&[4, 4], Vec::new(), Vec::new());
        assert!(p.rate(&v, 0, &a, k) > p.rate(&v, 0, &a, 1));
        // At the next interval a newcomer arrives while a holds all 8 GPUs:
        // a shrinks (it is preempted and placed again smaller) and b starts.
        let b = JobSpec::new("b", "resnet50", 64, 2, Work::Iterations(10_000), 1.0);
        let hosts_a = [(0usize, 4u32), (1, 4)];
        let running = crate::RunningJob {
            iterations_done: 10,
            iteration_start_s: 59.0,
            progress: 0.01,
            service_gpu_s: 480.0,
            running_s: 60.0,
            ..crate::RunningJob::new(0, &a, &hosts_a)
        };
        let mut v = view(&[0, 0], vec![QueuedJob::new(1, &b, 60.0)], vec![running]);
        v.now_s = 61.0;
        let d = p.schedule(&v);
        assert!(d.contains(&Decision::Preempt { job: 0 }), "{d:?}");
        let (ka, kb) = (placed_gpus(&d, 0).expect("a again"), placed_gpus(&d, 1).expect("b"));
        assert!(ka + kb <= 8 && kb >= 1 && ka < 8, "{ka} + {kb}");
        // Between intervals, running jobs are left alone.
        let mut v2 = view(&[0, 0], Vec::new(), Vec::new());
        v2.now_s = 62.0;
        assert!(p.schedule(&v2).is_empty());
    }
}
