//! orrery's simulated-clock driver: a deterministic discrete-event simulator
//! of a GPU cluster with a flow-level network.
//!
//! * [`network`]: max-min fair flow rates (progressive filling) with caps,
//!   recomputed per connected component, and per-link integrals;
//! * [`engine`]: jobs arrive, queue, get placed by a [`orrery_policy::Policy`],
//!   and execute their iteration shapes segment by segment — compute with
//!   jitter, collectives as flows — with time-shifts, pauses, throttles and
//!   preemption applied as the policy decides;
//! * [`metrics`]: per-job, per-link and cluster metrics;
//! * [`experiment`]: TOML experiments, the built-in default, and output files;
//! * [`plot`]: figures (CDFs, link utilisation, circles, Gantt) with
//!   plotters, as SVG and PNG with an embedded font;
//! * [`report`]: the busiest link up close and the self-contained `report.html`;
//! * [`tables`]: markdown tables from `summary.json` (`orrery table`).
//!
//! Architecture invariant: the simulator embeds no policy logic; it owns the
//! (simulated) clock and its only randomness is seeded from the experiment.

pub mod engine;
pub mod experiment;
pub mod metrics;
pub mod network;
pub mod plot;
pub mod report;
pub mod tables;

pub use engine::{SimConfig, Simulation};
