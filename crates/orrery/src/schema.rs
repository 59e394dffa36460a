//! `orrery schema`: the JSON Schema of every input orrery reads, with the
//! range each number must lie in ([`orrery_model::ranges`]).

use orrery_model::ranges::schema_of;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The input: one of `orrery schema --list`.
    input: Option<String>,
    /// List the inputs, one a line: the name, then where orrery reads it.
    #[arg(long, conflicts_with = "input")]
    list: bool,
}

/// An input: its name, where orrery reads it, and its schema.
type Input = (&'static str, &'static str, fn() -> Value);

/// Every input orrery reads from a user or another process: (name, where
/// it is read, its schema). A new file format or API body joins this list;
/// `crates/orrery/tests/ranges.rs` checks every number of each has a range.
fn inputs() -> Vec<Input> {
    vec![
        (
            "job",
            "a job: a JSONL line, [[workload.job]], POST /v1/jobs, the extender",
            schema_of::<orrery_model::JobSpec>,
        ),
        ("experiment", "an experiment file (orrery run)", schema_of::<orrery_lab::spec::Experiment>),
        (
            "topology",
            "a topology file (orrery topo show, [topology] file)",
            schema_of::<orrery_model::setups::TopologyFile>,
        ),
        ("compat", "a compatibility request (orrery compat)", schema_of::<orrery_interleave::compat::Request>),
        ("register", "POST /v1/nodes/register", schema_of::<orrery_serve::api::RegisterRequest>),
        ("heartbeat", "POST /v1/nodes/{host}/heartbeat", schema_of::<orrery_serve::api::Heartbeat>),
        ("reports", "POST /v1/nodes/{host}/reports", schema_of::<orrery_serve::api::Reports>),
        ("restarts", "POST /v1/nodes/{host}/restarts", schema_of::<orrery_serve::api::RestartRequest>),
        (
            "process-report",
            "a training process's report to its node agent (a line of its socket, op = report)",
            schema_of::<orrery_serve::node_agent::ProcessReport>,
        ),
        (
            "psim-placement",
            "an entry of psim's placement file (orrery import psim)",
            schema_of::<orrery_lab::psim::PsimJob>,
        ),
        (
            "psim-timing",
            "an entry of psim's timing file (orrery import psim)",
            schema_of::<orrery_lab::psim::PsimTiming>,
        ),
        (
            "psim-routing",
            "an entry of psim's routing file (orrery import psim)",
            schema_of::<orrery_lab::psim::PsimRoute>,
        ),
        ("node-bandwidth", "the NodeBandwidth CRD's spec", schema_of::<orrery_k8s::crd::NodeBandwidthSpec>),
        ("pod-bandwidth", "the PodBandwidth CRD's spec", schema_of::<orrery_k8s::crd::PodBandwidthSpec>),
        ("network-topology", "the NetworkTopology CRD's spec", schema_of::<orrery_k8s::crd::NetworkTopologySpec>),
    ]
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let all = inputs();
    let names = || all.iter().map(|i| i.0).collect::<Vec<_>>().join(", ");
    if a.list {
        for (name, place, _) in &all {
            println!("{name:<17} {place}");
        }
        return Ok(());
    }
    let Some(input) = &a.input else { anyhow::bail!("which input? one of {} (or --list)", names()) };
    let Some((_, _, schema)) = all.iter().find(|i| i.0 == input) else {
        anyhow::bail!("no input named {input:?}; expected one of {}", names())
    };
    println!("{}", serde_json::to_string_pretty(&schema())?);
    Ok(())
}
