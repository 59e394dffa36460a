//! Trace formats, sniffing and the shared CSV plumbing.

use crate::diag::{At, Diagnostic, Parsed};
use orrery_model::JobSpec;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

pub mod alibaba;
pub mod gavel;
pub mod jsonl;
pub mod muri;
pub mod philly;
pub mod pollux;
pub mod tiresias;

/// A job-trace format orrery can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Philly jobs as published with Pollux (`timestamp,duration,num_gpus,gpu_time,cluster`).
    Philly,
    /// Gavel's tab-separated trace (7 fields, no header).
    Gavel,
    /// Muri's trace (`job_id,num_gpu,submit_time,iterations,model_name,batch_size,...`).
    Muri,
    /// Pollux evaluation workloads (`name,time,application,num_replicas,batch_size`).
    Pollux,
    /// Tiresias' example trace (`job_id,num_gpu,submit_time,iterations,model_name,duration,interval`).
    Tiresias,
    /// Alibaba PAI v2023 pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,...`).
    AlibabaV2023,
    /// orrery's own format: one JSON job per line.
    Jsonl,
}

impl Format {
    /// All formats, for help texts.
    pub const ALL: [Format; 7] = [
        Format::Philly,
        Format::Gavel,
        Format::Muri,
        Format::Pollux,
        Format::Tiresias,
        Format::AlibabaV2023,
        Format::Jsonl,
    ];

    /// Name as accepted on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Philly => "philly",
            Format::Gavel => "gavel",
            Format::Muri => "muri",
            Format::Pollux => "pollux",
            Format::Tiresias => "tiresias",
            Format::AlibabaV2023 => "alibaba-v2023",
            Format::Jsonl => "jsonl",
        }
    }

    /// Guesses the format from the first line of the text.
    pub fn sniff(text: &str) -> Option<Format> {
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))?
            .trim_start_matches('\u{feff}')
            .trim();
        let header: Vec<String> = first.split(',').map(|s| s.trim().to_ascii_lowercase()).collect();
        let starts = |cols: &[&str]| header.len() >= cols.len() && cols.iter().zip(&header).all(|(a, b)| a == b);
        if first.starts_with('{') {
            Some(Format::Jsonl)
        } else if starts(&["timestamp", "duration", "num_gpus"]) {
            Some(Format::Philly)
        } else if starts(&["job_id", "num_gpu", "submit_time", "iterations", "model_name", "batch_size"]) {
            Some(Format::Muri)
        } else if starts(&["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration"]) {
            Some(Format::Tiresias)
        } else if starts(&["name", "time", "application", "num_replicas", "batch_size"]) {
            Some(Format::Pollux)
        } else if starts(&["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]) {
            Some(Format::AlibabaV2023)
        } else if first.split('\t').count() == 7 {
            Some(Format::Gavel)
        } else {
            None
        }
    }
}

impl FromStr for Format {
    type Err = crate::TraceError;
    fn from_str(s: &str) -> Result<Self, crate::TraceError> {
        Format::ALL.into_iter().find(|f| f.name() == s.trim().to_ascii_lowercase()).ok_or_else(|| {
            let names = Format::ALL.map(Format::name).join(", ");
            crate::TraceError::field("format", format!("unknown format {s:?}; expected one of {names}"))
        })
    }
}

/// Parses `text` (the contents of `file`) in `format`, sniffing it when `None`.
/// `seed` drives the model mapping for traces without model names.
pub fn parse(file: &str, text: &str, format: Option<Format>, seed: u64) -> Parsed<JobSpec> {
    let Some(format) = format.or_else(|| Format::sniff(text)) else {
        let mut p = Parsed::default();
        let first = text.lines().next().unwrap_or("").chars().take(80).collect::<String>();
        p.errors.push(At { file, line: 1 }.row(
            format!(
                "a header of a known trace format ({}); pass --format to choose",
                Format::ALL.map(Format::name).join(", ")
            ),
            format!("{first:?}"),
        ));
        return p;
    };
    match format {
        Format::Philly => philly::parse(file, text, seed),
        Format::Gavel => gavel::parse(file, text),
        Format::Muri => muri::parse(file, text),
        Format::Pollux => pollux::parse(file, text),
        Format::Tiresias => tiresias::parse(file, text),
        Format::AlibabaV2023 => alibaba::parse_pods(file, text, seed),
        Format::Jsonl => jsonl::parse(file, text),
    }
}

/// Reads and parses a file; returns the format used (given or sniffed) with
/// the result. An unreadable file is one diagnostic at line 0.
pub fn read_file(path: &std::path::Path, format: Option<Format>, seed: u64) -> (Option<Format>, Parsed<JobSpec>) {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let format = format.or_else(|| Format::sniff(&text));
            (format, parse(&name, &text, format, seed))
        }
        Err(e) => {
            let mut p = Parsed::default();
            p.errors.push(At { file: &name, line: 0 }.row("a readable UTF-8 text file", e.to_string()));
            (format, p)
        }
    }
}

/// A CSV row with its line number and header, with typed field access.
pub(crate) struct Row<'r> {
    pub at: At<'r>,
    record: &'r csv::StringRecord,
    header: &'r [String],
}

impl<'r> Row<'r> {
    /// The raw text of column `i` (named `name` in messages).
    pub fn text(&self, i: usize) -> Result<&'r str, Diagnostic> {
        let name = self.name(i);
        self.record.get(i).map(str::trim).ok_or_else(|| {
            self.at.field(&name, format!("{} columns", self.header.len()), format!("{} columns", self.record.len()))
        })
    }

    /// The header's name of column `i` ("column N" past a short header).
    fn name(&self, i: usize) -> String {
        self.header.get(i).cloned().unwrap_or_else(|| format!("column {}", i + 1))
    }

    /// Column `i` parsed as `T`; `what` describes the expected value.
    pub fn get<T: FromStr>(&self, i: usize, what: &str) -> Result<T, Diagnostic> {
        let raw = self.text(i)?;
        raw.parse::<T>().map_err(|_| self.at.field(&self.name(i), what, raw))
    }

    /// A finite, non-negative number.
    pub fn non_negative(&self, i: usize) -> Result<f64, Diagnostic> {
        let v: f64 = self.get(i, "a non-negative number")?;
        if v.is_finite() && v >= 0.0 { Ok(v) } else { Err(self.at.field(&self.name(i), "a non-negative number", v)) }
    }

    /// A positive integer.
    pub fn positive(&self, i: usize) -> Result<u32, Diagnostic> {
        let v: u32 = self.get(i, "a positive integer")?;
        if v > 0 { Ok(v) } else { Err(self.at.field(&self.name(i), "a positive integer", v)) }
    }
}

/// Walks a CSV text, calling `f` on every data row; rows for which `f` errs
/// become diagnostics. `header` is used when the file has none (`has_header = false`).
pub(crate) fn for_each_row<T>(
    file: &str,
    text: &str,
    delimiter: u8,
    has_header: bool,
    header: &[&str],
    mut f: impl FnMut(&Row<'_>) -> Result<Option<T>, Diagnostic>,
) -> Parsed<T> {
    let mut out = Parsed::default();
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(has_header)
        .flexible(true)
        // No trace quotes its fields; with quoting on, one stray `"` would
        // swallow every later line into a single field.
        .quoting(false)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let names: Vec<String> = if has_header {
        match rdr.headers() {
            Ok(h) => h.iter().map(|s| s.trim_start_matches('\u{feff}').to_string()).collect(),
            Err(e) => {
                out.errors.push(At { file, line: 1 }.row("a CSV header", e.to_string()));
                return out;
            }
        }
    } else {
        header.iter().map(|s| s.to_string()).collect()
    };
    if has_header && names.len() < header.len() {
        out.errors
            .push(At { file, line: 1 }.row(format!("a header with columns {}", header.join(",")), names.join(",")));
        return out;
    }
    let mut record = csv::StringRecord::new();
    loop {
        let line = rdr.position().line();
        match rdr.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(line, |p| p.line());
                if record.iter().all(|f| f.trim().is_empty()) {
                    continue;
                }
                let at = At { file, line };
                if record.len() < header.len() {
                    out.errors.push(at.row(
                        format!("{} fields ({})", header.len(), header.join(",")),
                        format!("{} fields", record.len()),
                    ));
                    continue;
                }
                let row = Row { at, record: &record, header: &names };
                match f(&row) {
                    Ok(Some(item)) => out.items.push(item),
                    Ok(None) => {}
                    Err(d) => out.errors.push(d),
                }
            }
            Err(e) => {
                let line = e.position().map_or(line, |p| p.line());
                out.errors.push(At { file, line }.row("valid UTF-8 CSV", e.to_string()));
            }
        }
    }
    out
}

/// [`for_each_row`] for a job trace: every job a row gives must pass
/// [`JobSpec::check`] (the same limits as a JSON line) and carry an id no
/// earlier row used; a row that fails becomes a diagnostic naming its line
/// and field, and the rows already accepted stay. O(rows).
pub(crate) fn for_each_job(
    file: &str,
    text: &str,
    delimiter: u8,
    has_header: bool,
    header: &[&str],
    mut f: impl FnMut(&Row<'_>) -> Result<Option<JobSpec>, Diagnostic>,
) -> Parsed<JobSpec> {
    let mut ids = std::collections::HashSet::new();
    for_each_row(file, text, delimiter, has_header, header, |row| {
        let Some(job) = f(row)? else { return Ok(None) };
        if let Err(bad) = job.check() {
            return Err(Diagnostic {
                file: row.at.file.to_string(),
                line: row.at.line,
                field: Some(bad.field.to_string()),
                expected: bad.expected,
                found: bad.found,
            });
        }
        if !ids.insert(job.id.clone()) {
            return Err(row.at.field("id", "an id not used on an earlier line", &job.id));
        }
        Ok(Some(job))
    })
}

/// Resolves a model name from a trace against the zoo.
pub(crate) fn zoo_model(row: &Row<'_>, i: usize) -> Result<&'static orrery_model::ModelSpec, Diagnostic> {
    let raw = row.text(i)?;
    orrery_model::zoo::model(raw)
        .ok_or_else(|| row.at.field(&row.header[i], "a model of the zoo (see `orrery zoo`)", raw))
}
