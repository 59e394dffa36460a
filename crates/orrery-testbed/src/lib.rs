//! orrery on real TCP. [`fabric`] builds an orrery leaf-spine topology out of
//! Linux network namespaces with tc-shaped veth links; [`worker`] is an
//! emulated data-parallel worker that runs a job's iteration shape as sleeps
//! and a real TCP ring all-reduce, paced by its node agent; [`ddp`] measures
//! the shape of real PyTorch DDP jobs run there instead; [`throttle`]
//! measures the node agent's tc throttles on real TCP, and [`share`] how a
//! link shares itself between flows (tail-drop or fair queueing).
//!
//! Needs root (CAP_NET_ADMIN) and iproute2 (`ip`, `tc`).

pub mod capture;
pub mod compare;
pub mod ddp;
pub mod drive;
pub mod fabric;
pub mod mltcp;
pub mod share;
pub mod throttle;
pub mod worker;
