//! An in-process transport that drives many [`Agent`]s on a simulated clock:
//! per-message latency drawn uniformly (so messages reorder), loss,
//! duplication and a partition window, all from one seed. Events run in
//! time order from a binary heap, O(log E) each.

use crate::agent::{Agent, Msg, Output, Verdict};
use crate::utility::JobRequest;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// How the simulated network misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// One-way latency, drawn uniformly from `[lo, hi]` µs.
    pub latency_us: (u64, u64),
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Messages between the two sides are dropped in this window.
    pub partition: Option<Partition>,
    /// Seed.
    pub seed: u64,
}

impl NetConfig {
    /// A reliable network with 50-150 µs of latency (a datacentre RTT).
    pub fn reliable(seed: u64) -> Self {
        NetConfig { latency_us: (50, 150), loss: 0.0, duplicate: 0.0, partition: None, seed }
    }
}

/// A partition: nodes with `side[n]` cannot talk to the others in
/// `[from_us, until_us)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Start, µs.
    pub from_us: u64,
    /// End, µs.
    pub until_us: u64,
    /// Which side each node is on.
    pub side: Vec<bool>,
}

/// What one auction cost and how it ended, over all nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuctionReport {
    /// When it was submitted, µs.
    pub submitted_us: u64,
    /// Last bundle change at any node, µs after submission: consensus.
    pub consensus_us: u64,
    /// Longest causal chain of bundle changes (rounds).
    pub rounds: u32,
    /// Messages sent for it.
    pub messages: u64,
    /// Bytes sent for it (postcard encoding).
    pub bytes: u64,
    /// Largest message, bytes.
    pub max_message_bytes: usize,
    /// Each live node's verdict.
    pub verdicts: BTreeMap<u32, Verdict>,
}

impl AuctionReport {
    /// The verdict every node reached, if they all agree.
    pub fn agreed(&self) -> Option<&Verdict> {
        let mut it = self.verdicts.values();
        let first = it.next()?;
        it.all(|v| v == first).then_some(first)
    }
}

enum Event {
    Deliver { to: u32, msg: Msg },
    Tick { node: u32 },
}

/// Agents on a simulated network.
pub struct SimNet {
    agents: Vec<Agent>,
    alive: Vec<bool>,
    config: NetConfig,
    rng: ChaCha8Rng,
    now_us: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    tick_at: Vec<Option<u64>>,
    reports: BTreeMap<u64, AuctionReport>,
}

impl SimNet {
    /// Agents indexed by id (`agents[i].id() == i`).
    pub fn new(agents: Vec<Agent>, config: NetConfig) -> Self {
        let n = agents.len();
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        SimNet {
            agents,
            alive: vec![true; n],
            config,
            rng,
            now_us: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            tick_at: vec![None; n],
            reports: BTreeMap::new(),
        }
    }

    /// The agents.
    pub fn agents(&self) -> &[Agent] {
        &self.agents
    }

    /// Mutable access to one agent (to finish jobs, set usage).
    pub fn agent_mut(&mut self, id: u32) -> &mut Agent {
        &mut self.agents[id as usize]
    }

    /// Whether a node is up.
    pub fn is_alive(&self, id: u32) -> bool {
        self.alive[id as usize]
    }

    /// The simulated clock, µs.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Stops a node: it neither receives nor ticks from now on.
    pub fn kill(&mut self, id: u32) {
        self.alive[id as usize] = false;
    }

    /// Submits a job at a node now.
    pub fn submit(&mut self, at: u32, job: JobRequest) {
        let report = AuctionReport { submitted_us: self.now_us, ..AuctionReport::default() };
        self.reports.insert(job.id, report);
        let mut out = Vec::new();
        self.agents[at as usize].submit(self.now_us, job, &mut out);
        self.handle(at, out);
    }

    /// Tells every live node that a job finished.
    pub fn finish(&mut self, job: u64) {
        for (a, _) in self.agents.iter_mut().zip(&self.alive).filter(|(_, alive)| **alive) {
            a.finish(job);
        }
    }

    /// Runs events until `until_us` or until nothing is left to do.
    pub fn run_until(&mut self, until_us: u64) {
        while let Some(&Reverse((t, id))) = self.queue.peek() {
            if t > until_us {
                break;
            }
            self.queue.pop();
            self.now_us = self.now_us.max(t);
            let Some(ev) = self.events.remove(&id) else { continue };
            match ev {
                Event::Deliver { to, msg } => {
                    if !self.alive[to as usize] {
                        continue;
                    }
                    let mut out = Vec::new();
                    self.agents[to as usize].receive(self.now_us, msg, &mut out);
                    self.handle(to, out);
                }
                Event::Tick { node } => {
                    if self.tick_at[node as usize] == Some(t) {
                        self.tick_at[node as usize] = None;
                    }
                    if !self.alive[node as usize] {
                        continue;
                    }
                    let mut out = Vec::new();
                    self.agents[node as usize].tick(self.now_us, &mut out);
                    self.handle(node, out);
                }
            }
        }
        if until_us != u64::MAX {
            self.now_us = self.now_us.max(until_us);
        }
    }

    /// Runs until every auction has been decided everywhere; returns the
    /// reports of the auctions decided since the last call.
    pub fn settle(&mut self) -> Vec<(u64, AuctionReport)> {
        self.run_until(u64::MAX);
        let done: Vec<u64> = self.reports.keys().copied().collect();
        done.into_iter().filter_map(|j| self.reports.remove(&j).map(|r| (j, r))).collect()
    }

    fn push(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn handle(&mut self, from: u32, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => self.send(from, to, msg),
                Output::Decided { job, verdict, consensus_us, rounds } => {
                    let r = self.reports.entry(job).or_default();
                    r.consensus_us = r.consensus_us.max(consensus_us.saturating_sub(r.submitted_us));
                    r.rounds = r.rounds.max(rounds);
                    r.verdicts.insert(from, verdict);
                }
            }
        }
        if let Some(t) = self.agents[from as usize].next_deadline() {
            let t = t.max(self.now_us);
            if self.tick_at[from as usize].is_none_or(|s| t < s) {
                self.tick_at[from as usize] = Some(t);
                self.push(t, Event::Tick { node: from });
            }
        }
    }

    fn send(&mut self, from: u32, to: u32, msg: Msg) {
        if let Msg::Bundle { job, .. } = &msg {
            let size = msg.encode().len();
            let r = self.reports.entry(job.id).or_default();
            r.messages += 1;
            r.bytes += size as u64;
            r.max_message_bytes = r.max_message_bytes.max(size);
        }
        if let Some(p) = &self.config.partition {
            let cut = p.side.get(from as usize) != p.side.get(to as usize);
            if cut && (p.from_us..p.until_us).contains(&self.now_us) {
                return;
            }
        }
        if self.config.loss > 0.0 && self.rng.random_bool(self.config.loss.min(1.0)) {
            return;
        }
        let copies =
            if self.config.duplicate > 0.0 && self.rng.random_bool(self.config.duplicate.min(1.0)) { 2 } else { 1 };
        for _ in 0..copies {
            let (lo, hi) = self.config.latency_us;
            let delay = self.rng.random_range(lo..=hi.max(lo));
            self.push(self.now_us + delay, Event::Deliver { to, msg: msg.clone() });
        }
    }
}

/// A connected overlay of `n` agents: a ring plus random chords until each
/// node has about `degree` neighbours (symmetric, no self-loops). Seeded.
pub fn overlay(n: usize, degree: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut adj: Vec<std::collections::BTreeSet<u32>> = vec![std::collections::BTreeSet::new(); n];
    if n < 2 {
        return vec![Vec::new(); n];
    }
    for i in 0..n {
        let j = (i + 1) % n;
        if i != j {
            adj[i].insert(j as u32);
            adj[j].insert(i as u32);
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let want = degree.min(n - 1);
    for i in 0..n {
        let mut tries = 0;
        while adj[i].len() < want && tries < 4 * n {
            tries += 1;
            let j = rng.random_range(0..n);
            if j != i && adj[j].len() < want + 1 {
                adj[i].insert(j as u32);
                adj[j].insert(i as u32);
            }
        }
    }
    adj.into_iter().map(|s| s.into_iter().collect()).collect()
}

/// Diameter of an overlay by a breadth-first search from every node,
/// O(N·(N + E)); `None` if it is not connected.
pub fn diameter(adj: &[Vec<u32>]) -> Option<usize> {
    let n = adj.len();
    let mut worst = 0;
    let mut dist = vec![usize::MAX; n];
    let mut queue = std::collections::VecDeque::new();
    for s in 0..n {
        dist.iter_mut().for_each(|d| *d = usize::MAX);
        dist[s] = 0;
        queue.push_back(s);
        while let Some(u) = queue.pop_front() {
            for &v in &adj[u] {
                let v = v as usize;
                if dist[v] == usize::MAX {
                    dist[v] = dist[u] + 1;
                    queue.push_back(v);
                }
            }
        }
        worst = worst.max(*dist.iter().max()?);
        if worst == usize::MAX {
            return None;
        }
    }
    Some(worst)
}
