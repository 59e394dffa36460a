//! One link's rates on real TCP: throttles, the fair and priority
//! fabrics; and the CLI's bad options.

use crate::harness::*;

#[test]
fn testbed_down_and_bad_options_say_what_is_wrong() {
    let out = Command::new(BIN).args(["testbed", "up", "--prefix", "bad-prefix"]).output().expect("orrery");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prefix") && err.contains("letters or digits"), "{err}");
    let out = Command::new(BIN).args(["testbed", "up", "--scale", "2"]).output().expect("orrery");
    assert!(String::from_utf8_lossy(&out.stderr).contains("scale"), "scale above 1 is refused");
    if orrery_testbed::fabric::unavailable().is_none() {
        let out = Command::new(BIN).args(["testbed", "down", "--prefix", "none0"]).output().expect("orrery");
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("removed 0 namespaces"));
    }
}

#[test]
fn a_throttle_holds_a_real_tcp_transfer_to_the_rate_asked() {
    // Issue 36, item 3: the node agent's htb class for a job's port caps
    // one TCP transfer within 10% of the payload the rate allows (the rate
    // on the wire × 1448/1514), and only that job's port: the unthrottled
    // control to another port is not held to the class. The kernel's
    // forwarding shares the 2-core host: a fresh-clone CI run (2026-12-02)
    // measured 423 Mbit/s in the 478 Mbit/s class, and 456 alone right
    // after, so a miss is judged over three starts.
    let Some(_turn) = turn_alone() else { return };
    judged_over_starts("the throttle", throttle_start);
}

/// One start of the throttle's transfers (2 s each after 0.5 s of warm-up).
fn throttle_start() -> Result<(), String> {
    let rows = testbed_rows("thr", &["throttle", "--gbps", "10,50", "--seconds", "2", "--warmup-s", "0.5"]);
    let field = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows[0]["asked_gbps"].is_null(), "{rows:?}");
    for r in &rows[1..] {
        let ratio = field(r, "ratio");
        ensure!(
            (0.9..=1.1).contains(&ratio),
            "throttled to {} Gbit/s: measured {} Mbit/s against {} expected (the control: {} Mbit/s)",
            r["asked_gbps"],
            field(r, "measured_mbps"),
            field(r, "expected_mbps"),
            field(&rows[0], "measured_mbps")
        );
    }
    // The control (the link's 1 Gbit/s on the wire) is not held to the
    // 500 Mbit/s class, and nothing exceeds the link. Its lower end is the
    // machine's, not the throttle's: veth and htb at 1 Gbit/s are CPU-bound
    // on this 2-core machine, and a quiet one measured 0.78-0.95 of the
    // link's payload rate in five runs (2026-12-02; a full test run there
    // failed on 0.86 when this asked 0.9).
    let control = field(&rows[0], "ratio");
    ensure!(
        control <= 1.1 && field(&rows[0], "measured_mbps") > 1.5 * field(&rows[2], "measured_mbps"),
        "the control ran {} Mbit/s ({control:.3} of the link), the 500 Mbit/s class {}",
        field(&rows[0], "measured_mbps"),
        field(&rows[2], "measured_mbps")
    );
    Ok(())
}

#[test]
fn the_fair_fabric_gives_each_flow_its_share_whatever_its_congestion_control() {
    // Issue 68, item 2: under `--fabric fair` a bbr and a cubic transfer
    // across one uplink each get half of what the link carries, within
    // 10%, and together most of it. On the default tail-drop fabric bbr took 1.31-1.48x its
    // share and cubic 0.50-0.66x in three runs (docs/results.md, "A fair
    // fabric"). Measured over 2.5 s from 0.5 s, cubic once came out at
    // 0.89 during a full test run; over 3 s from 1 s: 0.985-0.993.
    let Some(_turn) = turn_alone() else { return };
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    if !available.split_whitespace().any(|c| c == "bbr") {
        eprintln!("skipped: this kernel offers no bbr (tcp_available_congestion_control: {})", available.trim());
        return;
    }
    let rows =
        testbed_rows("shr", &["share", "--cc", "bbr,cubic", "--fabric", "fair", "--seconds", "3", "--warmup-s", "1"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    // Each flow's share is judged against what the two moved: on this
    // 2-core machine the link itself (veth and htb at 1 Gbit/s, CPU-bound)
    // ran at 0.88 of its payload rate in a quiet run (2026-12-02: bbr 0.894
    // and cubic 0.870 of their fair halves, an even split that a bar on
    // the link's nominal rate failed). Unfair, tail-drop gave bbr 0.66-0.75
    // of the two's bytes; a fair fabric whose classes were capped below
    // half the link would fail the floor on the total.
    let share = |i: usize| rows[i]["share"].as_f64().unwrap_or(f64::NAN);
    let total = share(0) + share(1);
    assert!(total >= 1.5, "the two flows moved {:.3} of the link's payload rate: {rows:?}", total / 2.0);
    for (i, r) in rows.iter().enumerate() {
        let of_fair = 2.0 * share(i) / total;
        assert!(
            (0.9..=1.1).contains(&of_fair),
            "{}: {of_fair:.3} of an even split of what the two moved: {rows:?}",
            r["congestion_control"]
        );
    }
}

#[test]
fn a_priority_fabric_gives_the_link_to_the_higher_traffic_class() {
    // Issue 67, Crux's priorities as htb classes: under `--fabric priority`
    // two cubic transfers across one uplink, one marked class 7 and one
    // class 0 by the node agent's nftables script, do not share it: the
    // class-7 flow carries at least 95% of what the two moved and at least
    // 75% of the link's payload rate (1.5 times its fair half, where a
    // class wrongly capped at half the link would get 1.0), the other
    // at most a tenth of its fair half (htb guarantees each class a
    // thousandth of the rate). Measured: 1.971 / 0.005 and, with the
    // classes on the other flow, 0.007 / 1.981; unmarked on this fabric,
    // 1.027 / 0.939. A fresh-clone CI run on a busy machine measured
    // 1.761 / 0.007 and another here under a concurrent build 1.656: the
    // link itself ran at 83-88% (cubic on a loaded CPU), and class 7 still
    // carried over 99% of it.
    let Some(_turn) = turn_alone() else { return };
    let classes = ["share", "--cc", "cubic,cubic", "--fabric", "priority", "--classes", "0,7"];
    let rows = testbed_rows("pri", &[&classes[..], &["--seconds", "3", "--warmup-s", "1"]].concat());
    assert_eq!(rows.len(), 2, "{rows:?}");
    let share = |i: usize| rows[i]["share"].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows[1]["class"], 7, "{rows:?}");
    let carried = share(1) / (share(0) + share(1));
    assert!(carried >= 0.95, "class 7 carried {carried:.3} of the two flows' bytes: {rows:?}");
    assert!(share(1) >= 1.5, "class 7 got {:.3} of its fair share: {rows:?}", share(1));
    assert!(share(0) <= 0.1, "class 0 got {:.3} of its fair share: {rows:?}", share(0));
}
