//! `orrery bench serve`: durable submissions per second over real HTTP on
//! loopback, with every job committed (SQLite with synchronous=FULL, or a
//! quorum of etcd members) before its answer, and the decisions the policy
//! commits meanwhile.

use crate::api::{LogEntry, Logged, RegisterRequest};
use crate::client::Client;
use anyhow::{Context, Result};
use orrery_model::{JobSpec, Topology};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Jobs to submit (taken in order, ids made unique).
    pub jobs: Vec<JobSpec>,
    /// Requests in flight.
    pub concurrency: usize,
    /// Policy.
    pub policy: String,
    /// Cluster (every host is registered before the run).
    pub topology: Topology,
    /// Where the database goes (a fresh directory).
    pub data_dir: std::path::PathBuf,
    /// Run the service as a replica on etcd instead of on SQLite (it is
    /// measured once it leads).
    pub ha: Option<crate::HaOptions>,
    /// Serve HTTPS (a test CA's certificate, [`crate::tls::make_test_certs`]).
    pub tls: bool,
}

/// What was measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    /// Jobs submitted and acknowledged.
    pub jobs: usize,
    /// Wall time of the submissions, s.
    pub seconds: f64,
    /// Durable submissions per second.
    pub submissions_per_s: f64,
    /// Submit latency percentiles, ms.
    pub latency_ms_p50: f64,
    /// 99th percentile.
    pub latency_ms_p99: f64,
    /// Policy decisions committed during the run.
    pub decisions: usize,
    /// Of which placements.
    pub placements: usize,
    /// Policy calls (`schedule`, `on_iteration`) during the run.
    pub policy_calls: u64,
    /// Their mean time, ms: what one decision costs the policy. (Decisions
    /// logged per second of the run are bounded by the submissions, not by
    /// the policy: with FIFO each job is one placement.)
    pub policy_call_ms_mean: f64,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs the benchmark (call in a multi-threaded tokio runtime).
pub async fn run(opts: BenchOptions) -> Result<BenchReport> {
    let config = crate::core::Config {
        policy: opts.policy.clone(),
        seed: 1,
        topology: opts.topology.clone(),
        node_timeout_s: 3600.0,
        heartbeat_s: 1.0,
        fair_share_half_life_s: None,
        keep_finished_s: f64::INFINITY,
        flow_sharing: Default::default(),
        pins: Default::default(),
    };
    let certs = match opts.tls {
        true => Some(crate::tls::make_test_certs(&opts.data_dir.join("tls"), &[])?),
        false => None,
    };
    let tls = certs.as_ref().map(|c| crate::tls::server_config(&c.cert, &c.key)).transpose()?;
    let ca = certs.as_ref().map(|c| c.ca.as_path());
    let scheme = if opts.tls { "https" } else { "http" };
    let serve = crate::ServeOptions {
        config,
        listen: "127.0.0.1:0".parse().context("address")?,
        data_dir: opts.data_dir.clone(),
        ha: opts.ha.clone(),
        tls,
    };
    // The service runs in this process: alone on SQLite, or as the one
    // replica on etcd (which leads within a moment of starting).
    let (addr, _service) = match opts.ha {
        None => {
            let running = crate::start(serve).await?;
            (running.addr, Some(running))
        }
        Some(_) => {
            let replica = crate::start_replica(serve).await?;
            let ready = format!("{scheme}://localhost:{}/v1/readyz", replica.addr.port());
            let probe = crate::tls::client_builder(ca)?.build()?;
            let t = Instant::now();
            while !probe.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
                anyhow::ensure!(t.elapsed() < Duration::from_secs(20), "the replica did not lead within 20 s");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (replica.addr, None)
        }
    };
    // By name: the test certificate is for localhost and 127.0.0.1.
    let url = format!("{scheme}://localhost:{}", addr.port());
    let read = |f: &str| crate::auth::read_token(&opts.data_dir.join(f));
    let (user, agent) = (read("user.token")?, read("agent.token")?);
    let err = |e: crate::client::ClientError| anyhow::anyhow!("{e}");
    let agents = Client::with_ca(&url, &agent, ca).map_err(err)?;
    for (h, host) in opts.topology.hosts.iter().enumerate() {
        let req = RegisterRequest {
            name: host.name.clone(),
            gpus: host.gpus,
            nic_gbps: opts.topology.host_nic_gbps(h),
            data_addr: None,
        };
        agents.register(&req).await.map_err(err)?;
    }
    let client = Client::with_ca(&url, &user, ca).map_err(err)?;
    let start_seq = client.cluster().await.map_err(err)?.last_seq;
    let jobs: Arc<Vec<JobSpec>> = Arc::new(opts.jobs);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Each submitter opens its connection (a TLS handshake with --tls)
    // before the clock starts: the run measures submissions, not the
    // set-up of `concurrency` connections (64 handshakes were a fifth of a
    // 5,000-job run over TLS).
    let ready = Arc::new(tokio::sync::Barrier::new(opts.concurrency.max(1) + 1));
    let mut tasks = Vec::new();
    for _ in 0..opts.concurrency.max(1) {
        let (client, jobs, next, ready) = (client.clone(), jobs.clone(), next.clone(), ready.clone());
        tasks.push(tokio::spawn(async move {
            let warm = client.cluster().await.map(|_| ()).map_err(|e| anyhow::anyhow!("warming up: {e}"));
            ready.wait().await;
            warm?;
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(spec) = jobs.get(i) else { break };
                let t = Instant::now();
                client.submit(spec).await.map_err(|e| anyhow::anyhow!("job {}: {e}", spec.id))?;
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
            anyhow::Ok(latencies)
        }));
    }
    ready.wait().await;
    let t0 = Instant::now();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let seconds = t0.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    // Decisions committed while the submissions ran (the last ones may
    // still be on their way: wait a moment for the core to settle).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log: Vec<LogEntry> = client.decisions(start_seq).await.map_err(err)?;
    let decisions: Vec<&LogEntry> = log.iter().filter(|e| e.source == "policy").collect();
    let placements =
        decisions.iter().filter(|e| matches!(e.entry, Logged::Decision(orrery_policy::Decision::Place { .. }))).count();
    // The policy's own time, from the service's histogram.
    let text = crate::tls::client_builder(ca)?
        .build()?
        .get(format!("{url}/metrics"))
        .bearer_auth(&user)
        .send()
        .await
        .context("reading /metrics")?
        .text()
        .await
        .context("reading /metrics")?;
    let metric = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let (calls, call_s) = (metric("orrery_decision_seconds_count"), metric("orrery_decision_seconds_sum"));
    Ok(BenchReport {
        jobs: latencies.len(),
        seconds,
        submissions_per_s: latencies.len() as f64 / seconds,
        latency_ms_p50: percentile(&latencies, 0.5),
        latency_ms_p99: percentile(&latencies, 0.99),
        decisions: decisions.len(),
        placements,
        policy_calls: calls as u64,
        policy_call_ms_mean: if calls > 0.0 { call_s / calls * 1e3 } else { 0.0 },
    })
}
