//! Flows in the network: their completions (each ended flow leaves, what
//! it leaves behind is re-rated once) and, with a transport model, its
//! steps ([`crate::transport`]).

use super::{BACKGROUND, Event, Simulation};
use crate::network::{FlowId, Network};
use orrery_policy::Policy;

/// A job's flows in the network, in the order they started, each with its
/// serial, so that an entry whose slot the network has given to a later
/// flow is told apart. An ended flow stays until the ended ones outnumber
/// the rest, then they are swept together: O(1) amortised per ended flow.
/// (Removing each ended flow from the list cost O(flows) each, quadratic
/// in a collective's flows: half the time of a 100-job run on Lingjun.)
#[derive(Debug, Clone, Default)]
pub(super) struct JobFlows {
    entries: Vec<(FlowId, u64)>,
    ended: usize,
}

impl JobFlows {
    /// Notes flow `f`, just added to `net`. O(1).
    pub(super) fn push(&mut self, net: &Network, f: FlowId) {
        if let Some(flow) = net.flow(f) {
            self.entries.push((f, flow.serial));
        }
    }

    /// Notes that one of the flows has left `net`. O(1) amortised.
    pub(super) fn ended(&mut self, net: &Network) {
        self.ended += 1;
        if self.ended * 2 > self.entries.len() {
            self.entries.retain(|&(f, serial)| net.flow(f).is_some_and(|fl| fl.serial == serial));
            self.ended = 0;
        }
    }

    /// The flows still in `net`, in the order they started. O(entries).
    pub(super) fn live(&self, net: &Network) -> Vec<FlowId> {
        self.entries
            .iter()
            .filter(|&&(f, serial)| net.flow(f).is_some_and(|fl| fl.serial == serial))
            .map(|e| e.0)
            .collect()
    }

    /// [`Self::live`], and forgets them all. O(entries).
    pub(super) fn take(&mut self, net: &Network) -> Vec<FlowId> {
        let live = self.live(net);
        self.entries.clear();
        self.ended = 0;
        live
    }
}

impl Simulation<'_> {
    /// Retransmission timeouts the transport model's connections took so far
    /// (None under the fluid model): the count a Linux host reports as
    /// `TcpExt: TCPTimeouts`.
    pub fn transport_timeouts(&self) -> Option<u64> {
        self.transport.as_ref().map(|t| t.timeouts())
    }

    /// Schedules the transport model's step now unless one is due.
    pub(super) fn wake_transport(&mut self) {
        if self.transport.is_some() && !self.transport_due && self.net.live() > 0 {
            self.transport_due = true;
            self.push(self.now, Event::TransportStep);
        }
    }

    /// One step of the transport model: the flows' new rates, their
    /// completions rescheduled, and the next step while any job's flow is
    /// live (background flows alone do not keep it stepping).
    pub(super) fn transport_step(&mut self) {
        self.transport_due = false;
        let Some(tr) = self.transport.as_mut() else { return };
        let step = tr.config().step_ns();
        let rates = tr.step(&self.net, self.now);
        let changed = self.net.set_rates(self.now, &rates.flows, &rates.links);
        self.reschedule(&changed);
        if self.net.flows().any(|(_, f)| f.owner != BACKGROUND) {
            self.transport_due = true;
            self.push(self.now + step, Event::TransportStep);
        }
    }

    pub(super) fn reschedule(&mut self, flows: &[FlowId]) {
        for &f in flows {
            if self.net.flow(f).is_some_and(|fl| fl.owner == BACKGROUND) {
                continue; // never ends
            }
            if let (Some(t), Some(v)) = (self.net.finish_time(f), self.net.flow(f).map(|fl| fl.version)) {
                self.push(t.max(self.now), Event::FlowDone(f, v));
            }
        }
    }

    /// Flows that end at this instant, as (flow, version) of their events
    /// (a stale version is skipped): they leave the network together, each
    /// max-min component they leave re-rated once, then each one's job
    /// moves on, in event order.
    pub(super) fn flows_done(&mut self, events: &[(FlowId, u64)], policy: &mut dyn Policy) {
        let mut ended: smallvec::SmallVec<[_; 16]> = smallvec::SmallVec::with_capacity(events.len());
        for &(f, version) in events {
            if self.net.flow(f).is_none_or(|fl| fl.version != version) {
                continue;
            }
            if let Some((job, epoch, index)) = self.flow_job.get_mut(f).and_then(Option::take) {
                ended.push((f, job, epoch, index));
            }
        }
        if ended.is_empty() {
            return;
        }
        let ids: smallvec::SmallVec<[FlowId; 16]> = ended.iter().map(|e| e.0).collect();
        let changed = self.net.remove_all(self.now, &ids);
        self.note_interactions();
        self.reschedule(&changed);
        for &(_, job, ..) in &ended {
            self.jobs[job].flows.ended(&self.net);
        }
        for (_, job, epoch, index) in ended {
            self.flow_ended(job, epoch, index, policy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JobFlows;
    use crate::network::Network;

    #[test]
    fn a_jobs_flows_are_the_live_ones_in_start_order_and_a_reused_slot_is_not_theirs() {
        let mut net = Network::new(vec![100.0], false);
        let mut mine = JobFlows::default();
        let ids: Vec<usize> = (0..4).map(|_| net.add(0, vec![0], 1e9, 100.0, 1).0).collect();
        for &f in &ids {
            mine.push(&net, f);
        }
        // Flows 1 and 2 end; another job's flow takes a freed slot.
        net.remove(0, ids[1]);
        mine.ended(&net);
        net.remove(0, ids[2]);
        mine.ended(&net);
        let (other, _) = net.add(0, vec![0], 1e9, 100.0, 2);
        assert!(other == ids[1] || other == ids[2], "a slot is reused: {other}");
        assert_eq!(mine.live(&net), vec![ids[0], ids[3]]);
        // A third ending sweeps: more ended than left.
        net.remove(0, ids[0]);
        mine.ended(&net);
        assert_eq!(mine.entries.len(), 1);
        assert_eq!(mine.take(&net), vec![ids[3]]);
        assert!(mine.live(&net).is_empty());
    }
}
