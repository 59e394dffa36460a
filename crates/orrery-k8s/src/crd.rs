//! Metronome's four custom resources (Metronome §III-A, Table II), defined
//! once here: the CRD YAML (`orrery k8s crds`, `deploy/crds/`) is generated
//! from these types, and the API server checks the numeric ranges given in
//! the schema before orrery sees an object. What a schema cannot say (an
//! AppGroup's dependency cycle, a node listed in two racks) is checked by
//! [`validate_app_group`] and [`validate_topology`], and the controller writes
//! the reason into the object's status.
//!
//! | paper (Table II) | field here |
//! |---|---|
//! | `NodeBandwidth.spec.bandwidth` (B_l) | `NodeBandwidth.spec.bandwidthGbps` |
//! | `NodeBandwidth.status.pods` (P̄_l(n)) | `NodeBandwidth.status.pods` |
//! | `PodBandwidth.spec.period` (t_p) | `PodBandwidth.spec.periodMs` |
//! | `PodBandwidth.spec.duty_cycle` (d_p) | `PodBandwidth.spec.dutyCycle` |
//! | `PodBandwidth.spec.bandwidth` (r_p^BW) | `PodBandwidth.spec.bandwidthGbps` |
//! | `NetworkTopology.spec.weights…costList` (τ) | `NetworkTopology.spec.racks`, `spines`: τ is the hop latency of the fabric they describe |
//! | `AppGroup.spec.workloads` (ν_w) | `AppGroup.spec.workloads` (jobs by their `orrery.io/job` label, with dependencies) |
//!
//! Units are in the field names. Metronome reuses Diktyo's AppGroup and a
//! modified NetworkTopology; these are orrery's simplified versions: workloads
//! are named by job rather than by Kubernetes workload reference, and the
//! topology is the leaf-spine itself rather than a table of costs.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// API group of orrery's resources.
pub const GROUP: &str = "orrery.io";

/// A node's bandwidth (cluster-scoped, named after the node).
#[allow(clippy::duplicated_attributes)] // two printcolumns
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "orrery.io",
    version = "v1alpha1",
    kind = "NodeBandwidth",
    plural = "nodebandwidths",
    shortname = "nbw",
    status = "NodeBandwidthStatus",
    doc = "A node's network bandwidth (Metronome's NodeBandwidth): what the scheduler may plan on, and the pods using it",
    printcolumn(name = "Gbps", type_ = "number", json_path = ".spec.bandwidthGbps"),
    printcolumn(name = "Used", type_ = "number", json_path = ".status.usedGbps")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeBandwidthSpec {
    /// Bandwidth of the node's link to its leaf, Gbit/s: its NIC's speed by
    /// default, lower to reserve some for other traffic (B_l(n)).
    #[schemars(range(min = 0.001, max = 100000.0))]
    pub bandwidth_gbps: f64,
}

/// What the controller observed on a node.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeBandwidthStatus {
    /// Communicating pods placed on the node (P̄_l(n)).
    #[serde(default)]
    pub pods: Vec<PodOnNode>,
    /// Sum of their declared bandwidth, Gbit/s (may exceed the node's: the
    /// pods share it in time).
    #[serde(default)]
    pub used_gbps: f64,
}

/// A pod on a node, as NodeBandwidth's status lists it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOnNode {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Its job (`orrery.io/job`).
    pub job: String,
    /// Its declared bandwidth, Gbit/s (0 without a PodBandwidth).
    pub bandwidth_gbps: f64,
}

/// A job's communication pattern (namespaced): the two-dimensional bandwidth
/// of each of its pods.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "orrery.io",
    version = "v1alpha1",
    kind = "PodBandwidth",
    plural = "podbandwidths",
    shortname = "pbw",
    namespaced,
    doc = "The two-dimensional bandwidth of a job's pods (Metronome's PodBandwidth): period, duty cycle and rate"
)]
#[serde(rename_all = "camelCase")]
pub struct PodBandwidthSpec {
    /// The job whose pods this describes (their `orrery.io/job` label).
    #[schemars(length(min = 1, max = 253))]
    pub job: String,
    /// Iteration period t_p, ms.
    #[schemars(range(min = 0.001, max = 86400000.0))]
    pub period_ms: f64,
    /// Share of the period spent communicating, d_p.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub duty_cycle: f64,
    /// Rate while communicating, r_p^BW, Gbit/s.
    #[schemars(range(min = 0.0, max = 100000.0))]
    pub bandwidth_gbps: f64,
}

/// Jobs that depend on each other (namespaced): a job is scheduled only
/// after the jobs it depends on (Diktyo's topological order).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "orrery.io",
    version = "v1alpha1",
    kind = "AppGroup",
    plural = "appgroups",
    namespaced,
    status = "AppGroupStatus",
    doc = "Jobs of one application and their dependencies (Diktyo's AppGroup, as Metronome uses it)"
)]
#[serde(rename_all = "camelCase")]
pub struct AppGroupSpec {
    /// The group's jobs.
    #[schemars(length(min = 1, max = 1000))]
    pub workloads: Vec<Workload>,
}

/// One job of an AppGroup.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// The job (its pods' `orrery.io/job` label).
    #[schemars(length(min = 1, max = 253))]
    pub job: String,
    /// Jobs of the group that must be placed first.
    #[serde(default)]
    pub dependencies: Vec<String>,
}

/// An AppGroup as the controller read it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppGroupStatus {
    /// Whether orrery follows it.
    pub accepted: bool,
    /// Why not, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The order jobs are submitted in (dependencies first).
    #[serde(default)]
    pub topology_order: Vec<String>,
}

/// The cluster's leaf-spine fabric (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[kube(
    group = "orrery.io",
    version = "v1alpha1",
    kind = "NetworkTopology",
    plural = "networktopologies",
    shortname = "ntp",
    status = "NetworkTopologyStatus",
    doc = "The cluster's leaf-spine network: which nodes share a rack, and the spines above (Metronome's NetworkTopology)"
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// Racks, each under one leaf switch.
    #[schemars(length(min = 1, max = 4096))]
    pub racks: Vec<Rack>,
    /// Spine switches; every leaf connects to every spine.
    #[schemars(range(min = 1, max = 64))]
    pub spines: u32,
    /// A node's link to its leaf, Gbit/s, where no NodeBandwidth says otherwise.
    #[schemars(range(min = 0.001, max = 100000.0))]
    pub node_gbps: f64,
    /// Each leaf-to-spine link, Gbit/s.
    #[schemars(range(min = 0.001, max = 100000.0))]
    pub uplink_gbps: f64,
}

/// One rack.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rack {
    /// Leaf switch name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Kubernetes node names in the rack.
    #[schemars(length(min = 1, max = 1024))]
    pub nodes: Vec<String>,
}

/// A NetworkTopology as the service read it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologyStatus {
    /// Whether the service runs on it.
    pub accepted: bool,
    /// Why not, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Nodes the service schedules on.
    #[serde(default)]
    pub hosts: u32,
    /// Their GPUs.
    #[serde(default)]
    pub gpus: u32,
}

/// Why a resource was refused: which field, what was expected, what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind} {name}: {field}: expected {expected}, found {found}")]
pub struct Invalid {
    /// Resource kind.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// Field path.
    pub field: String,
    /// What it must be.
    pub expected: String,
    /// What it was.
    pub found: String,
}

/// The ranges the schema declares on `spec`'s fields, checked again
/// (objects can reach orrery through files or an API server that skipped
/// validation) by [`orrery_model::ranges`], the check every input of
/// orrery shares.
fn in_range<T: Serialize + JsonSchema + 'static>(kind: &'static str, name: &str, spec: &T) -> Result<(), Invalid> {
    orrery_model::ranges::check(spec).map_err(|e| Invalid {
        kind,
        name: name.into(),
        field: format!("spec.{}", e.path),
        expected: e.expected,
        found: e.found,
    })
}

/// The schema's ranges, checked again.
pub fn validate_node_bandwidth(name: &str, s: &NodeBandwidthSpec) -> Result<(), Invalid> {
    in_range("NodeBandwidth", name, s)
}

/// The schema's ranges, checked again.
pub fn validate_pod_bandwidth(name: &str, s: &PodBandwidthSpec) -> Result<(), Invalid> {
    in_range("PodBandwidth", name, s)
}

/// Kahn's topological sort of an AppGroup (Diktyo's TopologicalSort):
/// dependencies first, ties by name. Refuses a dependency on a job outside
/// the group, a job listed twice, and a cycle (naming its jobs). O(V + E).
pub fn validate_app_group(name: &str, s: &AppGroupSpec) -> Result<Vec<String>, Invalid> {
    let invalid = |field: String, expected: &str, found: String| Invalid {
        kind: "AppGroup",
        name: name.into(),
        field,
        expected: expected.into(),
        found,
    };
    let mut deps: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (i, w) in s.workloads.iter().enumerate() {
        if deps.insert(w.job.as_str(), BTreeSet::new()).is_some() {
            return Err(invalid(format!("spec.workloads[{i}].job"), "a job listed once", w.job.clone()));
        }
    }
    for (i, w) in s.workloads.iter().enumerate() {
        for (k, d) in w.dependencies.iter().enumerate() {
            if !deps.contains_key(d.as_str()) || d == &w.job {
                return Err(invalid(
                    format!("spec.workloads[{i}].dependencies[{k}]"),
                    "another job of this AppGroup",
                    d.clone(),
                ));
            }
            deps.entry(w.job.as_str()).or_default().insert(d.as_str());
        }
    }
    let mut order = Vec::with_capacity(deps.len());
    let mut remaining = deps.clone();
    loop {
        let ready: Vec<&str> = remaining.iter().filter(|(_, d)| d.is_empty()).map(|(j, _)| *j).collect();
        if ready.is_empty() {
            break;
        }
        for j in &ready {
            remaining.remove(j);
            order.push(j.to_string());
        }
        for d in remaining.values_mut() {
            for j in &ready {
                d.remove(j);
            }
        }
    }
    if !remaining.is_empty() {
        let cycle: Vec<&str> = remaining.keys().copied().collect();
        return Err(invalid(
            "spec.workloads".into(),
            "dependencies without a cycle",
            format!("a cycle among {cycle:?}"),
        ));
    }
    Ok(order)
}

/// Checks a NetworkTopology: the schema's ranges, every node in one rack.
pub fn validate_topology(name: &str, s: &NetworkTopologySpec) -> Result<(), Invalid> {
    in_range("NetworkTopology", name, s)?;
    let invalid = |field: String, expected: &str, found: String| Invalid {
        kind: "NetworkTopology",
        name: name.into(),
        field,
        expected: expected.into(),
        found,
    };
    if s.racks.is_empty() {
        return Err(invalid("spec.racks".into(), "at least one rack", "none".into()));
    }
    if s.spines == 0 && s.racks.len() > 1 {
        return Err(invalid("spec.spines".into(), "at least 1 spine for several racks", "0".into()));
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (r, rack) in s.racks.iter().enumerate() {
        if rack.nodes.is_empty() {
            return Err(invalid(format!("spec.racks[{r}].nodes"), "at least one node", "none".into()));
        }
        for (i, n) in rack.nodes.iter().enumerate() {
            if let Some(other) = seen.insert(n.as_str(), r) {
                return Err(invalid(
                    format!("spec.racks[{r}].nodes[{i}]"),
                    "a node in one rack only",
                    format!("{n:?}, also in spec.racks[{other}]"),
                ));
            }
        }
    }
    Ok(())
}

/// The four CRDs.
pub fn definitions() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![NodeBandwidth::crd(), PodBandwidth::crd(), AppGroup::crd(), NetworkTopology::crd()]
}

/// Each CRD as YAML, with the file name `deploy/crds/` keeps it under.
pub fn definitions_yaml() -> Vec<(String, String)> {
    definitions()
        .into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.spec.names.plural);
            let body = serde_yaml_ng::to_string(&crd).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
            (file, format!("# Generated by `orrery k8s crds`; do not edit.\n{body}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(job: &str, deps: &[&str]) -> Workload {
        Workload { job: job.into(), dependencies: deps.iter().map(|d| d.to_string()).collect() }
    }

    #[test]
    fn an_app_group_is_ordered_dependencies_first() {
        let g = AppGroupSpec {
            workloads: vec![workload("trainer", &["ps", "loader"]), workload("ps", &[]), workload("loader", &["ps"])],
        };
        assert_eq!(validate_app_group("g", &g), Ok(vec!["ps".into(), "loader".into(), "trainer".into()]));
    }

    #[test]
    fn a_cycle_is_refused_naming_its_jobs() {
        let g = AppGroupSpec {
            workloads: vec![workload("a", &["c"]), workload("b", &["a"]), workload("c", &["b"]), workload("d", &[])],
        };
        let e = validate_app_group("ring", &g).expect_err("a cycle");
        assert_eq!(e.field, "spec.workloads");
        assert_eq!(e.found, r#"a cycle among ["a", "b", "c"]"#);
        let unknown = AppGroupSpec { workloads: vec![workload("a", &["zz"])] };
        let e = validate_app_group("g", &unknown).expect_err("unknown dependency");
        assert_eq!(e.field, "spec.workloads[0].dependencies[0]");
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_the_field() {
        let e = validate_node_bandwidth("n1", &NodeBandwidthSpec { bandwidth_gbps: -25.0 }).expect_err("negative");
        assert_eq!(
            e.to_string(),
            "NodeBandwidth n1: spec.bandwidthGbps: expected a number from 0.001 to 100000, found -25.0"
        );
        let pb = PodBandwidthSpec { job: "j".into(), period_ms: 100.0, duty_cycle: 1.5, bandwidth_gbps: 10.0 };
        assert_eq!(validate_pod_bandwidth("p", &pb).expect_err("duty").field, "spec.dutyCycle");
        let pb = PodBandwidthSpec { period_ms: f64::NAN, duty_cycle: 0.5, ..pb };
        assert_eq!(validate_pod_bandwidth("p", &pb).expect_err("nan").field, "spec.periodMs");
    }

    #[test]
    fn the_schema_carries_the_ranges_the_api_server_enforces() {
        let yaml = definitions_yaml();
        let nbw = &yaml.iter().find(|(f, _)| f == "nodebandwidths.yaml").expect("file").1;
        let v: serde_json::Value = serde_yaml_ng::from_str(nbw).expect("yaml");
        let props = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(props["bandwidthGbps"]["minimum"], serde_json::json!(0.001));
        let topo = NetworkTopologySpec {
            racks: vec![
                Rack { name: "r0".into(), nodes: vec!["a".into(), "b".into()] },
                Rack { name: "r1".into(), nodes: vec!["b".into()] },
            ],
            spines: 1,
            node_gbps: 25.0,
            uplink_gbps: 25.0,
        };
        assert_eq!(validate_topology("t", &topo).expect_err("twice").field, "spec.racks[1].nodes[0]");
    }
}
