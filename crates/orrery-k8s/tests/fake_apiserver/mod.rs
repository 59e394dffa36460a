//! A small Kubernetes API server on loopback, enough for kube-rs's client and
//! watcher and for orrery's extender and controller: list (with label
//! selectors) and watch of any resource, get, JSON merge patch (objects and
//! their `status`), delete, and `pods/{name}/binding`. Objects are plain JSON
//! with real resource versions; watch streams are newline-delimited
//! `WatchEvent`s, as the real server sends them.
//!
//! No kube-apiserver can be installed on CI's machines; this stands in for it.
//! What it does not do: admission (schema validation of CRs), field
//! selectors, server-side apply, RBAC.

#![allow(dead_code, missing_docs)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// One change, kept for watchers.
#[derive(Clone)]
struct Event {
    rv: u64,
    collection: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    /// collection (`api/v1/pods`) → (namespace, name) → object.
    objects: BTreeMap<String, BTreeMap<(String, String), Value>>,
    history: Vec<Event>,
    bindings: Vec<(String, String, String)>,
    requests: Vec<String>,
}

/// The server's state, shared with the test.
#[derive(Clone)]
pub struct Fake {
    store: Arc<Mutex<Store>>,
    changed: watch::Sender<u64>,
    pub addr: SocketAddr,
}

fn status(code: u16, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), axum::Json(body)).into_response()
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn kind_of(resource: &str) -> &'static str {
    match resource {
        "pods" => "Pod",
        "nodes" => "Node",
        "nodebandwidths" => "NodeBandwidth",
        "podbandwidths" => "PodBandwidth",
        "appgroups" => "AppGroup",
        "networktopologies" => "NetworkTopology",
        _ => "Unknown",
    }
}

fn labels_match(obj: &Value, selector: Option<&str>) -> bool {
    let Some(sel) = selector.filter(|s| !s.is_empty()) else { return true };
    let labels = &obj["metadata"]["labels"];
    sel.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => labels[k.trim()].as_str() == Some(v.trim_start_matches('=').trim()),
        None => !labels[term.trim()].is_null(),
    })
}

/// A parsed path: collection, namespace (empty for all or cluster-scoped), name, subresource.
struct Target {
    collection: String,
    api_version: String,
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, api_version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (format!("api/{v}"), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (format!("apis/{g}/{v}"), format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (r, None, None),
        [r, n] => (r, Some(n.to_string()), None),
        [r, n, s] => (r, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    Some(Target {
        collection: format!("{prefix}/{resource}"),
        api_version,
        resource: resource.to_string(),
        namespace,
        name,
        sub,
    })
}

impl Fake {
    /// Starts it on 127.0.0.1 with a free port.
    pub async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (changed, _) = watch::channel(0);
        let fake = Fake { store: Arc::default(), changed, addr };
        let app = Router::new().fallback(handle).with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    /// A kube client speaking to it.
    pub fn client(&self) -> kube::Client {
        let url: axum::http::Uri = format!("http://{}", self.addr).parse().expect("url");
        let config = kube::Config::new(url);
        kube::Client::try_from(config).expect("client")
    }

    fn record(&self, s: &mut Store, collection: &str, kind: &'static str, object: Value) {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("").to_string();
        s.history.push(Event { rv: s.rv, collection: collection.into(), namespace, kind, object });
        self.changed.send_replace(s.rv);
    }

    /// Creates or replaces an object (as `kubectl apply` would).
    pub fn put(&self, collection: &str, mut object: Value) {
        let mut s = self.store.lock().expect("store");
        s.rv += 1;
        let rv = s.rv;
        let ns = object["metadata"]["namespace"].as_str().unwrap_or("").to_string();
        let name = object["metadata"]["name"].as_str().expect("name").to_string();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{name}"));
        }
        let old = s.objects.entry(collection.into()).or_default().insert((ns, name), object.clone());
        let kind = if old.is_some() { "MODIFIED" } else { "ADDED" };
        self.record(&mut s, collection, kind, object);
    }

    /// Deletes an object (as `kubectl delete` would).
    pub fn delete(&self, collection: &str, namespace: &str, name: &str) {
        let mut s = self.store.lock().expect("store");
        let removed = s.objects.get_mut(collection).and_then(|m| m.remove(&(namespace.into(), name.into())));
        if let Some(o) = removed {
            s.rv += 1;
            self.record(&mut s, collection, "DELETED", o);
        }
    }

    /// An object as the server holds it.
    pub fn get(&self, collection: &str, namespace: &str, name: &str) -> Option<Value> {
        let s = self.store.lock().expect("store");
        s.objects.get(collection)?.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Bindings made: (namespace, pod, node).
    pub fn bindings(&self) -> Vec<(String, String, String)> {
        self.store.lock().expect("store").bindings.clone()
    }

    /// Requests served, as "METHOD path?query".
    pub fn requests(&self) -> Vec<String> {
        self.store.lock().expect("store").requests.clone()
    }

    /// Waits up to `limit` for `check` to hold.
    pub async fn until(&self, limit: Duration, what: &str, check: impl Fn(&Fake) -> bool) {
        let end = tokio::time::Instant::now() + limit;
        while !check(self) {
            assert!(tokio::time::Instant::now() < end, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn handle(
    State(fake): State<Fake>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    fake.store.lock().expect("store").requests.push(format!("{method} {uri}"));
    let Some(t) = parse(uri.path()) else { return status(404, "NotFound", format!("no route {}", uri.path())) };
    match (method.clone(), &t.name, t.sub.as_deref()) {
        (Method::GET, None, None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            watch_stream(fake, t, q).await
        }
        (Method::GET, None, None) => {
            let s = fake.store.lock().expect("store");
            let items: Vec<Value> = s
                .objects
                .get(&t.collection)
                .map(|m| {
                    m.iter()
                        .filter(|((ns, _), _)| t.namespace.as_ref().is_none_or(|want| want == ns))
                        .map(|(_, o)| o.clone())
                        .filter(|o| labels_match(o, q.get("labelSelector").map(String::as_str)))
                        .collect()
                })
                .unwrap_or_default();
            axum::Json(json!({"apiVersion": t.api_version, "kind": format!("{}List", kind_of(&t.resource)),
                "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
            .into_response()
        }
        (Method::GET, Some(name), None) => match fake.get(&t.collection, t.namespace.as_deref().unwrap_or(""), name) {
            Some(o) => axum::Json(o).into_response(),
            None => status(404, "NotFound", format!("{} {name:?} not found", t.resource)),
        },
        (Method::PATCH, Some(name), sub) => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "patch is not JSON".into());
            };
            let ns = t.namespace.clone().unwrap_or_default();
            let Some(mut obj) = fake.get(&t.collection, &ns, name) else {
                return status(404, "NotFound", format!("{} {name:?} not found", t.resource));
            };
            match sub {
                Some("status") => merge(&mut obj, &json!({"status": patch["status"].clone()})),
                None => {
                    let mut p = patch.clone();
                    if let Some(m) = p.as_object_mut() {
                        m.remove("status");
                    }
                    merge(&mut obj, &p);
                }
                Some(other) => return status(404, "NotFound", format!("no subresource {other}")),
            }
            fake.put(&t.collection, obj);
            axum::Json(fake.get(&t.collection, &ns, name)).into_response()
        }
        (Method::POST, Some(name), Some("binding")) => {
            let Ok(binding) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "binding is not JSON".into());
            };
            let ns = t.namespace.clone().unwrap_or_default();
            let Some(mut pod) = fake.get(&t.collection, &ns, name) else {
                return status(404, "NotFound", format!("pod {name:?} not found"));
            };
            if !pod["spec"]["nodeName"].is_null() {
                return status(409, "Conflict", format!("pod {name} is already assigned to a node"));
            }
            let Some(node) = binding["target"]["name"].as_str() else {
                return status(422, "Invalid", "binding.target.name is required".into());
            };
            pod["spec"]["nodeName"] = json!(node);
            fake.store.lock().expect("store").bindings.push((ns.clone(), name.clone(), node.to_string()));
            fake.put(&t.collection, pod);
            (StatusCode::CREATED, axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})))
                .into_response()
        }
        (Method::DELETE, Some(name), None) => {
            let ns = t.namespace.clone().unwrap_or_default();
            let mut s = fake.store.lock().expect("store");
            let removed = s.objects.get_mut(&t.collection).and_then(|m| m.remove(&(ns, name.clone())));
            match removed {
                Some(o) => {
                    s.rv += 1;
                    fake.record(&mut s, &t.collection, "DELETED", o.clone());
                    axum::Json(o).into_response()
                }
                None => status(404, "NotFound", format!("{} {name:?} not found", t.resource)),
            }
        }
        _ => status(405, "MethodNotAllowed", format!("{method} {}", uri.path())),
    }
}

/// A watch: every event after `resourceVersion` that matches, then new ones
/// as they come, until `timeoutSeconds`.
async fn watch_stream(fake: Fake, t: Target, q: HashMap<String, String>) -> Response {
    let since: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let timeout = q.get("timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(290u64);
    let end = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let selector = q.get("labelSelector").cloned();
    let rx = fake.changed.subscribe();
    let stream = futures::stream::unfold((since, rx), move |(since, mut rx)| {
        let fake = fake.clone();
        let selector = selector.clone();
        let collection = t.collection.clone();
        let namespace = t.namespace.clone();
        async move {
            loop {
                let (batch, last) = {
                    let s = fake.store.lock().expect("store");
                    let events: Vec<&Event> = s
                        .history
                        .iter()
                        .filter(|e| e.rv > since && e.collection == collection)
                        .filter(|e| namespace.as_ref().is_none_or(|n| *n == e.namespace))
                        .filter(|e| labels_match(&e.object, selector.as_deref()))
                        .collect();
                    let mut text = String::new();
                    for e in &events {
                        text.push_str(&json!({"type": e.kind, "object": e.object}).to_string());
                        text.push('\n');
                    }
                    (text, s.rv)
                };
                if !batch.is_empty() {
                    return Some((Ok::<Bytes, std::io::Error>(Bytes::from(batch)), (last, rx)));
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return None },
                    _ = tokio::time::sleep_until(end) => return None,
                }
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| status(500, "InternalError", "stream".into()))
}
