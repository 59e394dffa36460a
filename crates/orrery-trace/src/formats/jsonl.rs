//! orrery's own job format: one JSON object per line, the fields of
//! [`orrery_model::JobSpec`]. Blank lines and lines starting with `#` are ignored.
//!
//! ```text
//! {"id": "j1", "model": "vgg16", "batch": 32, "workers": 4, "work": {"iterations": 1000}, "arrival_s": 0.0, "priority": "high"}
//! ```

use crate::diag::{At, Parsed};
use orrery_model::{JobSpec, Work};

/// Parses JSON lines.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let mut out = Parsed::default();
    let mut ids = std::collections::HashSet::new();
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
        let problem = if orrery_model::zoo::model(&job.model).is_none() {
            Some(at.field("model", "a model of the zoo (see `orrery zoo`)", &job.model))
        } else if job.workers == 0 {
            Some(at.field("workers", "at least 1", job.workers))
        } else if job.batch == 0 {
            Some(at.field("batch", "at least 1", job.batch))
        } else if !(job.arrival_s.is_finite() && job.arrival_s >= 0.0) {
            Some(at.field("arrival_s", "a non-negative number of seconds", job.arrival_s))
        } else if !(job.gpu_share > 0.0 && job.gpu_share <= 1.0) {
            Some(at.field("gpu_share", "a fraction in (0, 1]", job.gpu_share))
        } else if matches!(job.work, Work::Seconds(s) if !(s.is_finite() && s >= 0.0)) {
            Some(at.field("work", "a non-negative number of seconds", job.work))
        } else if !ids.insert(job.id.clone()) {
            Some(at.field("id", "an id not used on an earlier line", &job.id))
        } else {
            None
        };
        match problem {
            Some(d) => out.errors.push(d),
            None => out.items.push(job),
        }
    }
    out
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
