//! `orrery k8s`: orrery inside a Kubernetes cluster (see `deploy/` and the
//! docs/guide/kubernetes.md).

use anyhow::{Context, Result, bail};
use clap::{Args as ClapArgs, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// `orrery k8s` subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the four CRDs (NodeBandwidth, PodBandwidth, AppGroup,
    /// NetworkTopology) as YAML, or write one file each with --out.
    Crds {
        /// Folder to write `<plural>.yaml` files into (as `deploy/crds/`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The service, the scheduler extender and the controller in one process
    /// (the Deployment of `deploy/orrery.yaml`); the API server is found as
    /// kubectl finds it (in-cluster service account, or KUBECONFIG).
    Run(Box<RunArgs>),
}

/// Flags of `orrery k8s run`.
#[derive(ClapArgs, Debug)]
pub struct RunArgs {
    /// The NetworkTopology object describing the cluster's racks and spines.
    #[arg(long, default_value = "default")]
    topology: String,
    /// Scheduling policy: any name `orrery policies` lists.
    #[arg(long, default_value = "metronome")]
    policy: String,
    /// Seed of the policy's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The service's API, for node agents and users.
    #[arg(long, default_value = "0.0.0.0:7400")]
    listen: SocketAddr,
    /// The extender's address (kube-scheduler's `urlPrefix` points here).
    #[arg(long, default_value = "0.0.0.0:8888")]
    extender_listen: SocketAddr,
    /// Directory for the database and the token files.
    #[arg(long, default_value = "/var/lib/orrery")]
    data: PathBuf,
    /// A gang whose pods have not all reached bind this long after the first
    /// releases what it held, s (keep below the extender's httpTimeout).
    #[arg(long, default_value_t = 20.0, value_parser = crate::numbers::positive)]
    group_timeout_s: f64,
    /// A node whose agent is silent this long is marked down and its jobs re-queued, s.
    #[arg(long, default_value_t = 30.0, value_parser = crate::numbers::positive)]
    node_timeout_s: f64,
    /// HTTPS for the service's API and the extender alike.
    #[command(flatten)]
    tls: crate::live::TlsArgs,
}

/// Runs a `k8s` subcommand.
pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Crds { out } => crds(out.as_deref()),
        Command::Run(args) => serve(args),
    }
}

fn crds(out: Option<&std::path::Path>) -> Result<()> {
    let files = orrery_k8s::crd::definitions_yaml();
    match out {
        None => {
            let all: Vec<String> = files.into_iter().map(|(_, body)| body).collect();
            print!("{}", all.join("---\n"));
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, body) in files {
                let path = dir.join(&name);
                orrery_testbed::compare::write_atomic(&path, &body)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

fn serve(args: &RunArgs) -> Result<()> {
    crate::live::init_logs();
    for (flag, v) in [("--group-timeout-s", args.group_timeout_s), ("--node-timeout-s", args.node_timeout_s)] {
        if !(v.is_finite() && v > 0.0 && v < 86_400.0) {
            bail!("{flag}: expected a positive number of seconds below a day, found {v}");
        }
    }
    if orrery_policy::by_name(&args.policy, args.seed).is_none() {
        bail!("--policy: unknown policy {:?} (see `orrery policies`)", args.policy);
    }
    let tls = args.tls.server_config(&[("--listen", args.listen), ("--extender-listen", args.extender_listen)])?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    crate::live::runtime()?.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("finding the Kubernetes API server (in-cluster service account or KUBECONFIG)")?;
        let opts = orrery_k8s::run::Options {
            topology: args.topology.clone(),
            policy: args.policy.clone(),
            seed: args.seed,
            listen: args.listen,
            extender_listen: args.extender_listen,
            data_dir: args.data.clone(),
            group_timeout: std::time::Duration::from_secs_f64(args.group_timeout_s),
            node_timeout_s: args.node_timeout_s,
            tls,
        };
        let running = orrery_k8s::run::start(client, opts).await?;
        tracing::info!(
            "orrery on Kubernetes: service {scheme}://{}, extender {scheme}://{} (policy {})",
            running.service.addr,
            running.extender_addr,
            args.policy
        );
        orrery_serve::shutdown_signal().await;
        tracing::info!("stopping");
        running.stop();
        Ok(())
    })
}
