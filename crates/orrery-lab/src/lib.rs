//! orrery's experiment harness, around the simulator (`orrery-sim`):
//!
//! * [`experiment`]: TOML experiments (policies × scenarios × seeds), the
//!   built-in default, runs side by side, the comparison against a baseline
//!   and the output files (`summary.json`, `jobs.csv`, `links.csv`);
//! * [`report`]: the busiest link up close and the self-contained `report.html`;
//! * [`plot`]: figures (CDFs, link utilisation, circles, Gantt) with
//!   plotters, as SVG and PNG with an embedded font;
//! * [`tables`]: markdown tables from `summary.json` (`orrery table`);
//! * [`psim`]: psim's placement, timing and routing files as an experiment
//!   (`orrery import psim`).
//!
//! The engine knows nothing of files, reports or figures; this crate knows
//! nothing of how the engine simulates.

pub mod experiment;
pub mod plot;
pub mod psim;
pub mod report;
pub mod tables;
