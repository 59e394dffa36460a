//! Traffic classes on the wire (issue 67: Crux's priorities): a job's
//! `TrafficClass` marked on its packets as they leave the host.
//!
//! Crux (SIGCOMM'24, §4.3) maps jobs to a fabric's few priority queues; a
//! switch picks a packet's queue from its DSCP, so the host marks and the
//! switch classifies. The node agent marks with nftables in the host's
//! namespace: every packet to a data port of the job's ring successors on
//! other hosts ([`super::successor_ports`]), and every packet from a data
//! port of its ranks here (the acknowledgements of what their predecessors
//! send: a TCP flow in the high queue whose acks wait in the low one behind
//! the other job's data is held back by them), gets the class as its IP
//! precedence (TOS bits 5–7), its other DSCP bits (a `Route`'s path pin,
//! which the worker sets) kept. Each job has a base chain of its own,
//! `job-ID` in table `ip orrery`, replaced whole when its class changes and
//! deleted when the class goes back to 0 or the job leaves (an agent that
//! starts deletes the table an earlier one left). Like the
//! throttles, this needs no change to the training process.
//!
//! nftables cannot set some of a field's bits from a computed value
//! (`ip dscp set ip dscp | …` is refused), so a job's chain has one rule per
//! value of the pin bits: `ip dscp P ip dscp set P | class << 3`.

use crate::api::Assignment;
use orrery_policy::JobId;
use std::collections::HashMap;

/// Traffic classes a fabric offers (IEEE 802.1p's eight, 7 the highest).
const CLASSES: u8 = 8;

/// Values of the DSCP's low three bits (the path pin, `path_tos(i) >> 2`).
const PIN_VALUES: u8 = 8;

/// The nftables script that removes every job's marking (an agent starting
/// on a host where an earlier one left some).
pub(super) const CLEAR_SCRIPT: &str = "add table ip orrery\ndelete table ip orrery\n";

/// The nftables script that puts `job`'s TCP packets to destination ports
/// `to` and from source ports `from` in traffic class `class` (0: removes
/// the job's marking). Idempotent: it creates the table and the chain
/// before it flushes or deletes them. O(ports + pin values).
pub fn mark_script(job: JobId, class: u8, to: &[u16], from: &[u16]) -> String {
    let chain = format!("job-{job}");
    let mut script = format!(
        "add table ip orrery\nadd chain ip orrery {chain} {{ type filter hook postrouting priority mangle; policy accept; }}\n"
    );
    let class = class.min(CLASSES - 1);
    if class == 0 || (to.is_empty() && from.is_empty()) {
        script.push_str(&format!("delete chain ip orrery {chain}\n"));
        return script;
    }
    script.push_str(&format!("flush chain ip orrery {chain}\n"));
    for (field, ports) in [("dport", to), ("sport", from)] {
        if ports.is_empty() {
            continue;
        }
        let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        let ports = ports.join(", ");
        for pin in 0..PIN_VALUES {
            script.push_str(&format!(
                "add rule ip orrery {chain} tcp {field} {{ {ports} }} ip dscp {pin} ip dscp set {}\n",
                pin | class << 3
            ));
        }
    }
    script
}

/// nftables scripts that bring the host's marking in line with the classes
/// in force: one for each job whose (epoch, class) changed, and one
/// removing each job that left. `marked` is what is installed. O(jobs here
/// · ranks).
pub(super) fn mark_scripts<'a>(
    marked: &mut HashMap<JobId, (u64, u8)>,
    jobs: impl Iterator<Item = &'a Assignment>,
    host: &str,
) -> Vec<String> {
    // Per job: (epoch, class), the ports it sends to, the ports it acks from.
    type Wanted = ((u64, u8), Vec<u16>, Vec<u16>);
    let mut want: HashMap<JobId, Wanted> = HashMap::new();
    for a in jobs {
        let class = a.in_force.traffic_class.min(CLASSES - 1);
        if class > 0 {
            let own = a.ranks.iter().map(|&r| crate::api::worker_port(a.job, r)).collect();
            want.insert(a.job, ((a.epoch, class), super::successor_ports(a, host), own));
        }
    }
    let mut out = Vec::new();
    let gone: Vec<JobId> = marked.keys().filter(|j| !want.contains_key(j)).copied().collect();
    for job in gone {
        marked.remove(&job);
        out.push(mark_script(job, 0, &[], &[]));
    }
    for (job, (now, to, from)) in want {
        if marked.insert(job, now) != Some(now) {
            out.push(mark_script(job, now.1, &to, &from));
        }
    }
    out
}

/// Runs an nftables script, in `netns` if given. The agent logs a failure
/// and goes on (the job runs unmarked, as on a fabric without priority
/// queues). O(script).
pub fn run_nft(netns: Option<&str>, script: &str) -> Result<(), String> {
    use std::io::Write;
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, "nft", "-f", "-"]);
            c
        }
        None => {
            let mut c = std::process::Command::new("nft");
            c.args(["-f", "-"]);
            c
        }
    };
    let child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let outcome = child.and_then(|mut c| {
        if let Some(mut stdin) = c.stdin.take() {
            stdin.write_all(script.as_bytes())?;
        }
        c.wait_with_output()
    });
    match outcome {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "nft -f - ({}): {}",
            script.lines().last().unwrap_or_default(),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("nft: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_is_the_ip_precedence_and_keeps_the_path_pin() {
        let script = mark_script(7, 5, &[40_001, 40_003], &[40_000]);
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(lines[0], "add table ip orrery");
        assert_eq!(lines[2], "flush chain ip orrery job-7");
        // One rule per pin value and direction: pin 0 → 5 << 3, pin 3 → 43.
        assert_eq!(lines.len(), 3 + 2 * 8);
        assert_eq!(lines[3], "add rule ip orrery job-7 tcp dport { 40001, 40003 } ip dscp 0 ip dscp set 40");
        assert!(lines[6].ends_with("ip dscp 3 ip dscp set 43"), "{}", lines[6]);
        assert_eq!(lines[11], "add rule ip orrery job-7 tcp sport { 40000 } ip dscp 0 ip dscp set 40");
        // As a TOS byte the class is bits 5–7 and the pin stays in bits 2–4.
        assert_eq!((43u8 << 2) >> 5, 5);
        assert_eq!((43u8 << 2) & 0x1c, 3 << 2);
    }

    #[test]
    fn class_zero_or_no_ports_removes_the_chain() {
        for script in [mark_script(3, 0, &[40_000], &[]), mark_script(3, 4, &[], &[])] {
            assert!(script.ends_with("delete chain ip orrery job-3\n"), "{script}");
            assert!(!script.contains("add rule"), "{script}");
        }
    }

    #[test]
    fn scripts_follow_the_classes_in_force() {
        let job = |id: JobId, epoch: u64, class: u8| {
            let mut a: Assignment = serde_json::from_value(serde_json::json!({
                "job": id, "name": format!("j{id}"), "epoch": epoch, "status": "running", "gpus": 1,
                "ranks": [0], "workers": ["h0", "h1"], "period_ms": 100.0, "compute_ms": 50.0,
                "iterations_done": 0, "target_iterations": 10, "in_force": {
                    "shift_ms_total": 0.0, "align": null, "pace": null, "paused": false,
                    "throttle_gbps": null, "routes": {}
                }
            }))
            .expect("an assignment");
            a.in_force.traffic_class = class;
            a
        };
        let mut marked = HashMap::new();
        let (a, b) = (job(1, 1, 7), job(2, 1, 0));
        let first = mark_scripts(&mut marked, [&a, &b].into_iter(), "h0");
        assert_eq!(first.len(), 1, "{first:?}");
        // Rank 0 on h0 sends to rank 1 on h1 and acknowledges from its own port.
        let (to, from) = (crate::api::worker_port(1, 1), crate::api::worker_port(1, 0));
        assert!(first[0].contains(&format!("tcp dport {{ {to} }}")), "{first:?}");
        assert!(first[0].contains(&format!("tcp sport {{ {from} }}")), "{first:?}");
        assert!(first[0].contains("ip dscp 0 ip dscp set 56"), "{first:?}");
        // Nothing changed: nothing to run.
        assert!(mark_scripts(&mut marked, [&a, &b].into_iter(), "h0").is_empty());
        // A new class replaces the chain; a job that left is removed.
        let a2 = job(1, 1, 2);
        let next = mark_scripts(&mut marked, [&a2].into_iter(), "h0");
        assert_eq!(next.len(), 1);
        assert!(next[0].contains("ip dscp 0 ip dscp set 16"), "{next:?}");
        let last = mark_scripts(&mut marked, std::iter::empty(), "h0");
        assert!(last[0].ends_with("delete chain ip orrery job-1\n"), "{last:?}");
        assert!(marked.is_empty());
    }
}
