//! Turns between tests that must not overlap, as locks on a file in the
//! tests' temporary folder: they hold between processes as between
//! threads (`cargo nextest` runs each test in a process of its own, `cargo
//! test` runs them as threads of one). Used by the testbed's and the live
//! service's tests.

use std::fs::{File, OpenOptions};
use std::path::Path;

/// Waits for a turn on lock file `name`, alone; the turn lasts as long as
/// the returned file.
pub fn take_turn(name: &str) -> File {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    file
}
