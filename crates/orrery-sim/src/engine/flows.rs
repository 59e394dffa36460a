//! Flows in the network: their completions (each ended flow leaves, what
//! it leaves behind is re-rated once) and, with a transport model, its
//! steps ([`crate::transport`]).

use super::{BACKGROUND, Event, Simulation};
use crate::network::{FlowId, Network};
use orrery_policy::{JobId, Policy};
use std::cmp::Reverse;

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

    /// Puts each of `flows`' next end in the event queue (a flow re-rated
    /// again later makes this event stale: its version no longer matches).
    /// Flows that end at one instant share one event ([`Event::FlowsDone`]):
    /// a ring's flows, re-rated together, end together, and one heap entry
    /// for all of them, not one each, is what the queue pushes and pops
    /// (85 of the 97 M events of decision-scale-4096 under `metronome` were
    /// flows' ends). The order is the one separate events gave: the
    /// members of one call have consecutive sequence numbers, so nothing
    /// else comes between them at their instant, and a group keeps them in
    /// the order given. O(k log k) for k flows, then O(log n) a group.
    pub(super) fn reschedule(&mut self, flows: &[FlowId]) {
        let mut due = std::mem::take(&mut self.due_buf);
        due.clear();
        for &f in flows {
            let Some(fl) = self.net.flow(f) else { continue };
            if fl.owner == BACKGROUND {
                continue; // never ends
            }
            if let Some(t) = self.net.finish_time(f) {
                due.push((t.max(self.now), f, fl.version));
            }
        }
        // Stable: at one instant, the order the flows were given.
        due.sort_by_key(|d| d.0);
        let group_ends = self.group_ends;
        for run in due.chunk_by(|a, b| group_ends && a.0 == b.0) {
            let event = match run {
                [(_, f, v)] => Event::FlowDone(*f, *v),
                _ => {
                    let group = match self.free_groups.pop() {
                        Some(g) => g,
                        None => {
                            self.done_groups.push(Vec::new());
                            (self.done_groups.len() - 1) as u32
                        }
                    };
                    self.done_groups[group as usize].extend(run.iter().map(|&(_, f, v)| (f, v)));
                    Event::FlowsDone(group)
                }
            };
            self.push(run[0].0, event);
        }
        self.due_buf = due;
    }

    /// A flow-end event at `t`, with the others at `t` after it in the
    /// queue: the flows ending at this instant (a ring's flows end
    /// together) leave the network at once. (Gathered in a buffer kept
    /// across events: one allocation a run, not one per instant.)
    pub(super) fn ends_at(&mut self, t: u64, first: Event, policy: &mut dyn Policy) {
        let mut ended = std::mem::take(&mut self.ended_buf);
        ended.clear();
        self.gather_done(first, &mut ended);
        while let Some(&Reverse((
            next,
            _,
            e @ (Event::FlowDone(..) | Event::FlowsDone(_) | Event::HostTransfersDone(..)),
        ))) = self.events.peek()
            && next == t
        {
            self.events.pop();
            self.events_processed += 1;
            self.gather_done(e, &mut ended);
        }
        self.flows_done(&ended, policy);
        self.ended_buf = ended;
    }

    /// Appends what a flow-end event ended to `ended`, counting each flow
    /// of a group as the event it used to be, and frees the group.
    /// O(group).
    pub(super) fn gather_done(&mut self, e: Event, ended: &mut Vec<Ended>) {
        match e {
            Event::FlowDone(f, v) => ended.push(Ended::Flow(f, v)),
            Event::FlowsDone(g) => {
                let members = &mut self.done_groups[g as usize];
                self.events_processed += members.len() as u64 - 1;
                ended.extend(members.drain(..).map(|(f, v)| Ended::Flow(f, v)));
                self.free_groups.push(g);
            }
            Event::HostTransfersDone(job, epoch) => ended.push(Ended::HostTransfers(job, epoch)),
            _ => {}
        }
    }

    /// What ended at this instant, in event order (a flow's stale version
    /// is skipped): the flows leave the network together, each max-min
    /// component they leave re-rated once, then each one's job moves on, in
    /// event order.
    pub(super) fn flows_done(&mut self, events: &[Ended], policy: &mut dyn Policy) {
        // (job, epoch, the flow's index in its collective; none for the
        // collective's transfers inside hosts), and the flows.
        let mut parts: smallvec::SmallVec<[(JobId, u64, Option<usize>); 16]> =
            smallvec::SmallVec::with_capacity(events.len());
        let mut ids: smallvec::SmallVec<[FlowId; 16]> = smallvec::SmallVec::new();
        for &e in events {
            match e {
                Ended::Flow(f, version) => {
                    if self.net.flow(f).is_none_or(|fl| fl.version != version) {
                        continue;
                    }
                    if let Some((job, epoch, index)) = self.flow_job.get_mut(f).and_then(Option::take) {
                        ids.push(f);
                        parts.push((job, epoch, Some(index)));
                    }
                }
                Ended::HostTransfers(job, epoch) => parts.push((job, epoch, None)),
            }
        }
        if !ids.is_empty() {
            let changed = self.net.remove_all(self.now, &ids);
            self.note_interactions();
            self.reschedule(&changed);
            for &(job, _, index) in &parts {
                if index.is_some() {
                    self.jobs[job].flows.ended(&self.net);
                }
            }
        }
        for (job, epoch, index) in parts {
            match index {
                Some(index) => self.flow_ended(job, epoch, index, policy),
                None if self.jobs[job].epoch == epoch => self.part_done(job, policy),
                None => {}
            }
        }
    }
}

/// What one flow-end event ended.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ended {
    /// A flow: (flow, version of its rate when the event was pushed).
    Flow(FlowId, u64),
    /// A collective's transfers inside hosts: (job, epoch).
    HostTransfers(JobId, u64),
}

#[cfg(test)]
mod tests {
    use super::JobFlows;
    use crate::network::Network;
    use crate::{SimConfig, Simulation};
    use orrery_model::{JobSpec, Work};
    use orrery_policy::Decision;

    #[test]
    fn flows_ending_together_as_one_event_give_the_same_bits_as_one_event_each() {
        // CASSINI's testbed (§5.1: 24 one-GPU hosts, two per ToR, 2:1 to one
        // spine): rings of 2-6 hosts share uplinks, so flows are re-rated
        // while others run, end together and one by one, and the queue
        // holds other events at the same instants.
        let topo = orrery_model::setups::cassini();
        let models = ["resnet50", "vgg19", "bert"];
        let jobs: Vec<JobSpec> = (0..9)
            .map(|i| {
                let iterations = Work::Iterations(300 + 100 * (i as u64 % 3));
                JobSpec::new(format!("j{i}"), models[i % 3], 32, 2 + 2 * (i as u32 % 3), iterations, 3.0 * i as f64)
            })
            .collect();
        let run = |policy: &str, grouped: bool| {
            let cfg = SimConfig { seed: 5, jitter: 0.02, skip: false, ..Default::default() };
            let mut sim = Simulation::new(&topo, &jobs, cfg, false);
            sim.group_ends = grouped;
            let mut p = orrery_policy::compose::by_name(policy, 5).expect("a policy");
            sim.run(p.as_mut(), &mut |_, _| {});
            let ends: Vec<[u64; 4]> = sim
                .jobs
                .iter()
                .map(|j| {
                    let h = &j.iteration_ms;
                    [j.finish_ns.unwrap_or(u64::MAX), j.iterations_done, h.sum().to_bits(), h.max().to_bits()]
                })
                .collect();
            (ends, sim.events_processed, sim.seq)
        };
        for policy in ["fifo", "metronome", "themis+cassini", "orrery"] {
            let (grouped, events, pushed) = run(policy, true);
            let (one_each, events_one_each, pushed_one_each) = run(policy, false);
            assert_eq!(grouped, one_each, "{policy}: grouping changed a job's result");
            assert_eq!(events, events_one_each, "{policy}: a group counts as its flows' events");
            // Rings of 2-6 flows: at least a fifth fewer entries pushed (0.59
            // of them under `fifo`, 0.72 under `orrery`, which packs rings
            // onto fewer hosts).
            assert!(5 * pushed < 4 * pushed_one_each, "{policy}: {pushed} pushed grouped, {pushed_one_each} one each");
        }
    }

    #[test]
    fn a_ring_inside_one_host_is_timed_at_its_cap_with_one_event_per_collective() {
        // Two four-GPU hosts; a four-GPU ring fits one. Each of its
        // all-reduce's four transfers sends 2·3/4 of the payload at the
        // host's 200 Gbit/s (PCIe, `INTRA_HOST_GBPS`) and ends
        // ceil(bits / 200) ns after the collective starts, as a flow alone
        // on no link does.
        let topo = orrery_model::setups::LeafSpine {
            racks: 1,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 4,
            gpu_type: "a100".into(),
            host_gbps: 100.0,
            uplink_gbps: 100.0,
        }
        .build("two-hosts")
        .expect("valid");
        let iterations = 50;
        let jobs = [JobSpec::new("ring", "resnet50", 32, 4, Work::Iterations(iterations), 0.0)];
        let cfg = SimConfig { seed: 1, jitter: 0.0, skip: false, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        let mut fifo = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
        sim.run(fifo.as_mut(), &mut |_, _| {});
        let j = &sim.jobs[0];
        assert_eq!(j.iterations_done, iterations);
        assert!(j.workers.iter().all(|&h| h == j.workers[0]), "one host: {:?}", j.workers);
        let mut expected_ns = 0;
        let mut segments = 0;
        for seg in &j.shape.segments {
            segments += 1;
            expected_ns += match *seg {
                orrery_model::Segment::Compute { ms } => (ms * 1e6).round() as u64,
                orrery_model::Segment::Comm { collective, payload_bytes, group, .. } => {
                    let gbps = seg.intra_host_gbps();
                    assert_eq!(gbps, 200.0);
                    orrery_model::placed::rank_transfers(4, collective, payload_bytes, group)
                        .iter()
                        .map(|&(_, _, bits)| (bits / gbps).ceil() as u64)
                        .max()
                        .unwrap_or(0)
                }
            };
        }
        let h = &j.iteration_ms;
        assert!(expected_ns > 0);
        let mean = h.sum() / h.len() as f64;
        assert!(
            (h.max() - expected_ns as f64 / 1e6).abs() < 1e-9 && (mean - h.max()).abs() < 1e-9,
            "iterations of {mean} ms on average, {} at most; expected {} ms",
            h.max(),
            expected_ns as f64 / 1e6
        );
        // One event to start each iteration and one per segment (four per
        // collective when each transfer was a flow), and the arrival.
        assert!(
            sim.events_processed <= iterations * (segments + 1) + 1,
            "{} events for {iterations} iterations of {segments} segments",
            sim.events_processed
        );
    }

    #[test]
    fn a_throttle_caps_a_split_flow_at_its_share_and_a_repeated_one_changes_nothing() {
        // Two one-GPU hosts in two racks under two 10 Gbit/s spines: a
        // two-worker ring whose flows are each routed over both spines (two
        // subflows of half the flow, capped at 5 Gbit/s each). vgg16's
        // 528 MB all-reduce takes seconds at 10 Gbit/s, so at 2 s the first
        // one is in flight. A throttle to 4 Gbit/s then caps each subflow
        // at 2 (half of 4, as subflows started under it are), not at 4
        // (8 a flow, twice the throttle); the same throttle again re-rates
        // nothing.
        let topo = orrery_model::setups::LeafSpine {
            racks: 2,
            hosts_per_rack: 1,
            spines: 2,
            gpus_per_host: 1,
            gpu_type: "a100".into(),
            host_gbps: 10.0,
            uplink_gbps: 10.0,
        }
        .build("two-racks")
        .expect("valid");
        let jobs = [JobSpec::new("ring", "vgg16", 32, 2, Work::Iterations(5), 0.0)];
        let in_flight = |throttles: usize| {
            let cfg = SimConfig { seed: 1, jitter: 0.0, skip: false, max_time_s: Some(2.5), ..Default::default() };
            let mut sim = Simulation::new(&topo, &jobs, cfg, false);
            let route = |flow| Decision::Route { job: 0, flow, paths: vec![0, 1] };
            sim.script_iterations(vec![(0, 0, None, route(0)), (0, 0, None, route(1))]);
            sim.script(
                (0..throttles)
                    .map(|k| (2.0 + 0.1 * k as f64, Decision::Throttle { job: 0, gbps: Some(4.0) }))
                    .collect(),
            );
            let mut fifo = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
            sim.run(fifo.as_mut(), &mut |_, _| {});
            let live = sim.jobs[0].flows.live(&sim.net);
            let caps: Vec<(f64, f64, u64)> = live
                .iter()
                .filter_map(|&f| sim.net.flow(f))
                .map(|fl| (fl.cap_gbps, fl.rate_gbps, fl.version))
                .collect();
            caps
        };
        let before = in_flight(0);
        assert_eq!(before.len(), 4, "two flows of two subflows each in flight at 2.5 s: {before:?}");
        assert!(before.iter().all(|&(cap, rate, _)| cap == 5.0 && rate == 5.0), "{before:?}");
        let once = in_flight(1);
        assert_eq!(once.len(), 4, "{once:?}");
        assert!(once.iter().all(|&(cap, rate, _)| cap == 2.0 && rate == 2.0), "half of the throttle each: {once:?}");
        // Throttled again at 2.1 and 2.2 s: the same caps, rates and versions.
        assert_eq!(in_flight(3), once);
    }

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
