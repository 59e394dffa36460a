//! An HTTP client of the API, for the CLI (`orrery submit`, `jobs`, ...) and
//! the node agents.

use crate::api::{
    ApiError, Assignments, AssignmentsPoll, ClusterInfo, Heartbeat, JobInfo, LogEntry, NodeInfo, RegisterRequest,
    Registered, Reports, ReportsAccepted, Submitted,
};
use orrery_model::JobSpec;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// What can go wrong talking to the service.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service answered with an error.
    #[error("{status}: {}{}", .error.error, .error.expected.as_ref().map(|e| format!(" (expected {e})")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: u16,
        /// Its JSON body.
        error: ApiError,
    },
    /// No answer (connection refused, time-out, bad body).
    #[error("{0}")]
    Transport(String),
}

impl ClientError {
    /// The HTTP status, when the service answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::Transport(_) => None,
        }
    }
}

/// An error with its causes (reqwest's own message leaves out the one a
/// user needs: "Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

impl ClientError {
    /// Whether the service could not be reached at all (no answer), as
    /// opposed to an answer refusing the request.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Transport(_))
    }
}

/// A URL's path and query, to resend a request to another replica.
fn path_and_query(url: &reqwest::Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// The header in which a standby replica names the leader's URL.
pub const LEADER_HEADER: &str = "x-orrery-leader";

/// How long a client of several replicas keeps looking for the leader
/// before it reports the service unreachable: a failover takes about one
/// lease (3 s by default) plus the time the new leader rebuilds its state.
pub const FAILOVER_WINDOW: Duration = Duration::from_secs(30);

/// A client bound to a service (one address, or the replicas of a highly
/// available one) and a token.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    /// The addresses given, in order.
    bases: std::sync::Arc<Vec<String>>,
    /// The one in use: the last that answered as the leader.
    base: std::sync::Arc<std::sync::RwLock<String>>,
    token: String,
}

type Answer<T> = Result<T, ClientError>;

/// Log entries asked for per request.
pub const DECISIONS_PAGE: usize = 10_000;

impl Client {
    /// A client of the service at `base` (e.g. `http://127.0.0.1:7400`), or
    /// of the replicas at a comma-separated list of addresses. A standby's
    /// answer naming the leader ([`LEADER_HEADER`]) is followed and the
    /// request resent there; with several addresses, one that does not
    /// answer is skipped for the next, for up to [`FAILOVER_WINDOW`]. Every
    /// request the API has is safe to resend: submissions are idempotent on
    /// the spec's id, reports on (job, epoch, iteration).
    pub fn new(base: &str, token: &str) -> Answer<Client> {
        Client::with_ca(base, token, None)
    }

    /// [`Client::new`] of a service on HTTPS whose certificate `ca` signed
    /// (PEM; None: plain HTTP, or HTTPS without a CA of its own).
    pub fn with_ca(base: &str, token: &str, ca: Option<&std::path::Path>) -> Answer<Client> {
        let http = crate::tls::client_builder(ca)
            .map_err(|e| ClientError::Transport(format!("{e:#}")))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let bases: Vec<String> =
            base.split(',').map(|b| b.trim().trim_end_matches('/').to_string()).filter(|b| !b.is_empty()).collect();
        if bases.is_empty() {
            return Err(ClientError::Transport(format!("no service address in {base:?}")));
        }
        let first = bases[0].clone();
        Ok(Client {
            http,
            bases: std::sync::Arc::new(bases),
            base: std::sync::Arc::new(std::sync::RwLock::new(first)),
            token: token.to_string(),
        })
    }

    fn base(&self) -> String {
        self.base.read().map(|b| b.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    fn set_base(&self, base: &str) {
        if let Ok(mut b) = self.base.write() {
            *b = base.trim_end_matches('/').to_string();
        }
    }

    /// The next address of the list after the one in use.
    fn rotate(&self) {
        let now = self.base();
        let i = self.bases.iter().position(|b| *b == now).map_or(0, |i| (i + 1) % self.bases.len());
        self.set_base(&self.bases[i].clone());
    }

    /// Sends a request, following the leader (see [`Client::new`]).
    async fn execute(&self, req: reqwest::RequestBuilder) -> Answer<reqwest::Response> {
        let request = req.bearer_auth(&self.token).build().map_err(|e| ClientError::Transport(chain(&e)))?;
        let several = self.bases.len() > 1;
        let deadline = std::time::Instant::now() + FAILOVER_WINDOW;
        let mut hops = 0;
        loop {
            let mut attempt =
                request.try_clone().ok_or_else(|| ClientError::Transport("request not resendable".into()))?;
            let base = self.base();
            let url = reqwest::Url::parse(&format!("{base}{}", path_and_query(attempt.url())))
                .map_err(|e| ClientError::Transport(format!("service address {base:?}: {e}")))?;
            *attempt.url_mut() = url;
            let retry_allowed = std::time::Instant::now() < deadline;
            match self.http.execute(attempt).await {
                Err(e) if several && retry_allowed => {
                    tracing::debug!("{base} did not answer ({}); trying the next replica", chain(&e));
                    self.rotate();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(ClientError::Transport(chain(&e))),
                Ok(resp)
                    if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE && retry_allowed && hops < 1000 =>
                {
                    hops += 1;
                    let leader = resp.headers().get(LEADER_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
                    match &leader {
                        Some(l) if l.trim_end_matches('/') != base => self.set_base(l),
                        // A standby that knows no leader yet, or names itself
                        // (it won and is rebuilding): wait, then ask again.
                        _ if several => self.rotate(),
                        _ => {}
                    }
                    if leader.is_none() && !several {
                        return Ok(resp);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(resp) => return Ok(resp),
            }
        }
    }

    /// Sends a request and reads its answer. With several replicas, an
    /// answer cut off mid-body (the leader stopping while it wrote it) is
    /// asked again within [`FAILOVER_WINDOW`]: every request is idempotent
    /// (a submission by its spec id).
    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Answer<T> {
        let deadline = std::time::Instant::now() + FAILOVER_WINDOW;
        let (status, body) = loop {
            let attempt = req.try_clone().ok_or_else(|| ClientError::Transport("request not resendable".into()))?;
            let resp = self.execute(attempt).await?;
            let status = resp.status();
            match resp.bytes().await {
                Ok(body) => break (status, body),
                Err(e) if self.bases.len() > 1 && std::time::Instant::now() < deadline => {
                    tracing::debug!("the answer was cut off ({}); asking again", chain(&e));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(ClientError::Transport(chain(&e))),
            }
        };
        if !status.is_success() {
            let error = serde_json::from_slice(&body).unwrap_or_else(|_| ApiError {
                error: String::from_utf8_lossy(&body).into_owned(),
                field: None,
                expected: None,
            });
            return Err(ClientError::Api { status: status.as_u16(), error });
        }
        serde_json::from_slice(&body).map_err(|e| ClientError::Transport(format!("bad answer from the service: {e}")))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// Submits a job.
    pub async fn submit(&self, spec: &JobSpec) -> Answer<Submitted> {
        self.send(self.http.post(self.url("/v1/jobs")).json(spec)).await
    }

    /// Jobs, optionally of one status.
    pub async fn jobs(&self, status: Option<&str>) -> Answer<Vec<JobInfo>> {
        let mut out: Vec<JobInfo> = Vec::new();
        loop {
            let mut q: Vec<(&str, String)> = vec![("limit", "10000".into())];
            if let Some(s) = status {
                q.push(("status", s.into()));
            }
            if let Some(last) = out.last() {
                q.push(("after", last.id.to_string()));
            }
            let page: Vec<JobInfo> = self.send(self.http.get(self.url("/v1/jobs")).query(&q)).await?;
            let done = page.len() < 10_000;
            out.extend(page);
            if done {
                return Ok(out);
            }
        }
    }

    /// One job by id or spec id.
    pub async fn job(&self, id: &str) -> Answer<JobInfo> {
        self.send(self.http.get(self.url(&format!("/v1/jobs/{}", id.replace('/', "%2F"))))).await
    }

    /// Cancels a job.
    pub async fn cancel(&self, id: &str) -> Answer<JobInfo> {
        self.send(self.http.delete(self.url(&format!("/v1/jobs/{}", id.replace('/', "%2F"))))).await
    }

    /// Nodes.
    pub async fn nodes(&self) -> Answer<Vec<NodeInfo>> {
        self.send(self.http.get(self.url("/v1/nodes"))).await
    }

    /// Cluster state.
    pub async fn cluster(&self) -> Answer<ClusterInfo> {
        self.send(self.http.get(self.url("/v1/cluster"))).await
    }

    /// Every log entry after `since`, in pages of [`DECISIONS_PAGE`].
    pub async fn decisions(&self, since: u64) -> Answer<Vec<LogEntry>> {
        let mut out: Vec<LogEntry> = Vec::new();
        loop {
            let from = out.last().map_or(since, |e| e.seq);
            let q = [("since", from), ("limit", DECISIONS_PAGE as u64)];
            let page: Vec<LogEntry> = self.send(self.http.get(self.url("/v1/decisions")).query(&q)).await?;
            let done = page.len() < DECISIONS_PAGE;
            out.extend(page);
            if done {
                return Ok(out);
            }
        }
    }

    /// Tenants (the administrators see all, a tenant its own).
    pub async fn tenants(&self) -> Answer<Vec<crate::http::TenantInfo>> {
        self.send(self.http.get(self.url("/v1/tenants"))).await
    }

    /// Makes or changes a tenant (administrators).
    pub async fn set_tenant(&self, t: &crate::tenants::Tenant) -> Answer<crate::tenants::Tenant> {
        self.send(self.http.post(self.url("/v1/tenants")).json(t)).await
    }

    /// Issues a token to a tenant (administrators); the secret is in the answer only.
    pub async fn issue_token(&self, tenant: &str, expires_in_s: Option<f64>) -> Answer<crate::http::Issued> {
        let req = crate::http::IssueRequest { expires_in_s };
        self.send(self.http.post(self.url(&format!("/v1/tenants/{tenant}/tokens"))).json(&req)).await
    }

    /// A tenant's tokens (administrators).
    pub async fn tokens(&self, tenant: &str) -> Answer<Vec<crate::tenants::TokenInfo>> {
        self.send(self.http.get(self.url(&format!("/v1/tenants/{tenant}/tokens")))).await
    }

    /// Revokes a token by id (administrators).
    pub async fn revoke_token(&self, id: &str) -> Answer<crate::tenants::TokenInfo> {
        self.send(self.http.delete(self.url(&format!("/v1/tokens/{id}")))).await
    }

    /// Registers a node.
    pub async fn register(&self, req: &RegisterRequest) -> Answer<Registered> {
        self.send(self.http.post(self.url("/v1/nodes/register")).json(req)).await
    }

    /// A heartbeat.
    pub async fn heartbeat(&self, host: usize, session: u64) -> Answer<crate::api::HeartbeatAnswer> {
        self.send(self.http.post(self.url(&format!("/v1/nodes/{host}/heartbeat"))).json(&Heartbeat { session })).await
    }

    /// Leaves: the agent stopped its processes; its jobs are re-queued now.
    pub async fn deregister(&self, host: usize, session: u64) -> Answer<()> {
        let _: serde_json::Value = self
            .send(self.http.post(self.url(&format!("/v1/nodes/{host}/deregister"))).json(&Heartbeat { session }))
            .await?;
        Ok(())
    }

    /// Long-polls a node's assignments (`poll` says what the node has
    /// applied and still stops; `ledger::handover`).
    pub async fn assignments(&self, host: usize, poll: &AssignmentsPoll) -> Answer<Assignments> {
        let stopping: Vec<String> = poll.stopping.iter().map(|j| j.to_string()).collect();
        let q = [
            ("session", poll.session.to_string()),
            ("after", poll.after.to_string()),
            ("wait_s", poll.wait_s.to_string()),
            ("stopping", stopping.join(",")),
            ("held", poll.held.to_string()),
        ];
        self.send(self.http.get(self.url(&format!("/v1/nodes/{host}/assignments"))).query(&q)).await
    }

    /// Asks for `job` to start again as a whole: this node's ranks of it on
    /// `epoch` stopped ([`crate::core::Core::restart_job`]).
    pub async fn restart_job(&self, host: usize, session: u64, job: usize, epoch: u64) -> Answer<serde_json::Value> {
        let body = crate::api::RestartRequest { session, job, epoch };
        self.send(self.http.post(self.url(&format!("/v1/nodes/{host}/restarts"))).json(&body)).await
    }

    /// Sends iteration reports.
    pub async fn reports(&self, host: usize, reports: &Reports) -> Answer<ReportsAccepted> {
        self.send(self.http.post(self.url(&format!("/v1/nodes/{host}/reports"))).json(reports)).await
    }
}
