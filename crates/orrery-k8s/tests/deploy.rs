//! The manifests in `deploy/`: each document parses into its Kubernetes type,
//! the CRDs are the ones the code generates, and the pieces agree with each
//! other and with the code (verbs, RBAC, time-outs, the example job).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use orrery_k8s::crd::{NetworkTopology, NodeBandwidth, PodBandwidth};
use serde::Deserialize;
use std::path::PathBuf;

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every YAML document of a file, as JSON values.
fn documents(file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(deploy().join(file)).expect("manifest");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Parses a document into the type its kind names; the kind.
fn typed(file: &str, doc: &serde_json::Value) -> String {
    fn parse<T: serde::de::DeserializeOwned>(file: &str, doc: &serde_json::Value) {
        if let Err(e) = serde_json::from_value::<T>(doc.clone()) {
            panic!("{file}: {} {}: {e}", doc["kind"], doc["metadata"]["name"]);
        }
    }
    let kind = doc["kind"].as_str().unwrap_or_else(|| panic!("{file}: a document without kind")).to_string();
    match kind.as_str() {
        "Namespace" => parse::<Namespace>(file, doc),
        "ServiceAccount" => parse::<ServiceAccount>(file, doc),
        "ClusterRole" => parse::<ClusterRole>(file, doc),
        "ClusterRoleBinding" => parse::<ClusterRoleBinding>(file, doc),
        "PersistentVolumeClaim" => parse::<PersistentVolumeClaim>(file, doc),
        "Deployment" => parse::<Deployment>(file, doc),
        "Service" => parse::<Service>(file, doc),
        "DaemonSet" => parse::<DaemonSet>(file, doc),
        "Job" => parse::<Job>(file, doc),
        "NetworkTopology" => parse::<NetworkTopology>(file, doc),
        "NodeBandwidth" => parse::<NodeBandwidth>(file, doc),
        "PodBandwidth" => parse::<PodBandwidth>(file, doc),
        other => panic!("{file}: no type for kind {other}"),
    }
    kind
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let mut kinds = Vec::new();
    for file in ["orrery.yaml", "agent.yaml", "cluster-example.yaml", "example-job.yaml"] {
        for doc in documents(file) {
            kinds.push(typed(file, &doc));
        }
    }
    for want in ["Deployment", "DaemonSet", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Service", "Job"] {
        assert!(kinds.iter().any(|k| k == want), "no {want} in deploy/");
    }
}

#[test]
fn the_checked_in_crds_are_the_generated_ones() {
    for (file, body) in orrery_k8s::crd::definitions_yaml() {
        let path = deploy().join("crds").join(&file);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == body,
            "{} drifted from the Rust types: run `orrery k8s crds --out deploy/crds`",
            path.display()
        );
    }
}

#[test]
fn rbac_grants_what_the_code_uses_and_no_more() {
    let docs = documents("orrery.yaml");
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").expect("role");
    let role: ClusterRole = serde_json::from_value(role.clone()).expect("role parses");
    let mut granted: Vec<(String, String)> = Vec::new();
    for rule in role.rules.unwrap_or_default() {
        for r in rule.resources.unwrap_or_default() {
            for v in &rule.verbs {
                granted.push((r.clone(), v.clone()));
            }
        }
    }
    granted.sort();
    let mut used: Vec<(String, String)> = [
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods", "patch"),
        ("pods", "delete"),
        ("pods/binding", "create"),
        ("nodes", "get"),
        ("nodes", "list"),
        ("nodes", "watch"),
        ("nodebandwidths", "get"),
        ("nodebandwidths", "list"),
        ("nodebandwidths", "watch"),
        ("podbandwidths", "get"),
        ("podbandwidths", "list"),
        ("podbandwidths", "watch"),
        ("appgroups", "get"),
        ("appgroups", "list"),
        ("appgroups", "watch"),
        ("networktopologies", "get"),
        ("networktopologies", "list"),
        ("networktopologies", "watch"),
        ("nodebandwidths/status", "patch"),
        ("appgroups/status", "patch"),
        ("networktopologies/status", "patch"),
    ]
    .iter()
    .map(|(r, v)| (r.to_string(), v.to_string()))
    .collect();
    used.sort();
    assert_eq!(granted, used);
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchedulerConfig {
    kind: String,
    extenders: Vec<ExtenderConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExtenderConfig {
    url_prefix: String,
    filter_verb: String,
    prioritize_verb: String,
    bind_verb: String,
    node_cache_capable: bool,
    http_timeout: String,
    ignorable: bool,
}

#[test]
fn kube_scheduler_calls_the_extender_longer_than_a_gang_waits() {
    let text = std::fs::read_to_string(deploy().join("scheduler-config.yaml")).expect("config");
    let config: SchedulerConfig = serde_yaml_ng::from_str(&text).expect("KubeSchedulerConfiguration");
    assert_eq!(config.kind, "KubeSchedulerConfiguration");
    let e = &config.extenders[0];
    assert_eq!(
        (e.filter_verb.as_str(), e.prioritize_verb.as_str(), e.bind_verb.as_str()),
        ("filter", "prioritize", "bind")
    );
    assert!(e.url_prefix.ends_with(":8888"), "the extender's port in deploy/orrery.yaml");
    assert!(e.node_cache_capable && !e.ignorable);
    let timeout_s: f64 = e.http_timeout.trim_end_matches('s').parse().expect("seconds");
    let deployment = documents("orrery.yaml").into_iter().find(|d| d["kind"] == "Deployment").expect("deployment");
    let args: Vec<String> =
        serde_json::from_value(deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone()).expect("args");
    let i = args.iter().position(|a| a == "--group-timeout-s").expect("group time-out set");
    let group: f64 = args[i + 1].parse().expect("number");
    assert!(timeout_s > group, "httpTimeout {timeout_s} s must exceed the group time-out {group} s");
}

#[test]
fn the_example_job_describes_a_valid_gang_on_a_valid_cluster() {
    let docs = documents("example-job.yaml");
    let job: Job = serde_json::from_value(docs.iter().find(|d| d["kind"] == "Job").expect("job").clone()).expect("job");
    let spec = job.spec.expect("spec");
    let mut pod =
        Pod { metadata: spec.template.metadata.expect("metadata"), spec: spec.template.spec, ..Pod::default() };
    pod.metadata.namespace = job.metadata.namespace.clone();
    let js = orrery_k8s::job_spec(&pod).expect("valid annotations").expect("an orrery pod");
    assert_eq!(Some(js.workers as i32), spec.parallelism, "one pod per worker, all at once");
    assert_eq!(js.id, "ml/vgg19");
    // DDP's rendezvous: WORLD_SIZE is the gang, RANK the completion index,
    // and MASTER_ADDR names pod 0 under the headless Service of the pods'
    // subdomain (ddp_train.py reads these).
    let pod_spec = pod.spec.as_ref().expect("pod spec");
    let env: std::collections::BTreeMap<String, k8s_openapi::api::core::v1::EnvVar> =
        pod_spec.containers[0].env.clone().unwrap_or_default().into_iter().map(|e| (e.name.clone(), e)).collect();
    let value = |k: &str| env.get(k).and_then(|e| e.value.clone()).unwrap_or_default();
    assert_eq!(value("WORLD_SIZE"), js.workers.to_string());
    let rank = env["RANK"].value_from.as_ref().and_then(|v| v.field_ref.as_ref()).expect("RANK from a field");
    assert_eq!(rank.field_path, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
    let subdomain = pod_spec.subdomain.clone().expect("a subdomain for pod names");
    let job_name = job.metadata.name.clone().expect("name");
    let ns = job.metadata.namespace.clone().expect("namespace");
    assert_eq!(value("MASTER_ADDR"), format!("{job_name}-0.{subdomain}.{ns}.svc"));
    let service = docs.iter().find(|d| d["kind"] == "Service").expect("the headless Service");
    assert_eq!(service["metadata"]["name"], subdomain);
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(service["spec"]["selector"]["orrery.io/job"], job_name);
    let cluster = documents("cluster-example.yaml");
    let topo: NetworkTopology =
        serde_json::from_value(cluster.iter().find(|d| d["kind"] == "NetworkTopology").expect("topology").clone())
            .expect("topology");
    orrery_k8s::crd::validate_topology("default", &topo.spec).expect("valid topology");
}
