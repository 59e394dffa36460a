//! A kube-scheduler extender (`filter`, `prioritize`, `bind`) backed by the
//! live service's core.
//!
//! The policy (Metronome by default) places a whole job: its Filter, Score
//! and NormalizeScore run pod by pod inside the core (Alg. 1), and the job is
//! placed only when all its pods fit (Eqs. 11–12, co-scheduling). The extender
//! hands that decision to kube-scheduler one pod at a time:
//!
//! * **filter**: each pod of a placed job is given one rank of the job's
//!   ring, and so one node, here (kube-scheduler filters the next pod before
//!   the previous one reaches bind); that node passes and every other fails
//!   with the reason (`failedNodes`). While the job waits for GPUs every node
//!   fails, so the pod stays Pending and kube-scheduler retries it. A pod
//!   whose annotations do not describe a job fails everywhere with the
//!   annotation at fault (`failedAndUnresolvableNodes`). Pods without
//!   `orrery.io/job` pass unchanged.
//! * **prioritize**: the pod's rank's node scores [`MAX_PRIORITY`], others 0.
//! * **bind** (gang): each pod is held on its rank's node until all pods of
//!   its job have reached bind; then each pod is annotated with its job id,
//!   rank and placement epoch and bound, and every bind call returns. If the
//!   group is not complete within the group time-out (counted from its first
//!   pod), every held pod is released with an error and kube-scheduler
//!   retries them.
//!
//! `nodeCacheCapable` both ways: candidates arrive as `nodenames` (answered
//! with `nodenames`) or as a full `nodes` list (answered with the same
//! objects, filtered).
//!
//! Cost per call: filter and prioritize O(candidates + workers²) at worst
//! (finding a free rank) after one round trip to the core thread; bind the
//! same plus one PATCH and one POST per pod when the gang completes.

use crate::{EPOCH_ANNOTATION, JOB_ID_ANNOTATION, PodRef, RANK_ANNOTATION, job_key, job_spec, pod_ref};
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use orrery_policy::JobId;
use orrery_serve::api::JobStatus;
use orrery_serve::core::Handle;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// kube-scheduler's `MaxExtenderPriority`.
pub const MAX_PRIORITY: i64 = 10;

/// kube-scheduler's `ExtenderArgs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    pub pod: Pod,
    /// Candidate nodes (when the extender is not `nodeCacheCapable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    /// Candidate node names (when it is).
    #[serde(default, rename = "nodenames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList` as the extender protocol carries it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeList {
    /// Nodes.
    #[serde(default)]
    pub items: Vec<Node>,
}

/// kube-scheduler's `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderFilterResult {
    /// Nodes that passed (when given `nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<serde_json::Value>,
    /// Names of nodes that passed (when given `nodenames`).
    #[serde(default, rename = "nodenames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that failed, with why; preemption may help.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes that failed for a reason preemption cannot fix.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// An error of the extender itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// kube-scheduler's `HostPriority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    pub host: String,
    /// 0 to [`MAX_PRIORITY`].
    pub score: i64,
}

/// kube-scheduler's `ExtenderBindingArgs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderBindingArgs {
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Node chosen.
    pub node: String,
}

/// kube-scheduler's `ExtenderBindingResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// Empty on success.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Where the policy put a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The service's id.
    pub id: JobId,
    /// Status.
    pub status: JobStatus,
    /// Placement epoch.
    pub epoch: u64,
    /// Node of each rank (ring order).
    pub workers: Vec<String>,
    /// Why rejected or last preempted.
    pub reason: Option<String>,
}

/// The answer a pod waiting at bind gets.
type Reply = oneshot::Sender<Result<(), String>>;

/// Why a job was not submitted to the service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSubmitted {
    /// It waits for a job of its AppGroup to start.
    #[error("job {job} waits for {dependency} to start (AppGroup)")]
    Waiting {
        /// The job.
        job: String,
        /// The job it depends on.
        dependency: String,
    },
    /// The service refused it.
    #[error("the service refused job {job}: {reason}")]
    Refused {
        /// The job.
        job: String,
        /// The service's answer.
        reason: String,
    },
    /// The service's core has stopped.
    #[error("the service's core has stopped")]
    Stopped,
}

/// Where a pod of a placed job stands.
enum SlotState {
    /// Given a rank at filter time (kube-scheduler filters the next pod
    /// before the previous one reaches bind, so ranks are handed out here).
    Assigned,
    /// At bind, waiting for the rest of its gang.
    Held(Reply),
    /// Bound on the API server.
    Bound,
}

/// One pod's rank in its job's ring.
struct Slot {
    pod: PodRef,
    rank: usize,
    state: SlotState,
    since: Instant,
}

/// The pods of one job's current placement.
struct Gang {
    epoch: u64,
    slots: Vec<Slot>,
    /// Set when the first pod reaches bind: the group time-out.
    deadline: Option<Instant>,
}

impl Gang {
    /// Answers every held pod with `why` and forgets every slot not bound.
    fn release(&mut self, why: &str) {
        for slot in std::mem::take(&mut self.slots) {
            match slot.state {
                SlotState::Bound => self.slots.push(slot),
                SlotState::Held(reply) => {
                    let _ = reply.send(Err(why.to_string()));
                }
                SlotState::Assigned => {}
            }
        }
        self.deadline = None;
    }
}

/// What the extender and the controller share.
pub struct Shared {
    /// The service's core.
    pub core: Handle,
    /// The API server.
    pub kube: kube::Client,
    /// Policy name (for messages).
    pub policy: String,
    /// A gang incomplete this long after its first pod reached bind is
    /// released; a rank given at filter time to a pod that never reaches
    /// bind is taken back after twice this.
    pub group_timeout: Duration,
    /// Pods seen in filter or by the controller, by UID: (pod, job key).
    pods: Mutex<HashMap<String, (PodRef, String)>>,
    gangs: Mutex<HashMap<String, Gang>>,
    /// Per job key: jobs it waits for (AppGroup dependencies), set by the controller.
    pub waits_for: Mutex<HashMap<String, Vec<String>>>,
}

/// Locks a mutex, taking the data even if a holder panicked (the state is
/// plain data, valid after every statement).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// State around a running core.
    pub fn new(core: Handle, kube: kube::Client, policy: String, group_timeout: Duration) -> Arc<Self> {
        Arc::new(Shared {
            core,
            kube,
            policy,
            group_timeout,
            pods: Mutex::default(),
            gangs: Mutex::default(),
            waits_for: Mutex::default(),
        })
    }

    /// Where the policy put the job `key`, if the service knows it.
    pub async fn placement(&self, key: &str) -> Option<Placement> {
        self.placements(vec![key.to_string()]).await.into_iter().next().flatten()
    }

    /// [`Shared::placement`] of many jobs in one round trip to the core.
    /// O(keys + their workers).
    pub async fn placements(&self, keys: Vec<String>) -> Vec<Option<Placement>> {
        let n = keys.len();
        self.core
            .call(move |core| {
                keys.iter()
                    .map(|key| {
                        let id = core.ledger.job_by_name(None, key)?;
                        let j = &core.ledger.jobs()[id];
                        let names = &core.ledger.topology().hosts;
                        Some(Placement {
                            id,
                            status: j.status,
                            epoch: j.epoch,
                            workers: j.workers.iter().map(|&h| names[h].name.clone()).collect(),
                            reason: j.reason.clone(),
                        })
                    })
                    .collect()
            })
            .await
            .unwrap_or_else(|_| vec![None; n])
    }

    /// Submits a job unless it waits for AppGroup dependencies not yet
    /// started. Idempotent (the service keys jobs by name). Returns why it
    /// is not submitted, if it is not.
    pub async fn submit(&self, spec: orrery_model::JobSpec) -> Result<(), NotSubmitted> {
        let waits: Vec<String> = lock(&self.waits_for).get(&spec.id).cloned().unwrap_or_default();
        for dep in &waits {
            let started = self.placement(dep).await.is_some_and(|p| p.status != JobStatus::Queued);
            if !started {
                return Err(NotSubmitted::Waiting { job: spec.id.clone(), dependency: dep.clone() });
            }
        }
        let job = spec.id.clone();
        match self
            .core
            .call(move |core| core.submit(spec, &orrery_serve::auth::Caller::Component("k8s-extender")))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(f)) => Err(NotSubmitted::Refused { job, reason: format!("{f:?}") }),
            Err(_) => Err(NotSubmitted::Stopped),
        }
    }

    /// Remembers a pod's job (the bind call names only the pod).
    pub fn remember(&self, pod: &Pod) {
        if let Some(key) = job_key(pod) {
            let r = pod_ref(pod);
            lock(&self.pods).insert(r.uid.clone(), (r, key));
        }
    }

    /// Forgets a deleted pod, and the rank it had unless it was bound.
    pub fn forget(&self, uid: &str) {
        let Some((_, key)) = lock(&self.pods).remove(uid) else { return };
        if let Some(g) = lock(&self.gangs).get_mut(&key) {
            g.slots.retain(|s| s.pod.uid != uid || matches!(s.state, SlotState::Bound));
        }
    }

    /// The epoch a job's bound pods were bound in, and each bound pod's rank.
    pub fn bound(&self, key: &str) -> Option<(u64, BTreeMap<PodRef, usize>)> {
        let gangs = lock(&self.gangs);
        let g = gangs.get(key)?;
        let ranks: BTreeMap<PodRef, usize> =
            g.slots.iter().filter(|s| matches!(s.state, SlotState::Bound)).map(|s| (s.pod.clone(), s.rank)).collect();
        (!ranks.is_empty()).then_some((g.epoch, ranks))
    }

    /// Records a pod found bound (by its annotations) that this process did
    /// not bind: after a restart, so its rank is not handed out again.
    pub fn adopt_bound(&self, key: &str, epoch: u64, pod: &PodRef, rank: usize) {
        let mut gangs = lock(&self.gangs);
        let gang = gangs.entry(key.to_string()).or_insert_with(|| Gang { epoch, slots: Vec::new(), deadline: None });
        if gang.epoch != epoch || gang.slots.iter().any(|s| s.pod.uid == pod.uid || s.rank == rank) {
            return;
        }
        gang.slots.push(Slot { pod: pod.clone(), rank, state: SlotState::Bound, since: Instant::now() });
    }

    /// The node of `pod`'s rank, giving it a free rank on one of `candidates`
    /// if it has none (or its rank's node is no longer a candidate and it is
    /// not yet at bind). A new placement epoch releases the old gang. Ranks
    /// given long ago to pods that never reached bind are taken back.
    /// O(workers²) at worst, O(workers) typically.
    fn assign(&self, key: &str, p: &Placement, pod: &PodRef, candidates: &[String]) -> Result<String, String> {
        let mut gangs = lock(&self.gangs);
        let gang =
            gangs.entry(key.to_string()).or_insert_with(|| Gang { epoch: p.epoch, slots: Vec::new(), deadline: None });
        if gang.epoch != p.epoch {
            gang.release(&format!("job {key} was placed again"));
            gang.slots.clear();
            gang.epoch = p.epoch;
        }
        let stale = Instant::now().checked_sub(2 * self.group_timeout);
        gang.slots.retain(|s| {
            !(matches!(s.state, SlotState::Assigned) && stale.is_some_and(|t| s.since < t) && s.pod.uid != pod.uid)
        });
        if let Some(i) = gang.slots.iter().position(|s| s.pod.uid == pod.uid) {
            let node = &p.workers[gang.slots[i].rank];
            if candidates.contains(node) || !matches!(gang.slots[i].state, SlotState::Assigned) {
                return Ok(node.clone());
            }
            gang.slots.remove(i);
        }
        let taken: Vec<usize> = gang.slots.iter().map(|s| s.rank).collect();
        let rank = (0..p.workers.len())
            .find(|r| !taken.contains(r) && candidates.contains(&p.workers[*r]))
            .ok_or_else(|| {
                let mut hosts: Vec<&str> = p.workers.iter().map(String::as_str).collect();
                hosts.dedup();
                format!("{} placed job {key} on {}; no rank is left on this node", self.policy, hosts.join(", "))
            })?;
        gang.slots.push(Slot { pod: pod.clone(), rank, state: SlotState::Assigned, since: Instant::now() });
        Ok(p.workers[rank].clone())
    }

    /// The `filter` verb.
    pub async fn filter(&self, args: ExtenderArgs) -> ExtenderFilterResult {
        let candidates = candidates(&args);
        let passed = |names: Vec<String>, failed: BTreeMap<String, String>, unresolvable: BTreeMap<String, String>| {
            let nodes = args.nodes.as_ref().map(|list| {
                let items: Vec<&Node> =
                    list.items.iter().filter(|n| n.metadata.name.as_ref().is_some_and(|m| names.contains(m))).collect();
                serde_json::json!({ "items": items })
            });
            ExtenderFilterResult {
                node_names: args.node_names.as_ref().map(|_| names.clone()),
                nodes,
                failed_nodes: failed,
                failed_and_unresolvable_nodes: unresolvable,
                error: String::new(),
            }
        };
        let all_fail = |why: &str| candidates.iter().map(|n| (n.clone(), why.to_string())).collect();
        let spec = match job_spec(&args.pod) {
            Ok(None) => return passed(candidates.clone(), BTreeMap::new(), BTreeMap::new()),
            Ok(Some(spec)) => spec,
            Err(bad) => return passed(Vec::new(), BTreeMap::new(), all_fail(&bad.to_string())),
        };
        self.remember(&args.pod);
        let key = spec.id.clone();
        let placement = match self.placement(&key).await {
            Some(p) => p,
            None => {
                if let Err(why) = self.submit(spec).await {
                    return passed(Vec::new(), all_fail(&why.to_string()), BTreeMap::new());
                }
                match self.placement(&key).await {
                    Some(p) => p,
                    None => return passed(Vec::new(), all_fail("the service lost the job"), BTreeMap::new()),
                }
            }
        };
        match placement.status {
            JobStatus::Queued => {
                let why = format!("{} has not placed job {key} yet (it waits for GPUs or bandwidth)", self.policy);
                passed(Vec::new(), all_fail(&why), BTreeMap::new())
            }
            JobStatus::Finished | JobStatus::Cancelled | JobStatus::Rejected => {
                let why = format!(
                    "job {key} is {}{}",
                    placement.status.name(),
                    placement.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
                );
                passed(Vec::new(), BTreeMap::new(), all_fail(&why))
            }
            JobStatus::Running | JobStatus::Paused => {
                match self.assign(&key, &placement, &pod_ref(&args.pod), &candidates) {
                    Ok(node) => {
                        let why = format!("{} placed this pod of job {key} on {node}", self.policy);
                        let failed = candidates.iter().filter(|n| **n != node).map(|n| (n.clone(), why.clone()));
                        passed(vec![node.clone()], failed.collect(), BTreeMap::new())
                    }
                    Err(why) => passed(Vec::new(), all_fail(&why), BTreeMap::new()),
                }
            }
        }
    }

    /// The `prioritize` verb.
    pub async fn prioritize(&self, args: ExtenderArgs) -> Vec<HostPriority> {
        let mine = match job_key(&args.pod) {
            Some(key) => {
                let uid = pod_ref(&args.pod).uid;
                let placement = self.placement(&key).await;
                let gangs = lock(&self.gangs);
                placement.zip(gangs.get(&key)).and_then(|(p, g)| {
                    let slot = g.slots.iter().find(|s| s.pod.uid == uid && g.epoch == p.epoch)?;
                    p.workers.get(slot.rank).cloned()
                })
            }
            None => None,
        };
        candidates(&args)
            .into_iter()
            .map(|host| {
                let score = if mine.as_ref() == Some(&host) { MAX_PRIORITY } else { 0 };
                HostPriority { host, score }
            })
            .collect()
    }

    /// The `bind` verb: the gang rule in the module docs.
    pub async fn bind(&self, args: ExtenderBindingArgs) -> ExtenderBindingResult {
        match self.bind_inner(args).await {
            Ok(()) => ExtenderBindingResult::default(),
            Err(error) => {
                tracing::info!("bind refused: {error}");
                ExtenderBindingResult { error }
            }
        }
    }

    async fn bind_inner(&self, args: ExtenderBindingArgs) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &args.pod_namespace);
        let known = lock(&self.pods).get(&args.pod_uid).cloned();
        let (pod, key) = match known {
            Some(k) => k,
            None => {
                let p = pods.get(&args.pod_name).await.map_err(|e| format!("reading pod {}: {e}", args.pod_name))?;
                match job_key(&p) {
                    Some(key) => (pod_ref(&p), key),
                    None => return post_binding(&pods, &pod_ref(&p), &args.node).await,
                }
            }
        };
        let placement = self.placement(&key).await.ok_or_else(|| format!("the service does not know job {key}"))?;
        if !placement.status.is_active() {
            return Err(format!("job {key} is {}, not placed", placement.status.name()));
        }
        let node = self.assign(&key, &placement, &pod, std::slice::from_ref(&args.node))?;
        if node != args.node {
            return Err(format!("{} placed this pod of job {key} on {node}, not {}", self.policy, args.node));
        }
        let (tx, rx) = oneshot::channel();
        let (complete, deadline) = {
            let mut gangs = lock(&self.gangs);
            let gang = gangs.get_mut(&key).ok_or("the gang was released")?;
            let slot = gang.slots.iter_mut().find(|s| s.pod.uid == pod.uid).ok_or("the gang was released")?;
            if !matches!(slot.state, SlotState::Assigned) {
                return Err(format!("pod {} is already at bind or bound", pod.name));
            }
            slot.state = SlotState::Held(tx);
            let deadline = *gang.deadline.get_or_insert_with(|| Instant::now() + self.group_timeout);
            let ready = gang.slots.iter().filter(|s| !matches!(s.state, SlotState::Assigned)).count();
            let complete = (ready >= placement.workers.len()).then(|| {
                let mut held = Vec::new();
                for s in &mut gang.slots {
                    if let SlotState::Held(_) = s.state
                        && let SlotState::Held(reply) = std::mem::replace(&mut s.state, SlotState::Bound)
                    {
                        held.push((s.pod.clone(), s.rank, reply));
                    }
                }
                gang.deadline = None;
                held
            });
            (complete, deadline)
        };
        if let Some(held) = complete {
            self.bind_gang(&key, &placement, held).await;
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(answer) => answer.unwrap_or_else(|_| Err("the group was released".into())),
            Err(_) => {
                // Time-out: the group releases what it held (if still incomplete).
                let why = format!(
                    "job {key}: {{n}} of {} pods reached bind within {:.0} s; the group released what it held",
                    placement.workers.len(),
                    self.group_timeout.as_secs_f64()
                );
                let mut gangs = lock(&self.gangs);
                if let Some(g) = gangs.get_mut(&key) {
                    let n = g.slots.iter().filter(|s| matches!(s.state, SlotState::Held(_))).count();
                    g.release(&why.replace("{n}", &n.to_string()));
                    return Err(why.replace("{n}", &n.to_string()));
                }
                Err("the group was released".into())
            }
        }
    }

    /// Annotates and binds every pod of a complete gang, then answers each;
    /// a pod that could not be bound gives its rank back.
    async fn bind_gang(&self, key: &str, p: &Placement, held: Vec<(PodRef, usize, Reply)>) {
        let mut failed = Vec::new();
        for (pod, rank, reply) in held {
            let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &pod.namespace);
            let patch = serde_json::json!({"metadata": {"annotations": {
                JOB_ID_ANNOTATION: p.id.to_string(),
                RANK_ANNOTATION: rank.to_string(),
                EPOCH_ANNOTATION: p.epoch.to_string(),
            }}});
            let node = &p.workers[rank];
            let result = match pods.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => post_binding(&pods, &pod, node).await,
                Err(e) => Err(format!("annotating pod {}: {e}", pod.name)),
            };
            if result.is_err() {
                failed.push(pod.uid.clone());
            }
            let _ = reply.send(result);
        }
        if !failed.is_empty()
            && let Some(g) = lock(&self.gangs).get_mut(key)
        {
            g.slots.retain(|s| !failed.contains(&s.pod.uid));
        }
        tracing::info!(job = key, failed = failed.len(), "gang bound");
    }
}

/// Candidate node names of a filter or prioritize call.
fn candidates(args: &ExtenderArgs) -> Vec<String> {
    match (&args.node_names, &args.nodes) {
        (Some(names), _) => names.clone(),
        (None, Some(list)) => list.items.iter().filter_map(|n| n.metadata.name.clone()).collect(),
        (None, None) => Vec::new(),
    }
}

/// `POST pods/{name}/binding`.
async fn post_binding(pods: &Api<Pod>, pod: &PodRef, node: &str) -> Result<(), String> {
    let binding = serde_json::json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    pods.create_subresource::<serde_json::Value, serde_json::Value>(
        "binding",
        &pod.name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("binding pod {} to {node}: {e}", pod.name))
}

/// The extender's routes: `POST /filter`, `/prioritize`, `/bind`, under any prefix.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/filter",
            post(|State(s): State<Arc<Shared>>, Json(a): Json<ExtenderArgs>| async move { Json(s.filter(a).await) }),
        )
        .route(
            "/prioritize",
            post(
                |State(s): State<Arc<Shared>>, Json(a): Json<ExtenderArgs>| async move { Json(s.prioritize(a).await) },
            ),
        )
        .route(
            "/bind",
            post(
                |State(s): State<Arc<Shared>>, Json(a): Json<ExtenderBindingArgs>| async move { Json(s.bind(a).await) },
            ),
        )
        .layer(tower_http::limit::RequestBodyLimitLayer::new(16 << 20))
        .with_state(shared)
}
