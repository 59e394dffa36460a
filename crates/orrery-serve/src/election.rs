//! Leader election on etcd for `orrery serve --store etcd://...`, as
//! kube-scheduler's and etcd's own election recipe do it: one key,
//! `PREFIX/leader`, created under a lease by the replica that wins.
//!
//! - **Campaign.** A replica grants itself a lease of `lease_s` and creates
//!   the key in a transaction guarded by "the key does not exist" (its create
//!   revision is 0). The winner's value is its advertised URL; losers read it
//!   (standbys send clients there) and try again when it is gone.
//! - **Term.** The leader renews its lease every `lease_s / 3`. Its term is
//!   fenced by the revision at which it created the key ([`Fence`]): every
//!   write of the store is guarded by "the key's mod revision is still that"
//!   (`store::EtcdStore`), so once the lease lapses (the key is deleted) or another
//!   replica has won, no write of the old leader commits, and a decision
//!   reaches agents only once committed.
//! - **Losing.** The leader also stops on its own when a renewal fails to
//!   arrive before the lease it last confirmed would lapse (a pause, a
//!   partition), measured on its monotonic clock from *before* it sent that
//!   renewal. It exits (status 75, like kube-scheduler when it loses its
//!   lease); its supervisor restarts it as a standby, which rebuilds its state
//!   from etcd if it wins again.

use crate::etcd::{Compare, Etcd, Op};
use crate::store::Fence;
use anyhow::{Context, Result};
use std::time::{Duration, Instant};

/// Exit status of a leader that lost its lease.
pub const LOST_LEADERSHIP_EXIT: i32 = 75;

/// One replica's part in the election.
#[derive(Debug, Clone)]
pub struct Candidate {
    etcd: Etcd,
    key: Vec<u8>,
    me: String,
    lease_s: i64,
}

/// This replica's term as leader.
#[derive(Debug, Clone)]
pub struct Term {
    /// The guard of every write in this term.
    pub fence: Fence,
    /// The lease holding the leader key.
    pub lease: i64,
    /// When this replica may last believe it leads (its monotonic clock).
    pub valid_until: Instant,
}

impl Candidate {
    /// A candidate advertising `me` (the URL clients should use) under
    /// `prefix`, with a lease of `lease_s` seconds (at least 2).
    pub fn new(etcd: Etcd, prefix: &str, me: &str, lease_s: i64) -> Candidate {
        Candidate { etcd, key: format!("{prefix}leader").into_bytes(), me: me.to_string(), lease_s: lease_s.max(2) }
    }

    /// The leader's advertised URL, if there is one now.
    pub async fn leader(&self) -> Result<Option<String>> {
        Ok(self.etcd.get(&self.key).await?.map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    /// Waits until this replica wins. `on_leader` hears each leader seen
    /// meanwhile (for the standby's redirects). Polls the key every 200 ms
    /// while another leads (one small read; a takeover comes within 200 ms
    /// of the lease lapsing); etcd unreachable is retried.
    pub async fn campaign(&self, mut on_leader: impl FnMut(Option<String>)) -> Term {
        let poll = Duration::from_millis(200);
        loop {
            match self.try_win().await {
                Ok(Some(term)) => return term,
                Ok(None) => {}
                Err(e) => tracing::warn!("election: {e:#}"),
            }
            // Another leads: follow it until its key is gone.
            loop {
                match self.leader().await {
                    Ok(None) => break,
                    Ok(Some(l)) => on_leader(Some(l)),
                    Err(e) => {
                        on_leader(None);
                        tracing::warn!("election: reading the leader: {e:#}");
                    }
                }
                tokio::time::sleep(poll).await;
            }
        }
    }

    /// One attempt: Some(term) if this replica created the key.
    async fn try_win(&self) -> Result<Option<Term>> {
        let asked = Instant::now();
        let lease = self.etcd.lease_grant(self.lease_s).await.context("granting a lease")?;
        let put = Op::Put { key: self.key.clone(), value: self.me.clone().into_bytes(), lease };
        let r = self.etcd.txn(&[Compare::CreateRevision(self.key.clone(), 0)], &[put], &[]).await;
        match r {
            Ok(r) if r.succeeded => Ok(Some(Term {
                fence: Fence { key: self.key.clone(), revision: r.revision },
                lease,
                valid_until: asked + Duration::from_secs(self.lease_s as u64),
            })),
            other => {
                // Lost (or unsure): the lease is not needed.
                let _ = self.etcd.lease_revoke(lease).await;
                other.map(|_| None)
            }
        }
    }

    /// Renews the term's lease every `lease_s / 3` and returns when it can no
    /// longer be sure it leads: a renewal refused (the lease lapsed) or none
    /// confirmed before `valid_until`.
    pub async fn hold(&self, mut term: Term) -> String {
        let every = Duration::from_millis((self.lease_s * 1000 / 3) as u64);
        loop {
            let next = Instant::now() + every;
            let sent = Instant::now();
            if sent >= term.valid_until {
                return "no renewal was confirmed before the lease would lapse".into();
            }
            let budget = term.valid_until - sent;
            match tokio::time::timeout(budget, self.etcd.lease_keepalive(term.lease)).await {
                Ok(Ok(ttl)) if ttl > 0 => term.valid_until = sent + Duration::from_secs(ttl as u64),
                Ok(Ok(_)) => return "etcd says the lease has lapsed".into(),
                Ok(Err(e)) => tracing::warn!("election: renewing the lease: {e:#}"),
                Err(_) => return "no renewal was confirmed before the lease would lapse".into(),
            }
            // A pause (SIGSTOP) shows as a sleep that ends past valid_until.
            tokio::time::sleep_until(next.into()).await;
        }
    }

    /// While this replica leads: every `every`, compacts etcd's history to
    /// the revision it had one interval before, as kube-apiserver does
    /// every 5 minutes (`--etcd-compaction-interval`). Each progress report
    /// writes a new version of its job's key, and etcd keeps every version
    /// until compacted, so without this its database and memory grow for
    /// as long as jobs run; an interval's history stays for readers at a
    /// recent revision (a standby reads at the current one). Never returns.
    pub async fn compact_history(&self, every: Duration) {
        let mut previous: Option<i64> = None;
        loop {
            tokio::time::sleep(every).await;
            match self.etcd.revision().await {
                Ok(now) => {
                    if let Some(r) = previous {
                        match self.etcd.compact(r).await {
                            Ok(()) => tracing::info!(revision = r, "compacted etcd's history"),
                            Err(e) => tracing::warn!("compacting etcd's history to {r}: {e:#}"),
                        }
                    }
                    previous = Some(now);
                }
                Err(e) => tracing::warn!("reading etcd's revision to compact: {e:#}"),
            }
        }
    }

    /// Gives the leadership up now (a clean shutdown): the key goes with the lease.
    pub async fn resign(&self, term: &Term) {
        let _ = self.etcd.lease_revoke(term.lease).await;
    }
}
