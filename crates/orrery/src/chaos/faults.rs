//! How each fault of the nemesis is applied to the chaos cluster and
//! healed: nftables rules and delays on its control network, signals to
//! its processes, the skew files its hosts' clocks read, a full tmpfs.

use super::cluster::Cluster;
use super::nemesis::Fault;
use super::{SHAPE, note, watch};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Applies a fault.
pub(super) fn apply(c: &mut Cluster, fault: &Fault) -> Result<()> {
    match fault {
        Fault::Partition { a, b } => c.net.partition(a, b),
        Fault::OneWay { from, to } => c.net.cut(*from, *to),
        Fault::Bridge { a, b, .. } => c.net.partition(a, b),
        Fault::Pause { member } => {
            let p = c.proc(*member)?;
            p.held = true;
            p.signal("STOP")
        }
        Fault::Kill { member } => {
            let p = c.proc(*member)?;
            p.held = true;
            p.kill();
            Ok(())
        }
        Fault::Clock { agent, skew_ms } => Ok(std::fs::write(c.clock_file(*agent), format!("{skew_ms}\n"))?),
        Fault::DiskFull { etcd } => fill(&c.etcd_dir(*etcd).join("fill")),
        Fault::Loss { member, percent } => c.net.lose(*member, *percent),
        Fault::Delay { member, ms } => c.net.delay(*member, *ms),
        // The skew grows from 0 as the fault runs (see [`drift`]).
        Fault::Drift { agent, .. } => Ok(std::fs::write(c.clock_file(*agent), "0\n")?),
        Fault::Crash { agent, pick } => {
            let sockets: Vec<PathBuf> = (0..SHAPE.agents).map(|i| c.socket(i)).collect();
            let running = watch::commands_of(&sockets, *agent);
            match running.get(*pick as usize % running.len().max(1)) {
                Some(&pid) => {
                    note(c, &format!("crash: SIGKILL of pid {pid} under h{agent}"));
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                None => note(c, &format!("crash: no training process runs under h{agent}")),
            }
            Ok(())
        }
    }
}

/// A drifting clock's skew `for_s` into the fault, written where its
/// agent and training processes read it: `ppm` · elapsed. O(1).
pub(super) fn drift(c: &Cluster, fault: &Fault, for_s: f64) -> Result<()> {
    if let Fault::Drift { agent, ppm } = fault {
        let skew_ms = *ppm as f64 * 1e-6 * for_s * 1e3;
        std::fs::write(c.clock_file(*agent), format!("{skew_ms:.3}\n"))?;
    }
    Ok(())
}

/// Ends a fault.
pub(super) fn heal(c: &mut Cluster, fault: &Fault) -> Result<()> {
    match fault {
        Fault::Partition { .. }
        | Fault::OneWay { .. }
        | Fault::Bridge { .. }
        | Fault::Loss { .. }
        | Fault::Delay { .. } => c.net.heal().map(|_| ()),
        Fault::Pause { member } => {
            let p = c.proc(*member)?;
            p.held = false;
            p.signal("CONT")
        }
        Fault::Kill { member } => {
            c.proc(*member)?.held = false;
            c.restart(*member)
        }
        Fault::Clock { agent, .. } | Fault::Drift { agent, .. } => Ok(std::fs::write(c.clock_file(*agent), "0\n")?),
        // The agent starts the process again by itself.
        Fault::Crash { .. } => Ok(()),
        Fault::DiskFull { etcd } => {
            std::fs::remove_file(c.etcd_dir(*etcd).join("fill")).context("emptying the full disk")?;
            Ok(())
        }
    }
}

/// Writes zeros to `path` until its file system is full.
fn fill(path: &Path) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    let block = vec![0u8; 1 << 20];
    loop {
        match f.write(&block) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => return Err(e.into()),
        }
    }
    // The last bytes a block did not fit.
    while f.write(&block[..4096]).is_ok_and(|n| n > 0) {}
    let _ = f.sync_all();
    Ok(())
}
