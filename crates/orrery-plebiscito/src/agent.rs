//! One node's Plebiscito agent as a sans-IO state machine (Algorithm 1): time
//! and messages go in, messages and decisions come out. No sockets, no clock.
//!
//! - **Bidding** (a job is submitted here or first heard of): the node offers
//!   one bid per component it can host ([`slot_values`]) and holds the
//!   resources of the offers.
//! - **Agreement** (a bundle arrives): bundles merge ([`Bundle::merge`]);
//!   offers pushed out of the best `k` release their resources; a changed
//!   bundle is broadcast to the overlay neighbours.
//! - **Quiescence** (no change for `quiescence_us`): the node decides. If
//!   every component has a winner and the whole placement fits the links
//!   (constraint 4), it commits its own components (gang: all or nothing);
//!   otherwise it releases them. Every connected node decides the same.
//! - **Hard time-out** (`hard_timeout_us` after the auction began without
//!   quiescence): abort and purge.
//! - **Re-bidding**: when resources this node held come free (its offers in
//!   one auction are outbid, an auction ends, a placed job finishes), it bids
//!   them in the other open auctions. Bidding only when it first hears of a
//!   job would starve concurrent auctions: each node's resources go to the
//!   first jobs it hears of, and when those are placed elsewhere the later
//!   jobs never see them. Re-bids only add offers, merge like any bid and
//!   lose ties to earlier ones (see [`Bid::rank`]), so consensus is kept and
//!   each bundle still changes finitely often.

use crate::bundle::{Bid, Bundle};
use crate::utility::{
    BidPolicy, ClusterMap, Demand, JobRequest, NodeContext, Placement, Resources, Usage, link_load, slot_values,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Protocol settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// How bids are valued.
    pub policy: BidPolicy,
    /// No change for this long means consensus, µs (paper: 500 ms).
    pub quiescence_us: u64,
    /// An auction still changing this long after it began is aborted, µs (paper: 1 s).
    pub hard_timeout_us: u64,
    /// Re-send an open auction's bundle this often, µs, so that lost
    /// datagrams are repaired (`None`: only on change, for reliable links).
    pub resend_us: Option<u64>,
}

impl Config {
    /// The paper's time-outs (500 ms, 1 s), no re-sending.
    pub fn new(policy: BidPolicy) -> Self {
        Config { policy, quiescence_us: 500_000, hard_timeout_us: 1_000_000, resend_us: None }
    }
}

/// A protocol message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    /// The sender's bundle for a job (one per role), with the job itself so
    /// that a node hearing of it first can bid.
    Bundle {
        /// The job.
        job: JobRequest,
        /// Best bids per role.
        bids: Vec<Vec<Bid>>,
        /// Length of the causal chain of changes behind this bundle (rounds).
        depth: u32,
    },
    /// A placed job finished: return its resources and bandwidth.
    Finished {
        /// Job id.
        job: u64,
    },
}

impl Msg {
    /// Encodes with postcard.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes a datagram.
    pub fn decode(bytes: &[u8]) -> Result<Msg, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

/// What an agent asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send a message to a neighbour.
    Send {
        /// Destination node.
        to: u32,
        /// Message.
        msg: Msg,
    },
    /// An auction ended here.
    Decided {
        /// Job id.
        job: u64,
        /// Result.
        verdict: Verdict,
        /// When the bundle last changed here, µs.
        consensus_us: u64,
        /// Longest causal chain of changes that reached this node.
        rounds: u32,
    },
}

/// A job placed and running, with its placement.
pub type PlacedJob = (JobRequest, Placement);

/// How an auction ended at one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    /// All components won and the links fit: per role, `(node, count)`.
    Placed(Placement),
    /// Not enough offers, or the placement does not fit the links.
    Failed(String),
    /// Hard time-out before quiescence.
    Aborted,
}

#[derive(Debug, Clone)]
struct Auction {
    job: JobRequest,
    bundles: Vec<Bundle>,
    started_us: u64,
    last_change_us: u64,
    last_send_us: u64,
    depth: u32,
    /// Demand of this node's offers still among the best.
    held: Demand,
}

/// A saved state that does not fit this agent (see [`Agent::restore`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job}: {problem}")]
pub struct BadState {
    /// The job at fault (0 when the sum of all is).
    pub job: u64,
    /// What is wrong.
    pub problem: &'static str,
}

/// A node's agent.
#[derive(Debug, Clone)]
pub struct Agent {
    id: u32,
    neighbours: Vec<u32>,
    config: Config,
    map: Arc<ClusterMap>,
    usage: Usage,
    /// Free resources net of committed jobs (not of open auctions).
    resources: Resources,
    open: BTreeMap<u64, Auction>,
    decided: HashMap<u64, Verdict>,
    /// Jobs placed and not finished: id → (request, placement).
    placed: BTreeMap<u64, (JobRequest, Placement)>,
    /// Resources came free outside an auction (a finish) since the last
    /// re-bid: the next tick offers them to the open auctions.
    released: bool,
}

impl Agent {
    /// An agent for node `id` with its overlay neighbours, resources and the network.
    pub fn new(id: u32, neighbours: Vec<u32>, resources: Resources, map: Arc<ClusterMap>, config: Config) -> Self {
        let usage = Usage::empty(&map);
        Agent {
            id,
            neighbours,
            config,
            map,
            usage,
            resources,
            open: BTreeMap::new(),
            decided: HashMap::new(),
            placed: BTreeMap::new(),
            released: false,
        }
    }

    /// Node id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Free resources net of committed jobs and of offers in open auctions.
    pub fn free(&self) -> Resources {
        let mut r = self.resources;
        for a in self.open.values() {
            r.take(&a.held, 1.0);
        }
        r
    }

    /// Resources net of committed jobs only.
    pub fn committed_free(&self) -> Resources {
        self.resources
    }

    /// The reserved bandwidth this agent believes in.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Verdicts so far, by job.
    pub fn verdicts(&self) -> &HashMap<u64, Verdict> {
        &self.decided
    }

    /// Jobs placed and running, with their placements.
    pub fn placed(&self) -> &BTreeMap<u64, (JobRequest, Placement)> {
        &self.placed
    }

    /// Auctions open here.
    pub fn open_auctions(&self) -> usize {
        self.open.len()
    }

    /// Whether this agent has heard of the job (open or decided).
    pub fn knows(&self, job: u64) -> bool {
        self.open.contains_key(&job) || self.decided.contains_key(&job)
    }

    /// Whether any auction is open here.
    pub fn is_idle(&self) -> bool {
        self.open.is_empty()
    }

    /// Sets the reserved bandwidth (an agent joining a running cluster).
    pub fn set_usage(&mut self, usage: Usage) {
        self.usage = usage;
    }

    /// The earliest time the agent needs a [`Agent::tick`], µs.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.released && !self.open.is_empty() {
            return Some(0);
        }
        self.open
            .values()
            .map(|a| {
                let mut t =
                    (a.last_change_us + self.config.quiescence_us).min(a.started_us + self.config.hard_timeout_us);
                if let Some(r) = self.config.resend_us {
                    t = t.min(a.last_send_us + r);
                }
                t
            })
            .min()
    }

    /// A job submitted at this node: it bids and tells its neighbours.
    pub fn submit(&mut self, now_us: u64, job: JobRequest, out: &mut Vec<Output>) {
        if job.check().is_err() {
            return;
        }
        let empty: Vec<Vec<Bid>> = job.roles().iter().map(|_| Vec::new()).collect();
        self.on_bundle(now_us, job, &empty, 0, out);
    }

    /// A message from a neighbour.
    pub fn receive(&mut self, now_us: u64, msg: Msg, out: &mut Vec<Output>) {
        match msg {
            Msg::Bundle { job, bids, depth } => self.on_bundle(now_us, job, &bids, depth, out),
            Msg::Finished { job } => self.finish(job),
        }
    }

    /// A message from node `from` over an untrusted transport, after its
    /// sender was authenticated: a job that fails [`JobRequest::check`] is
    /// ignored, and only bids of `from` itself, for a node of the map and a
    /// slot of the role, are merged. Other nodes' bids reach this node from
    /// those nodes (the daemon's overlay is a full mesh), so consensus is
    /// unchanged: an offer among the best `k` anywhere is among the best `k`
    /// in its own node's bundle. Returns how many of the sender's own bids
    /// were refused (a slot outside the role, a node outside the map, a
    /// value that is not finite); relayed bids are dropped without counting.
    pub fn receive_from(&mut self, now_us: u64, from: u32, msg: Msg, out: &mut Vec<Output>) -> usize {
        match msg {
            Msg::Bundle { job, bids, depth } => {
                if job.check().is_err() || bids.len() != job.roles().len() {
                    return bids.iter().flatten().filter(|b| b.node == from).count();
                }
                let nodes = self.map.leaf_of.len();
                let mut refused = 0;
                let kept: Vec<Vec<Bid>> = bids
                    .into_iter()
                    .zip(job.roles())
                    .map(|(role, count)| {
                        let own: Vec<Bid> = role.into_iter().filter(|b| b.node == from).collect();
                        let before = own.len();
                        let kept: Vec<Bid> = own
                            .into_iter()
                            .filter(|b| (b.node as usize) < nodes && usize::from(b.slot) < count && b.value.is_finite())
                            .collect();
                        refused += before - kept.len();
                        kept
                    })
                    .collect();
                self.on_bundle(now_us, job, &kept, depth, out);
                refused
            }
            Msg::Finished { job } => {
                self.finish(job);
                0
            }
        }
    }

    /// Restores what a previous run of this agent committed: its verdicts and
    /// the jobs placed and not finished. Resources and reserved bandwidth are
    /// recomputed from the placements, not read back, so they cannot drift.
    ///
    /// A state that does not fit this agent's cluster is refused whole, and
    /// nothing of it is applied: a job that fails [`JobRequest::check`], a
    /// placement naming a node outside the map or not placing exactly the
    /// job's components (see [`Agent::fits_map`]), or placements that take
    /// more than this node has (a file from another topology, or edited).
    pub fn restore(
        &mut self,
        verdicts: impl IntoIterator<Item = (u64, Verdict)>,
        placed: Vec<(JobRequest, Placement)>,
    ) -> Result<(), BadState> {
        let verdicts: Vec<(u64, Verdict)> = verdicts.into_iter().collect();
        for (job, v) in &verdicts {
            if let Verdict::Placed(p) = v
                && !self.fits_map(p)
            {
                return Err(BadState { job: *job, problem: "its verdict places it on nodes outside the cluster" });
            }
        }
        let mut trial = self.resources;
        let mut seen = std::collections::BTreeSet::new();
        for (job, placement) in &placed {
            if job.check().is_err() {
                return Err(BadState { job: job.id, problem: "the job's own fields are invalid" });
            }
            if !self.places_exactly(job, placement) {
                return Err(BadState {
                    job: job.id,
                    problem: "its placement names a node outside the cluster or not exactly its components",
                });
            }
            if seen.insert(job.id) {
                for (role, nodes) in placement.iter().enumerate() {
                    if let Some(&(_, k)) = nodes.iter().find(|&&(n, _)| n == self.id) {
                        trial.take(&job.demand(role), k as f64);
                    }
                }
            }
        }
        if [trial.free.gpus, trial.free.cpus, trial.free.mem_gib].iter().any(|&f| f < -1e-9) {
            return Err(BadState {
                job: 0,
                problem: "the placements take more GPUs, CPUs or memory than this node has",
            });
        }
        self.decided.extend(verdicts);
        for (job, placement) in placed {
            if self.placed.contains_key(&job.id) {
                continue;
            }
            self.apply(&job, &placement, 1.0);
            self.placed.insert(job.id, (job, placement));
        }
        Ok(())
    }

    /// Whether every node a placement names is in this agent's map. O(nodes named).
    pub fn fits_map(&self, placement: &Placement) -> bool {
        let nodes = self.map.leaf_of.len();
        placement.iter().flatten().all(|&(n, _)| (n as usize) < nodes)
    }

    /// Whether a placement names only nodes of the map, one entry per role,
    /// and exactly the job's components in each role (counts summed without
    /// overflow). What a peer or a state file says is held to this before it
    /// is applied. O(nodes named).
    pub fn places_exactly(&self, job: &JobRequest, placement: &Placement) -> bool {
        let roles = job.roles();
        placement.len() == roles.len()
            && self.fits_map(placement)
            && placement
                .iter()
                .zip(&roles)
                .all(|(nodes, &count)| nodes.iter().try_fold(0usize, |sum, &(_, k)| sum.checked_add(k)) == Some(count))
    }

    /// Learns from a peer what was decided while this agent was away: the
    /// verdicts of jobs it has not heard of, and the placements among them
    /// still running, which it commits (its own components included). A
    /// placement that would take more than this node has left is not
    /// committed. Returns the jobs learnt.
    pub fn learn(&mut self, verdicts: Vec<(u64, Verdict)>, placed: Vec<PlacedJob>) -> usize {
        let mut learnt = 0;
        let mut new_jobs = std::collections::BTreeSet::new();
        for (job, verdict) in verdicts {
            // A verdict naming nodes outside the map is a peer's error or lie.
            if matches!(&verdict, Verdict::Placed(p) if !self.fits_map(p)) {
                continue;
            }
            if !self.knows(job) {
                self.decided.insert(job, verdict);
                new_jobs.insert(job);
                learnt += 1;
            }
        }
        for (job, placement) in placed {
            let agreed = matches!(self.decided.get(&job.id), Some(Verdict::Placed(p)) if *p == placement);
            if !agreed
                || !new_jobs.contains(&job.id)
                || job.check().is_err()
                || self.placed.contains_key(&job.id)
                || !self.places_exactly(&job, &placement)
            {
                continue;
            }
            if !self.can_hold(&job, &placement) {
                continue;
            }
            self.apply(&job, &placement, 1.0);
            self.placed.insert(job.id, (job, placement));
        }
        learnt
    }

    /// What this agent would tell a restarted peer: every verdict and the
    /// placements still running.
    pub fn decided_and_placed(&self) -> (Vec<(u64, Verdict)>, Vec<PlacedJob>) {
        let mut verdicts: Vec<(u64, Verdict)> = self.decided.iter().map(|(k, v)| (*k, v.clone())).collect();
        verdicts.sort_by_key(|v| v.0);
        (verdicts, self.placed.values().cloned().collect())
    }

    /// A client says a placed job finished here: give back its resources and
    /// bandwidth, and tell the neighbours, so every agent frees it alike.
    pub fn finish_and_tell(&mut self, job: u64, out: &mut Vec<Output>) {
        if self.placed.contains_key(&job) {
            self.finish(job);
            self.broadcast(&Msg::Finished { job }, out);
        }
    }

    /// A placed job finished: give back its resources and bandwidth.
    pub fn finish(&mut self, job: u64) {
        if let Some((req, placement)) = self.placed.remove(&job) {
            self.apply(&req, &placement, -1.0);
            self.released = true;
        }
    }

    /// Time passes: decide quiescent auctions, abort stale ones, re-send.
    pub fn tick(&mut self, now_us: u64, out: &mut Vec<Output>) {
        let ids: Vec<u64> = self.open.keys().copied().collect();
        for id in ids {
            let Some(a) = self.open.get(&id) else { continue };
            if now_us >= a.last_change_us + self.config.quiescence_us {
                let a = self.open.remove(&id).expect("auction present");
                let verdict = self.conclude(&a);
                self.released |=
                    !matches!(verdict, Verdict::Placed(_)) && a.held.gpus + a.held.cpus + a.held.mem_gib > 0.0;
                self.decided.insert(id, verdict.clone());
                out.push(Output::Decided { job: id, verdict, consensus_us: a.last_change_us, rounds: a.depth });
            } else if now_us >= a.started_us + self.config.hard_timeout_us {
                let (consensus_us, rounds) = (a.last_change_us, a.depth);
                self.released |= a.held.gpus + a.held.cpus + a.held.mem_gib > 0.0;
                self.open.remove(&id);
                self.decided.insert(id, Verdict::Aborted);
                out.push(Output::Decided { job: id, verdict: Verdict::Aborted, consensus_us, rounds });
            } else if self.config.resend_us.is_some_and(|r| now_us >= a.last_send_us + r) {
                let msg = Msg::Bundle { job: a.job.clone(), bids: bids_of(a), depth: a.depth };
                self.broadcast(&msg, out);
                if let Some(a) = self.open.get_mut(&id) {
                    a.last_send_us = now_us;
                }
            }
        }
        if std::mem::take(&mut self.released) {
            self.rebid(now_us, None, out);
        }
    }

    /// Offers what is not held by other auctions to each open auction but
    /// `except`: fresh bids merge into its bundles; a changed bundle is
    /// broadcast. O(A · (A + components)) for A open auctions (each asks
    /// [`Agent::free`], O(A)); A is bounded by the driver (64 in `orrery agent`).
    fn rebid(&mut self, now_us: u64, except: Option<u64>, out: &mut Vec<Output>) {
        let ids: Vec<u64> = self.open.keys().copied().filter(|&id| Some(id) != except).collect();
        for id in ids {
            let Some(a) = self.open.get(&id) else { continue };
            let mut res = self.free();
            res.take(&a.held, -1.0);
            let offers = self.offers(now_us, &a.job, res);
            let me = self.id;
            let Some(a) = self.open.get_mut(&id) else { continue };
            let mut changed = false;
            for (bundle, o) in a.bundles.iter_mut().zip(&offers) {
                changed |= bundle.merge(o);
            }
            if !changed {
                continue;
            }
            a.held = held_demand(&a.job, &a.bundles, me);
            a.last_change_us = now_us;
            a.last_send_us = now_us;
            a.depth += 1;
            let msg = Msg::Bundle { job: a.job.clone(), bids: bids_of(a), depth: a.depth };
            self.broadcast(&msg, out);
        }
    }

    fn on_bundle(&mut self, now_us: u64, job: JobRequest, bids: &[Vec<Bid>], depth: u32, out: &mut Vec<Output>) {
        if self.decided.contains_key(&job.id) || bids.len() != job.roles().len() {
            return;
        }
        let mut changed = false;
        if !self.open.contains_key(&job.id) {
            let auction = self.bid(now_us, &job);
            self.open.insert(job.id, auction);
            changed = true;
        }
        let me = self.id;
        let a = self.open.get_mut(&job.id).expect("auction just ensured");
        for (bundle, incoming) in a.bundles.iter_mut().zip(bids) {
            changed |= bundle.merge(incoming);
        }
        if !changed {
            return;
        }
        // Release what was outbid (Algorithm 1, line 18).
        let before = a.held;
        a.held = held_demand(&a.job, &a.bundles, me);
        let released = a.held.gpus < before.gpus || a.held.cpus < before.cpus || a.held.mem_gib < before.mem_gib;
        a.last_change_us = now_us;
        a.last_send_us = now_us;
        a.depth = a.depth.max(depth + 1);
        let msg = Msg::Bundle { job: a.job.clone(), bids: bids_of(a), depth: a.depth };
        self.broadcast(&msg, out);
        if released {
            self.rebid(now_us, Some(job.id), out);
        }
    }

    /// The bidding event: offers for every role, against the resources not
    /// held elsewhere.
    fn bid(&self, now_us: u64, job: &JobRequest) -> Auction {
        let offers = self.offers(now_us, job, self.free());
        let mut bundles: Vec<Bundle> = job.roles().into_iter().map(Bundle::new).collect();
        for (b, o) in bundles.iter_mut().zip(&offers) {
            b.merge(o);
        }
        let held = held_demand(job, &bundles, self.id);
        Auction {
            job: job.clone(),
            bundles,
            started_us: now_us,
            last_change_us: now_us,
            last_send_us: now_us,
            depth: 0,
            held,
        }
    }

    /// This node's offers for every role of a job out of `res`, per role.
    fn offers(&self, now_us: u64, job: &JobRequest, mut res: Resources) -> Vec<Vec<Bid>> {
        let mut offers = Vec::new();
        for role in 0..job.roles().len() {
            let ctx = NodeContext { node: self.id, resources: res, map: &self.map, usage: &self.usage };
            let (values, left) = slot_values(&ctx, job, role, &self.config.policy);
            res = left;
            offers.push(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(slot, value)| Bid { value, node: self.id, stamp: now_us, slot: slot as u16 })
                    .collect(),
            );
        }
        offers
    }

    fn conclude(&mut self, a: &Auction) -> Verdict {
        if let Some(role) = a.bundles.iter().position(|b| !b.is_full()) {
            let b = &a.bundles[role];
            return Verdict::Failed(format!("{} of {} components had a bidder", b.bids().len(), b.capacity()));
        }
        let placement: Placement = a
            .bundles
            .iter()
            .map(|b| {
                let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
                for bid in b.bids() {
                    *counts.entry(bid.node).or_default() += 1;
                }
                counts.into_iter().collect()
            })
            .collect();
        let load = link_load(&self.map, &a.job, &placement);
        if !self.usage.fits(&self.map, &load) {
            return Verdict::Failed("the placement's traffic does not fit the links".into());
        }
        // Last line of defence: this node never commits beyond what it has,
        // whatever the bundles say (honest peers never ask it to).
        if !self.can_hold(&a.job, &placement) {
            return Verdict::Failed(format!("node {} cannot hold its components", self.id));
        }
        self.apply(&a.job, &placement, 1.0);
        self.placed.insert(a.job.id, (a.job.clone(), placement.clone()));
        Verdict::Placed(placement)
    }

    /// Whether this node's committed resources can hold its components of
    /// `placement` (conclusions and placements learnt from peers both ask).
    fn can_hold(&self, job: &JobRequest, placement: &Placement) -> bool {
        let mut mine = self.resources;
        for (role, nodes) in placement.iter().enumerate() {
            if let Some(&(_, k)) = nodes.iter().find(|&&(n, _)| n == self.id) {
                mine.take(&job.demand(role), k as f64);
            }
        }
        [mine.free.gpus, mine.free.cpus, mine.free.mem_gib].iter().all(|&f| f >= -1e-9)
    }

    /// Commits (`sign = 1`) or returns (`−1`) a placement: this node's
    /// components and everyone's traffic.
    fn apply(&mut self, job: &JobRequest, placement: &Placement, sign: f64) {
        // O(roles · nodes named), whatever the counts say.
        for (role, nodes) in placement.iter().enumerate() {
            if let Some(&(_, k)) = nodes.iter().find(|&&(n, _)| n == self.id) {
                self.resources.take(&job.demand(role), sign * k as f64);
            }
        }
        let load = link_load(&self.map, job, placement);
        self.usage.apply(&load, sign);
    }

    fn broadcast(&self, msg: &Msg, out: &mut Vec<Output>) {
        for &to in &self.neighbours {
            out.push(Output::Send { to, msg: msg.clone() });
        }
    }
}

fn bids_of(a: &Auction) -> Vec<Vec<Bid>> {
    a.bundles.iter().map(|b| b.bids().to_vec()).collect()
}

/// Demand of the components `node` wins in these bundles.
fn held_demand(job: &JobRequest, bundles: &[Bundle], node: u32) -> Demand {
    let mut d = Demand::default();
    for (role, b) in bundles.iter().enumerate() {
        let k = b.held_by(node) as f64;
        let r = job.demand(role);
        d.gpus += k * r.gpus;
        d.cpus += k * r.cpus;
        d.mem_gib += k * r.mem_gib;
    }
    d
}
