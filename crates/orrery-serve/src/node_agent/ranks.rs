//! The training processes an agent runs for the jobs placed on its node:
//! started one per rank in a process group of its own, stopped as an
//! operator expects (SIGTERM, SIGKILL after [`GRACE`]), reaped, and started
//! again after a back-off when one fails while its job is still placed here.

use super::fence::{RANK_LEADER, pdeathsig_available};
use super::{AgentOptions, Shared, State, fence};
use crate::api::Assignment;
use orrery_policy::JobId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a job's training processes have between SIGTERM and SIGKILL:
/// time to finish the iteration in flight and checkpoint (Kubernetes gives
/// pods 30 s; an iteration here is well under a second).
pub const GRACE: Duration = Duration::from_secs(10);

/// Sends `signal` to process group `pgid` (None: only checks that it has a
/// member); whether any process was in it.
fn signal_group(pgid: i32, signal: Option<nix::sys::signal::Signal>) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal).is_ok()
}

/// Stops training processes as an operator expects: SIGTERM to each
/// worker's process group (its command and everything it forked), then
/// SIGKILL to what is left of the group after [`GRACE`]. It returns when
/// every group is empty. Linux frees a pid only when no process uses it as
/// its pid, group or session id, so a group id cannot be reused while any
/// member lives.
pub(super) async fn stop_processes(groups: Vec<Worker>) {
    stop_processes_within(groups, GRACE).await;
}

/// [`stop_processes`] with SIGKILL after `grace`.
pub(super) async fn stop_processes_within(mut groups: Vec<Worker>, grace: Duration) {
    for w in &groups {
        signal_group(w.pgid, Some(nix::sys::signal::Signal::SIGTERM));
    }
    let deadline = tokio::time::Instant::now() + grace;
    while !groups.is_empty() {
        let late = tokio::time::Instant::now() >= deadline;
        groups.retain_mut(|w| {
            if let Some(leader) = w.leader.as_mut()
                && matches!(leader.try_wait(), Ok(Some(_)))
            {
                w.leader = None; // reaped (a zombie would count as a member)
            }
            if late {
                signal_group(w.pgid, Some(nix::sys::signal::Signal::SIGKILL));
            }
            signal_group(w.pgid, None)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One worker's processes: the command the agent started leads its own
/// process group.
pub(super) struct Worker {
    /// The group's id (the leader's pid).
    pgid: i32,
    /// The leader, until reaped.
    leader: Option<tokio::process::Child>,
    /// Its rank in the job, and its place among the job's ranks here.
    rank: u32,
    local: usize,
    /// Its local GPUs (`CUDA_VISIBLE_DEVICES`).
    gpus: Vec<String>,
    /// Times it was started again after failing.
    restarts: u32,
    /// When it starts again, after it failed.
    restart_at: Option<std::time::Instant>,
}

/// Starts one process per worker rank on this node, each on its share of
/// the job's local GPUs (`CUDA_VISIBLE_DEVICES`).
pub(super) fn launch(opts: &AgentOptions, s: &State, a: &Assignment, cmd: &str, gpus: &[usize]) -> Vec<Worker> {
    let per_rank = gpus.len() / a.ranks.len().max(1);
    a.ranks
        .iter()
        .enumerate()
        .filter_map(|(k, &rank)| {
            let mine: Vec<String> =
                gpus.iter().skip(k * per_rank).take(per_rank.max(1)).map(ToString::to_string).collect();
            launch_rank(opts, s, a, cmd, k, rank, mine)
        })
        .collect()
}

/// Starts the process of rank `rank` (the job's `k`-th here) on GPUs `mine`.
fn launch_rank(
    opts: &AgentOptions,
    s: &State,
    a: &Assignment,
    cmd: &str,
    k: usize,
    rank: u32,
    mine: Vec<String>,
) -> Option<Worker> {
    // The group's leader is [`RANK_LEADER`], under `setpriv --pdeathsig
    // USR1` where util-linux has it: when the agent dies (SIGKILL
    // included) the leader gets SIGUSR1 and sends SIGTERM to its whole
    // group (issue 39: no training process outlives its agent). The
    // signal survives the exec of `ip netns exec`, but not a fork, and
    // Debian's dash forks `sh -c CMD`'s command: the leader must pass it on.
    let mut argv: Vec<&str> = Vec::new();
    if pdeathsig_available() {
        argv.extend(["setpriv", "--pdeathsig", "USR1", "--"]);
    }
    if let Some(ns) = &opts.netns {
        argv.extend(["ip", "netns", "exec", ns]);
    }
    argv.extend(["sh", "-c", RANK_LEADER, "orrery-rank", cmd]);
    let mut c = tokio::process::Command::new(argv[0]);
    c.args(&argv[1..]);
    let addrs: Vec<String> = a.worker_addrs.iter().map(|x| x.map(|ip| ip.to_string()).unwrap_or_default()).collect();
    c.env("ORRERY_AGENT_SOCKET", &opts.socket)
        .env("ORRERY_AGENT_LEASE", fence::lease_path(&opts.socket))
        .env("ORRERY_JOB", a.job.to_string())
        .env("ORRERY_JOB_NAME", &a.name)
        .env("ORRERY_EPOCH", a.epoch.to_string())
        .env("ORRERY_RANK", rank.to_string())
        .env("ORRERY_WORLD_SIZE", a.workers.len().to_string())
        .env("ORRERY_WORKERS", a.workers.join(","))
        .env("ORRERY_PERIOD_MS", a.period_ms.to_string())
        .env("ORRERY_COMPUTE_MS", a.compute_ms.to_string())
        .env("ORRERY_EPOCH_UNIX_MS", s.epoch_unix_ms.to_string())
        .env("ORRERY_WORKER_ADDRS", addrs.join(","))
        .env("ORRERY_SHAPE", serde_json::to_string(&a.shape).unwrap_or_default())
        .env("CUDA_VISIBLE_DEVICES", mine.join(","))
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", a.workers.len().to_string())
        .env("LOCAL_RANK", k.to_string())
        .env("LOCAL_WORLD_SIZE", a.ranks.len().to_string())
        .env("MASTER_PORT", crate::api::worker_port(a.job, 0).to_string())
        .kill_on_drop(true)
        // Its own process group, so that stopping the job reaches every
        // process its command started (`sh -c` and what it forks).
        .process_group(0);
    if let Some(Some(master)) = a.worker_addrs.first() {
        c.env("MASTER_ADDR", master.to_string());
    }
    if let Some(dev) = &opts.data_dev {
        c.env("GLOO_SOCKET_IFNAME", dev).env("NCCL_SOCKET_IFNAME", dev);
    }
    if opts.clock_skew_ms != 0.0 {
        let inherited = std::env::var(crate::clock::SKEW_VAR).ok().and_then(|v| v.trim().parse::<f64>().ok());
        c.env(crate::clock::SKEW_VAR, (inherited.unwrap_or(0.0) + opts.clock_skew_ms).to_string());
    }
    match c.spawn() {
        Ok(child) => match child.id().and_then(|p| i32::try_from(p).ok()) {
            Some(pgid) => {
                Some(Worker { pgid, leader: Some(child), rank, local: k, gpus: mine, restarts: 0, restart_at: None })
            }
            None => {
                tracing::error!(job = a.job, rank, "`{cmd}` exited at once");
                None
            }
        },
        Err(e) => {
            tracing::error!(job = a.job, rank, "starting `{cmd}`: {e}");
            None
        }
    }
}

/// Times a failed training process is started again in one placement
/// (PyTorch elastic's `--max-restarts`; Kubernetes' `backoffLimit` is 6).
pub const MAX_RANK_RESTARTS: u32 = 5;

/// The wait before restart number `n` (from 0): 1, 2, 4, 8, 16 s, as
/// Kubernetes' crash-loop back-off doubles from 10 s (here shorter:
/// a training job's peers are waiting on the ring). O(1).
pub fn restart_backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.min(5)).min(Duration::from_secs(30))
}

/// Collects the exit status of training processes that ended, and starts
/// again, after [`restart_backoff`], one that failed (exited with an error
/// or a signal) while its job is still placed here and not done, up to
/// [`MAX_RANK_RESTARTS`] times per placement: as torchrun restarts a
/// worker group and the kubelet a container with `restartPolicy:
/// OnFailure`. The restarted process takes the job's next iteration from
/// the agent, so the job goes on where it stopped; without it the job
/// would hold its GPUs with nothing running.
pub(super) async fn reap(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut s = shared.lock();
        let now = std::time::Instant::now();
        let mut due: Vec<(JobId, u64, usize)> = Vec::new();
        let mut broken: Vec<(JobId, u64)> = Vec::new();
        let placed: HashMap<JobId, u64> =
            s.jobs.iter().filter(|(id, _)| !s.done.contains(*id)).map(|(&id, a)| (id, a.epoch)).collect();
        let spanning: std::collections::HashSet<JobId> =
            s.jobs.values().filter(|a| spans_other_hosts(a, &shared.opts.name)).map(|a| a.job).collect();
        // Leaders that exited are reaped; their groups stay listed until
        // the job leaves (what they forked is stopped with the job).
        for (&(job, epoch), workers) in s.children.iter_mut() {
            let current = placed.get(&job) == Some(&epoch);
            for (i, w) in workers.iter_mut().enumerate() {
                if let Some(leader) = w.leader.as_mut()
                    && let Ok(Some(status)) = leader.try_wait()
                {
                    w.leader = None;
                    if status.success() || !current {
                        tracing::info!(job, epoch, rank = w.rank, "training process exited: {status}");
                    } else if spanning.contains(&job) {
                        // Its peers elsewhere are mid-iteration: a rank
                        // started alone could not rejoin them.
                        tracing::warn!(
                            job,
                            epoch,
                            rank = w.rank,
                            "training process failed: {status}; the job has ranks on other hosts, so it starts again as a whole"
                        );
                        broken.push((job, epoch));
                    } else if w.restarts < MAX_RANK_RESTARTS {
                        let wait = restart_backoff(w.restarts);
                        tracing::warn!(
                            job,
                            epoch,
                            rank = w.rank,
                            "training process failed: {status}; starting it again in {wait:?} ({} of {MAX_RANK_RESTARTS})",
                            w.restarts + 1
                        );
                        w.restart_at = Some(now + wait);
                    } else {
                        tracing::error!(
                            job,
                            epoch,
                            rank = w.rank,
                            "training process failed: {status}, {MAX_RANK_RESTARTS} restarts used; not starting it again"
                        );
                    }
                }
                if w.restart_at.is_some_and(|t| t <= now) && current {
                    due.push((job, epoch, i));
                }
            }
        }
        for key in broken {
            s.broken.entry(key).or_insert(None);
        }
        // Not under a lease about to run out: the rank's watchdog would
        // stop it at once (see `hold_back_while_lapsed`).
        if due.is_empty() || s.lease_too_short() {
            continue;
        }
        let Some(cmd) = shared.opts.exec.clone() else { continue };
        for (job, epoch, i) in due {
            let Some(a) = s.jobs.get(&job).cloned() else { continue };
            let Some((k, rank, gpus, restarts)) = s
                .children
                .get(&(job, epoch))
                .and_then(|ws| ws.get(i))
                .map(|w| (w.local, w.rank, w.gpus.clone(), w.restarts))
            else {
                continue;
            };
            let started = launch_rank(&shared.opts, &s, &a, &cmd, k, rank, gpus);
            if let Some(w) = s.children.get_mut(&(job, epoch)).and_then(|ws| ws.get_mut(i)) {
                w.restart_at = None;
                w.restarts = restarts + 1;
                if let Some(new) = started {
                    tracing::info!(job, epoch, rank, "training process started again");
                    (w.pgid, w.leader) = (new.pgid, new.leader);
                }
            }
        }
    }
}

/// Whether job `a` has ranks on hosts other than `me`.
pub(super) fn spans_other_hosts(a: &Assignment, me: &str) -> bool {
    a.workers.iter().any(|w| w != me)
}

/// Asks the service to start again, as a whole, each job whose ranks here
/// stopped while it has ranks elsewhere (`State::broken`), until the
/// service answers: the ring's other ranks are mid-iteration, and a rank
/// started alone could not rejoin them (torchrun restarts its whole worker
/// group for the same reason). Every 200 ms while any is pending. An
/// answered one is kept while the job is still assigned here on that
/// epoch, and a minute after (an answer to a poll sent before the
/// restart may still name that epoch).
pub(super) async fn request_restarts(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (host, session, pending) = {
            let mut s = shared.lock();
            let assigned: std::collections::HashSet<(JobId, u64)> = s.jobs.values().map(|a| (a.job, a.epoch)).collect();
            s.broken.retain(|k, answered| {
                answered.is_none_or(|t| t.elapsed() < Duration::from_secs(60)) || assigned.contains(k)
            });
            let pending: Vec<(JobId, u64)> =
                s.broken.iter().filter(|(_, answered)| answered.is_none()).map(|(&k, _)| k).collect();
            (s.host, s.session, pending)
        };
        for (job, epoch) in pending {
            match shared.client.restart_job(host, session, job, epoch).await {
                Ok(_) => {
                    tracing::info!(job, epoch, "the service starts the job again as a whole");
                    if let Some(answered) = shared.lock().broken.get_mut(&(job, epoch)) {
                        *answered = Some(std::time::Instant::now());
                    }
                }
                Err(e) => tracing::warn!(job, epoch, "asking the service to start the job again: {e}"),
            }
        }
    }
}
