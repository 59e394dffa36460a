//! Fuzzing every parser and the auction agent's message handler on stable
//! Rust (cargo-fuzz needs nightly). proptest drives structure-aware
//! mutations of real inputs: the shipped experiments, the heads of the
//! traces in `data/`, the compatibility request of CASSINI's Fig. 5, sealed
//! agent datagrams. Every input must give an answer or a clear error: no
//! panic, and no hang (each case runs under a time-out).
//!
//! `ORRERY_FUZZ_CASES` sets the cases per target: 48 by default (seconds, in
//! `.ci/run`), thousands for a long hunt. A failure prints the smallest input
//! proptest found; add it to the regression tests of the parser it broke.

use orrery_plebiscito::agent::{Agent, Config, Msg, Verdict};
use orrery_plebiscito::bundle::Bid;
use orrery_plebiscito::daemon::{Capacity, Clock, Daemon, MAX_DATAGRAM};
use orrery_plebiscito::utility::{Arch, BidPolicy, ClusterMap, Demand, JobRequest, Placement, Resources, Utility};
use orrery_plebiscito::wire::{self, Body, CLIENT, Envelope, Key};
use orrery_trace::formats::Format;
use proptest::prelude::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn config() -> ProptestConfig {
    let cases = std::env::var("ORRERY_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    // A case that runs this long is a hang (the slowest seed takes well under a second).
    ProptestConfig { cases, timeout: 60_000, failure_persistence: None, ..ProptestConfig::default() }
}

/// Numbers at the edges of a type, or that broke parsers before.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1e300",
    "-1e300",
    "1e-300",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "9223372036854775807",
    "18446744073709551616",
    "4294967296",
    "65536",
    "16384",
    "0.5",
    "1",
    "2",
    "3",
    "abc",
];
/// Anything else worth inserting.
const TOKENS: &[&str] = &[
    "\"\"",
    "\"x\"",
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    ":",
    "\n",
    "\t",
    "#",
    "true",
    "null",
    "\u{0}",
    "é",
    "[[workload.job]]\n",
    "\"abc\"",
    "batch size abc",
    "-1",
    "1e300",
    "nan",
];

/// One edit of an input's bytes.
#[derive(Debug, Clone)]
enum Edit {
    /// Replace the number at or after this offset with a token.
    Number(usize, usize),
    /// Insert a token at this offset.
    Insert(usize, usize),
    /// Delete this many bytes from this offset.
    Delete(usize, usize),
    /// Copy this many bytes from this offset to the same place (repeats a line or field).
    Repeat(usize, usize),
    /// Flip bits of one byte.
    Flip(usize, u8),
    /// Cut the input here.
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        12 => (any::<usize>(), 0..NUMBERS.len()).prop_map(|(p, t)| Edit::Number(p, t)),
        2 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(p, t)| Edit::Insert(p, t)),
        2 => (any::<usize>(), 1usize..32).prop_map(|(p, n)| Edit::Delete(p, n)),
        2 => (any::<usize>(), 1usize..200).prop_map(|(p, n)| Edit::Repeat(p, n)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Flip(p, b)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn mutate(seed: &str, edits: &[Edit]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for e in edits {
        let at = |p: usize, b: &[u8]| if b.is_empty() { 0 } else { p % (b.len() + 1) };
        match *e {
            Edit::Number(p, t) => {
                let start = at(p, &b);
                if let Some(i) = b[start..].iter().position(u8::is_ascii_digit).map(|i| i + start) {
                    let mut j = i;
                    while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.' || b[j] == b'e') {
                        j += 1;
                    }
                    b.splice(i..j, NUMBERS[t].bytes());
                }
            }
            Edit::Insert(p, t) => {
                let i = at(p, &b);
                b.splice(i..i, TOKENS[t].bytes());
            }
            Edit::Delete(p, n) => {
                let i = at(p, &b);
                b.drain(i..(i + n).min(b.len()));
            }
            Edit::Repeat(p, n) => {
                let i = at(p, &b);
                let copy: Vec<u8> = b[i..(i + n).min(b.len())].to_vec();
                b.splice(i..i, copy);
            }
            Edit::Flip(p, x) => {
                if !b.is_empty() {
                    let i = p % b.len();
                    b[i] ^= x;
                }
            }
            Edit::Truncate(p) => b.truncate(at(p, &b)),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first `n` lines of a file.
fn head(path: &Path, n: usize) -> String {
    read(path).lines().take(n).map(|l| format!("{l}\n")).collect()
}

fn experiment_seeds() -> Vec<(String, String)> {
    let dir = repo().join("experiments");
    let mut seeds: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("experiments/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| (p.display().to_string(), read(&p)))
        .filter(|(_, t)| !t.contains("kind = \"auction-scale\""))
        .collect();
    seeds.sort();
    seeds
}

proptest! {
    #![proptest_config(config())]

    /// Experiment files: parsed, then the first scenario's cluster and jobs
    /// built and checked (for workloads small enough to build in a moment).
    #[test]
    fn experiment_files(seed in 0usize..64, edits in prop::collection::vec(edit(), 1..5)) {
        let seeds = experiment_seeds();
        let (name, text) = &seeds[seed % seeds.len()];
        let text = mutate(text, &edits);
        if let Ok(e) = orrery_lab::experiment::parse(name, &text) {
            // A trace without `jobs` is read whole (82,247 Philly jobs): not small.
            let jobs = e.workload.jobs.or(e.workload.trace.is_none().then_some(60));
            let small = jobs.is_some_and(|n| n <= 5_000) && e.workload.listed.len() <= 5_000;
            if small {
                let first = e.scenarios.iter().find(|s| s.congested.is_empty()).map(|s| s.name.as_str());
                let _ = e.scenario(first, &repo().join("experiments"), e.seeds.first().copied().unwrap_or(1));
            }
        }
    }

    /// Cluster description files (TOML), as `topology.file` reads them.
    #[test]
    fn topology_files(edits in prop::collection::vec(edit(), 1..5)) {
        let seed = "[[hosts]]\nname = \"a\"\ngpus = 8\ngpu_type = \"a100\"\n[[hosts]]\nname = \"b\"\ngpus = 8\ngpu_type = \"a100\"\n\
                    [[switches]]\nname = \"leaf\"\ntier = \"leaf\"\n\
                    [[cables]]\na = \"a\"\nb = \"leaf\"\ngbps = 100\n[[cables]]\na = \"b\"\nb = \"leaf\"\ngbps = 100\n";
        let text = mutate(seed, &edits);
        if let Ok(t) = orrery_model::setups::parse_topology("cluster.toml", &text) {
            // What was accepted is usable: every host reaches every other.
            prop_assert!(!t.hosts.is_empty());
            prop_assert!(t.hosts.len() < 2 || !t.paths(0, t.hosts.len() - 1).is_empty());
        }
    }

    /// Trace readers, each format forced and sniffed, on the heads of the
    /// real traces. Accepted rows make jobs a simulator can take.
    #[test]
    fn trace_rows(seed in 0usize..8, format in 0usize..8, edits in prop::collection::vec(edit(), 1..5)) {
        let data = repo().join("data");
        let seeds = [
            head(&data.join("philly/philly_jobs_pollux.csv"), 12),
            head(&data.join("philly/gavel_msr_seed0_e13805.trace"), 6),
            head(&data.join("philly/muri_trace1.csv"), 8),
            head(&data.join("profiles/tiresias_60_job.csv"), 8),
            head(&repo().join("examples/live/vgg-a.jsonl"), 4),
            // Alibaba PAI v2023's pod-list header (the format; the list itself is in ../shared/data).
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
             openb-pod-0017,12000,16384,1,1000,,LS,Running,0,12537496,0\n".to_string(),
        ];
        let text = mutate(&seeds[seed % seeds.len()], &edits);
        let format = Format::ALL.get(format).copied();
        let parsed = orrery_trace::formats::parse("trace.csv", &text, format, 1);
        for j in &parsed.items {
            prop_assert!(j.workers >= 1 && j.arrival_s.is_finite() && j.arrival_s >= 0.0, "{j:?} from {text:?}");
        }
    }

    /// `orrery compat` requests: parsed, then solved within bounded work.
    #[test]
    fn compat_requests(edits in prop::collection::vec(edit(), 1..5)) {
        let text = mutate(&read(&repo().join("experiments/compat/cassini-fig5.json")), &edits);
        if let Ok(r) = orrery_interleave::compat::parse("req.json", &text) {
            let _ = r.solve(None);
        }
    }

    /// Jobs as `orrery agent --submit` reads them, and the agent's checks.
    #[test]
    fn submitted_jobs(edits in prop::collection::vec(edit(), 1..5)) {
        let line = r#"{"id":1,"arch":"Ring","workers":2,"worker":{"gpus":4.0,"cpus":0.0,"mem_gib":0.0},"server":{"gpus":0.0,"cpus":0.0,"mem_gib":0.0},"gbps":5.0,"runtime_s":600.0,"weight":1.0}"#;
        if let Ok(job) = serde_json::from_str::<JobRequest>(&mutate(line, &edits)) {
            let _ = job.check();
        }
    }

    /// Agent datagrams: random bytes, and authentic envelopes decoded from
    /// random bytes (so any message a key holder could send, under any
    /// sender id, from a peer's address or not, at any time), fed to the
    /// agent's datagram handler with time passing. Its committed GPUs stay
    /// within its node and every answer fits a datagram.
    #[test]
    fn agent_datagrams(datagrams in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..200), 0u32..6, any::<bool>(), any::<bool>()), 1..24)) {
        let mut d = daemon();
        let mut now = 0u64;
        for (bytes, from, sealed, fresh) in datagrams {
            let datagram = match (sealed, postcard::take_from_bytes::<Envelope>(&bytes)) {
                // Half of the authentic ones are stamped now (inside the replay window).
                (true, Ok((mut env, _))) => {
                    if fresh {
                        env.sent_us = T0 + now;
                    }
                    wire::seal(&key(), &env)
                }
                _ => bytes,
            };
            let clock = Clock { mono_us: now, wall_us: T0 + now };
            let step = d.on_datagram(clock, peer(from), &datagram);
            prop_assert!(step.datagrams.iter().all(|(_, b)| b.len() <= MAX_DATAGRAM));
            now += 200_000;
            let step = d.on_tick(Clock { mono_us: now, wall_us: T0 + now });
            prop_assert!(step.datagrams.iter().all(|(_, b)| b.len() <= MAX_DATAGRAM));
            let free = d.agent().committed_free().free.gpus;
            prop_assert!((-1e-9..=8.0 + 1e-9).contains(&free), "free GPUs {free}");
        }
    }

    /// Messages only key holders can send, built from their parts (jobs,
    /// bids, verdicts and placements with edge values), from a peer's own
    /// address: no panic, no hang, committed GPUs within the node.
    #[test]
    fn key_holder_messages(bodies in prop::collection::vec(body(), 1..16)) {
        let mut d = daemon();
        let mut now = 0u64;
        for (sender, body) in bodies {
            let env = Envelope { sender, sent_us: T0 + now, nonce: now, body };
            let clock = Clock { mono_us: now, wall_us: T0 + now };
            d.on_datagram(clock, peer(sender), &wire::seal(&key(), &env));
            now += 150_000;
            d.on_tick(Clock { mono_us: now, wall_us: T0 + now });
            let free = d.agent().committed_free().free.gpus;
            prop_assert!((-1e-9..=8.0 + 1e-9).contains(&free), "free GPUs {free}");
        }
    }

    /// Agent state files as a restart reads them: mutated real states are
    /// refused with a reason or restored within the node's resources.
    #[test]
    fn agent_state_files(edits in prop::collection::vec(edit(), 1..5)) {
        let text = mutate(STATE, &edits);
        if let Ok(state) = serde_json::from_str::<orrery_plebiscito::daemon::State>(&text) {
            let mut a = agent(state.id);
            if a.restore(state.verdicts, state.placed).is_ok() {
                let free = a.committed_free().free.gpus;
                prop_assert!((-1e-9..=8.0 + 1e-9).contains(&free), "free GPUs {free}");
            }
        }
    }
}

/// µs since the epoch at the fuzzers' start (2027).
const T0: u64 = 1_800_000_000_000_000;

/// A state file agent 1 wrote with two jobs placed, one on it.
const STATE: &str = r#"{"id":1,"total":{"gpus":8.0,"cpus":32.0,"mem_gib":256.0},"free":{"gpus":4.0,"cpus":32.0,"mem_gib":256.0},
"usage":{"nic":[0.0,5.0,5.0,0.0],"uplink":[5.0,5.0]},
"verdicts":{"1":{"Placed":[[[1,1],[2,1]]]},"2":{"Failed":"1 of 2 components had a bidder"},"3":{"Placed":[[[0,2]]]}},
"sent":[10,2000,300],"bad_datagrams":0,"refused_bids":0,
"placed":[[{"id":1,"arch":"Ring","workers":2,"worker":{"gpus":4.0,"cpus":0.0,"mem_gib":0.0},"server":{"gpus":0.0,"cpus":0.0,"mem_gib":0.0},"gbps":5.0,"peak_gbps":5.0,"runtime_s":600.0,"weight":1.0},[[[1,1],[2,1]]]],
[{"id":3,"arch":"Ring","workers":2,"worker":{"gpus":1.0,"cpus":0.0,"mem_gib":0.0},"server":{"gpus":0.0,"cpus":0.0,"mem_gib":0.0},"gbps":5.0,"peak_gbps":5.0,"runtime_s":600.0,"weight":1.0},[[[0,2]]]]]}"#;

fn key() -> Key {
    Key::new(vec![9; 32]).expect("key")
}

fn peer(i: u32) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000 + (i % 1000) as u16))
}

fn agent(id: u32) -> Agent {
    let map = Arc::new(ClusterMap { leaf_of: vec![0, 0, 1, 1], nic_gbps: vec![25.0; 4], uplink_gbps: vec![50.0; 2] });
    let total = Demand { gpus: 8.0, cpus: 32.0, mem_gib: 256.0 };
    let config = Config { resend_us: Some(100_000), ..Config::new(BidPolicy::aware(Utility::Lgf)) };
    let neighbours = (0..4).filter(|&p| p != id).collect();
    Agent::new(id, neighbours, Resources::new(total), map, config)
}

/// Agent 1 of four, done learning (peer 0 answered).
fn daemon() -> Daemon {
    let peers = (0..4).map(|p| (p, peer(p))).collect();
    let capacity = Capacity { name: "fuzz".into(), largest_gpus: 8.0, total_gpus: 32.0 };
    let mut d = Daemon::new(agent(1), peers, key(), capacity);
    let done = Body::SyncReply { verdicts: Vec::new(), placed: Vec::new(), last: true };
    let env = Envelope { sender: 0, sent_us: T0, nonce: 0, body: done };
    d.on_datagram(Clock { mono_us: 0, wall_us: T0 }, peer(0), &wire::seal(&key(), &env));
    assert!(!d.is_learning());
    d
}

fn edge_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-1.0),
        Just(1.0),
        Just(4.0),
        Just(1e300),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-0.0),
        Just(1e-300),
        0.0f64..16.0
    ]
}

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1), Just(3), Just(u64::MAX), Just(1 << 63), 0u64..8]
}

fn job() -> impl Strategy<Value = JobRequest> {
    (
        edge_u64(),
        any::<bool>(),
        prop_oneof![Just(0u16), Just(1), Just(2), Just(4), Just(u16::MAX), 0u16..40],
        edge_f64(),
        edge_f64(),
        edge_f64(),
        edge_f64(),
    )
        .prop_map(|(id, ps, workers, gpus, gbps, runtime_s, weight)| JobRequest {
            id,
            arch: if ps { Arch::ParameterServer } else { Arch::Ring },
            workers,
            worker: Demand { gpus, cpus: 1.0, mem_gib: 1.0 },
            server: Demand { gpus: 0.0, cpus: 1.0, mem_gib: 1.0 },
            gbps,
            peak_gbps: gbps,
            runtime_s,
            weight,
        })
}

fn placement() -> impl Strategy<Value = Placement> {
    prop::collection::vec(
        prop::collection::vec((prop_oneof![0u32..5, Just(u32::MAX)], prop_oneof![0usize..4, Just(usize::MAX)]), 0..4),
        0..3,
    )
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![placement().prop_map(Verdict::Placed), Just(Verdict::Aborted), Just(Verdict::Failed("x".into()))]
}

fn bid() -> impl Strategy<Value = Bid> {
    (edge_f64(), prop_oneof![0u32..5, Just(u32::MAX)], edge_u64(), prop_oneof![0u16..4, Just(u16::MAX)])
        .prop_map(|(value, node, stamp, slot)| Bid { value, node, stamp, slot })
}

/// A sender (a peer, itself, a stranger or a client) and what it says.
fn body() -> impl Strategy<Value = (u32, Body)> {
    let sender = prop_oneof![0u32..5, Just(CLIENT)];
    let body = prop_oneof![
        (job(), prop::collection::vec(prop::collection::vec(bid(), 0..6), 0..3), any::<u32>())
            .prop_map(|(job, bids, depth)| Body::Protocol(Msg::Bundle { job, bids, depth })),
        edge_u64().prop_map(|job| Body::Protocol(Msg::Finished { job })),
        job().prop_map(Body::Submit),
        edge_u64().prop_map(Body::Finish),
        Just(Body::SyncRequest),
        (
            prop::collection::vec((edge_u64(), verdict()), 0..6),
            prop::collection::vec((job(), placement()), 0..4),
            any::<bool>()
        )
            .prop_map(|(verdicts, placed, last)| Body::SyncReply { verdicts, placed, last }),
    ];
    (sender, body)
}

// Regressions: inputs the issue's testers found, each a class the targets
// above now cover (the topology, workload and agent classes have their own
// tests beside their code and in `tests/agents.rs`).

#[test]
fn an_alibaba_row_longer_than_its_header_is_an_error_not_a_panic() {
    // Nine header columns (the required five and four more), eleven in the row.
    let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time\n\
                pod-0,1000,16384,1,1000,,LS,Running,0,x,y\n";
    let parsed = orrery_trace::formats::parse("pods.csv", text, Some(Format::AlibabaV2023), 1);
    assert!(parsed.items.is_empty());
    assert!(parsed.errors.first().is_some_and(|e| e.to_string().starts_with("pods.csv:2:")), "{:?}", parsed.errors);
}

#[test]
fn a_gavel_batch_size_that_is_not_a_number_is_an_error_not_the_default() {
    let row = "ResNet-50 (batch size abc)\tcmd\t-n\t1\t1000\t0.0\t1\n";
    let parsed = orrery_trace::formats::parse("g.trace", row, Some(Format::Gavel), 1);
    assert!(parsed.items.is_empty());
    let e = parsed.errors.first().map(ToString::to_string).unwrap_or_default();
    assert!(e.contains("job_type") && e.contains("a batch size that is a positive integer"), "{e}");
    let ok = orrery_trace::formats::parse("g.trace", &row.replace("abc", "64"), Some(Format::Gavel), 1);
    assert_eq!(ok.items.first().map(|j| j.batch), Some(64));
}

#[test]
fn a_compat_request_with_a_1e300_ms_period_is_refused_at_once() {
    let text = read(&repo().join("experiments/compat/cassini-fig5.json"))
        .replace("\"period_ms\": 40,", "\"period_ms\": 1e300,");
    let e = orrery_interleave::compat::parse("req.json", &text).expect_err("out of range").to_string();
    assert!(e.contains("period_ms: expected a number from 0.001 to 8.64e7, found 1e300"), "{e}");
    // A day-long reference is in range, and the circle's limit refuses it.
    let text = text.replace("1e300", "86400000");
    let r = orrery_interleave::compat::parse("req.json", &text).expect("parses");
    let e = r.solve(None).map(|_| ()).expect_err("refused");
    assert!(matches!(e, orrery_interleave::compat::CompatError::Unify(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("iterations of 60.0 ms") && e.contains("expected at most 100000"), "{e}");
}

#[test]
fn a_compat_job_of_four_billion_workers_is_refused_with_the_limit_named() {
    let text = r#"{"link_gbps": 50, "jobs": [{"name": "b", "model": "vgg19", "workers": 4294967295}, {"name": "c", "model": "dlrm", "workers": 5000}]}"#;
    let e = orrery_interleave::compat::parse("req.json", text)
        .and_then(|r| r.solve(None).map(|_| ()))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("jobs[0].workers") && e.contains("1 to 65536") && e.contains("4294967295"), "{e}");
    let text = text.replace("4294967295", "4");
    let e = orrery_interleave::compat::parse("req.json", &text)
        .and_then(|r| r.solve(None).map(|_| ()))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("jobs[1] (c).workers") && e.contains("1 to 4096 for dlrm"), "{e}");
}

#[test]
fn the_state_files_fuzzer_starts_from_a_state_that_restores() {
    let state: orrery_plebiscito::daemon::State = serde_json::from_str(STATE).expect("a state file");
    let mut a = agent(state.id);
    a.restore(state.verdicts, state.placed).expect("fits agent 1");
    assert_eq!(a.committed_free().free.gpus, 4.0, "job 1 holds 4 of agent 1's 8 GPUs");
    assert_eq!(a.placed().len(), 2);
}
