//! The cluster orrery schedules on, read from Kubernetes: the racks and spines
//! of a [`NetworkTopology`], each node's GPUs from its allocatable
//! `nvidia.com/gpu` and its GPU type from its labels, and each node's link
//! rate from its [`NodeBandwidth`] (else the topology's `nodeGbps`).

use crate::crd::{Invalid, NetworkTopologySpec, NodeBandwidthSpec, validate_node_bandwidth, validate_topology};
use k8s_openapi::api::core::v1::Node;
use orrery_model::Topology;
use orrery_model::topology::{Builder, Ref, Tier};
use std::collections::BTreeMap;

/// Extended resource of NVIDIA's device plugin.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Node label naming the GPU type in orrery's words (`v100`, `a100`, ...).
pub const GPU_TYPE_LABEL: &str = "orrery.io/gpu-type";
/// NVIDIA GPU feature discovery's product label (`Tesla-V100-SXM2-16GB`, ...).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A resource is invalid.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A rack names a node the API server does not have.
    #[error("NetworkTopology {topology}: node {node:?} of rack {rack:?} is not a node of the cluster")]
    UnknownNode {
        /// Topology name.
        topology: String,
        /// Rack.
        rack: String,
        /// Node.
        node: String,
    },
    /// The topology builder refused it.
    #[error("NetworkTopology {0}: {1}")]
    Build(String, String),
}

/// A node's GPUs and GPU type as orrery reads them.
pub fn node_gpus(node: &Node) -> (u32, String) {
    let gpus = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(GPU_RESOURCE))
        .and_then(|q| q.0.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let kind = labels
        .get(GPU_TYPE_LABEL)
        .and_then(|t| orrery_model::gpu::gpu_type(t))
        .or_else(|| labels.get(GPU_PRODUCT_LABEL).and_then(|p| gpu_from_product(p)))
        .map_or("v100", |g| g.name);
    (gpus, kind.to_string())
}

/// GPU feature discovery's product names (`NVIDIA-A100-SXM4-40GB`,
/// `Tesla-V100-SXM2-32GB`) to orrery's GPU types: the longest orrery name
/// found as a dash-separated part.
fn gpu_from_product(product: &str) -> Option<&'static orrery_model::gpu::GpuType> {
    let lower = product.to_ascii_lowercase();
    let parts: Vec<&str> = lower.split(['-', '_', ' ']).collect();
    let with_memory = parts.windows(2).find_map(|w| orrery_model::gpu::gpu_type(&format!("{}-{}", w[0], w[1])));
    with_memory.or_else(|| parts.iter().find_map(|p| orrery_model::gpu::gpu_type(p)))
}

/// Builds the topology: hosts in rack order, named as their nodes; leaf `i`
/// is rack `i`'s switch. O(nodes + racks × spines).
pub fn build(
    name: &str,
    spec: &NetworkTopologySpec,
    nodes: &[Node],
    bandwidths: &BTreeMap<String, NodeBandwidthSpec>,
) -> Result<Topology, FabricError> {
    validate_topology(name, spec)?;
    let by_name: BTreeMap<&str, &Node> =
        nodes.iter().filter_map(|n| n.metadata.name.as_deref().map(|name| (name, n))).collect();
    let mut b = Builder::new();
    let spines: Vec<Ref> = (0..spec.spines).map(|s| b.switch(format!("spine{s}"), Tier::Spine)).collect();
    for rack in &spec.racks {
        let leaf = b.switch(rack.name.clone(), Tier::Leaf);
        for n in &rack.nodes {
            let node = by_name.get(n.as_str()).ok_or_else(|| FabricError::UnknownNode {
                topology: name.into(),
                rack: rack.name.clone(),
                node: n.clone(),
            })?;
            let (gpus, kind) = node_gpus(node);
            let gbps = match bandwidths.get(n) {
                Some(bw) => {
                    validate_node_bandwidth(n, bw)?;
                    bw.bandwidth_gbps
                }
                None => spec.node_gbps,
            };
            let h = b.host(n.clone(), gpus, &kind, 0, 0.0);
            b.cable(h, leaf, gbps);
        }
        for &s in &spines {
            b.cable(leaf, s, spec.uplink_gbps);
        }
    }
    b.build(name).map_err(|e| FabricError::Build(name.into(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Rack;

    pub(crate) fn node(name: &str, gpus: u32, product: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {GPU_PRODUCT_LABEL: product}},
            "status": {"allocatable": {GPU_RESOURCE: gpus.to_string(), "cpu": "32"}}
        }))
        .expect("node json")
    }

    #[test]
    fn gpu_products_map_to_orrery_types() {
        for (product, want) in [
            ("Tesla-V100-SXM2-16GB", "v100"),
            ("NVIDIA-A100-SXM4-40GB", "a100"),
            ("NVIDIA-A30", "a30"),
            ("Tesla-T4", "t4"),
            ("Tesla-V100-SXM2-32GB", "v100"),
        ] {
            assert_eq!(gpu_from_product(product).map(|g| g.name), Some(want), "{product}");
        }
    }

    #[test]
    fn a_topology_reads_nodes_and_their_bandwidth() {
        let spec = NetworkTopologySpec {
            racks: vec![
                Rack { name: "leaf-a".into(), nodes: vec!["n1".into(), "n2".into()] },
                Rack { name: "leaf-b".into(), nodes: vec!["n3".into()] },
            ],
            spines: 2,
            node_gbps: 25.0,
            uplink_gbps: 12.5,
        };
        let nodes = vec![node("n1", 4, "NVIDIA-A30"), node("n2", 4, "NVIDIA-A30"), node("n3", 1, "Tesla-T4")];
        let bw = BTreeMap::from([("n3".to_string(), NodeBandwidthSpec { bandwidth_gbps: 10.0 })]);
        let t = build("lab", &spec, &nodes, &bw).expect("builds");
        assert_eq!(t.hosts.len(), 3);
        assert_eq!(t.gpu_count(), 9);
        assert_eq!(t.hosts[2].gpu_type, "t4");
        assert_eq!(t.host_nic_gbps(0), 25.0);
        assert_eq!(t.host_nic_gbps(2), 10.0);
        let missing = build("lab", &spec, &nodes[..2], &bw).expect_err("n3 missing");
        assert!(missing.to_string().contains("node \"n3\" of rack \"leaf-b\""), "{missing}");
    }
}
