//! Throttles on the wire (issue 36, item 3): one job's transfer capped by the
//! node agent's own tc commands, measured on real TCP.
//!
//! Where a throttle is enforced, and why there: the node agent puts each
//! throttled job's packets into an htb class of its own on the host's data
//! device, matched by destination port (u32; [`throttle_class_commands`]).
//! The kernel then holds the job's flows to the rate whatever the training
//! framework does: gloo, NCCL's sockets and `orrery worker` alike, with no
//! change to the training process and no pacing loop that a busy CPU could
//! make late. Pacing inside the worker would need every framework's
//! transport to cooperate; DSCP marking would too (the process sets it).
//!
//! The check builds two hosts in two racks under one spine, installs the
//! class for a job's ring successor port at each rate asked, sends over one
//! TCP connection to that port for a few seconds, and counts the bytes the
//! receiver gets after a warm-up. An unthrottled transfer to a port no
//! filter matches is the control: the link's own rate. htb counts frames,
//! so the payload expected is the rate asked times [`TCP_GOODPUT`].

use crate::fabric::{Fabric, FabricError, FabricOptions, HOST_DEV, TCP_GOODPUT};
use anyhow::{Context, Result, bail};
use orrery_model::setups::LeafSpine;
use orrery_serve::api::worker_port;
use orrery_serve::node_agent::throttle_class_commands;
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How to check throttles.
#[derive(Debug, Clone)]
pub struct ThrottleOptions {
    /// Per-flow caps to try, Gbit/s at the model's scale (the `Throttle`
    /// decisions' unit); the fabric shapes them by `fabric.scale`.
    pub gbps: Vec<f64>,
    /// Length of each transfer, s.
    pub seconds: f64,
    /// Left out at the start of each transfer (TCP's ramp-up), s.
    pub warmup_s: f64,
    /// The fabric (its links run at 100 Gbit/s times `scale`).
    pub fabric: FabricOptions,
}

impl Default for ThrottleOptions {
    fn default() -> Self {
        ThrottleOptions {
            gbps: vec![10.0, 25.0, 50.0, 75.0],
            seconds: 4.0,
            warmup_s: 1.0,
            fabric: FabricOptions::default(),
        }
    }
}

/// One measured transfer.
#[derive(Debug, Clone, Serialize)]
pub struct ThrottleRow {
    /// The cap asked, Gbit/s at the model's scale (None: the unthrottled
    /// control).
    pub asked_gbps: Option<f64>,
    /// The class's rate on the wire, Mbit/s (the link's for the control).
    pub wire_mbps: f64,
    /// TCP payload expected at that rate: `wire_mbps` × 1448/1514, Mbit/s.
    pub expected_mbps: f64,
    /// TCP payload the receiver counted after the warm-up, Mbit/s.
    pub measured_mbps: f64,
    /// `measured_mbps / expected_mbps`.
    pub ratio: f64,
}

/// The job whose class the check installs (any id; its class and port follow).
const JOB: usize = 7;

/// The link rate of the check's topology, Gbit/s at the model's scale.
const LINK_GBPS: f64 = 100.0;

/// Builds the two-host fabric, measures the control and each cap, and tears
/// the fabric down. Needs root. O(caps · seconds).
pub fn check(opts: &ThrottleOptions) -> Result<Vec<ThrottleRow>> {
    if !(opts.seconds > opts.warmup_s && opts.warmup_s >= 0.0) {
        bail!("seconds ({}) must exceed the warm-up ({})", opts.seconds, opts.warmup_s);
    }
    if let Some(g) = opts.gbps.iter().find(|g| !(g.is_finite() && **g > 0.0 && **g <= LINK_GBPS)) {
        bail!("--gbps: expected caps above 0 and at most the link's {LINK_GBPS} Gbit/s, found {g}");
    }
    let topo = LeafSpine {
        racks: 2,
        hosts_per_rack: 1,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: LINK_GBPS,
        uplink_gbps: LINK_GBPS,
    }
    .build("throttle-check")
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut fabric = Fabric::up(&topo, opts.fabric.clone())?;
    let result = measure_all(&fabric, opts);
    fabric.down();
    result
}

fn measure_all(fabric: &Fabric, opts: &ThrottleOptions) -> Result<Vec<ThrottleRow>> {
    let (sender, receiver) = (fabric.host_netns(0).to_string(), fabric.host_netns(1).to_string());
    let to = fabric.host_addrs[1];
    let scale = fabric.options.scale;
    let link_mbps = LINK_GBPS * 1e3 * scale;
    // The job's successor rank on the other host listens on this port; the
    // control uses a port no filter matches.
    let (throttled_port, free_port) = (worker_port(JOB, 1), worker_port(JOB, 2));
    let mut rows = Vec::new();
    let measured = transfer(&sender, &receiver, to, free_port, opts.seconds, opts.warmup_s, None)?;
    rows.push(row(None, link_mbps, measured));
    let mut first = true;
    for &g in &opts.gbps {
        let rate_bps = (g * 1e9 * scale).round() as u64;
        let ports: &[u16] = if first { &[throttled_port] } else { &[] };
        for args in throttle_class_commands(Some(&sender), HOST_DEV, JOB, rate_bps, ports) {
            tc(&args)?;
        }
        first = false;
        let measured = transfer(&sender, &receiver, to, throttled_port, opts.seconds, opts.warmup_s, None)?;
        rows.push(row(Some(g), rate_bps as f64 / 1e6, measured));
    }
    Ok(rows)
}

fn row(asked_gbps: Option<f64>, wire_mbps: f64, measured_mbps: f64) -> ThrottleRow {
    let expected_mbps = wire_mbps * TCP_GOODPUT;
    ThrottleRow { asked_gbps, wire_mbps, expected_mbps, measured_mbps, ratio: measured_mbps / expected_mbps }
}

fn tc(args: &[String]) -> Result<()> {
    let out = std::process::Command::new("tc").args(args).output().context("running tc")?;
    if !out.status.success() {
        return Err(FabricError::Command {
            command: format!("tc {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
        .into());
    }
    Ok(())
}

/// Moves the calling thread into network namespace `name` (made by `ip
/// netns add`): sockets it opens from then on live there.
fn enter(name: &str) -> Result<()> {
    let file = std::fs::File::open(format!("/run/netns/{name}")).with_context(|| format!("namespace {name}"))?;
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).with_context(|| format!("entering {name}"))?;
    Ok(())
}

/// One TCP transfer from `sender`'s namespace to `to:port` in `receiver`'s
/// for `seconds`, under congestion control `cc` (None: the namespace's
/// default); the payload rate after `warmup` s, Mbit/s.
pub(crate) fn transfer(
    sender: &str,
    receiver: &str,
    to: Ipv4Addr,
    port: u16,
    seconds: f64,
    warmup: f64,
    cc: Option<&str>,
) -> Result<f64> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let receiver = receiver.to_string();
    let reader = std::thread::spawn(move || -> Result<f64> {
        let listener = enter(&receiver)
            .and_then(|()| TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).context("listening"));
        let listener = match listener {
            Ok(l) => {
                let _ = ready_tx.send(Ok(()));
                l
            }
            Err(e) => {
                let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                return Err(e);
            }
        };
        // Accept within 5 s: a sender that never connects must not hang the check.
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e).context("accepting"),
            }
        };
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(Duration::from_secs_f64(seconds + 5.0)))?;
        let start = Instant::now();
        let mut buf = vec![0u8; 1 << 16];
        let (mut counted, mut from) = (0u64, None);
        loop {
            let n = conn.read(&mut buf).context("receiving")?;
            if n == 0 {
                break;
            }
            let at = start.elapsed();
            if at.as_secs_f64() >= warmup {
                // Counting starts at the first read after the warm-up.
                if from.is_none() {
                    from = Some(at);
                } else {
                    counted += n as u64;
                }
            }
        }
        let span = start.elapsed().saturating_sub(from.unwrap_or_default()).as_secs_f64();
        if span <= 0.0 {
            bail!("the transfer ended within its warm-up");
        }
        Ok(counted as f64 * 8.0 / span / 1e6)
    });
    ready_rx.recv().context("the receiver thread ended")??;
    let sender = sender.to_string();
    let cc = cc.map(str::to_string);
    let writer = std::thread::spawn(move || -> Result<()> {
        enter(&sender)?;
        let mut conn = TcpStream::connect(SocketAddrV4::new(to, port)).context("connecting")?;
        if let Some(cc) = &cc {
            socket2::SockRef::from(&conn)
                .set_tcp_congestion(cc.as_bytes())
                .with_context(|| format!("TCP congestion control {cc:?}"))?;
        }
        let chunk = vec![0u8; 1 << 16];
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < end {
            conn.write_all(&chunk).context("sending")?;
        }
        Ok(())
    });
    writer.join().map_err(|_| anyhow::anyhow!("the sender thread panicked"))??;
    reader.join().map_err(|_| anyhow::anyhow!("the receiver thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_refused_before_any_namespace_is_made() {
        let bad = ThrottleOptions { gbps: vec![150.0], ..ThrottleOptions::default() };
        assert!(check(&bad).expect_err("a cap over the link").to_string().contains("at most the link's 100"));
        let bad = ThrottleOptions { seconds: 1.0, warmup_s: 2.0, ..ThrottleOptions::default() };
        assert!(
            check(&bad).expect_err("a warm-up longer than the run").to_string().contains("must exceed the warm-up")
        );
    }

    #[test]
    fn the_expected_payload_is_the_wire_rate_less_headers() {
        let r = row(Some(25.0), 250.0, 239.0);
        assert!((r.expected_mbps - 250.0 * 1448.0 / 1514.0).abs() < 1e-9);
        assert!((r.ratio - 239.0 / r.expected_mbps).abs() < 1e-12);
    }
}
