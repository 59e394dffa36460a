//! FORESIGHT (joint time and space scheduling on leaf-spine networks): the
//! pure algorithms. It does not place jobs; given placements it decides when
//! each iteration communicates, at what rate, and over which spine.
//!
//! * [`coloring`]: bipartite edge colouring with Δ colours (SolveRouting).
//! * [`logical`]: the logical network — all spines merged into one, each leaf
//!   with an up and a down logical link of the aggregate capacity (§III).
//! * [`timing`]: SolveTiming (Alg. 1): iterations one at a time, least
//!   attained service first, each at the throttle rate and least delay that
//!   fit all its logical links.
//! * [`profile`]: a job's iteration alone on its placement as cross-rack
//!   flows in time, at each throttle rate, stretched to measured times.
//! * [`paths`]: a planned route (spines and shares) as the driver's ECMP
//!   path indices, each host pair's remembered.
//! * [`policy`]: FORESIGHT over any placement and its ablations (ts, ro,
//!   sub, foresight, perfect), applied iteration by iteration.
//! * [`routing`]: SolveRouting — merged time ranges coloured onto spines,
//!   subflows, and the repair loop (`schedule`) that sends uncolourable
//!   ranges back to timing.
//! * [`starts`]: a plan's flows in order of start, merged as far as routing
//!   asks (MergeRanges' input).

pub mod coloring;
pub mod logical;
pub mod paths;
pub mod policy;
pub mod profile;
pub mod routing;
pub mod starts;
pub mod timing;
