//! Development aid: where the fast-forward and the detailed run first differ.
//! `cargo run --release -p orrery-lab --example skipdiff -- FILE.toml`
use orrery_lab::experiment::parse;
use orrery_sim::{SimConfig, Simulation};

fn main() {
    let path = std::env::args().nth(1).expect("experiment file");
    let text = std::fs::read_to_string(&path).expect("readable");
    let e = parse(&path, &text).expect("valid");
    let base = std::path::Path::new(".");
    let topo = e.topology(base).expect("topology");
    let seed = e.seeds[0];
    let jobs = e.jobs(base, &topo, seed).expect("jobs");
    let run = |skip| {
        let mut p = orrery_policy::by_name(&e.policies[0], seed).expect("policy");
        let mut sim =
            Simulation::new(&topo, &jobs, SimConfig { seed, jitter: e.sim.jitter, skip, ..Default::default() }, false);
        sim.run(p.as_mut(), &mut |_, _| {});
        sim.jobs
            .iter()
            .map(|j| (j.first_start_ns, j.iteration_ms.clone(), j.hosts_used, j.finish_ns, j.hosts.clone()))
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(true), run(false));
    for (j, (x, y)) in a.iter().zip(&b).enumerate() {
        if x.0 != y.0 || x.3.zip(y.3).is_some_and(|(p, q)| p.abs_diff(q) > 1000) {
            println!("job {j}: start {:?} vs {:?}, finish {:?} vs {:?}", x.0, y.0, x.3, y.3);
        }
        // Iteration times are kept as a summary; compare their counts and percentiles.
        let (p, q) = (x.1.percentiles(), y.1.percentiles());
        if x.1.len() != y.1.len() || (p.mean - q.mean).abs() > 1e-3 || (p.p99 - q.p99).abs() > 1e-3 {
            println!(
                "job {j}: {} vs {} iterations, mean {:.6} vs {:.6} ms, p99 {:.6} vs {:.6} ms",
                x.1.len(),
                y.1.len(),
                p.mean,
                q.mean,
                p.p99,
                q.p99
            );
        }
    }
}
