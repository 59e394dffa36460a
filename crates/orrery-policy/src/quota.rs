//! Admission by tenant quota (issue 70), as Kueue admits workloads to
//! ClusterQueues in one cohort: each tenant has a nominal quota of GPUs
//! guaranteed to it and a borrowing limit; it may run beyond its quota only
//! on GPUs other tenants' quotas leave idle, and when a tenant within its
//! quota waits for GPUs a borrower holds, the borrower's youngest jobs are
//! preempted to give them back (Kueue's `reclaimWithinCohort`).
//!
//! Admission comes before the policy: the driver offers the policy only the
//! jobs [`admit`] lets in, so every policy still decides placement and
//! timing within the quotas. A job of no tenant, or of a tenant without a
//! quota, is not limited.
//!
//! GPUs are counted cluster-wide, as Kueue counts a flavor's quota: an
//! admitted job may still wait for a placement that fits.
//!
//! Who borrows idle quota next, and who gives it back first, is decided by
//! the borrowed GPUs over each tenant's weight (Kueue's fair sharing), or
//! with [`FairShare`] by each tenant's recent usage over its share (Slurm's
//! fair-share factor), so a team that has had more than its share lately
//! borrows last.

use crate::JobId;
use std::collections::BTreeMap;

/// A tenant's quota, GPUs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Quota {
    /// Guaranteed (nominal quota).
    pub gpus: u64,
    /// How far beyond `gpus` it may borrow.
    pub borrow_limit: u64,
    /// Its weight in fair sharing of what is borrowed (Kueue's
    /// `fairSharing.weight`): among tenants that borrow, the one whose
    /// borrowed GPUs over its weight are fewest borrows next, and the one
    /// whose are most gives back first.
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

impl Quota {
    /// A quota of weight 1.
    pub fn new(gpus: u64, borrow_limit: u64) -> Quota {
        Quota { gpus, borrow_limit, weight: 1.0 }
    }

    /// `held` GPUs beyond the quota, over the weight: the tenant's share of
    /// what is borrowed, as fair sharing compares it.
    fn borrowed_share(&self, held: u64) -> f64 {
        held.saturating_sub(self.gpus) as f64 / self.weight.max(1e-9)
    }
}

/// Slurm's fair-share factor over decayed usage (Slurm's "Classic
/// Fairshare Algorithm": `F = 2^(−U/S)`, `U` the tenant's part of all
/// tenants' decayed usage, `S` its part of the shares). Usage is
/// GPU-seconds, each second's weight halving every `half_life_s` (Slurm's
/// `PriorityDecayHalfLife`); a tenant's share is its quota's GPUs times its
/// weight (its weight alone when no tenant has a GPU quota).
#[derive(Debug, Clone, PartialEq)]
pub struct FairShare {
    /// Half-life of past usage, s.
    pub half_life_s: f64,
    usage: BTreeMap<String, f64>,
    at_s: Option<f64>,
}

impl FairShare {
    /// No usage yet; past usage halves every `half_life_s` (> 0).
    pub fn new(half_life_s: f64) -> FairShare {
        FairShare { half_life_s: half_life_s.max(1e-9), usage: BTreeMap::new(), at_s: None }
    }

    /// Mean life of a GPU-second's weight, `H / ln 2`, s.
    fn tau_s(&self) -> f64 {
        self.half_life_s / std::f64::consts::LN_2
    }

    /// Decays the usage to `now_s` and adds what each running job held
    /// since the last call (or since it was placed, if later): `g` GPUs
    /// held over `[a, now]` add `g · τ · (1 − 2^(−(now − a)/H))`, the
    /// integral of the decayed weight. A job that ended between two calls
    /// loses its last stretch: drivers call this every round, and a round
    /// follows each completion. O(running + tenants).
    pub fn advance(&mut self, now_s: f64, running: &[Held<'_>]) {
        let since = self.at_s.unwrap_or(now_s).min(now_s);
        let (h, tau) = (self.half_life_s, self.tau_s());
        let decay = (-(now_s - since) / h).exp2();
        for u in self.usage.values_mut() {
            *u *= decay;
        }
        for r in running {
            if let Some(t) = r.tenant {
                let from = since.max(r.placed_s).min(now_s);
                *self.usage.entry(t.to_string()).or_default() +=
                    r.gpus as f64 * tau * (1.0 - (-(now_s - from) / h).exp2());
            }
        }
        self.at_s = Some(now_s);
    }

    /// A tenant's decayed usage, GPU-seconds.
    pub fn usage(&self, tenant: &str) -> f64 {
        self.usage.get(tenant).copied().unwrap_or(0.0)
    }

    /// Its share: quota GPUs × weight over all tenants' (weight over all
    /// weights when no tenant has GPUs).
    fn share(quotas: &BTreeMap<String, Quota>, tenant: &str) -> f64 {
        let by_gpus = quotas.values().any(|q| q.gpus > 0);
        let s = |q: &Quota| q.weight.max(0.0) * if by_gpus { q.gpus as f64 } else { 1.0 };
        let all: f64 = quotas.values().map(s).sum();
        quotas.get(tenant).map_or(0.0, |q| s(q) / all.max(1e-12))
    }

    /// Slurm's factor `2^(−U/S)`: 1 for a tenant that used nothing, ½ for
    /// one that used exactly its share, towards 0 beyond.
    pub fn factor(&self, quotas: &BTreeMap<String, Quota>, tenant: &str) -> f64 {
        let all: f64 = self.usage.values().sum();
        let u = if all > 0.0 { self.usage(tenant) / all } else { 0.0 };
        (-u / Self::share(quotas, tenant).max(1e-12)).exp2()
    }

    /// The key admission compares (smaller borrows first, larger gives
    /// back first): usage as if the `held` GPUs were held on, `U + τ·held`,
    /// over the share. Monotone in `U/S` when nothing is held, as Slurm's
    /// factor is; the `τ·held` term makes it grow as a round admits jobs,
    /// so one round does not give one tenant every idle GPU.
    fn key(&self, quotas: &BTreeMap<String, Quota>, tenant: &str, held: u64) -> f64 {
        (self.usage(tenant) + self.tau_s() * held as f64) / Self::share(quotas, tenant).max(1e-12)
    }
}

/// A running job as admission sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Held<'a> {
    /// Job.
    pub job: JobId,
    /// Its tenant.
    pub tenant: Option<&'a str>,
    /// GPUs it holds.
    pub gpus: u64,
    /// GPUs it asked for. A policy that grows jobs on idle GPUs (Pollux's
    /// sizing in `orrery`) may give it more, within its tenant's quota
    /// ([`bound_growth`]): the extra is on loan, and a waiting job within
    /// its quota reclaims it first.
    pub request: u64,
    /// When it was placed, s (reclaim takes the youngest first).
    pub placed_s: f64,
}

impl Held<'_> {
    /// The GPUs its quota is charged: its request, or fewer if it runs on
    /// fewer.
    fn charged(&self) -> u64 {
        self.gpus.min(self.request)
    }

    /// Whether it holds more than it asked for.
    fn grown(&self) -> bool {
        self.gpus > self.request
    }
}

/// What admission decided for one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Admission {
    /// For each queued job, in queue order: may the policy place it.
    pub admitted: Vec<bool>,
    /// Borrowers' running jobs to preempt, giving their GPUs back to a
    /// tenant waiting within its quota, with that tenant.
    pub reclaim: Vec<(JobId, String)>,
}

/// Admission for one round. `queue` is the waiting jobs (tenant, GPUs) in
/// the order the driver offers them; `running` the jobs holding GPUs;
/// `free_gpus` the cluster's free GPUs. O((running + queue) · log) per call.
///
/// A queued job of tenant `t` wanting `g` GPUs, with `u` the GPUs `t`'s
/// running and already admitted jobs hold, is admitted when
/// - `u + g ≤ quota` (within its quota; these first, in queue order), or
/// - `u + g ≤ quota + borrow_limit` and the tenants' GPUs in use and
///   admitted, with it, stay within the sum of their quotas (it borrows
///   only what others leave idle; these second, as Kueue admits workloads
///   that fit their nominal quota before borrowers: the tenant with the
///   smallest borrowed share ([`Quota::weight`]) next, each tenant's jobs
///   in queue order).
///
/// A running job is charged its request ([`Held::request`]).
///
/// A job admitted within its quota that does not find `g` free GPUs
/// reclaims them: first from jobs grown beyond their request (any
/// tenant's, its own too: growth is only ever on loan), youngest first;
/// then from running jobs of tenants above their quota, the tenant with
/// the largest borrowed share first, its youngest job that leaves it at
/// its quota or above first (then its youngest), each only while its
/// tenant is above its quota before the preemption (a lender never takes
/// a borrower below its own quota by more than one job).
///
/// With `fair`, the borrowed share is replaced by [`FairShare`]'s usage over
/// share, for both borrowing and reclaim.
pub fn admit(
    quotas: &BTreeMap<String, Quota>,
    running: &[Held<'_>],
    queue: &[(Option<&str>, u64)],
    free_gpus: u64,
    fair: Option<&FairShare>,
) -> Admission {
    // Smaller borrows next; larger gives back first.
    let rank = |t: &str, held: u64| match fair {
        Some(f) => f.key(quotas, t, held),
        None => quotas[t].borrowed_share(held),
    };
    let mut used: BTreeMap<&str, u64> = BTreeMap::new();
    for h in running {
        if let Some(t) = h.tenant.filter(|t| quotas.contains_key(*t)) {
            *used.entry(t).or_default() += h.charged();
        }
    }
    let nominal: u64 = quotas.values().map(|q| q.gpus).sum();
    let mut in_use: u64 = used.values().sum();
    let mut free = free_gpus;
    // Borrowers' jobs and grown ones, youngest first, for reclaim.
    let mut borrowed: Vec<&Held<'_>> = running
        .iter()
        .filter(|h| {
            let over = h.tenant.and_then(|t| quotas.get(t).map(|q| used.get(t).copied().unwrap_or(0) > q.gpus));
            over == Some(true) || h.grown()
        })
        .collect();
    borrowed.sort_by(|a, b| b.placed_s.total_cmp(&a.placed_s).then(b.job.cmp(&a.job)));
    let mut out = Admission { admitted: vec![false; queue.len()], reclaim: Vec::new() };
    // Kueue admits the workloads that fit their quotas before those that
    // borrow: first every job within its tenant's quota, in queue order
    // (reclaiming for it)...
    for (k, &(tenant, g)) in queue.iter().enumerate() {
        let Some((t, q)) = tenant.and_then(|t| quotas.get_key_value(t)) else {
            out.admitted[k] = true;
            free = free.saturating_sub(g);
            continue;
        };
        let u = used.get(t.as_str()).copied().unwrap_or(0);
        if u + g > q.gpus {
            continue;
        }
        out.admitted[k] = true;
        *used.entry(t.as_str()).or_default() += g;
        in_use += g;
        if free < g {
            // Reclaim: grown jobs first, then the most-borrowing tenant
            // gives back first; the youngest job first. O(borrowed ·
            // tenants) a job.
            while free < g {
                let held = |h: &Held<'_>| {
                    h.tenant.filter(|o| quotas.contains_key(*o)).map(|o| used.get(o).copied().unwrap_or(0))
                };
                let over =
                    |h: &Held<'_>| h.tenant.and_then(|o| quotas.get(o)).zip(held(h)).is_some_and(|(q, u)| u > q.gpus);
                let share = |h: &Held<'_>| match (h.tenant, held(h)) {
                    (Some(o), Some(u)) => rank(o, u),
                    _ => 0.0,
                };
                // Within a tenant, a job that leaves it at or above its
                // quota before one that would take it below (Kueue takes
                // whole workloads; this keeps the overshoot rare).
                let fits = |h: &Held<'_>| {
                    h.tenant
                        .and_then(|o| quotas.get(o))
                        .zip(held(h))
                        .is_some_and(|(q, u)| u.saturating_sub(h.charged()) >= q.gpus)
                };
                let key = |h: &Held<'_>| (h.grown(), share(h), fits(h));
                let Some(i) =
                    (0..borrowed.len()).filter(|&i| borrowed[i].grown() || over(borrowed[i])).max_by(|&a, &b| {
                        let (ka, kb) = (key(borrowed[a]), key(borrowed[b]));
                        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(ka.2.cmp(&kb.2)).then(b.cmp(&a))
                    })
                else {
                    break;
                };
                let h = borrowed.remove(i);
                out.reclaim.push((h.job, t.clone()));
                if let Some(owner) = h.tenant.filter(|o| quotas.contains_key(*o)) {
                    *used.entry(owner).or_default() -= h.charged();
                    in_use -= h.charged();
                }
                free += h.gpus;
            }
        }
        free = free.saturating_sub(g);
    }
    // ...then the ones that borrow: the tenant with the smallest borrowed
    // share next, its first job in queue order that fits. What does not fit
    // now never will this round (usage only grows), so each tenant's
    // cursor only advances: O(queue + admitted · tenants).
    let mut waiting: BTreeMap<&str, std::collections::VecDeque<usize>> = BTreeMap::new();
    for (k, &(tenant, _)) in queue.iter().enumerate() {
        if let Some(t) = tenant.filter(|t| !out.admitted[k] && quotas.contains_key(*t)) {
            waiting.entry(t).or_default().push_back(k);
        }
    }
    loop {
        // Drop each tenant's jobs that cannot borrow now.
        for (t, ks) in waiting.iter_mut() {
            let q = &quotas[*t];
            let u = used.get(t).copied().unwrap_or(0);
            while let Some(&k) = ks.front() {
                let g = queue[k].1;
                if u + g <= q.gpus + q.borrow_limit && in_use + g <= nominal {
                    break;
                }
                ks.pop_front();
            }
        }
        waiting.retain(|_, ks| !ks.is_empty());
        let Some((&t, _)) = waiting.iter().min_by(|a, b| {
            let share = |t: &str| rank(t, used.get(t).copied().unwrap_or(0));
            share(a.0).total_cmp(&share(b.0)).then(a.1[0].cmp(&b.1[0]))
        }) else {
            break;
        };
        let k = waiting.get_mut(t).and_then(|ks| ks.pop_front()).unwrap_or_default();
        let g = queue[k].1;
        out.admitted[k] = true;
        *used.entry(t).or_default() += g;
        in_use += g;
    }
    out
}

/// [`admit`] on a driver's view: its queue in the policy's `order`
/// ([`crate::Policy::queue_order`]), its running jobs and its free GPUs (the
/// live service and the simulator alike); `admitted` comes back in the
/// view's queue order. `fair`, if given, is first advanced to the view's
/// time. Every job is admitted when there are no quotas. O(running +
/// queue) and the admission's.
pub fn admit_view(
    quotas: &BTreeMap<String, Quota>,
    view: &crate::ClusterView<'_>,
    order: &[usize],
    fair: Option<&mut FairShare>,
) -> Admission {
    if quotas.is_empty() {
        return Admission { admitted: vec![true; view.queue.len()], reclaim: Vec::new() };
    }
    let running: Vec<Held<'_>> = view
        .running
        .iter()
        .map(|r| Held {
            job: r.id,
            tenant: r.spec.tenant.as_deref(),
            gpus: r.hosts.iter().map(|h| u64::from(h.1)).sum(),
            request: u64::from(r.spec.gpus()),
            placed_s: view.now_s - r.running_s,
        })
        .collect();
    // The policy's order, then any index it left out, as queued.
    let mut seen = vec![false; view.queue.len()];
    let order: Vec<usize> = order
        .iter()
        .copied()
        .chain(0..view.queue.len())
        .filter(|&k| k < seen.len() && !std::mem::replace(&mut seen[k], true))
        .collect();
    let queue: Vec<(Option<&str>, u64)> =
        order.iter().map(|&k| (view.queue[k].spec.tenant.as_deref(), u64::from(view.queue[k].spec.gpus()))).collect();
    let fair = fair.map(|f| {
        f.advance(view.now_s, &running);
        &*f
    });
    let adm = admit(quotas, &running, &queue, view.free_gpus.iter().map(|&f| u64::from(f)).sum(), fair);
    let mut admitted = vec![false; view.queue.len()];
    for (&k, ok) in order.iter().zip(adm.admitted) {
        admitted[k] = ok;
    }
    Admission { admitted, reclaim: adm.reclaim }
}

/// Applies an admission to a view: the queue keeps the admitted jobs; the
/// reclaims come back as the preemptions the driver applies first (then
/// it asks again, as after any preemption).
pub fn filter_or_reclaim(adm: Admission, queue: &mut Vec<crate::QueuedJob<'_>>) -> Vec<crate::Decision> {
    if !adm.reclaim.is_empty() {
        return adm.reclaim.into_iter().map(|(job, _)| crate::Decision::Preempt { job }).collect();
    }
    let mut admitted = adm.admitted.into_iter();
    queue.retain(|_| admitted.next().unwrap_or(true));
    Vec::new()
}

/// Keeps growth within a tenant's own quota: a job placed on more GPUs than
/// it asked for (grown on idle GPUs, as `orrery`'s Pollux sizing does)
/// keeps the extra only while its tenant's GPUs held, with this round's
/// placements, stay within its quota; otherwise it runs on its request, on
/// the first GPUs of the hosts the policy chose. Admission lends GPUs
/// beyond a quota only to waiting jobs: growth on another tenant's idle
/// quota took GPUs no one lent, and when allowed up to the borrowing limit
/// it made the steady team's jobs on `experiments/tenants-flood.toml`
/// restart up to 39 times, grown again each time the GPUs looked idle
/// (docs/results.md). Growth within the quota is the tenant's own, given
/// back when its own job within quota needs the GPUs ([`admit`]).
/// Preemptions in `decisions` free their GPUs first. A running job the
/// policy preempted to restart it larger (Pollux's resize) whose new
/// placement is trimmed keeps running as it was: both decisions are
/// dropped (a restart on its old size each round made one job restart
/// 1,227 times on `tenants-flood`). Jobs of no quota'd tenant keep their
/// growth. O(decisions · (queue + running + hosts)): each placement finds
/// its spec in the view.
pub fn bound_growth(
    quotas: &BTreeMap<String, Quota>,
    view: &crate::ClusterView<'_>,
    decisions: &mut Vec<crate::Decision>,
) {
    use crate::Decision;
    if quotas.is_empty() {
        return;
    }
    let preempted: std::collections::HashSet<JobId> =
        decisions.iter().filter_map(|d| if let Decision::Preempt { job } = d { Some(*job) } else { None }).collect();
    let mut held: BTreeMap<&str, u64> = BTreeMap::new();
    for r in view.running.iter().filter(|r| !preempted.contains(&r.id)) {
        if let Some(t) = r.spec.tenant.as_deref() {
            *held.entry(t).or_default() += r.hosts.iter().map(|h| u64::from(h.1)).sum::<u64>();
        }
    }
    let mut resized: Vec<JobId> = Vec::new();
    for d in decisions.iter_mut() {
        let Decision::Place { job, hosts } = d else { continue };
        let Some(spec) = view.spec_of(*job) else { continue };
        let Some((t, q)) = spec.tenant.as_deref().and_then(|t| quotas.get_key_value(t)) else { continue };
        let placed: u64 = hosts.iter().map(|h| u64::from(h.1)).sum();
        let (request, h) = (u64::from(spec.gpus()), held.entry(t.as_str()).or_default());
        if placed > request && *h + placed > q.gpus {
            if preempted.contains(job) {
                resized.push(*job);
                // It keeps what it holds.
                *h += view
                    .running
                    .iter()
                    .find(|r| r.id == *job)
                    .map_or(0, |r| r.hosts.iter().map(|x| u64::from(x.1)).sum::<u64>());
                continue;
            }
            let mut left = spec.gpus();
            for (_, g) in hosts.iter_mut() {
                *g = (*g).min(left);
                left -= *g;
            }
            hosts.retain(|h| h.1 > 0);
            *h += request;
        } else {
            *h += placed;
        }
    }
    if !resized.is_empty() {
        decisions.retain(|d| match d {
            Decision::Place { job, .. } | Decision::Preempt { job } => !resized.contains(job),
            _ => true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn quotas(list: &[(&str, u64, u64)]) -> BTreeMap<String, Quota> {
        list.iter().map(|&(t, gpus, borrow_limit)| (t.to_string(), Quota::new(gpus, borrow_limit))).collect()
    }

    fn held(job: JobId, tenant: &str, gpus: u64, placed_s: f64) -> Held<'_> {
        Held { job, tenant: Some(tenant), gpus, request: gpus, placed_s }
    }

    #[test]
    fn a_tenant_borrows_idle_quota_up_to_its_limit_and_no_further() {
        let q = quotas(&[("a", 4, 4), ("b", 4, 0)]);
        // a runs 4 (its quota); two more 2-GPU jobs borrow b's idle 4; a
        // third would pass a's limit of 8.
        let running = [held(0, "a", 4, 0.0)];
        let queue = [(Some("a"), 2), (Some("a"), 2), (Some("a"), 2)];
        let adm = admit(&q, &running, &queue, 4, None);
        assert_eq!(adm.admitted, [true, true, false]);
        assert!(adm.reclaim.is_empty());
        // b has no borrowing limit: within its quota only.
        let adm = admit(&q, &[], &[(Some("b"), 4), (Some("b"), 1)], 8, None);
        assert_eq!(adm.admitted, [true, false]);
        // Nobody's idle quota left to borrow: a waits at its quota.
        let running = [held(0, "a", 4, 0.0), held(1, "b", 4, 0.0)];
        assert_eq!(admit(&q, &running, &[(Some("a"), 1)], 0, None).admitted, [false]);
    }

    #[test]
    fn a_lender_within_its_quota_reclaims_the_borrowers_youngest_jobs() {
        // a borrowed b's 4 GPUs with two 2-GPU jobs; b asks for 2 of its 4.
        let q = quotas(&[("a", 4, 4), ("b", 4, 0)]);
        let running = [held(0, "a", 4, 0.0), held(1, "a", 2, 10.0), held(2, "a", 2, 20.0)];
        let adm = admit(&q, &running, &[(Some("b"), 2)], 0, None);
        assert_eq!(adm.admitted, [true]);
        assert_eq!(adm.reclaim, [(2, "b".to_string())], "the youngest borrowed job, and only as many as needed");
        // Its whole quota: both borrowed jobs, never a's own 4.
        let adm = admit(&q, &running, &[(Some("b"), 4)], 0, None);
        assert_eq!(adm.reclaim.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 1]);
        // Untenanted jobs are not limited and reclaim nothing.
        let adm = admit(&q, &running, &[(None, 6)], 0, None);
        assert_eq!((adm.admitted, adm.reclaim.len()), (vec![true], 0));
    }

    #[test]
    fn borrowed_gpus_are_shared_by_weight_and_given_back_by_weight() {
        // c's 8 GPUs are idle; a (weight 1) and b (weight 3), each at its
        // quota, queue sixteen 1-GPU jobs apiece in turn: b borrows 6 of
        // the 8 and a 2, equal borrowed shares (2/1 = 6/3).
        let mut q = quotas(&[("a", 4, 8), ("b", 4, 8), ("c", 8, 0)]);
        q.get_mut("b").expect("b").weight = 3.0;
        let running = [held(0, "a", 4, 0.0), held(1, "b", 4, 0.0)];
        let queue: Vec<(Option<&str>, u64)> = (0..32).map(|k| (Some(if k % 2 == 0 { "a" } else { "b" }), 1)).collect();
        let adm = admit(&q, &running, &queue, 8, None);
        let count = |t: &str| queue.iter().zip(&adm.admitted).filter(|(j, ok)| **ok && j.0 == Some(t)).count();
        assert_eq!((count("a"), count("b")), (2, 6));
        // When c asks for its 8, the larger borrowed share gives back first:
        // b (6 over / 3 = 2) and a (2 / 1 = 2) tie, then alternate.
        let mut running = vec![held(0, "a", 4, 0.0), held(1, "b", 4, 0.0)];
        running.extend((0..2).map(|k| held(10 + k, "a", 1, 10.0 + k as f64)));
        running.extend((0..6).map(|k| held(20 + k, "b", 1, 20.0 + k as f64)));
        let adm = admit(&q, &running, &[(Some("c"), 3)], 0, None);
        let from =
            |t: &str| adm.reclaim.iter().filter(|r| (if t == "a" { 10..12 } else { 20..26 }).contains(&r.0)).count();
        assert_eq!(adm.reclaim.len(), 3);
        assert_eq!((from("a"), from("b")), (1, 2), "b held three times a's weight-adjusted share? {:?}", adm.reclaim);
    }

    #[test]
    fn usage_decays_by_its_half_life_and_sets_slurms_factor() {
        // 4 GPUs for one half-life (1 h): 4·τ·(1 − ½) = 2τ GPU-s, τ = H/ln 2
        // = 5,193.75 s, so 10,387.5 (not the 14,400 undecayed); one more
        // idle half-life halves it.
        let h = 3_600.0;
        let tau = h / std::f64::consts::LN_2;
        let mut f = FairShare::new(h);
        let run = [held(0, "a", 4, 0.0)];
        f.advance(0.0, &run);
        f.advance(h, &run);
        assert!((f.usage("a") - 2.0 * tau).abs() < 1e-6, "{}", f.usage("a"));
        assert!((f.usage("a") - 10_387.5).abs() < 0.1);
        f.advance(2.0 * h, &[]);
        assert!((f.usage("a") - tau).abs() < 1e-6);
        // Equal quotas, a used everything: F(a) = 2^(−1/½) = ¼, F(b) = 1.
        let q = quotas(&[("a", 4, 4), ("b", 4, 4)]);
        assert!((f.factor(&q, "a") - 0.25).abs() < 1e-12);
        assert_eq!(f.factor(&q, "b"), 1.0);
    }

    #[test]
    fn with_fair_share_the_tenant_that_used_less_lately_borrows_first() {
        // a and b at their quotas of 4; c's 8 idle; sixteen 1-GPU jobs each
        // queued in turn. a held 4 GPUs for the last three half-lives: U_a
        // = 4τ(1 − ⅛) = 3.5τ. Keys (U + τ·held)/S: a 7.5τ, b 4τ; b borrows
        // while its key is below a's (to 8 GPUs held), then they
        // alternate: b, b, b, b, a, b, a, b.
        let q = quotas(&[("a", 4, 8), ("b", 4, 8), ("c", 8, 0)]);
        let h = 600.0;
        let mut f = FairShare::new(h);
        f.advance(0.0, &[held(0, "a", 4, 0.0)]);
        f.advance(3.0 * h, &[held(0, "a", 4, 0.0)]);
        let running = [held(0, "a", 4, 3.0 * h), held(1, "b", 4, 3.0 * h)];
        let queue: Vec<(Option<&str>, u64)> = (0..32).map(|k| (Some(if k % 2 == 0 { "a" } else { "b" }), 1)).collect();
        let count =
            |adm: &Admission, t: &str| queue.iter().zip(&adm.admitted).filter(|(j, ok)| **ok && j.0 == Some(t)).count();
        let fair = admit(&q, &running, &queue, 8, Some(&f));
        assert_eq!((count(&fair, "a"), count(&fair, "b")), (2, 6));
        // Without it, equal borrowed shares alternate.
        let plain = admit(&q, &running, &queue, 8, None);
        assert_eq!((count(&plain, "a"), count(&plain, "b")), (4, 4));
        // And c reclaims from the heavier user first: with 3 borrowed to
        // b's 5, a's key is 10.5τ and b's 9τ, so a, though b borrows more.
        let mut running = running.to_vec();
        running.extend((0..3).map(|k| held(10 + k, "a", 1, 3.0 * h + k as f64)));
        running.extend((0..5).map(|k| held(20 + k, "b", 1, 3.0 * h + k as f64)));
        let adm = admit(&q, &running, &[(Some("c"), 1)], 0, Some(&f));
        assert_eq!(adm.reclaim, [(12, "c".to_string())], "a's youngest");
        let adm = admit(&q, &running, &[(Some("c"), 1)], 0, None);
        assert_eq!(adm.reclaim, [(24, "c".to_string())], "b's youngest (5 borrowed against a's 3)");
    }

    #[test]
    fn admission_takes_the_queue_in_the_policys_order() {
        // a's quota of 4, nothing to borrow: of a 4-GPU and a 1-GPU job, the
        // one the policy serves first is admitted.
        let q = quotas(&[("a", 4, 0)]);
        let topo = orrery_model::setups::LeafSpine::with_oversubscription(1, 1, 1, 4, "v100", 100.0, 1.0)
            .build("t")
            .expect("valid");
        let specs: Vec<orrery_model::JobSpec> = [4u32, 1]
            .iter()
            .map(|&w| {
                let mut s = orrery_model::JobSpec::new("j", "vgg16", 32, w, orrery_model::Work::Iterations(10), 0.0);
                s.tenant = Some("a".into());
                s
            })
            .collect();
        let queue: Vec<crate::QueuedJob<'_>> =
            specs.iter().enumerate().map(|(i, s)| crate::QueuedJob::new(i, s, 0.0)).collect();
        let free = vec![4u32];
        let view = crate::ClusterView { now_s: 0.0, topology: &topo, free_gpus: &free, queue, running: Vec::new() };
        assert_eq!(admit_view(&q, &view, &[0, 1], None).admitted, [true, false]);
        assert_eq!(admit_view(&q, &view, &[1, 0], None).admitted, [false, true]);
        // An order that leaves jobs out: they follow, as queued.
        assert_eq!(admit_view(&q, &view, &[1], None).admitted, [false, true]);
    }

    #[test]
    fn growth_is_on_loan_it_goes_back_first_and_a_tenants_job_runs_on_its_request() {
        // a (quota 4, no borrowing) runs a 2-GPU job grown to 4; its own
        // 2-GPU job arrives: charged 2 + 2 ≤ 4, it is within quota, and
        // the grown job gives its GPUs back, though a is not over quota.
        let q = quotas(&[("a", 4, 0), ("b", 4, 0)]);
        let grown = Held { job: 7, tenant: Some("a"), gpus: 4, request: 2, placed_s: 0.0 };
        let plain = held(8, "b", 4, 5.0);
        let adm = admit(&q, &[grown.clone(), plain.clone()], &[(Some("a"), 2)], 0, None);
        assert_eq!((adm.admitted, adm.reclaim), (vec![true], vec![(7, "a".to_string())]));
        // b's job arrives instead: b is at its quota, nothing to reclaim.
        let adm = admit(&q, &[grown, plain], &[(Some("b"), 1)], 0, None);
        assert_eq!((adm.admitted, adm.reclaim.len()), (vec![false], 0));

        // A policy that places a's 2-GPU job on 6 GPUs: a's quota is 4, so
        // it runs on its request, the first GPUs of the hosts chosen.
        let topo = orrery_model::setups::LeafSpine::with_oversubscription(1, 2, 1, 4, "v100", 100.0, 1.0)
            .build("t")
            .expect("valid");
        let mut spec = orrery_model::JobSpec::new("j", "vgg16", 32, 2, orrery_model::Work::Iterations(10), 0.0);
        spec.tenant = Some("a".into());
        let free = vec![4u32, 4];
        let view = |spec| crate::ClusterView {
            now_s: 0.0,
            topology: &topo,
            free_gpus: &free,
            queue: vec![crate::QueuedJob::new(0, spec, 0.0)],
            running: Vec::new(),
        };
        let grown = || vec![crate::Decision::Place { job: 0, hosts: vec![(0, 4), (1, 2)] }];
        let mut d = grown();
        bound_growth(&q, &view(&spec), &mut d);
        assert_eq!(d, [crate::Decision::Place { job: 0, hosts: vec![(0, 2)] }]);
        // Within a quota of 6 it keeps its growth; a job of no tenant too.
        let roomy = quotas(&[("a", 6, 0)]);
        let mut d = grown();
        bound_growth(&roomy, &view(&spec), &mut d);
        assert_eq!(d, grown());
        let untenanted = orrery_model::JobSpec { tenant: None, ..spec.clone() };
        let mut d = grown();
        bound_growth(&q, &view(&untenanted), &mut d);
        assert_eq!(d, grown());
        // A running job restarted larger than the quota allows is left
        // running as it was: the preemption and the new placement go.
        let hosts = [(0usize, 2u32)];
        let running = crate::RunningJob::new(0, &spec, &hosts);
        let resize = crate::ClusterView { queue: Vec::new(), running: vec![running], ..view(&spec) };
        let mut d = vec![
            crate::Decision::Preempt { job: 0 },
            crate::Decision::Place { job: 0, hosts: vec![(0, 4), (1, 2)] },
            crate::Decision::Preempt { job: 9 },
        ];
        bound_growth(&q, &resize, &mut d);
        assert_eq!(d, [crate::Decision::Preempt { job: 9 }]);
    }

    proptest! {
        /// Whatever the quotas, the running jobs and the queue: no tenant is
        /// admitted past its quota and borrowing limit; the tenants' GPUs
        /// in use and admitted pass the sum of their quotas only by what
        /// was admitted within quota (a reclaim then returns it); reclaim
        /// takes only borrowers' jobs and never takes a borrower below its
        /// quota by more than the last job it gave back.
        #[test]
        fn admission_keeps_every_tenant_within_quota_and_limit(
            limits in proptest::collection::vec((0u64..12, 0u64..8), 1..4),
            run in proptest::collection::vec((0usize..4, 1u64..5, 0u64..3), 0..8),
            wait in proptest::collection::vec((0usize..5, 1u64..6), 0..10),
            spare in 0u64..6,
        ) {
            let names = ["t0", "t1", "t2", "t3"];
            let q: BTreeMap<String, Quota> = limits.iter().enumerate()
                .map(|(i, &(gpus, borrow_limit))| (names[i].to_string(), Quota::new(gpus, borrow_limit))).collect();
            let tenant = |i: usize| (i < limits.len()).then(|| names[i]);
            // Running jobs: each tenant's within its quota + limit, as
            // earlier rounds would have left them.
            let mut running = Vec::new();
            let mut used = vec![0u64; 5];
            for (k, &(i, g, grew)) in run.iter().enumerate() {
                if let Some(t) = tenant(i) {
                    if used[i] + g > q[t].gpus + q[t].borrow_limit { continue; }
                    used[i] += g;
                    // Some grown beyond their request on idle GPUs.
                    running.push(Held { job: k, tenant: Some(t), gpus: g + grew, request: g, placed_s: k as f64 });
                }
            }
            let queue: Vec<(Option<&str>, u64)> = wait.iter().map(|&(i, g)| (tenant(i), g)).collect();
            let adm = admit(&q, &running, &queue, spare, None);
            prop_assert_eq!(adm.admitted.len(), queue.len());
            let mut after = used.clone();
            for (&(i, g), &ok) in wait.iter().zip(&adm.admitted) {
                if ok && tenant(i).is_some() { after[i] += g; }
            }
            for &(job, _) in &adm.reclaim {
                let h = running.iter().find(|h| h.job == job).expect("a running job");
                let i = names.iter().position(|n| Some(*n) == h.tenant).expect("tenant");
                prop_assert!(h.grown() || used[i] > q[names[i]].gpus, "reclaimed from a tenant within its quota");
                after[i] -= h.request;
            }
            for (i, t) in names.iter().enumerate().take(limits.len()) {
                prop_assert!(after[i] <= q[*t].gpus + q[*t].borrow_limit, "{} over its quota and limit", t);
            }
            // Reclaim never takes a borrower's own (ungrown) jobs below its
            // quota by more than the job that crossed it.
            for (i, t) in names.iter().enumerate().take(limits.len()) {
                let taken: u64 = adm.reclaim.iter()
                    .filter_map(|&(j, _)| running.iter().find(|h| h.job == j))
                    .filter(|h| h.tenant == Some(*t) && !h.grown()).map(|h| h.request).sum();
                if taken > 0 {
                    let largest = running.iter().filter(|h| h.tenant == Some(*t)).map(|h| h.request).max().unwrap_or(0);
                    prop_assert!(used[i] - taken + largest > q[*t].gpus, "{} taken below its quota", t);
                }
            }
        }
    }
}
