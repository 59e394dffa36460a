//! orrery's real-clock driver: the scheduling service (ARCHITECTURE.md).
//!
//! The same [`orrery_policy::Policy`] objects the simulator drives make every
//! decision here; this crate owns what the simulator simulates: the wall
//! clock, the nodes (registered by agents), the jobs, durability and the
//! network API. A policy is called through the same trait: `schedule` on
//! arrivals, ends, node changes and every `tick_s`; `on_iteration` on every
//! iteration an agent reports (so CASSINI's and Metronome's controllers run
//! live).
//!
//! ## What each decision does live
//!
//! * `Place` / `Share`: committed, then the hosts' agents see the job in their
//!   assignments (with its placement epoch, ranks, peers and iteration
//!   shape) and start or admit its training processes.
//! * `Reject`: the job ends; nothing runs.
//! * `Preempt`: the job leaves the hosts' assignments (its epoch rises); the
//!   agents stop its processes, and reports of the old epoch are refused. The
//!   driver also preempts the jobs of a node silent past its time-out.
//! * `Shift`: the agent delays the job's next iteration by the new part of
//!   `shift_ms_total` (CASSINI's time-shift, FORESIGHT's per-iteration delay).
//! * `Align` / `Pace`: the agent starts the next (Align) or every (Pace)
//!   iteration in its slot on the cluster clock (`epoch_unix_ms` + offset),
//!   with [`orrery_policy::slot::start_delay_ns`], the function the simulator
//!   uses. The cluster clock is the service's: each agent measures its
//!   host's offset to it ([`clock`]).
//! * `Timetable`: the agent holds each listed iteration until its start
//!   ([`orrery_policy::slot::timetable_wait_ns`]; FORESIGHT's plan, handed
//!   out ahead so that it holds although decisions arrive an iteration late).
//! * `Pause` / `Resume`: the agent holds the job's next iteration until resumed.
//! * `Throttle`: the cap reaches the training process through its agent
//!   (`throttle_gbps` in its slot answer); shaping with tc is the testbed's.
//! * `Route`: recorded per flow in the job's assignment, for fabrics that can
//!   pin flows to spines (the testbed); ECMP otherwise.
//!
//! Architecture: [`ledger`] is the state with no I/O (replayable from the
//! log); [`store`] is SQLite; [`core`] the one thread that owns both and the
//! policy, with group commit; [`http`] the axum API; [`auth`] the tokens;
//! [`api`] the JSON both ends share; [`client`] the HTTP client,
//! [`clock`] host clocks against the service's, and [`node_agent`] the
//! agent that enforces decisions on a node.

pub mod api;
pub mod auth;
pub mod bench;
pub mod client;
pub mod clock;
pub mod core;
pub mod dashboard;
pub mod fleet;
pub mod http;
pub mod ledger;
pub mod metrics;
pub mod node_agent;
pub mod store;

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `orrery serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Core configuration.
    pub config: core::Config,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Directory of the database and the token files.
    pub data_dir: PathBuf,
}

/// A running service.
pub struct Running {
    /// The address it listens on (the port is real when 0 was asked).
    pub addr: SocketAddr,
    /// The handle to its core.
    pub handle: core::Handle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Serves until the listener fails or the task is aborted.
    pub async fn wait(self) -> Result<()> {
        self.server.await.context("server task")?.context("serving HTTP")
    }

    /// Stops serving (the core thread ends once the last handle is gone).
    pub fn stop(self) {
        self.server.abort();
    }
}

/// Opens the data directory, rebuilds the state and starts serving (call in
/// a tokio runtime).
pub async fn start(opts: ServeOptions) -> Result<Running> {
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating data directory {}", opts.data_dir.display()))?;
    let tokens = auth::Tokens::load_or_create(&opts.data_dir)?;
    let (handle, _thread) = core::start(opts.config.clone(), &opts.data_dir.join("orrery.db"))?;
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.with_context(|| format!("listening on {}", opts.listen))?;
    let addr = listener.local_addr()?;
    let app = http::router(handle.clone(), tokens);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(Running { addr, handle, server })
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM (`kill`, systemd, Kubernetes), so
/// the service and the agents stop cleanly on either.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
