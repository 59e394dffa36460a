//! How a node's training processes stop when its agent cannot stop them.
//! The agent fences itself (stops its ranks) when the service stops
//! acknowledging its heartbeats, before the service's time-out places the
//! jobs elsewhere. Two cases escape that, and each rank's process group
//! leader ([`RANK_LEADER`]) covers them:
//!
//! * **The agent dies** (SIGKILL included): the leader runs under `setpriv
//!   --pdeathsig USR1` and sends SIGTERM to its group (issue 39).
//! * **The agent is frozen** (SIGSTOP, a stuck process) or starved: it can
//!   neither heartbeat nor fence, while the service places its jobs
//!   elsewhere. Each acknowledged heartbeat renews a **lease**, a file
//!   beside the agent's socket holding the moments the agent's own fence
//!   would fire for that heartbeat (SIGTERM at [`super::FENCE_AT`] of the
//!   service's time-out after it was sent, SIGKILL at
//!   [`super::FENCE_KILL`]). A watchdog in each leader reads it five times
//!   a second and signals the group when a moment passes. Both are on the
//!   boot clock (`/proc/uptime`, centiseconds), which no wall-clock jump
//!   moves. Found by the history checker (`tests/live/faults.rs`): a
//!   frozen agent's ranks ran beside their replacements.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The shell that leads a rank's process group. It runs the command (`$1`)
/// and exits with its status.
///
/// * On SIGUSR1 (the agent's death) it sends SIGTERM to the whole group.
///   The agent's own stops signal the group directly, so a rank gets one
///   SIGTERM either way (a second could interrupt its checkpoint). Not
///   SIGHUP: a shell cannot trap a signal ignored when it started, and an
///   agent under `nohup` passes SIGHUP on ignored.
/// * It outlives SIGTERM (a caught no-op, which its children do not
///   inherit, where an ignored signal they would) until the command has
///   ended and been reaped by it: an orphan's zombie, where the
///   container's init does not reap, would keep the group alive.
/// * With `ORRERY_AGENT_LEASE` set, a watchdog subshell (ignoring SIGTERM)
///   compares the boot clock with the lease's two moments (its `sleep`s
///   without `ORRERY_AGENT_SOCKET`, so they are not taken for the rank's
///   processes, which that variable marks): SIGTERM to the
///   group once past the first, SIGKILL past the second. It ends when the
///   command does (checked first, so a lease file removed under it cannot
///   keep it). No file yet, no action (an agent not yet acknowledged holds
///   no jobs). A file that goes away (its folder removed under a running
///   rank) is a lease no one renews: the watchdog keeps the moments it
///   last read and fires at them. Before, it waited for the file to come
///   back, and the ranks of a torn-down testbed blocked in a collective
///   whose peers had gone ran on for good.
pub(super) const RANK_LEADER: &str = r#"trap : TERM
trap 'kill -TERM 0' USR1
sh -c "$1" & r=$!
w=
if [ -n "$ORRERY_AGENT_LEASE" ]; then
  (trap '' TERM; unset ORRERY_AGENT_SOCKET; t= term= kill=
   while sleep 0.2; do
     kill -0 $r 2>/dev/null || exit 0
     read up _ < /proc/uptime && up=${up%.*}${up#*.} || continue
     if [ -r "$ORRERY_AGENT_LEASE" ] && read a b < "$ORRERY_AGENT_LEASE" && [ -n "$b" ]; then term=$a kill=$b; fi
     [ -n "$kill" ] || continue
     if [ "$up" -ge "$kill" ]; then kill -KILL 0
     elif [ -z "$t" ] && [ "$up" -ge "$term" ]; then t=1; kill -TERM 0
     fi
   done) & w=$!
fi
s=0
while kill -0 $r 2>/dev/null; do wait $r; s=$?; done
[ -n "$w" ] && kill -KILL $w 2>/dev/null
exit $s"#;

/// Whether `setpriv --pdeathsig` (util-linux) runs here; checked once.
pub(super) fn pdeathsig_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let ok = std::process::Command::new("setpriv")
            .args(["--pdeathsig", "USR1", "--", "true"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            tracing::warn!("setpriv --pdeathsig is unavailable: training processes may outlive a killed agent");
        }
        ok
    })
}

/// The lease file of the agent serving `socket`: beside it, `.lease`.
pub(super) fn lease_path(socket: &Path) -> PathBuf {
    socket.with_extension("lease")
}

/// The boot clock (`/proc/uptime`'s first field) in centiseconds, as the
/// leader's watchdog reads it; None where there is no /proc.
pub(super) fn boot_centis() -> Option<i64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let (whole, frac) = text.split_whitespace().next()?.split_once('.')?;
    Some(whole.parse::<i64>().ok()? * 100 + frac.get(..2)?.parse::<i64>().ok()?)
}

/// Renews the lease for a heartbeat sent at boot time `sent` (centiseconds)
/// under a service time-out of `timeout_s`: the file says when to stop
/// (`term_at kill_at`). Written whole and renamed into place, so a
/// watchdog never reads half of it. A lease never moves back.
pub(super) fn renew(path: &Path, sent: i64, timeout_s: f64) {
    let at = |share: f64| sent + (share * timeout_s * 100.0).round() as i64;
    let (term_at, kill_at) = (at(super::FENCE_AT), at(super::FENCE_KILL));
    let older = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse::<i64>().ok()))
        .is_some_and(|old| old > term_at);
    if older {
        return;
    }
    let tmp = path.with_extension("lease.tmp");
    let written = std::fs::write(&tmp, format!("{term_at} {kill_at}\n")).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::warn!("renewing the ranks' lease {}: {e}", path.display());
    }
}

/// Processes an earlier agent on `socket` started that still run (their
/// environment names the socket, a job and a rank, as the history's
/// watcher finds them): a dead agent's ranks stopping on its death signal,
/// or a frozen agent's replaced by this one. O(processes).
pub(super) fn leftover_ranks(socket: &Path) -> Vec<i32> {
    let me = std::process::id();
    crate::history::watch::ranks(&[socket.to_path_buf()])
        .into_iter()
        .filter(|&(pid, _)| pid != me)
        .filter_map(|(pid, _)| i32::try_from(pid).ok())
        .collect()
}

/// Before an agent registers, the ranks an earlier agent on its socket
/// left are stopped (SIGTERM, SIGKILL to what is left after `grace`) and
/// waited for: the service hands this agent, and other hosts, the next
/// placements of their jobs, and no rank may run beside its successor
/// (the service's handover counts on what this agent says it stops, and
/// this agent never knew these). Returns how many there were.
pub(super) async fn stop_leftovers(socket: &Path, grace: Duration) -> usize {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let found = leftover_ranks(socket);
    if found.is_empty() {
        return 0;
    }
    tracing::warn!(
        "{} training processes of an earlier agent on {} still run: stopping them before registering",
        found.len(),
        socket.display()
    );
    for &pid in &found {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let left = leftover_ranks(socket);
        if left.is_empty() {
            return found.len();
        }
        if tokio::time::Instant::now() >= deadline {
            for pid in left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// Runs `cmd` under the leader with a lease, the way the agent does
    /// (its own process group), and returns how long the group lived.
    fn lived(cmd: &str, lease: &str, limit: Duration) -> Duration {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent.lease");
        std::fs::write(&path, lease).expect("lease");
        let t0 = Instant::now();
        let mut child = Command::new("sh")
            .args(["-c", RANK_LEADER, "orrery-rank", cmd])
            .env("ORRERY_AGENT_LEASE", &path)
            .process_group(0)
            .spawn()
            .expect("sh");
        let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        let gone = loop {
            let _ = child.try_wait(); // a zombie leader would count as a member
            if nix::sys::signal::killpg(group, None).is_err() || t0.elapsed() > limit {
                break t0.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Whatever of the group is left (the watchdog, past a leader that
        // took SIGTERM) goes with the test.
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).output();
        let _ = child.wait();
        gone
    }

    #[test]
    fn a_rank_stops_when_its_lease_runs_out_and_not_before() {
        let Some(now) = boot_centis() else {
            eprintln!("skipped: no /proc/uptime");
            return;
        };
        // Lapsed: the group gets SIGTERM at the watchdog's first tick (0.2
        // s; bounds wide for a loaded machine), long before the SIGKILL
        // moment 10 s on or the command's own 30 s.
        let gone = lived("sleep 30", &format!("{} {}\n", now - 1, now + 1000), Duration::from_secs(12));
        assert!(gone < Duration::from_secs(5), "a lapsed lease stopped the rank after {gone:?}");
        // A rank that ignores SIGTERM lives on until the SIGKILL moment, 1 s on.
        let gone = lived("trap '' TERM; sleep 30", &format!("{} {}\n", now - 1, now + 100), Duration::from_secs(12));
        assert!(gone >= Duration::from_millis(800) && gone < Duration::from_secs(6), "killed after {gone:?}");
        // A lease ten seconds ahead lets a short rank finish on its own,
        // with its status, and the watchdog goes with it.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.lease");
        std::fs::write(&path, format!("{} {}\n", now + 1000, now + 1100)).expect("lease");
        let out = Command::new("sh")
            .args(["-c", RANK_LEADER, "orrery-rank", "sleep 0.5; exit 3"])
            .env("ORRERY_AGENT_LEASE", &path)
            .output()
            .expect("sh");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn a_rank_whose_lease_file_is_removed_stops_at_the_moments_last_read() {
        use std::os::unix::process::CommandExt;
        let Some(now) = boot_centis() else {
            eprintln!("skipped: no /proc/uptime");
            return;
        };
        // A lease 1.5 s ahead (SIGKILL 2 s ahead), read at the first tick,
        // then its folder removed: a rank deaf to SIGTERM goes at the
        // SIGKILL moment, not never.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent.lease");
        std::fs::write(&path, format!("{} {}\n", now + 150, now + 200)).expect("lease");
        let t0 = Instant::now();
        let mut child = Command::new("sh")
            .args(["-c", RANK_LEADER, "orrery-rank", "trap '' TERM; sleep 30"])
            .env("ORRERY_AGENT_LEASE", &path)
            .process_group(0)
            .spawn()
            .expect("sh");
        std::thread::sleep(Duration::from_millis(700));
        drop(dir);
        let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        let gone = loop {
            let _ = child.try_wait();
            if nix::sys::signal::killpg(group, None).is_err() || t0.elapsed() > Duration::from_secs(12) {
                break t0.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).output();
        let _ = child.wait();
        assert!(gone >= Duration::from_millis(1500) && gone < Duration::from_secs(8), "killed after {gone:?}");
    }

    #[test]
    fn a_lease_is_renewed_forward_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent.lease");
        renew(&path, 1_000, 2.0);
        // 0.6 and 0.9 of 2 s after 10.00 s: 11.20 and 11.80 s.
        assert_eq!(std::fs::read_to_string(&path).expect("lease"), "1120 1180\n");
        renew(&path, 900, 2.0);
        assert_eq!(std::fs::read_to_string(&path).expect("lease"), "1120 1180\n", "an older heartbeat's ack");
        renew(&path, 1_050, 2.0);
        assert_eq!(std::fs::read_to_string(&path).expect("lease"), "1170 1230\n");
        assert_eq!(lease_path(Path::new("/run/orrery/agent-h0.sock")), Path::new("/run/orrery/agent-h0.lease"));
    }

    /// An agent restarted after a crash finds its predecessor's ranks
    /// still stopping (one takes 0.3 s to checkpoint, one ignores SIGTERM)
    /// and registers only once both are gone.
    #[test]
    fn an_earlier_agents_ranks_are_gone_before_an_agent_registers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agent-h0.sock");
        let rank = |c: &mut Command, socket: &Path| {
            c.env("ORRERY_AGENT_SOCKET", socket).env("ORRERY_JOB", "3").env("ORRERY_RANK", "0");
        };
        let spawn = |cmd: &str| {
            let mut c = Command::new("sh");
            rank(c.args(["-c", cmd]), &socket);
            c.spawn().expect("sh")
        };
        let mut slow = spawn("trap 'sleep 0.3; exit 0' TERM; sleep 30 & wait");
        let mut deaf = spawn("trap '' TERM; sleep 30");
        let other = dir.path().join("agent-h1.sock");
        let mut elsewhere = {
            use std::os::unix::process::CommandExt;
            let mut c = Command::new("sh");
            rank(c.args(["-c", "sleep 30"]).process_group(0), &other);
            c.spawn().expect("sh")
        };
        std::thread::sleep(Duration::from_millis(200));
        assert!(leftover_ranks(&socket).len() >= 2);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let t = std::time::Instant::now();
        let found = rt.block_on(stop_leftovers(&socket, Duration::from_secs(1)));
        let took = t.elapsed();
        assert!(found >= 2, "{found}");
        assert!(leftover_ranks(&socket).is_empty());
        assert!(took >= Duration::from_millis(900), "the deaf one waited for its SIGKILL: {took:?}");
        let _ = (slow.wait(), deaf.wait());
        assert!(!leftover_ranks(&other).is_empty(), "another socket's ranks are not touched");
        let group = nix::unistd::Pid::from_raw(elsewhere.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = elsewhere.wait();
    }
}
