//! Transport models (issue 68, item 1): what TCP or RDMA congestion control
//! makes of the flows, in place of the max-min fluid rates.
//!
//! The max-min model gives every flow its fair share the instant anything
//! changes. A real transport does not: two reno flows over a tail-drop queue
//! lose packets at random and take unequal shares for a while; bbr paces each
//! flow at its own bandwidth estimate; DCQCN cuts a rate when its packets
//! are marked. Those differences decide whether two rings started together
//! stay in step (and CASSINI's shift pays) or drift apart by themselves.
//!
//! The model is flow-level at round-trip granularity, the standard fluid
//! picture of each protocol stepped every `step_us`:
//!
//! * a **connection** per (owner, first link, last link): a job's ring edge
//!   keeps its window across iterations as a TCP connection does, halved per
//!   retransmission timeout of idleness (Linux's `tcp_cwnd_restart`, RFC
//!   2861);
//! * a **queue** per link (tail-drop: one FIFO of `buffer_ms` of the link's
//!   rate, served in the order it fills, so each flow is served in
//!   proportion to what it has queued and sends; fair: one FIFO of
//!   `buffer_ms` per flow, the link shared max-min between the backlogged
//!   ones, as the testbed's `--fabric fair` and DCQCN's fair convergence
//!   share it; priority: one FIFO of `buffer_ms` per traffic class, each
//!   class served, as a FIFO, from what the higher ones leave, as a
//!   switch's strict-priority queues and the testbed's `--fabric
//!   priority`). A window-based sender hands its window to its NIC, whose
//!   link's queue holds what the line cannot take;
//! * **drops** when a queue overflows: a full FIFO cuts one sender's burst
//!   (the overflow falls on one flow, drawn in proportion to what each
//!   sends, until `burst_bytes` have gone), a flow's own FIFO only its own
//!   traffic (fair), a class's FIFO only that class's flows (priority). A drop is a loss for the flow, and its bits must be
//!   sent again; a loss that takes all it had in flight times it out;
//! * **ECN marks** (DCQCN) with RED's probability between `Kmin` and `Kmax`
//!   of queue (DCQCN §5's 5 KB and 200 KB at 40 Gbit/s, as times of the
//!   link rate);
//! * each protocol's **control law** over the step, driven by what the flow
//!   delivered (its acks):
//!   - reno: slow start to the first loss, then one MSS per round trip,
//!     halved once per round trip with losses (RFC 5681);
//!   - cubic: W(t) = C (t − K)³ + W_max with C = 0.4 and β = 0.7, never
//!     below its reno-friendly estimate (RFC 8312 §4.1–4.3);
//!   - bbr (v1): startup at gain 2/ln 2 until the bandwidth stops growing
//!     by 25% for three rounds, a drain round, then the 8-phase gain cycle
//!     (1.25, 0.75, 1 × 6) from a random phase, pacing at gain × the
//!     10-round maximum delivery rate (Cardwell et al., ACM Queue 2016).
//!     The window is Linux's (`tcp_bbr.c`): cwnd_gain × BDP plus three TSO
//!     bursts (`bbr_quantization_budget`), grown by what is acked toward
//!     it, four segments in ProbeRTT, kept across idleness; the minimum
//!     round trip is replaced only by a lower sample or after 10 s, when
//!     the flow enters ProbeRTT unless it is on an idle restart's first
//!     acks. Losses do not cut it; a paced flow's loss episode is one round
//!     trip's drops;
//!   - dcqcn: a rate that starts at line rate, is cut by α/2 per
//!     congestion notification (at most one per 50 µs), and recovers every
//!     55 µs without one: five halvings of the gap to the target, then
//!     additive and hyper increase (Zhu et al., SIGCOMM'15, §3–5);
//!   - mltcp-reno: reno whose additive increase is scaled by F(r) = 2r,
//!     r the share of the flow's bytes already sent this iteration (MLTCP's
//!     principle, Rajasekaran et al. 2024: a job further into its
//!     all-reduce is more aggressive, so competing jobs slide apart; the
//!     paper's own F was not available here; 2r keeps reno's mean
//!     increase).
//!
//! A flow's delivery rate over a step is the least its links serve it; a
//! link serves what arrives (plus its queue) up to its capacity, shared as
//! its queueing shares it. Arrivals at a link are what the flows send, not
//! what upstream links let through (one congested hop per path, as in the
//! papers' shapes, is exact; more is an approximation).
//!
//! Cost per step: O(F · d + L) for F live flows on paths of d links over L
//! links in use, plus O(n log n) per fair link of n flows.

use crate::network::{FlowId, Network};
use orrery_model::LinkId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

mod control;
use control::{bbr_pacing_gain, btl_bw};

/// A congestion control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// TCP Reno (AIMD).
    Reno,
    /// TCP Cubic.
    Cubic,
    /// TCP BBR, version 1.
    Bbr,
    /// RDMA's DCQCN (ECN-driven rate control).
    Dcqcn,
    /// Reno with MLTCP's iteration-aware additive increase.
    MltcpReno,
}

impl Control {
    /// Every control, by its name in experiments.
    pub const ALL: [(&'static str, Control); 5] = [
        ("reno", Control::Reno),
        ("cubic", Control::Cubic),
        ("bbr", Control::Bbr),
        ("dcqcn", Control::Dcqcn),
        ("mltcp-reno", Control::MltcpReno),
    ];
}

/// How a link's queue is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Queueing {
    /// One FIFO per link, dropping at its tail.
    #[default]
    TailDrop,
    /// A FIFO per flow, served in turn (per-flow fair queueing).
    Fair,
    /// A FIFO per traffic class (a flow's `priority`, 0–7; its owner's
    /// [`Network::set_priority`]), each of `buffer_ms`, dropping at its
    /// tail and served by strict priority: a class gets what the higher
    /// ones leave (a switch's priority queues; the testbed's `--fabric
    /// priority`, Crux's).
    Priority,
}

/// Traffic classes under [`Queueing::Priority`].
pub const CLASSES: usize = 8;

/// A transport model's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransportConfig {
    /// The congestion control of every flow.
    pub control: Control,
    /// How each link's queue is shared.
    pub queueing: Queueing,
    /// Round-trip time with empty queues, µs.
    pub base_rtt_us: f64,
    /// Each queue (per link, or per flow under fair queueing), in ms of the
    /// link's rate.
    pub buffer_ms: f64,
    /// Segment size, bytes: the unit of windows and increases.
    pub mss_bytes: f64,
    /// What a full FIFO drops at once, bytes: the tail of one sender's
    /// burst (a segment by default; Linux sends TSO/GSO bursts of up to
    /// 64 KB, and a burst arriving at a full queue loses its tail, so the
    /// drops of a congestion episode fall on one flow, RFC 2309's lock-out).
    pub burst_bytes: f64,
    /// Time step, µs (default: the base round trip).
    pub step_us: f64,
    /// Retransmission timeout, ms: an idle connection's window halves per
    /// timeout elapsed (Linux's minimum RTO is 200 ms).
    pub rto_ms: f64,
}

impl TransportConfig {
    /// A control over tail-drop queues with datacenter defaults: 10 µs
    /// round trip, 1 ms buffers, 1,500-byte segments.
    pub fn new(control: Control) -> Self {
        TransportConfig {
            control,
            queueing: Queueing::TailDrop,
            base_rtt_us: 10.0,
            buffer_ms: 1.0,
            mss_bytes: 1500.0,
            burst_bytes: 1500.0,
            step_us: 10.0,
            rto_ms: 200.0,
        }
    }

    /// The step, ns.
    pub fn step_ns(&self) -> u64 {
        (self.step_us * 1e3).round().max(1.0) as u64
    }
}

/// Reno's and cubic's initial window, segments (RFC 6928).
const INITIAL_WINDOW: f64 = 10.0;
/// Cubic's constants (RFC 8312 §5).
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;
/// BBR's startup gain, 2/ln 2, and its probing cycle.
const BBR_HIGH_GAIN: f64 = 2.885;
const BBR_CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// A GSO burst's most, in segments: 64 KB less headers over 1,448 bytes.
const GSO_MAX_SEGMENTS: f64 = 45.0;
/// Rounds over which BBR keeps its maximum delivery rate.
const BBR_BW_ROUNDS: usize = 10;
/// DCQCN (§5): g, the rate timer, the CNP interval, the fast-recovery stages.
const DCQCN_G: f64 = 1.0 / 256.0;
const DCQCN_TIMER_NS: u64 = 55_000;
const DCQCN_CNP_NS: u64 = 50_000;
const DCQCN_FAST_STAGES: u32 = 5;
/// DCQCN's additive increase, 40 Mbit/s at 40 Gbit/s, as a share of line rate.
const DCQCN_AI: f64 = 0.001;
/// Marking thresholds, 5 KB and 200 KB at 40 Gbit/s, in ns of the link rate.
const ECN_KMIN_NS: f64 = 1_000.0;
const ECN_KMAX_NS: f64 = 40_000.0;
const ECN_PMAX: f64 = 0.01;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BbrState {
    Startup,
    Drain,
    ProbeBw,
    /// Four segments in flight for 200 ms, to see the round trip without
    /// its own queue (every 10 s without a new minimum).
    ProbeRtt,
}

/// BBR's round-trip filter window and PROBE_RTT's length, ns.
const BBR_MIN_RTT_WINDOW_NS: u64 = 10_000_000_000;
const BBR_PROBE_RTT_NS: u64 = 200_000_000;

/// One connection's congestion state.
#[derive(Debug, Clone)]
struct Conn {
    /// The flow it carries now (slot and serial), if any.
    flow: Option<(FlowId, u64)>,
    /// Window, bits (reno, cubic; BBR's cap).
    window: f64,
    ssthresh: f64,
    /// When the window was last cut, ns.
    cut_ns: u64,
    /// Cubic: window before the last cut, bits, its epoch, and the
    /// reno-friendly estimate, bits.
    w_max: f64,
    epoch_ns: u64,
    w_est: f64,
    /// BBR.
    state: BbrState,
    bw_rounds: [f64; BBR_BW_ROUNDS],
    round: usize,
    round_start_ns: u64,
    round_bits: f64,
    full_bw: f64,
    full_bw_rounds: u32,
    phase: usize,
    phase_start_ns: u64,
    /// The least round trip seen (from its first sample: a flow that
    /// starts behind another's queue takes that queue for the path's, BBR
    /// v1's known overestimate) and when it was seen, ns.
    min_rtt_ns: f64,
    min_rtt_stamp_ns: u64,
    probe_rtt_until_ns: u64,
    /// DCQCN: line, current and target rates, Gbit/s, α, timers and stage.
    line: f64,
    rate: f64,
    target: f64,
    alpha: f64,
    cnp_ns: u64,
    timer_ns: u64,
    stage: u32,
    /// Sending and delivery rates over the current step, Gbit/s.
    send: f64,
    delivered: f64,
    /// Round trip over the current step, ns.
    rtt_ns: f64,
    /// Per hop of its path: its bits in the hop's queue (its own FIFO
    /// under fair queueing) and what the hop serves it, Gbit/s.
    hop_queue: Vec<f64>,
    hop_served: Vec<f64>,
    /// A drop or a mark fell on it in the last step.
    lost: bool,
    marked: bool,
    /// Bits dropped in the current loss episode (steps with drops in a
    /// row) and what it had in flight when the episode began.
    dropped: f64,
    flight_at_loss: f64,
    /// When the current loss episode began, ns.
    loss_start_ns: u64,
    /// Waiting out a retransmission timeout until then, ns, and the
    /// timeouts so far.
    stalled_until_ns: u64,
    timeouts: u64,
    /// When it last carried a flow, ns.
    active_ns: u64,
    /// When its current flow's first segment leaves, ns.
    start_ns: u64,
    /// Its flow started after the connection sat idle and has had no ack
    /// yet (BBR's `idle_restart`).
    idle_restart: bool,
    /// Its flow's traffic class (strict-priority queueing only).
    class: u8,
}

/// What a step chose: each live flow's delivery rate and each link's
/// arrival rate, Gbit/s, for [`Network::set_rates`].
#[derive(Debug, Clone, Default)]
pub struct Rates {
    /// (flow, delivery rate).
    pub flows: Vec<(FlowId, f64)>,
    /// (link, what its flows send into it).
    pub links: Vec<(LinkId, f64)>,
}

/// The transport model of a network's flows.
#[derive(Debug, Clone)]
pub struct Transport {
    cfg: TransportConfig,
    mss_bits: f64,
    burst_bits: f64,
    base_rtt_ns: f64,
    conns: Vec<Conn>,
    by_key: HashMap<(usize, LinkId, LinkId, u32), usize>,
    /// The connection of each flow slot, with the flow's serial.
    flow_conn: Vec<Option<(u64, usize)>>,
    /// Per link: bits queued, and the flow whose burst a full FIFO is
    /// cutting with the bits cut so far.
    queue: Vec<f64>,
    victim: Vec<Option<usize>>,
    overflow: Vec<f64>,
    /// Per link, bits queued in each traffic class (strict-priority
    /// queueing only; empty otherwise).
    class_queue: Vec<[f64; CLASSES]>,
    /// Per link in use this step: (connection, hop index) of its flows.
    members: Vec<Vec<(usize, usize)>>,
    used: Vec<LinkId>,
    /// This step's (flow, connection) pairs, in flow id order.
    active: Vec<(FlowId, usize)>,
    rng: ChaCha8Rng,
    last_ns: u64,
}

impl Transport {
    /// A model over `links` links, its draws seeded by `seed`.
    pub fn new(cfg: TransportConfig, links: usize, seed: u64) -> Self {
        let classes = if cfg.queueing == Queueing::Priority { links } else { 0 };
        Transport {
            mss_bits: cfg.mss_bytes.max(1.0) * 8.0,
            burst_bits: cfg.burst_bytes.max(cfg.mss_bytes).max(1.0) * 8.0,
            base_rtt_ns: cfg.base_rtt_us.max(0.001) * 1e3,
            cfg,
            conns: Vec::new(),
            by_key: HashMap::new(),
            flow_conn: Vec::new(),
            queue: vec![0.0; links],
            victim: vec![None; links],
            overflow: vec![0.0; links],
            class_queue: vec![[0.0; CLASSES]; classes],
            members: vec![Vec::new(); links],
            used: Vec::new(),
            active: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7472_616e_7370_6f72),
            last_ns: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// Retransmission timeouts over the model's life, all connections.
    pub fn timeouts(&self) -> u64 {
        self.conns.iter().map(|c| c.timeouts).sum()
    }

    /// Advances the model from the last step to `now` (queues, drops and
    /// marks over the interval at the rates chosen then; each control's law)
    /// and chooses the rates of the next step. Returns each live flow's
    /// delivery rate and each link's arrival rate, for
    /// [`Network::set_rates`]. O(F · d + L) (module docs).
    pub fn step(&mut self, net: &Network, now: u64) -> Rates {
        let dt = now.saturating_sub(self.last_ns) as f64;
        self.last_ns = now;
        self.bind(net, now);
        self.fill_queues(net, dt);
        for k in 0..self.active.len() {
            let (f, c) = self.active[k];
            let progress = net.flow(f).map_or(0.0, |fl| 1.0 - fl.remaining_bits / fl.bits.max(1e-9));
            self.control(c, now, dt, progress);
        }
        self.serve(net, now)
    }

    /// Binds every live flow to its connection (a new flow to the first
    /// free connection of its key, made if need be, with its window
    /// restarted for the time it sat idle) and lists each link's members.
    fn bind(&mut self, net: &Network, now: u64) {
        // Connections whose flow ended stop sending, and what they still
        // had queued goes with the flow (it was sent past the flow's end:
        // the window is not held to the bits left).
        for &(_, c) in &self.active {
            let conn = &mut self.conns[c];
            if let Some((f, serial)) = conn.flow
                && net.flow(f).is_none_or(|fl| fl.serial != serial)
            {
                conn.flow = None;
                conn.send = 0.0;
                conn.delivered = 0.0;
                conn.hop_queue.iter_mut().for_each(|q| *q = 0.0);
                conn.hop_served.iter_mut().for_each(|q| *q = 0.0);
            }
        }
        for &l in &self.used {
            self.members[l].clear();
        }
        self.used.clear();
        self.active.clear();
        for (f, flow) in net.flows() {
            if flow.path.is_empty() {
                continue;
            }
            if self.flow_conn.len() <= f {
                self.flow_conn.resize(f + 1, None);
            }
            let c = match self.flow_conn[f] {
                Some((serial, c)) if serial == flow.serial => c,
                _ => {
                    let c = self.connect(flow.owner, &flow.path, now);
                    // Flows started at one instant do not send their first
                    // segments at one instant: each waits a uniform part
                    // of a round trip (its connection's ack clock). Without
                    // it two identical flows would stay identical for ever.
                    let wait = self.rng.random::<f64>() * self.base_rtt_ns;
                    self.conns[c].start_ns = now + wait as u64;
                    self.conns[c].idle_restart = true;
                    self.conns[c].flow = Some((f, flow.serial));
                    self.flow_conn[f] = Some((flow.serial, c));
                    c
                }
            };
            let conn = &mut self.conns[c];
            conn.active_ns = now;
            conn.class = flow.priority.min(CLASSES as u8 - 1);
            if conn.hop_queue.len() != flow.path.len() {
                conn.hop_queue = vec![0.0; flow.path.len()];
                conn.hop_served = vec![0.0; flow.path.len()];
            }
            for (h, &l) in flow.path.iter().enumerate() {
                if self.members[l].is_empty() {
                    self.used.push(l);
                }
                self.members[l].push((c, h));
            }
            self.active.push((f, c));
        }
    }

    /// The connection for a new flow of `owner` on `path`: the first of its
    /// key not carrying a live flow.
    fn connect(&mut self, owner: usize, path: &[LinkId], now: u64) -> usize {
        let (first, last) = (path[0], path[path.len() - 1]);
        let mut k = 0;
        loop {
            match self.by_key.get(&(owner, first, last, k)) {
                Some(&c) if self.conns[c].flow.is_some() => k += 1,
                Some(&c) => {
                    self.restart_after_idle(c, now);
                    return c;
                }
                None => {
                    let c = self.conns.len();
                    let conn = self.fresh();
                    self.conns.push(conn);
                    self.by_key.insert((owner, first, last, k), c);
                    return c;
                }
            }
        }
    }

    fn fresh(&mut self) -> Conn {
        let iw = INITIAL_WINDOW * self.mss_bits;
        let phase = loop {
            let p = self.rng.random_range(0..BBR_CYCLE.len());
            if p != 1 {
                break p;
            }
        };
        Conn {
            flow: None,
            window: iw,
            ssthresh: f64::INFINITY,
            cut_ns: 0,
            w_max: 0.0,
            epoch_ns: 0,
            w_est: iw,
            state: BbrState::Startup,
            bw_rounds: [0.0; BBR_BW_ROUNDS],
            round: 0,
            round_start_ns: 0,
            round_bits: 0.0,
            full_bw: 0.0,
            full_bw_rounds: 0,
            phase,
            phase_start_ns: 0,
            min_rtt_ns: f64::INFINITY,
            min_rtt_stamp_ns: 0,
            probe_rtt_until_ns: 0,
            line: 0.0,
            rate: f64::INFINITY,
            target: f64::INFINITY,
            alpha: 1.0,
            cnp_ns: 0,
            timer_ns: 0,
            stage: 0,
            send: 0.0,
            delivered: 0.0,
            rtt_ns: self.base_rtt_ns,
            hop_queue: Vec::new(),
            hop_served: Vec::new(),
            lost: false,
            marked: false,
            dropped: 0.0,
            flight_at_loss: 0.0,
            loss_start_ns: 0,
            stalled_until_ns: 0,
            timeouts: 0,
            active_ns: 0,
            start_ns: 0,
            idle_restart: false,
            class: 0,
        }
    }

    /// RFC 2861 as Linux applies it: the window halves per RTO idle, never
    /// below the initial window. BBR keeps its window and estimates (Linux
    /// skips the check for a congestion control with its own `cong_control`).
    fn restart_after_idle(&mut self, c: usize, now: u64) {
        if self.cfg.control == Control::Bbr {
            return;
        }
        let rto_ns = self.cfg.rto_ms.max(0.0) * 1e6;
        let conn = &mut self.conns[c];
        let idle = now.saturating_sub(conn.active_ns) as f64;
        if rto_ns > 0.0 && idle >= rto_ns {
            let halvings = (idle / rto_ns).floor().min(60.0) as i32;
            conn.window = (conn.window / 2f64.powi(halvings)).max(INITIAL_WINDOW * self.mss_bits);
        }
    }

    /// Each link's queues over the last `dt` ns at the rates chosen then:
    /// the FIFO grows by what arrives beyond the capacity, and what
    /// overflows the buffer is dropped, a drop per segment.
    fn fill_queues(&mut self, net: &Network, dt: f64) {
        for &(_, c) in &self.active {
            self.conns[c].lost = false;
            self.conns[c].marked = false;
        }
        if dt <= 0.0 {
            return;
        }
        let fair = self.cfg.queueing == Queueing::Fair;
        let priority = self.cfg.queueing == Queueing::Priority;
        let dcqcn = self.cfg.control == Control::Dcqcn;
        for k in 0..self.used.len() {
            let l = self.used[k];
            let cap = net.capacity(l);
            let buffer = self.cfg.buffer_ms * 1e6 * cap;
            let n = self.members[l].len();
            // Each flow's bits in the queue(s): what it sent beyond what it
            // was served.
            let mut total = 0.0;
            for m in 0..n {
                let (c, h) = self.members[l][m];
                let conn = &mut self.conns[c];
                let q = (conn.hop_queue[h] + (conn.send - conn.hop_served[h]) * dt).max(0.0);
                conn.hop_queue[h] = q;
                total += q;
                if fair && q > buffer {
                    // Its own FIFO overflowed: it alone loses.
                    conn.hop_queue[h] = buffer;
                    total -= q - buffer;
                    conn.dropped += q - buffer;
                    conn.lost = true;
                }
            }
            if priority {
                // One FIFO of `buffer` per class.
                let mut by_class = [0.0; CLASSES];
                for &(c, h) in &self.members[l] {
                    by_class[usize::from(self.conns[c].class)] += self.conns[c].hop_queue[h];
                }
                for (class, queued) in by_class.iter_mut().enumerate() {
                    if *queued > buffer {
                        *queued = self.drop_tail(l, *queued - buffer, Some(class as u8)) + buffer;
                    }
                }
                total = by_class.iter().sum();
                self.class_queue[l] = by_class;
            } else if !fair && total > buffer {
                total = self.drop_tail(l, total - buffer, None) + buffer;
            }
            self.queue[l] = total;
            if dcqcn {
                for m in 0..n {
                    let (c, h) = self.members[l][m];
                    let p = if fair {
                        mark_probability(self.conns[c].hop_queue[h], cap / n as f64)
                    } else {
                        mark_probability(total, cap)
                    };
                    let sent = self.conns[c].send * dt / self.mss_bits;
                    if p > 0.0 && self.rng.random::<f64>() < 1.0 - (1.0 - p).powf(sent) {
                        self.conns[c].marked = true;
                    }
                }
            }
        }
    }

    /// A full FIFO at link `l` drops `excess` bits from the tail of one
    /// sender's burst: the flow whose burst is being cut, or a new one drawn
    /// in proportion to what each sends once `burst_bytes` have gone. The
    /// victim loses the bits (they must be sent again) and sees a loss.
    /// With `class`, the FIFO is that traffic class's: only its flows
    /// lose. Returns the bits it could not take (taken from the others').
    fn drop_tail(&mut self, l: LinkId, excess: f64, class: Option<u8>) -> f64 {
        let conns = &self.conns;
        let in_fifo = |c: usize| class.is_none_or(|k| conns[c].class == k);
        let members: Vec<(usize, usize)> = self.members[l].iter().copied().filter(|&(c, _)| in_fifo(c)).collect();
        let Some(&(first, _)) = members.first() else { return 0.0 };
        let victim = match self.victim[l] {
            Some(c) if members.iter().any(|&(m, _)| m == c) => c,
            _ => {
                let arriving: f64 = members.iter().map(|&(c, _)| self.conns[c].send).sum();
                let mut pick = self.rng.random::<f64>() * arriving;
                let mut chosen = first;
                for &(c, _) in &members {
                    chosen = c;
                    pick -= self.conns[c].send;
                    if pick <= 0.0 {
                        break;
                    }
                }
                chosen
            }
        };
        self.overflow[l] += excess;
        self.victim[l] = (self.overflow[l] < self.burst_bits).then_some(victim);
        if self.victim[l].is_none() {
            self.overflow[l] = 0.0;
        }
        let mut left = excess;
        for &(c, h) in &members {
            if c == victim {
                let conn = &mut self.conns[c];
                let take = left.min(conn.hop_queue[h]);
                conn.hop_queue[h] -= take;
                conn.dropped += take;
                conn.lost = true;
                left -= take;
            }
        }
        // The victim had less queued than the excess: the rest falls on
        // the others in proportion to what they have queued.
        if left > 0.0 {
            let others: f64 = members.iter().map(|&(c, h)| self.conns[c].hop_queue[h]).sum();
            for &(c, h) in &members {
                let conn = &mut self.conns[c];
                if others > 0.0 {
                    let take = left * conn.hop_queue[h] / others;
                    conn.hop_queue[h] -= take;
                    conn.dropped += take;
                    conn.lost |= take > 0.0;
                }
            }
        }
        0.0
    }

    /// A FIFO at link `l` (of traffic class `class`, or all its flows)
    /// holding `queued` bits serves its bits in the order they came, at up
    /// to `cap`: over the step, each flow in proportion to what it has
    /// queued and sends; with no backlog and room, all it sends. Sets
    /// each flow's `hop_served` and returns what the FIFO serves in all.
    /// O(flows on the link).
    fn serve_fifo(&mut self, l: LinkId, class: Option<u8>, queued: f64, cap: f64, step: f64) -> f64 {
        let conns = &mut self.conns;
        let in_fifo = |conn: &Conn| class.is_none_or(|k| conn.class == k);
        let (mut offered, mut arriving) = (0.0, 0.0);
        for &(c, h) in &self.members[l] {
            let conn = &conns[c];
            if in_fifo(conn) {
                offered += conn.hop_queue[h] + conn.send * step;
                arriving += conn.send;
            }
        }
        let mut used = 0.0;
        for &(c, h) in &self.members[l] {
            let conn = &mut conns[c];
            if !in_fifo(conn) {
                continue;
            }
            let mine = conn.hop_queue[h] + conn.send * step;
            let served = if offered <= 0.0 {
                0.0
            } else if queued <= 0.0 && arriving <= cap {
                conn.send
            } else {
                (cap * mine / offered).min(mine / step)
            };
            conn.hop_served[h] = served;
            used += served;
        }
        used
    }

    /// Each connection's sending rate and round trip for the next step, and
    /// what each link serves each: its delivery rate is the least of those.
    fn serve(&mut self, net: &Network, now: u64) -> Rates {
        let fair = self.cfg.queueing == Queueing::Fair;
        let priority = self.cfg.queueing == Queueing::Priority;
        let step = self.cfg.step_ns() as f64;
        let mss = self.mss_bits;
        // Round trips from the queues now, then sending rates.
        for k in 0..self.active.len() {
            let (f, c) = self.active[k];
            let Some(flow) = net.flow(f) else { continue };
            let mut rtt = self.base_rtt_ns;
            for (h, &l) in flow.path.iter().enumerate() {
                let cap = net.capacity(l).max(1e-9);
                rtt += if fair {
                    let share = cap / self.members[l].len().max(1) as f64;
                    self.conns[c].hop_queue[h] / self.conns[c].hop_served[h].max(share)
                } else if priority {
                    // Behind its own class's FIFO and every higher one's.
                    let class = usize::from(self.conns[c].class);
                    self.class_queue[l][class..].iter().sum::<f64>() / cap
                } else {
                    self.queue[l] / cap
                };
            }
            let conn = &mut self.conns[c];
            conn.rtt_ns = rtt;
            let rate = match self.cfg.control {
                Control::Reno | Control::Cubic | Control::MltcpReno => conn.window / rtt,
                Control::Bbr => {
                    // Before its first sample the round trip is the
                    // path's as it stands now.
                    let min_rtt = if conn.min_rtt_ns.is_finite() { conn.min_rtt_ns } else { rtt };
                    let bw = btl_bw(conn).max(INITIAL_WINDOW * mss / min_rtt);
                    (bbr_pacing_gain(conn) * bw).min(conn.window / rtt)
                }
                Control::Dcqcn => {
                    conn.line = flow.cap_gbps;
                    if conn.rate.is_infinite() {
                        conn.rate = flow.cap_gbps;
                        conn.target = flow.cap_gbps;
                    }
                    conn.rate
                }
            };
            // A window-based sender hands its window to the NIC, whose own
            // queue (the first link's) holds what the line cannot take: it
            // is capped only by a throttle below the line rate. Paced
            // senders (bbr, dcqcn) never exceed the line.
            let paced = matches!(self.cfg.control, Control::Bbr | Control::Dcqcn);
            let line = flow.path.first().map_or(f64::INFINITY, |&l| net.capacity(l));
            let cap = if paced || flow.cap_gbps < line * (1.0 - 1e-9) { flow.cap_gbps } else { f64::INFINITY };
            // A flow that starts within the step sends for the part after its start.
            let late = conn.start_ns.max(conn.stalled_until_ns).saturating_sub(now) as f64;
            conn.send = rate.min(cap).max(0.0) * (1.0 - late / step).max(0.0);
        }
        let mut sending = Vec::with_capacity(self.used.len());
        let mut demand: Vec<(usize, f64)> = Vec::new();
        for k in 0..self.used.len() {
            let l = self.used[k];
            let cap = net.capacity(l);
            let arriving: f64 = self.members[l].iter().map(|&(c, _)| self.conns[c].send).sum();
            sending.push((l, arriving));
            if fair {
                // Max-min between the flows' demands: what they send plus
                // their backlog over the step.
                demand.clear();
                demand.extend(self.members[l].iter().enumerate().map(|(m, &(c, h))| {
                    let conn = &self.conns[c];
                    (m, conn.send + conn.hop_queue[h] / step)
                }));
                demand.sort_unstable_by(|a, b| a.1.total_cmp(&b.1));
                let mut left = cap;
                let n = demand.len();
                for (i, &(m, d)) in demand.iter().enumerate() {
                    let give = d.min(left / (n - i) as f64);
                    left -= give;
                    let (c, h) = self.members[l][m];
                    self.conns[c].hop_served[h] = give;
                }
            } else if priority {
                // Classes in turn from the highest, each a FIFO over what
                // the higher ones left.
                let mut left = cap;
                for class in (0..CLASSES as u8).rev() {
                    let q = self.class_queue[l][usize::from(class)];
                    left = (left - self.serve_fifo(l, Some(class), q, left, step)).max(0.0);
                }
            } else {
                self.serve_fifo(l, None, self.queue[l], cap, step);
            }
        }
        let mut rates = Vec::with_capacity(self.active.len());
        for &(f, c) in &self.active {
            let conn = &mut self.conns[c];
            let served = conn.hop_served.iter().copied().fold(f64::INFINITY, f64::min);
            conn.delivered = if served.is_finite() { served } else { conn.send };
            rates.push((f, conn.delivered));
        }
        // Flows inside a host are not the transport's: they get their cap.
        for (f, flow) in net.flows() {
            if flow.path.is_empty() {
                rates.push((f, flow.cap_gbps));
            }
        }
        Rates { flows: rates, links: sending }
    }
}

/// RED's marking probability (DCQCN §5) for `queue` bits at `cap` Gbit/s.
fn mark_probability(queue: f64, cap: f64) -> f64 {
    let (kmin, kmax) = (ECN_KMIN_NS * cap, ECN_KMAX_NS * cap);
    if queue <= kmin {
        0.0
    } else if queue >= kmax {
        1.0
    } else {
        ECN_PMAX * (queue - kmin) / (kmax - kmin)
    }
}
