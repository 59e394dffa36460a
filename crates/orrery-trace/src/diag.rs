//! Diagnostics for bad input: where, what was expected, what was found.

use std::fmt;

/// One problem in an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// File name as given by the caller.
    pub file: String,
    /// 1-based line number (0 when the problem is not tied to a line).
    pub line: u64,
    /// Field (column name) at fault, if any.
    pub field: Option<String>,
    /// What was expected.
    pub expected: String,
    /// What was found.
    pub found: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        write!(f, "expected {}, found {}", self.expected, self.found)
    }
}

impl std::error::Error for Diagnostic {}

/// What a reader understood and what it could not.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<T> {
    /// Accepted items, in file order unless the reader documents otherwise.
    pub items: Vec<T>,
    /// Problems, one per rejected row (or per file-level problem).
    pub errors: Vec<Diagnostic>,
    /// Rows deliberately skipped (e.g. CPU-only pods), with the reason.
    pub skipped: Vec<(u64, String)>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed { items: Vec::new(), errors: Vec::new(), skipped: Vec::new() }
    }
}

impl<T> Parsed<T> {
    /// `Ok(items)` when there were no errors, else the first error.
    pub fn strict(self) -> Result<Vec<T>, Diagnostic> {
        match self.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(self.items),
        }
    }
}

/// Builds diagnostics for one file.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    /// File name.
    pub file: &'a str,
    /// Line.
    pub line: u64,
}

impl At<'_> {
    /// A diagnostic about `field`.
    pub fn field(&self, field: &str, expected: impl Into<String>, found: impl fmt::Debug) -> Diagnostic {
        Diagnostic {
            file: self.file.to_string(),
            line: self.line,
            field: Some(field.to_string()),
            expected: expected.into(),
            found: format!("{found:?}"),
        }
    }

    /// A diagnostic about the whole row.
    pub fn row(&self, expected: impl Into<String>, found: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: self.file.to_string(),
            line: self.line,
            field: None,
            expected: expected.into(),
            found: found.into(),
        }
    }
}
