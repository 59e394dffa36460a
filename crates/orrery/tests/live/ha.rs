//! The highly available service on a real 3-member etcd: a standby takes
//! over from a killed leader; a paused leader decides nothing (skip
//! without etcd).

use super::*;

/// High availability on a real 3-member etcd (issue 40), the short run of
/// `orrery bench failover`: two replicas, 8 threads submitting 400 of
/// Philly's jobs through the client that follows the leader, the leader
/// SIGKILLed twice and one etcd member killed meanwhile. Every acknowledged
/// job is present exactly once with its id, each log read before a kill is a
/// prefix of the final log, no GPU is held twice, no running job was
/// preempted, and a new leader decided within 5 s of each kill.
#[test]
fn a_standby_takes_over_from_a_killed_leader_and_nothing_acknowledged_is_lost() {
    // Loads both cores (replicas and etcd, or a fleet): not beside the tests
    // whose bounds are on the wall clock.
    let _one = heavy();
    if let Some(why) = orrery_serve::store::testing::unavailable() {
        println!("skipped: {why}");
        return;
    }
    let out = Command::new(BIN)
        .args(["bench", "failover", "--kills", "2", "--jobs", "400", "--interval-ms", "400", "--json"])
        .current_dir(repo())
        .output()
        .expect("orrery bench failover runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("the report's JSON");
    println!("{r}");
    assert_eq!(r["acknowledged"], 400, "{r}");
    assert_eq!(r["jobs_present"], 400, "{r}");
    for zero in ["lost_or_renumbered", "duplicates", "logs_not_a_prefix", "gpus_held_twice", "preemptions"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert_eq!(r["etcd_members_killed"], 1);
    assert!(r["placements"].as_u64().is_some_and(|p| p >= 10), "the policy placed jobs: {r}");
    let takeovers: Vec<f64> = serde_json::from_value(r["takeover_s"].clone()).expect("takeovers");
    assert_eq!(takeovers.len(), 2);
    assert!(takeovers.iter().all(|&t| t < 5.0), "a new leader within 5 s of each kill: {takeovers:?}");
}

/// One replica of a highly available service on etcd (`orrery serve
/// --store etcd://...`), killed when dropped.
struct Replica {
    proc: Proc,
    port: u16,
}

impl Replica {
    fn start(dir: &Path, store: &str) -> Replica {
        let port = free_port();
        let args = ["--policy", "fifo", "--topology", "demo", "--lease-s", "2", "--store", store].map(String::from);
        Replica { proc: serve(port, dir, &args, "orrery replica listening"), port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether it answers /v1/readyz with 200 (it leads).
    fn leads(&self, http: &Http) -> bool {
        let url = format!("{}/v1/readyz", self.url());
        let r = http.rt.block_on(async { http.c.get(&url).timeout(Duration::from_millis(500)).send().await });
        r.is_ok_and(|r| r.status() == 200)
    }

    /// `kill -SIG` to the replica.
    fn signal(&self, sig: &str) {
        let pid = self.proc.0.id().to_string();
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(&pid).status().is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid}");
    }
}

/// The lease-loss test of issue 40: the leader, paused (SIGSTOP) past its
/// 2 s lease, is replaced by the standby; resumed, it decides nothing (a
/// submission the kernel queued for it while paused is not committed by it,
/// and the log is as the new leader has it) and exits as a fenced leader does.
/// Meanwhile two real agents, given both replicas, keep the training
/// processes of a running job: same pids, same epoch, no preemption, and
/// its iterations go on under the new leader. Before the pause, the standby
/// answers reads from its copy and refuses writes, naming the leader.
#[test]
fn a_leader_paused_past_its_lease_decides_nothing_when_it_resumes() {
    // Loads both cores (replicas and etcd, or a fleet): not beside the tests
    // whose bounds are on the wall clock.
    let _one = heavy();
    use orrery_serve::store::testing::{EtcdCluster, unavailable};
    if let Some(why) = unavailable() {
        println!("skipped: {why}");
        return;
    }
    let etcd = EtcdCluster::start(3).expect("a 3-member etcd");
    let store = etcd.url("paused");
    let dirs = [tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir")];
    let mut replicas = [Replica::start(dirs[0].path(), &store), Replica::start(dirs[1].path(), &store)];
    let http = Http::new();
    let lead = wait_until("a leader", Duration::from_secs(20), || replicas.iter().position(|r| r.leads(&http)));
    let user = std::fs::read_to_string(dirs[lead].path().join("user.token")).expect("token").trim().to_string();
    let servers = format!("{},{}", replicas[0].url(), replicas[1].url());
    let users = orrery_serve::client::Client::new(&servers, &user).expect("client");
    // Two agents given both replicas; the job's ranks are the emulated
    // training loop (python/examples/train.py), reporting every iteration.
    let sockets = [dirs[0].path().join("h0.sock"), dirs[0].path().join("h1.sock")];
    let _agents: Vec<Proc> = ["h0", "h1"]
        .iter()
        .zip(&sockets)
        .map(|(name, socket)| {
            let mut c = Command::new(BIN);
            c.args(["agent", "--node", "--name", name, "--gpus", "2", "--nic-gbps", "50"])
                .args(["--exec", "exec python3 python/examples/train.py"])
                .arg("--server")
                .arg(&servers)
                .arg("--token")
                .arg(dirs[lead].path().join("agent.token"))
                .arg("--socket")
                .arg(socket)
                .env("RUST_LOG", "warn")
                .current_dir(repo());
            Proc(c.spawn().expect("agent starts"))
        })
        .collect();
    let training: JobSpec = serde_json::from_value(job("training", "resnet50", 1_000_000, "low")).expect("spec");
    http.rt.block_on(users.submit(&training)).expect("submitted");
    let running = wait_until("the job's ranks to run", Duration::from_secs(20), || {
        let j = http.rt.block_on(users.job("training")).ok()?;
        let pids: Vec<Vec<String>> = sockets.iter().map(|s| processes_of_agent(s)).collect();
        (j.hosts.len() == 2 && j.iterations_done > 0 && pids.iter().all(|p| !p.is_empty())).then_some((j, pids))
    });
    for i in 0..3 {
        let spec: JobSpec = serde_json::from_value(job(&format!("before-{i}"), "vgg16", 100, "low")).expect("spec");
        http.rt.block_on(users.submit(&spec)).expect("submitted");
    }
    let before: Vec<LogEntry> = http.rt.block_on(users.decisions(0)).expect("log");
    // The standby answers reads from its copy (at most a moment behind) and
    // sends writes to the leader.
    let standby = replicas[1 - lead].url();
    let copied = wait_until("the standby's copy to catch up", Duration::from_secs(5), || {
        let (status, v) = http.call("GET", &format!("{standby}/v1/jobs"), Some(&user), None);
        (status == 200 && v.as_array().is_some_and(|a| a.len() == 4)).then_some(v)
    });
    assert!(copied.as_array().is_some_and(|a| a.iter().any(|j| j["spec"]["id"] == "training")), "{copied}");
    let url = format!("{standby}/v1/decisions?since=0");
    let resp = http.rt.block_on(async { http.c.get(&url).bearer_auth(&user).send().await }).expect("read");
    assert_eq!(resp.headers().get("x-orrery-role").and_then(|v| v.to_str().ok()), Some("standby"));
    assert_eq!(
        resp.headers().get("x-orrery-leader").and_then(|v| v.to_str().ok()),
        Some(replicas[lead].url().as_str())
    );
    let (status, v) = http.call("GET", &format!("{standby}/v1/jobs"), None, None);
    assert_eq!(status, 401, "the copy asks for the token too: {v}");
    let (status, v) =
        http.call("POST", &format!("{standby}/v1/jobs"), Some(&user), Some(job("to-standby", "vgg16", 10, "low")));
    assert_eq!(status, 503, "a standby does not write: {v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains(&replicas[lead].url())), "{v}");
    replicas[lead].signal("STOP");
    // A submission sent straight to the paused leader (no failover): the
    // kernel queues it; the leader reads it when resumed.
    let (paused_url, held_user) = (replicas[lead].url(), user.clone());
    let held = std::thread::spawn(move || {
        let http = Http::new();
        let url = format!("{paused_url}/v1/jobs");
        let spec = job("held-while-paused", "vgg16", 100, "low");
        http.rt.block_on(async {
            let r = http.c.post(&url).bearer_auth(&held_user).json(&spec).send().await;
            r.map(|r| r.status().as_u16()).ok()
        })
    });
    let new = wait_until("the standby to lead", Duration::from_secs(10), || {
        replicas.iter().position(|r| r.leads(&http)).filter(|&i| i != lead)
    });
    replicas[lead].signal("CONT");
    let status = wait_until("the resumed leader to exit", Duration::from_secs(10), || {
        replicas[lead].proc.0.try_wait().ok().flatten()
    });
    assert!(matches!(status.code(), Some(70 | 75)), "it stopped as a fenced leader does: {status}");
    let held = held.join().expect("the held submission's thread");
    let log: Vec<LogEntry> = http.rt.block_on(users.decisions(0)).expect("log");
    assert_eq!(&log[..before.len()], &before[..], "the log as it was, and then the new leader's");
    let present = http.rt.block_on(users.job("held-while-paused")).is_ok();
    println!("the submission held by the paused leader: answer {held:?}, present afterwards: {present}");
    assert!(!matches!(held, Some(200 | 201)) || present, "acknowledged, so it must be durable");
    assert!(replicas[new].leads(&http), "the new leader still leads");
    let jobs = http.rt.block_on(users.jobs(None)).expect("jobs");
    assert_eq!(jobs.len(), 4 + usize::from(present), "the jobs acknowledged before the pause, once each");
    // The running job went through the failover untouched.
    let (before_job, before_pids) = running;
    let after = wait_until("iterations under the new leader", Duration::from_secs(20), || {
        let j = http.rt.block_on(users.job("training")).ok()?;
        (j.iterations_done > before_job.iterations_done + 5).then_some(j)
    });
    assert_eq!((after.epoch, after.preemptions, &after.hosts), (before_job.epoch, 0, &before_job.hosts));
    // (Other jobs placed since may have started processes beside them.)
    let pids: Vec<Vec<String>> = sockets.iter().map(|s| processes_of_agent(s)).collect();
    for (now, before) in pids.iter().zip(&before_pids) {
        assert!(
            before.iter().all(|p| now.contains(p)),
            "the same training processes, not restarted: {before:?} then {now:?}"
        );
    }
    let log: Vec<LogEntry> = http.rt.block_on(users.decisions(0)).expect("log");
    assert!(
        !log.iter().any(|e| matches!(
            e.entry,
            Logged::Decision(Decision::Preempt { .. }) | Logged::Event(DriverEvent::NodeDown { .. })
        )),
        "no preemption and no node down across the failover"
    );
}
