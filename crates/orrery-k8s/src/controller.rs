//! The controller (Metronome Fig. 3, ①–③ and ⑫): watches orrery's pods,
//! nodes and the four custom resources, and every 250 ms reconciles the
//! cluster with the service:
//!
//! 1. A job whose pods appeared is submitted (once its AppGroup dependencies
//!    have started); a job whose pods are all gone is cancelled.
//! 2. A job the policy preempted (its placement epoch moved past the one its
//!    pods were bound in) has its bound pods deleted, so their workload
//!    controller recreates them and they are scheduled again.
//! 3. Each bound pod's `orrery.io/decisions` annotation mirrors the decisions
//!    in force for its job (time-shift, pace, pause, throttle, routes); the
//!    node agents enforce them from the service itself.
//! 4. Each `NodeBandwidth` status lists the orrery pods on its node with their
//!    PodBandwidth rate, and their sum.
//! 5. Each `AppGroup` status says whether it was accepted (no cycle, no
//!    unknown dependency) and its topological order.
//!
//! Writes are skipped when the object already says the same, so a steady
//! cluster costs no API calls. One reconcile is O(pods + jobs + nodes).

use crate::crd::{
    AppGroup, AppGroupStatus, NodeBandwidth, NodeBandwidthStatus, PodBandwidth, PodOnNode, validate_app_group,
    validate_pod_bandwidth,
};
use crate::extender::{Placement, Shared, lock};
use crate::{DECISIONS_ANNOTATION, EPOCH_ANNOTATION, JOB_LABEL, PodRef, RANK_ANNOTATION, job_key, job_spec, pod_ref};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use orrery_serve::api::JobStatus;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How often the view is reconciled with the service and the cluster.
const RECONCILE_EVERY: Duration = Duration::from_millis(250);

/// What the watchers deliver.
#[allow(clippy::large_enum_variant)] // one at a time, moved straight into the view
enum Change {
    Pod(watcher::Event<Pod>),
    Node(watcher::Event<Node>),
    NodeBandwidth(watcher::Event<NodeBandwidth>),
    PodBandwidth(watcher::Event<PodBandwidth>),
    AppGroup(watcher::Event<AppGroup>),
    Tick,
}

type Changes = Pin<Box<dyn Stream<Item = Change> + Send>>;

fn watch<K>(api: Api<K>, config: watcher::Config, wrap: fn(watcher::Event<K>) -> Change) -> Changes
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&Default::default()).to_string();
    Box::pin(watcher(api, config).filter_map(move |e| {
        let kind = kind.clone();
        async move {
            match e {
                Ok(e) => Some(wrap(e)),
                Err(err) => {
                    tracing::warn!("watching {kind}: {err} (retrying)");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    None
                }
            }
        }
    }))
}

/// Applies a watcher event to a map of objects by key.
fn apply<K: Clone>(map: &mut BTreeMap<String, K>, e: watcher::Event<K>, key: impl Fn(&K) -> String) {
    match e {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
            map.insert(key(&o), o);
        }
        watcher::Event::Delete(o) => {
            map.remove(&key(&o));
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

fn name_of<K: kube::Resource>(o: &K) -> String {
    let m = o.meta();
    format!("{}/{}", m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
}

/// The controller's view of the cluster.
#[derive(Default)]
struct View {
    pods: BTreeMap<String, Pod>,
    nodes: BTreeMap<String, Node>,
    node_bandwidth: BTreeMap<String, NodeBandwidth>,
    pod_bandwidth: BTreeMap<String, PodBandwidth>,
    app_groups: BTreeMap<String, AppGroup>,
    /// Jobs this controller submitted or saw, by key.
    jobs: BTreeSet<String>,
    /// Why a job is not submitted, last logged.
    held_back: HashMap<String, String>,
}

/// Runs until the API server's streams end (never, in practice).
pub async fn run(shared: Arc<Shared>) {
    let client = shared.kube.clone();
    let every = Box::pin(futures::stream::unfold((), |()| async {
        tokio::time::sleep(RECONCILE_EVERY).await;
        Some((Change::Tick, ()))
    })) as Changes;
    let mut changes = futures::stream::select_all(vec![
        watch(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(JOB_LABEL), Change::Pod),
        watch(Api::<Node>::all(client.clone()), watcher::Config::default(), Change::Node),
        watch(Api::<NodeBandwidth>::all(client.clone()), watcher::Config::default(), Change::NodeBandwidth),
        watch(Api::<PodBandwidth>::all(client.clone()), watcher::Config::default(), Change::PodBandwidth),
        watch(Api::<AppGroup>::all(client.clone()), watcher::Config::default(), Change::AppGroup),
        every,
    ]);
    let mut view = View::default();
    while let Some(change) = changes.next().await {
        match change {
            Change::Pod(e) => {
                if let watcher::Event::Delete(p) = &e
                    && let Some(uid) = &p.metadata.uid
                {
                    shared.forget(uid);
                }
                apply(&mut view.pods, e, |p| p.metadata.uid.clone().unwrap_or_else(|| name_of(p)));
            }
            Change::Node(e) => apply(&mut view.nodes, e, name_of),
            Change::NodeBandwidth(e) => apply(&mut view.node_bandwidth, e, name_of),
            Change::PodBandwidth(e) => apply(&mut view.pod_bandwidth, e, name_of),
            Change::AppGroup(e) => apply(&mut view.app_groups, e, name_of),
            // Events only update the view; a burst of them (a 1,000-pod job
            // created at once) costs one reconcile per tick, not one each.
            Change::Tick => reconcile(&shared, &mut view).await,
        }
    }
}

/// One pass of the numbered steps in the module docs.
async fn reconcile(shared: &Shared, view: &mut View) {
    let client = shared.kube.clone();
    // 5. AppGroups, and the dependencies they give each job.
    let mut waits_for: HashMap<String, Vec<String>> = HashMap::new();
    for g in view.app_groups.values() {
        let ns = g.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = g.metadata.name.clone().unwrap_or_default();
        let status = match validate_app_group(&name, &g.spec) {
            Ok(order) => {
                for w in &g.spec.workloads {
                    let deps = w.dependencies.iter().map(|d| format!("{ns}/{d}")).collect();
                    waits_for.insert(format!("{ns}/{}", w.job), deps);
                }
                AppGroupStatus { accepted: true, reason: None, topology_order: order }
            }
            Err(bad) => AppGroupStatus { accepted: false, reason: Some(bad.to_string()), topology_order: Vec::new() },
        };
        if g.status.as_ref() != Some(&status) {
            if let Some(reason) = &status.reason {
                tracing::warn!("refusing {reason}");
            }
            let api: Api<AppGroup> = Api::namespaced(client.clone(), &ns);
            let patch = serde_json::json!({ "status": status });
            if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::warn!("writing AppGroup {ns}/{name} status: {e}");
            }
        }
    }
    *lock(&shared.waits_for) = waits_for;
    // Declared bandwidth per job (PodBandwidth), valid ones only.
    let mut declared: HashMap<String, f64> = HashMap::new();
    for pb in view.pod_bandwidth.values() {
        let ns = pb.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        match validate_pod_bandwidth(pb.metadata.name.as_deref().unwrap_or(""), &pb.spec) {
            Ok(()) => {
                declared.insert(format!("{ns}/{}", pb.spec.job), pb.spec.bandwidth_gbps);
            }
            Err(bad) => tracing::warn!("ignoring {bad}"),
        }
    }
    // 1. Jobs by key, with their pods.
    let mut jobs: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for p in view.pods.values() {
        shared.remember(p);
        if let Some(key) = job_key(p) {
            jobs.entry(key).or_default().push(p);
        }
    }
    let keys: Vec<String> = jobs.keys().chain(view.jobs.iter()).cloned().collect();
    let mut known: HashMap<String, Placement> =
        keys.iter().cloned().zip(shared.placements(keys.clone()).await).filter_map(|(k, p)| Some((k, p?))).collect();
    for (key, pods) in &jobs {
        let spec = match job_spec(pods[0]) {
            Ok(Some(spec)) => spec,
            Ok(None) => continue,
            Err(bad) => {
                if view.held_back.insert(key.clone(), bad.to_string()).as_ref() != Some(&bad.to_string()) {
                    tracing::warn!("not submitting: {bad}");
                }
                continue;
            }
        };
        if !known.contains_key(key) {
            match shared.submit(spec).await {
                Ok(()) => {
                    tracing::info!(job = %key, "submitted");
                    view.held_back.remove(key);
                    if let Some(p) = shared.placement(key).await {
                        known.insert(key.clone(), p);
                    }
                }
                Err(why) => {
                    let why = why.to_string();
                    if view.held_back.insert(key.clone(), why.clone()).as_ref() != Some(&why) {
                        tracing::info!("holding back: {why}");
                    }
                    continue;
                }
            }
        }
        view.jobs.insert(key.clone());
    }
    let gone: Vec<String> = view.jobs.iter().filter(|k| !jobs.contains_key(*k)).cloned().collect();
    for key in gone {
        view.jobs.remove(&key);
        if let Some(p) = known.get(&key)
            && !p.status.is_over()
        {
            let id = p.id;
            match shared
                .core
                .call(move |core| core.cancel(id, &orrery_serve::auth::Caller::Component("k8s-controller")))
                .await
            {
                Ok(Ok(())) => tracing::info!(job = %key, "all pods gone: cancelled"),
                Ok(Err(f)) => tracing::warn!(job = %key, "cancelling: {f:?}"),
                Err(_) => return,
            }
        }
    }
    // 2 and 3. Preempted jobs' pods, and the decisions on bound pods.
    for (key, pods) in &jobs {
        let Some(p) = known.get(key) else { continue };
        // Pods bound before a restart of this process: their annotations say
        // their rank and epoch.
        for pod in pods.iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())) {
            let a = pod.metadata.annotations.as_ref();
            let read = |k: &str| a.and_then(|a| a.get(k)).and_then(|v| v.parse::<u64>().ok());
            if let (Some(rank), Some(epoch)) = (read(RANK_ANNOTATION), read(EPOCH_ANNOTATION)) {
                shared.adopt_bound(key, epoch, &pod_ref(pod), rank as usize);
            }
        }
        let bound_epoch = shared.bound(key).map(|b| b.0);
        // The job's decisions, read once for all its pods.
        let mut decisions: Option<String> = None;
        for pod in pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { continue };
            let r = pod_ref(pod);
            let api: Api<Pod> = Api::namespaced(client.clone(), &r.namespace);
            if bound_epoch.is_some_and(|e| e < p.epoch) || (p.status.is_over() && p.status != JobStatus::Finished) {
                if pod.metadata.deletion_timestamp.is_none() {
                    tracing::info!(job = %key, pod = %r.name, node, "job preempted or ended: deleting its pod");
                    if let Err(e) = api.delete(&r.name, &DeleteParams::default()).await {
                        tracing::warn!("deleting pod {}: {e}", r.name);
                    }
                }
                continue;
            }
            if !p.status.is_active() {
                continue;
            }
            if decisions.is_none() {
                let id = p.id;
                let Ok(Some(info)) = shared.core.call(move |core| core.ledger.job_info(id)).await else { continue };
                decisions = Some(serde_json::json!({ "epoch": info.epoch, "inForce": info.in_force }).to_string());
            }
            if let Some(text) = &decisions {
                mirror_decisions(&api, &r, pod, text).await;
            }
        }
    }
    // 4. NodeBandwidth status.
    for nb in view.node_bandwidth.values() {
        let node = nb.metadata.name.clone().unwrap_or_default();
        let mut on_node: Vec<PodOnNode> = jobs
            .iter()
            .flat_map(|(key, pods)| pods.iter().map(move |p| (key, p)))
            .filter(|(_, p)| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .map(|(key, p)| {
                let r = pod_ref(p);
                PodOnNode {
                    namespace: r.namespace,
                    name: r.name,
                    job: key.rsplit('/').next().unwrap_or(key).to_string(),
                    bandwidth_gbps: declared.get(key).copied().unwrap_or(0.0),
                }
            })
            .collect();
        on_node.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let used_gbps = on_node.iter().map(|p| p.bandwidth_gbps).sum();
        let status = NodeBandwidthStatus { pods: on_node, used_gbps };
        if nb.status.as_ref() != Some(&status) {
            let api: Api<NodeBandwidth> = Api::all(client.clone());
            let patch = serde_json::json!({ "status": status });
            if let Err(e) = api.patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::warn!("writing NodeBandwidth {node} status: {e}");
            }
        }
    }
}

/// Step 3: the decisions in force on a bound pod, as one annotation.
async fn mirror_decisions(api: &Api<Pod>, r: &PodRef, pod: &Pod, text: &str) {
    let current = pod.metadata.annotations.as_ref().and_then(|a| a.get(DECISIONS_ANNOTATION));
    if current.map(String::as_str) == Some(text) {
        return;
    }
    let patch = serde_json::json!({"metadata": {"annotations": { DECISIONS_ANNOTATION: text }}});
    if let Err(e) = api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::warn!("writing decisions on pod {}: {e}", r.name);
    }
}
