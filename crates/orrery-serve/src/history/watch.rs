//! The training processes the agents run, watched from outside through
//! /proc, as Jepsen's nemesis watches a cluster: a start the first time a
//! (host, job, rank, placement epoch) is seen, a stop when it is gone. Each event carries
//! the sample's time, so an overlap shorter than a sample can be missed,
//! none invented. `orrery bench chaos` and the live fault tests record
//! [`super::History::processes`] with it.

use super::ProcessEvent;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// (pid, (host, job, rank, epoch)) of every process whose environment
/// names one of `sockets` (host = its index), a job and a rank (epoch 0
/// where it names none). O(processes).
pub fn ranks(sockets: &[PathBuf]) -> Vec<(u32, (usize, usize, u32, u64))> {
    let wanted: Vec<String> = sockets.iter().map(|s| s.display().to_string()).collect();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
        let (mut host, mut job, mut rank, mut epoch) = (None, None, None, 0);
        for var in env.split(|&b| b == 0) {
            let Ok(var) = std::str::from_utf8(var) else { continue };
            let Some((k, v)) = var.split_once('=') else { continue };
            match k {
                "ORRERY_AGENT_SOCKET" => host = wanted.iter().position(|w| w == v),
                "ORRERY_JOB" => job = v.parse::<usize>().ok(),
                "ORRERY_RANK" => rank = v.parse::<u32>().ok(),
                "ORRERY_EPOCH" => epoch = v.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
        if let (Some(h), Some(j), Some(r)) = (host, job, rank) {
            out.push((pid, (h, j, r, epoch)));
        }
    }
    out
}

/// Samples every `every` until `stop`; times from `t0`.
pub fn watch(sockets: &[PathBuf], t0: Instant, every: Duration, stop: &AtomicBool) -> Vec<ProcessEvent> {
    let mut running: BTreeSet<(usize, usize, u32, u64)> = BTreeSet::new();
    let mut events = Vec::new();
    loop {
        let done = stop.load(Ordering::SeqCst);
        let at_s = t0.elapsed().as_secs_f64();
        let seen: BTreeSet<(usize, usize, u32, u64)> = ranks(sockets).into_iter().map(|(_, k)| k).collect();
        for &(host, job, rank, epoch) in seen.difference(&running) {
            events.push(ProcessEvent { at_s, host, job, rank, epoch, started: true });
        }
        for &(host, job, rank, epoch) in running.difference(&seen) {
            events.push(ProcessEvent { at_s, host, job, rank, epoch, started: false });
        }
        running = seen;
        if done {
            return events;
        }
        std::thread::sleep(every);
    }
}
