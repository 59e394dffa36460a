//! The chaos cluster's control network: every member in a network
//! namespace of its own, all on one Linux bridge (in a namespace of its
//! own too), and this process's namespace on it as the clients' side. The
//! nemesis cuts and thins it with nftables rules inside the members'
//! namespaces; removing the namespaces removes every veth, rule and route.

use super::delay::Delayer;
use super::nemesis::Member;
use anyhow::{Context, Result, bail};
use orrery_testbed::fabric::run;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// `nft -f -` on `script` inside namespace `ns`.
fn nft(ns: &str, script: &str) -> Result<()> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("nft")?;
    child.stdin.take().context("nft's stdin")?.write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft in {ns}: {} (script: {script})", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Why the control network cannot be built here, or `None`.
pub fn unavailable() -> Option<String> {
    if let Some(why) = orrery_testbed::fabric::unavailable() {
        return Some(why);
    }
    match Command::new("nft").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => super::delay::unavailable(),
        _ => Some("no `nft` on PATH (Debian's nftables; .ci/run installs it)".into()),
    }
}

/// The network, removed when dropped.
pub struct ControlNet {
    bridge_ns: String,
    members: Vec<(Member, String, Ipv4Addr)>,
    /// This process's address on it.
    root_ip: Ipv4Addr,
    root_dev: String,
    up: bool,
    /// Members whose received packets are held back now.
    delays: Vec<Delayer>,
}

impl ControlNet {
    /// Builds it: `PREFIX-br` with bridge `br0`, and `PREFIX-MEMBER` for
    /// each member at 10.213.`subnet`.(i + 2)/24, this namespace at .1.
    /// On error, whatever was made is removed. O(members).
    pub fn up(prefix: &str, subnet: u8, members: &[Member]) -> Result<ControlNet> {
        if prefix.is_empty() || prefix.len() > 8 || !prefix.chars().all(|c| c.is_ascii_alphanumeric()) {
            bail!("chaos network prefix {prefix:?}: expected 1 to 8 letters or digits");
        }
        let ip = |i: usize| Ipv4Addr::new(10, 213, subnet, i as u8);
        let mut net = ControlNet {
            bridge_ns: format!("{prefix}-br"),
            members: members.iter().enumerate().map(|(i, &m)| (m, format!("{prefix}-{m}"), ip(i + 2))).collect(),
            root_ip: ip(1),
            root_dev: format!("{prefix}0"),
            up: true,
            delays: Vec::new(),
        };
        net.build()?;
        Ok(net)
    }

    fn build(&mut self) -> Result<()> {
        let br = self.bridge_ns.clone();
        run("ip", &["netns", "add", &br])?;
        run("ip", &["-n", &br, "link", "set", "lo", "up"])?;
        run("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &br, "link", "set", "br0", "up"])?;
        for (i, (_, ns, addr)) in self.members.iter().enumerate() {
            let port = format!("p{i}");
            run("ip", &["netns", "add", ns])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            run("ip", &["-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
            run("ip", &["-n", &br, "link", "set", &port, "master", "br0", "up"])?;
            run("ip", &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            run("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            // Every member filters its own traffic: the nemesis adds rules
            // to these chains and flushes them to heal.
            nft(
                ns,
                "table inet chaos {\n chain input { type filter hook input priority 0; }\n \
                 chain output { type filter hook output priority 0; }\n}\n",
            )?;
        }
        run("ip", &["link", "add", &self.root_dev, "type", "veth", "peer", "name", "root", "netns", &br])?;
        run("ip", &["-n", &br, "link", "set", "root", "master", "br0", "up"])?;
        run("ip", &["addr", "add", &format!("{}/24", self.root_ip), "dev", &self.root_dev])?;
        run("ip", &["link", "set", &self.root_dev, "up"])?;
        Ok(())
    }

    /// The namespace of `m`.
    pub fn ns(&self, m: Member) -> &str {
        self.members.iter().find(|x| x.0 == m).map_or("", |x| x.1.as_str())
    }

    /// The address of `m`.
    pub fn ip(&self, m: Member) -> Ipv4Addr {
        self.members.iter().find(|x| x.0 == m).map_or(Ipv4Addr::UNSPECIFIED, |x| x.2)
    }

    /// Drops every packet `from` sends to `to` (at `from`'s output). O(1).
    pub fn cut(&self, from: Member, to: Member) -> Result<()> {
        nft(self.ns(from), &format!("add rule inet chaos output ip daddr {} drop\n", self.ip(to)))
    }

    /// No packet between any member of `a` and any of `b`. O(|a| · |b|).
    pub fn partition(&self, a: &[Member], b: &[Member]) -> Result<()> {
        for &x in a {
            for &y in b {
                self.cut(x, y)?;
                self.cut(y, x)?;
            }
        }
        Ok(())
    }

    /// Drops `percent` of what `m` receives, at random.
    pub fn lose(&self, m: Member, percent: u32) -> Result<()> {
        nft(self.ns(m), &format!("add rule inet chaos input iifname \"eth0\" numgen random mod 100 < {percent} drop\n"))
    }

    /// Holds back what `m` receives by `ms` (see [`super::delay`]).
    pub fn delay(&mut self, m: Member, ms: u64) -> Result<()> {
        let d = Delayer::start(self.ns(m), ms)?;
        self.delays.push(d);
        Ok(())
    }

    /// Removes every rule and delay; the packets the delays held. O(members).
    pub fn heal(&mut self) -> Result<u64> {
        let mut held = 0;
        for d in std::mem::take(&mut self.delays) {
            held += d.stop()?;
        }
        for (_, ns, _) in &self.members {
            nft(ns, "flush chain inet chaos input\nflush chain inet chaos output\n")?;
        }
        Ok(held)
    }

    /// Removes the namespaces (and with them the veths and rules).
    pub fn down(&mut self) {
        if !std::mem::take(&mut self.up) {
            return;
        }
        self.delays.clear();
        for ns in self.members.iter().map(|m| m.1.clone()).chain([self.bridge_ns.clone()]) {
            let _ = run("ip", &["netns", "del", &ns]);
        }
        let _ = run("ip", &["link", "del", &self.root_dev]);
    }
}

impl Drop for ControlNet {
    fn drop(&mut self) {
        self.down();
    }
}
