//! Plebiscito (Pinto et al.): decentralised, bandwidth-aware placement by a
//! max-consensus auction between node agents.
//!
//! - [`bundle`]: bids and the bundle merge (the agreement phase).
//! - [`utility`]: Table I's utilities, the network fraction (Eq. 9), Eqs. 10-11
//!   and the traffic a placement puts on the links.
//! - [`agent`]: one node's protocol as a sans-IO state machine (Algorithm 1).
//! - [`wire`]: sealed datagrams, keys and the replay guard.
//! - [`daemon`]: one agent's datagram handling (who may say what, learning
//!   before bidding, one auction per job id), sans IO.
//! - [`simnet`]: an in-process transport with latency, loss, duplication,
//!   reordering and partitions, seeded, that drives many agents.
//! - [`central`]: the centralised greedy with the same utility (Theorem 1).
//! - [`scale`]: one job on ever more agents, against the greedy (Fig. 7).
//!
//! The real-clock driver (a tokio UDP socket around [`daemon::Daemon`]) lives
//! in the `orrery` binary.

pub mod agent;
pub mod bundle;
pub mod central;
pub mod daemon;
pub mod scale;
pub mod simnet;
pub mod utility;
pub mod wire;

pub use agent::{Agent, Config, Msg, Output, Verdict};
pub use bundle::{Bid, Bundle};
pub use utility::{Arch, BidPolicy, ClusterMap, Demand, JobRequest, Placement, Resources, Usage, Utility};
