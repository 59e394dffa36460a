//! Which training command of an agent the `crash` fault kills (the
//! processes themselves are watched by [`orrery_serve::history::watch`]).

use orrery_serve::history::watch::ranks;
use std::path::PathBuf;

/// The process group of `pid` (`/proc/PID/stat`'s fifth field).
fn group_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

/// The training commands agent `host` runs, by (job, rank) then pid: each
/// rank's process that is neither its group's leader shell nor a shell of
/// the leader's (its lease watchdog, whose /proc environment still names
/// the agent's socket it unset). The chaos cluster's command is `exec
/// orrery worker`, never a shell. O(processes).
pub fn commands_of(sockets: &[PathBuf], host: usize) -> Vec<u32> {
    let is_shell = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sh");
    let mut found: Vec<((usize, u32), u32)> = ranks(sockets)
        .into_iter()
        .filter(|&(pid, (h, _, _, _))| h == host && group_of(pid).is_some_and(|g| g != pid) && !is_shell(pid))
        .map(|(pid, (_, job, rank, _))| ((job, rank), pid))
        .collect();
    found.sort();
    found.into_iter().map(|(_, pid)| pid).collect()
}
