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

use orrery_plebiscito::agent::{Agent, Config, Output};
use orrery_plebiscito::utility::{BidPolicy, ClusterMap, Demand, JobRequest, Resources, Utility};
use orrery_plebiscito::wire::{self, Envelope, Key};
use orrery_trace::formats::Format;
use proptest::prelude::*;
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
    /// random bytes (so any message a key holder could send), fed to an
    /// agent with time passing. Its committed GPUs stay within its node.
    #[test]
    fn agent_datagrams(datagrams in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..160), 0u32..5, any::<bool>()), 1..24)) {
        let key = Key::new(vec![9; 32]).expect("key");
        let map = Arc::new(ClusterMap { leaf_of: vec![0, 0, 1, 1], nic_gbps: vec![25.0; 4], uplink_gbps: vec![50.0; 2] });
        let total = Demand { gpus: 8.0, cpus: 32.0, mem_gib: 256.0 };
        let config = Config { resend_us: Some(100_000), ..Config::new(BidPolicy::aware(Utility::Lgf)) };
        let mut agent = Agent::new(1, vec![0, 2, 3], Resources::new(total), map, config);
        let mut now = 0u64;
        for (bytes, sender, sealed) in datagrams {
            let datagram = match (sealed, postcard::take_from_bytes::<Envelope>(&bytes)) {
                (true, Ok((env, _))) => wire::seal(&key, &env),
                _ => bytes,
            };
            let mut out: Vec<Output> = Vec::new();
            if let Ok(env) = wire::open(&key, &datagram) {
                match env.body {
                    wire::Body::Protocol(msg) if sender != 1 => { agent.receive_from(now, sender, msg, &mut out); }
                    wire::Body::Submit(job) => agent.submit(now, job, &mut out),
                    wire::Body::Finish(job) => agent.finish(job),
                    wire::Body::SyncReply { verdicts, placed } => { agent.learn(verdicts, placed); }
                    wire::Body::Protocol(_) | wire::Body::Receipt { .. } | wire::Body::SyncRequest => {}
                }
            }
            now += 200_000;
            agent.tick(now, &mut out);
            let free = agent.committed_free().free.gpus;
            prop_assert!((-1e-9..=8.0 + 1e-9).contains(&free), "free GPUs {free}");
        }
    }
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
    let r = orrery_interleave::compat::parse("req.json", &text).expect("parses");
    let e = r.solve(None).map(|_| ()).expect_err("refused");
    assert!(matches!(e, orrery_interleave::compat::CompatError::Unify(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("iterations of 60.0 ms") && e.contains("expected at most 100000"), "{e}");
}
