//! Castor (GPU colocation with interference ratios, gradient accumulation
//! and SJF-BSBF), its policy side in one place:
//!
//! - [`theorem`] (re-exported here): Theorem 1, when a pair shares and in
//!   which order, and Algorithm 2's batch scaling;
//! - [`colocate`]: Algorithm 1, the scheduler (`castor`, `castor:blocking`,
//!   `castor:shorter-first`) and its baselines (`sjf-ffs`, `lucid`);
//! - [`share`]: what makes a `Decision::Share` valid, for both drivers.
//!
//! Its inputs live with the data they model: interference ratios and the
//! memory a pair needs in `orrery_model::colocation`, the ratio predictor in
//! `orrery_trace::interference`, the iteration-time model (Eqs. 1-3) in
//! `orrery_trace::itermodel`, and the Philly/Venus workloads in
//! `orrery_trace::castor`.

pub mod colocate;
pub mod share;
pub mod theorem;

pub use theorem::*;
