//! The HTTP API under `/v1` (axum, JSON), with bearer-token scopes.
//!
//! Scopes: `admin` is `user.token`, the cluster administrators'; `user` is
//! that or a tenant's token (issue 70), which sees only its tenant's jobs:
//! another tenant's job answers exactly as a missing one (404), and the
//! cluster's state comes as aggregates (counts, GPUs, link loads) with
//! only its own jobs named.
//!
//! | method and path | scope | what |
//! |---|---|---|
//! | `GET /v1/healthz` | none | liveness |
//! | `POST /v1/jobs` | user | submit one `JobSpec` (a JSONL line); `201 {"id"}`, `200` if the same spec id was accepted before, `409` if that id has another spec; a tenant's job gets its `tenant` |
//! | `GET /v1/jobs?status=&after=&limit=` | user | jobs by id |
//! | `GET /v1/jobs/{id}` | user | one job (`id` is the number, the spec id, or for the administrators `TENANT%2FID`) |
//! | `DELETE /v1/jobs/{id}` | user | cancel |
//! | `GET /v1/cluster`, `GET /v1/nodes` | user | cluster and node state |
//! | `GET /v1/decisions?since=SEQ&limit=` | user | the committed decision log (a tenant: entries about its jobs and nodes) |
//! | `GET /metrics` | user | Prometheus text (aggregates) |
//! | `GET /` | none | the live dashboard's page (it asks for a token) |
//! | `GET /v1/dashboard?after=VERSION&wait_s=` | user | long-poll: the dashboard's snapshot once a batch newer than `VERSION` is committed, or after `wait_s` (≤ 60) |
//! | `GET /v1/tenants` | user | tenants with their quota and GPUs in use (a tenant: its own) |
//! | `POST /v1/tenants` | admin | make or change a tenant: `{"name", "gpus", "borrow_limit"?, "weight"?}` |
//! | `POST /v1/tenants/{name}/tokens` | admin | issue a token: `{"expires_in_s"?}` → `{"token", "info"}` (the secret is shown once) |
//! | `GET /v1/tenants/{name}/tokens` | admin | its tokens (ids, expiry, revoked; never a secret) |
//! | `DELETE /v1/tokens/{id}` | admin | revoke a token |
//! | `POST /v1/nodes/register` | agent | `RegisterRequest` → session |
//! | `POST /v1/nodes/{host}/heartbeat` | agent | `{"session"}` |
//! | `POST /v1/nodes/{host}/deregister` | agent | `{"session"}`: the agent stopped its processes and leaves; its jobs are re-queued now |
//! | `GET /v1/nodes/{host}/assignments?session=&after=&wait_s=&stopping=&held=` | agent | long-poll: returns when the node's version passes `after`, fewer than `held` of its assignments are held, or after `wait_s` (≤ 60); `stopping` names the jobs whose earlier ranks it still stops |
//! | `POST /v1/nodes/{host}/reports` | agent | iteration reports |
//!
//! Errors are JSON `{"error", "field"?, "expected"?}`: 400 malformed JSON,
//! 401 no or unknown token, 403 wrong scope, 404, 409 conflict (stale
//! session or epoch, taken id, a node another live agent holds), 413 body
//! over 1 MiB, 422 a field out of range, 503 the core stopped. `field` is
//! always a field's name or path (`work.iterations`, `host`), never a value.

use crate::api::{ApiError, Heartbeat, JobStatus, RegisterRequest, Reports};
use crate::auth::{Caller, Scope, Tokens};
use crate::core::{Failure, Handle, Unavailable};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use orrery_model::JobSpec;
use orrery_policy::JobId;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body, bytes.
pub const BODY_LIMIT: usize = 1 << 20;
/// Longest long-poll, s.
const MAX_WAIT_S: f64 = 60.0;

#[derive(Clone)]
struct App {
    core: Handle,
    tokens: Arc<Tokens>,
}

/// An error answer.
#[derive(Debug)]
pub struct Error(StatusCode, ApiError);

impl Error {
    fn new(code: StatusCode, msg: impl Into<String>) -> Self {
        Error(code, ApiError { error: msg.into(), field: None, expected: None })
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        match f {
            Failure::NotFound(m) => Error::new(StatusCode::NOT_FOUND, m),
            Failure::Conflict(m) => Error::new(StatusCode::CONFLICT, m),
            Failure::Field { field, expected, found } => Error(
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiError { error: format!("{field}: found {found}"), field: Some(field), expected: Some(expected) },
            ),
            Failure::Internal(m) => Error::new(StatusCode::INTERNAL_SERVER_ERROR, m),
        }
    }
}

impl From<Unavailable> for Error {
    fn from(_: Unavailable) -> Self {
        Error::new(StatusCode::SERVICE_UNAVAILABLE, "the scheduler core has stopped")
    }
}

type Answer<T> = Result<T, Error>;

/// A query string as the extractor gave it: parsed, or why not.
type QueryArg<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// The parsed query, or a JSON 400 saying what was wrong with it and naming
/// the parameter (axum says `...query string: NAME: why`).
fn query<T>(q: QueryArg<T>) -> Answer<T> {
    q.map(|Query(q)| q).map_err(|e| {
        let text = e.body_text();
        let field = text
            .split_once("query string: ")
            .and_then(|(_, rest)| rest.split_once(": "))
            .map(|(name, _)| name.to_string())
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        Error(StatusCode::BAD_REQUEST, ApiError { error: text, field, expected: None })
    })
}

/// The router with every endpoint.
pub fn router(core: Handle, tokens: Tokens) -> Router {
    let app = App { core, tokens: Arc::new(tokens) };
    let user = Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/v1/cluster", get(cluster))
        .route("/v1/nodes", get(nodes))
        .route("/v1/decisions", get(decisions))
        .route("/v1/dashboard", get(dashboard))
        .route("/metrics", get(metrics))
        .route("/v1/tenants", get(list_tenants))
        .route_layer(middleware::from_fn_with_state(app.clone(), user_scope));
    let admin = Router::new()
        .route("/v1/tenants", post(set_tenant))
        .route("/v1/tenants/{name}/tokens", post(issue_token).get(list_tokens))
        .route("/v1/tokens/{id}", axum::routing::delete(revoke_token))
        .route_layer(middleware::from_fn_with_state(app.clone(), admin_scope));
    let agent = Router::new()
        .route("/v1/nodes/register", post(register))
        .route("/v1/nodes/{host}/heartbeat", post(heartbeat))
        .route("/v1/nodes/{host}/deregister", post(deregister))
        .route("/v1/nodes/{host}/assignments", get(assignments))
        .route("/v1/nodes/{host}/reports", post(reports))
        .route("/v1/nodes/{host}/restarts", post(restarts))
        .route_layer(middleware::from_fn_with_state(app.clone(), agent_scope));
    Router::new()
        .route("/v1/healthz", get(|| async { Json(serde_json::json!({"ok": true})) }))
        .route("/", get(|| async { axum::response::Html(crate::dashboard::PAGE) }))
        .merge(admin)
        .merge(user)
        .merge(agent)
        .fallback(|| async {
            Error::new(StatusCode::NOT_FOUND, "no such endpoint (see the API table in docs/guide/live.md)")
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

fn presented(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

/// What an endpoint needs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    /// The administrators' or a tenant's token.
    User,
    /// The administrators' token.
    Admin,
    /// The agents' token.
    Agent,
}

/// Checks the bearer token against what the endpoint needs; a user's
/// request carries its [`Caller`]. A tenant's token is looked up on the
/// core thread (its table is the log's fold, so a revocation holds from
/// its commit on); the two file tokens are compared here.
async fn check_scope(app: &App, need: Need, mut req: Request, next: Next) -> Response {
    let Some(presented) = presented(req.headers()).map(str::to_string) else {
        return Error::new(StatusCode::UNAUTHORIZED, "missing bearer token (Authorization: Bearer TOKEN)")
            .into_response();
    };
    let caller = match app.tokens.scope_of(&presented) {
        Some(Scope::Agent) if need == Need::Agent => return next.run(req).await,
        Some(Scope::Agent) => None,
        Some(Scope::User) => Some(Caller::Admin),
        None => {
            let found =
                app.core.call(move |c| c.ledger.tenants().identify(&presented, crate::core::unix_ms()).cloned()).await;
            match found {
                Ok(Some(t)) => Some(Caller::Tenant { tenant: t.tenant, token: t.id }),
                Ok(None) => return Error::new(StatusCode::UNAUTHORIZED, "unknown token").into_response(),
                Err(e) => return Error::from(e).into_response(),
            }
        }
    };
    let refused = match (need, &caller) {
        (Need::Agent, _) => Some("this endpoint needs the agent token (agent.token)"),
        (_, None) => Some("this endpoint needs a user's token (user.token or a tenant's)"),
        (Need::Admin, Some(Caller::Tenant { .. })) => {
            Some("this endpoint needs the administrators' token (user.token)")
        }
        _ => None,
    };
    if let Some(why) = refused {
        return Error::new(StatusCode::FORBIDDEN, why).into_response();
    }
    if let Some(c) = caller {
        req.extensions_mut().insert(c);
    }
    next.run(req).await
}

async fn user_scope(State(app): State<App>, req: Request, next: Next) -> Response {
    check_scope(&app, Need::User, req, next).await
}

async fn admin_scope(State(app): State<App>, req: Request, next: Next) -> Response {
    check_scope(&app, Need::Admin, req, next).await
}

async fn agent_scope(State(app): State<App>, req: Request, next: Next) -> Response {
    check_scope(&app, Need::Agent, req, next).await
}

/// Parses a JSON body; an error names the field by its path in the body
/// (`work.iterations`), never the value found there.
fn parse<T>(body: Result<Bytes, BytesRejection>, what: &str) -> Answer<T>
where
    T: DeserializeOwned + serde::Serialize + schemars::JsonSchema + 'static,
{
    let body = body.map_err(|e| Error::new(e.status(), format!("request body: {}", e.body_text())))?;
    let de = &mut serde_json::Deserializer::from_slice(&body);
    let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        let field = error_field(&path, &msg);
        let code = if inner.is_data() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::BAD_REQUEST };
        Error(code, ApiError { error: format!("{what}: {msg}"), field, expected: Some(format!("a JSON {what}")) })
    })?;
    // Every number against its declared range ([`orrery_model::ranges`]).
    orrery_model::ranges::check(&value).map_err(|e| {
        Error(
            StatusCode::UNPROCESSABLE_ENTITY,
            ApiError { error: format!("{what}: {e}"), field: Some(e.path), expected: Some(e.expected) },
        )
    })?;
    Ok(value)
}

/// The field a deserialisation error is about: its path, or for a missing or
/// unknown field (reported at the object holding it) that field's name
/// under the path. None for errors of the whole body (not JSON, not an object).
fn error_field(path: &str, msg: &str) -> Option<String> {
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| msg.strip_prefix(p))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_string);
    let path = (path != "." && !path.is_empty()).then(|| path.to_string());
    match (path, named) {
        (Some(p), Some(n)) if !p.ends_with(&n) => Some(format!("{p}.{n}")),
        (Some(p), _) => Some(p),
        (None, n) => n,
    }
}

/// A host index from a path segment, or a JSON 400 naming it.
fn host_arg(raw: &str) -> Answer<usize> {
    raw.parse().map_err(|_| {
        Error(
            StatusCode::BAD_REQUEST,
            ApiError {
                error: format!("host {raw:?} in the path is not a host index"),
                field: Some("host".into()),
                expected: Some("the host index the registration answered (a non-negative integer)".into()),
            },
        )
    })
}

async fn submit(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let mut spec: JobSpec = parse(body, "job spec (a line of the jsonl format)")?;
    if let Some(mine) = caller.tenant() {
        if spec.tenant.as_deref().is_some_and(|t| t != mine) {
            return Err(Failure::Field {
                field: "tenant".into(),
                expected: format!("your token's tenant, {mine:?}, or none"),
                found: "another tenant".into(),
            }
            .into());
        }
        spec.tenant = Some(mine.to_string());
    }
    let s = app.core.call(move |c| c.submit(spec, &caller)).await??;
    let code = if s.existing { StatusCode::OK } else { StatusCode::CREATED };
    Ok((code, Json(s)).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    status: Option<JobStatus>,
    #[serde(default)]
    after: Option<usize>,
    limit: Option<usize>,
}

async fn list_jobs(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    q: QueryArg<ListQuery>,
) -> Answer<Response> {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(1000).min(10_000);
    let jobs = app
        .core
        .call(move |c| {
            let start = q.after.map_or(0, |a| a + 1);
            c.ledger
                .jobs()
                .from_id(start)
                .filter(|(_, j)| caller.sees(j.spec.tenant.as_deref()) && q.status.is_none_or(|s| j.status == s))
                .map(|(id, _)| id)
                .take(limit)
                .filter_map(|id| c.ledger.job_info(id))
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(Json(jobs).into_response())
}

/// The job `id` names (its number, or its spec id among the caller's
/// tenant's jobs), if the caller may see it: another tenant's job is as
/// missing as one that never was.
fn job_id(c: &crate::core::Core, id: &str, caller: &Caller) -> Result<usize, Failure> {
    id.parse::<usize>()
        .ok()
        .filter(|&n| c.ledger.jobs().get(n).is_some())
        .or_else(|| c.ledger.job_by_name(caller.tenant(), id))
        .filter(|&n| caller.sees(c.ledger.jobs()[n].spec.tenant.as_deref()))
        .ok_or_else(|| Failure::NotFound(format!("no job {id:?}")))
}

async fn get_job(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer<Response> {
    let info = app.core.call(move |c| job_id(c, &id, &caller).map(|j| c.ledger.job_info(j))).await??;
    Ok(Json(info).into_response())
}

async fn cancel_job(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer<Response> {
    let info = app
        .core
        .call(move |c| {
            let j = job_id(c, &id, &caller)?;
            c.cancel(j, &caller)?;
            Ok::<_, Failure>(c.ledger.job_info(j))
        })
        .await??;
    Ok(Json(info).into_response())
}

async fn cluster(State(app): State<App>, Extension(caller): Extension<Caller>) -> Answer<Response> {
    let info = app
        .core
        .call(move |c| {
            let now = c.now_s();
            crate::api::ClusterInfo {
                topology: c.ledger.topology().name.clone(),
                policy: c.config.policy.clone(),
                now_s: now,
                epoch_unix_ms: c.epoch_unix_ms,
                jobs: c.ledger.counts(),
                nodes: visible_nodes(c, &caller, c.ledger.node_infos(now)),
                last_seq: c.ledger.next_seq() - 1,
            }
        })
        .await?;
    Ok(Json(info).into_response())
}

/// Nodes with only the caller's jobs named on them.
fn visible_nodes(
    c: &crate::core::Core,
    caller: &Caller,
    mut nodes: Vec<crate::api::NodeInfo>,
) -> Vec<crate::api::NodeInfo> {
    if caller.tenant().is_some() {
        for n in &mut nodes {
            n.jobs.retain(|&j| sees_job(c, caller, j));
        }
    }
    nodes
}

/// Whether the caller may see job `j`.
fn sees_job(c: &crate::core::Core, caller: &Caller, j: usize) -> bool {
    c.ledger.jobs().get(j).is_some_and(|job| caller.sees(job.spec.tenant.as_deref()))
}

/// Whether the caller may see a log entry: the administrators all; a
/// tenant the entries about its jobs and about nodes.
fn sees_entry(c: &crate::core::Core, caller: &Caller, e: &crate::api::LogEntry) -> bool {
    use crate::api::{DriverEvent, Logged};
    if caller.tenant().is_none() {
        return true;
    }
    match &e.entry {
        Logged::Decision(d) => sees_job(c, caller, crate::ledger::decision_job(d)),
        Logged::Event(
            DriverEvent::Finished { job } | DriverEvent::Cancelled { job } | DriverEvent::Submitted { job },
        ) => sees_job(c, caller, *job),
        Logged::Event(DriverEvent::NodeUp { .. } | DriverEvent::NodeDown { .. }) => true,
        // It names every tenant's jobs.
        Logged::Event(DriverEvent::Expired { .. }) | Logged::Admin(_) => false,
    }
}

async fn nodes(State(app): State<App>, Extension(caller): Extension<Caller>) -> Answer<Response> {
    let nodes = app.core.call(move |c| visible_nodes(c, &caller, c.ledger.node_infos(c.now_s()))).await?;
    Ok(Json(nodes).into_response())
}

#[derive(Deserialize)]
struct SinceQuery {
    #[serde(default)]
    since: u64,
    limit: Option<usize>,
}

async fn decisions(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    q: QueryArg<SinceQuery>,
) -> Answer<Response> {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(10_000).min(100_000);
    let log = app
        .core
        .call(move |c| {
            let mut log = c.store.log_since(q.since, limit).map_err(|e| Failure::Internal(format!("{e:#}")))?;
            log.retain(|e| sees_entry(c, &caller, e));
            Ok::<_, Failure>(log)
        })
        .await??;
    Ok(Json(log).into_response())
}

#[derive(Deserialize)]
struct DashboardQuery {
    #[serde(default)]
    after: Option<u64>,
    #[serde(default)]
    wait_s: f64,
}

async fn dashboard(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    q: QueryArg<DashboardQuery>,
) -> Answer<Response> {
    let q = query(q)?;
    let wait = if q.wait_s.is_finite() { q.wait_s.clamp(0.0, MAX_WAIT_S) } else { 0.0 };
    let mut version = app.core.version.clone();
    if let Some(after) = q.after {
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
        while *version.borrow_and_update() <= after {
            tokio::select! {
                r = version.changed() => { if r.is_err() { return Err(Unavailable.into()); } }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    }
    let v = *version.borrow();
    let snap = app
        .core
        .call(move |c| {
            let last = c.ledger.next_seq() - 1;
            let since = last.saturating_sub(crate::dashboard::RECENT_DECISIONS);
            let log = c
                .store
                .log_since(since, crate::dashboard::RECENT_DECISIONS as usize)
                .map_err(|e| Failure::Internal(format!("{e:#}")))?;
            let mut snap = crate::dashboard::snapshot(&c.ledger, &c.config.policy, c.now_s(), v, log);
            if caller.tenant().is_some() {
                // Aggregates stay (counts, GPUs, link loads); other
                // tenants' jobs are not named.
                snap.jobs.retain(|j| caller.sees(j.info.spec.tenant.as_deref()));
                snap.nodes = visible_nodes(c, &caller, snap.nodes);
                for l in &mut snap.links {
                    l.jobs.retain(|j| sees_job(c, &caller, j.id));
                }
                snap.decisions.retain(|e| sees_entry(c, &caller, e));
            }
            Ok::<_, Failure>(snap)
        })
        .await??;
    Ok(Json(snap).into_response())
}

async fn metrics(State(app): State<App>) -> Answer<Response> {
    let (counts, up, gpus, links, awaiting) = app
        .core
        .call(|c| {
            let nodes = c.ledger.node_infos(c.now_s());
            let (used, free) = nodes.iter().filter(|n| n.up).fold((0u64, 0u64), |(u, f), n| {
                (u + u64::from(n.gpus - n.free_gpus.min(n.gpus)), f + u64::from(n.free_gpus))
            });
            (
                c.ledger.counts(),
                c.ledger.nodes_up(),
                [("used", used), ("free", free)],
                crate::dashboard::link_loads(&c.ledger),
                c.ledger.awaiting_handover(),
            )
        })
        .await?;
    let m = &app.core.metrics;
    m.jobs_awaiting_handover.set(awaiting as i64);
    for (state, n) in counts {
        m.jobs.get_or_create(&crate::metrics::StateLabels { state }).set(n as i64);
    }
    m.agents_up.set(up as i64);
    for (state, n) in gpus {
        m.gpus.get_or_create(&crate::metrics::StateLabels { state: state.into() }).set(n as i64);
    }
    m.link_utilisation.clear();
    for l in links {
        m.link_utilisation.get_or_create(&crate::metrics::LinkLabels { link: l.name }).set(l.utilisation);
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], m.encode()).into_response())
}

async fn register(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> Answer<Response> {
    let req: RegisterRequest = parse(body, "registration {\"name\", \"gpus\", \"nic_gbps\"}")?;
    let r = app.core.call(move |c| c.register(&req)).await??;
    Ok(Json(r).into_response())
}

async fn heartbeat(
    State(app): State<App>,
    Path(host): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let host = host_arg(&host)?;
    // NTP's t1 and t2 (crate::clock): the agent estimates its clock's offset.
    let received_unix_us = crate::clock::host_unix_us();
    let hb: Heartbeat = parse(body, "heartbeat {\"session\"}")?;
    app.core.call(move |c| c.heartbeat(host, hb.session)).await??;
    let answer = crate::api::HeartbeatAnswer { ok: true, received_unix_us, sent_unix_us: crate::clock::host_unix_us() };
    Ok(Json(answer).into_response())
}

#[derive(Deserialize)]
struct AssignQuery {
    session: u64,
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait_s: f64,
    /// Jobs whose ranks of an earlier placement the agent is still
    /// stopping, comma-separated (`ledger::handover`).
    #[serde(default)]
    stopping: String,
    /// Assignments its last answer held: the poll answers once fewer are.
    #[serde(default)]
    held: usize,
}

/// `stopping=3,17`: job ids. O(ids).
fn job_list(field: &'static str, text: &str) -> Result<Vec<JobId>, Failure> {
    text.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.trim().parse::<JobId>().map_err(|_| Failure::Field {
                field: field.into(),
                expected: "job ids separated by commas".into(),
                found: format!("{t:?}"),
            })
        })
        .collect()
}

async fn assignments(State(app): State<App>, Path(host): Path<String>, q: QueryArg<AssignQuery>) -> Answer<Response> {
    let host = host_arg(&host)?;
    let q = query(q)?;
    let stopping = job_list("stopping", &q.stopping)?;
    let wait = if q.wait_s.is_finite() { q.wait_s.clamp(0.0, MAX_WAIT_S) } else { 0.0 };
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
    let mut committed = app.core.committed.clone();
    let mut handed_over = app.core.handed_over.clone();
    let (session, after, held) = (q.session, q.after, q.held);
    // What the poll says of the node counts once, on its first look.
    let mut report = Some(stopping);
    loop {
        committed.borrow_and_update();
        handed_over.borrow_and_update();
        let stopping = report.take();
        let ready = app
            .core
            .call(move |c| {
                let now = c.now_s();
                c.ledger.heartbeat(host, session, now)?;
                if let Some(stopping) = stopping
                    && c.ledger.ranks_stopped(host, after, &stopping)
                {
                    c.handed_over.send_modify(|n| *n += 1);
                }
                let timed_out = tokio::time::Instant::now() >= deadline;
                let released = held > 0 && c.ledger.held_on(host) < held;
                Ok::<_, Failure>(
                    (c.ledger.node_version(host) > after || released || timed_out).then(|| c.ledger.assignments(host)),
                )
            })
            .await??;
        if let Some(a) = ready {
            return Ok(Json(a).into_response());
        }
        tokio::select! {
            r = committed.changed() => { if r.is_err() { return Err(Unavailable.into()); } }
            r = handed_over.changed() => { if r.is_err() { return Err(Unavailable.into()); } }
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

async fn deregister(
    State(app): State<App>,
    Path(host): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let host = host_arg(&host)?;
    let hb: Heartbeat = parse(body, "deregistration {\"session\"}")?;
    app.core.call(move |c| c.deregister(host, hb.session)).await??;
    Ok(Json(serde_json::json!({"ok": true})).into_response())
}

async fn reports(
    State(app): State<App>,
    Path(host): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let host = host_arg(&host)?;
    let r: Reports = parse(body, "reports {\"session\", \"reports\": [...]}")?;
    let out = app.core.call(move |c| c.reports(host, r.session, &r.reports)).await??;
    Ok(Json(out).into_response())
}

async fn restarts(
    State(app): State<App>,
    Path(host): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let host = host_arg(&host)?;
    let r: crate::api::RestartRequest = parse(body, "restart {\"session\", \"job\", \"epoch\"}")?;
    let preempted = app.core.call(move |c| c.restart_job(host, r.session, r.job, r.epoch)).await??;
    Ok(Json(serde_json::json!({"preempted": preempted})).into_response())
}

/// A tenant with what it holds now.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TenantInfo {
    /// The tenant.
    #[serde(flatten)]
    pub tenant: crate::tenants::Tenant,
    /// GPUs its running jobs hold.
    pub gpus_in_use: u64,
    /// Its jobs that have not ended.
    pub jobs_active: usize,
    /// Its jobs waiting.
    pub jobs_queued: usize,
}

async fn list_tenants(State(app): State<App>, Extension(caller): Extension<Caller>) -> Answer<Response> {
    let list = app
        .core
        .call(move |c| {
            let mut out: Vec<TenantInfo> = c
                .ledger
                .tenants()
                .list()
                .filter(|t| caller.tenant().is_none_or(|mine| mine == t.name))
                .map(|t| TenantInfo { tenant: t.clone(), gpus_in_use: 0, jobs_active: 0, jobs_queued: 0 })
                .collect();
            for (_, j) in c.ledger.jobs().iter() {
                let Some(info) = out.iter_mut().find(|i| j.spec.tenant.as_deref() == Some(i.tenant.name.as_str()))
                else {
                    continue;
                };
                if j.status.is_active() {
                    info.jobs_active += 1;
                    info.gpus_in_use += j.hosts.iter().map(|h| u64::from(h.1)).sum::<u64>();
                } else if j.status == JobStatus::Queued {
                    info.jobs_queued += 1;
                }
            }
            out
        })
        .await?;
    Ok(Json(list).into_response())
}

async fn set_tenant(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> Answer<Response> {
    let t: crate::tenants::Tenant = parse(body, "tenant {\"name\", \"gpus\", \"borrow_limit\"?, \"weight\"?}")?;
    let t2 = t.clone();
    app.core.call(move |c| c.set_tenant(t2)).await??;
    Ok((StatusCode::OK, Json(t)).into_response())
}

/// `POST /v1/tenants/{name}/tokens`.
#[derive(Debug, Default, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueRequest {
    /// The token is refused this long after it is issued, s (never, if left out).
    #[serde(default)]
    #[schemars(range(min = 1, max = 3.2e9))]
    pub expires_in_s: Option<f64>,
}

/// Its answer: the secret, once.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct Issued {
    /// The secret: `Authorization: Bearer TOKEN`.
    pub token: String,
    /// Its public record.
    pub info: crate::tenants::TokenInfo,
}

async fn issue_token(
    State(app): State<App>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let empty = body.as_ref().is_ok_and(|b| b.is_empty());
    let req: IssueRequest =
        if empty { IssueRequest::default() } else { parse(body, "token request {\"expires_in_s\"?}")? };
    let expires = req.expires_in_s.map(|s| crate::core::unix_ms() + (s * 1e3) as i64);
    let (token, info) = app.core.call(move |c| c.issue_token(&name, expires)).await??;
    Ok((StatusCode::CREATED, Json(Issued { token, info })).into_response())
}

async fn list_tokens(State(app): State<App>, Path(name): Path<String>) -> Answer<Response> {
    let list = app
        .core
        .call(move |c| {
            if c.ledger.tenants().get(&name).is_none() {
                return Err(Failure::NotFound(format!("no tenant {name:?}")));
            }
            Ok(c.ledger.tenants().tokens_of(&name).cloned().collect::<Vec<_>>())
        })
        .await??;
    Ok(Json(list).into_response())
}

async fn revoke_token(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let info = app.core.call(move |c| c.revoke_token(&id)).await??;
    Ok(Json(info).into_response())
}
