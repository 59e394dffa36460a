//! How a shaped link shares itself between TCP flows (issue 68, item 2):
//! `orrery testbed share`.
//!
//! The check builds two racks of `n` hosts under one spine, every link at
//! the same rate, and sends `n` TCP transfers at once, host i of rack 0 to
//! host i of rack 1, each under its own congestion control: the `n` flows
//! meet on rack 0's uplink. It reports each flow's payload rate after a
//! warm-up against its fair share (the link's payload rate over `n`). On a
//! tail-drop fabric the congestion controls decide the shares (bbr takes
//! most of a shallow buffer from cubic); on a fair one
//! ([`Queueing::Fair`](crate::fabric::Queueing::Fair)) each flow gets its
//! share whatever its congestion control.
//!
//! With `classes`, flow i's packets are marked with traffic class
//! `classes[i]` by the node agent's own nftables script
//! ([`orrery_serve::node_agent::mark_script`]): its data in its sender's
//! namespace, its acknowledgements in its receiver's. On a [`Queueing::Priority`](crate::fabric::Queueing::Priority) fabric
//! the highest backlogged class then takes the link (Crux's priority
//! queues, §4.3).

use crate::fabric::{Fabric, FabricOptions, TCP_GOODPUT};
use crate::throttle::transfer;
use anyhow::{Result, bail};
use orrery_model::setups::LeafSpine;
use serde::Serialize;

/// How to check the shares.
#[derive(Debug, Clone)]
pub struct ShareOptions {
    /// One flow per entry, under this congestion control (`cubic`, `reno`,
    /// `bbr`, ...).
    pub congestion_controls: Vec<String>,
    /// Length of the transfers, s.
    pub seconds: f64,
    /// Left out at the start (TCP's ramp-up), s.
    pub warmup_s: f64,
    /// Traffic class of each flow (empty: all 0, unmarked).
    pub classes: Vec<u8>,
    /// The fabric (its links run at 100 Gbit/s times `scale`).
    pub fabric: FabricOptions,
}

/// One flow's measured rate.
#[derive(Debug, Clone, Serialize)]
pub struct ShareRow {
    /// Its congestion control.
    pub congestion_control: String,
    /// Its traffic class (0: unmarked).
    pub class: u8,
    /// TCP payload the receiver counted after the warm-up, Mbit/s.
    pub measured_mbps: f64,
    /// Its fair share of the link's payload rate, Mbit/s.
    pub fair_mbps: f64,
    /// `measured_mbps / fair_mbps`.
    pub share: f64,
}

/// The rate of every link of the check's topology, Gbit/s at the model's scale.
const LINK_GBPS: f64 = 100.0;

/// The port flow i's receiver listens on.
const BASE_PORT: u16 = 47_000;

/// Builds the fabric, runs the transfers at once, tears the fabric down.
/// Needs root. O(flows · seconds).
pub fn check(opts: &ShareOptions) -> Result<Vec<ShareRow>> {
    let n = opts.congestion_controls.len();
    if !(2..=8).contains(&n) {
        bail!("--cc: expected 2 to 8 congestion controls (one per flow), found {n}");
    }
    if !(opts.seconds > opts.warmup_s && opts.warmup_s >= 0.0) {
        bail!("seconds ({}) must exceed the warm-up ({})", opts.seconds, opts.warmup_s);
    }
    if !opts.classes.is_empty() && opts.classes.len() != n {
        bail!("--classes: expected one traffic class per flow ({n}), found {}", opts.classes.len());
    }
    if let Some(c) = opts.classes.iter().find(|&&c| c >= crate::fabric::TRAFFIC_CLASSES) {
        bail!("--classes: expected traffic classes 0 to {}, found {c}", crate::fabric::TRAFFIC_CLASSES - 1);
    }
    let mut notes = Vec::new();
    for cc in &opts.congestion_controls {
        notes.extend(crate::drive::allow_congestion_control(cc)?);
    }
    for note in notes {
        eprintln!("note: {note}");
    }
    let topo = LeafSpine {
        racks: 2,
        hosts_per_rack: n as u32,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: LINK_GBPS,
        uplink_gbps: LINK_GBPS,
    }
    .build("share-check")
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut fabric = Fabric::up(&topo, opts.fabric.clone())?;
    let result = measure(&fabric, opts);
    fabric.down();
    result
}

fn measure(fabric: &Fabric, opts: &ShareOptions) -> Result<Vec<ShareRow>> {
    let n = opts.congestion_controls.len();
    let class = |i: usize| opts.classes.get(i).copied().unwrap_or(0);
    // As a node agent marks a job: its data at the sender, its acks at the receiver.
    for i in (0..n).filter(|&i| class(i) > 0) {
        let port = [BASE_PORT + i as u16];
        for (host, to, from) in [(i, &port[..], &[][..]), (n + i, &[][..], &port[..])] {
            let script = orrery_serve::node_agent::mark_script(i, class(i), to, from);
            orrery_serve::node_agent::run_nft(Some(fabric.host_netns(host)), &script)
                .map_err(|e| anyhow::anyhow!(e))?;
        }
    }
    let fair_mbps = LINK_GBPS * 1e3 * fabric.options.scale * TCP_GOODPUT / n as f64;
    let flows: Vec<std::thread::JoinHandle<Result<f64>>> = opts
        .congestion_controls
        .iter()
        .enumerate()
        .map(|(i, cc)| {
            let (sender, receiver) = (fabric.host_netns(i).to_string(), fabric.host_netns(n + i).to_string());
            let to = fabric.host_addrs[n + i];
            let (seconds, warmup, cc) = (opts.seconds, opts.warmup_s, cc.clone());
            std::thread::spawn(move || {
                transfer(&sender, &receiver, to, BASE_PORT + i as u16, seconds, warmup, Some(&cc))
            })
        })
        .collect();
    let mut rows = Vec::with_capacity(n);
    for (cc, flow) in opts.congestion_controls.iter().zip(flows) {
        let measured_mbps = flow.join().map_err(|_| anyhow::anyhow!("a transfer's thread panicked"))??;
        rows.push(ShareRow {
            congestion_control: cc.clone(),
            class: class(rows.len()),
            measured_mbps,
            fair_mbps,
            share: measured_mbps / fair_mbps,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_refused_before_any_namespace_is_made() {
        let opts = |ccs: &[&str], seconds: f64| ShareOptions {
            congestion_controls: ccs.iter().map(|c| c.to_string()).collect(),
            seconds,
            warmup_s: 1.0,
            classes: Vec::new(),
            fabric: FabricOptions::default(),
        };
        assert!(check(&opts(&["cubic"], 3.0)).expect_err("one flow").to_string().contains("expected 2 to 8"));
        assert!(check(&opts(&["cubic", "bbr"], 0.5)).expect_err("short").to_string().contains("must exceed"));
        let three = ShareOptions { classes: vec![7, 0, 1], ..opts(&["cubic", "bbr"], 3.0) };
        assert!(check(&three).expect_err("3 classes").to_string().contains("one traffic class per flow (2)"));
        let eight = ShareOptions { classes: vec![8, 0], ..opts(&["cubic", "bbr"], 3.0) };
        assert!(check(&eight).expect_err("class 8").to_string().contains("classes 0 to 7, found 8"));
    }
}
