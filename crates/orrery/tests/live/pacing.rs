//! Metronome's pacing live: Python training processes (`python/orrery`)
//! start their iterations in the slots the service's `Pace` gives them.

use super::*;

/// The slot a start falls in: how far past the last slot boundary, ms.
fn past_slot_ms(start_s: f64, offset_s: f64, period_ms: f64) -> f64 {
    ((start_s - offset_s) * 1e3).rem_euclid(period_ms)
}

#[test]
fn python_training_processes_run_their_iterations_in_the_slots_metronome_paces() {
    let _heavy = heavy();
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start(dir.path(), &["--policy", "metronome"]);
    let http = Http::new();
    let user = s.token("user.token");
    let u = s.url();
    let out = dir.path().display().to_string();
    let exec = format!(
        "echo gpus=$CUDA_VISIBLE_DEVICES > {out}/gpus-$ORRERY_JOB-$ORRERY_RANK.txt; \
         ORRERY_PRINT_STARTS=1 python3 python/examples/train.py > {out}/job-$ORRERY_JOB-$ORRERY_RANK.out 2>&1"
    );
    let _a0 = agent(&s, "h0", Some(&exec));
    // h1's agent offers what the topology says (2 GPUs, 50 Gbit/s), and
    // h1's clock runs 50 ms ahead of the service's: its agent measures the
    // offset (NTP over heartbeats), so its slots land where h0's do (50 ms
    // off, a start after a wait would miss its slot by 50 ms).
    let _a1 = skewed_agent(&s, "h1", &exec, 50.0);
    nodes_up(&http, &s, 2);
    // A high-priority job, then a low-priority one on the same two hosts.
    let (status, v) = http.call("POST", &format!("{u}/v1/jobs"), Some(&user), Some(job("hi", "vgg16", 60, "high")));
    assert_eq!(status, 201, "{v}");
    wait_until("the high-priority job to run", Duration::from_secs(20), || {
        let j: JobInfo = http.get(&format!("{u}/v1/jobs/hi"), &user);
        (j.iterations_done >= 3).then_some(())
    });
    let (status, v) = http.call("POST", &format!("{u}/v1/jobs"), Some(&user), Some(job("lo", "vgg16", 40, "low")));
    assert_eq!(status, 201, "{v}");
    let lo = wait_until("both jobs to finish", Duration::from_secs(90), || {
        let lo: JobInfo = http.get(&format!("{u}/v1/jobs/lo"), &user);
        let hi: JobInfo = http.get(&format!("{u}/v1/jobs/hi"), &user);
        (lo.status.is_over() && hi.status.is_over()).then_some(lo)
    });
    assert_eq!(lo.status, orrery_serve::api::JobStatus::Finished, "{lo:?}");
    assert_eq!(lo.iterations_done, 40);
    // Each worker was given one of its host's GPUs, on both kinds of agent.
    for rank in 0..2 {
        let gpus = std::fs::read_to_string(dir.path().join(format!("gpus-1-{rank}.txt"))).expect("gpus file");
        assert!(matches!(gpus.trim(), "gpus=0" | "gpus=1"), "rank {rank}: {gpus:?}");
    }
    let log: Vec<LogEntry> = http.get(&format!("{u}/v1/decisions?since=0"), &user);
    // Every Pace of the low-priority job, in log order: (at, period, offset).
    let paces: Vec<(f64, f64, f64)> = log
        .iter()
        .filter_map(|e| match e.entry {
            Logged::Decision(Decision::Pace { job: 1, period_ms, offset_s }) if period_ms > 0.0 => {
                Some((e.at_s, period_ms, offset_s))
            }
            _ => None,
        })
        .collect();
    assert!(!paces.is_empty(), "metronome paces the low-priority job that shares the hosts: {log:?}");
    // The pace in force when an iteration started (the agent hears of a
    // decision a few ms after its commit: starts within 50 ms of a new pace
    // are not held against it).
    let in_force = |t: f64| paces.iter().rev().find(|p| p.0 + 0.05 <= t).map(|p| (p.1, p.2));
    let cluster: Value = http.get(&format!("{u}/v1/cluster"), &user);
    let epoch_ms = cluster["epoch_unix_ms"].as_f64().expect("epoch");
    // Each worker of the paced job printed its iteration starts.
    for rank in 0..2 {
        let text = std::fs::read_to_string(dir.path().join(format!("job-1-{rank}.out"))).expect("worker output");
        // `iteration start_unix_ms wait_ms` per line (train.py).
        let lines: Vec<(f64, f64)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace().skip(1).map(|x| x.parse::<f64>().ok());
                Some(((f.next()?? - epoch_ms) / 1e3, f.next()??))
            })
            .collect();
        let starts: Vec<f64> = lines.iter().map(|l| l.0).collect();
        assert!(starts.len() >= 30, "rank {rank} ran its iterations: {text}");
        // Early iterations idle until their slot; a late one starts at once,
        // less than half a period past it (Pace's rule): every start lies in
        // the first half of a slot, give or take the OS's timer slack.
        let held: Vec<(f64, f64, f64)> =
            starts.iter().filter_map(|&t| in_force(t).map(|(period, offset)| (t, period, offset))).collect();
        assert!(held.len() >= 30, "rank {rank}: {} paced starts", held.len());
        let in_slot =
            held.iter().filter(|&&(t, period, offset)| past_slot_ms(t, offset, period) <= period / 2.0 + 5.0).count();
        assert!(
            in_slot as f64 >= 0.9 * held.len() as f64,
            "rank {rank}: {in_slot} of {} starts in their slot",
            held.len()
        );
        // Iterations run a little longer live than alone (the client's round
        // trips), so a paced job falls behind its slots by about a
        // millisecond an iteration until it is half a period late; then the
        // next iteration idles until its slot. Those waits (the worker
        // waited a quarter of a period or more for its slot, in a gap well
        // over a period) must end right at a slot boundary. A gap the worker
        // did not wait for is the OS descheduling it on a busy machine, not
        // a wait for a slot.
        let slept = |t: f64, period_ms: f64| lines.iter().find(|l| l.0 == t).is_some_and(|l| l.1 >= period_ms / 4.0);
        let waits: Vec<(f64, f64, f64)> = held
            .windows(2)
            .filter(|w| w[1].0 - w[0].0 > 1.2 * w[1].1 / 1e3 && slept(w[1].0, w[1].1))
            .map(|w| w[1])
            .collect();
        // Metronome re-paces the job every few seconds. A wait aims at a
        // boundary of the pace the worker knew when it began, so it is
        // judged against every pace in force from then (less the agent's
        // 50 ms to hear of one) to its end: two fresh-clone CI runs
        // (2026-11-28) failed on a wait at 8.0 / 8.8 s, beside the re-pace
        // near 7-9 s, judged against the new pace only. Alone a wait ends
        // 1-4 ms past its boundary; the 50 ms skew of h1's clock, were it
        // not corrected, would put it 50 ms off every pace's boundary. The
        // correction is an estimate (half a heartbeat's round trip), so a
        // wait on h1 may end a little before the boundary: a fresh-clone CI
        // run (2026-12-06) saw one end 0.04 ms early, 214.53 ms past the
        // boundary before it. Up to 5 ms early counts as on the boundary.
        for &(t, period, offset) in &waits {
            let wait_s = lines.iter().find(|l| l.0 == t).map_or(0.0, |l| l.1 / 1e3);
            let known: Vec<(f64, f64)> = paces
                .iter()
                .filter(|p| p.0 + 0.05 <= t && paces.iter().find(|q| q.0 > p.0).is_none_or(|q| q.0 + 0.05 > t - wait_s))
                .map(|p| (p.1, p.2))
                .collect();
            let off: Vec<f64> = known.iter().map(|&(period, offset)| past_slot_ms(t, offset, period)).collect();
            assert!(
                known.iter().zip(&off).any(|(&(period, _), &ms)| ms <= 20.0 || period - ms <= 5.0),
                "rank {rank}: start {t:.3} s after a {:.0} ms wait is off its slot by {off:?} ms (period {period:.1} ms, offset {offset:.3} s; paces {paces:?})",
                wait_s * 1e3
            );
        }
    }
}
