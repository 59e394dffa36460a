//! The chaos cluster's processes: a 3-member etcd, the service's replicas
//! and the node agents, each started inside its member's namespace
//! (`ip netns exec` execs, so the child's pid is the process itself and
//! signals reach it), its output appended to a log file. A process that
//! exits while the nemesis is not holding it down is started again, as
//! systemd's `Restart=always` would.

use super::nemesis::{Member, Shape};
use super::net::ControlNet;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// etcd's client and peer ports on each member's address.
const ETCD_CLIENT: u16 = 2379;
const ETCD_PEER: u16 = 2380;
/// The service's port on each replica's address.
pub const SERVE_PORT: u16 = 7400;
/// Size of each etcd member's data tmpfs by default, MiB: etcd
/// preallocates 64 MiB WAL segments, so a full disk is reached by a file,
/// not by the log. A soak's log needs more (`--etcd-disk-mib`).
pub const ETCD_DISK_MIB: u64 = 160;

/// One process of the cluster.
pub struct Proc {
    /// Whose.
    pub member: Member,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    /// The nemesis holds it down (killed, or paused): no restart.
    pub held: bool,
    /// Times it was started again after exiting on its own.
    pub restarts: usize,
    started: std::time::Instant,
}

impl Proc {
    fn spawn(&mut self, net: &ControlNet) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new("ip")
            .args(["netns", "exec", net.ns(self.member)])
            .args(&self.argv)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.member))?;
        self.child = Some(child);
        self.started = std::time::Instant::now();
        Ok(())
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -SIG`.
    pub fn signal(&self, sig: &str) -> Result<()> {
        let Some(pid) = self.pid() else { return Ok(()) };
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status()?.success();
        if !ok {
            bail!("kill -{sig} {pid} ({})", self.member);
        }
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn exited(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
            None => true,
        }
    }
}

/// The whole cluster, stopped and cleaned up when dropped.
pub struct Cluster {
    /// Its network.
    pub net: ControlNet,
    /// Its processes, etcd first, then replicas, then agents.
    pub procs: Vec<Proc>,
    /// Its folder.
    pub dir: PathBuf,
    mounts: Vec<PathBuf>,
    exe: PathBuf,
}

impl Cluster {
    /// Builds the network and starts every process. `subnet` picks the
    /// control network's /24.
    /// The replicas forget jobs `keep_finished_s` after they end.
    pub fn start(dir: &Path, shape: Shape, subnet: u8, etcd_disk_mib: u64, keep_finished_s: f64) -> Result<Cluster> {
        let exe = std::env::current_exe()?;
        let prefix = format!("och{}", subnet);
        let net = ControlNet::up(&prefix, subnet, &shape.members())?;
        let mut c = Cluster { net, procs: Vec::new(), dir: dir.to_path_buf(), mounts: Vec::new(), exe };
        std::fs::create_dir_all(dir.join("logs"))?;
        std::fs::create_dir_all(dir.join("workers"))?;
        let peers: Vec<String> =
            (0..shape.etcd).map(|i| format!("m{i}=http://{}:{ETCD_PEER}", c.net.ip(Member::Etcd(i)))).collect();
        for i in 0..shape.etcd {
            let data = dir.join(format!("etcd{i}"));
            std::fs::create_dir_all(&data)?;
            let d = data.display().to_string();
            let size = format!("size={etcd_disk_mib}m");
            let status = Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs", &d]).status()?;
            if !status.success() {
                bail!("mount -t tmpfs {d}");
            }
            c.mounts.push(data.clone());
            let ip = c.net.ip(Member::Etcd(i));
            let argv = vec![
                "etcd".to_string(),
                format!("--name=m{i}"),
                format!("--data-dir={d}/data"),
                format!("--listen-client-urls=http://{ip}:{ETCD_CLIENT}"),
                format!("--advertise-client-urls=http://{ip}:{ETCD_CLIENT}"),
                format!("--listen-peer-urls=http://{ip}:{ETCD_PEER}"),
                format!("--initial-advertise-peer-urls=http://{ip}:{ETCD_PEER}"),
                format!("--initial-cluster={}", peers.join(",")),
                "--initial-cluster-state=new".into(),
                "--initial-cluster-token=orrery-chaos".into(),
                // etcd 3.5's default (deploy/orrery-ha.yaml runs 3.5),
                // off in Debian's 3.4: without it a member cut off one way
                // keeps calling elections and unseats the leader.
                "--pre-vote=true".into(),
                "--heartbeat-interval=100".into(),
                "--election-timeout=1000".into(),
                // etcd keeps its raft log in memory until a snapshot: 3.4's
                // default of 100,000 entries is over an hour of this
                // cluster's writes (about 24 a second), and its memory grew
                // all through a soak; 10,000 is etcd 3.6's default.
                "--snapshot-count=10000".into(),
                "--log-level=error".into(),
            ];
            c.add(Member::Etcd(i), argv, Vec::new())?;
        }
        // The replicas serve HTTPS with a test CA's certificate for their
        // addresses (tokens never cross the bridge in clear).
        let tls = dir.join("tls");
        let names: Vec<String> = (0..shape.replicas).map(|i| c.net.ip(Member::Replica(i)).to_string()).collect();
        let status = Command::new(&c.exe)
            .args(["certs", "--out", &tls.display().to_string(), "--names", &names.join(",")])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("orrery certs --out {}", tls.display());
        }
        let store = format!(
            "etcd://{}/chaos",
            (0..shape.etcd)
                .map(|i| format!("{}:{ETCD_CLIENT}", c.net.ip(Member::Etcd(i))))
                .collect::<Vec<_>>()
                .join(",")
        );
        for i in 0..shape.replicas {
            let data = dir.join(format!("replica{i}"));
            std::fs::create_dir_all(&data)?;
            let argv = [
                "serve",
                "--policy",
                "fifo",
                "--topology",
                "demo",
                "--node-timeout-s",
                "5",
                "--lease-s",
                "2",
                // A 5-minute run sees etcd compacted several times, faults
                // and leader changes around it (the default is every 300 s).
                "--etcd-compaction-interval-s",
                "60",
                "--keep-finished",
                &format!("{keep_finished_s}s"),
                "--listen",
                &format!("{}:{SERVE_PORT}", c.net.ip(Member::Replica(i))),
                "--data",
                &data.display().to_string(),
                "--store",
                &store,
                "--tls-cert",
                &tls.join("server.pem").display().to_string(),
                "--tls-key",
                &tls.join("server-key.pem").display().to_string(),
            ];
            let argv = std::iter::once(c.exe.display().to_string()).chain(argv.iter().map(|s| s.to_string())).collect();
            c.add(Member::Replica(i), argv, vec![("RUST_LOG".into(), "warn".into())])?;
        }
        Ok(c)
    }

    fn add(&mut self, member: Member, argv: Vec<String>, env: Vec<(String, String)>) -> Result<()> {
        let log = self.dir.join("logs").join(format!("{member}.log"));
        let mut p =
            Proc { member, argv, env, log, child: None, held: false, restarts: 0, started: std::time::Instant::now() };
        p.spawn(&self.net)?;
        self.procs.push(p);
        Ok(())
    }

    /// The replicas' URLs, comma-separated (the clients' and agents' list).
    pub fn servers(&self, shape: Shape) -> String {
        (0..shape.replicas)
            .map(|i| format!("https://{}:{SERVE_PORT}", self.net.ip(Member::Replica(i))))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The test CA the replicas' certificate is signed by.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("tls").join("ca.pem")
    }

    /// Host `h{i}`'s clock skew (ms), which its agent and training
    /// processes read.
    pub fn clock_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}.clock"))
    }

    /// Agent `i`'s Unix socket.
    pub fn socket(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}.sock"))
    }

    /// Agent `i`'s report log (`orrery agent --report-log`).
    pub fn report_log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}.reports.csv"))
    }

    /// Starts the node agents (after the service has made its tokens):
    /// host `h{i}` with 2 GPUs, its training processes `orrery worker`s
    /// that exchange their collectives over the control network.
    pub fn start_agents(&mut self, shape: Shape, token: &Path) -> Result<()> {
        let servers = self.servers(shape);
        let worker = format!(
            "exec {} worker --scale 0.001 --log-dir {}",
            self.exe.display(),
            self.dir.join("workers").display()
        );
        for i in 0..shape.agents {
            let argv = vec![
                self.exe.display().to_string(),
                "agent".into(),
                "--node".into(),
                "--name".into(),
                format!("h{i}"),
                "--gpus".into(),
                "2".into(),
                "--nic-gbps".into(),
                "50".into(),
                "--exec".into(),
                worker.clone(),
                "--server".into(),
                servers.clone(),
                "--token".into(),
                token.display().to_string(),
                "--ca".into(),
                self.ca().display().to_string(),
                "--socket".into(),
                self.socket(i).display().to_string(),
                "--data-addr".into(),
                self.net.ip(Member::Agent(i)).to_string(),
                "--report-log".into(),
                self.report_log(i).display().to_string(),
            ];
            std::fs::write(self.clock_file(i), "0\n")?;
            let env = vec![
                ("RUST_LOG".into(), "info".into()),
                (orrery_serve::clock::SKEW_FILE_VAR.into(), self.clock_file(i).display().to_string()),
            ];
            self.add(Member::Agent(i), argv, env)?;
        }
        Ok(())
    }

    /// The process of `m`.
    pub fn proc(&mut self, m: Member) -> Result<&mut Proc> {
        self.procs.iter_mut().find(|p| p.member == m).with_context(|| format!("no process {m}"))
    }

    /// Starts `m` again (killing it first if it runs).
    pub fn restart(&mut self, m: Member) -> Result<()> {
        let net = &self.net;
        let p = self.procs.iter_mut().find(|p| p.member == m).with_context(|| format!("no process {m}"))?;
        p.kill();
        p.spawn(net)
    }

    /// Starts every process that exited and is not held down, at most once
    /// a second each (systemd's `RestartSec=1`). O(processes).
    pub fn supervise(&mut self) -> Result<()> {
        let net = &self.net;
        for p in self.procs.iter_mut().filter(|p| !p.held) {
            if p.exited() && p.started.elapsed() >= std::time::Duration::from_secs(1) {
                p.restarts += 1;
                p.spawn(net)?;
            }
        }
        Ok(())
    }

    /// etcd member `i`'s data folder (its tmpfs).
    pub fn etcd_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("etcd{i}"))
    }

    /// Stops everything: processes (the agents' training processes too,
    /// found through /proc), mounts, namespaces.
    pub fn stop(&mut self) {
        for p in &mut self.procs {
            p.kill();
        }
        let sockets: Vec<PathBuf> = (0..64).map(|i| self.socket(i)).collect();
        for (pid, _) in orrery_serve::history::watch::ranks(&sockets) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status();
        }
        for m in self.mounts.drain(..) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        self.net.down();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
