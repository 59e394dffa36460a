//! The manifests in `deploy/`: each document parses into its Kubernetes type,
//! the CRDs are the ones the code generates, and the pieces agree with each
//! other and with the code (verbs, RBAC, time-outs, the example job).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use orrery_k8s::crd::{NetworkTopology, NodeBandwidth, PodBandwidth};
use serde::Deserialize;
use std::path::PathBuf;

mod fake_apiserver;

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
        "StatefulSet" => parse::<StatefulSet>(file, doc),
        "PodDisruptionBudget" => parse::<PodDisruptionBudget>(file, doc),
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
    for file in
        ["orrery.yaml", "orrery-ha.yaml", "agent.yaml", "cluster-example.yaml", "example-job.yaml", "sweep-job.yaml"]
    {
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
    #[serde(rename = "enableHTTPS")]
    enable_https: bool,
    tls_config: Option<serde_json::Value>,
}

/// The file a container's `path` comes from: (volume, secret, key) of the
/// Secret (plain or projected) mounted over it.
fn secret_behind(pod: &serde_json::Value, container: &serde_json::Value, path: &str) -> Option<(String, String)> {
    let mounts = container["volumeMounts"].as_array()?;
    let m = mounts.iter().find(|m| m["mountPath"].as_str().is_some_and(|d| path.starts_with(&format!("{d}/"))))?;
    let rel = path.strip_prefix(&format!("{}/", m["mountPath"].as_str()?))?;
    let volume = pod["volumes"].as_array()?.iter().find(|v| v["name"] == m["name"])?;
    let sources: Vec<&serde_json::Value> = match volume["projected"]["sources"].as_array() {
        Some(list) => list.iter().map(|s| &s["secret"]).collect(),
        None => vec![&volume["secret"]],
    };
    sources.into_iter().find_map(|src| {
        let name = src["secretName"].as_str().or(src["name"].as_str())?.to_string();
        match src["items"].as_array() {
            Some(items) => items
                .iter()
                .find(|i| i["path"] == rel)
                .and_then(|i| Some((name.clone(), i["key"].as_str()?.to_string()))),
            None => Some((name, rel.to_string())),
        }
    })
}

/// Issue 70, item 4: every orrery server in deploy/ serves HTTPS with the
/// orrery-tls Secret's certificate and probes over HTTPS, no server is told
/// to speak plain HTTP, the agents trust that Secret's CA, and
/// kube-scheduler calls the extender over HTTPS.
#[test]
fn the_manifests_carry_tls_from_the_service_to_its_agents_and_kube_scheduler() {
    for file in ["orrery.yaml", "orrery-ha.yaml"] {
        let docs = documents(file);
        let d = docs.iter().find(|d| d["kind"] == "Deployment").expect("the service's Deployment");
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let args: Vec<String> = serde_json::from_value(c["args"].clone()).expect("args");
        assert!(!args.iter().any(|a| a == "--insecure-http"), "{file}: plain HTTP");
        let value = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
        for (flag, key) in [("--tls-cert", "server.pem"), ("--tls-key", "server-key.pem")] {
            let path = value(flag).unwrap_or_else(|| panic!("{file}: {flag}"));
            assert_eq!(
                secret_behind(pod, c, &path),
                Some(("orrery-tls".into(), key.into())),
                "{file}: {flag} {path} is the orrery-tls Secret's {key}"
            );
        }
        for probe in ["readinessProbe", "livenessProbe"] {
            if !c[probe].is_null() {
                assert_eq!(
                    c[probe]["httpGet"]["scheme"], "HTTPS",
                    "{file}: {probe} over plain HTTP fails on an HTTPS port"
                );
            }
        }
        if let Some(adv) = value("--advertise") {
            assert!(adv.starts_with("https://"), "{file}: --advertise {adv}");
        }
    }
    let agents = documents("agent.yaml");
    let ds = agents.iter().find(|d| d["kind"] == "DaemonSet").expect("agents");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<String> = serde_json::from_value(c["args"].clone()).expect("args");
    let ca = args.iter().position(|a| a == "--ca").map(|i| args[i + 1].clone()).expect("agents take --ca");
    assert_eq!(secret_behind(pod, c, &ca), Some(("orrery-tls".into(), "ca.pem".into())), "--ca {ca}");
    let token = args.iter().position(|a| a == "--token").map(|i| args[i + 1].clone()).expect("--token");
    assert_eq!(secret_behind(pod, c, &token), Some(("orrery-tokens".into(), "agent.token".into())));

    let text = std::fs::read_to_string(deploy().join("scheduler-config.yaml")).expect("config");
    let config: SchedulerConfig = serde_yaml_ng::from_str(&text).expect("KubeSchedulerConfiguration");
    let e = &config.extenders[0];
    assert!(e.url_prefix.starts_with("https://") && e.enable_https, "{}", e.url_prefix);
    let tls = e.tls_config.as_ref().expect("tlsConfig");
    assert!(tls["caFile"].is_string() || tls["caData"].is_string(), "kube-scheduler trusts the cluster's CA: {tls}");
    assert!(tls["insecure"] != true);
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

/// `$(VAR)` in a container's arguments, expanded as the kubelet does from
/// the container's environment (`$$` is a literal `$`; unknown names stay).
fn expand(arg: &str, env: &std::collections::BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            rest = t;
        } else if let Some((name, t)) = tail.strip_prefix("$(").and_then(|t| t.split_once(')'))
            && let Some(value) = env.get(name)
        {
            out.push_str(value);
            rest = t;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out + rest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_job_runs_each_shard_once_and_merges_them_all() {
    use kube::api::{Api, ListParams};
    let docs = documents("sweep-job.yaml");
    let fake = fake_apiserver::Fake::start().await;
    for doc in &docs {
        let collection = match doc["kind"].as_str() {
            Some("Job") => "apis/batch/v1/jobs",
            Some("PersistentVolumeClaim") => "api/v1/persistentvolumeclaims",
            _ => continue,
        };
        fake.put(collection, doc.clone());
    }
    // The Jobs as kube's typed client reads them back from the API server.
    let jobs: Api<Job> = Api::namespaced(fake.client(), "orrery-sweep");
    let sweep = jobs.get("orrery-sweep").await.expect("the sweep Job");
    let merge = jobs.get("orrery-sweep-merge").await.expect("the merge Job");
    let spec = sweep.spec.clone().expect("spec");
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let n = spec.completions.expect("completions") as usize;
    // Play the Job controller: one pod per completion index, carrying the
    // index annotation it sets.
    let template = spec.template.clone();
    for k in 0..n {
        let mut meta = template.metadata.clone().unwrap_or_default();
        meta.name = Some(format!("orrery-sweep-{k}"));
        meta.namespace = Some("orrery-sweep".into());
        meta.annotations
            .get_or_insert_default()
            .insert("batch.kubernetes.io/job-completion-index".into(), k.to_string());
        let pod = Pod { metadata: meta, spec: template.spec.clone(), ..Pod::default() };
        fake.put("api/v1/pods", serde_json::to_value(&pod).expect("pod"));
    }
    let pods: Api<Pod> = Api::namespaced(fake.client(), "orrery-sweep");
    let listed = pods.list(&ListParams::default().labels("orrery.io/sweep=orrery-sweep")).await.expect("pods");
    assert_eq!(listed.items.len(), n);
    // Each pod's arguments, expanded from its environment, run one shard
    // into the shared folder: the index is the shard, each exactly once.
    let mut shards = Vec::new();
    for pod in &listed.items {
        let c = &pod.spec.as_ref().expect("pod spec").containers[0];
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let env: std::collections::BTreeMap<String, String> = c
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| {
                let from_field = e.value_from.and_then(|v| v.field_ref).map(|f| {
                    let key = f.field_path.strip_prefix("metadata.annotations['").and_then(|k| k.strip_suffix("']"));
                    annotations.get(key.expect("an annotation")).cloned().expect("set by the Job controller")
                });
                (e.name, e.value.or(from_field).expect("a value"))
            })
            .collect();
        let args: Vec<String> = c.args.clone().unwrap_or_default().iter().map(|a| expand(a, &env)).collect();
        let at = |flag: &str| args[args.iter().position(|a| a == flag).expect(flag) + 1].clone();
        assert_eq!(args[0], "run");
        let experiment = args[1].strip_prefix("/opt/orrery/").expect("a file of the image");
        assert!(deploy().join("..").join(experiment).exists(), "{experiment} is not in the repository");
        assert_eq!(at("--out"), "/sweep/shards");
        let shard = at("--shard");
        let (k, of) = shard.split_once('/').expect("K/N");
        assert_eq!(of.parse::<usize>().ok(), Some(n), "{shard}: N is the Job's completions");
        assert_eq!(k, annotations["batch.kubernetes.io/job-completion-index"]);
        shards.push(k.parse::<usize>().expect("K"));
    }
    shards.sort_unstable();
    assert_eq!(shards, (0..n).collect::<Vec<_>>());
    // The merge waits for all N files of that folder and merges them.
    let merge_pod = merge.spec.expect("spec").template.spec.expect("pod spec");
    let wait = merge_pod.init_containers.clone().expect("init")[0].command.clone().expect("command").join(" ");
    assert!(
        wait.contains(&format!("/sweep/shards/shard-*-of-{n}.cbor")) && wait.contains(&format!("-eq {n} ")),
        "{wait}"
    );
    let merge_args = merge_pod.containers[0].args.clone().expect("args");
    assert_eq!(merge_args[..2], ["merge".to_string(), "/sweep/shards".to_string()]);
    // Both write to one ReadWriteMany claim (the pods may be on different nodes).
    let claim = |p: &k8s_openapi::api::core::v1::PodSpec| {
        p.volumes.clone().unwrap_or_default()[0].persistent_volume_claim.clone().expect("a claim").claim_name
    };
    assert_eq!(claim(&merge_pod), claim(template.spec.as_ref().expect("spec")));
    let pvc = docs.iter().find(|d| d["kind"] == "PersistentVolumeClaim").expect("the claim");
    assert_eq!(pvc["spec"]["accessModes"][0], "ReadWriteMany");
    // The image carries the experiments and the data they read.
    let dockerfile = std::fs::read_to_string(deploy().join("Dockerfile")).expect("Dockerfile");
    for copy in ["COPY experiments /opt/orrery/experiments", "COPY data /opt/orrery/data"] {
        assert!(dockerfile.contains(copy), "the Dockerfile lacks {copy}");
    }
}

#[test]
fn expansion_follows_the_kubelet() {
    let env: std::collections::BTreeMap<String, String> = [("SHARD".to_string(), "3".to_string())].into();
    assert_eq!(expand("$(SHARD)/8", &env), "3/8");
    assert_eq!(expand("$$(SHARD) $(NONE) $", &env), "$(SHARD) $(NONE) $");
}

/// deploy/orrery-ha.yaml (issue 40): every replica's `--store` names exactly
/// the etcd StatefulSet's members (pod `NAME-i` of the headless Service), the
/// members' `--initial-cluster` lists the same pods, the Service reaches only
/// the leader (readiness is `/v1/readyz`, which only the leader passes), the
/// agents' `--server` is that Service, and the disruption budgets keep etcd's
/// quorum and a standby.
#[test]
fn the_ha_deployment_points_every_replica_at_the_etcd_members_and_routes_to_the_leader() {
    let docs = documents("orrery-ha.yaml");
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in orrery-ha.yaml"))
            .clone()
    };
    let sts: StatefulSet = serde_json::from_value(find("StatefulSet", "etcd")).expect("StatefulSet");
    let spec = sts.spec;
    let members = spec.replicas.expect("replicas");
    assert_eq!(members, 3, "three etcd members: one may fail");
    let pods: Vec<String> =
        (0..members).map(|i| format!("etcd-{i}.{}", spec.service_name.as_deref().unwrap_or(""))).collect();
    let etcd = &spec.template.spec.expect("pod spec").containers[0];
    let command = etcd.command.clone().unwrap_or_default();
    let initial = command.iter().find_map(|a| a.strip_prefix("--initial-cluster=")).expect("--initial-cluster");
    let peers: Vec<String> = (0..members).map(|i| format!("etcd-{i}=http://{}:2380", pods[i as usize])).collect();
    assert_eq!(initial, peers.join(","));

    let deployment: Deployment = serde_json::from_value(find("Deployment", "orrery")).expect("Deployment");
    let dspec = deployment.spec;
    assert!(dspec.replicas.is_some_and(|r| r >= 2), "a standby at least");
    let pod = dspec.template.spec.expect("pod spec");
    let orrery = &pod.containers[0];
    let args = orrery.args.clone().unwrap_or_default();
    let value = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
    let store: orrery_serve::etcd::EtcdUrl = value("--store").expect("--store").parse().expect("an etcd:// URL");
    let want: Vec<String> = pods.iter().map(|p| format!("http://{p}:2379")).collect();
    assert_eq!(store.endpoints, want, "the replicas use every etcd member");
    assert!(value("--advertise").is_some_and(|a| a.contains("$(POD_IP)")), "each replica advertises its own address");
    let readiness = orrery.readiness_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("readiness");
    assert_eq!(readiness.path.as_deref(), Some("/v1/readyz"), "only the leader is ready");
    let liveness = orrery.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("liveness");
    assert_eq!(liveness.path.as_deref(), Some("/v1/healthz"), "a standby is alive");

    let service: Service = serde_json::from_value(find("Service", "orrery")).expect("Service");
    let selector = service.spec.and_then(|s| s.selector).expect("selector");
    let labels = dspec.template.metadata.and_then(|m| m.labels).expect("labels");
    assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)), "the Service selects the replicas");
    let agents = documents("agent.yaml");
    let agent_args: Vec<String> = agents
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .and_then(|d| serde_json::from_value(d["spec"]["template"]["spec"]["containers"][0]["args"].clone()).ok())
        .expect("the agents' args");
    let server = agent_args.iter().position(|a| a == "--server").map(|i| agent_args[i + 1].clone());
    assert_eq!(
        server.as_deref(),
        Some("https://orrery.orrery-system.svc:7400"),
        "agents reach the leader through the Service"
    );

    let budget = |name: &str| -> PodDisruptionBudget {
        serde_json::from_value(find("PodDisruptionBudget", name)).expect("PodDisruptionBudget")
    };
    let etcd_pdb = budget("etcd").spec.expect("spec");
    assert_eq!(etcd_pdb.min_available, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2)));
    let orrery_pdb = budget("orrery").spec.expect("spec");
    assert_eq!(orrery_pdb.max_unavailable, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)));
}
