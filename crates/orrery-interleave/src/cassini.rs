//! CASSINI's Table 2 snapshots, computed from the model zoo (reproduction notes).

use crate::compat::{JobInput, Report, Request};
use orrery_model::Priority;

/// One snapshot of CASSINI Table 2.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    /// Snapshot id.
    pub id: u32,
    /// (model, batch size) as the table lists them.
    pub jobs: &'static [(&'static str, u32)],
    /// The paper's compatibility score.
    pub paper_score: f64,
    /// The paper's time-shifts, ms.
    pub paper_shifts_ms: &'static [f64],
}

/// CASSINI Table 2.
pub const TABLE2: &[Snapshot] = &[
    Snapshot {
        id: 1,
        jobs: &[("wideresnet101", 800), ("vgg16", 1400)],
        paper_score: 1.0,
        paper_shifts_ms: &[0.0, 150.0],
    },
    Snapshot {
        id: 2,
        jobs: &[("vgg19", 1400), ("vgg16", 1700), ("resnet50", 1600)],
        paper_score: 1.0,
        paper_shifts_ms: &[0.0, 158.0, 46.0],
    },
    Snapshot { id: 3, jobs: &[("vgg19", 1024), ("vgg16", 1200)], paper_score: 0.9, paper_shifts_ms: &[0.0, 100.0] },
    Snapshot { id: 4, jobs: &[("roberta", 12), ("roberta", 12)], paper_score: 0.8, paper_shifts_ms: &[0.0, 60.0] },
    Snapshot {
        id: 5,
        jobs: &[("bert", 8), ("vgg19", 1400), ("wideresnet101", 800)],
        paper_score: 0.6,
        paper_shifts_ms: &[0.0, 42.0, 191.0],
    },
];

/// Workers per job assumed for the snapshots (the paper does not say).
pub const WORKERS: u32 = 8;

/// Solves a snapshot on one 50 Gbit/s link of A100 servers. Batch sizes of
/// 100 or more are read as global batches split over [`WORKERS`]; BERT's and
/// RoBERTa's (8, 12) are per GPU, as CASSINI Table 3 lists 8–32 per GPU.
pub fn snapshot(s: &Snapshot) -> Report {
    let jobs = s
        .jobs
        .iter()
        .enumerate()
        .map(|(i, &(m, b))| JobInput {
            name: format!("{m}-{i}"),
            priority: if i == 0 { Priority::High } else { Priority::Low },
            period_ms: None,
            phases: None,
            model: Some(m.to_string()),
            batch: Some(if b >= 100 { b.div_ceil(WORKERS) } else { b }),
            workers: Some(WORKERS),
            gpu: Some("a100".into()),
        })
        .collect();
    let req = Request { link_gbps: 50.0, precision: None, idle_injection: Some(false), jobs };
    match req.solve(None) {
        Ok((_, _, report)) => report,
        Err(e) => unreachable!("static snapshot {} is valid: {e}", s.id),
    }
}
