//! Readers for public GPU-cluster traces and orrery's own job format, the
//! seeded mapping that gives model-less jobs a model, workload generators,
//! trace statistics, and the model-zoo calibration against measured profiles.
//!
//! Every reader takes the file's text and its name and returns a [`Parsed`]:
//! the jobs it understood plus one [`Diagnostic`] per row it could not, naming
//! the file, line, field, what was expected and what was found. Readers never
//! panic on input and never drop an accepted row because a later one is bad.
//!
//! Architecture invariant: no policy or simulation logic here; the only I/O is
//! [`read_file`] and the `load_*` helpers, everything else works on strings.

pub mod calibration;
pub mod castor;
pub mod diag;
pub mod formats;
pub mod generate;
pub mod inspect;
pub mod interference;
pub mod itermodel;
pub mod llm_cluster;
pub mod machines;
pub mod mapping;

pub use diag::{Diagnostic, Parsed};

/// What went wrong in a generator, sampler, fit or predictor of this crate
/// (a bad row of a trace file is a [`Diagnostic`] instead).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// A parameter out of range, named by its field (`mix.models`, `jobs`).
    #[error("{field}: {problem}")]
    Field {
        /// The field's path.
        field: String,
        /// What was expected and found.
        problem: String,
    },
    /// Too little data for what was asked (a fit, a split, a table).
    #[error("{0}")]
    Data(String),
    /// Bundled data that does not read (a corrupted checkout).
    #[error("{0}")]
    Bundled(String),
    /// The regression library failed.
    #[error("boosted trees: {0}")]
    Model(String),
}

impl TraceError {
    /// A [`TraceError::Field`].
    pub fn field(field: impl Into<String>, problem: impl Into<String>) -> Self {
        TraceError::Field { field: field.into(), problem: problem.into() }
    }
}
pub use formats::{Format, parse, read_file};
