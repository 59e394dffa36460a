//! `orrery k8s run`: the service, the extender and the controller in one
//! process, on the cluster the API server describes.

use crate::crd::{NetworkTopology, NetworkTopologyStatus, NodeBandwidth, NodeBandwidthSpec};
use crate::extender::Shared;
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How `orrery k8s run` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The NetworkTopology object to schedule on.
    pub topology: String,
    /// Policy (any of `orrery policies`).
    pub policy: String,
    /// Seed of the policy's randomness.
    pub seed: u64,
    /// The service's API (node agents, users).
    pub listen: SocketAddr,
    /// The extender's address.
    pub extender_listen: SocketAddr,
    /// Database and token directory.
    pub data_dir: PathBuf,
    /// Gang time-out at bind.
    pub group_timeout: Duration,
    /// A node whose agent is silent this long is marked down, s.
    pub node_timeout_s: f64,
    /// HTTPS for the service's API and the extender; None: HTTP.
    pub tls: Option<std::sync::Arc<orrery_serve::tls::ServerConfig>>,
}

/// What is running.
pub struct Running {
    /// The service (its API address and core handle).
    pub service: orrery_serve::Running,
    /// Where the extender listens.
    pub extender_addr: SocketAddr,
    /// Shared state of extender and controller.
    pub shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops the extender, the controller and the service.
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
        self.service.stop();
    }
}

/// Reads the cluster from the API server and builds orrery's topology.
pub async fn read_topology(client: &kube::Client, name: &str) -> Result<orrery_model::Topology> {
    let topologies: Api<NetworkTopology> = Api::all(client.clone());
    let nt = topologies.get(name).await.with_context(|| format!("reading NetworkTopology {name:?}"))?;
    let nodes: Vec<Node> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let bandwidths: BTreeMap<String, NodeBandwidthSpec> = Api::<NodeBandwidth>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|nb| Some((nb.metadata.name?, nb.spec)))
        .collect();
    let built = crate::fabric::build(name, &nt.spec, &nodes, &bandwidths);
    let status = match &built {
        Ok(t) => {
            NetworkTopologyStatus { accepted: true, reason: None, hosts: t.hosts.len() as u32, gpus: t.gpu_count() }
        }
        Err(e) => NetworkTopologyStatus { accepted: false, reason: Some(e.to_string()), hosts: 0, gpus: 0 },
    };
    let patch = serde_json::json!({ "status": status });
    if let Err(e) = topologies.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::warn!("writing NetworkTopology {name} status: {e}");
    }
    Ok(built?)
}

/// Starts everything (in a tokio runtime).
pub async fn start(client: kube::Client, opts: Options) -> Result<Running> {
    let topology = read_topology(&client, &opts.topology).await?;
    tracing::info!(hosts = topology.hosts.len(), gpus = topology.gpu_count(), "topology {}", opts.topology);
    let config = orrery_serve::core::Config {
        policy: opts.policy.clone(),
        seed: opts.seed,
        topology,
        node_timeout_s: opts.node_timeout_s,
        heartbeat_s: (opts.node_timeout_s / 4.0).clamp(0.1, 5.0),
        fair_share_half_life_s: None,
        keep_finished_s: f64::INFINITY,
        flow_sharing: Default::default(),
        pins: BTreeMap::new(),
    };
    let service = orrery_serve::start(orrery_serve::ServeOptions {
        config,
        listen: opts.listen,
        data_dir: opts.data_dir.clone(),
        ha: None,
        tls: opts.tls.clone(),
    })
    .await?;
    let shared = Shared::new(service.handle.clone(), client, opts.policy.clone(), opts.group_timeout);
    let listener = tokio::net::TcpListener::bind(opts.extender_listen)
        .await
        .with_context(|| format!("listening on {}", opts.extender_listen))?;
    let extender_addr = listener.local_addr()?;
    let app = crate::extender::router(shared.clone());
    let tls = opts.tls.clone();
    let extender = tokio::spawn(async move {
        if let Err(e) = orrery_serve::serve_on(listener, app, tls).await {
            tracing::error!("extender stopped: {e}");
        }
    });
    let controller = tokio::spawn(crate::controller::run(shared.clone()));
    Ok(Running { service, extender_addr, shared, tasks: vec![extender, controller] })
}
