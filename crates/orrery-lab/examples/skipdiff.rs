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
        sim.run(p.as_mut(), |_, _| {});
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
        let worst =
            x.1.iter()
                .zip(&y.1)
                .enumerate()
                .max_by(|a, b| (a.1.0 - a.1.1).abs().total_cmp(&(b.1.0 - b.1.1).abs()))
                .map(|(k, _)| k);
        if let Some(k) = worst.filter(|&k| (x.1[k] - y.1[k]).abs() > 1e-3) {
            println!(
                "job {j}: iteration {k} of {}: {:.6} vs {:.6} ms (next: {:?} vs {:?})",
                x.1.len(),
                x.1[k],
                y.1[k],
                x.1.get(k + 1),
                y.1.get(k + 1)
            );
        }
    }
}
