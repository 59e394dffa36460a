//! Plebiscito's Fig. 7 (`experiments/plebiscito-scale.toml`, docs/results.md
//! "Fig. 7"), pinned on its first sizes: one 16-component job auctioned among
//! 4 to 64 agents on an overlay of degree 6, with the aware LGF utility and
//! seed 1, as the experiment file sets. The messages, their mean size, the
//! rounds, the simulated time to consensus and the utility against the
//! centralised greedy are deterministic for the seed; wall times are not
//! and are left out. A change of the protocol that moves any of them fails
//! here (`cargo insta review` to accept it, then rerun the experiment).

use orrery_plebiscito::scale::run;
use orrery_plebiscito::utility::{BidPolicy, Utility};
use std::fmt::Write;

#[test]
fn fig_7_first_sizes() {
    let rows = run(&[4, 8, 16, 32, 64], 16, 6, BidPolicy::aware(Utility::Lgf), 1);
    let mut table = String::from(
        "| agents | D | messages | B/msg | rounds | Λ·N·D | consensus (ms) | agreed | utility vs greedy |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        assert!(r.agreed, "every agent places the job identically at {} agents", r.agents);
        assert!(r.rounds as usize <= r.rounds_bound, "Theorem 3 at {} agents", r.agents);
        let _ = writeln!(
            table,
            "| {} | {} | {} | {:.1} | {} | {} | {:.3} | {} | {:.3} |",
            r.agents,
            r.diameter,
            r.messages,
            r.bytes_per_message,
            r.rounds,
            r.rounds_bound,
            r.consensus_ms,
            r.agreed,
            r.utility_vs_greedy
        );
    }
    insta::assert_snapshot!(table);
}
