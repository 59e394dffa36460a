//! A kept Affinity graph against one built anew every round (issue 69).

use super::tests::running;
use super::*;
use crate::{QueuedJob, RunningJob};
use orrery_model::Work;
use orrery_model::setups::LeafSpine;
use std::collections::BTreeMap;

/// Places each waiting job on GPUs drawn at random from the free ones
/// and now and then preempts a running job to place it again.
struct Scatter(ChaCha8Rng);

impl Policy for Scatter {
    fn name(&self) -> String {
        "scatter".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        use rand::Rng;
        let mut free = view.free_gpus.to_vec();
        let mut out = Vec::new();
        if !view.running.is_empty() && self.0.random_bool(0.2) {
            let r = &view.running[self.0.random_range(0..view.running.len())];
            for &(h, g) in r.hosts {
                free[h] += g;
            }
            out.push(Decision::Preempt { job: r.id });
            if let Some(hosts) = random_hosts(&mut self.0, &free, r.spec.gpus()) {
                for &(h, g) in &hosts {
                    free[h] -= g;
                }
                out.push(Decision::Place { job: r.id, hosts });
            }
        }
        for q in &view.queue {
            if let Some(hosts) = random_hosts(&mut self.0, &free, q.spec.gpus()) {
                for &(h, g) in &hosts {
                    free[h] -= g;
                }
                out.push(Decision::Place { job: q.id, hosts });
            }
        }
        out
    }
}

#[test]
fn a_kept_graph_decides_what_a_graph_built_every_round_decides() {
    // 4 racks of 4 two-GPU hosts under 2 spines, 2:1; rings of 1-4
    // workers of six models, every fifth of high priority, arrive, end
    // at random and are preempted and placed again, over 150 rounds;
    // each round's decisions (placements, time-shifts) must be those
    // of a CASSINI that builds its graph anew and scores it in full;
    // with and without the driver's serial numbers of placements.
    use rand::Rng;
    let t = LeafSpine::with_oversubscription(4, 4, 2, 2, "a100", 50.0, 2.0).build("g").expect("valid");
    let models = ["vgg16", "resnet50", "bert", "vgg19", "resnet18", "xlm"];
    let specs: Vec<JobSpec> = (0..400)
        .map(|i| {
            let mut s = JobSpec::new(
                format!("j{i}"),
                models[i % models.len()],
                32,
                1 + (i % 4) as u32,
                Work::Iterations(100),
                0.0,
            );
            if i % 5 == 0 {
                s.priority = orrery_model::Priority::High;
            }
            s
        })
        .collect();
    let (mut syncs, mut aligned, mut rounds, mut moved) = (0.0, 0, 0, 0);
    for (seed, serials) in (0..6u64).map(|s| (s, s % 2 == 1)) {
        let mut kept = Cassini::new(Box::new(Scatter(ChaCha8Rng::seed_from_u64(seed))), seed);
        let mut fresh = Cassini::new(Box::new(Scatter(ChaCha8Rng::seed_from_u64(seed))), seed);
        fresh.keep_graph = false;
        let mut rng = ChaCha8Rng::seed_from_u64(100 + seed);
        // Jobs holding GPUs by id (the simulator's view order) and their hosts.
        let mut held: BTreeMap<JobId, Vec<(HostId, u32)>> = BTreeMap::new();
        // Each placement's serial number, as the simulator gives them.
        let mut placement: BTreeMap<JobId, u64> = BTreeMap::new();
        let mut placements = 0;
        let mut queue: Vec<JobId> = Vec::new();
        let mut next = 0;
        let mut free = vec![2u32; t.hosts.len()];
        for round in 0..150 {
            for _ in 0..rng.random_range(0..3) {
                queue.push(next);
                next += 1;
            }
            let ids: Vec<JobId> = held.keys().copied().collect();
            for id in ids {
                if rng.random_bool(0.1) {
                    for (h, g) in held.remove(&id).expect("running") {
                        free[h] += g;
                    }
                } else if rng.random_bool(0.03) {
                    // Moved by someone else (a restart after a fault):
                    // the graph must find it on its new hosts.
                    let gpus = held[&id].iter().map(|h| h.1).sum();
                    if let Some(hosts) = random_hosts(&mut rng, &free, gpus) {
                        for &(h, g) in &held[&id] {
                            free[h] += g;
                        }
                        for &(h, g) in &hosts {
                            free[h] -= g;
                        }
                        held.insert(id, hosts);
                        placements += 1;
                        placement.insert(id, placements);
                        moved += 1;
                    }
                }
            }
            let view = ClusterView {
                now_s: round as f64,
                topology: &t,
                free_gpus: &free,
                queue: queue.iter().map(|&q| QueuedJob::new(q, &specs[q], 0.0)).collect(),
                running: held
                    .iter()
                    .map(|(&id, hosts)| RunningJob {
                        placement: if serials { placement[&id] } else { 0 },
                        ..running(id, &specs[id], hosts)
                    })
                    .collect(),
            };
            let decisions = kept.schedule(&view);
            assert_eq!(decisions, fresh.schedule(&view), "seed {seed}, round {round}");
            drop(view);
            for d in decisions {
                match d {
                    Decision::Preempt { job } => {
                        for (h, g) in held.remove(&job).expect("running") {
                            free[h] += g;
                        }
                    }
                    Decision::Place { job, hosts } => {
                        for &(h, g) in &hosts {
                            free[h] -= g;
                        }
                        queue.retain(|&q| q != job);
                        held.insert(job, hosts);
                        placements += 1;
                        placement.insert(job, placements);
                    }
                    Decision::Align { .. } => aligned += 1,
                    _ => {}
                }
            }
            rounds += 1;
        }
        let counter = |c: &Cassini, name: &str| c.counters().iter().find(|x| x.0 == name).map_or(0.0, |x| x.1);
        // Built anew only when freed slots pile up (every 64 or so).
        let builds = counter(&kept, "cassini_graph_builds");
        assert!(builds <= 5.0, "seed {seed}: {builds} builds");
        syncs += counter(&kept, "cassini_graph_syncs");
    }
    // The walks placed, ended, moved and aligned jobs in most rounds.
    assert!(syncs > 0.6 * rounds as f64, "{syncs} syncs in {rounds} rounds");
    assert!(aligned > 100, "{aligned} time-shifts in {rounds} rounds");
    assert!(moved > 20, "{moved} jobs moved");
}
