//! The delay fault: every packet a member receives on the control network
//! held back `ms` before the kernel takes it, as `tc qdisc … netem delay`
//! would; this kernel has no netem. An iptables rule in the member's
//! namespace sends what arrives on `eth0` to an NFQUEUE (the kernel's queue
//! to user space: `nft`'s own `queue` statement is not built here, its
//! iptables target is), and a thread of this process that entered the
//! namespace holds each packet and lets it through once its time has come.
//! `--queue-bypass` lets packets through while no thread listens, so a
//! delayer that stops leaves no member cut off.

use anyhow::{Context, Result, anyhow, bail};
use std::collections::VecDeque;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The queue number inside each namespace (queues are per namespace).
const QUEUE: u16 = 0;

/// Packets held at most at once; the kernel lets the rest through
/// (fail-open) rather than dropping them.
const MAX_HELD: u32 = 16_384;

/// `iptables ARGS` inside namespace `ns`.
fn iptables(ns: &str, args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "iptables", "-w"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("iptables")?;
    if !out.status.success() {
        bail!("iptables {} in {ns}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Why the delay fault cannot run here, or `None`.
pub fn unavailable() -> Option<String> {
    match Command::new("iptables").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => None,
        _ => Some("no `iptables` on PATH (Debian's iptables; .ci/run installs it)".into()),
    }
}

/// A member's received packets held back; released and removed by
/// [`Delayer::stop`] (or when dropped).
pub struct Delayer {
    ns: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<u64>>>,
}

impl Delayer {
    /// Holds every packet namespace `ns` receives on `eth0` for `ms`.
    pub fn start(ns: &str, ms: u64) -> Result<Delayer> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let (ns_path, flag) = (format!("/run/netns/{ns}"), stop.clone());
        let thread = std::thread::Builder::new().name(format!("delay-{ns}")).spawn(move || {
            let mut queue = match open_in(&ns_path) {
                Ok(q) => {
                    let _ = ready_tx.send(Ok(()));
                    q
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            hold(&mut queue, Duration::from_millis(ms), &flag)
        })?;
        let mut d = Delayer { ns: ns.to_string(), stop, thread: Some(thread) };
        ready_rx.recv().map_err(|_| anyhow!("the delay thread for {ns} ended before it was ready"))??;
        let queue = QUEUE.to_string();
        iptables(ns, &["-A", "INPUT", "-i", "eth0", "-j", "NFQUEUE", "--queue-num", &queue, "--queue-bypass"])
            .inspect_err(|_| {
                let _ = d.halt();
            })?;
        Ok(d)
    }

    /// Removes the rule, lets every held packet through and ends the
    /// thread (the caller removes the rule first, so nothing arrives after
    /// the last packets are let through); the packets it held, in all.
    pub fn stop(mut self) -> Result<u64> {
        let removed = iptables(&self.ns, &["-F", "INPUT"]);
        let held = self.halt();
        removed?;
        held
    }

    fn halt(&mut self) -> Result<u64> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow!("the delay thread for {} panicked", self.ns))?,
            None => Ok(0),
        }
    }
}

impl Drop for Delayer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = iptables(&self.ns, &["-F", "INPUT"]);
            let _ = self.halt();
        }
    }
}

/// Enters the network namespace at `path` (this thread only) and binds
/// its queue there: the netlink socket stays in it.
fn open_in(path: &str) -> Result<nfq::Queue> {
    let ns = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).with_context(|| format!("entering {path}"))?;
    let mut q = nfq::Queue::open().context("opening a netfilter queue socket")?;
    q.bind(QUEUE).context("binding NFQUEUE 0")?;
    // Only the packet's id comes up: a verdict needs no payload.
    q.set_copy_range(QUEUE, 0)?;
    q.set_queue_max_len(QUEUE, MAX_HELD)?;
    q.set_fail_open(QUEUE, true)?;
    q.set_nonblocking(true);
    Ok(q)
}

/// Holds each packet `delay` from its arrival, in arrival order, until
/// `stop`; then lets the rest through. Polls every millisecond, so a
/// packet leaves within 1 ms of its time. O(1) per packet.
fn hold(queue: &mut nfq::Queue, delay: Duration, stop: &AtomicBool) -> Result<u64> {
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    let mut count = 0;
    let accept = |queue: &mut nfq::Queue, mut msg: nfq::Message| {
        msg.set_verdict(nfq::Verdict::Accept);
        queue.verdict(msg)
    };
    while !stop.load(Ordering::SeqCst) {
        loop {
            match queue.recv() {
                Ok(msg) => {
                    held.push_back((Instant::now() + delay, msg));
                    count += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(anyhow!("reading the netfilter queue: {e}")),
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, msg)) = held.pop_front() {
                accept(queue, msg).context("letting a packet through")?;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for (_, msg) in held {
        let _ = accept(queue, msg);
    }
    // What arrived before the rule went and is still in the socket.
    for _ in 0..3 {
        while let Ok(msg) = queue.recv() {
            let _ = accept(queue, msg);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::super::nemesis::Member;
    use super::super::net::ControlNet;
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    /// How long a TCP connection attempt to a closed port of `ip` takes to
    /// be refused: one round trip (SYN, then RST).
    fn refused_after(ip: std::net::Ipv4Addr) -> Duration {
        let t = Instant::now();
        let r = TcpStream::connect_timeout(&SocketAddr::from((ip, 9)), Duration::from_secs(5));
        assert!(r.is_err(), "nothing listens on port 9");
        t.elapsed()
    }

    #[test]
    fn a_delayed_member_answers_late_and_on_time_again_once_healed() {
        if let Some(why) = super::super::net::unavailable() {
            println!("skipped: {why}");
            return;
        }
        // Subnet 250: outside the 20–219 that `orrery bench chaos` runs take.
        let mut net = ControlNet::up("ochdl", 250, &[Member::Agent(0)]).expect("the control network");
        let ip = net.ip(Member::Agent(0));
        // A link just brought up may lose the first SYN (the neighbour
        // entry is not resolved yet; TCP resends it after 1 s): one attempt
        // first, then the round trip measured.
        refused_after(ip);
        let before = refused_after(ip);
        assert!(before < Duration::from_millis(100), "{before:?} without a delay");
        net.delay(Member::Agent(0), 300).expect("the delay starts");
        let delayed = refused_after(ip);
        // The SYN is held 300 ms (and polled every 1 ms); the RST is not.
        assert!((300..450).contains(&delayed.as_millis()), "{delayed:?} with a 300 ms delay");
        let held = net.heal().expect("healed");
        assert!(held >= 1, "the SYN was held: {held}");
        let after = refused_after(ip);
        assert!(after < Duration::from_millis(100), "{after:?} after healing");
        net.down();
    }
}
