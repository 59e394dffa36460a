//! Each tenant's GPUs over a run against its quota (issue 70): what its
//! jobs held, what they asked for, and what its quota guaranteed it, in
//! windows of time; and how long its jobs that arrived within its quota
//! waited to start.
//!
//! A tenant's *entitlement* at an instant is `min(demand, quota)`: the
//! GPUs its queued and running jobs ask for, up to its guaranteed quota
//! (Kueue's nominal quota). A tenant whose jobs hold at least that much,
//! window by window, got what it was promised; beyond it is borrowing.

use crate::engine::{NS, Simulation, Status};
use orrery_policy::quota::Quota;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One window of a tenant's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Start, s from the run's first arrival.
    pub from_s: f64,
    /// Mean GPUs its jobs held.
    pub held_gpus: f64,
    /// Mean GPUs its arrived, unfinished jobs asked for.
    pub demand_gpus: f64,
    /// Mean of `min(demand, quota)`.
    pub entitled_gpus: f64,
}

/// A tenant over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// Its quota, GPUs.
    pub quota_gpus: u64,
    /// Windows of `window_s`, from the first arrival to the run's end.
    pub windows: Vec<Window>,
    /// Length of a window, s.
    pub window_s: f64,
    /// The least `held / entitled` over the hours (windows of 3,600 s)
    /// in which its entitlement averaged at least one GPU; None if none did.
    pub worst_hour: Option<f64>,
    /// Its jobs whose GPUs, with those of its unfinished jobs that arrived
    /// before, fitted in its quota when they arrived.
    pub jobs_within_quota: usize,
    /// The longest such a job waited to start, s (to the run's end if it
    /// never did); None without such jobs.
    pub max_wait_within_quota_s: Option<f64>,
}

/// Mean held, demand and entitled GPUs per window of `window_s` over
/// `[0, end_s)` from piecewise-constant steps `(t, held, demand)` (each holds
/// until the next). O(steps + windows).
fn windows(steps: &[(f64, f64, f64)], end_s: f64, window_s: f64, quota: f64) -> Vec<Window> {
    let n = (end_s / window_s).ceil().max(1.0) as usize;
    let mut w: Vec<Window> = (0..n)
        .map(|k| Window { from_s: k as f64 * window_s, held_gpus: 0.0, demand_gpus: 0.0, entitled_gpus: 0.0 })
        .collect();
    for (k, &(t, held, demand)) in steps.iter().enumerate() {
        let until = steps.get(k + 1).map_or(end_s, |s| s.0).min(end_s);
        let mut a = t.max(0.0);
        while a < until {
            let i = ((a / window_s) as usize).min(n - 1);
            let b = until.min((i + 1) as f64 * window_s);
            let len = (b - a).max(0.0);
            w[i].held_gpus += held * len;
            w[i].demand_gpus += demand * len;
            w[i].entitled_gpus += demand.min(quota) * len;
            if b <= a {
                break;
            }
            a = b;
        }
    }
    for (i, x) in w.iter_mut().enumerate() {
        let len = (end_s.min((i + 1) as f64 * window_s) - x.from_s).max(1e-9);
        x.held_gpus /= len;
        x.demand_gpus /= len;
        x.entitled_gpus /= len;
    }
    w
}

/// Each quota'd tenant's [`Share`] of a finished run, in windows of
/// `window_s`. O(J log J + windows) for J jobs and their stretches held.
pub fn shares(sim: &Simulation<'_>, quotas: &BTreeMap<String, Quota>, window_s: f64) -> BTreeMap<String, Share> {
    let end_ns = sim.now_ns();
    let arrived = |a: u64| a <= end_ns;
    let t0 = sim.jobs.iter().map(|j| j.arrival_ns).filter(|&a| arrived(a)).min().unwrap_or(0);
    let s = |ns: u64| ns.saturating_sub(t0) as f64 / NS;
    let end_s = s(end_ns);
    let mut out = BTreeMap::new();
    for (name, q) in quotas {
        let mine: Vec<_> = sim
            .jobs
            .iter()
            .filter(|j| {
                j.spec.tenant.as_deref() == Some(name.as_str()) && arrived(j.arrival_ns) && j.status != Status::Rejected
            })
            .collect();
        // (t, Δheld, Δdemand), ends before starts at one instant.
        let mut ev: Vec<(u64, i64, i64)> = Vec::new();
        for j in &mine {
            let g = i64::from(j.spec.gpus());
            ev.push((j.arrival_ns, 0, g));
            ev.push((j.finish_ns.unwrap_or(end_ns), 0, -g));
            for &(a, b, h) in &j.held {
                ev.push((a, i64::from(h), 0));
                ev.push((b, -i64::from(h), 0));
            }
        }
        ev.sort_by_key(|&(t, dh, dd)| (t, dh + dd > 0));
        let mut steps: Vec<(f64, f64, f64)> = Vec::with_capacity(ev.len());
        let (mut held, mut demand) = (0i64, 0i64);
        for &(t, dh, dd) in &ev {
            held += dh;
            demand += dd;
            match steps.last_mut() {
                Some(last) if last.0 == s(t) => (last.1, last.2) = (held as f64, demand as f64),
                _ => steps.push((s(t), held as f64, demand as f64)),
            }
        }
        let quota = q.gpus as f64;
        let hourly = windows(&steps, end_s, 3_600.0, quota);
        let worst_hour = hourly
            .iter()
            .filter(|w| w.entitled_gpus >= 1.0)
            .map(|w| w.held_gpus / w.entitled_gpus)
            .min_by(f64::total_cmp);
        // Jobs that fitted in the quota at arrival: a sweep in time order
        // of arrivals and finishes (finishes first at one instant).
        let mut by_time: Vec<(u64, bool, usize)> = Vec::new();
        for (k, j) in mine.iter().enumerate() {
            by_time.push((j.arrival_ns, true, k));
            by_time.push((j.finish_ns.unwrap_or(u64::MAX), false, k));
        }
        by_time.sort_by_key(|&(t, arrives, k)| (t, arrives, k));
        let (mut asked, mut within, mut worst) = (0u64, 0usize, None::<f64>);
        for (_, arrives, k) in by_time {
            let g = u64::from(mine[k].spec.gpus());
            if !arrives {
                asked = asked.saturating_sub(g);
                continue;
            }
            asked += g;
            if asked <= q.gpus {
                within += 1;
                let wait = mine[k].first_start_ns.unwrap_or(end_ns).saturating_sub(mine[k].arrival_ns) as f64 / NS;
                worst = Some(worst.map_or(wait, |w: f64| w.max(wait)));
            }
        }
        out.insert(
            name.clone(),
            Share {
                quota_gpus: q.gpus,
                windows: windows(&steps, end_s, window_s, quota),
                window_s,
                worst_hour,
                jobs_within_quota: within,
                max_wait_within_quota_s: worst,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_average_the_steps_and_cap_demand_at_the_quota() {
        // Holds 4 GPUs over [0, 30) and 8 over [30, 90); asks for 12 from
        // 30 on; quota 8. Windows of 60 s over 90 s: the first holds
        // (4·30 + 8·30)/60 = 6, asks (4·30 + 12·30)/60 = 8, is entitled to
        // (4·30 + 8·30)/60 = 6; the second (30 s) 8, 12, 8.
        let steps = [(0.0, 4.0, 4.0), (30.0, 8.0, 12.0)];
        let w = windows(&steps, 90.0, 60.0, 8.0);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].held_gpus, w[0].demand_gpus, w[0].entitled_gpus), (6.0, 8.0, 6.0));
        assert_eq!((w[1].from_s, w[1].held_gpus, w[1].demand_gpus, w[1].entitled_gpus), (60.0, 8.0, 12.0, 8.0));
    }
}
