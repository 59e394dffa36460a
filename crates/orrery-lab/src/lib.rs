//! orrery's experiment harness, around the simulator (`orrery-sim`):
//!
//! * [`spec`]: the experiment file (policies × scenarios × seeds) and the
//!   built-in default; [`workload`]: its jobs for a seed; [`script`]: its
//!   scripted decisions;
//! * [`experiment`]: runs side by side and the output files (`summary.json`,
//!   `jobs.csv`, `links.csv`); [`summary`]: what runs measured and the
//!   comparison against a baseline;
//! * [`shard`]: an experiment's runs cut into slices for several machines
//!   (`orrery run --shard K/N`), and the merge of their files;
//! * [`report`]: the busiest link up close and the self-contained `report.html`;
//! * [`plot`]: figures (CDFs, link utilisation, circles, Gantt) with
//!   plotters, as SVG and PNG with an embedded font;
//! * [`tables`]: markdown tables from `summary.json` (`orrery table`);
//!   [`scoreboard`]: the results' scoreboard from several summaries;
//! * [`psim`]: psim's placement, timing and routing files as an experiment
//!   (`orrery import psim`).
//!
//! The engine knows nothing of files, reports or figures; this crate knows
//! nothing of how the engine simulates.

pub mod experiment;
pub mod plot;
pub mod psim;
pub mod report;
pub mod scoreboard;
pub mod script;
pub mod shard;
pub mod spec;
pub mod summary;
pub mod tables;
pub mod workload;
