//! The testbed on this machine: the live service, its node agents and real
//! processes (`orrery worker`, PyTorch ranks) on network namespaces with
//! tc-shaped links at 1/100 of the rate, held against the simulator on the
//! same scenarios. Needs root; where namespaces cannot be made each test
//! says why and passes without running.
//!
//! One module per kind of run: [`pairs`] (emulated workers: CASSINI's pair
//! and Metronome's S2), [`ddp`] (real PyTorch DDP rings), [`pipeline`]
//! (a real pipeline × data-parallel pair), [`links`] (one link's rates:
//! throttles, the fair and priority fabrics, bad options); [`harness`]
//! runs the testbed and judges a property over several starts.

#[macro_use]
mod harness;
mod ddp;
mod links;
mod pairs;
mod pipeline;
#[path = "../support/turns.rs"]
mod turns;
