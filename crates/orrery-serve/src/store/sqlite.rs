//! The SQLite engine (the default): one file in WAL mode with
//! `synchronous = FULL` (the module above says why).

use super::{Batch, JobRow, Loaded, SCHEMA_VERSION};
use crate::api::{LogEntry, Logged};
use anyhow::{Context, Result, bail};
use orrery_model::JobSpec;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::time::{Duration, Instant};

/// The SQLite database.
pub struct SqliteStore {
    conn: Connection,
    pub(super) path: std::path::PathBuf,
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
            if jobs.last().is_some_and(|j: &JobRow| j.id as i64 >= id) || id < 0 {
                bail!("jobs table: id {id} out of sequence (ids increase from 0)");
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
                    // Unique per tenant: `TENANT/ID` (an untenanted job's is its id).
                    j.spec.qualified_id(),
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
            // Expired jobs: O((jobs + entries) · log n) by primary key.
            let mut forget_job = tx.prepare_cached("DELETE FROM jobs WHERE id = ?1")?;
            for &id in &batch.forget_jobs {
                forget_job.execute([id as i64])?;
            }
            let mut forget_entry = tx.prepare_cached("DELETE FROM log WHERE seq = ?1")?;
            for &seq in &batch.forget_log {
                forget_entry.execute([seq as i64])?;
            }
        }
        tx.commit()?;
        Ok(t.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, suite};

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
        let dir = tempfile::tempdir().expect("tempdir");
        suite::expired_jobs_leave_no_row_and_no_entry(&mut sqlite(dir.path()));
    }
}
