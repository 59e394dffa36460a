//! End to end: eight `orrery agent --auction` processes bid over real UDP on
//! loopback; a stream of jobs is placed and one agent is killed in the
//! middle of an auction. The survivors' state files must show Plebiscito's
//! invariants: every job decided the same way everywhere, no GPU committed
//! twice or beyond capacity, and the same reserved bandwidth everywhere.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const AGENTS: usize = 8;
const KILLED: usize = 5;

fn scratch_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("orrery-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn submit(dir: &Path, to: &str, job: u64, workers: u32, gpus: u32) {
    let line = format!(
        r#"{{"id":{job},"arch":"Ring","workers":{workers},"worker":{{"gpus":{gpus}.0,"cpus":0.0,"mem_gib":0.0}},"server":{{"gpus":0.0,"cpus":0.0,"mem_gib":0.0}},"gbps":5.0,"runtime_s":600.0,"weight":1.0}}"#
    );
    let file = dir.join(format!("job-{job}.jsonl"));
    std::fs::write(&file, line + "\n").expect("job file");
    let st = Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(["agent", "--submit"])
        .arg(&file)
        .args(["--to", to])
        .status()
        .expect("run orrery agent --submit");
    assert!(st.success());
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

#[test]
fn eight_agents_place_a_stream_of_jobs_and_survive_a_kill() {
    let dir = scratch_dir();
    // Free ports: bind, note, release.
    let ports: Vec<u16> =
        (0..AGENTS).map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()).collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let peers = dir.join("peers.txt");
    let text: String = addrs.iter().enumerate().map(|(i, a)| format!("{i} {a}\n")).collect();
    std::fs::write(&peers, text).expect("peers file");
    let state = |i: usize| dir.join(format!("agent-{i}.json"));
    let mut children: Vec<(usize, Child)> = (0..AGENTS)
        .map(|i| {
            let child = Command::new(env!("CARGO_BIN_EXE_orrery"))
                .args(["agent", "--auction", "--id", &i.to_string(), "--peers"])
                .arg(&peers)
                .args(["--topology", "leaf-spine", "--utility", "lgf", "--quiescence-ms", "300"])
                .args(["--exit-after-idle-s", "3", "--state"])
                .arg(state(i))
                .spawn()
                .expect("spawn agent");
            (i, child)
        })
        .collect();
    let start = Instant::now();
    while !(0..AGENTS).all(|i| state(i).exists()) {
        assert!(start.elapsed() < Duration::from_secs(20), "agents did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Jobs of 3 workers x 4 GPUs on eight 8-GPU nodes (leaf-spine: racks of 4).
    for job in 1..=3u64 {
        submit(&dir, &addrs[job as usize % AGENTS], job, 3, 4);
        std::thread::sleep(Duration::from_millis(700));
    }
    submit(&dir, &addrs[0], 4, 3, 4);
    std::thread::sleep(Duration::from_millis(2));
    let (_, mut victim) = children.remove(KILLED);
    victim.kill().expect("kill agent");
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(700));
    for (job, at) in [(5u64, 2usize), (6, 6)] {
        submit(&dir, &addrs[at], job, 2, 4);
        std::thread::sleep(Duration::from_millis(700));
    }
    wait_all(&mut children, Duration::from_secs(30));

    let states: Vec<serde_json::Value> = (0..AGENTS)
        .filter(|&i| i != KILLED)
        .map(|i| serde_json::from_slice(&std::fs::read(state(i)).expect("state file")).expect("state JSON"))
        .collect();
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
    // No GPU committed twice: each agent's committed GPUs are exactly its
    // components of the placed jobs, within its 8.
    let mut on_node: BTreeMap<u64, f64> = BTreeMap::new();
    for v in first.values() {
        let Some(p) = v.get("Placed") else { continue };
        let gpus = 4.0; // every job's workers take 4 GPUs
        for pair in p[0].as_array().into_iter().flatten() {
            *on_node.entry(pair[0].as_u64().unwrap_or(u64::MAX)).or_default() += pair[1].as_f64().unwrap_or(0.0) * gpus;
        }
    }
    for s in &states {
        let id = s["id"].as_u64().unwrap_or(u64::MAX);
        let used = s["total"]["gpus"].as_f64().unwrap_or(0.0) - s["free"]["gpus"].as_f64().unwrap_or(0.0);
        assert!((used - on_node.get(&id).copied().unwrap_or(0.0)).abs() < 1e-9, "agent {id}: {used} GPUs committed");
        assert!(s["free"]["gpus"].as_f64().unwrap_or(-1.0) >= 0.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
