//! Clusters the simulator's integration tests share.

use orrery_model::Topology;
use orrery_model::setups::LeafSpine;

/// One rack of two single-A100 hosts, 50 Gbit/s links.
pub fn two_hosts() -> Topology {
    LeafSpine {
        racks: 1,
        hosts_per_rack: 2,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 50.0,
        uplink_gbps: 50.0,
    }
    .build("t")
    .expect("valid")
}
