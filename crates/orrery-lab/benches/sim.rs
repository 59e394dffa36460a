//! Max-min recomputation and an end-to-end run: `cargo bench -p orrery-sim`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use orrery_lab::experiment::{DEFAULT, parse};
use orrery_sim::network::Network;
use std::hint::black_box;

/// `n` flows, each on its own host link (capacities 10, 11, ... Gbit/s) and
/// all on one shared uplink: one component whose progressive filling freezes
/// the flows a few at a time — the worst case for one add + remove.
fn maxmin(c: &mut Criterion) {
    let mut g = c.benchmark_group("maxmin_add_remove");
    for n in [16usize, 64, 256] {
        let mut caps: Vec<f64> = (0..n).map(|i| 10.0 + i as f64).collect();
        caps.push(25.0 * n as f64);
        let mut net = Network::new(caps, false);
        for i in 0..n {
            net.add(0, vec![i, n], 1e12, 100.0, i);
        }
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                let (f, _) = net.add(1, black_box(vec![0, n]), 1e12, 100.0, n);
                net.remove(1, f);
            })
        });
    }
    g.finish();
}

/// `n` flows, each on its own host link at its cap, all on one uplink that
/// carries them all (Σ caps ≤ capacity), and one more from a host of its
/// own: no link binds, so one add + remove re-rates the new flow alone
/// however many share the uplink (issue 69's binding components; before
/// them, all `n + 1`).
fn maxmin_unbound(c: &mut Criterion) {
    let mut g = c.benchmark_group("maxmin_add_remove_unbound");
    for n in [16usize, 64, 256] {
        let mut caps: Vec<f64> = vec![100.0; n];
        caps.push(100.0 * (n + 1) as f64);
        caps.push(100.0);
        let mut net = Network::new(caps, false);
        for i in 0..n {
            net.add(0, vec![i, n], 1e12, 100.0, i);
        }
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| {
                let (f, _) = net.add(1, black_box(vec![n + 1, n]), 1e12, 100.0, n);
                net.remove(1, f);
            })
        });
    }
    g.finish();
}

/// One step of a transport model (issue 68) over `n` flows, each on its
/// own host link and all on one shared uplink at twice their rate: the
/// step's O(F · d + L), with the shared FIFO full and drops drawn.
fn transport_step(c: &mut Criterion) {
    use orrery_sim::transport::{Control, Queueing, Transport, TransportConfig};
    let mut g = c.benchmark_group("transport_step");
    for (name, control, queueing) in [
        ("reno_tail_drop", Control::Reno, Queueing::TailDrop),
        ("bbr_tail_drop", Control::Bbr, Queueing::TailDrop),
        ("cubic_fair", Control::Cubic, Queueing::Fair),
    ] {
        for n in [16usize, 64, 256] {
            let mut caps = vec![50.0; n];
            caps.push(25.0 * n as f64);
            let mut net = Network::new(caps, false);
            net.externally_rated = true;
            for i in 0..n {
                net.add(0, vec![i, n], 1e18, 50.0, i);
            }
            let cfg = TransportConfig { queueing, ..TransportConfig::new(control) };
            let step = cfg.step_ns();
            let mut tr = Transport::new(cfg, n + 1, 1);
            let mut t = 0;
            // Past slow start, into the steady state.
            for _ in 0..2_000 {
                let r = tr.step(&net, t);
                net.set_rates(t, &r.flows, &r.links);
                t += step;
            }
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let r = tr.step(&net, t);
                    net.set_rates(t, &r.flows, &r.links);
                    t += step;
                })
            });
        }
    }
    g.finish();
}

fn end_to_end(c: &mut Criterion) {
    let exp = parse("default", &DEFAULT.replace("jobs = 60", "jobs = 20")).expect("valid");
    let mut g = c.benchmark_group("end_to_end");
    g.sample_size(10);
    g.bench_function("default_20_jobs_3_policies", |b| {
        b.iter(|| exp.run(std::path::Path::new("."), |_, _, _, _, _| {}).expect("runs"))
    });
    g.finish();
}

criterion_group!(benches, maxmin, maxmin_unbound, transport_step, end_to_end);
criterion_main!(benches);
