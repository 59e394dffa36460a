//! The socket between a node agent and its training processes: a
//! process asks when its next iteration may start (`wait`: its slot
//! delay, throttle and timetable from the decisions in force) and reports
//! each iteration it ran (`report`), a JSON line each way. Reports are
//! kept for the agent's next batch to the service.

use super::{MAX_HANDED, Shared, State};
use crate::api::IterationReport;
use orrery_policy::JobId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

pub(super) async fn serve_socket(shared: Arc<Shared>, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_process(shared.clone(), stream));
            }
            Err(e) => {
                tracing::warn!("accepting a training process: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The numbers of a training process's report, with their ranges (the
/// request is an internally tagged enum, which [`orrery_model::ranges`]
/// does not tell apart, so its numbers are checked as this struct).
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema)]
pub struct ProcessReport {
    /// Placement epoch.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub epoch: u64,
    /// Iterations done, this one included.
    #[schemars(range(min = 1, max = orrery_model::job::MAX_ITERATIONS))]
    pub iteration: u64,
    /// Unix time the iteration started, ms (from 2001 to 2096).
    #[schemars(range(min = 1e12, max = 4e12))]
    pub start_unix_ms: f64,
    /// Its duration, ms.
    #[schemars(range(min = 0, max = crate::api::MAX_REPORTED_MS))]
    pub duration_ms: f64,
    /// Its communication phase, ms.
    #[schemars(range(min = 0, max = crate::api::MAX_REPORTED_MS))]
    pub comm_ms: Option<f64>,
}

/// A request from a training process.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    Wait {
        job: String,
        #[serde(default)]
        rank: Option<u32>,
        #[serde(default)]
        epoch: Option<u64>,
    },
    Report {
        job: String,
        epoch: u64,
        iteration: u64,
        start_unix_ms: f64,
        duration_ms: f64,
        #[serde(default)]
        comm_ms: Option<f64>,
        #[serde(default)]
        done: bool,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Reply {
    Go {
        go: bool,
        delay_ms: f64,
        iteration: u64,
        epoch: u64,
        throttle_gbps: Option<f64>,
        period_ms: f64,
        route: Vec<usize>,
    },
    Stop {
        stop: String,
    },
    Ok {
        ok: bool,
        done: bool,
    },
    Error {
        error: String,
    },
}

async fn serve_process(shared: Arc<Shared>, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Wait { job, rank, epoch }) => wait(&shared, &job, rank, epoch).await,
            Ok(Request::Report { job, epoch, iteration, start_unix_ms, duration_ms, comm_ms, done }) => {
                // A report out of range is refused here, alone: forwarded,
                // it would make the service refuse the whole batch.
                let numbers = ProcessReport { epoch, iteration, start_unix_ms, duration_ms, comm_ms };
                match orrery_model::ranges::check(&numbers) {
                    Ok(()) => report(&mut shared.lock(), &job, &numbers, done),
                    Err(e) => Reply::Error { error: format!("bad report: {e}") },
                }
            }
            Err(e) => Reply::Error { error: format!("bad request: {e}") },
        };
        let mut out = serde_json::to_string(&reply).unwrap_or_else(|_| "{\"error\":\"encoding\"}".into());
        out.push('\n');
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn resolve(s: &State, job: &str) -> Option<JobId> {
    job.parse::<JobId>().ok().or_else(|| s.jobs.values().find(|a| a.name == job).map(|a| a.job))
}

/// Cluster-clock nanoseconds now: this host's clock (`host_us`) moved by
/// its offset to the service's, from the service's epoch.
fn cluster_now_ns(host_us: i64, epoch_unix_ms: i64, offset_us: i64) -> u64 {
    let now_us = i128::from(host_us) + i128::from(offset_us);
    ((now_us - i128::from(epoch_unix_ms) * 1000) * 1000).max(0) as u64
}

async fn wait(shared: &Shared, job: &str, rank: Option<u32>, epoch: Option<u64>) -> Reply {
    loop {
        let notified = shared.changed.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        {
            let mut s = shared.lock();
            let id = resolve(&s, job);
            if let Some(id) = id
                && let Some(a) = s.jobs.get(&id).cloned()
            {
                if epoch.is_some_and(|e| e != a.epoch) {
                    return Reply::Stop {
                        stop: format!("epoch {} is stale (the job is on {})", epoch.unwrap_or(0), a.epoch),
                    };
                }
                if a.status == crate::api::JobStatus::Running {
                    let rank = rank.or_else(|| a.ranks.first().copied()).unwrap_or(0);
                    let now = cluster_now_ns(shared.opts.host_unix_us(), s.epoch_unix_ms, s.clock.offset_us());
                    return go(&mut s, &a, rank, now);
                }
            } else if let Some(id) = id
                && let Some(left) = s.gone.get(&id)
                && epoch.is_none_or(|x| x <= left.epoch)
            {
                return Reply::Stop { stop: left.why.clone() };
            }
        }
        // Paused, or not placed here yet: wait for a change.
        let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
    }
}

/// The reply to a rank of running job `a` waiting for its next iteration at
/// cluster-clock nanosecond `now`: how long it waits (the decisions in force, each
/// applied once per rank) and the iteration's number. O(1).
fn go(s: &mut State, a: &crate::api::Assignment, rank: u32, now: u64) -> Reply {
    let id = a.job;
    let f = &a.in_force;
    let done = *s.iteration.entry((id, a.epoch)).or_insert(a.iterations_done);
    let iteration = done + 1;
    let applied = s.applied.entry((id, a.epoch, rank)).or_default();
    // Shifts wait for their iteration as an `Align` does.
    let shift = if iteration >= f.shift_at_iteration {
        let pending = (f.shift_ms_total - applied.shift_ms).max(0.0);
        applied.shift_ms = f.shift_ms_total;
        pending
    } else {
        0.0
    };
    // An `Align` waits for its iteration, then holds every rank to the
    // same instant, or before any report rounds this rank's own moment to
    // the phase (api::AlignSlot).
    let align = f.align.filter(|al| al.seq > applied.align_seq && iteration >= al.at_iteration);
    if let Some(al) = align {
        applied.align_seq = al.seq;
    }
    let rounded = align
        .filter(|al| al.start_s.is_none())
        .map(|al| ((al.period_ms * 1e6).round() as u64, (al.offset_s * 1e9).round() as u64));
    let aligned_ns = align.and_then(|al| al.start_s).map(|t| (t.max(0.0) * 1e9).round() as u64);
    let pace = f.pace.map(|p| ((p.period_ms * 1e6).round() as u64, (p.offset_s * 1e9).round() as u64));
    let mut delay = orrery_policy::slot::start_delay_ns(now, shift, rounded, pace)
        .max(aligned_ns.map_or(0, |t| t.saturating_sub(now)));
    // The timetable (handed out ahead): this iteration's earliest start,
    // with `done` iterations done.
    if let Some((from, starts_s)) = &f.timetable {
        let i = done.checked_sub(*from).and_then(|i| usize::try_from(i).ok());
        let start_ns = i.and_then(|i| starts_s.get(i)).map(|t| (t * 1e9).round() as u64);
        delay = delay.max(start_ns.map_or(0, |t| t.saturating_sub(now)));
    }
    if s.handed.len() >= MAX_HANDED {
        s.handed.clear();
    }
    s.handed.insert((id, a.epoch, iteration), delay as f64 / 1e6);
    Reply::Go {
        go: true,
        delay_ms: delay as f64 / 1e6,
        iteration,
        epoch: a.epoch,
        throttle_gbps: f.throttle_gbps,
        period_ms: a.period_ms,
        route: f.routes.get(&(rank as usize)).cloned().unwrap_or_default(),
    }
}

/// Records a process's report of job `job`'s iteration (`done`: the process
/// says it was the last) and answers whether the job has run all its
/// iterations. O(1).
fn report(s: &mut State, job: &str, r: &ProcessReport, done: bool) -> Reply {
    let ProcessReport { epoch, iteration, start_unix_ms, duration_ms, comm_ms } = *r;
    let Some(id) = resolve(s, job) else { return Reply::Error { error: format!("job {job} is not on this node") } };
    // The process timed its start on this host's clock.
    let start_s = (start_unix_ms + s.clock.offset_us() as f64 / 1e3 - s.epoch_unix_ms as f64) / 1e3;
    let it = s.iteration.entry((id, epoch)).or_default();
    *it = (*it).max(iteration);
    // A job that left this node since (its ranks elsewhere reported the
    // last iteration first, and the service withdrew it) keeps its target:
    // this rank's report of that iteration is the end of the job, not a
    // wait for one more that a SIGTERM would cut short.
    let target = match s.jobs.get(&id) {
        Some(a) => a.target_iterations,
        None => s.gone.get(&id).filter(|left| left.epoch == epoch).map_or(0, |left| left.target_iterations),
    };
    let finished = done || (target > 0 && iteration >= target);
    if finished {
        s.done.insert(id);
    }
    let delay_ms = s.handed.remove(&(id, epoch, iteration));
    s.reports.push(IterationReport { job: id, epoch, iteration, start_s, duration_ms, comm_ms, delay_ms, done });
    Reply::Ok { ok: true, done: finished }
}

#[cfg(test)]
mod tests {
    use super::super::Left;
    use super::{ProcessReport, Reply, State, go, report};
    use crate::api::{AlignSlot, Assignment, InForce, JobStatus};

    const S: u64 = 1_000_000_000;

    /// Job 7's two pipeline stages (ranks 0 and 1) on this host, 1-s
    /// iterations, `done` of them reported, `in_force` in force.
    fn two_stages(done: u64, in_force: InForce) -> Assignment {
        Assignment {
            job: 7,
            name: "pp".into(),
            epoch: 1,
            status: JobStatus::Running,
            gpus: 2,
            ranks: vec![0, 1],
            workers: vec!["h0".into(), "h0".into()],
            worker_addrs: Vec::new(),
            shape: Default::default(),
            period_ms: 1000.0,
            compute_ms: 700.0,
            iterations_done: done,
            target_iterations: 100,
            in_force,
            waiting_on: Vec::new(),
        }
    }

    fn delay_ms(reply: Reply) -> (f64, u64) {
        match reply {
            Reply::Go { delay_ms, iteration, .. } => (delay_ms, iteration),
            other => panic!("expected a go, got {other:?}"),
        }
    }

    /// A pipeline's two stages on this host wait for their iterations at
    /// different moments (the last stage first, a backward pass earlier).
    /// An `Align` whose instant falls between their waits must not hold
    /// the later rank for a whole period: both ranks apply it at the same
    /// iteration and start no earlier than the same instant. Rounding each
    /// rank's own moment up to the phase (the rule before) held rank 0 for
    /// 970 ms here and stalled the pipeline on the testbed.
    #[test]
    fn an_align_holds_every_rank_to_one_instant_at_one_iteration() {
        let align = AlignSlot { period_ms: 1000.0, offset_s: 0.97, seq: 1, at_iteration: 5, start_s: Some(4.97) };
        let a = two_stages(3, InForce { align: Some(align), ..InForce::default() });
        let mut s = State::default();
        // Iteration 4 (three done): the align is not for it.
        assert_eq!(delay_ms(go(&mut s, &a, 1, 3_940_000_000)), (0.0, 4));
        assert_eq!(delay_ms(go(&mut s, &a, 0, 4 * S)), (0.0, 4));
        s.iteration.insert((7, 1), 4);
        // Iteration 5: rank 1 at 4.94 s waits until 4.97 s; rank 0, at
        // 5.00 s, is past it and goes at once.
        let (d1, it1) = delay_ms(go(&mut s, &a, 1, 4_940_000_000));
        assert!((d1 - 30.0).abs() < 1e-6 && it1 == 5, "{d1} ms at {it1}");
        assert_eq!(delay_ms(go(&mut s, &a, 0, 5 * S)), (0.0, 5));
        // Applied once per rank: iteration 6 is not held.
        s.iteration.insert((7, 1), 5);
        assert_eq!(delay_ms(go(&mut s, &a, 1, 5_900_000_000)), (0.0, 6));
        assert_eq!(delay_ms(go(&mut s, &a, 0, 5_950_000_000)), (0.0, 6));
    }

    /// A `Shift` that arrives after the last stage began iteration 6 and
    /// before the first stage did is waited by both before iteration 7,
    /// not by one before 6 and the other before 7 (which held the pipeline
    /// twice).
    #[test]
    fn a_shift_is_waited_by_every_rank_before_the_same_iteration() {
        let mut a = two_stages(5, InForce::default());
        let mut s = State::default();
        assert_eq!(delay_ms(go(&mut s, &a, 1, 5 * S)), (0.0, 6));
        a.in_force = InForce { shift_ms_total: 120.0, shift_at_iteration: 7, ..InForce::default() };
        assert_eq!(delay_ms(go(&mut s, &a, 0, 5 * S + S / 10)), (0.0, 6));
        s.iteration.insert((7, 1), 6);
        assert_eq!(delay_ms(go(&mut s, &a, 1, 6 * S)), (120.0, 7));
        assert_eq!(delay_ms(go(&mut s, &a, 0, 6 * S + S / 10)), (120.0, 7));
        s.iteration.insert((7, 1), 7);
        assert_eq!(delay_ms(go(&mut s, &a, 0, 7 * S)), (0.0, 8), "once");
    }

    /// Iteration `iteration` of epoch 1 of job 7, reported at once.
    fn numbers(iteration: u64) -> ProcessReport {
        ProcessReport { epoch: 1, iteration, start_unix_ms: 1.8e12, duration_ms: 50.0, comm_ms: None }
    }

    fn finished(reply: Reply) -> bool {
        match reply {
            Reply::Ok { done, .. } => done,
            other => panic!("expected an ok, got {other:?}"),
        }
    }

    /// A job's ranks on two nodes: the other node's rank reported the last
    /// iteration first, the service withdrew the job, and this node let it
    /// go before its own rank's report of that iteration arrived. That
    /// report still ends the job (done); before, it said "not done", the
    /// rank waited for an iteration that never came and ended by the
    /// agent's SIGTERM (a failed CI run of the DDP live test, session 23).
    #[test]
    fn the_last_report_ends_the_job_after_the_job_left_this_node() {
        let mut s = State::default();
        s.jobs.insert(7, two_stages(98, InForce::default()));
        assert!(!finished(report(&mut s, "7", &numbers(99), false)), "99 of 100");
        s.jobs.clear();
        let why = "withdrawn (preempted, cancelled or finished)".to_string();
        s.gone.insert(7, Left { epoch: 1, why, target_iterations: 100 });
        assert!(finished(report(&mut s, "7", &numbers(100), false)), "100 of 100, reported after the job left");
        // A report of an earlier placement (epoch 0) is not measured against this one's target.
        let stale = ProcessReport { epoch: 0, ..numbers(100) };
        assert!(!finished(report(&mut s, "7", &stale, false)));
        // Preempted before its end, the job has not finished.
        s.gone.insert(7, Left { epoch: 1, why: "withdrawn".into(), target_iterations: 200 });
        assert!(!finished(report(&mut s, "7", &numbers(101), false)));
    }
}
