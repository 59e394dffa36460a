//! The invariants a history of the service must keep, checked after a run
//! (issue 71; etcd's robustness tests and Jepsen check histories the same
//! way): what the clients were told, the committed decision log, the logs
//! read from replicas along the way, and the training processes the agents
//! started and stopped.
//!
//! * **Nothing acknowledged is lost or duplicated**: every job a client was
//!   told it holds is present once, with the number it was given.
//! * **One history**: every log read before the end (from a leader before it
//!   was killed, or a standby's copy) agrees with the final log on every
//!   seq both hold, and an entry read before but gone at the end was
//!   forgotten with a job that expired (`orrery serve --keep-finished`: an
//!   `Expired` entry names the job, and a later one the `Expired` entries
//!   it superseded). The later checks replay the whole history: every entry read
//!   along the way and the final log, merged by seq.
//! * **No GPU held twice**: replaying the log, no placement takes more GPUs
//!   of a host than its agent registered, and no job is placed twice
//!   without leaving in between.
//! * **No rank in two places**: the agents never ran one rank of one job on
//!   two hosts at once, nor two placements' (epochs') of it on one host.
//! * **Every job that could run ran**: a job whose GPUs the cluster had,
//!   not cancelled, was placed at least once.
//!
//! Each violation carries the shortest window of history that shows it.
//! [`check`] is O(log + acknowledged + process events · log of them).

pub mod watch;

use crate::api::{DriverEvent, LogEntry, Logged};
use orrery_model::HostId;
use orrery_policy::{Decision, JobId};
use std::collections::{BTreeMap, HashMap};

/// A training process an agent started or stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEvent {
    /// Wall-clock seconds (any common origin).
    pub at_s: f64,
    /// The host whose agent ran it.
    pub host: HostId,
    /// Job and rank.
    pub job: JobId,
    /// Rank within the job.
    pub rank: u32,
    /// The placement epoch it ran on (0: unknown).
    pub epoch: u64,
    /// Started (true) or stopped.
    pub started: bool,
}

/// Everything recorded of a run.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// (spec id, job number) of every submission a client saw acknowledged.
    pub acknowledged: Vec<(String, JobId)>,
    /// (spec id, job number, GPUs asked for) of every job the service holds
    /// at the end.
    pub present: Vec<(String, JobId, u32)>,
    /// The committed log at the end.
    pub log: Vec<LogEntry>,
    /// Logs read before the end: each a run of consecutive entries from
    /// any seq (a reader that asks only for what is new since its last
    /// read keeps O(log) of them, not O(log · reads)).
    pub logs_read: Vec<Vec<LogEntry>>,
    /// The agents' process starts and stops, in any order.
    pub processes: Vec<ProcessEvent>,
}

/// An invariant broken, with the history that shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Which invariant: `lost`, `duplicated`, `not a prefix`,
    /// `gpu held twice`, `placed twice`, `rank in two places`, `never ran`.
    pub invariant: &'static str,
    /// What happened, in one line.
    pub what: String,
    /// The shortest window of history that shows it, a line per entry.
    pub window: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.what)?;
        for line in &self.window {
            write!(f, "\n    {line}")?;
        }
        Ok(())
    }
}

fn line(e: &LogEntry) -> String {
    let entry = serde_json::to_string(&e.entry).unwrap_or_default();
    format!("seq {} at {:.3} s ({}): {entry}", e.seq, e.at_s, e.source)
}

/// Every violation of the history, in the order of the invariants above.
pub fn check(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let whole = merged(h);
    let forgotten = Forgotten::of(&whole);
    acknowledged(h, &forgotten, &mut out);
    one_history(h, &forgotten, &mut out);
    gpus(&whole, &mut out);
    ranks(&h.processes, &mut out);
    ran(h, &whole, &mut out);
    out
}

/// Every entry of the run: the final log and every log read along the way,
/// by seq (where two disagree, the final log's; [`one_history`] reports
/// it). O(entries read · log entries).
pub fn merged(h: &History) -> Vec<LogEntry> {
    let mut by_seq: BTreeMap<u64, &LogEntry> = BTreeMap::new();
    for e in h.logs_read.iter().flatten() {
        by_seq.entry(e.seq).or_insert(e);
    }
    for e in &h.log {
        by_seq.insert(e.seq, e);
    }
    by_seq.into_values().cloned().collect()
}

/// What the service forgot on purpose: the jobs its `Expired` entries
/// name, and the `Expired` entries they supersede.
struct Forgotten {
    jobs: std::collections::HashSet<JobId>,
    expiries: std::collections::HashSet<u64>,
}

impl Forgotten {
    fn of(whole: &[LogEntry]) -> Forgotten {
        let mut f = Forgotten { jobs: Default::default(), expiries: Default::default() };
        for e in whole {
            if let Logged::Event(DriverEvent::Expired { jobs, superseded, .. }) = &e.entry {
                f.jobs.extend(jobs.iter().copied());
                f.expiries.extend(superseded.iter().copied());
            }
        }
        f
    }

    /// Whether `e` may be missing from the final log.
    fn covers(&self, e: &LogEntry) -> bool {
        match &e.entry {
            Logged::Event(DriverEvent::Expired { .. }) => self.expiries.contains(&e.seq),
            entry => crate::ledger::entry_job(entry).is_some_and(|j| self.jobs.contains(&j)),
        }
    }
}

/// Violations of one invariant (`gpu held twice` and `placed twice` are
/// both the log's replay).
pub fn count(violations: &[Violation], invariant: &str) -> usize {
    violations.iter().filter(|v| v.invariant == invariant).count()
}

fn acknowledged(h: &History, forgotten: &Forgotten, out: &mut Vec<Violation>) {
    let mut by_id: HashMap<&str, Vec<JobId>> = HashMap::new();
    for (id, job, _) in &h.present {
        by_id.entry(id.as_str()).or_default().push(*job);
    }
    for (id, job) in &h.acknowledged {
        match by_id.get(id.as_str()).map(Vec::as_slice) {
            Some([only]) if only == job => {}
            None if forgotten.jobs.contains(job) => {}
            found => out.push(Violation {
                invariant: "lost",
                what: format!("job {id:?} was acknowledged as number {job}"),
                window: vec![format!(
                    "acknowledged: {id:?} = {job}; present at the end: {}",
                    found.map_or("none".into(), |ns| format!("{ns:?}"))
                )],
            }),
        }
    }
    let mut dup: Vec<(&&str, &Vec<JobId>)> = by_id.iter().filter(|(_, ns)| ns.len() > 1).collect();
    dup.sort();
    for (id, jobs) in dup {
        out.push(Violation {
            invariant: "duplicated",
            what: format!("job {id:?} is present {} times", jobs.len()),
            window: vec![format!("present: {id:?} as numbers {jobs:?}")],
        });
    }
}

fn one_history(h: &History, forgotten: &Forgotten, out: &mut Vec<Violation>) {
    for (k, read) in h.logs_read.iter().enumerate() {
        let Some(first) = read.first() else { continue };
        // The first entry the final log (sorted by seq) holds otherwise, or
        // lacks though nothing forgot it: O(read · log n).
        let parted = read.iter().find_map(|a| {
            let at = h.log.binary_search_by_key(&a.seq, |e| e.seq).ok().map(|i| &h.log[i]);
            match at {
                Some(b) if b == a => None,
                None if forgotten.covers(a) => None,
                other => Some((a, other)),
            }
        });
        if let Some((a, b)) = parted {
            let window = vec![
                format!("log read {k}: {}", line(a)),
                format!("final log:  {}", b.map_or("(no entry; no Expired entry names its job)".into(), line)),
            ];
            out.push(Violation {
                invariant: "not a prefix",
                what: format!(
                    "log read {k} ({} entries from seq {}) parts from the final log at seq {}",
                    read.len(),
                    first.seq,
                    a.seq
                ),
                window,
            });
        }
    }
}

fn gpus(log: &[LogEntry], out: &mut Vec<Violation>) {
    let mut capacity: HashMap<HostId, u32> = HashMap::new();
    // Per host: (job, GPUs, the entry that placed it).
    let mut held: Held<'_> = HashMap::new();
    let mut placed: Placed<'_> = HashMap::new();
    type Held<'a> = HashMap<HostId, Vec<(JobId, u32, &'a LogEntry)>>;
    type Placed<'a> = HashMap<JobId, (Vec<(HostId, u32)>, &'a LogEntry)>;
    fn leave(job: &JobId, held: &mut Held<'_>, placed: &mut Placed<'_>) {
        if let Some((hosts, _)) = placed.remove(job) {
            for (host, _) in hosts {
                if let Some(v) = held.get_mut(&host) {
                    v.retain(|x| x.0 != *job);
                }
            }
        }
    }
    for e in log {
        match &e.entry {
            Logged::Event(DriverEvent::NodeUp { node, gpus, .. }) => {
                capacity.insert(*node, *gpus);
            }
            Logged::Decision(Decision::Place { job, hosts } | Decision::Share { job, free: hosts, .. }) => {
                if let Some((_, first)) = placed.get(job) {
                    out.push(Violation {
                        invariant: "placed twice",
                        what: format!("job {job} was placed again without leaving"),
                        window: vec![line(first), line(e)],
                    });
                    leave(job, &mut held, &mut placed);
                }
                for &(host, g) in hosts {
                    let on = held.entry(host).or_default();
                    let total: u32 = on.iter().map(|x| x.1).sum::<u32>() + g;
                    let cap = capacity.get(&host).copied().unwrap_or(0);
                    // A Share's GPUs of other jobs are shared on purpose;
                    // its free ones count.
                    if total > cap {
                        let mut window: Vec<String> = on.iter().map(|x| line(x.2)).collect();
                        window.push(line(e));
                        out.push(Violation {
                            invariant: "gpu held twice",
                            what: format!(
                                "host {host} has {cap} GPUs; job {job} took {g} of them with {} held",
                                total - g
                            ),
                            window,
                        });
                    }
                    on.push((*job, g, e));
                }
                placed.insert(*job, (hosts.clone(), e));
            }
            Logged::Decision(Decision::Preempt { job })
            | Logged::Event(DriverEvent::Finished { job } | DriverEvent::Cancelled { job }) => {
                leave(job, &mut held, &mut placed)
            }
            _ => {}
        }
    }
}

fn ranks(events: &[ProcessEvent], out: &mut Vec<Violation>) {
    let mut sorted: Vec<&ProcessEvent> = events.iter().collect();
    // Stops before starts at one instant: a rank moved at once is not in
    // two places.
    sorted.sort_by(|a, b| a.at_s.total_cmp(&b.at_s).then(a.started.cmp(&b.started)));
    let mut running: BTreeMap<(JobId, u32), Vec<&ProcessEvent>> = BTreeMap::new();
    let show = |p: &ProcessEvent| {
        let what = if p.started { "started" } else { "stopped" };
        format!("{:.3} s: host {} {what} job {} rank {} (epoch {})", p.at_s, p.host, p.job, p.rank, p.epoch)
    };
    let same = |a: &ProcessEvent, b: &ProcessEvent| a.host == b.host && a.epoch == b.epoch;
    for p in sorted {
        let on = running.entry((p.job, p.rank)).or_default();
        if p.started {
            if let Some(other) = on.iter().find(|o| !same(o, p)) {
                let what = if other.host != p.host {
                    format!("job {} rank {} ran on hosts {} and {} at once", p.job, p.rank, other.host, p.host)
                } else {
                    format!(
                        "job {} rank {} ran twice on host {} at once (epochs {} and {})",
                        p.job, p.rank, p.host, other.epoch, p.epoch
                    )
                };
                out.push(Violation { invariant: "rank in two places", what, window: vec![show(other), show(p)] });
            }
            on.push(p);
        } else {
            on.retain(|o| !same(o, p));
        }
    }
}

fn ran(h: &History, whole: &[LogEntry], out: &mut Vec<Violation>) {
    let gpus: u32 = {
        let mut cap: HashMap<HostId, u32> = HashMap::new();
        for e in whole {
            if let Logged::Event(DriverEvent::NodeUp { node, gpus, .. }) = &e.entry {
                cap.insert(*node, *gpus);
            }
        }
        cap.values().sum()
    };
    let mut placed = std::collections::HashSet::new();
    let mut cancelled = std::collections::HashSet::new();
    for e in whole {
        match &e.entry {
            Logged::Decision(Decision::Place { job, .. } | Decision::Share { job, .. }) => {
                placed.insert(*job);
            }
            Logged::Decision(Decision::Reject { job, .. }) | Logged::Event(DriverEvent::Cancelled { job }) => {
                cancelled.insert(*job);
            }
            _ => {}
        }
    }
    for (id, job, asks) in &h.present {
        if *asks <= gpus && !placed.contains(job) && !cancelled.contains(job) {
            out.push(Violation {
                invariant: "never ran",
                what: format!("job {id:?} (number {job}) asked for {asks} of the cluster's {gpus} GPUs and never ran"),
                window: vec![format!(
                    "present: {id:?} = {job}; no Place or Share of it in {} log entries",
                    whole.len()
                )],
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, entry: Logged) -> LogEntry {
        LogEntry { seq, at_s: seq as f64, source: "driver".into(), entry }
    }

    fn up(seq: u64, node: HostId, gpus: u32) -> LogEntry {
        entry(seq, Logged::Event(DriverEvent::NodeUp { node, gpus, session: 1, data_addr: None }))
    }

    fn place(seq: u64, job: JobId, hosts: &[(HostId, u32)]) -> LogEntry {
        entry(seq, Logged::Decision(Decision::Place { job, hosts: hosts.to_vec() }))
    }

    fn finished(seq: u64, job: JobId) -> LogEntry {
        entry(seq, Logged::Event(DriverEvent::Finished { job }))
    }

    /// Two nodes of 4 GPUs; jobs 0 and 1 run one after the other on host 0.
    fn good() -> History {
        let log =
            vec![up(1, 0, 4), up(2, 1, 4), place(3, 0, &[(0, 4)]), finished(4, 0), place(5, 1, &[(0, 2), (1, 2)])];
        History {
            acknowledged: vec![("a".into(), 0), ("b".into(), 1)],
            present: vec![("a".into(), 0, 4), ("b".into(), 1, 4)],
            logs_read: vec![log[..3].to_vec(), Vec::new()],
            log,
            processes: vec![
                ProcessEvent { at_s: 3.0, host: 0, job: 0, rank: 0, epoch: 1, started: true },
                ProcessEvent { at_s: 4.0, host: 0, job: 0, rank: 0, epoch: 1, started: false },
                // Rank 0 of job 1 moves from host 0 to host 1 at one instant.
                ProcessEvent { at_s: 5.0, host: 0, job: 1, rank: 0, epoch: 1, started: true },
                ProcessEvent { at_s: 6.0, host: 0, job: 1, rank: 0, epoch: 1, started: false },
                ProcessEvent { at_s: 6.0, host: 1, job: 1, rank: 0, epoch: 1, started: true },
            ],
        }
    }

    #[test]
    fn a_history_that_keeps_every_invariant_has_no_violation() {
        assert_eq!(check(&good()), Vec::new());
    }

    #[test]
    fn a_lost_a_renumbered_and_a_duplicated_job_are_each_named() {
        let mut h = good();
        h.acknowledged.push(("c".into(), 2));
        h.present[1].1 = 7; // b renumbered
        h.present.push(("a".into(), 9, 1));
        let v = check(&h);
        let lost: Vec<&str> = v.iter().filter(|x| x.invariant == "lost").map(|x| x.what.as_str()).collect();
        assert_eq!(lost.len(), 3, "{v:#?}"); // a (now twice), b (renumbered), c (absent)
        assert!(lost.iter().any(|w| w.contains("\"c\"")));
        assert_eq!(count(&v, "duplicated"), 1);
        assert!(v.iter().any(|x| x.window == vec!["present: \"a\" as numbers [0, 9]".to_string()]));
    }

    #[test]
    fn a_log_read_that_parts_from_the_final_one_shows_the_two_entries() {
        let mut h = good();
        let mut other = h.log[..4].to_vec();
        other[3] = place(4, 1, &[(1, 4)]);
        h.logs_read.push(other);
        let v = check(&h);
        assert_eq!(count(&v, "not a prefix"), 1, "{v:#?}");
        let w = &v[0].window;
        assert!(w[0].starts_with("log read 2: seq 4") && w[0].contains("place"), "{w:?}");
        assert!(w[1].starts_with("final log:  seq 4") && w[1].contains("finished"), "{w:?}");
        // A read log longer than the final one is not a prefix either.
        let mut h = good();
        h.logs_read.push([h.log.clone(), vec![finished(6, 1)]].concat());
        assert_eq!(count(&check(&h), "not a prefix"), 1);
        // A read of what was new since seq 2 is checked where it starts.
        let mut h = good();
        h.logs_read.push(h.log[2..4].to_vec());
        assert_eq!(check(&h), Vec::new());
        let mut late = h.log[3..5].to_vec();
        late[1] = place(5, 1, &[(1, 4)]);
        h.logs_read.push(late);
        let v = check(&h);
        assert_eq!(count(&v, "not a prefix"), 1, "{v:#?}");
        assert!(v[0].what.contains("2 entries from seq 4") && v[0].what.ends_with("at seq 5"), "{}", v[0].what);
        assert!(v[0].window[0].starts_with("log read 3: seq 5"), "{:?}", v[0].window);
        // A read from a seq the final log never had.
        let mut h = good();
        h.logs_read.push(vec![finished(9, 1)]);
        assert_eq!(count(&check(&h), "not a prefix"), 1);
    }

    fn expired(seq: u64, jobs: &[JobId], superseded: &[u64]) -> LogEntry {
        let e = DriverEvent::Expired { jobs: jobs.to_vec(), next_job: 2, superseded: superseded.to_vec() };
        entry(seq, Logged::Event(e))
    }

    /// Retention: job 0's entries (and the first `Expired` entry) are gone
    /// from the final log; the reads along the way saw them.
    fn with_expiry() -> History {
        let mut h = good();
        h.logs_read = vec![h.log.clone(), vec![expired(6, &[0], &[])]];
        h.log = vec![up(1, 0, 4), up(2, 1, 4), place(5, 1, &[(0, 2), (1, 2)]), expired(7, &[0], &[6])];
        h.present.remove(0);
        h
    }

    #[test]
    fn what_an_expiry_forgot_is_missing_from_the_final_log_and_nothing_else() {
        assert_eq!(check(&with_expiry()), Vec::new());
        // The merged history still holds job 0's run: had it not ended
        // before job 1 took its GPUs, that is found though the final log
        // lacks every entry of job 0.
        let mut h = with_expiry();
        h.logs_read[0][3] = entry(4, Logged::Decision(Decision::Note { job: 0, text: "no end".into() }));
        assert_eq!(count(&check(&h), "gpu held twice"), 1, "{:#?}", check(&h));
        // An entry of a job nothing expired may not go missing.
        let mut h = with_expiry();
        h.log.retain(|e| e.seq != 5);
        let v = check(&h);
        assert_eq!(count(&v, "not a prefix"), 1, "{v:#?}");
        assert!(v[0].window[1].contains("no Expired entry names its job"), "{:?}", v[0].window);
        // Nor the last Expired entry, nor an acknowledged job no expiry named.
        let mut h = with_expiry();
        h.log.pop();
        h.logs_read.push(vec![expired(7, &[0], &[6])]);
        assert_eq!(count(&check(&h), "not a prefix"), 1);
        let mut h = with_expiry();
        h.present.clear();
        assert_eq!(count(&check(&h), "lost"), 1, "b was never expired");
    }

    #[test]
    fn a_placement_on_gpus_still_held_shows_the_placements_that_hold_them() {
        let mut h = good();
        h.log = vec![up(1, 0, 4), place(2, 0, &[(0, 3)]), place(3, 1, &[(0, 2)]), finished(4, 0)];
        h.logs_read.clear();
        h.processes.clear();
        let v = check(&h);
        assert_eq!(count(&v, "gpu held twice"), 1, "{v:#?}");
        let x = v.iter().find(|x| x.invariant == "gpu held twice").expect("found");
        assert_eq!(x.what, "host 0 has 4 GPUs; job 1 took 2 of them with 3 held");
        assert_eq!(x.window.len(), 2);
        assert!(x.window[0].starts_with("seq 2") && x.window[1].starts_with("seq 3"), "{:?}", x.window);
        // Placed twice without leaving.
        h.log = vec![up(1, 0, 4), place(2, 0, &[(0, 1)]), place(3, 0, &[(0, 1)])];
        assert_eq!(count(&check(&h), "placed twice"), 1);
    }

    #[test]
    fn one_rank_on_two_hosts_at_once_is_found_with_both_starts() {
        let mut h = good();
        h.processes.push(ProcessEvent { at_s: 5.5, host: 1, job: 1, rank: 0, epoch: 1, started: true });
        let v = check(&h);
        assert_eq!(count(&v, "rank in two places"), 1, "{v:#?}");
        let x = &v[0];
        assert_eq!(
            x.window,
            vec!["5.000 s: host 0 started job 1 rank 0 (epoch 1)", "5.500 s: host 1 started job 1 rank 0 (epoch 1)"]
        );
        // Other ranks of the job may run anywhere.
        let mut h = good();
        h.processes.push(ProcessEvent { at_s: 5.5, host: 1, job: 1, rank: 1, epoch: 1, started: true });
        assert_eq!(check(&h), Vec::new());
        // Nor two placements of one rank on one host: the next epoch's
        // process started while the last one's still ran.
        let mut h = good();
        h.processes.push(ProcessEvent { at_s: 3.5, host: 0, job: 0, rank: 0, epoch: 2, started: true });
        let v = check(&h);
        assert_eq!(count(&v, "rank in two places"), 1, "{v:#?}");
        assert_eq!(v[0].what, "job 0 rank 0 ran twice on host 0 at once (epochs 1 and 2)");
        // Once it stopped, the next one may start there.
        let mut h = good();
        h.processes.push(ProcessEvent { at_s: 4.0, host: 0, job: 0, rank: 0, epoch: 2, started: true });
        assert_eq!(check(&h), Vec::new());
    }

    #[test]
    fn a_job_the_cluster_could_hold_that_never_ran_is_named_and_one_too_big_is_not() {
        let mut h = good();
        h.acknowledged.extend([("c".into(), 2), ("huge".into(), 3)]);
        h.present.extend([("c".into(), 2, 8), ("huge".into(), 3, 9)]);
        let v = check(&h);
        assert_eq!(count(&v, "never ran"), 1, "{v:#?}");
        assert!(v[0].what.starts_with("job \"c\" (number 2) asked for 8 of the cluster's 8 GPUs"), "{}", v[0]);
        // Cancelled, it need not run.
        h.log.push(entry(6, Logged::Event(DriverEvent::Cancelled { job: 2 })));
        assert_eq!(check(&h), Vec::new());
    }
}
