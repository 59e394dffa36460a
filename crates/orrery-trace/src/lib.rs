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
pub mod machines;
pub mod mapping;

pub use diag::{Diagnostic, Parsed};
pub use formats::{Format, parse, read_file};
