//! A mesh job's iteration as the simulator runs it and the policies see
//! it: segments whose communication runs in groups (TP inside an NVLink
//! domain, pipeline sends between stages, the DP ring across replicas,
//! EP all-to-alls), so a circle has several arcs, on different links.
//!
//! Order of one iteration, alone (its period is [`IterationTime::total_ms`]):
//! `chunks` times { compute of `m/chunks` micro-batches, their TP
//! all-reduces, EP all-to-alls and pipeline sends }, the 1F1B bubble, the
//! DP collectives. With `chunks = min(m, MAX_CHUNKS)` the circle keeps
//! the micro-batches' rhythm without one segment per layer.

use super::timing::{Hardware, IterationTime, Recipe, fits_domain, iteration_time, pipeline_send_bytes};
use super::{LlmArch, Mesh};
use crate::shape::{Collective, Group, IterationShape, Segment};

/// Most compute chunks an iteration is cut into.
pub const MAX_CHUNKS: u32 = 8;

/// Hosts one group of `size` ranks `stride` apart spans when each host
/// holds `per_host` consecutive ranks. O(1).
pub fn hosts_spanned(stride: u32, size: u32, per_host: u32) -> u32 {
    if fits_domain(stride, size, per_host) {
        1
    } else {
        let span = u64::from(stride) * u64::from(size.max(1));
        (span.div_ceil(u64::from(per_host.max(1))) as u32).clamp(1, size.max(1))
    }
}

/// The iteration of `arch` on `mesh` under `recipe`, its ranks packed
/// `hw.nvlink_domain` to a host, alone; and its time. O(chunks).
pub fn iteration_shape(arch: &LlmArch, mesh: &Mesh, recipe: &Recipe, hw: &Hardware) -> (IterationShape, IterationTime) {
    let t = iteration_time(arch, mesh, recipe, hw);
    let traffic = mesh.traffic(arch, recipe.micro_batch);
    let per_host = hw.nvlink_domain.max(1);
    let chunks = mesh.microbatches.clamp(1, MAX_CHUNKS);
    let c = f64::from(chunks);
    // A collective of `wire` bytes per GPU among the groups of `group`.
    let comm = |collective: Collective, wire: f64, group: Group| {
        let hosts = hosts_spanned(group.stride, group.size, per_host);
        let gbps = if hosts == 1 { hw.nvlink_gbps } else { hw.nic_gbps };
        let payload_bytes = match collective {
            Collective::PointToPoint => wire,
            _ => wire / collective.wire_bytes_per_worker(1.0, group.size),
        };
        Segment::Comm { collective, payload_bytes, participants: group.size, hosts, gbps, group }
    };
    let mut segments = Vec::new();
    let tp = Group { stride: 1, size: mesh.tp };
    let ep = Group { stride: mesh.tp, size: mesh.ep };
    let pp = Group { stride: mesh.tp * mesh.dp, size: mesh.pp };
    let dp = Group { stride: mesh.tp, size: mesh.dp };
    // Per direction and micro-batch; the segment doubles it for inner stages.
    let per_direction = pipeline_send_bytes(arch, mesh, recipe) / f64::from(mesh.pp.saturating_sub(1).clamp(1, 2));
    let m_per_chunk = f64::from(mesh.microbatches.max(1)) / c;
    for _ in 0..chunks {
        segments.push(Segment::Compute { ms: t.compute_ms / c });
        if mesh.tp > 1 {
            segments.push(comm(Collective::RingAllReduce, traffic.tp / c, tp));
        }
        if mesh.ep > 1 && traffic.ep > 0.0 {
            segments.push(comm(Collective::AllToAll, traffic.ep / c, ep));
        }
        if mesh.pp > 1 {
            segments.push(comm(Collective::PointToPoint, per_direction * m_per_chunk, pp));
        }
    }
    if t.bubble_ms > 0.0 {
        segments.push(Segment::Compute { ms: t.bubble_ms });
    }
    if mesh.dp > 1 && traffic.dp > 0.0 {
        // The dense gradients on the DP ring; a MoE's expert gradients
        // among the dp/ep ranks that hold the same experts.
        let experts = Group { stride: mesh.tp * mesh.ep, size: mesh.dp / mesh.ep.max(1) };
        let rings: Vec<Segment> = [(traffic.dp - traffic.dp_experts, dp), (traffic.dp_experts, experts)]
            .into_iter()
            .filter(|&(bytes, group)| bytes > 0.0 && group.size > 1)
            .map(|(bytes, group)| comm(Collective::RingAllReduce, bytes, group))
            .collect();
        // The part of the DP time hidden under the backward pass runs
        // alongside the last compute: that compute is shortened by it, so
        // the period is the timing model's and the network still carries
        // every byte.
        let hidden = rings.iter().map(Segment::duration_ms).sum::<f64>() - t.dp_ms;
        if let Some(Segment::Compute { ms }) = segments.iter_mut().rev().find(|s| matches!(s, Segment::Compute { .. }))
        {
            *ms = (*ms - hidden).max(0.0);
        }
        segments.extend(rings);
    }
    (IterationShape { segments }, t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::llm;

    fn h100() -> Hardware {
        Hardware {
            peak_tflops: 989.0,
            efficiency: 0.61,
            hbm_gbytes_per_s: 3350.0,
            nvlink_gbps: 3600.0,
            nvlink_domain: 8,
            nic_gbps: 400.0,
        }
    }

    #[test]
    fn the_shape_takes_the_timing_models_time_and_every_dimension_is_an_arc() {
        let arch = llm("llama3-70b").expect("in the zoo");
        let mesh = Mesh { tp: 8, pp: 4, dp: 8, ep: 1, microbatches: 16, zero: 0, dp_min: 0 };
        let (shape, t) = iteration_shape(arch, &mesh, &Recipe::default(), &h100());
        assert!((shape.period_ms() / t.total_ms() - 1.0).abs() < 1e-9, "{} vs {}", shape.period_ms(), t.total_ms());
        // TP stays in the host (no arc); the pipeline sends and the DP ring
        // cross the network: 8 chunks of sends + 1 DP arc, the sends each
        // right after their chunk's TP all-reduce.
        let net: Vec<&Segment> = shape.segments.iter().filter(|s| s.network_gbps() > 0.0).collect();
        assert_eq!(net.len(), 8 + 1);
        assert!(shape.segments.iter().any(|s| matches!(s, Segment::Comm { hosts: 1, gbps, .. } if *gbps == 3600.0)));
        assert_eq!(shape.circle().arcs.len(), 9);
    }

    #[test]
    fn overlapped_dp_shortens_the_compute_before_it_not_the_bytes() {
        let arch = llm("llama3-8b").expect("in the zoo");
        let mesh = Mesh { tp: 8, dp: 16, microbatches: 4, ..Mesh::default() };
        let plain = iteration_shape(arch, &mesh, &Recipe::default(), &h100()).0;
        let overlapped = iteration_shape(arch, &mesh, &Recipe { dp_overlap: 0.5, ..Recipe::default() }, &h100()).0;
        let last = |s: &IterationShape| s.segments.last().map(Segment::wire_bytes_per_worker);
        assert_eq!(last(&plain), last(&overlapped));
        let dp_ms = plain.segments.last().map(Segment::duration_ms).unwrap_or(0.0);
        assert!((plain.period_ms() - overlapped.period_ms() - 0.5 * dp_ms).abs() < 1e-9);
    }

    #[test]
    fn a_moes_expert_gradients_run_among_the_ranks_that_hold_the_same_experts() {
        // Mixtral 8x7B at TP 2 × DP 16 with EP 4: each expert shard has
        // 16/4 = 4 replicas, ranks tp·ep = 8 apart; the dense weights'
        // replicas are the 16 DP ranks, 2 apart.
        let arch = llm("mixtral-8x7b").expect("in the zoo");
        let mesh = Mesh { tp: 2, dp: 16, ep: 4, microbatches: 4, ..Mesh::default() };
        assert_eq!(mesh.check(arch), None);
        let (shape, t) = iteration_shape(arch, &mesh, &Recipe::default(), &h100());
        assert!((shape.period_ms() / t.total_ms() - 1.0).abs() < 1e-9, "{} vs {}", shape.period_ms(), t.total_ms());
        let rings: Vec<(Group, f64)> = shape
            .segments
            .iter()
            .filter_map(|s| match s {
                Segment::Comm { collective: Collective::RingAllReduce, group, payload_bytes, .. }
                    if group.stride >= 2 =>
                {
                    Some((*group, *payload_bytes))
                }
                _ => None,
            })
            .collect();
        // Per GPU: 32 layers × 8 experts × 3·4096·14336 weights, a quarter
        // of the experts (EP 4), half of each (TP 2), 2 bytes each.
        let experts = 32.0 * 8.0 * 3.0 * 4096.0 * 14336.0;
        let dense = (arch.params() - experts) / 2.0 * 2.0;
        assert_eq!(rings.len(), 2, "{rings:?}");
        assert_eq!(rings[0].0, Group { stride: 2, size: 16 });
        assert!((rings[0].1 / dense - 1.0).abs() < 1e-12, "{} vs {dense}", rings[0].1);
        assert_eq!(rings[1].0, Group { stride: 8, size: 4 });
        assert!((rings[1].1 / (experts / 8.0 * 2.0) - 1.0).abs() < 1e-12, "{}", rings[1].1);
    }

    #[test]
    fn groups_span_hosts_by_their_stride() {
        assert_eq!(hosts_spanned(1, 8, 8), 1); // TP 8 in an HGX host
        assert_eq!(hosts_spanned(8, 4, 8), 4); // DP across 4 hosts
        assert_eq!(hosts_spanned(2, 8, 8), 2); // 8 ranks 2 apart: 16 ranks, 2 hosts
        assert_eq!(hosts_spanned(8, 9, 72), 1); // NVL72
    }
}
