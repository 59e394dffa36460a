//! orrery on Kubernetes against a fake API server on loopback: the service,
//! extender and controller start from the cluster's NetworkTopology, the test
//! plays kube-scheduler (filter, prioritize, bind) for a 4-pod gang with one
//! node short of bandwidth, and checks what lands on the API server.

mod fake_apiserver;

use fake_apiserver::Fake;
use orrery_k8s::extender::{ExtenderBindingResult, ExtenderFilterResult, HostPriority};
use orrery_k8s::run::{Options, Running, start};
use serde_json::{Value, json};
use std::time::Duration;

const PODS: &str = "api/v1/pods";
const NODES: &str = "api/v1/nodes";
const NBW: &str = "apis/orrery.io/v1alpha1/nodebandwidths";
const PBW: &str = "apis/orrery.io/v1alpha1/podbandwidths";
const APPGROUPS: &str = "apis/orrery.io/v1alpha1/appgroups";
const TOPOLOGIES: &str = "apis/orrery.io/v1alpha1/networktopologies";
const NODE_NAMES: [&str; 4] = ["n0", "n1", "n2", "n3"];
const WAIT: Duration = Duration::from_secs(20);

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A30"}},
        "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "32", "memory": "256Gi"}}})
}

fn pod(name: &str, job: &str, model: &str, workers: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
            "labels": {"orrery.io/job": job},
            "annotations": {"orrery.io/model": model, "orrery.io/batch": "32",
                "orrery.io/workers": workers.to_string(), "orrery.io/iterations": "1000"}},
        "spec": {"schedulerName": "default-scheduler",
            "containers": [{"name": "train", "image": "orrery-trainer",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"}})
}

fn options(data_dir: &std::path::Path) -> Options {
    Options {
        topology: "lab".into(),
        policy: "metronome".into(),
        seed: 1,
        listen: "127.0.0.1:0".parse().expect("addr"),
        extender_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: data_dir.to_path_buf(),
        group_timeout: Duration::from_millis(1500),
        node_timeout_s: 1e6,
        tls: None,
    }
}

/// The cluster: two racks of two 2-GPU A30 nodes under one spine, 25 Gbit/s
/// links, except n3, whose NodeBandwidth gives orrery only 5 Gbit/s.
async fn cluster() -> (Fake, Running, tempfile::TempDir) {
    cluster_with(|_| None).await
}

/// [`cluster`], its service and extender given `tls(data dir)`.
async fn cluster_with(
    tls: impl FnOnce(&std::path::Path) -> Option<std::sync::Arc<orrery_serve::tls::ServerConfig>>,
) -> (Fake, Running, tempfile::TempDir) {
    let fake = Fake::start().await;
    for n in NODE_NAMES {
        fake.put(NODES, node(n));
        let gbps = if n == "n3" { 5.0 } else { 25.0 };
        fake.put(
            NBW,
            json!({"apiVersion": "orrery.io/v1alpha1", "kind": "NodeBandwidth",
            "metadata": {"name": n}, "spec": {"bandwidthGbps": gbps}}),
        );
    }
    fake.put(
        TOPOLOGIES,
        json!({"apiVersion": "orrery.io/v1alpha1", "kind": "NetworkTopology",
        "metadata": {"name": "lab"},
        "spec": {"racks": [{"name": "leaf0", "nodes": ["n0", "n1"]}, {"name": "leaf1", "nodes": ["n2", "n3"]}],
            "spines": 1, "nodeGbps": 25.0, "uplinkGbps": 25.0}}),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options { tls: tls(dir.path()), ..options(dir.path()) };
    let running = start(fake.client(), opts).await.expect("starts");
    // What each node's agent does when the DaemonSet starts it: it offers
    // what the topology read from the node says (gpus 0, nic 0).
    for n in NODE_NAMES {
        let req = orrery_serve::api::RegisterRequest { name: n.into(), gpus: 0, nic_gbps: 0.0, data_addr: None };
        let r = running.shared.core.call(move |c| c.register(&req)).await.expect("core").expect("registered");
        assert_eq!(r.gpus, 2, "the node's allocatable nvidia.com/gpu");
    }
    (fake, running, dir)
}

struct Scheduler {
    http: reqwest::Client,
    url: String,
}

impl Scheduler {
    async fn post<T: serde::de::DeserializeOwned>(&self, verb: &str, body: &Value) -> T {
        let r = self.http.post(format!("{}/{verb}", self.url)).json(body).send().await.expect("extender answers");
        assert!(r.status().is_success(), "{verb}: {}", r.status());
        r.json().await.expect("json")
    }

    /// kube-scheduler's cycle for one pod: filter, prioritize, the best node.
    async fn choose(&self, fake: &Fake, name: &str) -> (String, ExtenderFilterResult) {
        let pod = fake.get(PODS, "ml", name).expect("pod");
        let args = json!({"pod": pod, "nodenames": NODE_NAMES});
        let filtered: ExtenderFilterResult = self.post("filter", &args).await;
        let passed = filtered.node_names.clone().expect("nodenames back for nodenames in");
        let args = json!({"pod": pod, "nodenames": passed});
        let scores: Vec<HostPriority> = self.post("prioritize", &args).await;
        let best = scores.iter().max_by_key(|h| h.score).map(|h| h.host.clone()).expect("a node passed");
        (best, filtered)
    }

    async fn bind(&self, name: &str, node: &str) -> ExtenderBindingResult {
        let args = json!({"podName": name, "podNamespace": "ml", "podUID": format!("uid-{name}"), "node": node});
        self.post("bind", &args).await
    }
}

/// Issue 70, item 4: `orrery k8s run --tls-cert/--tls-key` serves the
/// extender and the agents' API over HTTPS; kube-scheduler trusting the
/// cluster's CA filters through it, and plain HTTP gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_scheduler_and_agents_reach_the_service_over_https() {
    let certs = std::sync::Mutex::new(None);
    let (fake, running, _dir) = cluster_with(|dir| {
        let c = orrery_serve::tls::make_test_certs(&dir.join("tls"), &[]).expect("certs");
        let config = orrery_serve::tls::server_config(&c.cert, &c.key).expect("identity");
        *certs.lock().expect("lock") = Some(c);
        Some(config)
    })
    .await;
    let ca = certs.lock().expect("lock").clone().expect("made").ca;
    fake.put(PODS, pod("one-0", "one", "resnet50", 1));
    let trusting = orrery_serve::tls::client_builder(Some(&ca)).expect("tls").build().expect("client");
    let s = Scheduler { http: trusting.clone(), url: format!("https://localhost:{}", running.extender_addr.port()) };
    let (node, filtered) = s.choose(&fake, "one-0").await;
    assert!(NODE_NAMES.contains(&node.as_str()), "{node}: {filtered:?}");
    let health = trusting
        .get(format!("https://localhost:{}/v1/healthz", running.service.addr.port()))
        .send()
        .await
        .expect("the API over HTTPS");
    assert!(health.status().is_success());
    let plain = reqwest::Client::new().post(format!("http://{}/filter", running.extender_addr)).send().await;
    assert!(plain.is_err() || !plain.is_ok_and(|r| r.status().is_success()), "plain HTTP was served");
    running.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_is_placed_by_the_policy_and_bound_all_together() {
    let (fake, running, dir) = cluster().await;
    let status = fake.get(TOPOLOGIES, "", "lab").expect("topology")["status"].clone();
    assert_eq!(status["accepted"], json!(true), "{status}");
    assert_eq!((status["hosts"].as_u64(), status["gpus"].as_u64()), (Some(4), Some(8)));
    fake.put(
        PBW,
        json!({"apiVersion": "orrery.io/v1alpha1", "kind": "PodBandwidth",
        "metadata": {"name": "vgg", "namespace": "ml"},
        "spec": {"job": "vgg", "periodMs": 180.0, "dutyCycle": 0.4, "bandwidthGbps": 20.0}}),
    );
    for i in 0..4 {
        fake.put(PODS, pod(&format!("vgg-{i}"), "vgg", "vgg19", 4));
    }
    let s = Scheduler {
        http: orrery_serve::tls::client_builder(None).expect("tls").build().expect("client"),
        url: format!("http://{}", running.extender_addr),
    };

    // Filter and prioritize: VGG19 sends at 25 Gbit/s, more than n3's 5
    // (Eq. 14), so Metronome leaves n3 out and the extender says why.
    let mut chosen = Vec::new();
    for i in 0..4 {
        let (node, filtered) = s.choose(&fake, &format!("vgg-{i}")).await;
        let why = filtered.failed_nodes.get("n3").expect("n3 fails");
        assert!(why.starts_with("metronome placed this pod of job ml/vgg on "), "{why}");
        assert_ne!(node, "n3");
        chosen.push(node);
    }
    // Bind: three pods wait for the fourth; then all four are bound at once.
    let mut waiting = Vec::new();
    for (i, node) in chosen.iter().enumerate().take(3) {
        let (url, node) = (s.url.clone(), node.clone());
        waiting.push(tokio::spawn(async move {
            let s = Scheduler { http: reqwest::Client::new(), url };
            s.bind(&format!("vgg-{i}"), &node).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fake.bindings().is_empty(), "nothing is bound before the whole gang reached bind");
    assert_eq!(s.bind("vgg-3", &chosen[3]).await, ExtenderBindingResult::default());
    for w in waiting {
        assert_eq!(w.await.expect("task"), ExtenderBindingResult::default());
    }
    let bindings = fake.bindings();
    assert_eq!(bindings.len(), 4, "{bindings:?}");
    let mut ranks = Vec::new();
    for (ns, name, node) in &bindings {
        let p = fake.get(PODS, ns, name).expect("pod");
        assert_eq!(p["spec"]["nodeName"].as_str(), Some(node.as_str()));
        ranks.push(p["metadata"]["annotations"]["orrery.io/rank"].as_str().expect("rank").to_string());
        assert_eq!(p["metadata"]["annotations"]["orrery.io/job-id"].as_str(), Some("0"));
    }
    ranks.sort();
    assert_eq!(ranks, ["0", "1", "2", "3"]);
    // The placement the service holds is the one bound.
    let info = running.shared.core.call(|c| c.ledger.job_info(0)).await.expect("core").expect("job 0");
    assert!(info.hosts.iter().all(|h| h.0 != "n3"), "{:?}", info.hosts);
    assert_eq!(info.hosts.iter().map(|h| h.1).sum::<u32>(), 4);
    for (_, name, node) in &bindings {
        let rank: usize = fake.get(PODS, "ml", name).expect("pod")["metadata"]["annotations"]["orrery.io/rank"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .expect("rank");
        let hosts = running.shared.placement("ml/vgg").await.expect("placed").workers;
        assert_eq!(&hosts[rank], node, "each pod is bound where the policy put its rank");
    }

    // The controller: NodeBandwidth status lists the pods with their
    // PodBandwidth rate, and each bound pod carries the decisions in force.
    let busiest = &info.hosts[0].0;
    fake.until(WAIT, "NodeBandwidth status", |f| {
        let st = &f.get(NBW, "", busiest).expect("nbw")["status"];
        st["usedGbps"].as_f64() == Some(20.0 * f64::from(info.hosts[0].1)) && st["pods"][0]["job"] == json!("vgg")
    })
    .await;
    fake.until(WAIT, "decisions on pods", |f| {
        (0..4).all(|i| {
            let p = f.get(PODS, "ml", &format!("vgg-{i}")).expect("pod");
            p["metadata"]["annotations"]["orrery.io/decisions"].as_str().is_some_and(|d| d.contains("\"epoch\":1"))
        })
    })
    .await;

    // A restart (the Deployment's pod replaced): the service rebuilds the job
    // from its database and the controller re-learns the bound ranks from the
    // pods' annotations, so no rank of the job is handed out twice.
    running.stop();
    let running = start(fake.client(), options(dir.path())).await.expect("restarts");
    let end = tokio::time::Instant::now() + WAIT;
    while running.shared.bound("ml/vgg").map(|b| b.1.len()) != Some(4) {
        assert!(tokio::time::Instant::now() < end, "bound ranks not re-learnt");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.put(PODS, pod("vgg-extra", "vgg", "vgg19", 4));
    let s = Scheduler { http: reqwest::Client::new(), url: format!("http://{}", running.extender_addr) };
    let extra = fake.get(PODS, "ml", "vgg-extra").expect("pod");
    let filtered: ExtenderFilterResult = s.post("filter", &json!({"pod": extra, "nodenames": NODE_NAMES})).await;
    assert_eq!(filtered.node_names.as_deref(), Some(&[][..]), "a fifth pod of a 4-worker job gets no rank");
    fake.delete(PODS, "ml", "vgg-extra");

    // All pods deleted (the Job was deleted): the controller cancels the job.
    for i in 0..4 {
        fake.delete(PODS, "ml", &format!("vgg-{i}"));
    }
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let info = running.shared.core.call(|c| c.ledger.job_info(0)).await.expect("core").expect("job");
        if info.status == orrery_serve::api::JobStatus::Cancelled {
            break;
        }
        assert!(tokio::time::Instant::now() < end, "job not cancelled: {:?}", info.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_gang_is_released_after_the_group_time_out() {
    let (fake, running, _dir) = cluster().await;
    for i in 0..2 {
        fake.put(PODS, pod(&format!("bert-{i}"), "bert", "bert-base", 2));
    }
    let s = Scheduler { http: reqwest::Client::new(), url: format!("http://{}", running.extender_addr) };
    // A request as kube-scheduler sends it when the extender is not
    // nodeCacheCapable: whole Node objects in, the passing ones back.
    let recorded: Value = serde_json::from_str(include_str!("fixtures/filter-nodes.json")).expect("fixture is JSON");
    let mut args = recorded.clone();
    args["pod"] = fake.get(PODS, "ml", "bert-0").expect("pod");
    let filtered: ExtenderFilterResult = s.post("filter", &args).await;
    let items = filtered.nodes.as_ref().expect("nodes back for nodes in")["items"].as_array().expect("items").clone();
    assert!(filtered.node_names.is_none());
    assert_eq!(items.len() + filtered.failed_nodes.len(), 4);
    let node = items[0]["metadata"]["name"].as_str().expect("name").to_string();

    // Only one of the two pods reaches bind: after the time-out (1.5 s) it is
    // released with the reason, and nothing was bound.
    let t = std::time::Instant::now();
    let r = s.bind("bert-0", &node).await;
    assert!(t.elapsed() >= Duration::from_millis(1400), "released early: {:?}", t.elapsed());
    assert_eq!(r.error, "job ml/bert: 1 of 2 pods reached bind within 2 s; the group released what it held");
    assert!(fake.bindings().is_empty());

    // kube-scheduler retries both: now the gang completes.
    let (n0, _) = s.choose(&fake, "bert-0").await;
    let (n1, _) = s.choose(&fake, "bert-1").await;
    let (a, b) = tokio::join!(s.bind("bert-0", &n0), s.bind("bert-1", &n1));
    assert_eq!((a.error.as_str(), b.error.as_str()), ("", ""));
    assert_eq!(fake.bindings().len(), 2);
    // A pod that is not orrery's passes the filter untouched.
    let mut other = pod("web", "x", "bert-base", 1);
    other["metadata"]["labels"] = json!({"app": "web"});
    let filtered: ExtenderFilterResult = s.post("filter", &json!({"pod": other, "nodenames": NODE_NAMES})).await;
    assert_eq!(filtered.node_names.as_deref(), Some(&NODE_NAMES.map(String::from)[..]));
    running.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_groups_order_jobs_and_cycles_are_refused() {
    let (fake, running, _dir) = cluster().await;
    fake.put(
        APPGROUPS,
        json!({"apiVersion": "orrery.io/v1alpha1", "kind": "AppGroup",
        "metadata": {"name": "pipeline", "namespace": "ml"},
        "spec": {"workloads": [{"job": "train", "dependencies": ["prep"]}, {"job": "prep"}]}}),
    );
    fake.put(
        APPGROUPS,
        json!({"apiVersion": "orrery.io/v1alpha1", "kind": "AppGroup",
        "metadata": {"name": "ring", "namespace": "ml"},
        "spec": {"workloads": [{"job": "a", "dependencies": ["b"]}, {"job": "b", "dependencies": ["a"]}]}}),
    );
    fake.until(WAIT, "AppGroup statuses", |f| {
        let ring = &f.get(APPGROUPS, "ml", "ring").expect("ring")["status"];
        let pipeline = &f.get(APPGROUPS, "ml", "pipeline").expect("pipeline")["status"];
        ring["accepted"] == json!(false) && pipeline["accepted"] == json!(true)
    })
    .await;
    let ring = &fake.get(APPGROUPS, "ml", "ring").expect("ring")["status"];
    assert_eq!(
        ring["reason"].as_str(),
        Some(r#"AppGroup ring: spec.workloads: expected dependencies without a cycle, found a cycle among ["a", "b"]"#)
    );
    let pipeline = &fake.get(APPGROUPS, "ml", "pipeline").expect("pipeline")["status"];
    assert_eq!(pipeline["topologyOrder"], json!(["prep", "train"]));

    // `train` waits for `prep` to start: its pods are held back with the reason.
    fake.put(PODS, pod("train-0", "train", "resnet50", 1));
    let s = Scheduler { http: reqwest::Client::new(), url: format!("http://{}", running.extender_addr) };
    let pod_json = fake.get(PODS, "ml", "train-0").expect("pod");
    let filtered: ExtenderFilterResult = s.post("filter", &json!({"pod": pod_json, "nodenames": NODE_NAMES})).await;
    assert_eq!(filtered.node_names.as_deref(), Some(&[][..]));
    assert_eq!(filtered.failed_nodes["n0"], "job ml/train waits for ml/prep to start (AppGroup)");
    fake.put(PODS, pod("prep-0", "prep", "resnet50", 1));
    let (node, _) = s.choose(&fake, "prep-0").await;
    assert_eq!(s.bind("prep-0", &node).await.error, "");
    // Once prep runs, train is submitted and placed.
    let (node, filtered) = s.choose(&fake, "train-0").await;
    assert!(
        filtered.failed_nodes.values().all(|w| w.starts_with("metronome placed this pod of job ml/train")),
        "{filtered:?}"
    );
    assert_eq!(s.bind("train-0", &node).await.error, "");
    running.stop();
}
