//! Retention (issue 71): a job that ended is forgotten `--keep-finished`
//! after, with its log entries, and stays forgotten after a restart; its
//! number is never given again.

use super::*;

#[test]
fn a_finished_job_expires_with_its_entries_and_stays_forgotten_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Server::start(dir.path(), &["--policy", "fifo", "--keep-finished", "2s"]);
    let http = Http::new();
    let user = s.token("user.token");
    let exec = format!("exec {BIN} worker --scale 0.001");
    let _a0 = agent_offering(&s, "h0", Some(&exec), &["--gpus", "2", "--nic-gbps", "50", "--data-addr", "127.0.0.1"]);
    nodes_up(&http, &s, 1);
    let submit = |u: &str, id: &str, iterations: u64| -> usize {
        let spec = json!({"id": id, "model": "resnet50", "batch": 32, "workers": 1,
                          "work": {"iterations": iterations}, "arrival_s": 0});
        let (status, v) = http.call("POST", &format!("{u}/v1/jobs"), Some(&user), Some(spec));
        assert!(status == 201, "{id}: {status} {v}");
        v["id"].as_u64().expect("a number") as usize
    };
    let u = s.url();
    let short = submit(&u, "short", 5);
    let long = submit(&u, "long", 1_000_000);
    assert_eq!((short, long), (0, 1));
    let ended = wait_until("the short job to finish", Duration::from_secs(30), || {
        let j: JobInfo = http.get(&format!("{u}/v1/jobs/short"), &user);
        j.ended_s
    });
    // Expiry runs every 5 s: 2 s after the end, at most 5 s more.
    let t0 = Instant::now();
    wait_until("the short job to be forgotten", Duration::from_secs(15), || {
        (http.call("GET", &format!("{u}/v1/jobs/short"), Some(&user), None).0 == 404).then_some(())
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "forgotten {:?} after it was seen ended", t0.elapsed());
    let listed: Vec<JobInfo> = http.get(&format!("{u}/v1/jobs"), &user);
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [long]);
    let log: Vec<LogEntry> = http.get(&format!("{u}/v1/decisions?since=0"), &user);
    let about_short = log.iter().filter(|e| orrery_serve::ledger::entry_job(&e.entry) == Some(short)).count();
    assert_eq!(about_short, 0, "its submission, placement and end are deleted: {log:?}");
    let expiry = log.iter().find_map(|e| match &e.entry {
        Logged::Event(DriverEvent::Expired { jobs, next_job, .. }) => Some((jobs.clone(), *next_job, e.at_s)),
        _ => None,
    });
    let (jobs, next_job, at_s) = expiry.expect("an Expired entry");
    assert_eq!((jobs, next_job), (vec![short], 2));
    assert!(at_s >= ended + 2.0, "expired at {at_s} s, ended at {ended} s");

    // The same id again is a new job with a new number. Once it too is
    // forgotten the highest number is no one's: a restart still skips it.
    assert_eq!(submit(&u, "short", 5), 2);
    wait_until("the second short job to be forgotten", Duration::from_secs(40), || {
        (http.call("GET", &format!("{u}/v1/jobs/2"), Some(&user), None).0 == 404).then_some(())
    });
    s.kill9();
    s.restart();
    let u = s.url();
    for gone in [0, 2] {
        assert_eq!(http.call("GET", &format!("{u}/v1/jobs/{gone}"), Some(&user), None).0, 404, "job {gone}");
    }
    let listed: Vec<JobInfo> = http.get(&format!("{u}/v1/jobs"), &user);
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [long]);
    assert_eq!(submit(&u, "third", 5), 3, "number 2 stays taken after the restart");
}
