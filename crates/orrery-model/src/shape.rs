//! Iteration shapes and the circle view derived from them.
//!
//! An [`IterationShape`] is what one training iteration does in isolation: an
//! ordered list of compute and communication segments. The simulator executes
//! it; the interleaving engine looks at its [`Circle`] (CASSINI §3 "geometric
//! abstraction", Metronome §II-B), which is *computed* from the shape so the two
//! can never disagree.

use serde::{Deserialize, Serialize};

/// Rate of GPU-to-GPU traffic inside one host (PCIe 4.0 x16 ≈ 25 GB/s).
pub const INTRA_HOST_GBPS: f64 = 200.0;

/// A collective operation, with the bytes each worker puts on the wire for a
/// payload of `B` bytes among `n` participants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// Ring all-reduce (data parallelism): each worker sends `2(n-1)/n · B`
    /// to the next worker of the ring (Patarasuk & Yuan; CASSINI §2.1).
    RingAllReduce,
    /// Ring all-gather: each worker sends `(n-1)/n · B`.
    AllGather,
    /// Point-to-point transfer between consecutive pipeline stages: `B`.
    PointToPoint,
    /// All-to-all (embedding exchange in DLRM): each worker sends `B/n` to each
    /// of the `n-1` others, `(n-1)/n · B` in total.
    AllToAll,
}

impl Collective {
    /// Bytes one worker transmits for a payload of `payload_bytes` among `n`.
    pub fn wire_bytes_per_worker(self, payload_bytes: f64, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            Collective::RingAllReduce => 2.0 * (n - 1.0) / n * payload_bytes,
            Collective::AllGather | Collective::AllToAll => (n - 1.0) / n * payload_bytes,
            Collective::PointToPoint => payload_bytes,
        }
    }
}

/// The most workers a group may span, and so the most GPUs of a mesh
/// ([`crate::mesh::MAX_GPUS`] is this).
pub const MAX_GROUP_WORKERS: u32 = 65_536;

/// Which workers a collective runs among. Workers are numbered in the
/// placement's order; a group is `size` workers `stride` apart (worker
/// `i` is in the group of every `i ± stride`, up to `size` of them), and all
/// such groups run the collective at once. A device mesh numbers its ranks
/// tensor-parallel first, then data, then pipeline (Megatron-LM's order),
/// so its TP groups are `{stride 1, size tp}`, its DP groups `{tp, dp}`
/// and its pipelines `{tp·dp, pp}`. `size` 0 is every worker in one group
/// (a data-parallel job's ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Distance between the workers of a group.
    #[schemars(range(min = 0, max = MAX_GROUP_WORKERS))]
    pub stride: u32,
    /// Workers in a group; 0 for all of them.
    #[schemars(range(min = 0, max = MAX_GROUP_WORKERS))]
    pub size: u32,
}

impl Group {
    /// Every worker, one group.
    pub const ALL: Group = Group { stride: 1, size: 0 };

    /// Is it every worker in one group?
    pub fn is_all(&self) -> bool {
        self.size == 0
    }
}

/// One step of an iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Segment {
    /// The GPU computes for `ms` milliseconds (on an unshared GPU).
    Compute {
        /// Duration in milliseconds.
        ms: f64,
    },
    /// A collective among `participants` workers spread over `hosts` hosts.
    Comm {
        /// Which collective.
        collective: Collective,
        /// Payload in bytes (e.g. the gradient size for an all-reduce).
        payload_bytes: f64,
        /// Number of workers taking part.
        participants: u32,
        /// Number of distinct hosts they run on; `1` means the traffic never
        /// leaves the host.
        hosts: u32,
        /// Rate each worker sends at, in Gbit/s: the NIC rate (or a throttle)
        /// when `hosts > 1`, the intra-host (NVLink/PCIe) rate otherwise.
        gbps: f64,
        /// The workers it runs among ([`Group::ALL`] for a 1-D job);
        /// `participants` and `hosts` count one group.
        #[serde(default = "all", skip_serializing_if = "Group::is_all")]
        group: Group,
    },
}

fn all() -> Group {
    Group::ALL
}

impl Segment {
    /// Duration of the segment when the job runs alone, in milliseconds.
    pub fn duration_ms(&self) -> f64 {
        match *self {
            Segment::Compute { ms } => ms,
            Segment::Comm { .. } => {
                let bits = self.wire_bytes_per_worker() * 8.0;
                let gbps = self.gbps();
                if gbps <= 0.0 { 0.0 } else { bits / (gbps * 1e9) * 1e3 }
            }
        }
    }

    /// Bytes each worker transmits during this segment (0 for compute).
    pub fn wire_bytes_per_worker(&self) -> f64 {
        match *self {
            Segment::Compute { .. } => 0.0,
            // Pipeline stages of a mesh exchange with both neighbours in
            // 1F1B's steady state (activations forward, gradients back): an
            // inner stage sends the payload twice.
            Segment::Comm { collective: Collective::PointToPoint, payload_bytes, participants, group, .. }
                if !group.is_all() && participants >= 3 =>
            {
                2.0 * payload_bytes
            }
            Segment::Comm { collective, payload_bytes, participants, .. } => {
                collective.wire_bytes_per_worker(payload_bytes, participants)
            }
        }
    }

    fn gbps(&self) -> f64 {
        match *self {
            Segment::Compute { .. } => 0.0,
            Segment::Comm { gbps, .. } => gbps,
        }
    }

    /// Rate of this segment's flows between two GPUs of one host, Gbit/s:
    /// a mesh's group inside an NVLink domain runs at the segment's rate
    /// (NVLink), a mesh's group across hosts never slower than its NIC;
    /// every other collective at [`INTRA_HOST_GBPS`] (PCIe).
    pub fn intra_host_gbps(&self) -> f64 {
        match *self {
            Segment::Comm { group, hosts, gbps, .. } if !group.is_all() => {
                if hosts <= 1 {
                    gbps
                } else {
                    gbps.max(INTRA_HOST_GBPS)
                }
            }
            _ => INTRA_HOST_GBPS,
        }
    }

    /// Bandwidth this segment demands from the network, in Gbit/s: zero for
    /// compute and for communication that stays inside one host.
    pub fn network_gbps(&self) -> f64 {
        match *self {
            Segment::Comm { hosts, gbps, .. } if hosts > 1 => gbps,
            _ => 0.0,
        }
    }
}

/// What one training iteration does, in order, when the job runs alone.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct IterationShape {
    /// The segments, executed one after the other.
    pub segments: Vec<Segment>,
}

impl IterationShape {
    /// Iteration time alone, in milliseconds.
    pub fn period_ms(&self) -> f64 {
        self.segments.iter().map(Segment::duration_ms).sum()
    }

    /// Total compute time per iteration, in milliseconds.
    pub fn compute_ms(&self) -> f64 {
        self.segments.iter().filter(|s| matches!(s, Segment::Compute { .. })).map(Segment::duration_ms).sum()
    }

    /// The same iteration with every ring collective as NCCL runs it: a
    /// ring all-reduce among `n` workers becomes its 2(n−1) steps (reduce-
    /// scatter, then all-gather), a ring all-gather its n−1, each step one
    /// segment in which every worker sends `B/n` to the next, with a barrier
    /// between steps (the next starts when the slowest edge is done). Alone
    /// it takes the same time (the same bits at the same rate; per-step
    /// latency is not modelled); under contention a step waits for its
    /// slowest edge. O(segments · n).
    pub fn ring_steps(&self) -> IterationShape {
        let mut segments = Vec::with_capacity(self.segments.len());
        for seg in &self.segments {
            match *seg {
                Segment::Comm { collective, payload_bytes, participants, hosts, gbps, group }
                    if participants >= 2 && matches!(collective, Collective::RingAllReduce | Collective::AllGather) =>
                {
                    let n = participants;
                    let steps = if collective == Collective::RingAllReduce { 2 * (n - 1) } else { n - 1 };
                    // An all-gather step of payload B/(n−1) puts (n−1)/n · B/(n−1) = B/n
                    // on each ring edge.
                    let step = Segment::Comm {
                        collective: Collective::AllGather,
                        payload_bytes: payload_bytes / f64::from(n - 1),
                        participants: n,
                        hosts,
                        gbps,
                        group,
                    };
                    segments.extend(std::iter::repeat_n(step, steps as usize));
                }
                _ => segments.push(seg.clone()),
            }
        }
        IterationShape { segments }
    }

    /// Time per iteration spent in communication that crosses the network, in ms.
    pub fn network_ms(&self) -> f64 {
        self.segments.iter().filter(|s| s.network_gbps() > 0.0).map(Segment::duration_ms).sum()
    }

    /// The circle view: perimeter = iteration time, one arc per network
    /// communication segment (the "Up" phases of CASSINI Fig. 3(c)); compute
    /// and intra-host communication are the uncoloured "Down" phases.
    /// Adjacent arcs of equal bandwidth are merged.
    pub fn circle(&self) -> Circle {
        let mut arcs: Vec<Arc> = Vec::new();
        let mut t = 0.0;
        for seg in &self.segments {
            let d = seg.duration_ms();
            let bw = seg.network_gbps();
            if bw > 0.0 && d > 0.0 {
                match arcs.last_mut() {
                    Some(last) if (last.start_ms + last.duration_ms - t).abs() < 1e-9 && last.gbps == bw => {
                        last.duration_ms += d;
                    }
                    _ => arcs.push(Arc { start_ms: t, duration_ms: d, gbps: bw }),
                }
            }
            t += d;
        }
        Circle { period_ms: t, arcs }
    }
}

/// A contiguous communication phase on the circle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Arc {
    /// Start, in ms from the beginning of the iteration.
    pub start_ms: f64,
    /// Length in ms.
    pub duration_ms: f64,
    /// Bandwidth demanded while active, in Gbit/s.
    pub gbps: f64,
}

/// The circle view of a periodic job (CASSINI §3, Metronome §II-B): a perimeter
/// equal to the iteration time and the arcs where the job uses the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Circle {
    /// Perimeter = iteration time, in ms.
    pub period_ms: f64,
    /// Communication arcs, sorted by start, non-overlapping.
    pub arcs: Vec<Arc>,
}

impl Circle {
    /// Appends the circle's exact bits (period, arc count, each arc's start,
    /// length and rate) to `key`: equal keys, equal circles. For memo keys
    /// of what a circle decides (a node's Score, a link's solution).
    /// O(arcs).
    pub fn push_bits(&self, key: &mut Vec<u64>) {
        key.extend([self.period_ms.to_bits(), self.arcs.len() as u64]);
        key.extend(self.arcs.iter().flat_map(|a| [a.start_ms.to_bits(), a.duration_ms.to_bits(), a.gbps.to_bits()]));
    }

    /// Fraction of the iteration with network demand (Metronome's duty cycle d_p).
    pub fn duty_cycle(&self) -> f64 {
        if self.period_ms <= 0.0 {
            return 0.0;
        }
        self.arcs.iter().map(|a| a.duration_ms).sum::<f64>() / self.period_ms
    }

    /// Angle in degrees that a time offset covers on this circle.
    pub fn degrees(&self, ms: f64) -> f64 {
        if self.period_ms <= 0.0 { 0.0 } else { ms / self.period_ms * 360.0 }
    }

    /// Bandwidth demanded at time `t_ms` (taken modulo the period), in Gbit/s.
    pub fn demand_at(&self, t_ms: f64) -> f64 {
        if self.period_ms <= 0.0 {
            return 0.0;
        }
        let t = t_ms.rem_euclid(self.period_ms);
        self.arcs.iter().filter(|a| t >= a.start_ms && t < a.start_ms + a.duration_ms).map(|a| a.gbps).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_steps_keep_the_bits_and_the_time_alone() {
        // 4 workers, 100 MB all-reduce at 50 Gbit/s: 6 steps of 25 MB per
        // edge (B/n), 150 MB in all = 2·3/4 · 100 MB, 24 ms as one flow.
        let whole = IterationShape {
            segments: vec![
                Segment::Compute { ms: 100.0 },
                Segment::Comm {
                    collective: Collective::RingAllReduce,
                    payload_bytes: 1e8,
                    participants: 4,
                    hosts: 4,
                    gbps: 50.0,
                    group: Group::ALL,
                },
            ],
        };
        let steps = whole.ring_steps();
        assert_eq!(steps.segments.len(), 1 + 6);
        assert!((steps.segments[1].wire_bytes_per_worker() - 2.5e7).abs() < 1e-3);
        assert!((steps.period_ms() - whole.period_ms()).abs() < 1e-9);
        assert!((whole.period_ms() - 124.0).abs() < 1e-9);
    }

    fn allreduce(bytes: f64, n: u32, hosts: u32, gbps: f64) -> Segment {
        Segment::Comm {
            collective: Collective::RingAllReduce,
            payload_bytes: bytes,
            participants: n,
            hosts,
            gbps,
            group: Group::ALL,
        }
    }

    #[test]
    fn ring_allreduce_time_is_two_n_minus_one_over_n_b_over_r() {
        // 1 GB among 4 hosts at 100 Gbit/s: 2·3/4 · 8e9 bit / 1e11 bit/s = 120 ms.
        let s = allreduce(1e9, 4, 4, 100.0);
        assert!((s.duration_ms() - 120.0).abs() < 1e-9);
    }

    #[test]
    fn circle_of_a_data_parallel_job_has_one_up_arc_after_compute() {
        // CASSINI Fig. 3: VGG16, 255 ms iteration, 141 ms Down phase = 199°.
        let shape = IterationShape {
            segments: vec![Segment::Compute { ms: 141.0 }, allreduce(114e-3 * 50e9 / 8.0 / 1.5, 4, 4, 50.0)],
        };
        let c = shape.circle();
        assert!((c.period_ms - 255.0).abs() < 1e-9);
        assert_eq!(c.arcs.len(), 1);
        assert!((c.arcs[0].start_ms - 141.0).abs() < 1e-9);
        assert!((c.degrees(141.0) - 199.06).abs() < 0.01);
        assert_eq!(c.demand_at(100.0), 0.0);
        assert_eq!(c.demand_at(200.0), 50.0);
        assert_eq!(c.demand_at(255.0 + 200.0), 50.0);
    }

    #[test]
    fn intra_host_comm_takes_time_but_no_network() {
        let shape = IterationShape { segments: vec![Segment::Compute { ms: 10.0 }, allreduce(1e9, 8, 1, 1000.0)] };
        assert!(shape.circle().arcs.is_empty());
        assert!(shape.period_ms() > 10.0);
        assert_eq!(shape.network_ms(), 0.0);
    }

    #[test]
    fn adjacent_arcs_of_equal_rate_merge_and_different_rates_do_not() {
        let shape = IterationShape {
            segments: vec![
                Segment::Compute { ms: 5.0 },
                allreduce(1e6, 2, 2, 10.0),
                allreduce(1e6, 2, 2, 10.0),
                allreduce(1e6, 2, 2, 20.0),
            ],
        };
        let c = shape.circle();
        assert_eq!(c.arcs.len(), 2);
        assert!((c.arcs[0].duration_ms - 1.6).abs() < 1e-9);
        assert!((c.duty_cycle() - 2.0 / 7.0).abs() < 1e-9);
    }
}
