//! Sharded runs (`orrery run FILE --shard K/N`, `orrery merge`): an
//! experiment's runs (scenario × seed × policy) cut into N disjoint slices
//! that separate machines run, each writing one shard file, and the merge
//! that puts them back into the summary, tables, figures and report one
//! unsharded run writes.
//!
//! A run's index is its place in the unsharded order (scenario, then seed,
//! then policy); shard K of N takes the runs whose index is K modulo N, so a
//! slice mixes cheap and expensive policies. Runs are seeded on their own,
//! so a run's result does not depend on which shard ran it.
//!
//! A shard file (`shard-K-of-N.cbor`) holds everything `summary.json` leaves
//! out (per-job, per-link and per-iteration rows, the iteration-time sample,
//! the busiest link's rates and circles), in CBOR: self-describing like
//! JSON, but exact for every `f64`, NaN included, so merged results equal
//! unsharded ones bit for bit.

use crate::plot::Ring;
use crate::summary::{Run, Summary, compare};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A slice of an experiment's runs: `index` of `count`, from 0 (as
/// Kubernetes' `JOB_COMPLETION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, 0 to `count - 1`.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl Shard {
    /// Every run: one slice.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether run `run` (its unsharded index) is in this slice.
    pub fn takes(&self, run: usize) -> bool {
        run % self.count == self.index
    }

    /// The file this slice writes: `shard-K-of-N.cbor`.
    pub fn file_name(&self) -> String {
        format!("shard-{}-of-{}.cbor", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `K/N`, with 0 ≤ K < N ≤ 100,000.
    fn from_str(s: &str) -> Result<Shard, String> {
        let expected = || format!("expected K/N with 0 <= K < N (K counts from 0), found {s:?}");
        let (k, n) = s.split_once('/').ok_or_else(expected)?;
        let (index, count): (usize, usize) =
            (k.trim().parse().map_err(|_| expected())?, n.trim().parse().map_err(|_| expected())?);
        if count == 0 || index >= count || count > 100_000 {
            return Err(expected());
        }
        Ok(Shard { index, count })
    }
}

/// Version of the shard file's layout; a merge refuses other versions.
const FORMAT: u32 = 1;

/// One shard file.
#[derive(Debug, Serialize, Deserialize)]
struct ShardFile {
    format: u32,
    /// The orrery that ran it.
    orrery: String,
    /// The experiment file's text and the options that changed it: shards
    /// merge only with shards of the same source.
    source: String,
    index: usize,
    count: usize,
    /// All runs of the experiment, over every shard.
    total_runs: usize,
    experiment: String,
    description: Option<String>,
    paper: Option<String>,
    headline: Option<String>,
    seed: u64,
    baseline: String,
    runs: Vec<ShardRun>,
}

/// A run with what `summary.json` leaves out.
#[derive(Debug, Serialize, Deserialize)]
struct ShardRun {
    /// Its unsharded index.
    index: usize,
    run: Run,
    jobs: Vec<orrery_sim::metrics::JobRow>,
    links: Vec<orrery_sim::metrics::LinkRow>,
    iterations: Vec<crate::summary::IterationRow>,
    iteration_s: Vec<f64>,
    /// The busiest link's rates and circles.
    busiest: Option<BusiestDetail>,
}

/// What `summary.json` leaves out of [`crate::summary::Busiest`].
#[derive(Debug, Serialize, Deserialize)]
struct BusiestDetail {
    steps: Vec<(f64, Vec<f64>)>,
    before: Vec<Ring>,
    after: Vec<Ring>,
}

/// Why shards could not be written or merged; each names its file.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not a shard file of this orrery.
    #[error("{path}: not a shard file of this orrery: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The shards do not make one experiment.
    #[error("{0}")]
    Mismatch(String),
}

/// Writes the shard file of `summary` (the runs of `shard`, at `indices`
/// among `total_runs`) into `dir`; its path. `source` names what was run
/// (the experiment file's text and options).
pub fn write_shard(
    summary: Summary,
    indices: &[usize],
    shard: Shard,
    total_runs: usize,
    source: &str,
    dir: &Path,
) -> Result<PathBuf, ShardError> {
    let runs = summary
        .runs
        .into_iter()
        .zip(indices)
        .map(|(mut run, &index)| {
            let busiest = run.busiest.as_mut().map(|b| BusiestDetail {
                steps: std::mem::take(&mut b.steps),
                before: std::mem::take(&mut b.before),
                after: std::mem::take(&mut b.after),
            });
            ShardRun {
                index,
                jobs: std::mem::take(&mut run.jobs),
                links: std::mem::take(&mut run.links),
                iterations: std::mem::take(&mut run.iterations),
                iteration_s: std::mem::take(&mut run.iteration_s),
                busiest,
                run,
            }
        })
        .collect();
    let file = ShardFile {
        format: FORMAT,
        orrery: env!("CARGO_PKG_VERSION").to_string(),
        source: source.to_string(),
        index: shard.index,
        count: shard.count,
        total_runs,
        experiment: summary.experiment,
        description: summary.description,
        paper: summary.paper,
        headline: summary.headline,
        seed: summary.seed,
        baseline: summary.baseline,
        runs,
    };
    let path = dir.join(shard.file_name());
    let io = |source| ShardError::Io { path: path.clone(), source };
    std::fs::create_dir_all(dir).map_err(|source| ShardError::Io { path: dir.to_path_buf(), source })?;
    let mut bytes = Vec::new();
    ciborium::into_writer(&file, &mut bytes)
        .map_err(|e| ShardError::Format { path: path.clone(), message: e.to_string() })?;
    orrery_model::files::write_atomic(&path, &bytes).map_err(io)?;
    Ok(path)
}

/// The shard files named by `paths`: each a file, or a folder whose
/// `shard-*-of-*.cbor` files are taken (sorted by name).
pub fn shard_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ShardError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|source| ShardError::Io { path: p.clone(), source })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("shard-") && n.ends_with(".cbor"))
                })
                .collect();
            if found.is_empty() {
                return Err(ShardError::Mismatch(format!(
                    "{}: no shard files (shard-K-of-N.cbor, written by `orrery run FILE --shard K/N --out {}`)",
                    p.display(),
                    p.display()
                )));
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// Merges shard files into the summary one unsharded run returns: runs in
/// the unsharded order, the comparison over all of them. Refuses shards of
/// different experiments, a shard given twice and missing shards, naming
/// the files. Time O(R log R) for R runs, plus reading the files.
pub fn merge(files: &[PathBuf]) -> Result<Summary, ShardError> {
    let mut shards: Vec<(PathBuf, ShardFile)> = Vec::new();
    for path in files {
        let bytes = std::fs::read(path).map_err(|source| ShardError::Io { path: path.clone(), source })?;
        let file: ShardFile = ciborium::from_reader(bytes.as_slice())
            .map_err(|e| ShardError::Format { path: path.clone(), message: e.to_string() })?;
        if file.format != FORMAT {
            return Err(ShardError::Format {
                path: path.clone(),
                message: format!("layout {} (orrery {}); this orrery reads layout {FORMAT}", file.format, file.orrery),
            });
        }
        shards.push((path.clone(), file));
    }
    let Some((first_path, first)) = shards.first() else {
        return Err(ShardError::Mismatch("merge: no shard files given".into()));
    };
    let count = first.count;
    let mut seen: Vec<Option<&Path>> = vec![None; count];
    for (path, s) in &shards {
        let differs = if s.source != first.source {
            Some("experiment file or options")
        } else if s.count != count {
            Some("shard count")
        } else if s.total_runs != first.total_runs {
            Some("number of runs")
        } else {
            None
        };
        if let Some(what) = differs {
            return Err(ShardError::Mismatch(format!(
                "{} and {}: shards of different runs (their {what} differ)",
                first_path.display(),
                path.display()
            )));
        }
        match seen.get(s.index) {
            Some(Some(other)) => {
                return Err(ShardError::Mismatch(format!(
                    "shard {} of {count} given twice: {} and {}",
                    s.index,
                    other.display(),
                    path.display()
                )));
            }
            Some(None) => seen[s.index] = Some(path),
            None => {
                return Err(ShardError::Mismatch(format!("{}: shard {} of {count}", path.display(), s.index)));
            }
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_none())
        .map(|(k, _)| Shard { index: k, count }.file_name())
        .collect();
    if !missing.is_empty() {
        return Err(ShardError::Mismatch(format!(
            "{} of {count} shards missing: {} (run `orrery run FILE --shard K/{count}` for each)",
            missing.len(),
            missing.join(", ")
        )));
    }
    let total = first.total_runs;
    // The experiment's head, from the first shard (all agree on the source).
    let mut summary = Summary {
        experiment: first.experiment.clone(),
        description: first.description.clone(),
        paper: first.paper.clone(),
        headline: first.headline.clone(),
        seed: first.seed,
        runs: Vec::new(),
        baseline: first.baseline.clone(),
        comparison: Vec::new(),
    };
    let mut all: Vec<ShardRun> = shards.into_iter().flat_map(|(_, s)| s.runs).collect();
    all.sort_by_key(|r| r.index);
    // Every index once: the shards are disjoint slices of 0..total.
    if all.len() != total || all.iter().enumerate().any(|(k, r)| r.index != k) {
        return Err(ShardError::Mismatch(format!(
            "the shards hold {} runs where the experiment has {total}: a shard file was cut short or edited",
            all.len()
        )));
    }
    let runs: Vec<Run> = all
        .into_iter()
        .map(|r| {
            let mut run = r.run;
            (run.jobs, run.links, run.iterations, run.iteration_s) = (r.jobs, r.links, r.iterations, r.iteration_s);
            if let (Some(b), Some(d)) = (run.busiest.as_mut(), r.busiest) {
                (b.steps, b.before, b.after) = (d.steps, d.before, d.after);
            }
            run
        })
        .collect();
    summary.comparison = compare(&runs, &summary.baseline);
    summary.runs = runs;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_reads_as_k_of_n_from_zero() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!("0/1".parse::<Shard>(), Ok(Shard::WHOLE));
        for bad in ["4/4", "1/0", "-1/3", "1", "a/b", "1/2/3", ""] {
            let e = bad.parse::<Shard>().expect_err(bad);
            assert!(e.starts_with("expected K/N with 0 <= K < N"), "{bad}: {e}");
        }
        // Runs 0..10 over 3 shards: disjoint, and together every run.
        let slices: Vec<Vec<usize>> =
            (0..3).map(|k| (0..10).filter(|&g| Shard { index: k, count: 3 }.takes(g)).collect()).collect();
        assert_eq!(slices, vec![vec![0, 3, 6, 9], vec![1, 4, 7], vec![2, 5, 8]]);
        assert_eq!(Shard { index: 1, count: 3 }.file_name(), "shard-1-of-3.cbor");
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use crate::experiment::parse;

    /// The fields a run measures on the wall clock: they differ between any
    /// two runs of the same thing, sharded or not.
    fn without_timings(summary: &Summary) -> serde_json::Value {
        let mut v = serde_json::to_value(summary).expect("serialises");
        for run in v["runs"].as_array_mut().expect("runs") {
            run["wall_s"] = serde_json::Value::Null;
            run["decisions_s"] = serde_json::Value::Null;
            for path in ["/metrics", "/by_priority/high", "/by_priority/low"] {
                if let Some(m) = run.pointer_mut(path).and_then(|m| m.as_object_mut()) {
                    m.insert("decision_ms_p50".into(), serde_json::Value::Null);
                    m.insert("decision_ms_p99".into(), serde_json::Value::Null);
                }
            }
        }
        v
    }

    /// What summary.json leaves out, per run.
    fn rows(summary: &Summary) -> Vec<String> {
        summary
            .runs
            .iter()
            .map(|r| {
                let b = r.busiest.as_ref().map(|b| format!("{:?} {:?} {:?}", b.steps, b.before, b.after));
                format!("{:?} {:?} {:?} {:?} {b:?}", r.jobs, r.links, r.iterations, r.iteration_s)
            })
            .collect()
    }

    #[test]
    fn merged_shards_equal_one_unsharded_run_field_by_field() {
        // 2 scenarios × 2 seeds × 3 policies = 12 runs in 5 shards (5 does
        // not divide 12, so shards differ in size), with the busiest-link
        // detail the report draws.
        let text = "name = \"sharded\"\nseeds = [1, 2]\npolicies = [\"fifo\", \"themis+cassini\", \"random\"]\n\
                    baseline = \"fifo\"\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\njobs = 10\n\
                    [[scenario]]\nname = \"load=0.6\"\nload = 0.6\n[[scenario]]\nname = \"load=1.2\"\nload = 1.2\n";
        let mut e = parse("sharded.toml", text).expect("valid");
        e.detail = true;
        assert_eq!(e.run_count(), 12);
        let whole = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut sizes = Vec::new();
        for k in (0..5).rev() {
            let shard = Shard { index: k, count: 5 };
            let (part, indices) = e.run_shard(Path::new("."), shard, |_, _, _, _, _| {}).expect("runs");
            assert!(indices.iter().all(|&g| g % 5 == k), "{indices:?}");
            sizes.push(part.runs.len());
            write_shard(part, &indices, shard, 12, text, dir.path()).expect("written");
        }
        assert_eq!(sizes, vec![2, 2, 2, 3, 3]);
        let files = shard_files(&[dir.path().to_path_buf()]).expect("five files");
        assert_eq!(files.len(), 5);
        let merged = merge(&files).expect("merges");
        assert_eq!(without_timings(&merged), without_timings(&whole));
        assert_eq!(rows(&merged), rows(&whole));
        assert!(merged.runs.iter().filter(|r| r.busiest.is_some()).count() >= 1, "the detail is exercised");

        // A missing shard, a shard twice and a shard of another experiment
        // are refused, naming the files.
        let err = merge(&files[..4]).expect_err("one missing").to_string();
        assert_eq!(err, "1 of 5 shards missing: shard-4-of-5.cbor (run `orrery run FILE --shard K/5` for each)");
        let twice = [files.clone(), vec![files[0].clone()]].concat();
        let err = merge(&twice).expect_err("twice").to_string();
        assert!(err.starts_with("shard 0 of 5 given twice: "), "{err}");
        let other = tempfile::tempdir().expect("temp dir");
        let (part, indices) =
            e.run_shard(Path::new("."), Shard { index: 4, count: 5 }, |_, _, _, _, _| {}).expect("runs");
        let odd = write_shard(part, &indices, Shard { index: 4, count: 5 }, 12, "another file", other.path())
            .expect("written");
        let err = merge(&[&files[..4], &[odd]].concat()).expect_err("another source").to_string();
        assert!(err.ends_with("shards of different runs (their experiment file or options differ)"), "{err}");
        let junk = other.path().join("shard-9-of-10.cbor");
        std::fs::write(&junk, b"not cbor").expect("write");
        let err = merge(&[junk]).expect_err("junk").to_string();
        assert!(err.contains("shard-9-of-10.cbor: not a shard file of this orrery"), "{err}");
    }
}
