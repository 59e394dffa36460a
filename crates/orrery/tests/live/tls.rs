//! TLS between the service, its agents and its clients (issue 70, item 4).

use super::*;

#[test]
fn tls_carries_tokens_reports_and_decisions_between_the_service_two_agents_and_python() {
    let _heavy = heavy(); // Python training processes
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = dir.path().join("tls");
    let made = Command::new(BIN).arg("certs").arg("--out").arg(&tls).output().expect("orrery certs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let (cert, key, ca) = (tls.join("server.pem"), tls.join("server-key.pem"), tls.join("ca.pem"));
    let args =
        ["--policy", "fifo", "--tls-cert", cert.to_str().expect("utf-8"), "--tls-key", key.to_str().expect("utf-8")];
    let mut s = Server::start(dir.path(), &args);
    s.ca = Some(ca.clone());
    let http = Http::with_ca(Some(&ca));
    let user = s.token("user.token");
    let u = s.url();
    assert!(u.starts_with("https://"));

    // Nothing in clear: plain HTTP to the port gets no answer, and a client
    // that does not trust the cluster's CA refuses the certificate.
    let plain = format!("http://127.0.0.1:{}/v1/jobs", s.port);
    let rt = rt();
    let refused = rt.block_on(async {
        orrery_serve::tls::client_builder(None)
            .expect("tls")
            .build()
            .expect("client")
            .get(&plain)
            .bearer_auth(&user)
            .send()
            .await
    });
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    let untrusted = rt.block_on(async {
        orrery_serve::tls::client_builder(None)
            .expect("tls")
            .build()
            .expect("client")
            .get(format!("{u}/v1/jobs"))
            .send()
            .await
    });
    let err = format!("{:?}", untrusted.expect_err("a certificate of an unknown CA is refused"));
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // The CLI over TLS with --ca.
    let cli = Command::new(BIN)
        .args(["jobs", "--server", &u, "--ca"])
        .arg(&ca)
        .arg("--token")
        .arg(dir.path().join("user.token"))
        .output()
        .expect("orrery jobs");
    assert!(cli.status.success(), "orrery jobs over TLS: {}", String::from_utf8_lossy(&cli.stderr));

    // Two agents over TLS run a job of Python training processes to its end:
    // registrations, heartbeats, long-polls and iteration reports all cross it.
    let out = dir.path().display().to_string();
    let exec = format!("python3 python/examples/train.py > {out}/job-$ORRERY_JOB-$ORRERY_RANK.out 2>&1");
    let _a0 = agent(&s, "h0", Some(&exec));
    let _a1 = agent(&s, "h1", Some(&exec));
    nodes_up(&http, &s, 2);
    let (status, v) = http.call("POST", &format!("{u}/v1/jobs"), Some(&user), Some(job("t", "vgg16", 20, "low")));
    assert_eq!(status, 201, "{v}");
    let done = wait_until("the job to finish over TLS", Duration::from_secs(60), || {
        let j: JobInfo = http.get(&format!("{u}/v1/jobs/t"), &user);
        j.status.is_over().then_some(j)
    });
    assert_eq!((done.status, done.iterations_done), (orrery_serve::api::JobStatus::Finished, 20), "{done:?}");
    let log: Vec<LogEntry> = http.get(&format!("{u}/v1/decisions?since=0"), &user);
    assert!(log.iter().any(|e| matches!(e.entry, Logged::Decision(Decision::Place { .. }))));
}
