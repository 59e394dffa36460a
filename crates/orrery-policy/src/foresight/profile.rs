//! A job's iteration alone on its placement as FORESIGHT plans it: its
//! cross-rack flows in time at each throttle rate (the paper profiles each
//! job alone at several rates, §IV), stretched to what was measured when
//! the plan is re-made from measured times (issue 36). A throttle stretches
//! only the communication, so it is not a uniform stretch.

use super::logical::LogicalNetwork;
use super::routing::{FlowProfile, TimedFlow};
use orrery_model::placed::{place, transfers};
use orrery_model::{HostId, JobSpec, Segment, Topology};

/// A job's measured compute or communication that differs from the plan's
/// by more than this fraction makes a tripped plan re-planned rather than
/// dropped (2%: the simulator's compute jitter moves a windowed median by
/// well under it, so its plans stay the model's).
pub(super) const REPLAN_TOLERANCE: f64 = 0.02;

/// Throttle rates profiled, as fractions of the job's unthrottled rate.
pub const RATES: [f64; 4] = [1.0, 0.75, 0.5, 0.25];

/// A job's iteration alone on its placement at `throttle` Gbit/s per flow
/// (None: unthrottled), as cross-rack flows in time. With `spread`, the
/// job's flows are routed as subflows over several spines, so they run at
/// the hosts' NIC rate; without, each takes one path and runs at that
/// path's slowest link (ECMP, or whole-flow routing), as the job's shape
/// assumes. O(segments · flows).
pub fn profile(
    t: &Topology,
    net: &LogicalNetwork,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
    throttle: Option<f64>,
    spread: bool,
) -> Option<FlowProfile> {
    measured_profile(t, net, spec, hosts, throttle, spread, Stretch::MODEL)
}

/// A job's unthrottled profile and compute per iteration on its hosts, as
/// a plan needs them, with what they were derived with.
#[derive(Debug, Clone)]
pub(super) struct Profiled {
    pub(super) stretch: Stretch,
    pub(super) spread: bool,
    /// Shared: every re-plan of its part takes it (a 1,024-GPU mesh's has
    /// ~12,000 flows).
    pub(super) unthrottled: Option<std::sync::Arc<FlowProfile>>,
    pub(super) compute_ms: f64,
}

/// How a job's measured iteration departs from its model on its placement:
/// its compute and its communication, each as measured over modelled time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stretch {
    /// Measured compute over the model's.
    pub compute: f64,
    /// Measured communication over the model's: the job's flows are taken
    /// to run at the modelled rate divided by this.
    pub comm: f64,
}

impl Stretch {
    /// The model as it is.
    pub const MODEL: Stretch = Stretch { compute: 1.0, comm: 1.0 };

    /// Whether `self` and `other` differ by more than [`REPLAN_TOLERANCE`]
    /// in either part.
    pub(super) fn differs(self, other: Stretch) -> bool {
        (self.compute / other.compute - 1.0).abs() > REPLAN_TOLERANCE
            || (self.comm / other.comm - 1.0).abs() > REPLAN_TOLERANCE
    }
}

/// [`profile`] with the job's compute and communication stretched to what
/// was measured (issue 36: timing re-planned from measured times). A
/// stretched communication is a slower line rate (on real TCP a ring's
/// per-step barriers and slow start lower its mean rate), and a throttle
/// caps that rate. O(segments · flows).
pub fn measured_profile(
    t: &Topology,
    net: &LogicalNetwork,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
    throttle: Option<f64>,
    spread: bool,
    stretch: Stretch,
) -> Option<FlowProfile> {
    let placed = place(t, spec, hosts)?;
    let nic = hosts.iter().map(|&(h, _)| t.host_nic_gbps(h)).fold(f64::INFINITY, f64::min);
    let mut now = 0.0;
    let mut flows = Vec::new();
    for seg in &placed.shape.segments {
        match *seg {
            Segment::Compute { ms } => now += ms * stretch.compute,
            Segment::Comm { collective, payload_bytes, gbps, hosts: h, group, .. } => {
                if h <= 1 {
                    now += seg.duration_ms() * stretch.comm;
                    continue;
                }
                let line = if spread && nic.is_finite() { nic.max(gbps) } else { gbps } / stretch.comm;
                let rate = throttle.map_or(line, |r| r.min(line));
                let mut end = now;
                for (i, (src, dst, bits)) in
                    transfers(&placed.workers, collective, payload_bytes, group).into_iter().enumerate()
                {
                    if src == dst || bits <= 0.0 {
                        continue;
                    }
                    let ms = bits / (rate * 1e6);
                    end = f64::max(end, now + ms);
                    let (a, b) = (net.leaf_of_host[src], net.leaf_of_host[dst]);
                    if a != b {
                        flows.push(TimedFlow {
                            flow: i,
                            src,
                            dst,
                            src_leaf: a,
                            dst_leaf: b,
                            start_ms: now,
                            end_ms: now + ms,
                            gbps: rate,
                        });
                    }
                }
                now = end;
            }
        }
    }
    Some(FlowProfile { rate_gbps: throttle, length_ms: now, flows })
}
