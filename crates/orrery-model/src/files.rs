//! Writing output files so that a reader, or a run killed mid-write, never
//! sees half a file (issue 21): the bytes go to a temporary file in the same
//! folder, are flushed to disk, and the file is renamed into place, which is
//! atomic on one file system.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary name for `path`: a hidden sibling that keeps the extension
/// (so writers that pick a format by extension, like image encoders, still
/// can) and carries the process id (so two processes never share one).
pub fn temporary_for(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, format!(".{e}")),
        _ => (name, String::new()),
    };
    path.with_file_name(format!(".{stem}.{}.tmp{ext}", std::process::id()))
}

/// Writes `bytes` to `path` atomically. On error the temporary file is
/// removed and `path` keeps what it held before.
pub fn write_atomic(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    write_through(path, bytes.as_ref(), &mut std::fs::OpenOptions::new())
}

/// [`write_atomic`] for a secret (a token, a private key): the file is
/// made readable by its owner only (mode 0600) before a byte is written.
pub fn write_private(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    write_through(path, bytes.as_ref(), std::fs::OpenOptions::new().mode(0o600))
}

/// Writes `bytes` to [`temporary_for`]`(path)`, made new with `options`,
/// flushes it to disk and renames it into place; on error the temporary
/// file is removed.
fn write_through(path: &Path, bytes: &[u8], options: &mut std::fs::OpenOptions) -> std::io::Result<()> {
    let tmp = temporary_for(path);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = options.write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Renames a file written at [`temporary_for`]`(path)` into place (for
/// writers that need a path rather than bytes).
pub fn commit(path: &Path) -> std::io::Result<()> {
    std::fs::rename(temporary_for(path), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary() {
        let tmp = tempfile::tempdir().expect("temporary folder");
        let dir = tmp.path();
        let p = dir.join("summary.json");
        std::fs::write(&p, "old").expect("write");
        write_atomic(&p, "new and longer").expect("atomic");
        assert_eq!(std::fs::read_to_string(&p).expect("read"), "new and longer");
        let names: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into())
            .collect();
        assert_eq!(names, vec!["summary.json".to_string()]);
        // The temporary keeps the extension for format-sniffing writers.
        assert!(temporary_for(&dir.join("a.png")).to_string_lossy().ends_with(".png"));
        // A folder that does not exist: an error, and nothing left behind.
        assert!(write_atomic(&dir.join("missing").join("x.csv"), "x").is_err());
    }
}
