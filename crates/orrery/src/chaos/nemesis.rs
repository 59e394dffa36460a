//! The nemesis of `orrery bench chaos`: which fault, on which processes,
//! when, drawn from a seed, so a failing run can be run again exactly
//! (Jepsen's nemeses and etcd's robustness tests draw theirs the same way).
//!
//! A schedule alternates a fault window and a quiet window, after a warm-up
//! and before a final quiet stretch in which every job must run again. The
//! kinds asked for come round in a shuffled order, so a run of `k` or more
//! faults has each of `k` kinds at least once. O(faults).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A process of the chaos cluster, each in a network namespace of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Member {
    /// Member `i` of the 3-member etcd.
    Etcd(usize),
    /// Replica `i` of `orrery serve`.
    Replica(usize),
    /// Node agent `i` (host `h{i}`).
    Agent(usize),
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Member::Etcd(i) => write!(f, "etcd{i}"),
            Member::Replica(i) => write!(f, "replica{i}"),
            Member::Agent(i) => write!(f, "h{i}"),
        }
    }
}

/// How many of each the cluster has.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// etcd members.
    pub etcd: usize,
    /// Service replicas.
    pub replicas: usize,
    /// Node agents.
    pub agents: usize,
}

impl Shape {
    /// Every member, etcd first.
    pub fn members(&self) -> Vec<Member> {
        (0..self.etcd)
            .map(Member::Etcd)
            .chain((0..self.replicas).map(Member::Replica))
            .chain((0..self.agents).map(Member::Agent))
            .collect()
    }
}

/// One fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// No packet between a member of `a` and one of `b`, either way.
    Partition {
        /// One side.
        a: Vec<Member>,
        /// The other.
        b: Vec<Member>,
    },
    /// `from`'s packets to `to` are dropped; `to`'s still reach `from`.
    OneWay {
        /// The sender cut off.
        from: Member,
        /// The receiver it cannot reach.
        to: Member,
    },
    /// Two halves that overlap in `bridge`: it reaches both, they do not
    /// reach each other (Jepsen's bridge).
    Bridge {
        /// One half.
        a: Vec<Member>,
        /// The member in both.
        bridge: Member,
        /// The other half.
        b: Vec<Member>,
    },
    /// SIGSTOP, and SIGCONT at the end.
    Pause {
        /// The process paused.
        member: Member,
    },
    /// SIGKILL, and a restart at the end.
    Kill {
        /// The process killed.
        member: Member,
    },
    /// The host's clock jumps `skew_ms` under its running agent and
    /// training processes, and jumps back at the end. CLOCK_REALTIME has no
    /// namespace, so the jump is the project's override: the file
    /// `ORRERY_CLOCK_SKEW_FILE` names, which they read again every 100 ms.
    Clock {
        /// Agent index.
        agent: usize,
        /// Its clock minus the true time, ms.
        skew_ms: i64,
    },
    /// The etcd member's data directory (a small tmpfs) filled to the last
    /// byte, and emptied at the end.
    DiskFull {
        /// etcd member index.
        etcd: usize,
    },
    /// `percent` of the packets the member receives on the control network
    /// dropped at random (nftables' numgen; this kernel has no netem).
    Loss {
        /// The member.
        member: Member,
        /// Share dropped, %.
        percent: u32,
    },
    /// Every packet the member receives on the control network held back
    /// `ms` (an NFQUEUE read by the chaos process: this kernel has no
    /// netem).
    Delay {
        /// The member.
        member: Member,
        /// The delay, ms.
        ms: u64,
    },
    /// SIGKILL of one of the agent's training processes (the command it
    /// started, not the rank's leader shell): a crashed worker, which the
    /// agent starts again after its back-off.
    Crash {
        /// Agent index.
        agent: usize,
        /// Which of its processes (sorted by job and rank): this modulo
        /// how many run then.
        pick: u32,
    },
    /// The host's clock runs fast or slow by `ppm` parts per million under
    /// its running agent and training processes (the skew file rewritten
    /// every 100 ms), and steps back at the end. A real oscillator is off by
    /// tens of ppm; these are 1–5%, so a window of seconds moves the clock
    /// by tens to hundreds of milliseconds, a slot's length.
    Drift {
        /// Agent index.
        agent: usize,
        /// Rate error, parts per million (negative: slow).
        ppm: i64,
    },
}

impl Fault {
    /// The kind's name, as `--faults` takes it.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Partition { .. } => "partition",
            Fault::OneWay { .. } => "one-way",
            Fault::Bridge { .. } => "bridge",
            Fault::Pause { .. } => "pause",
            Fault::Kill { .. } => "kill",
            Fault::Clock { .. } => "clock",
            Fault::DiskFull { .. } => "disk-full",
            Fault::Loss { .. } => "loss",
            Fault::Delay { .. } => "delay",
            Fault::Drift { .. } => "drift",
            Fault::Crash { .. } => "crash",
        }
    }
}

/// Every kind `--faults` takes.
pub const KINDS: [&str; 11] =
    ["partition", "one-way", "bridge", "pause", "kill", "clock", "disk-full", "loss", "delay", "drift", "crash"];

/// A fault at a time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    /// From the start of the run, s.
    pub at_s: f64,
    /// How long it lasts, s.
    pub for_s: f64,
    /// What it is.
    pub fault: Fault,
}

/// Window lengths, s.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// Before the first fault.
    pub warm_up_s: f64,
    /// A fault lasts between these.
    pub fault_s: (f64, f64),
    /// Quiet between faults, between these.
    pub quiet_s: (f64, f64),
    /// Quiet at the end, at least.
    pub final_quiet_s: f64,
}

impl Default for Windows {
    fn default() -> Self {
        Windows { warm_up_s: 15.0, fault_s: (4.0, 10.0), quiet_s: (8.0, 14.0), final_quiet_s: 20.0 }
    }
}

impl Windows {
    /// The default's for runs of 150 s or more; shorter runs (CI's) get
    /// half-length windows, so a minute holds three to five faults.
    pub fn for_run(seconds: f64) -> Windows {
        if seconds >= 150.0 {
            Windows::default()
        } else {
            Windows { warm_up_s: 8.0, fault_s: (3.0, 6.0), quiet_s: (5.0, 8.0), final_quiet_s: 12.0 }
        }
    }
}

/// Parses `--faults`: `all` or kinds separated by commas.
pub fn parse_kinds(s: &str) -> Result<Vec<&'static str>, String> {
    if s.trim() == "all" {
        return Ok(KINDS.to_vec());
    }
    let mut out = Vec::new();
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let Some(&known) = KINDS.iter().find(|&&n| n == k) else {
            return Err(format!("--faults: unknown kind {k:?}; expected `all` or some of {}", KINDS.join(", ")));
        };
        if !out.contains(&known) {
            out.push(known);
        }
    }
    if out.is_empty() {
        return Err("--faults: expected `all` or at least one kind".into());
    }
    Ok(out)
}

/// A random split of `members` into two non-empty sides.
fn two_sides(rng: &mut ChaCha8Rng, members: &[Member]) -> (Vec<Member>, Vec<Member>) {
    let mut m = members.to_vec();
    m.shuffle(rng);
    let cut = rng.random_range(1..m.len().max(2));
    let b = m.split_off(cut.min(m.len()));
    let (mut a, mut b) = (m, b);
    a.sort();
    b.sort();
    (a, b)
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// One fault of `kind` on `shape`.
fn draw(rng: &mut ChaCha8Rng, kind: &str, shape: Shape) -> Fault {
    let members = shape.members();
    match kind {
        "partition" => {
            let (a, b) = two_sides(rng, &members);
            Fault::Partition { a, b }
        }
        "one-way" => {
            let from = pick(rng, &members);
            let others: Vec<Member> = members.iter().copied().filter(|&m| m != from).collect();
            Fault::OneWay { from, to: pick(rng, &others) }
        }
        "bridge" => {
            let bridge = pick(rng, &members);
            let rest: Vec<Member> = members.iter().copied().filter(|&m| m != bridge).collect();
            let (a, b) = two_sides(rng, &rest);
            Fault::Bridge { a, bridge, b }
        }
        "pause" => Fault::Pause { member: pick(rng, &members) },
        "kill" => Fault::Kill { member: pick(rng, &members) },
        "clock" => Fault::Clock {
            agent: rng.random_range(0..shape.agents.max(1)),
            skew_ms: if rng.random_bool(0.5) { 60_000 } else { -60_000 },
        },
        "disk-full" => Fault::DiskFull { etcd: rng.random_range(0..shape.etcd.max(1)) },
        "crash" => Fault::Crash { agent: rng.random_range(0..shape.agents.max(1)), pick: rng.random() },
        "delay" => Fault::Delay { member: pick(rng, &members), ms: rng.random_range(100..=800) },
        "drift" => Fault::Drift {
            agent: rng.random_range(0..shape.agents.max(1)),
            ppm: rng.random_range(10_000..=50_000) * if rng.random_bool(0.5) { 1 } else { -1 },
        },
        _ => Fault::Loss { member: pick(rng, &members), percent: rng.random_range(20..=50) },
    }
}

/// The faults of a run of `seconds` from `seed`: kinds in shuffled rounds,
/// windows as `w` says, none after `seconds − final_quiet_s`. O(faults).
pub fn schedule(seed: u64, seconds: f64, kinds: &[&str], shape: Shape, w: Windows) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut round: Vec<&str> = Vec::new();
    let mut t = w.warm_up_s;
    loop {
        let for_s = rng.random_range(w.fault_s.0..=w.fault_s.1);
        if kinds.is_empty() || t + for_s > seconds - w.final_quiet_s {
            return out;
        }
        if round.is_empty() {
            round = kinds.to_vec();
            round.shuffle(&mut rng);
        }
        let kind = round.pop().unwrap_or("pause");
        out.push(Planned { at_s: t, for_s, fault: draw(&mut rng, kind, shape) });
        t += for_s + rng.random_range(w.quiet_s.0..=w.quiet_s.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape { etcd: 3, replicas: 2, agents: 4 };

    #[test]
    fn a_seed_gives_one_schedule_and_every_kind_comes_round() {
        let a = schedule(7, 300.0, &KINDS, SHAPE, Windows::default());
        assert_eq!(a, schedule(7, 300.0, &KINDS, SHAPE, Windows::default()));
        assert_ne!(a, schedule(8, 300.0, &KINDS, SHAPE, Windows::default()));
        // 300 s: 15 s warm-up, then at most 24 s a fault and its quiet,
        // at least 12: between 11 and 22 faults; the first 11 are one each.
        assert!((11..=22).contains(&a.len()), "{}", a.len());
        let mut first: Vec<&str> = a[..KINDS.len()].iter().map(|p| p.fault.kind()).collect();
        first.sort_unstable();
        let mut all = KINDS.to_vec();
        all.sort_unstable();
        assert_eq!(first, all);
        for (p, q) in a.iter().zip(&a[1..]) {
            assert!(q.at_s >= p.at_s + p.for_s + 8.0, "a quiet window between faults: {p:?} {q:?}");
        }
        let last = a.last().expect("faults");
        assert!(last.at_s + last.for_s <= 280.0 + 1e-9, "the final quiet stretch: {last:?}");
    }

    #[test]
    fn faults_name_members_that_exist_and_sides_that_do_not_overlap() {
        for seed in 0..50 {
            for p in schedule(seed, 600.0, &KINDS, SHAPE, Windows::default()) {
                let all = SHAPE.members();
                match &p.fault {
                    Fault::Partition { a, b } => {
                        assert!(!a.is_empty() && !b.is_empty() && a.len() + b.len() == all.len());
                        assert!(a.iter().all(|m| !b.contains(m)));
                    }
                    Fault::Bridge { a, bridge, b } => {
                        assert!(!a.is_empty() && !b.is_empty() && a.len() + b.len() + 1 == all.len());
                        assert!(!a.contains(bridge) && !b.contains(bridge));
                    }
                    Fault::OneWay { from, to } => assert!(from != to && all.contains(from) && all.contains(to)),
                    Fault::Pause { member } | Fault::Kill { member } => assert!(all.contains(member)),
                    Fault::Loss { member, percent } => assert!(all.contains(member) && (20..=50).contains(percent)),
                    Fault::Clock { agent, skew_ms } => assert!(*agent < 4 && skew_ms.abs() == 60_000),
                    Fault::DiskFull { etcd } => assert!(*etcd < 3),
                    Fault::Delay { member, ms } => assert!(all.contains(member) && (100..=800).contains(ms)),
                    Fault::Drift { agent, ppm } => assert!(*agent < 4 && (10_000..=50_000).contains(&ppm.abs())),
                    Fault::Crash { agent, .. } => assert!(*agent < 4),
                }
            }
        }
    }

    #[test]
    fn a_minute_holds_three_or_more_faults() {
        for seed in 0..20 {
            let n = schedule(seed, 60.0, &KINDS, SHAPE, Windows::for_run(60.0)).len();
            assert!((3..=5).contains(&n), "seed {seed}: {n} faults");
        }
    }

    #[test]
    fn kinds_are_parsed_by_name_and_an_unknown_one_is_named() {
        assert_eq!(parse_kinds("all").map(|k| k.len()), Ok(11));
        assert_eq!(parse_kinds("pause, kill,pause"), Ok(vec!["pause", "kill"]));
        let e = parse_kinds("pause,netem").expect_err("unknown");
        assert!(e.contains("\"netem\"") && e.contains("disk-full"), "{e}");
        assert!(parse_kinds(" , ").is_err());
    }
}
