//! orrery's own job format: one JSON object per line, the fields of
//! [`orrery_model::JobSpec`]. Blank lines and lines starting with `#` are ignored.
//!
//! ```text
//! {"id": "j1", "model": "vgg16", "batch": 32, "workers": 4, "work": {"iterations": 1000}, "arrival_s": 0.0, "priority": "high"}
//! {"id": "j2", "model": "measured", "workers": 4, "work": {"iterations": 500}, "arrival_s": 5.0,
//!  "shape": {"compute_ms": 120.0, "collective": [{"kind": "ring_all_reduce", "bytes": 5.5e8, "layers": 4}]}}
//! ```
//!
//! A job with a `shape` (its measured iteration) needs no zoo model.

use crate::diag::{At, Parsed};
use orrery_model::JobSpec;

/// Parses JSON lines.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let mut out = Parsed::default();
    let mut ids = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = At { file, line: i as u64 + 1 };
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let job: JobSpec = match serde_json::from_str(l) {
            Ok(j) => j,
            Err(e) => {
                let msg = e.to_string();
                // serde names the field in its message ("missing field `batch`", "unknown field `x`").
                let field = msg.split('`').nth(1).map(str::to_string);
                out.errors.push(crate::Diagnostic {
                    file: file.to_string(),
                    line: at.line,
                    field,
                    expected: "a JSON job object (see `orrery trace --help`)".into(),
                    found: format!("{msg} at column {}", e.column()),
                });
                continue;
            }
        };
        let problem = match validate(&job) {
            Err(bad) => Some(crate::Diagnostic {
                file: file.to_string(),
                line: at.line,
                field: Some(bad.field.to_string()),
                expected: bad.expected,
                found: bad.found,
            }),
            Ok(()) if !ids.insert(job.id.clone()) => Some(at.field("id", "an id not used on an earlier line", &job.id)),
            Ok(()) => None,
        };
        match problem {
            Some(d) => out.errors.push(d),
            None => {
                out.items.push(job);
                lines.push(at.line);
            }
        }
    }
    refuse_cycles(file, &mut out, &lines);
    out
}

/// Refuses the jobs that wait on one another in a cycle of `depends_on`
/// (no order starts them: a driver would hold them forever), each at its
/// line; a dependency on a job not in the file is left to the driver, which
/// may know it. Kahn's algorithm: O(jobs + dependencies).
fn refuse_cycles(file: &str, out: &mut Parsed<JobSpec>, lines: &[u64]) {
    let index: std::collections::HashMap<&str, usize> =
        out.items.iter().enumerate().map(|(i, j)| (j.id.as_str(), i)).collect();
    let n = out.items.len();
    let mut waiting = vec![0usize; n];
    let mut unblocks: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, j) in out.items.iter().enumerate() {
        for d in &j.depends_on {
            if let Some(&k) = index.get(d.as_str()) {
                waiting[i] += 1;
                unblocks[k].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    while let Some(k) = ready.pop() {
        for &i in &unblocks[k] {
            waiting[i] -= 1;
            if waiting[i] == 0 {
                ready.push(i);
            }
        }
    }
    if waiting.iter().all(|&w| w == 0) {
        return;
    }
    let mut kept = Vec::with_capacity(n);
    for (i, job) in std::mem::take(&mut out.items).into_iter().enumerate() {
        if waiting[i] == 0 {
            kept.push(job);
        } else {
            let at = At { file, line: lines[i] };
            out.errors.push(at.field("depends_on", "no cycle of jobs waiting on one another", &job.depends_on));
        }
    }
    out.items = kept;
    out.errors.sort_by_key(|d| d.line);
}

/// A field of a job that is out of range.
pub use orrery_model::job::BadField;

/// Checks one job's fields beyond their JSON types ([`JobSpec::check`]): the
/// rules of a JSONL line, shared with every trace reader, the live service's
/// submit endpoint and an experiment's `[[workload.job]]`.
pub fn validate(job: &JobSpec) -> Result<(), BadField> {
    job.check()
}

/// Writes jobs as JSON lines.
pub fn to_string(jobs: &[JobSpec]) -> String {
    let mut s = String::new();
    for j in jobs {
        s.push_str(&serde_json::to_string(j).unwrap_or_default());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_may_give_its_measured_shape_and_a_bad_one_is_named() {
        let good = r#"{"id": "m", "model": "measured", "workers": 4, "work": {"iterations": 5}, "arrival_s": 0.0, "shape": {"compute_ms": 120.0, "collective": [{"kind": "ring_all_reduce", "bytes": 5.5e8, "layers": 4}]}}"#;
        let bad = good.replace("\"id\": \"m\"", "\"id\": \"n\"").replace("\"layers\": 4", "\"layers\": 0");
        let parsed = parse("jobs.jsonl", &format!("{good}\n{bad}\n"));
        assert_eq!(parsed.items.len(), 1);
        let shape = parsed.items[0].shape.as_ref().expect("shape");
        assert_eq!((shape.compute_ms, shape.collectives[0].layers), (120.0, 4));
        assert_eq!(parsed.errors.len(), 1);
        let e = &parsed.errors[0];
        assert_eq!((e.line, e.field.as_deref(), e.found.as_str()), (2, Some("shape.collective[0].layers"), "0"));
        // Written back, the shape survives.
        assert_eq!(parse("again.jsonl", &to_string(&parsed.items)).items, parsed.items);
    }
}
