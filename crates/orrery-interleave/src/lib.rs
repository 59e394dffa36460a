//! The geometric heart of CASSINI (NSDI'24 §3–4) and Metronome (§II-B/C, §III-B/C).
//!
//! * [`unified`]: the unified circle of jobs sharing a link — perimeter = LCM of
//!   their iteration times, with Metronome's G_T/E_T approximation — and each
//!   job's bandwidth demand per discrete angle;
//! * [`score`]: demand per angle (Metronome Eq. 4), excess (CASSINI Eq. 1),
//!   compatibility score (CASSINI Eq. 2), node score (Metronome Eq. 18), link
//!   utilisation ξ_l (Eq. 6), Γ (Eq. 5) and the cushion Ψ (Eq. 9);
//! * [`search`]: rotation search — exhaustive, fast feasible, optimal with
//!   cushion, and a heuristic for many jobs — and time-shifts (CASSINI Eq. 5);
//! * [`affinity`]: the Affinity graph and its traversal (CASSINI Alg. 1).
//!
//! Architecture invariant: pure functions of their inputs; no clock, no I/O;
//! randomness only from a seed the caller passes.

pub mod affinity;
pub mod cassini;
pub mod compat;
pub mod score;
pub mod search;
pub mod svg;
pub mod unified;

pub use search::{Search, Solution, solve};
pub use unified::{CircleJob, Params, UnifiedCircle, unify};
