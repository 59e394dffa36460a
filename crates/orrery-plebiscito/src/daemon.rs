//! One auction agent's datagram handling, sans IO: sealed bytes and time go
//! in, sealed bytes (with their destinations) come out. The `orrery agent`
//! driver only moves them between this and a UDP socket, so every rule about
//! who may say what is here, where tests and the fuzzer reach it.
//!
//! The rules, in the order a datagram meets them:
//! 1. **Authentic** ([`wire::open`]): the tag verifies under the cluster key.
//! 2. **Fresh** ([`wire::ReplayGuard`]): sent within the replay window and not
//!    seen before.
//! 3. **From whom it says**: protocol traffic, sync requests and sync replies
//!    only from a peer's own address under its own id; clients only submit and
//!    finish.
//! 4. **Learn before starting auctions.** A started (or restarted) agent asks
//!    its peers what was decided while it was away and accepts no submission
//!    until one peer's whole answer has arrived: without it, a restarted agent
//!    that lost its state would start a second auction for a decided job and
//!    split the decision. It does take part in auctions its peers are running
//!    (their bundles are live, and a job decided while it learns must be
//!    decided here too, or its view of the links would differ). A sync request is answered at most once per
//!    [`SYNC_ANSWER_EVERY_US`] per peer, so a forged request cannot make an
//!    agent flood a victim.
//! 5. **A job id is auctioned once.** A Submit of a decided job is answered
//!    [`Receipt::Decided`] with its verdict; a Submit of an open one,
//!    [`Receipt::Accepted`] again. Replays of old submissions therefore
//!    cannot start a second auction even past the replay window.

use crate::agent::{Agent, Output, Verdict};
use crate::utility::{Demand, JobRequest, Usage};
use crate::wire::{self, Body, CLIENT, Envelope, Key, Receipt, ReplayGuard};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// Most auctions an agent holds open; a submission beyond is answered
/// [`Receipt::Busy`] and the client sends it again later.
pub const MAX_OPEN_AUCTIONS: usize = 64;
/// A peer's SyncRequest is answered at most this often, µs: half the
/// asking period, so an honest learner's every request is answered even
/// with jitter, while a forged stream gets at most two answers a second.
pub const SYNC_ANSWER_EVERY_US: u64 = 500_000;
/// A learning agent asks its peers again this often, µs.
pub const SYNC_ASK_EVERY_US: u64 = 1_000_000;
/// Verdicts per SyncReply datagram: 40 with their placements stay well
/// inside a datagram.
pub const SYNC_CHUNK: usize = 40;
/// The largest UDP payload over IPv4, bytes.
pub const MAX_DATAGRAM: usize = 65_507;

/// The cluster's GPU capacity, against which submissions are checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// The topology's name (for messages).
    pub name: String,
    /// GPUs of the largest node.
    pub largest_gpus: f64,
    /// GPUs of all nodes.
    pub total_gpus: f64,
}

impl Capacity {
    /// Whether a job could ever be placed on this cluster: every component
    /// fits the largest node and all of them fit the cluster.
    pub fn admits(&self, job: &JobRequest) -> Result<(), String> {
        let roles = job.roles();
        for r in 0..roles.len() {
            if job.demand(r).gpus > self.largest_gpus {
                return Err(format!(
                    "job {}: a component asks for {} GPUs; the largest node of {} has {}",
                    job.id,
                    job.demand(r).gpus,
                    self.name,
                    self.largest_gpus
                ));
            }
        }
        let wanted: f64 = roles.iter().enumerate().map(|(r, &k)| k as f64 * job.demand(r).gpus).sum();
        if wanted > self.total_gpus {
            return Err(format!("job {}: asks for {wanted} GPUs; {} has {}", job.id, self.name, self.total_gpus));
        }
        Ok(())
    }
}

/// What the daemon counted, for the state file and for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Datagrams handed to the socket without error.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// The largest, bytes.
    pub largest: usize,
    /// Sends that failed (the socket's error, or larger than a datagram).
    pub send_errors: u64,
    /// Datagrams dropped: tag, decoding, sender, or a message not allowed.
    pub bad: u64,
    /// Authentic datagrams refused as replays.
    pub replays: u64,
    /// Authentic datagrams sent outside the replay window of this clock
    /// (old replays, or a sender whose clock is off by more than the window).
    #[serde(default)]
    pub stale: u64,
    /// The senders' own bids refused in authentic bundles.
    pub refused_bids: u64,
    /// Sync requests not answered because the peer's last one was answered
    /// less than [`SYNC_ANSWER_EVERY_US`] ago.
    pub sync_throttled: u64,
}

/// Both clocks the daemon needs: its own monotonic time for the auction's
/// time-outs, and the wall clock shared (by NTP) with its peers for the
/// replay window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// Monotonic time, µs.
    pub mono_us: u64,
    /// Wall clock, µs since the Unix epoch.
    pub wall_us: u64,
}

/// What one step asks the driver to do.
#[derive(Debug, Default)]
pub struct Step {
    /// Datagrams to send, sealed, with their destinations.
    pub datagrams: Vec<(SocketAddr, Vec<u8>)>,
    /// Whether what the state file holds changed.
    pub changed: bool,
    /// Auctions decided in this step: job, verdict, consensus time, rounds.
    pub decided: Vec<(u64, Verdict, u64, u32)>,
    /// Jobs learnt from a peer in this step.
    pub learnt: usize,
    /// Why the datagram of this step was dropped, if it was.
    pub dropped: Option<String>,
}

/// What an agent writes to its state file.
#[derive(Debug, Serialize, Deserialize)]
pub struct State {
    /// Node id.
    pub id: u32,
    /// Capacity.
    pub total: Demand,
    /// Free after committed jobs.
    pub free: Demand,
    /// Reserved bandwidth as this agent sees it.
    pub usage: Usage,
    /// Verdict per job id.
    pub verdicts: BTreeMap<u64, Verdict>,
    /// Datagrams sent, bytes sent, largest datagram.
    pub sent: (u64, u64, usize),
    /// Datagrams dropped: tag, decoding, sender or job refused.
    pub bad_datagrams: u64,
    /// The sender's own bids refused in authentic bundles (slot outside the
    /// role, node outside the topology, value not finite). Bids it relays for
    /// other nodes are dropped without counting: each node's bids come from it.
    #[serde(default)]
    pub refused_bids: u64,
    /// Jobs placed and not finished, with their placements: what a restart
    /// reads back.
    #[serde(default)]
    pub placed: Vec<(JobRequest, crate::utility::Placement)>,
    /// Every count of the datagram handler (replays, stale datagrams, send
    /// errors, ...). `sent`, `bad_datagrams` and
    /// `refused_bids` above repeat three of them for readers of the state
    /// files earlier versions wrote.
    #[serde(default)]
    pub counters: Counters,
}

/// One node's auction agent with its peers, key and guards.
#[derive(Debug)]
pub struct Daemon {
    agent: Agent,
    peers: BTreeMap<u32, SocketAddr>,
    key: Key,
    guard: ReplayGuard,
    capacity: Capacity,
    learning: bool,
    last_ask_us: Option<u64>,
    answered_sync: BTreeMap<u32, u64>,
    counters: Counters,
}

impl Daemon {
    /// A daemon for `agent`, whose peers (itself included, or not) are at
    /// these addresses. It starts learning unless it has no other peer.
    pub fn new(agent: Agent, peers: BTreeMap<u32, SocketAddr>, key: Key, capacity: Capacity) -> Self {
        let learning = peers.keys().any(|&p| p != agent.id());
        Daemon {
            agent,
            peers,
            key,
            guard: ReplayGuard::default(),
            capacity,
            learning,
            last_ask_us: None,
            answered_sync: BTreeMap::new(),
            counters: Counters::default(),
        }
    }

    /// The auction state machine.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// What was counted so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether the daemon still waits for a peer's account of what was decided.
    pub fn is_learning(&self) -> bool {
        self.learning
    }

    /// The driver's report of a send: its size and whether the socket took it.
    pub fn record_send(&mut self, bytes: usize, ok: bool) {
        if ok {
            self.counters.sent += 1;
            self.counters.sent_bytes += bytes as u64;
            self.counters.largest = self.counters.largest.max(bytes);
        } else {
            self.counters.send_errors += 1;
        }
    }

    /// When the daemon next needs [`Daemon::on_tick`], monotonic µs.
    pub fn next_deadline(&self) -> Option<u64> {
        let ask = self.learning.then(|| self.last_ask_us.map_or(0, |t| t.saturating_add(SYNC_ASK_EVERY_US)));
        match (self.agent.next_deadline(), ask) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time passes: auctions decide, abort or re-send; a learning daemon
    /// asks its peers again.
    pub fn on_tick(&mut self, clock: Clock) -> Step {
        let mut step = Step::default();
        if self.learning && self.last_ask_us.is_none_or(|t| clock.mono_us >= t.saturating_add(SYNC_ASK_EVERY_US)) {
            self.last_ask_us = Some(clock.mono_us);
            let peers: Vec<SocketAddr> =
                self.peers.iter().filter(|&(&p, _)| p != self.agent.id()).map(|(_, &a)| a).collect();
            for to in peers {
                self.push(&mut step, clock, to, Body::SyncRequest);
            }
        }
        let mut out = Vec::new();
        self.agent.tick(clock.mono_us, &mut out);
        self.outputs(&mut step, clock, out);
        step
    }

    /// A datagram from `from`.
    pub fn on_datagram(&mut self, clock: Clock, from: SocketAddr, bytes: &[u8]) -> Step {
        let mut step = Step::default();
        let env = match wire::open(&self.key, bytes) {
            Ok(env) => env,
            Err(e) => {
                self.counters.bad += 1;
                step.dropped = Some(e.to_string());
                return step;
            }
        };
        if let Err(e) = self.guard.admit(&env, clock.wall_us) {
            match e {
                wire::WireError::Stale { .. } => self.counters.stale += 1,
                _ => self.counters.replays += 1,
            }
            step.dropped = Some(e.to_string());
            return step;
        }
        let me = self.agent.id();
        let peer = env.sender != me && env.sender != CLIENT && self.peers.get(&env.sender) == Some(&from);
        let mut out = Vec::new();
        match (env.sender, env.body) {
            (CLIENT, Body::Submit(job)) => {
                let outcome = self.submission(clock, job.clone(), &mut out);
                self.push(&mut step, clock, from, Body::Receipt { job: job.id, outcome });
            }
            (CLIENT, Body::Finish(job)) => {
                self.agent.finish_and_tell(job, &mut out);
                step.changed = true;
            }
            (s, Body::Protocol(msg)) if peer => {
                let running = self.agent.placed().len();
                self.counters.refused_bids += self.agent.receive_from(clock.mono_us, s, msg, &mut out) as u64;
                step.changed |= self.agent.placed().len() != running; // a peer's finish
            }
            (s, Body::SyncRequest) if peer => {
                if self.answered_sync.get(&s).is_some_and(|&t| clock.mono_us < t.saturating_add(SYNC_ANSWER_EVERY_US)) {
                    self.counters.sync_throttled += 1;
                    step.dropped = Some(format!("a second SyncRequest from {s} within {SYNC_ANSWER_EVERY_US} µs"));
                } else {
                    self.answered_sync.insert(s, clock.mono_us);
                    self.answer_sync(&mut step, clock, from);
                }
            }
            (_, Body::SyncReply { verdicts, placed, last }) if peer => {
                let learnt = self.agent.learn(verdicts, placed);
                step.learnt += learnt;
                step.changed |= learnt > 0;
                if last {
                    self.learning = false;
                }
            }
            (CLIENT, _) => {
                self.counters.bad += 1;
                step.dropped = Some("a client may only submit and finish jobs".into());
            }
            (s, _) => {
                self.counters.bad += 1;
                step.dropped = Some(format!("sender id {s} is not a peer at {from}, or sent what peers do not"));
            }
        }
        self.outputs(&mut step, clock, out);
        step
    }

    /// Rule 5, and back-pressure.
    fn submission(&mut self, clock: Clock, job: JobRequest, out: &mut Vec<Output>) -> Receipt {
        if let Err(reason) = job.check().map_err(|e| e.to_string()).and_then(|()| self.capacity.admits(&job)) {
            return Receipt::Refused(reason);
        }
        if let Some(v) = self.agent.verdicts().get(&job.id) {
            let what = match v {
                Verdict::Placed(_) if self.agent.placed().contains_key(&job.id) => "placed, running".to_string(),
                Verdict::Placed(_) => "placed, finished".to_string(),
                Verdict::Failed(reason) => format!("not placed: {reason}"),
                Verdict::Aborted => "aborted (no consensus before the hard time-out)".to_string(),
            };
            return Receipt::Decided(format!("job {} was decided before: {what}; an id is auctioned once", job.id));
        }
        if self.learning {
            return Receipt::Busy;
        }
        if !self.agent.knows(job.id) && self.agent.open_auctions() >= MAX_OPEN_AUCTIONS {
            return Receipt::Busy;
        }
        self.agent.submit(clock.mono_us, job, out);
        Receipt::Accepted
    }

    /// Every verdict, with the placements still running, in chunks; the
    /// last one says so (an empty answer is one chunk).
    fn answer_sync(&mut self, step: &mut Step, clock: Clock, to: SocketAddr) {
        let (verdicts, placed) = self.agent.decided_and_placed();
        let chunks: Vec<&[(u64, Verdict)]> =
            if verdicts.is_empty() { vec![&[]] } else { verdicts.chunks(SYNC_CHUNK).collect() };
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let ids: BTreeSet<u64> = chunk.iter().map(|v| v.0).collect();
            let placed = placed.iter().filter(|p| ids.contains(&p.0.id)).cloned().collect();
            self.push(step, clock, to, Body::SyncReply { verdicts: chunk.to_vec(), placed, last: i + 1 == n });
        }
    }

    fn outputs(&mut self, step: &mut Step, clock: Clock, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    if let Some(&addr) = self.peers.get(&to) {
                        self.push(step, clock, addr, Body::Protocol(msg));
                    }
                }
                Output::Decided { job, verdict, consensus_us, rounds } => {
                    step.changed = true;
                    step.decided.push((job, verdict, consensus_us, rounds));
                }
            }
        }
    }

    /// Seals a message for `to`; one that cannot fit a datagram is counted
    /// as a failed send, never sent cut.
    fn push(&mut self, step: &mut Step, clock: Clock, to: SocketAddr, body: Body) {
        let env = Envelope::at(self.agent.id(), clock.wall_us, body);
        let bytes = wire::seal(&self.key, &env);
        if bytes.len() > MAX_DATAGRAM {
            self.counters.send_errors += 1;
            return;
        }
        step.datagrams.push((to, bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Config;
    use crate::utility::{Arch, BidPolicy, ClusterMap, Demand, Resources, Utility};
    use std::sync::Arc;

    const T0: u64 = 1_800_000_000_000_000;

    fn key() -> Key {
        Key::new(vec![5; 32]).expect("key")
    }

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16))
    }

    fn daemon(id: u32, n: u32) -> Daemon {
        let map = Arc::new(ClusterMap {
            leaf_of: vec![0; n as usize],
            nic_gbps: vec![100.0; n as usize],
            uplink_gbps: vec![400.0],
        });
        let total = Demand { gpus: 4.0, cpus: 64.0, mem_gib: 256.0 };
        let config =
            Config { resend_us: Some(50_000), quiescence_us: 200_000, ..Config::new(BidPolicy::aware(Utility::Lgf)) };
        let neighbours = (0..n).filter(|&p| p != id).collect();
        let agent = Agent::new(id, neighbours, Resources::new(total), map, config);
        let peers = (0..n).map(|p| (p, addr(p))).collect();
        let capacity = Capacity { name: "test".into(), largest_gpus: 4.0, total_gpus: 4.0 * f64::from(n) };
        Daemon::new(agent, peers, key(), capacity)
    }

    fn job(id: u64, workers: u16) -> JobRequest {
        JobRequest {
            id,
            arch: Arch::Ring,
            workers,
            worker: Demand { gpus: 2.0, cpus: 1.0, mem_gib: 1.0 },
            server: Demand::default(),
            gbps: 1.0,
            peak_gbps: 1.0,
            runtime_s: 60.0,
            weight: 1.0,
        }
    }

    fn client(body: Body, at: u64) -> Vec<u8> {
        wire::seal(&key(), &Envelope { sender: CLIENT, sent_us: at, nonce: rand::random(), body })
    }

    /// Delivers datagrams between daemons (and from outside) until quiet,
    /// ticking every 10 ms of simulated time. Returns the receipts to the client.
    fn run(ds: &mut [Daemon], mut inbox: Vec<(SocketAddr, SocketAddr, Vec<u8>)>, ms: u64, t: &mut u64) -> Vec<Receipt> {
        let mut receipts = Vec::new();
        let end = *t + ms * 1000;
        while *t < end {
            let clock = Clock { mono_us: *t, wall_us: T0 + *t };
            let mut next = Vec::new();
            for (from, to, bytes) in inbox.drain(..) {
                let Some(d) = ds.iter_mut().find(|d| addr(d.agent().id()) == to) else { continue };
                let me = addr(d.agent().id());
                next.extend(d.on_datagram(clock, from, &bytes).datagrams.into_iter().map(|(to, b)| (me, to, b)));
            }
            for d in ds.iter_mut() {
                let me = addr(d.agent().id());
                next.extend(d.on_tick(clock).datagrams.into_iter().map(|(to, b)| (me, to, b)));
            }
            // Receipts reach the client (at address 99) at once.
            for (_, _, bytes) in next.iter().filter(|(_, to, _)| *to == addr(99)) {
                if let Ok(Envelope { body: Body::Receipt { outcome, .. }, .. }) = wire::open(&key(), bytes) {
                    receipts.push(outcome);
                }
            }
            inbox = next;
            *t += 10_000;
        }
        receipts
    }

    #[test]
    fn a_restarted_agent_without_its_state_learns_and_a_replayed_submit_cannot_split_the_decision() {
        let mut ds: Vec<Daemon> = (0..3).map(|i| daemon(i, 3)).collect();
        let mut t = 0;
        // Start-up: every daemon learns (nothing) from its peers.
        run(&mut ds, Vec::new(), 100, &mut t);
        assert!(ds.iter().all(|d| !d.is_learning()));
        // A 2-worker job of 2 GPUs each, submitted at agent 0.
        let submit = client(Body::Submit(job(7, 2)), T0 + t);
        let r = run(&mut ds, vec![(addr(99), addr(0), submit.clone())], 1000, &mut t);
        assert_eq!(r, vec![Receipt::Accepted]);
        let verdict = ds[0].agent().verdicts().get(&7).cloned().expect("decided");
        assert!(matches!(verdict, Verdict::Placed(_)));
        assert!(ds.iter().all(|d| d.agent().verdicts().get(&7) == Some(&verdict)));
        let free: Vec<f64> = ds.iter().map(|d| d.agent().committed_free().free.gpus).collect();
        // The recorded Submit replayed to the same agent: refused by the guard.
        let r = run(&mut ds, vec![(addr(99), addr(0), submit.clone())], 50, &mut t);
        assert!(r.is_empty());
        assert_eq!(ds[0].counters().replays, 1);
        // Agent 1 restarts with its state file deleted.
        ds[1] = daemon(1, 3);
        assert!(ds[1].is_learning());
        // The replay reaches it at once, before any peer answered: it is
        // neither auctioned nor accepted; the client is told to come back.
        let r = run(&mut ds, vec![(addr(99), addr(1), submit.clone())], 5, &mut t);
        assert_eq!(r, vec![Receipt::Busy]);
        assert!(!ds[1].agent().knows(7));
        // Once it has learnt, the same submission (re-sealed now, as a
        // replayer with the key could) gets the verdict, not an auction.
        run(&mut ds, Vec::new(), 1500, &mut t);
        assert!(!ds[1].is_learning());
        assert_eq!(ds[1].agent().verdicts().get(&7), Some(&verdict));
        let again = client(Body::Submit(job(7, 2)), T0 + t);
        let r = run(&mut ds, vec![(addr(99), addr(1), again)], 1000, &mut t);
        assert!(matches!(&r[..], [Receipt::Decided(s)] if s.contains("placed, running")), "{r:?}");
        assert_eq!(ds.iter().map(|d| d.agent().committed_free().free.gpus).collect::<Vec<_>>(), free);
        assert_eq!(ds[1].agent().open_auctions(), 0);
        // Finished, then submitted again: still one verdict, now "finished".
        let fin = client(Body::Finish(7), T0 + t);
        run(&mut ds, vec![(addr(99), addr(0), fin)], 200, &mut t);
        assert!(ds.iter().all(|d| d.agent().committed_free().free.gpus == 4.0));
        let again = client(Body::Submit(job(7, 2)), T0 + t);
        let r = run(&mut ds, vec![(addr(99), addr(2), again)], 200, &mut t);
        assert!(matches!(&r[..], [Receipt::Decided(s)] if s.contains("finished")), "{r:?}");
        assert!(ds.iter().all(|d| d.agent().committed_free().free.gpus == 4.0));
    }

    #[test]
    fn peers_speak_only_from_their_own_address_and_clients_only_submit_and_finish() {
        let mut d = daemon(0, 2);
        let clock = Clock { mono_us: 0, wall_us: T0 };
        let seal = |sender, body| wire::seal(&key(), &Envelope { sender, sent_us: T0, nonce: rand::random(), body });
        // A peer's id from another address; a client sending protocol traffic.
        let forged = seal(1, Body::SyncRequest);
        assert!(d.on_datagram(clock, addr(5), &forged).dropped.is_some());
        let from_client = seal(CLIENT, Body::SyncReply { verdicts: vec![], placed: vec![], last: true });
        assert!(d.on_datagram(clock, addr(99), &from_client).dropped.is_some());
        assert!(d.is_learning(), "a client cannot end the learning");
        // The real peer: answered once, not twice within a second.
        let req = seal(1, Body::SyncRequest);
        assert_eq!(d.on_datagram(clock, addr(1), &req).datagrams.len(), 1);
        let req = seal(1, Body::SyncRequest);
        assert!(d.on_datagram(clock, addr(1), &req).datagrams.is_empty());
        assert_eq!((d.counters().bad, d.counters().sync_throttled), (2, 1));
        // A peer whose clock is a minute behind: counted as stale, not as a replay.
        let old =
            wire::seal(&key(), &Envelope { sender: 1, sent_us: T0 - 60_000_000, nonce: 1, body: Body::SyncRequest });
        let why = d.on_datagram(clock, addr(1), &old).dropped.expect("refused");
        assert!(why.contains("-60000 ms"), "{why}");
        assert_eq!((d.counters().stale, d.counters().replays), (1, 0));
    }
}
