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
//! - [`crate::etcd_store::EtcdStore`] (`--store etcd://...`): the same rows in
//!   etcd, committed to a quorum of its members, each write guarded by the
//!   leader's fence ([`crate::election`]).

use crate::api::{LogEntry, Logged};
use anyhow::{Context, Result, bail};
use orrery_model::JobSpec;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::time::{Duration, Instant};

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
}

impl Batch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.progress.is_empty() && self.log.is_empty()
    }
}

/// What a restart reads back.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Unix ms of cluster-clock zero, if the store is not new.
    pub epoch_unix_ms: Option<i64>,
    /// Topology the store was made for.
    pub topology: Option<String>,
    /// Jobs by id.
    pub jobs: Vec<JobRow>,
    /// The log, in order.
    pub log: Vec<LogEntry>,
}

/// The store the core thread writes to.
pub enum Store {
    /// One SQLite file.
    Sqlite(SqliteStore),
    /// etcd, fenced by the leader's key.
    Etcd(crate::etcd_store::EtcdStore),
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

/// The SQLite database.
pub struct SqliteStore {
    conn: Connection,
    path: std::path::PathBuf,
}

impl SqliteStore {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let conn = Connection::open(path).with_context(|| format!("opening database {}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            bail!("{}: could not switch the database to WAL mode (got {mode})", path.display());
        }
        conn.execute_batch(
            "PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS jobs (
                 id INTEGER PRIMARY KEY,
                 name TEXT NOT NULL UNIQUE,
                 spec TEXT NOT NULL,
                 submitted_s REAL NOT NULL,
                 iterations_done INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS log (
                 seq INTEGER PRIMARY KEY,
                 at_s REAL NOT NULL,
                 source TEXT NOT NULL,
                 entry TEXT NOT NULL);",
        )
        .with_context(|| format!("creating the schema in {}", path.display()))?;
        let version: Option<String> =
            conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| r.get(0)).optional()?;
        match version.as_deref() {
            None => {
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema', ?1)", [SCHEMA_VERSION])?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(v) => bail!("{}: schema version {v}, this orrery reads {SCHEMA_VERSION}", path.display()),
        }
        Ok(SqliteStore { conn, path: path.to_path_buf() })
    }

    /// Reads everything back. O(jobs + log).
    pub fn load(&self) -> Result<Loaded> {
        let meta = |key: &str| -> Result<Option<String>> {
            Ok(self.conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?)
        };
        let epoch_unix_ms = meta("epoch_unix_ms")?.map(|v| v.parse()).transpose().context("meta epoch_unix_ms")?;
        let topology = meta("topology")?;
        let mut jobs = Vec::new();
        let mut stmt = self.conn.prepare("SELECT id, spec, submitted_s, iterations_done FROM jobs ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, f64>(2)?, r.get::<_, i64>(3)?))
        })?;
        for row in rows {
            let (id, spec, submitted_s, done) = row?;
            let spec: JobSpec = serde_json::from_str(&spec).with_context(|| format!("jobs row {id}: spec"))?;
            if id as usize != jobs.len() {
                bail!("jobs table: id {id} out of sequence (expected {})", jobs.len());
            }
            jobs.push(JobRow { id: id as usize, spec, submitted_s, iterations_done: done.max(0) as u64 });
        }
        let log = self.log_since(0, usize::MAX)?;
        Ok(Loaded { epoch_unix_ms, topology, jobs, log })
    }

    /// Records the cluster clock's zero and the topology of a new store.
    pub fn init(&self, epoch_unix_ms: i64, topology: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('epoch_unix_ms', ?1), ('topology', ?2)",
            params![epoch_unix_ms.to_string(), topology],
        )?;
        Ok(())
    }

    /// Log entries with `seq > since`, at most `limit`. O(log n + limit).
    pub fn log_since(&self, since: u64, limit: usize) -> Result<Vec<LogEntry>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq, at_s, source, entry FROM log WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![since as i64, limit], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at_s, source, entry) = row?;
            let entry: Logged = serde_json::from_str(&entry).with_context(|| format!("log row {seq}"))?;
            out.push(LogEntry { seq: seq as u64, at_s, source, entry });
        }
        Ok(out)
    }

    /// Writes a batch in one transaction; returns how long the commit took.
    pub fn write(&mut self, batch: &Batch) -> Result<Duration> {
        let t = Instant::now();
        let tx = self.conn.transaction()?;
        {
            let mut job = tx.prepare_cached(
                "INSERT INTO jobs (id, name, spec, submitted_s, iterations_done) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for j in &batch.jobs {
                job.execute(params![
                    j.id as i64,
                    j.spec.id,
                    serde_json::to_string(&j.spec)?,
                    j.submitted_s,
                    j.iterations_done as i64
                ])?;
            }
            // The last update of each job in the batch wins: one UPDATE per
            // job, however many of its nodes reported (a 1,000-node fleet
            // sends ~30,000 iteration reports a second in a few hundred
            // batches). O(progress).
            let mut latest: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
            for &(id, done) in &batch.progress {
                latest.insert(id, done);
            }
            let mut progress = tx.prepare_cached("UPDATE jobs SET iterations_done = ?2 WHERE id = ?1")?;
            for (id, done) in latest {
                progress.execute(params![id as i64, done as i64])?;
            }
            let mut log = tx.prepare_cached("INSERT INTO log (seq, at_s, source, entry) VALUES (?1, ?2, ?3, ?4)")?;
            for e in &batch.log {
                log.execute(params![e.seq as i64, e.at_s, e.source, serde_json::to_string(&e.entry)?])?;
            }
        }
        tx.commit()?;
        Ok(t.elapsed())
    }
}

/// The store suite: what every engine must do, run on SQLite here and on
/// a real 3-member etcd in `etcd_store`'s tests.
#[cfg(test)]
pub(crate) mod suite {
    use super::*;
    use crate::api::DriverEvent;
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
            let batch =
                Batch { jobs: vec![job(0, "a"), job(1, "b")], progress: vec![(0, 3), (0, 5)], log: vec![entry(1, 0)] };
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
        };
        s.write(&batch).expect("write");
        let l = open().load().expect("load");
        assert_eq!(l.jobs.len(), n);
        assert!(l.jobs.iter().enumerate().all(|(i, j)| j.id == i && j.iterations_done == i as u64));
        assert_eq!(l.log.len(), n);
        assert!(l.log.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(dir: &Path) -> impl FnMut() -> Store {
        let path = dir.join("orrery.db");
        move || Store::Sqlite(SqliteStore::open(&path).expect("open"))
    }

    #[test]
    fn sqlite_passes_the_store_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        suite::a_batch_reads_back_after_reopening(&mut sqlite(dir.path()));
        let dir = tempfile::tempdir().expect("tempdir");
        suite::a_large_batch_reads_back_whole(&mut sqlite(dir.path()));
    }
}
