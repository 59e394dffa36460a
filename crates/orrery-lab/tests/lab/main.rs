//! orrery-lab's integration tests, one binary (each test file linked alone
//! cost CI ~10 CPU-seconds): `cargo test --release -p orrery-lab --test lab
//! pinned::` runs one file's tests.

mod decisions;
mod foresight;
mod generated;
mod pinned;
mod psim;
mod scoreboard;
mod skip;
mod tenants;
mod validation;
