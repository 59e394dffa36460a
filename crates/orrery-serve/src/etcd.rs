//! A small etcd v3 client over etcd's own JSON gateway (`POST /v3/kv/range`,
//! `/v3/kv/txn`, `/v3/lease/grant`, `/v3/lease/keepalive`,
//! `/v3/lease/revoke`; documented at etcd.io, "gRPC gateway", served by
//! every etcd 3.4+ member on its client port). It speaks HTTP/1.1 and JSON
//! with the reqwest and serde already in the service, so the high-availability
//! store adds no gRPC stack and no `protoc` to the build (the etcd-client
//! crate's tonic and prost would).
//!
//! Keys and values travel base64-encoded and 64-bit integers as strings (the
//! proto3 JSON mapping), and fields at their default value are left out of
//! answers (`succeeded: false`, `TTL: 0`).
//!
//! Every call tries the members in turn, starting with the one that answered
//! last: a member that is down or has lost its quorum is skipped, so losing one
//! member of three is invisible to the caller.

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Where the service keeps its state: `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// Client URLs of the members (`http://HOST:PORT`).
    pub endpoints: Vec<String>,
    /// Key prefix, ending in `/` (default `/orrery/`), so that several
    /// services can share one etcd.
    pub prefix: String,
}

impl std::str::FromStr for EtcdUrl {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let rest = s
            .strip_prefix("etcd://")
            .ok_or_else(|| anyhow!("{s:?}: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]"))?;
        let (hosts, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, format!("/{}/", p.trim_matches('/'))),
            None => (rest, "/orrery/".to_string()),
        };
        if prefix == "//" {
            bail!("{s:?}: the key prefix after the hosts is empty");
        }
        let mut endpoints = Vec::new();
        for h in hosts.split(',') {
            let h = h.trim();
            let ok = h.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                bail!("{s:?}: member {h:?} is not HOST:PORT");
            }
            endpoints.push(format!("http://{h}"));
        }
        Ok(EtcdUrl { endpoints, prefix })
    }
}

/// A key and its value as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
    /// Revision of the last change to the key.
    pub mod_revision: i64,
}

/// Which version of the keys a read sees: all at `revision` (0: the
/// latest), and only keys changed at or after `min_mod_revision` (0: all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Read as of this revision.
    pub revision: i64,
    /// Only keys last changed at this revision or later.
    pub min_mod_revision: i64,
}

/// A comparison in a transaction's guard.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key was last changed at this revision (0: it does not exist).
    ModRevision(Vec<u8>, i64),
    /// The key was created at this revision (0: it does not exist).
    CreateRevision(Vec<u8>, i64),
}

/// An operation of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// Puts a value, under a lease when given (0: none).
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// Lease id, 0 for none.
        lease: i64,
    },
    /// Reads one key.
    Get(Vec<u8>),
    /// Deletes one key.
    Delete(Vec<u8>),
}

/// What a transaction did.
#[derive(Debug, Clone)]
pub struct TxnResult {
    /// Whether the guard held (the success branch ran).
    pub succeeded: bool,
    /// The store's revision after the transaction.
    pub revision: i64,
    /// The keys the branch's `Get`s read, in order.
    pub read: Vec<Kv>,
}

/// An etcd client (cheap to clone; clones share the member rotation).
#[derive(Debug, Clone)]
pub struct Etcd {
    http: reqwest::Client,
    endpoints: Arc<Vec<String>>,
    current: Arc<AtomicUsize>,
}

fn int<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::String(s) => s.parse().map_err(serde::de::Error::custom),
        Value::Number(n) => n.as_i64().ok_or_else(|| serde::de::Error::custom("not an i64")),
        _ => Err(serde::de::Error::custom("expected an integer")),
    }
}

#[derive(Deserialize)]
struct RawKv {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "int")]
    mod_revision: i64,
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default, deserialize_with = "int")]
    revision: i64,
}

impl RawKv {
    fn decode(self) -> Result<Kv> {
        Ok(Kv {
            key: B64.decode(self.key).context("etcd key")?,
            value: B64.decode(self.value).context("etcd value")?,
            mod_revision: self.mod_revision,
        })
    }
}

/// The key after every key starting with `prefix` (etcd's range end for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            *end.last_mut().expect("not empty") += 1;
            return end;
        }
        end.pop();
    }
    vec![0]
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

impl Etcd {
    /// A client of these members (`http://HOST:PORT`). Each request waits at
    /// most `timeout` for one member before trying the next.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd> {
        if endpoints.is_empty() {
            bail!("no etcd member given");
        }
        let http = crate::tls::client_builder(None)?
            .connect_timeout(Duration::from_millis(500).min(timeout))
            .timeout(timeout)
            .build()
            .context("building the etcd HTTP client")?;
        Ok(Etcd { http, endpoints: Arc::new(endpoints.to_vec()), current: Arc::new(AtomicUsize::new(0)) })
    }

    /// Posts to one gateway path, trying each member once, from the last one
    /// that answered. An answer with an error body is returned as an error
    /// without trying others (the cluster refused it, not the member).
    async fn call(&self, path: &str, body: &Value) -> Result<Value> {
        self.call_round(path, body).await?.map_err(|failures| anyhow::anyhow!(failures))
    }

    /// [`Etcd::call`] for a request that is safe to repeat (a read): while no
    /// member answers, it tries the members again after 0.25, 0.5 and 1 s.
    /// After a member dies the others answer "leader changed" until they
    /// have elected a new leader (about a second); etcd's own clients retry
    /// those. Writes are not repeated: one that failed in an election may
    /// still have been committed.
    async fn call_repeatable(&self, path: &str, body: &Value) -> Result<Value> {
        let mut wait = Duration::from_millis(250);
        loop {
            match self.call_round(path, body).await? {
                Ok(v) => return Ok(v),
                Err(failures) if wait > Duration::from_secs(1) => bail!(failures),
                Err(_) => {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
        }
    }

    /// One round of [`Etcd::call`]: the answer, or (inner error) why no
    /// member answered; an outer error is the cluster refusing the request.
    async fn call_round(&self, path: &str, body: &Value) -> Result<std::result::Result<Value, String>> {
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let url = format!("{}{path}", self.endpoints[i]);
            let answer = match self.http.post(&url).json(body).send().await {
                Ok(resp) => resp.json::<Value>().await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(v) => {
                    // A member without quorum answers with "etcdserver: ..."
                    // errors of code 14 (unavailable): try another.
                    let code = v.get("code").and_then(Value::as_i64);
                    if let Some(err) = v.get("error").and_then(Value::as_str) {
                        if code == Some(14) {
                            failures.push(format!("{url}: {err}"));
                            continue;
                        }
                        bail!("etcd {path}: {err}");
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(Ok(v));
                }
                Err(e) => failures.push(format!("{url}: {e}")),
            }
        }
        Ok(Err(format!("no etcd member answered {path}: {}", failures.join("; "))))
    }

    /// Keys in `[key, end)` (or only `key` when `end` is empty), in key order,
    /// at most `limit` (0: all). O(keys returned).
    pub async fn range(&self, key: &[u8], end: &[u8], limit: i64) -> Result<Vec<Kv>> {
        Ok(self.range_at(key, end, limit, &Snapshot::default()).await?.0)
    }

    /// [`Etcd::range`] as of a snapshot; also returns the store's revision
    /// the answer is of.
    pub async fn range_at(&self, key: &[u8], end: &[u8], limit: i64, at: &Snapshot) -> Result<(Vec<Kv>, i64)> {
        let mut body = json!({ "key": b64(key), "limit": limit.to_string() });
        if !end.is_empty() {
            body["range_end"] = json!(b64(end));
        }
        if at.revision > 0 {
            body["revision"] = json!(at.revision.to_string());
        }
        if at.min_mod_revision > 0 {
            body["min_mod_revision"] = json!(at.min_mod_revision.to_string());
        }
        let v = self.call_repeatable("/v3/kv/range", &body).await?;
        let header: Header = serde_json::from_value(v.get("header").cloned().unwrap_or(json!({})))?;
        let kvs: Vec<RawKv> = serde_json::from_value(v.get("kvs").cloned().unwrap_or(json!([])))?;
        Ok((kvs.into_iter().map(RawKv::decode).collect::<Result<_>>()?, header.revision))
    }

    /// The store's current revision.
    pub async fn revision(&self) -> Result<i64> {
        Ok(self.range_at(b"\0", &[], 1, &Snapshot::default()).await?.1)
    }

    /// Every key with this prefix, in key order, read in pages of `page`.
    pub async fn range_prefix(&self, prefix: &[u8], page: i64) -> Result<Vec<Kv>> {
        self.range_prefix_at(prefix, prefix, page, &Snapshot::default()).await
    }

    /// The keys of `[from, end of prefix)` as of a snapshot, in pages of
    /// `page` (all pages read at the snapshot's revision, so they agree).
    pub async fn range_prefix_at(&self, prefix: &[u8], from: &[u8], page: i64, at: &Snapshot) -> Result<Vec<Kv>> {
        let end = prefix_end(prefix);
        let mut out: Vec<Kv> = Vec::new();
        let mut from = from.to_vec();
        loop {
            let got = self.range_at(&from, &end, page, at).await?.0;
            let full = got.len() as i64 == page;
            if let Some(last) = got.last() {
                from = last.key.clone();
                from.push(0);
            }
            out.extend(got);
            if !full {
                return Ok(out);
            }
        }
    }

    /// One key.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Kv>> {
        Ok(self.range(key, &[], 1).await?.into_iter().next())
    }

    /// A transaction: if every comparison holds, `success` runs, else `failure`.
    pub async fn txn(&self, compare: &[Compare], success: &[Op], failure: &[Op]) -> Result<TxnResult> {
        let cmp: Vec<Value> = compare
            .iter()
            .map(|c| match c {
                Compare::ModRevision(k, r) => {
                    json!({"key": b64(k), "target": "MOD", "result": "EQUAL", "mod_revision": r.to_string()})
                }
                Compare::CreateRevision(k, r) => {
                    json!({"key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": r.to_string()})
                }
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<Value> {
            ops.iter()
                .map(|o| match o {
                    Op::Put { key, value, lease } => {
                        json!({"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string()}})
                    }
                    Op::Get(k) => json!({"request_range": {"key": b64(k)}}),
                    Op::Delete(k) => json!({"request_delete_range": {"key": b64(k)}}),
                })
                .collect()
        };
        let body = json!({"compare": cmp, "success": ops(success), "failure": ops(failure)});
        let v = self.call("/v3/kv/txn", &body).await?;
        let header: Header = serde_json::from_value(v.get("header").cloned().unwrap_or(json!({})))?;
        let mut read = Vec::new();
        for r in v.get("responses").and_then(Value::as_array).into_iter().flatten() {
            if let Some(kvs) = r.pointer("/response_range/kvs") {
                let kvs: Vec<RawKv> = serde_json::from_value(kvs.clone())?;
                for kv in kvs {
                    read.push(kv.decode()?);
                }
            }
        }
        Ok(TxnResult {
            succeeded: v.get("succeeded").and_then(Value::as_bool).unwrap_or(false),
            revision: header.revision,
            read,
        })
    }

    /// A new lease of `ttl_s` seconds; returns its id.
    pub async fn lease_grant(&self, ttl_s: i64) -> Result<i64> {
        let v = self.call("/v3/lease/grant", &json!({"TTL": ttl_s.to_string()})).await?;
        let id = v.get("ID").ok_or_else(|| anyhow!("etcd lease grant: no ID in {v}"))?;
        int(id.clone()).map_err(|e| anyhow!("etcd lease grant: {e}"))
    }

    /// Renews a lease; returns its remaining TTL, s (0: it has expired).
    pub async fn lease_keepalive(&self, id: i64) -> Result<i64> {
        let v = self.call("/v3/lease/keepalive", &json!({"ID": id.to_string()})).await?;
        match v.pointer("/result/TTL") {
            Some(ttl) => int(ttl.clone()).map_err(|e| anyhow!("etcd keepalive: {e}")),
            None => Ok(0),
        }
    }

    /// Ends a lease now; its keys are deleted.
    pub async fn lease_revoke(&self, id: i64) -> Result<()> {
        self.call("/v3/lease/revoke", &json!({"ID": id.to_string()})).await?;
        Ok(())
    }

    /// Forgets every key's versions older than `revision` (its current
    /// value stays): etcd keeps each version of a key until compacted, in
    /// its database and in its in-memory index. A revision already
    /// compacted past is no error.
    pub async fn compact(&self, revision: i64) -> Result<()> {
        match self.call("/v3/kv/compaction", &json!({"revision": revision.to_string()})).await {
            Err(e) if format!("{e:#}").contains("compacted") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_members_and_a_prefix() {
        let u: EtcdUrl = "etcd://10.0.0.1:2379,etcd-1.etcd:2379/team-a".parse().expect("valid");
        assert_eq!(u.endpoints, vec!["http://10.0.0.1:2379", "http://etcd-1.etcd:2379"]);
        assert_eq!(u.prefix, "/team-a/");
        assert_eq!("etcd://127.0.0.1:2379".parse::<EtcdUrl>().expect("valid").prefix, "/orrery/");
        let bad = "etcd://127.0.0.1".parse::<EtcdUrl>().expect_err("no port");
        assert!(bad.to_string().contains("\"127.0.0.1\" is not HOST:PORT"), "{bad}");
        assert!("http://127.0.0.1:2379".parse::<EtcdUrl>().is_err());
    }

    #[test]
    fn the_end_of_a_prefix_is_its_successor() {
        assert_eq!(prefix_end(b"/orrery/"), b"/orrery0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
