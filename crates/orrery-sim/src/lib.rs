//! orrery's simulated-clock driver: a deterministic discrete-event simulator
//! of a GPU cluster with a flow-level network.
//!
//! * [`network`]: max-min fair flow rates (progressive filling) with caps,
//!   recomputed per connected component, and per-link integrals;
//! * [`engine`]: jobs arrive, queue, get placed by a [`orrery_policy::Policy`],
//!   and execute their iteration shapes segment by segment — compute with
//!   jitter, collectives as flows — with time-shifts, pauses, throttles and
//!   preemption applied as the policy decides;
//! * [`metrics`]: per-job, per-link and cluster metrics.
//!
//! Experiment files, reports, figures and tables are `orrery-lab`'s.
//!
//! Architecture invariant: the simulator embeds no policy logic; it owns the
//! (simulated) clock and its only randomness is seeded from the experiment.

pub mod durations;
pub mod engine;
pub mod metrics;
pub mod network;
pub mod tenants;
pub mod transport;

pub use engine::{SimConfig, Simulation};
