//! orrery's domain model: the one source of truth every other crate builds on.
//!
//! * [`topology`]: hosts, switches, directed links, shortest paths with their ECMP
//!   candidate sets, and builders for the set-ups of the five papers;
//! * [`gpu`]: the GPU catalogue (memory, speed relative to a V100);
//! * [`shape`]: what one training iteration does, as an ordered list of segments,
//!   and the circle view (CASSINI §3, Metronome §II-B) derived from it;
//! * [`zoo`]: the models of the papers with public facts and calibrated costs,
//!   turned into shapes for a GPU type, batch, placement and link rate;
//! * [`job`]: job specifications as traces and generators produce them;
//! * [`colocation`]: GPU sharing: interference ratios (spatial and
//!   temporal), GPU memory per batch, gradient accumulation (Castor);
//! * [`convergence`]: iterations to converge per total batch (Pollux's
//!   profiles), the statistical efficiency of elastic jobs;
//! * [`mesh`]: LLM architectures and device meshes (tensor, pipeline, data,
//!   expert parallelism): parameters, FLOPs and each dimension's traffic
//!   per iteration from the literature's closed forms; `mesh::timing`, an
//!   iteration's time on a mesh (roofline compute, 1F1B bubble, each
//!   collective on NVLink or the NIC); `mesh::published`, the calibration
//!   table against Megatron-LM SC'21.
//!
//! Architecture invariant: this crate does no I/O beyond parsing strings it is
//! handed, reads no clock and draws no random numbers.

pub mod colocation;
pub mod convergence;
pub mod files;
pub mod gpu;
pub mod job;
pub mod mesh;
pub mod placed;
pub mod rails;
pub mod ranges;
pub mod setups;
pub mod shape;
pub mod topology;
pub mod zoo;

pub use gpu::GpuType;
pub use job::{JobSpec, Priority, Work};
pub use shape::{Arc, Circle, Collective, IterationShape, Segment};
pub use topology::{HostId, LinkId, NodeId, Topology};
pub use zoo::{ModelSpec, Placement};
