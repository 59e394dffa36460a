//! End to end: eight `orrery agent --auction` processes bid over real UDP on
//! loopback; a stream of jobs is placed and one agent is killed in the
//! middle of an auction. The survivors' state files must show Plebiscito's
//! invariants: every job decided the same way everywhere, no GPU committed
//! twice or beyond capacity, and the same reserved bandwidth everywhere.
//!
//! A second test attacks four agents: forged, truncated, padded, misaddressed
//! and replayed datagrams, a key holder bidding for another node, invalid
//! jobs, a flood of junk, and SIGKILLs with restarts from the state file and
//! from the peers. A third sends a burst of submissions that meets the
//! agents' back-pressure.

use orrery_plebiscito::agent::Msg;
use orrery_plebiscito::bundle::Bid;
use orrery_plebiscito::utility::JobRequest;
use orrery_plebiscito::wire::{self, Body, CLIENT, Envelope, Key};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const AGENTS: usize = 8;
const KILLED: usize = 5;

/// A folder removed when the test ends, even when it fails.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("orrery-agents-").tempdir().expect("temp dir")
}

/// The cluster key, mode 600.
fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join("cluster.key");
    std::fs::write(&f, b"0123456789abcdef0123456789abcdef").expect("key");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    f
}

fn job_line(job: u64, workers: u32, gpus: f64) -> String {
    format!(
        r#"{{"id":{job},"arch":"Ring","workers":{workers},"worker":{{"gpus":{gpus:?},"cpus":0.0,"mem_gib":0.0}},"server":{{"gpus":0.0,"cpus":0.0,"mem_gib":0.0}},"gbps":5.0,"runtime_s":600.0,"weight":1.0}}"#
    )
}

/// Runs `orrery agent --submit` for one job; whether it succeeded, and its stderr.
fn try_submit(dir: &Path, to: &str, job: u64, workers: u32, gpus: f64) -> (bool, String) {
    let file = dir.join(format!("job-{job}.jsonl"));
    std::fs::write(&file, job_line(job, workers, gpus) + "\n").expect("job file");
    let out = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["agent", "--submit"])
        .arg(&file)
        .args(["--to", to, "--key"])
        .arg(dir.join("cluster.key"))
        .output()
        .expect("run orrery agent --submit");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn submit(dir: &Path, to: &str, job: u64, workers: u32, gpus: u32) {
    let (ok, err) = try_submit(dir, to, job, workers, f64::from(gpus));
    assert!(ok, "{err}");
}

fn spawn_agent(dir: &Path, peers: &Path, i: usize, state: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["agent", "--auction", "--id", &i.to_string(), "--peers"])
        .arg(peers)
        .args(["--topology", "leaf-spine", "--utility", "lgf", "--quiescence-ms", "300"])
        .args(["--exit-after-idle-s", "3", "--key"])
        .arg(dir.join("cluster.key"))
        .arg("--state")
        .arg(state)
        .spawn()
        .expect("spawn agent")
}

fn read_state(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("state file")).expect("state JSON")
}

/// GPUs each node holds under these verdicts (every job here asks `gpus` per worker).
fn committed(verdicts: &serde_json::Map<String, serde_json::Value>, gpus: impl Fn(&str) -> f64) -> BTreeMap<u64, f64> {
    let mut on_node: BTreeMap<u64, f64> = BTreeMap::new();
    for (job, v) in verdicts {
        let Some(p) = v.get("Placed") else { continue };
        for pair in p[0].as_array().into_iter().flatten() {
            *on_node.entry(pair[0].as_u64().unwrap_or(u64::MAX)).or_default() +=
                pair[1].as_f64().unwrap_or(0.0) * gpus(job);
        }
    }
    on_node
}

fn wait_all(children: &mut [(usize, Child)], limit: Duration) {
    let start = Instant::now();
    for (i, c) in children.iter_mut() {
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                assert!(st.success(), "agent {i} exited with {st}");
                break;
            }
            if start.elapsed() > limit {
                let _ = c.kill();
                panic!("agent {i} did not go idle within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `n` agents on free loopback ports (bind, note, release) with a cluster
/// key and a peers file, plus `extra` peers that are not agents; returns once
/// every agent has written its state file.
struct Agents {
    /// Removed when the test ends, even when it fails.
    scratch: tempfile::TempDir,
    addrs: Vec<String>,
    peers: PathBuf,
    children: Vec<(usize, Child)>,
}

impl Agents {
    fn start(n: usize, extra: &[(usize, String)]) -> Agents {
        let scratch = scratch_dir();
        let dir = scratch.path().to_path_buf();
        key_file(&dir);
        let addrs: Vec<String> = (0..n)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port())
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let peers = dir.join("peers.txt");
        let lines =
            addrs.iter().enumerate().chain(extra.iter().map(|(i, a)| (*i, a))).map(|(i, a)| format!("{i} {a}\n"));
        std::fs::write(&peers, lines.collect::<String>()).expect("peers file");
        let mut agents = Agents { scratch, addrs, peers, children: Vec::new() };
        agents.children = (0..n).map(|i| (i, agents.spawn(i))).collect();
        let start = Instant::now();
        while !(0..n).all(|i| agents.state(i).exists()) {
            assert!(start.elapsed() < Duration::from_secs(20), "agents did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        agents
    }

    fn dir(&self) -> &Path {
        self.scratch.path()
    }

    fn state(&self, i: usize) -> PathBuf {
        self.dir().join(format!("agent-{i}.json"))
    }

    fn spawn(&self, i: usize) -> Child {
        spawn_agent(self.dir(), &self.peers, i, &self.state(i))
    }

    /// SIGKILLs agent `i`.
    fn kill(&mut self, i: usize) {
        let at = self.children.iter().position(|(j, _)| *j == i).expect("running agent");
        let (_, mut victim) = self.children.remove(at);
        victim.kill().expect("kill agent");
        let _ = victim.wait();
    }
}

/// Every agent's committed GPUs are exactly its components of the placed
/// jobs (`gpus` per component), and never below zero.
fn assert_no_gpu_committed_twice(
    states: &[serde_json::Value],
    placed: &serde_json::Map<String, serde_json::Value>,
    gpus: f64,
) {
    let on_node = committed(placed, |_| gpus);
    for s in states {
        let id = s["id"].as_u64().unwrap_or(u64::MAX);
        let used = s["total"]["gpus"].as_f64().unwrap_or(0.0) - s["free"]["gpus"].as_f64().unwrap_or(0.0);
        assert!((used - on_node.get(&id).copied().unwrap_or(0.0)).abs() < 1e-9, "agent {id}: {used} GPUs committed");
        assert!(s["free"]["gpus"].as_f64().unwrap_or(-1.0) >= 0.0);
    }
}

#[test]
fn eight_agents_place_a_stream_of_jobs_and_survive_a_kill() {
    let mut agents = Agents::start(AGENTS, &[]);
    let (dir, addrs) = (agents.dir().to_path_buf(), agents.addrs.clone());
    // Jobs of 3 workers x 4 GPUs on eight 8-GPU nodes (leaf-spine: racks of 4).
    for job in 1..=3u64 {
        submit(&dir, &addrs[job as usize % AGENTS], job, 3, 4);
        std::thread::sleep(Duration::from_millis(700));
    }
    submit(&dir, &addrs[0], 4, 3, 4);
    std::thread::sleep(Duration::from_millis(2));
    agents.kill(KILLED);
    std::thread::sleep(Duration::from_millis(700));
    for (job, at) in [(5u64, 2usize), (6, 6)] {
        submit(&dir, &addrs[at], job, 2, 4);
        std::thread::sleep(Duration::from_millis(700));
    }
    wait_all(&mut agents.children, Duration::from_secs(30));

    let states: Vec<serde_json::Value> =
        (0..AGENTS).filter(|&i| i != KILLED).map(|i| read_state(&agents.state(i))).collect();
    // Every job decided, the same way at every surviving agent.
    let verdicts = |s: &serde_json::Value| s["verdicts"].as_object().cloned().unwrap_or_default();
    let first = verdicts(&states[0]);
    assert_eq!(first.len(), 6, "{first:?}");
    for s in &states {
        assert_eq!(verdicts(s), first, "agent {} disagrees", s["id"]);
        assert_eq!(s["usage"], states[0]["usage"], "agent {} sees other reservations", s["id"]);
        assert_eq!(s["bad_datagrams"], 0);
        let (sent, bytes, largest) = (
            s["sent"][0].as_f64().unwrap_or(0.0),
            s["sent"][1].as_f64().unwrap_or(0.0),
            s["sent"][2].as_u64().unwrap_or(0),
        );
        assert!(sent > 0.0 && bytes / sent < 600.0 && largest < 600, "agent {}: {sent} datagrams, {bytes} B", s["id"]);
    }
    // The first three jobs fit before the kill and are placed.
    for job in ["1", "2", "3"] {
        assert!(first[job].get("Placed").is_some(), "job {job}: {}", first[job]);
    }
    // No GPU committed twice: every job's workers take 4 GPUs.
    assert_no_gpu_committed_twice(&states, &first, 4.0);
}

/// One job format everywhere: the live service's example jobs (orrery's
/// JSON lines, as `orrery trace generate` writes them) go to the auction
/// agents unchanged and are placed.
#[test]
fn the_live_examples_in_orrerys_job_format_are_placed_by_the_agents() {
    let mut agents = Agents::start(AGENTS, &[]);
    let dir = agents.dir().to_path_buf();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/live/");
    let jobs: String = ["vgg-a.jsonl", "vgg-b.jsonl"]
        .iter()
        .map(|f| std::fs::read_to_string(format!("{root}{f}")).expect("example job"))
        .collect();
    let file = dir.join("examples.jsonl");
    std::fs::write(&file, jobs).expect("job file");
    let out = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["agent", "--submit"])
        .arg(&file)
        .args(["--to", &agents.addrs[0], "--key"])
        .arg(dir.join("cluster.key"))
        .output()
        .expect("run orrery agent --submit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 of 2 jobs accepted"), "{err}");
    wait_all(&mut agents.children, Duration::from_secs(30));
    let state = read_state(&agents.state(0));
    let verdicts = state["verdicts"].as_object().cloned().unwrap_or_default();
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    // Each VGG16 job: 2 workers of 1 GPU.
    for (id, v) in &verdicts {
        let placed = v.get("Placed").unwrap_or_else(|| panic!("job {id}: {v}"));
        assert_eq!(
            placed.as_array().map(|w| w.iter().flat_map(|r| r.as_array().into_iter().flatten()).count()),
            Some(2),
            "job {id}: {v}"
        );
    }
}

#[test]
fn forged_and_replayed_datagrams_change_nothing_and_a_killed_agent_restarts_with_its_commitments() {
    let key = Key::new(b"0123456789abcdef0123456789abcdef".to_vec()).expect("key");
    let wrong = Key::new(b"fedcba9876543210fedcba9876543210".to_vec()).expect("key");
    // Four agents, and this test as peer 7: a key holder on the peers list.
    let me = UdpSocket::bind("127.0.0.1:0").expect("bind");
    me.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut agents = Agents::start(4, &[(7, me.local_addr().expect("addr").to_string())]);
    let (dir, addrs) = (agents.dir().to_path_buf(), agents.addrs.clone());
    let state = |i: usize| dir.join(format!("agent-{i}.json"));

    // Job 1 (2 x 4 GPUs) is placed; capture one of agent 0's bundles on the way.
    submit(&dir, &addrs[0], 1, 2, 4);
    let mut captured = None;
    let mut buf = [0u8; 65_536];
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        if let Ok((n, from)) = me.recv_from(&mut buf)
            && from.to_string() == addrs[0]
            && captured.is_none()
            && matches!(wire::open(&key, &buf[..n]), Ok(Envelope { body: Body::Protocol(_), .. }))
        {
            captured = Some(buf[..n].to_vec());
        }
    }
    let captured = captured.expect("agent 0 broadcasts to every peer, this test included");
    assert!(matches!(wire::open(&key, &captured), Ok(Envelope { sender: 0, body: Body::Protocol(_), .. })));

    // Attacks on agent 1, each of which must be dropped whole.
    let job = |id: u64, gpus: f64| -> JobRequest { serde_json::from_str(&job_line(id, 2, gpus)).expect("job") };
    let to = &addrs[1];
    let mut junk = captured.clone();
    junk.extend_from_slice(b"junk");
    let bid = |node: u32, slot: u16| Bid { value: 1e9, node, stamp: 0, slot };
    let forged: Vec<Vec<u8>> = vec![
        b"not a datagram".to_vec(),
        vec![0u8; 64],
        wire::seal(&wrong, &Envelope::now(CLIENT, Body::Submit(job(20, 4.0)))),
        captured[..captured.len() - 1].to_vec(),
        junk,
        // Replayed from another address: agent 0's bundle, but not from agent 0.
        captured.clone(),
        // A client posing as protocol traffic.
        wire::seal(&key, &Envelope::now(CLIENT, Body::Protocol(Msg::Finished { job: 1 }))),
        // Negative and oversized jobs sealed with the right key.
        wire::seal(&key, &Envelope::now(CLIENT, Body::Submit(job(21, -4.0)))),
        wire::seal(&key, &Envelope::now(CLIENT, Body::Submit(job(22, 64.0)))),
    ];
    for d in &forged {
        me.send_to(d, to).expect("send");
    }
    // Peer 7 holds the key. Its winning bids for node 3 are dropped (each
    // node speaks for itself), and two of its own are malformed.
    let nan = Bid { value: f64::NAN, ..bid(7, 0) };
    let lie = Msg::Bundle { job: job(30, 4.0), bids: vec![vec![bid(3, 0), bid(3, 1), bid(7, 5), nan]], depth: 0 };
    me.send_to(&wire::seal(&key, &Envelope::now(7, Body::Protocol(lie))), to).expect("send");
    std::thread::sleep(Duration::from_millis(900));
    // Agent 1 wrote its state when job 30 was decided, after the forgeries.
    let attacked = read_state(&state(1));
    // The two invalid jobs were authentic: they are answered "refused", not counted as bad.
    assert_eq!(attacked["bad_datagrams"].as_u64(), Some(forged.len() as u64 - 2), "{attacked}");
    assert_eq!(attacked["refused_bids"].as_u64(), Some(2), "{attacked}");
    // Job 30 was auctioned among the real agents; node 3 did not win both
    // components on peer 7's word (1e9 would have beaten every honest bid).
    let job30 = &attacked["verdicts"]["30"]["Placed"][0];
    assert!(job30.is_array() && job30 != &serde_json::json!([[3, 2]]), "{attacked}");

    // A flood of 2,000 junk datagrams of every length: dropped (some by the
    // kernel's full buffer), and the agent still decides job 2 below.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..2_000usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let junk: Vec<u8> = x.to_le_bytes().iter().copied().cycle().take(i % 300).collect();
        let _ = me.send_to(&junk, to);
    }

    // Invalid jobs never leave the client.
    let (ok, err) = try_submit(&dir, &addrs[2], 40, 2, -1.0);
    assert!(!ok && err.contains("job-40.jsonl:1: job 40: worker: expected a finite number at least 0"), "{err}");
    let (ok, err) = try_submit(&dir, &addrs[2], 41, 2, 16.0);
    assert!(!ok && err.contains("job-41.jsonl:1: job 41: a component asks for 16 GPUs"), "{err}");

    // SIGKILL an agent that holds part of job 1 and restart it on the same state file.
    let placed = read_state(&state(0))["verdicts"]["1"]["Placed"][0].clone();
    let v = placed[0][0].as_u64().expect("job 1 placed") as usize;
    let before = read_state(&state(v));
    assert!(before["free"]["gpus"].as_f64() < before["total"]["gpus"].as_f64(), "{before}");
    agents.kill(v);
    agents.children.push((v, agents.spawn(v)));
    std::thread::sleep(Duration::from_millis(500));
    let after = read_state(&state(v));
    assert_eq!(after["free"], before["free"], "a restarted agent forgot its commitments");
    assert_eq!(after["verdicts"], before["verdicts"]);
    // Killed again and its state file lost: it re-learns from its peers.
    agents.kill(v);
    std::fs::remove_file(state(v)).expect("remove state");
    agents.children.push((v, agents.spawn(v)));
    let until = Instant::now() + Duration::from_secs(5);
    let relearnt = loop {
        let s = state(v).exists().then(|| read_state(&state(v)));
        if s.as_ref().is_some_and(|s| s["free"] == before["free"]) || Instant::now() > until {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let relearnt = relearnt.expect("state written");
    assert_eq!(relearnt["free"], before["free"], "a restarted agent without its file offers committed GPUs");
    assert_eq!(relearnt["verdicts"], before["verdicts"]);
    submit(&dir, &addrs[1], 2, 2, 4);
    // Job 1 finishes; the client tells agent 0 only, and every agent frees it.
    std::thread::sleep(Duration::from_millis(800));
    me.send_to(&wire::seal(&key, &Envelope::now(CLIENT, Body::Finish(1))), &addrs[0]).expect("send");
    std::thread::sleep(Duration::from_millis(300));
    // Keep answering nothing; the agents go idle and exit.
    wait_all(&mut agents.children, Duration::from_secs(30));

    let states: Vec<serde_json::Value> = (0..4).map(|i| read_state(&state(i))).collect();
    let verdicts = |s: &serde_json::Value| s["verdicts"].as_object().cloned().unwrap_or_default();
    let first = verdicts(&states[0]);
    assert!(first["1"].get("Placed").is_some() && first["2"].get("Placed").is_some(), "{first:?}");
    for bad in ["20", "21", "22"] {
        assert!(!first.contains_key(bad), "job {bad} was accepted: {first:?}");
    }
    for s in &states {
        assert_eq!(verdicts(s), first, "agent {} disagrees", s["id"]);
        assert_eq!(s["usage"], states[0]["usage"], "agent {} sees other reservations", s["id"]);
    }
    // What runs is what every agent holds: job 1 finished everywhere.
    let running: serde_json::Map<String, serde_json::Value> = states[0]["placed"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p[0]["id"].to_string(), serde_json::json!({ "Placed": p[1] })))
        .collect();
    assert!(!running.contains_key("1") && running.contains_key("2"), "{running:?}");
    assert_no_gpu_committed_twice(&states, &running, 4.0);
}

#[test]
fn a_burst_of_submissions_is_answered_and_every_agent_decides_every_job_alike() {
    let mut agents = Agents::start(4, &[]);
    let (dir, addrs) = (agents.dir().to_path_buf(), agents.addrs.clone());
    // 150 one-GPU jobs in one file, more than an agent holds open at once
    // (64): the rest are answered "busy" and sent again.
    const JOBS: u64 = 150;
    let file = dir.join("burst.jsonl");
    std::fs::write(&file, (1..=JOBS).map(|j| job_line(j, 1, 1.0) + "\n").collect::<String>()).expect("jobs");
    let out = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["agent", "--submit"])
        .arg(&file)
        .args(["--to", &addrs[0], "--key"])
        .arg(dir.join("cluster.key"))
        .output()
        .expect("submit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("150 of 150 jobs accepted"), "{err}");
    let busy: u64 =
        err.split(" busy answers").next().and_then(|h| h.rsplit('(').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(busy > 0, "the burst never met back-pressure: {err}");
    wait_all(&mut agents.children, Duration::from_secs(60));
    let states: Vec<serde_json::Value> = (0..4).map(|i| read_state(&agents.state(i))).collect();
    let verdicts = |s: &serde_json::Value| s["verdicts"].as_object().cloned().unwrap_or_default();
    let first = verdicts(&states[0]);
    assert_eq!(first.len(), JOBS as usize);
    for s in &states[1..] {
        let other = verdicts(s);
        let differ: Vec<&String> = first.keys().filter(|k| other.get(*k) != first.get(*k)).collect();
        assert!(differ.is_empty(), "agent {} decides {} jobs otherwise: {differ:?}", s["id"], differ.len());
    }
    // 32 GPUs, one per job, nothing finishes: exactly 32 placed.
    let placed = first.values().filter(|v| v.get("Placed").is_some()).count();
    assert_eq!(placed, 32, "{first:?}");
}
