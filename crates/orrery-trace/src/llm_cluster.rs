//! An LLM-development cluster's workload (`generator = "llm-cluster"`):
//! pre-training, fine-tuning (SFT) and evaluation jobs as device meshes,
//! in the mix Acme's Seren cluster shows (Hu et al., "Characterization of
//! Large Language Model Development in the Datacenter", NSDI'24), with
//! Poisson arrivals at a target load.
//!
//! Where each parameter comes from:
//!
//! | parameter | value | source |
//! |---|---|---|
//! | share of jobs: evaluation, SFT | 64.9%, 14.9% | Acme, Seren, Fig. 3 (job count) |
//! | share of jobs: pre-training | 5.6% | Seren, Fig. 3: what evaluation, SFT and "other" (14.6%) leave; "other" (debugging, multimodal) is not generated, the three kinds are renormalised |
//! | pre-training's share of GPU time | 69.5% | Seren, Fig. 3 (GPU time) |
//! | evaluation: 1 to 8 GPUs, one host | median 1 GPU | AcmeTrace `cluster_summary.csv`: median GPUs of a GPU job 1 (Seren and Kalos); evaluation is most jobs |
//! | evaluation: 60 s to 30 min alone, log-uniform | median ≈ 330 s | `cluster_summary.csv`: median GPU-job run time 122 s (Seren), 124 s (Kalos); orrery's range (a job shorter than a minute is mostly start-up, which is not modelled) |
//! | SFT: 8 to 64 GPUs, 10 min to 2 h, log-uniform | | orrery's choice (Acme gives no per-kind sizes in its public files) |
//! | pre-training: 64 GPUs to half the cluster (at most 1,024, Acme's largest job) | | `cluster_summary.csv`: max GPUs 1,024; the rest orrery's choice |
//! | pre-training's run time | derived | the mean that gives pre-training its 69.5% of GPU time, given the other kinds' (log-uniform over ×1/3 to ×3 of it) |
//!
//! Models and meshes (orrery's choices, from the zoo's published
//! architectures): evaluation runs Llama 3 8B at TP = its GPUs (forward
//! and backward passes stand in for its forward-only work, so its time on
//! the GPUs is right but its kind of work is not); SFT runs Llama 3 8B at
//! TP 8 × DP or Llama 3 70B at TP 8 × PP 2 × DP; pre-training runs Llama 3
//! 70B at TP 8 × PP 4 × DP or Mixtral 8x7B at TP 1 × DP with EP 8. A job's
//! work is its run time alone in seconds (the driver turns it into
//! iterations on its placement).

use crate::TraceError;
use orrery_model::mesh::Mesh;
use orrery_model::{JobSpec, Work};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

/// Seren's job-count shares (Fig. 3): evaluation, SFT, pre-training.
pub const COUNT_SHARES: [(Kind, f64); 3] = [(Kind::Eval, 64.9), (Kind::Sft, 14.9), (Kind::Pretrain, 5.6)];

/// Pre-training's share of GPU time in Seren (Fig. 3).
pub const PRETRAIN_GPU_TIME_SHARE: f64 = 0.695;

/// A job's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Evaluation of a checkpoint: small and short.
    Eval,
    /// Supervised fine-tuning: a few hosts for up to hours.
    Sft,
    /// Pre-training: the largest meshes, most of the GPU time.
    Pretrain,
}

impl Kind {
    /// The id prefix of its jobs.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Eval => "eval",
            Kind::Sft => "sft",
            Kind::Pretrain => "pretrain",
        }
    }
}

/// Log-uniform draw in [lo, hi].
fn log_uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp()
}

/// Mean of a log-uniform variable on [lo, hi].
fn log_uniform_mean(lo: f64, hi: f64) -> f64 {
    (hi - lo) / (hi.ln() - lo.ln())
}

const EVAL_S: (f64, f64) = (60.0, 1800.0);
const SFT_S: (f64, f64) = (600.0, 7200.0);
const EVAL_GPUS: [u32; 4] = [1, 2, 4, 8];
const SFT_GPUS: [u32; 4] = [8, 16, 32, 64];

/// The pre-training sizes on a cluster of `cluster_gpus`: powers of two
/// from 64 to half the cluster, at most 1,024.
fn pretrain_gpus(cluster_gpus: u32) -> Vec<u32> {
    let top = (cluster_gpus / 2).min(1024);
    (6..=10).map(|k| 1u32 << k).filter(|&g| g <= top).collect()
}

/// The mean pre-training run time alone that gives pre-training
/// [`PRETRAIN_GPU_TIME_SHARE`] of the GPU time: with count shares c_k and
/// mean GPU-seconds per job E_k, c_p · g_p · d_p / Σ c_k E_k = share.
fn pretrain_mean_s(cluster_gpus: u32) -> f64 {
    let mean = |xs: &[u32]| xs.iter().map(|&g| f64::from(g)).sum::<f64>() / xs.len() as f64;
    let share = |kind| COUNT_SHARES.iter().find(|c| c.0 == kind).map_or(0.0, |c| c.1);
    let rest = share(Kind::Eval) * mean(&EVAL_GPUS) * log_uniform_mean(EVAL_S.0, EVAL_S.1)
        + share(Kind::Sft) * mean(&SFT_GPUS) * log_uniform_mean(SFT_S.0, SFT_S.1);
    let g = mean(&pretrain_gpus(cluster_gpus));
    PRETRAIN_GPU_TIME_SHARE / (1.0 - PRETRAIN_GPU_TIME_SHARE) * rest / (share(Kind::Pretrain) * g)
}

/// One job of `kind`: its model, mesh and run time alone.
fn job(kind: Kind, i: usize, cluster_gpus: u32, rng: &mut ChaCha8Rng) -> JobSpec {
    let pick = |rng: &mut ChaCha8Rng, xs: &[u32]| xs[rng.random_range(0..xs.len())];
    let (model, mesh, seconds) = match kind {
        Kind::Eval => {
            let g = pick(rng, &EVAL_GPUS);
            ("llama3-8b", Mesh { tp: g, ..Mesh::default() }, log_uniform(rng, EVAL_S.0, EVAL_S.1))
        }
        Kind::Sft => {
            let g = pick(rng, &SFT_GPUS);
            let s = log_uniform(rng, SFT_S.0, SFT_S.1);
            if g >= 16 && rng.random::<f64>() < 0.5 {
                ("llama3-70b", Mesh { tp: 8, pp: 2, dp: g / 16, microbatches: 8, ..Mesh::default() }, s)
            } else {
                ("llama3-8b", Mesh { tp: 8, dp: g / 8, microbatches: 2, ..Mesh::default() }, s)
            }
        }
        Kind::Pretrain => {
            let g = pick(rng, &pretrain_gpus(cluster_gpus));
            let mean = pretrain_mean_s(cluster_gpus);
            // Log-uniform over [m/3, 3m] has mean m·(3 − 1/3)/ln 9; scaled to m.
            let spread = log_uniform_mean(1.0 / 3.0, 3.0);
            let s = log_uniform(rng, mean / 3.0, mean * 3.0) / spread;
            if rng.random::<f64>() < 0.5 {
                ("llama3-70b", Mesh { tp: 8, pp: 4, dp: g / 32, microbatches: 16, ..Mesh::default() }, s)
            } else {
                ("mixtral-8x7b", Mesh { tp: 1, dp: g, ep: 8, microbatches: 1, ..Mesh::default() }, s)
            }
        }
    };
    let gpus = mesh.tp * mesh.pp * mesh.dp;
    let mut j = JobSpec::new(format!("{}-{i}", kind.name()), model, 1, gpus, Work::Seconds(seconds), 0.0);
    j.parallelism = Some(mesh);
    j
}

/// `n` jobs of an LLM cluster of `cluster_gpus` GPUs (at least 128:
/// pre-training takes 64 to half the cluster), arriving as a Poisson
/// process at `load` (the mean fraction of the GPUs the jobs would keep
/// busy if each ran alone: rate = load · G / mean GPU-seconds per job).
pub fn llm_cluster(n: usize, load: f64, cluster_gpus: u32, seed: u64) -> Result<Vec<JobSpec>, TraceError> {
    if !(load > 0.0 && load.is_finite()) {
        return Err(TraceError::field("load", format!("expected a positive fraction of GPUs, found {load}")));
    }
    if cluster_gpus < 128 {
        return Err(TraceError::field(
            "generator",
            format!(
                "llm-cluster: expected a cluster of at least 128 GPUs (pre-training takes 64 to half of it), found {cluster_gpus}"
            ),
        ));
    }
    let total: f64 = COUNT_SHARES.iter().map(|c| c.1).sum();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x11_4C1u64);
    let mut jobs = Vec::with_capacity(n);
    for i in 0..n {
        let mut u = rng.random::<f64>() * total;
        let mut kind = Kind::Eval;
        for &(k, share) in &COUNT_SHARES {
            kind = k;
            if u < share {
                break;
            }
            u -= share;
        }
        jobs.push(job(kind, i, cluster_gpus, &mut rng));
    }
    let gpu_seconds: f64 =
        jobs.iter().map(|j| f64::from(j.gpus()) * if let Work::Seconds(s) = j.work { s } else { 0.0 }).sum::<f64>()
            / n.max(1) as f64;
    let rate = load * f64::from(cluster_gpus) / gpu_seconds.max(1e-9);
    let exp = Exp::new(rate).map_err(|e| TraceError::field("load", format!("arrival rate {rate}: {e}")))?;
    let mut t = 0.0;
    for j in &mut jobs {
        t += exp.sample(&mut rng);
        j.arrival_s = t;
    }
    Ok(jobs)
}

/// Marks `share` of the SFT and pre-training jobs (drawn per job, seeded)
/// as elastic: their users allow any data-parallel width from one replica
/// (a MoE's EP width) up, at the same global batch (`Mesh::dp_min`).
/// Evaluation jobs, on one host, stay as they are.
pub fn allow_elastic(mut jobs: Vec<JobSpec>, share: f64, seed: u64) -> Result<Vec<JobSpec>, TraceError> {
    if !(0.0..=1.0).contains(&share) {
        return Err(TraceError::field("elastic", format!("expected a share from 0 to 1, found {share}")));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xE1A5);
    for j in &mut jobs {
        let draw = rng.random::<f64>();
        if let Some(m) = j.parallelism.as_mut()
            && !j.id.starts_with(Kind::Eval.name())
            && m.dp > m.ep.max(1)
            && draw < share
        {
            m.dp_min = m.ep.max(1);
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_reproduces_serens_shares_of_jobs_and_of_gpu_time() {
        let jobs = llm_cluster(20_000, 0.8, 512, 7).expect("valid");
        let kind = |j: &JobSpec| j.id.split('-').next().unwrap_or("").to_owned();
        let count = |k: &str| jobs.iter().filter(|j| kind(j) == k).count() as f64 / jobs.len() as f64;
        // Job counts, renormalised over the three kinds (64.9 + 14.9 + 5.6 = 85.4).
        assert!((count("eval") - 64.9 / 85.4).abs() < 0.01, "{}", count("eval"));
        assert!((count("sft") - 14.9 / 85.4).abs() < 0.01, "{}", count("sft"));
        assert!((count("pretrain") - 5.6 / 85.4).abs() < 0.01, "{}", count("pretrain"));
        // Pre-training's GPU time: 69.5% (Seren), within 3 points over 20,000 draws.
        let gpu_s = |j: &JobSpec| f64::from(j.gpus()) * if let Work::Seconds(s) = j.work { s } else { 0.0 };
        let all: f64 = jobs.iter().map(gpu_s).sum();
        let pre: f64 = jobs.iter().filter(|j| kind(j) == "pretrain").map(gpu_s).sum();
        assert!((pre / all - 0.695).abs() < 0.03, "pre-training's GPU time {}", pre / all);
        // Every job is a valid mesh; evaluation fits one host; pre-training
        // takes 64 to 256 GPUs on 512.
        for j in &jobs {
            assert_eq!(j.check(), Ok(()), "{}", j.id);
            match kind(j).as_str() {
                "eval" => assert!(j.gpus() <= 8),
                "pretrain" => assert!((64..=256).contains(&j.gpus()), "{} {}", j.id, j.gpus()),
                _ => assert!((8..=64).contains(&j.gpus())),
            }
        }
    }

    #[test]
    fn elastic_marks_the_share_of_training_meshes_and_leaves_evaluation_rigid() {
        let jobs = allow_elastic(llm_cluster(4_000, 0.8, 512, 5).expect("valid"), 0.5, 5).expect("valid");
        let training: Vec<&JobSpec> = jobs.iter().filter(|j| !j.id.starts_with("eval")).collect();
        let elastic = training.iter().filter(|j| j.parallelism.is_some_and(|m| m.dp_min > 0)).count();
        let share = elastic as f64 / training.len() as f64;
        // Half of those wider than one replica (an 8-GPU SFT job at DP 1 cannot shrink).
        assert!((0.3..0.55).contains(&share), "{share}");
        for j in &jobs {
            assert_eq!(j.check(), Ok(()), "{}", j.id);
            if j.id.starts_with("eval") {
                assert_eq!(j.parallelism.map(|m| m.dp_min), Some(0));
            }
        }
        assert!(allow_elastic(Vec::new(), 1.5, 1).is_err());
    }

    #[test]
    fn arrivals_follow_the_load_and_bad_input_is_named() {
        // At load 0.5 on 512 GPUs, the jobs' GPU-seconds over the span of
        // arrivals is about half the cluster.
        let jobs = llm_cluster(5_000, 0.5, 512, 3).expect("valid");
        let span = jobs.last().map_or(0.0, |j| j.arrival_s);
        let work: f64 =
            jobs.iter().map(|j| f64::from(j.gpus()) * if let Work::Seconds(s) = j.work { s } else { 0.0 }).sum();
        let load = work / span / 512.0;
        assert!((load - 0.5).abs() < 0.1, "load {load}");
        assert!(jobs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        assert!(matches!(llm_cluster(10, 0.0, 512, 1), Err(TraceError::Field { .. })));
        assert!(matches!(llm_cluster(10, 0.8, 64, 1), Err(TraceError::Field { .. })));
    }
}
