//! The durable store. Two engines keep the same three things: `meta` (the
//! cluster clock's zero, topology, format version), `jobs` (accepted specs
//! and reported progress) and `log` (every decision and driver event, by
//! sequence number). The state in force is the fold of `log` over the jobs
//! ([`crate::ledger::Ledger::replay`]). Writes come in batches from the core
//! thread (group commit).
//!
//! - [`SqliteStore`], the default: one SQLite file (rusqlite, bundled) in WAL
//!   mode with `synchronous = FULL`: a transaction is on disk (the WAL
//!   fsynced) when `COMMIT` returns, so it survives a crash of the process
//!   *and* of the machine; one fsync for every job and decision of a batch.
//! - [`EtcdStore`] (`--store etcd://...`): the same rows in
//!   etcd, committed to a quorum of its members, each write guarded by the
//!   leader's fence ([`crate::election`]).

mod etcd;
mod sqlite;

pub use etcd::{EtcdStore, Fence, Followed, testing};
pub use sqlite::SqliteStore;

use crate::api::LogEntry;
use anyhow::Result;
use orrery_model::JobSpec;
use std::time::Duration;

/// Format version of the stored rows (both engines).
pub const SCHEMA_VERSION: &str = "1";

/// A job row.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// Id.
    pub id: usize,
    /// Spec (its `arrival_s` is the acceptance time).
    pub spec: JobSpec,
    /// Cluster-clock seconds it was accepted.
    pub submitted_s: f64,
    /// Iterations reported.
    pub iterations_done: u64,
}

/// Everything one group commit writes.
#[derive(Debug, Default)]
pub struct Batch {
    /// New jobs.
    pub jobs: Vec<JobRow>,
    /// (job, iterations done) updates; the last per job wins.
    pub progress: Vec<(usize, u64)>,
    /// New log entries, in sequence order.
    pub log: Vec<LogEntry>,
    /// Jobs that expired: their rows and progress are deleted (after the
    /// writes above, so a crash between leaves rows, never a hole).
    pub forget_jobs: Vec<usize>,
    /// Log entries deleted with them, in sequence order.
    pub forget_log: Vec<u64>,
}

impl Batch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.progress.is_empty()
            && self.log.is_empty()
            && self.forget_jobs.is_empty()
            && self.forget_log.is_empty()
    }
}

/// What a restart reads back.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Unix ms of cluster-clock zero, if the store is not new.
    pub epoch_unix_ms: Option<i64>,
    /// Topology the store was made for.
    pub topology: Option<String>,
    /// Jobs held, in id order (ids of expired jobs are missing).
    pub jobs: Vec<JobRow>,
    /// The log, in order.
    pub log: Vec<LogEntry>,
}

/// The store the core thread writes to.
pub enum Store {
    /// One SQLite file.
    Sqlite(SqliteStore),
    /// etcd, fenced by the leader's key.
    Etcd(EtcdStore),
}

impl Store {
    /// Reads everything back. O(jobs + log).
    pub fn load(&self) -> Result<Loaded> {
        match self {
            Store::Sqlite(s) => s.load(),
            Store::Etcd(s) => s.load(),
        }
    }

    /// Records the cluster clock's zero and the topology of a new store.
    pub fn init(&mut self, epoch_unix_ms: i64, topology: &str) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.init(epoch_unix_ms, topology),
            Store::Etcd(s) => s.init(epoch_unix_ms, topology),
        }
    }

    /// Log entries with `seq > since`, at most `limit`.
    pub fn log_since(&self, since: u64, limit: usize) -> Result<Vec<LogEntry>> {
        match self {
            Store::Sqlite(s) => s.log_since(since, limit),
            Store::Etcd(s) => s.log_since(since, limit),
        }
    }

    /// Writes a batch; returns how long the commit took.
    pub fn write(&mut self, batch: &Batch) -> Result<Duration> {
        match self {
            Store::Sqlite(s) => s.write(batch),
            Store::Etcd(s) => s.write(batch),
        }
    }

    /// What the store is, for logs: the file or the etcd members.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path.display().to_string(),
            Store::Etcd(s) => s.describe(),
        }
    }
}

/// The store suite: what every engine must do, run on SQLite here and on
/// a real 3-member etcd in `etcd`'s tests.
#[cfg(test)]
pub(crate) mod suite {
    use super::*;
    use crate::api::{DriverEvent, Logged};
    use orrery_model::Work;
    use orrery_policy::Decision;

    fn job(id: usize, name: &str) -> JobRow {
        let spec = JobSpec::new(name, "vgg16", 32, 2, Work::Iterations(10), 0.5);
        JobRow { id, spec, submitted_s: 0.5 + id as f64, iterations_done: 0 }
    }

    fn entry(seq: u64, job: usize) -> LogEntry {
        LogEntry {
            seq,
            at_s: seq as f64 / 4.0,
            source: "policy".into(),
            entry: Logged::Decision(Decision::Place { job, hosts: vec![(0, 1), (1, 1)] }),
        }
    }

    /// A batch reads back after reopening: meta, jobs in id order with their
    /// last progress, the log in order, and `log_since` pages.
    pub fn a_batch_reads_back_after_reopening(open: &mut dyn FnMut() -> Store) {
        {
            let mut s = open();
            assert!(s.load().expect("load").epoch_unix_ms.is_none(), "a new store has no clock");
            s.init(1_700_000_000_000, "demo").expect("init");
            let batch = Batch {
                jobs: vec![job(0, "a"), job(1, "b")],
                progress: vec![(0, 3), (0, 5)],
                log: vec![entry(1, 0)],
                ..Batch::default()
            };
            s.write(&batch).expect("write");
            let more = Batch {
                jobs: vec![job(2, "c")],
                progress: vec![(1, 2)],
                log: vec![
                    entry(2, 1),
                    LogEntry {
                        seq: 3,
                        at_s: 1.0,
                        source: "driver".into(),
                        entry: Logged::Event(DriverEvent::Finished { job: 0 }),
                    },
                ],
                ..Batch::default()
            };
            s.write(&more).expect("write");
            s.write(&Batch::default()).expect("an empty batch");
        }
        let s = open();
        let l = s.load().expect("load");
        assert_eq!(l.epoch_unix_ms, Some(1_700_000_000_000));
        assert_eq!(l.topology.as_deref(), Some("demo"));
        let names: Vec<&str> = l.jobs.iter().map(|j| j.spec.id.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let done: Vec<u64> = l.jobs.iter().map(|j| j.iterations_done).collect();
        assert_eq!(done, [5, 2, 0], "the last progress of each job wins");
        assert_eq!(l.jobs[2].submitted_s, 2.5);
        let seqs: Vec<u64> = l.log.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(l.log[0], entry(1, 0));
        assert_eq!(l.log[2].entry, Logged::Event(DriverEvent::Finished { job: 0 }));
        let page: Vec<u64> = s.log_since(1, 1).expect("since").iter().map(|e| e.seq).collect();
        assert_eq!(page, [2]);
        assert_eq!(s.log_since(1, 10).expect("since").len(), 2);
        assert!(s.log_since(3, 10).expect("since").is_empty());
    }

    /// A thousand jobs and log entries in one batch (a burst of
    /// submissions) come back whole and in order.
    pub fn a_large_batch_reads_back_whole(open: &mut dyn FnMut() -> Store) {
        let mut s = open();
        s.init(1, "demo").expect("init");
        let n = 1_000;
        let batch = Batch {
            jobs: (0..n).map(|i| job(i, &format!("job-{i:04}"))).collect(),
            progress: (0..n).map(|i| (i, i as u64)).collect(),
            log: (1..=n as u64).map(|q| entry(q, q as usize - 1)).collect(),
            ..Batch::default()
        };
        s.write(&batch).expect("write");
        let l = open().load().expect("load");
        assert_eq!(l.jobs.len(), n);
        assert!(l.jobs.iter().enumerate().all(|(i, j)| j.id == i && j.iterations_done == i as u64));
        assert_eq!(l.log.len(), n);
        assert!(l.log.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
    }

    /// Expired jobs lose their rows, progress and log entries, however
    /// their batches were grouped; what is held reads back whole, and ids
    /// and seqs keep their gaps.
    pub fn expired_jobs_leave_no_row_and_no_entry(open: &mut dyn FnMut() -> Store) {
        let ids = |l: &Loaded| l.jobs.iter().map(|j| j.id).collect::<Vec<_>>();
        let seqs = |l: &[LogEntry]| l.iter().map(|e| e.seq).collect::<Vec<_>>();
        {
            let mut s = open();
            s.init(1, "demo").expect("init");
            let names = ["a", "b", "c", "d", "e"];
            let first = Batch {
                jobs: (0..5).map(|i| job(i, names[i])).collect(),
                progress: (0..5).map(|i| (i, 10 + i as u64)).collect(),
                log: (1..=5).map(|q| entry(q, q as usize - 1)).collect(),
                ..Batch::default()
            };
            s.write(&first).expect("write");
            s.write(&Batch {
                log: vec![entry(6, 4)],
                forget_jobs: vec![1, 3],
                forget_log: vec![2, 4],
                ..Batch::default()
            })
            .expect("forget two");
        }
        let l = open().load().expect("load");
        assert_eq!(ids(&l), [0, 2, 4]);
        assert_eq!(l.jobs.iter().map(|j| j.iterations_done).collect::<Vec<_>>(), [10, 12, 14]);
        assert_eq!(seqs(&l.log), [1, 3, 5, 6]);
        {
            let mut s = open();
            s.load().expect("load");
            s.write(&Batch {
                jobs: vec![job(5, "f")],
                log: vec![entry(7, 5)],
                forget_jobs: vec![0],
                forget_log: vec![1],
                ..Batch::default()
            })
            .expect("forget the first of a batch");
            assert_eq!(seqs(&s.log_since(0, 10).expect("since")), [3, 5, 6, 7]);
            assert_eq!(seqs(&s.log_since(3, 1).expect("since")), [5]);
        }
        let l = open().load().expect("load");
        assert_eq!(ids(&l), [2, 4, 5]);
        assert_eq!(l.jobs.iter().map(|j| j.spec.id.as_str()).collect::<Vec<_>>(), ["c", "e", "f"]);
        assert_eq!(seqs(&l.log), [3, 5, 6, 7]);
    }
}
