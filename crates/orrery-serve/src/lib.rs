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
//! agent that enforces decisions on a node. [`history`] checks a run's
//! history against the service's invariants (the crash, failover and
//! fault tests).

pub mod api;
pub mod auth;
pub mod bench;
pub mod client;
pub mod clock;
pub mod core;
pub mod dashboard;
pub mod election;
pub mod etcd;
pub mod fleet;
pub mod history;
pub mod http;
pub mod ledger;
pub mod metrics;
pub mod node_agent;
pub mod store;
pub mod tenants;
pub mod tls;

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
    /// Run as one replica of a highly available service on etcd (`None`:
    /// alone, on SQLite in `data_dir`).
    pub ha: Option<HaOptions>,
    /// Serve HTTPS with this identity ([`tls::server_config`]); None: HTTP.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

/// Serves `app` on `listener`, over TLS when `tls` is given.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    match tls {
        Some(config) => tls::serve(listener, app, config).await,
        None => axum::serve(listener, app).await,
    }
}

/// One replica of a highly available service (`orrery serve --store etcd://...`).
#[derive(Debug, Clone)]
pub struct HaOptions {
    /// The etcd members and key prefix.
    pub etcd: etcd::EtcdUrl,
    /// The URL other replicas send clients to while this one leads.
    pub advertise: String,
    /// Lease of the leader key, s: a dead leader is replaced about this long
    /// after its last renewal.
    pub lease_s: i64,
    /// How often the leader compacts etcd's history, s (0: never; see
    /// [`election::Candidate::compact_history`]).
    pub compact_every_s: u64,
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
    if opts.ha.is_some() {
        anyhow::bail!("a replica on etcd starts with start_replica");
    }
    let tokens = auth::Tokens::load_or_create(&opts.data_dir)?;
    let db = store::SqliteStore::open(&opts.data_dir.join("orrery.db"))?;
    let (handle, _thread) = core::start(opts.config.clone(), store::Store::Sqlite(db))?;
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.with_context(|| format!("listening on {}", opts.listen))?;
    let addr = listener.local_addr()?;
    let app = http::router(handle.clone(), tokens);
    let server = tokio::spawn(serve_on(listener, app, opts.tls.clone()));
    Ok(Running { addr, handle, server })
}

/// A replica of a highly available service: it serves HTTP at once, as a
/// standby until it wins the election ([`election`]), then as the leader.
pub struct Replica {
    /// The address it listens on.
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    term: std::sync::Arc<std::sync::OnceLock<(election::Candidate, election::Term)>>,
}

impl Replica {
    /// Serves until the listener fails or the task is aborted.
    pub async fn wait(&mut self) -> Result<()> {
        (&mut self.server).await.context("server task")?.context("serving HTTP")
    }

    /// A clean stop: a leader revokes its lease, so a standby takes over at
    /// once instead of after the lease.
    pub async fn resign(&self) {
        if let Some((candidate, term)) = self.term.get() {
            candidate.resign(term).await;
        }
    }
}

/// What a replica's HTTP front answers with: the leader's router once this
/// replica leads; until then, standby answers naming the leader, and reads
/// from the standby's copy of the state.
struct Front {
    active: std::sync::OnceLock<axum::Router>,
    /// The router of the standby's read-only copy ([`core::start_follower`]);
    /// dropped when this replica leads, which stops the copy's thread.
    follower: std::sync::RwLock<Option<axum::Router>>,
    leader: std::sync::RwLock<Option<String>>,
}

/// The header that says a standby's copy answered (its state may be up to
/// [`core::FOLLOW_EVERY`] behind the leader's).
pub const ROLE_HEADER: &str = "x-orrery-role";

/// The requests a standby's copy answers: the user's reads.
fn is_read(req: &axum::extract::Request) -> bool {
    let path = req.uri().path();
    req.method() == axum::http::Method::GET
        && (matches!(
            path,
            "/" | "/v1/jobs" | "/v1/cluster" | "/v1/nodes" | "/v1/decisions" | "/v1/dashboard" | "/metrics"
        ) || path.strip_prefix("/v1/jobs/").is_some_and(|id| !id.is_empty() && !id.contains('/')))
}

/// Every request of a replica: forwarded to the leader's router when this
/// replica leads. A standby answers `/v1/healthz` (it is alive),
/// `/v1/readyz` with 503 (so a Kubernetes Service sends traffic only to the
/// leader), the user's reads from its copy of the state (marked
/// [`ROLE_HEADER`]`: standby`), and everything else with 503, the leader's
/// URL in the `x-orrery-leader` header and the body. It redirects nothing
/// itself: the clients ([`client::Client`]) switch to the leader and resend,
/// with their token, which an HTTP redirect to another host would drop.
async fn front(
    axum::extract::State(front): axum::extract::State<std::sync::Arc<Front>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use tower::ServiceExt;
    if let Some(router) = front.active.get() {
        if req.uri().path() == "/v1/readyz" {
            return axum::Json(serde_json::json!({"ok": true, "role": "leader"})).into_response();
        }
        return router.clone().oneshot(req).await.unwrap_or_else(|never| match never {});
    }
    let leader = front.leader.read().map(|l| l.clone()).unwrap_or_default();
    if req.uri().path() == "/v1/healthz" {
        return axum::Json(serde_json::json!({"ok": true, "role": "standby", "leader": leader})).into_response();
    }
    let copy = if is_read(&req) { front.follower.read().ok().and_then(|f| f.clone()) } else { None };
    if let Some(router) = copy {
        let mut resp = router.oneshot(req).await.unwrap_or_else(|never| match never {});
        resp.headers_mut().insert(ROLE_HEADER, axum::http::HeaderValue::from_static("standby"));
        if let Some(l) = leader.and_then(|l| axum::http::HeaderValue::from_str(&l).ok()) {
            resp.headers_mut().insert(client::LEADER_HEADER, l);
        }
        return resp;
    }
    let error = match &leader {
        Some(l) => format!("this replica is a standby; the leader is {l}"),
        None => "this replica is a standby and no leader is elected yet; retry shortly".into(),
    };
    let mut resp =
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(api::ApiError { error, field: None, expected: None }))
            .into_response();
    if let Some(l) = leader.and_then(|l| axum::http::HeaderValue::from_str(&l).ok()) {
        resp.headers_mut().insert(client::LEADER_HEADER, l);
    }
    resp
}

/// Starts a replica on etcd: agrees on the tokens, serves as a standby and
/// campaigns; once it wins, rebuilds the state from etcd (its writes fenced
/// by its term) and serves as the leader until it loses its lease, when the
/// process exits ([`election::LOST_LEADERSHIP_EXIT`]). Call in a tokio runtime.
pub async fn start_replica(opts: ServeOptions) -> Result<Replica> {
    let ha = opts.ha.clone().context("start_replica needs HaOptions")?;
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating data directory {}", opts.data_dir.display()))?;
    let client = etcd::Etcd::new(&ha.etcd.endpoints, std::time::Duration::from_secs(2))?;
    let tokens = auth::Tokens::shared(&client, &ha.etcd.prefix, &opts.data_dir).await?;
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.with_context(|| format!("listening on {}", opts.listen))?;
    let addr = listener.local_addr()?;
    let state = std::sync::Arc::new(Front {
        active: std::sync::OnceLock::new(),
        follower: Default::default(),
        leader: Default::default(),
    });
    let app = axum::Router::new().fallback(front).with_state(state.clone());
    let server = tokio::spawn(serve_on(listener, app, opts.tls.clone()));
    // The standby's copy, once a leader has written something to follow.
    let (copy_state, copy_url, copy_config, copy_tokens) =
        (state.clone(), ha.etcd.clone(), opts.config.clone(), tokens.clone());
    tokio::spawn(async move {
        while copy_state.active.get().is_none() {
            let (url, config) = (copy_url.clone(), copy_config.clone());
            let started = tokio::task::spawn_blocking(move || -> Result<core::Handle> {
                let store = store::EtcdStore::open_read_only(&url)?;
                Ok(core::start_follower(config, store::Store::Etcd(store))?.0)
            })
            .await;
            match started {
                Ok(Ok(handle)) => {
                    if copy_state.active.get().is_none()
                        && let Ok(mut f) = copy_state.follower.write()
                    {
                        *f = Some(http::router(handle, copy_tokens));
                    }
                    return;
                }
                Ok(Err(e)) => tracing::debug!("standby copy not started yet: {e:#}"),
                Err(e) => tracing::warn!("standby copy: {e}"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    let candidate = election::Candidate::new(client, &ha.etcd.prefix, &ha.advertise, ha.lease_s);
    let held = std::sync::Arc::new(std::sync::OnceLock::new());
    let term_slot = held.clone();
    tokio::spawn(async move {
        let term = candidate
            .campaign(|leader| {
                if let Ok(mut l) = state.leader.write() {
                    *l = leader;
                }
            })
            .await;
        tracing::info!(revision = term.fence.revision, "elected leader; rebuilding the state from etcd");
        let (url, fence, config) = (ha.etcd.clone(), term.fence.clone(), opts.config.clone());
        let started = tokio::task::spawn_blocking(move || -> Result<core::Handle> {
            let store = store::EtcdStore::open(&url, Some(fence))?;
            Ok(core::start(config, store::Store::Etcd(store))?.0)
        })
        .await;
        let handle = match started {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::error!("elected, but the state could not be rebuilt from etcd: {e:#}");
                std::process::exit(election::LOST_LEADERSHIP_EXIT);
            }
            Err(e) => {
                tracing::error!("elected, but rebuilding the state panicked: {e}");
                std::process::exit(election::LOST_LEADERSHIP_EXIT);
            }
        };
        if let Ok(mut l) = state.leader.write() {
            *l = Some(ha.advertise.clone());
        }
        let _ = state.active.set(http::router(handle, tokens));
        // The standby's copy is not needed any more: its thread ends with its router.
        if let Ok(mut f) = state.follower.write() {
            *f = None;
        }
        let _ = term_slot.set((candidate.clone(), term.clone()));
        tracing::info!("leading: serving as {}", ha.advertise);
        if ha.compact_every_s > 0 {
            let (c, every) = (candidate.clone(), std::time::Duration::from_secs(ha.compact_every_s));
            tokio::spawn(async move { c.compact_history(every).await });
        }
        let why = candidate.hold(term).await;
        tracing::error!("lost the leadership ({why}); stopping so that a standby can lead");
        std::process::exit(election::LOST_LEADERSHIP_EXIT);
    });
    Ok(Replica { addr, server, term: held })
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
