//! A job on concrete hosts: which host each worker runs on, the iteration
//! shape that placement gives, and the flows each collective becomes. The
//! simulator executes exactly this, and network-aware policies predict with it.

use crate::shape::{Collective, Group, IterationShape};
use crate::topology::{HostId, LinkId, SharedPaths, Topology, ecmp_index};
use crate::zoo::{Placement, model};
use crate::{JobSpec, Segment};
use std::collections::HashMap;

/// A collective and its groups: what a segment's pairs of ranks, and so
/// their paths, depend on (not its payload).
type CollectiveKind = (Collective, Group);

/// A placed job.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// Host of each worker, in ring order (the placement's order).
    pub workers: Vec<HostId>,
    /// Index on its host of each worker's first GPU. [`place`] puts a
    /// job's workers on GPUs 0, 1, … of every host (rail-aligned); the
    /// simulator replaces them with the GPUs it hands out
    /// (`[sim] gpus`). Only a rail fabric routes by them.
    pub gpus: Vec<u32>,
    /// Iteration shape on this placement, alone.
    pub shape: IterationShape,
}

/// Places `spec` on `hosts` (GPUs per host): workers take `gpus_per_worker`
/// GPUs each, the GPU type is the first host's, flows run at the slowest link
/// between neighbouring hosts. O(hosts · (V + E)) for the paths.
/// A job with an explicit `shape` runs it; otherwise its zoo model's. None
/// when the model is unknown (and no shape given) or no GPUs are given.
pub fn place(topo: &Topology, spec: &JobSpec, hosts: &[(HostId, u32)]) -> Option<Placed> {
    let first = hosts.first()?.0;
    // A mesh job's collectives run among its ranks, one per GPU, however
    // many GPUs a worker (a pod) holds.
    let per_worker = if spec.parallelism.is_some() { 1 } else { spec.gpus_per_worker.max(1) };
    let mut workers = Vec::new();
    let mut gpus = Vec::new();
    let mut per_host = Vec::new();
    let mut next_gpu: std::collections::BTreeMap<HostId, u32> = std::collections::BTreeMap::new();
    for &(h, g) in hosts {
        let w = g.div_ceil(per_worker);
        workers.extend(std::iter::repeat_n(h, w as usize));
        let next = next_gpu.entry(h).or_default();
        gpus.extend((0..w).map(|k| *next + k * per_worker));
        *next += g;
        if w > 0 {
            per_host.push(w);
        }
    }
    let gpu = crate::gpu::gpu_type(&topo.hosts.get(first)?.gpu_type).or_else(|| crate::gpu::gpu_type("v100"))?;
    // Flows run at the slowest link between ring neighbours: the NICs, or an
    // uplink slower than them (CASSINI's 2x25 Gbit/s ToR uplinks under 50
    // Gbit/s NICs), so the shape is the job's time alone on this placement.
    let host_nic = hosts.iter().map(|&(h, _)| topo.host_nic_gbps(h)).fold(f64::INFINITY, f64::min);
    let mut path = f64::INFINITY;
    let used: Vec<HostId> = hosts.iter().filter(|h| h.1 > 0).map(|h| h.0).collect();
    if used.len() > 1 {
        for i in 0..used.len() {
            path = path.min(host_pair_gbps(topo, used[i], used[(i + 1) % used.len()]));
        }
    }
    let nic = host_nic.min(path);
    let shape = match (&spec.shape, crate::mesh::llm(&spec.model)) {
        (Some(explicit), _) => {
            let mut shape = explicit.iteration(workers.len() as u32, per_host.len() as u32, nic);
            share_own_links(topo, (&workers, &gpus), &mut shape);
            shape
        }
        (None, Some(arch)) => {
            // On rails each rank sends on its own GPU's NIC, not a share of
            // the host's: the NIC of a GPU times the ranks on a host.
            let host_nic = if topo.rails {
                let per_gpu = hosts
                    .iter()
                    .map(|&(h, _)| topo.host_nic_gbps(h) / f64::from(topo.hosts[h].gpus.max(1)))
                    .fold(f64::INFINITY, f64::min);
                per_gpu * f64::from(per_host.iter().copied().max().unwrap_or(1).max(1))
            } else {
                host_nic
            };
            mesh_iteration(arch, spec, gpu, &per_host, (host_nic, path))
        }
        (None, None) => model(&spec.model)?.shape(gpu, spec.batch, &Placement { gpus_per_host: per_host }, nic),
    };
    Some(Placed { workers, gpus, shape })
}

/// The rate between two hosts a ring can use: the bottleneck of their ECMP
/// paths, or on a rail fabric the sum over rails of each aligned rail's
/// (NCCL runs a ring per rail). O(paths).
fn host_pair_gbps(topo: &Topology, a: HostId, b: HostId) -> f64 {
    if !topo.rails {
        return topo.bottleneck_gbps(a, b);
    }
    (0..topo.out_links(a).len())
        .map(|r| {
            topo.rail_paths(a, b, r)
                .iter()
                .map(|p| p.iter().map(|&l| topo.links[l].gbps).fold(f64::INFINITY, f64::min))
                .fold(f64::INFINITY, f64::min)
        })
        .filter(|g| g.is_finite())
        .sum::<f64>()
        .max(f64::MIN_POSITIVE)
}

/// The equal-cost paths of a flow from worker `src` to worker `dst` of a
/// job on `workers` (hosts) and `gpus` (each worker's GPU on its host):
/// on a rail fabric those of the destination GPU's rail
/// ([`Topology::rail_paths`], as NCCL's PXN sends), elsewhere the two
/// hosts' ECMP set. Empty between ranks of one host. O(1) memoised off
/// rails, O(paths · hops) on them.
pub fn rank_paths(topo: &Topology, workers: &[HostId], gpus: &[u32], src: usize, dst: usize) -> SharedPaths {
    let (Some(&a), Some(&b)) = (workers.get(src), workers.get(dst)) else { return SharedPaths::from([]) };
    if !topo.rails {
        return topo.shared_paths(a, b);
    }
    let rail = topo.rail_of(b, gpus.get(dst).copied().unwrap_or(0));
    topo.rail_paths(a, b, rail).into()
}

/// An explicit shape's grouped collectives with the job's own flows
/// sharing links: when `k` of a collective's flows cross one link (both
/// stages' data-parallel rings of a pipeline on one uplink), each runs at
/// no more than the link's `1/k`, so the time alone is what the job
/// measures alone and its arcs demand no more than the link. Flow `i`
/// between two hosts takes the `i mod n`-th of their `n` equal-cost paths
/// (an even spread; the job's ECMP hash is not known here). O(distinct
/// groups × flows × path length).
fn share_own_links(topo: &Topology, (workers, gpus): (&[HostId], &[u32]), shape: &mut IterationShape) {
    let mut slowed: Vec<((Collective, Group), f64)> = Vec::new();
    for seg in &mut shape.segments {
        let Segment::Comm { collective, group, gbps, hosts, .. } = seg else { continue };
        if group.is_all() || *hosts < 2 {
            continue;
        }
        let key = (*collective, *group);
        let factor = match slowed.iter().find(|(k, _)| *k == key) {
            Some(&(_, f)) => f,
            None => {
                let mut count: std::collections::HashMap<LinkId, u32> = std::collections::HashMap::new();
                for (i, (src, dst, _)) in
                    rank_transfers(workers.len(), *collective, 1.0, *group).into_iter().enumerate()
                {
                    let paths = rank_paths(topo, workers, gpus, src, dst);
                    if paths.is_empty() {
                        continue;
                    }
                    for &l in &paths[i % paths.len()] {
                        *count.entry(l).or_default() += 1;
                    }
                }
                let f = count
                    .iter()
                    .filter_map(|(&l, &k)| topo.links.get(l).map(|link| f64::from(k) * *gbps / link.gbps))
                    .fold(1.0, f64::max);
                slowed.push((key, f));
                f
            }
        };
        *gbps /= factor;
    }
}

/// An LLM job's iteration on hosts holding `per_host` of its ranks each,
/// with `host_nic` Gbit/s of NIC per host and `path` Gbit/s on the slowest
/// link between neighbouring hosts: its mesh (data-parallel over its
/// workers when it gives none) timed on `gpu` ([`crate::mesh::shape`]).
/// Each rank has its share of the host's NICs (one rail NIC per GPU), a
/// flow no faster than the slowest link; a host is one NVLink domain.
/// O(chunks).
pub fn mesh_iteration(
    arch: &crate::mesh::LlmArch,
    spec: &JobSpec,
    gpu: &crate::GpuType,
    per_host: &[u32],
    (host_nic, path): (f64, f64),
) -> IterationShape {
    use crate::mesh::{Mesh, published::matmul_efficiency, shape::iteration_shape, timing};
    let mesh = spec.parallelism.unwrap_or(Mesh { dp: spec.workers.max(1), ..Mesh::default() });
    // On other GPUs than its request (elastic data parallelism): the same
    // global batch on the replicas those GPUs hold.
    let ranks: u32 = per_host.iter().sum();
    let cell = mesh.tp * mesh.pp;
    let mesh =
        if ranks != mesh.gpus() && cell > 0 && ranks.is_multiple_of(cell) { mesh.at_dp(ranks / cell) } else { mesh };
    let on_a_host = per_host.iter().copied().max().unwrap_or(1).max(1);
    let hw = timing::Hardware {
        // GPUs without a published peak: a V100's scaled by their speed.
        peak_tflops: gpu.peak_tflops_16bit.unwrap_or(125.0 * gpu.speed_vs_v100),
        efficiency: matmul_efficiency(),
        hbm_gbytes_per_s: gpu.hbm_gbytes_per_s.unwrap_or(900.0 * gpu.speed_vs_v100),
        nvlink_gbps: if gpu.nvlink_gbps > 0.0 { gpu.nvlink_gbps } else { crate::zoo::INTRA_HOST_GBPS },
        nvlink_domain: on_a_host,
        nic_gbps: (host_nic / f64::from(on_a_host)).min(path),
    };
    let recipe = timing::Recipe { micro_batch: spec.batch.max(1), ..timing::Recipe::default() };
    iteration_shape(arch, &mesh, &recipe, &hw).0
}

/// (source host, destination host, bits) of every flow of a collective over
/// `workers`, in all groups of `group` at once. Ring collectives: each
/// worker sends to the next of its group. Point-to-point: among all
/// workers (one GPipe tick), every stage boundary forward; in a mesh's
/// pipelines, each stage to both neighbours (1F1B's activations forward and
/// gradients back). All-to-all: everyone to everyone in the group.
/// Workers past the last whole group take no part. O(flows).
pub fn transfers(
    workers: &[HostId],
    collective: Collective,
    payload_bytes: f64,
    group: Group,
) -> Vec<(HostId, HostId, f64)> {
    rank_transfers(workers.len(), collective, payload_bytes, group)
        .into_iter()
        .map(|(s, d, bits)| (workers[s], workers[d], bits))
        .collect()
}

/// [`transfers`] between worker indices (ranks) of a job of `n` workers,
/// in the same order. O(flows).
pub fn rank_transfers(n: usize, collective: Collective, payload_bytes: f64, group: Group) -> Vec<(usize, usize, f64)> {
    if !group.is_all() {
        return grouped(n, collective, payload_bytes, group);
    }
    if n < 2 {
        return Vec::new();
    }
    let per_worker_bits = collective.wire_bytes_per_worker(payload_bytes, n as u32) * 8.0;
    match collective {
        Collective::RingAllReduce | Collective::AllGather => {
            (0..n).map(|i| (i, (i + 1) % n, per_worker_bits)).collect()
        }
        Collective::PointToPoint => (0..n - 1).map(|i| (i, i + 1, payload_bytes * 8.0)).collect(),
        Collective::AllToAll => {
            let each = per_worker_bits / (n - 1) as f64;
            (0..n).flat_map(|i| (0..n).filter(move |&k| k != i).map(move |k| (i, k, each))).collect()
        }
    }
}

/// [`transfers`] within groups of `size` workers `stride` apart. Worker
/// `i` is member `d = (i / stride) mod size` of the group whose first
/// member is `i − d·stride`. O(flows).
fn grouped(n: usize, collective: Collective, payload_bytes: f64, group: Group) -> Vec<(usize, usize, f64)> {
    let (k, s) = (group.size as usize, group.stride.max(1) as usize);
    let whole = if k == 0 { 0 } else { n / (k * s) * (k * s) };
    if k < 2 || whole == 0 {
        return Vec::new();
    }
    let per_worker_bits = collective.wire_bytes_per_worker(payload_bytes, group.size) * 8.0;
    let mut out = Vec::new();
    for i in 0..whole {
        let d = (i / s) % k;
        let member = |e: usize| i - d * s + e * s;
        match collective {
            Collective::RingAllReduce | Collective::AllGather => out.push((i, member((d + 1) % k), per_worker_bits)),
            Collective::PointToPoint => {
                if d + 1 < k {
                    out.push((i, member(d + 1), payload_bytes * 8.0));
                }
                if d > 0 {
                    out.push((i, member(d - 1), payload_bytes * 8.0));
                }
            }
            Collective::AllToAll => {
                let each = per_worker_bits / (k - 1) as f64;
                out.extend((0..k).filter(|&e| e != d).map(|e| (i, member(e), each)));
            }
        }
    }
    out
}

impl Placed {
    /// The circle a mesh job draws on each link it crosses: every network
    /// segment's arc at its per-flow rate times the number of its flows on
    /// that link (the ECMP path each flow takes, as in the simulator). A
    /// mesh sends many flows at once (a DP ring per TP rank, 8 from each
    /// host), so one link carries several times the rate of one worker.
    /// None for a job without grouped collectives: its one ring crosses a
    /// link once and its circle ([`IterationShape::circle`]) is its demand
    /// everywhere. O(flows × path length).
    pub fn link_circles(&self, topo: &Topology, job: usize) -> Option<HashMap<LinkId, crate::Circle>> {
        self.links_and_circles(topo, job).1
    }

    /// [`Placed::links`] and [`Placed::link_circles`] from one routing of
    /// each kind of collective: CASSINI needs both for every candidate, and
    /// routing twice was a sixth of `themis+cassini`'s run at 4,096 hosts
    /// with LLM meshes. O(flows × path length + links log links).
    pub fn links_and_circles(
        &self,
        topo: &Topology,
        job: usize,
    ) -> (Vec<LinkId>, Option<HashMap<LinkId, crate::Circle>>) {
        use crate::shape::Arc;
        // Flows per link of each kind of collective, by link: a pipeline's
        // micro-batches repeat the same sends, whose pairs and paths do not
        // depend on the payload, so each kind is routed once.
        let mut counted: Vec<(CollectiveKind, Vec<(LinkId, u32)>)> = Vec::new();
        let mut crossed: Vec<LinkId> = Vec::new();
        for seg in &self.shape.segments {
            let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
            if counted.iter().any(|(key, _)| *key == (collective, group)) {
                continue;
            }
            crossed.clear();
            for (i, (src, dst, _)) in
                rank_transfers(self.workers.len(), collective, payload_bytes, group).into_iter().enumerate()
            {
                let paths = rank_paths(topo, &self.workers, &self.gpus, src, dst);
                if !paths.is_empty() {
                    crossed.extend_from_slice(&paths[ecmp_index(job, i, paths.len())]);
                }
            }
            crossed.sort_unstable();
            let count = crossed.chunk_by(|a, b| a == b).map(|run| (run[0], run.len() as u32)).collect();
            counted.push(((collective, group), count));
        }
        let mut links: Vec<LinkId> = counted.iter().flat_map(|(_, c)| c.iter().map(|&(l, _)| l)).collect();
        links.sort_unstable();
        links.dedup();
        let grouped = self.shape.segments.iter().any(|s| matches!(s, Segment::Comm { group, .. } if !group.is_all()));
        if !grouped {
            return (links, None);
        }
        let period_ms = self.shape.period_ms();
        let mut out: HashMap<LinkId, crate::Circle> = HashMap::new();
        let mut t = 0.0;
        for seg in &self.shape.segments {
            let d = seg.duration_ms();
            let rate = seg.network_gbps();
            if let Segment::Comm { collective, group, .. } = *seg
                && rate > 0.0
                && d > 0.0
                && let Some((_, count)) = counted.iter().find(|(key, _)| *key == (collective, group))
            {
                for &(l, k) in count {
                    let gbps = rate * f64::from(k);
                    out.entry(l).or_insert_with(|| crate::Circle { period_ms, arcs: Vec::new() }).arcs.push(Arc {
                        start_ms: t,
                        duration_ms: d,
                        gbps,
                    });
                }
            }
            t += d;
        }
        (links, Some(out))
    }

    /// Directed links the job's flows cross under ECMP (`job` seeds the hash,
    /// as in the simulator), sorted and without repeats.
    pub fn links(&self, topo: &Topology, job: usize) -> Vec<LinkId> {
        self.links_where(topo, |i, paths, out| out.extend_from_slice(&paths[ecmp_index(job, i, paths.len())]))
    }

    /// Directed links on any equal-cost path of the job's flows: those it
    /// may cross whichever spine ECMP or a route picks. Sorted, no repeats.
    /// O(flows + host pairs × paths × path length): flows between the same
    /// two hosts (a mesh's ranks on them) are looked up once.
    pub fn links_on_any_path(&self, topo: &Topology) -> Vec<LinkId> {
        // (source host, destination host, destination rail): what a flow's paths depend on.
        let mut pairs: Vec<(HostId, HostId, usize)> = Vec::new();
        let (w, g) = (&self.workers, &self.gpus);
        for seg in &self.shape.segments {
            let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
            pairs.extend(
                rank_transfers(w.len(), collective, payload_bytes, group)
                    .into_iter()
                    .filter(|&(s, d, _)| w[s] != w[d])
                    .map(|(s, d, _)| (w[s], w[d], topo.rail_of(w[d], g.get(d).copied().unwrap_or(0)))),
            );
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut out = Vec::new();
        for (src, dst, rail) in pairs {
            if topo.rails {
                topo.rail_paths(src, dst, rail).iter().for_each(|p| out.extend_from_slice(p));
            } else {
                topo.shared_paths(src, dst).iter().for_each(|p| out.extend_from_slice(p));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The links `pick` takes from the paths of each transfer (by its index)
    /// between two hosts. O(transfers × path length).
    fn links_where(&self, topo: &Topology, pick: impl Fn(usize, &[Vec<LinkId>], &mut Vec<LinkId>)) -> Vec<LinkId> {
        let mut out = Vec::new();
        // A kind of collective already routed adds no link (its pairs and
        // paths do not depend on the payload): a pipeline's micro-batches.
        let mut seen: Vec<CollectiveKind> = Vec::new();
        for seg in &self.shape.segments {
            let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
            if seen.contains(&(collective, group)) {
                continue;
            }
            seen.push((collective, group));
            for (i, (src, dst, _)) in
                rank_transfers(self.workers.len(), collective, payload_bytes, group).into_iter().enumerate()
            {
                let paths = rank_paths(topo, &self.workers, &self.gpus, src, dst);
                if !paths.is_empty() {
                    pick(i, &paths, &mut out);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{CollectiveSpec, ShapeSpec};
    use crate::setups::LeafSpine;

    /// testbed-pp-dp's job a: pp = 2, dp = 2, each stage's replicas in
    /// different racks of one 50 Gbit/s spine.
    fn pipeline_job() -> (Topology, JobSpec, Vec<(HostId, u32)>) {
        let topo = LeafSpine {
            racks: 2,
            hosts_per_rack: 4,
            spines: 1,
            gpus_per_host: 1,
            gpu_type: "a100".into(),
            host_gbps: 50.0,
            uplink_gbps: 50.0,
        }
        .build("t")
        .expect("topology");
        let mut spec = JobSpec::new("a", "pp-dp-mlp", 1, 4, crate::Work::Iterations(10), 0.0);
        spec.shape = Some(ShapeSpec {
            compute_ms: 450.0,
            collectives: vec![
                CollectiveSpec {
                    kind: Collective::PointToPoint,
                    bytes: 8.192e6,
                    layers: 5,
                    group: Group { stride: 2, size: 2 },
                },
                CollectiveSpec {
                    kind: Collective::RingAllReduce,
                    bytes: 8.3968e8,
                    layers: 1,
                    group: Group { stride: 1, size: 2 },
                },
            ],
        });
        (topo, spec, vec![(0, 1), (4, 1), (1, 1), (5, 1)])
    }

    #[test]
    fn a_grouped_explicit_shape_shares_the_links_its_own_flows_cross() {
        let (topo, spec, hosts) = pipeline_job();
        assert_eq!(spec.check(), Ok(()));
        let placed = place(&topo, &spec, &hosts).expect("placed");
        let comms: Vec<(f64, f64)> = placed
            .shape
            .segments
            .iter()
            .filter_map(|s| match *s {
                Segment::Comm { gbps, .. } => Some((gbps, s.duration_ms())),
                Segment::Compute { .. } => None,
            })
            .collect();
        assert_eq!(comms.len(), 6, "{comms:?}");
        // The pipeline's sends stay in a rack, one flow a host link: 1.6 MB
        // each way at 50 Gbit/s, 0.262 ms.
        assert!(comms[..5].iter().all(|&(g, d)| g == 50.0 && (d - 0.262144).abs() < 1e-6), "{comms:?}");
        // Both stages' rings cross rack 0's uplink (hosts 0→4 and 1→5):
        // each at 25 Gbit/s, 839.68 MB in 268.7 ms, not 134.3.
        let (g, d) = comms[5];
        assert_eq!(g, 25.0);
        assert!((d - 8.3968e8 * 8.0 / 25e9 * 1e3).abs() < 1e-6, "{d}");
        assert!((placed.shape.period_ms() - (450.0 + 5.0 * 0.262144 + d)).abs() < 1e-6);
        // Stages inside a rack, replicas across: the rings share no link.
        let apart = place(&topo, &spec, &[(0, 1), (1, 1), (4, 1), (5, 1)]).expect("placed");
        assert!(apart.shape.period_ms() < placed.shape.period_ms() - 100.0);
    }

    #[test]
    fn one_routing_gives_the_links_and_each_links_flows_times_their_rate() {
        // testbed-pp-dp's job a with both stages' rings across the racks:
        // rings 0↔4 and 1↔5 at 25 Gbit/s a flow, so each direction of the
        // fabric links between the racks carries two ring flows (50 Gbit/s)
        // and each host link one (25); the pipeline's sends stay in rack 0
        // and rack 1 on host links.
        let (topo, spec, hosts) = pipeline_job();
        let placed = place(&topo, &spec, &hosts).expect("placed");
        let (links, circles) = placed.links_and_circles(&topo, 0);
        assert_eq!(links, placed.links(&topo, 0));
        let circles = circles.expect("a grouped shape has circles per link");
        let mut on: Vec<LinkId> = circles.keys().copied().collect();
        on.sort_unstable();
        assert_eq!(on, links, "every link crossed carries an arc");
        let ring_gbps = |l: LinkId| circles[&l].arcs.iter().find(|a| a.duration_ms > 100.0).map(|a| a.gbps);
        let fabric = |l: LinkId| topo.links[l].from >= topo.hosts.len() && topo.links[l].to >= topo.hosts.len();
        let doubled: Vec<LinkId> = links.iter().copied().filter(|&l| ring_gbps(l) == Some(50.0)).collect();
        assert_eq!(doubled.len(), 4, "leaf 0 ↔ spine ↔ leaf 1, both directions: {doubled:?}");
        assert!(doubled.iter().all(|&l| fabric(l)));
        assert!(links.iter().filter(|&&l| !fabric(l)).all(|&l| ring_gbps(l) == Some(25.0)));
    }

    #[test]
    fn groups_that_do_not_tile_the_workers_are_named() {
        let (_, mut spec, _) = pipeline_job();
        spec.workers = 6;
        let e = spec.check().expect_err("stride 2 × size 2 does not tile 6");
        assert_eq!(e.field, "shape.collective.group");
        assert!(e.expected.contains("6 workers"), "{e:?}");
        let (_, mut spec, _) = pipeline_job();
        if let Some(s) = spec.shape.as_mut() {
            s.collectives[0].group = Group { stride: 0, size: 2 };
        }
        assert_eq!(spec.check().expect_err("stride 0").field, "shape.collective.group");
    }
}
