//! Castor §3.2 and §6.1: the interference ratio ξ of a job sharing its GPUs
//! with another (its iteration time shared over alone, ≥ 1 when sharing
//! hurts), measured in public data, and a boosted regression-tree predictor
//! (smartcore's `XGRegressor`) trained on the features those data carry.
//!
//! - Gavel (`data/profiles/gavel_simulation_throughputs.json`, bundled): per
//!   GPU type, each job type's steps/s alone and beside every other type on
//!   one GPU. ξ = alone / shared. Features: GPU type, both jobs' model and
//!   batch, both jobs' throughput alone.
//! - Lucid (`lucid_colocate_info.csv`, S-Lab licence, read from a path):
//!   `speed1`/`speed2` are each job's normalised speed beside the other, so
//!   ξ = 1 / speed. Features: both jobs' model, dataset, GPUs, batch and AMP
//!   flag, and the pair's measured GPU and GPU-memory utilisation.
//!
//! The split is 80/20 *by job pair*, so both directions of a pair fall on the
//! same side.

use crate::TraceError;
use crate::diag::Parsed;
use crate::formats::for_each_row;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::xgboost::{XGRegressor, XGRegressorParameters};
use std::collections::BTreeMap;

/// One job of a pair beside the other, with its measured ξ.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The unordered pair this sample belongs to (split key).
    pub pair: String,
    /// Feature vector.
    pub features: Vec<f64>,
    /// Measured interference ratio.
    pub xi: f64,
    /// GPU type it was measured on (empty when the data do not say).
    pub gpu: String,
    /// Model class of this job and of the other.
    pub classes: (String, String),
}

/// A label-encoder for categorical features: the same name, the same code.
#[derive(Default)]
struct Codes(BTreeMap<String, f64>);

impl Codes {
    fn of(&mut self, name: &str) -> f64 {
        let n = self.0.len() as f64;
        *self.0.entry(name.to_string()).or_insert(n)
    }
}

/// `"('ResNet-50 (batch size 64)', 1)"` → ("ResNet-50", 64, 1).
fn gavel_key(key: &str) -> Option<(String, f64, u32)> {
    let inner = key.strip_prefix("('")?.strip_suffix(')')?;
    let (job, scale) = inner.rsplit_once("', ")?;
    let (model, rest) = job.split_once(" (batch size ")?;
    let batch: f64 = rest.strip_suffix(')')?.parse().ok()?;
    Some((model.to_string(), batch, scale.trim().parse().ok()?))
}

/// ξ samples from Gavel's throughputs: single-GPU job types (scale factor 1)
/// sharing one GPU, on every consolidated GPU type.
pub fn gavel_samples(text: &str) -> Result<Vec<Sample>, TraceError> {
    let bundled = |why: String| TraceError::Bundled(format!("gavel throughputs: {why}"));
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bundled(e.to_string()))?;
    let by_gpu = v.as_object().ok_or_else(|| bundled("expected an object of GPU types".into()))?;
    let mut codes = Codes::default();
    let mut out = Vec::new();
    for (gpu, jobs) in by_gpu.iter().filter(|(g, _)| !g.contains("unconsolidated")) {
        let gpu_code = codes.of(gpu);
        let Some(jobs) = jobs.as_object() else { continue };
        let alone = |key: &str| jobs.get(key).and_then(|j| j.get("null")).and_then(serde_json::Value::as_f64);
        for (key_a, entry) in jobs {
            let Some((model_a, batch_a, 1)) = gavel_key(key_a) else { continue };
            let Some(iso_a) = alone(key_a).filter(|t| *t > 0.0) else { continue };
            let Some(entry) = entry.as_object() else { continue };
            for (key_b, shared) in entry.iter().filter(|(k, _)| *k != "null") {
                let Some((model_b, batch_b, 1)) = gavel_key(key_b) else { continue };
                let Some(iso_b) = alone(key_b).filter(|t| *t > 0.0) else { continue };
                let Some(t_a) = shared.get(0).and_then(serde_json::Value::as_f64).filter(|t| *t > 0.0) else {
                    continue;
                };
                let mut pair = [key_a.as_str(), key_b.as_str()];
                pair.sort_unstable();
                out.push(Sample {
                    pair: format!("{gpu}: {} + {}", pair[0], pair[1]),
                    features: vec![gpu_code, codes.of(&model_a), batch_a, iso_a, codes.of(&model_b), batch_b, iso_b],
                    xi: iso_a / t_a,
                    gpu: gpu.clone(),
                    classes: (model_a.clone(), model_b.clone()),
                });
            }
        }
    }
    Ok(out)
}

/// ξ samples from Lucid's `colocate_info.csv`: two per row, one per job.
pub fn lucid_samples(file: &str, text: &str) -> Parsed<Sample> {
    let header = [
        "",
        "model1",
        "dataset1",
        "gpu_num1",
        "batchsize1",
        "amp1",
        "speed1",
        "model2",
        "dataset2",
        "gpu_num2",
        "batchsize2",
        "amp2",
        "speed2",
        "gpu_util",
        "gmem_util",
        "gmem",
    ];
    let mut codes = Codes::default();
    let mut rows: Vec<Sample> = Vec::new();
    let parsed = for_each_row(file, text, b',', true, &header, |row| {
        let mut job = |base: usize| -> Result<(String, Vec<f64>, f64, String), crate::Diagnostic> {
            let model = row.text(base)?.to_string();
            let dataset = row.text(base + 1)?.to_string();
            let gpus = row.non_negative(base + 2)?;
            let batch = row.non_negative(base + 3)?;
            let amp = row.non_negative(base + 4)?;
            let speed = row.non_negative(base + 5)?;
            if speed <= 0.0 {
                return Err(row.at.field(header[base + 5], "a positive normalised speed", speed));
            }
            let name = format!("{model}/{dataset}/{gpus}/{batch}/{amp}");
            Ok((name, vec![codes.of(&model), codes.of(&dataset), gpus, batch, amp], 1.0 / speed, model))
        };
        let (a, fa, xa, ma) = job(1)?;
        let (b, fb, xb, mb) = job(7)?;
        let util = [row.non_negative(13)?, row.non_negative(14)?, row.non_negative(15)?];
        let mut pair = [a.as_str(), b.as_str()];
        pair.sort_unstable();
        let pair = format!("{} + {}", pair[0], pair[1]);
        let feats = |x: &[f64], y: &[f64]| x.iter().chain(y).chain(&util).copied().collect::<Vec<f64>>();
        let (gpu, ab, ba) = (String::new(), (ma.clone(), mb.clone()), (mb, ma));
        rows.push(Sample { pair: pair.clone(), features: feats(&fb, &fa), xi: xb, gpu: gpu.clone(), classes: ba });
        Ok(Some(Sample { pair, features: feats(&fa, &fb), xi: xa, gpu, classes: ab }))
    });
    let mut all = parsed.items;
    all.extend(rows);
    Parsed { items: all, errors: parsed.errors, skipped: parsed.skipped }
}

/// Should two jobs of equal length alone share their GPUs from the start
/// rather than run back to back? Theorem 1 with `T_1 = T_2`: the one that
/// ends first (lower ξ) runs `ξ_1·T`, the other then finishes its rest at
/// full speed, so the sum of completion times is `2ξ_1 + 1 − ξ_1/ξ_2` (in T)
/// against 3 back to back. Returns the relative gain (> 0: share).
pub fn sharing_benefit(xi_a: f64, xi_b: f64) -> f64 {
    let (x1, x2) = if xi_a <= xi_b { (xi_a, xi_b) } else { (xi_b, xi_a) };
    (3.0 - (2.0 * x1 + 1.0 - x1 / x2)) / 3.0
}

/// How the predictor did on the held-out pairs.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// Training samples.
    pub train: usize,
    /// Held-out samples.
    pub test: usize,
    /// Root mean square error of ξ on the held-out samples.
    pub rmse: f64,
    /// The same for always predicting the training mean.
    pub rmse_mean: f64,
    /// Held-out pairs with both directions.
    pub pairs: usize,
    /// Share of those pairs where predicted ξ flips the share-or-not decision.
    pub decision_flips: f64,
    /// Mean absolute difference of the sharing benefit with predicted and true ξ.
    pub benefit_deviation: f64,
}

/// Trains the boosted trees on 80% of the pairs (seeded) and evaluates on the
/// rest. O(rounds · n · features · log n).
pub fn evaluate(samples: &[Sample], seed: u64) -> Result<Evaluation, TraceError> {
    let (train, test) = split(samples, seed)?;
    let predict = train_predictor(&train, seed)?;
    let predicted = predict(&test)?;
    let y_train: Vec<f64> = train.iter().map(|s| s.xi).collect();
    let mean = y_train.iter().sum::<f64>() / y_train.len() as f64;
    let rms = |f: &dyn Fn(usize) -> f64| {
        (test.iter().enumerate().map(|(i, s)| (f(i) - s.xi).powi(2)).sum::<f64>() / test.len() as f64).sqrt()
    };
    let rmse = rms(&|i| predicted[i]);
    let rmse_mean = rms(&|_| mean);
    // Decisions per held-out pair with both directions present.
    let mut by_pair: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for (s, &p) in test.iter().zip(&predicted) {
        by_pair.entry(s.pair.as_str()).or_default().push((s.xi, p));
    }
    let (mut pairs, mut flips, mut deviation) = (0usize, 0usize, 0.0);
    for v in by_pair.values().filter(|v| v.len() >= 2) {
        let (t, p) = (sharing_benefit(v[0].0, v[1].0), sharing_benefit(v[0].1, v[1].1));
        pairs += 1;
        flips += usize::from((t > 0.0) != (p > 0.0));
        deviation += (t - p).abs();
    }
    Ok(Evaluation {
        train: train.len(),
        test: test.len(),
        rmse,
        rmse_mean,
        pairs,
        decision_flips: flips as f64 / pairs.max(1) as f64,
        benefit_deviation: deviation / pairs.max(1) as f64,
    })
}

type Predictor = Box<dyn Fn(&[&Sample]) -> Result<Vec<f64>, TraceError>>;

/// 80/20 by pair, seeded: (train, test).
fn split(samples: &[Sample], seed: u64) -> Result<(Vec<&Sample>, Vec<&Sample>), TraceError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut side: BTreeMap<&str, bool> = BTreeMap::new();
    for s in samples {
        side.entry(s.pair.as_str()).or_insert_with(|| rng.random_bool(0.2));
    }
    let (test, train): (Vec<&Sample>, Vec<&Sample>) = samples.iter().partition(|s| side[s.pair.as_str()]);
    if train.len() < 10 || test.is_empty() {
        return Err(TraceError::Data(format!("too few samples to split: {} train, {} test", train.len(), test.len())));
    }
    Ok((train, test))
}

/// Boosted regression trees (200 rounds, depth 6, rate 0.1) fitted to `train`.
fn train_predictor(train: &[&Sample], seed: u64) -> Result<Predictor, TraceError> {
    fn matrix(xs: &[&Sample]) -> Result<DenseMatrix<f64>, TraceError> {
        DenseMatrix::from_2d_vec(&xs.iter().map(|s| s.features.clone()).collect())
            .map_err(|e| TraceError::Model(e.to_string()))
    }
    let y: Vec<f64> = train.iter().map(|s| s.xi).collect();
    let params = XGRegressorParameters::default()
        .with_n_estimators(200)
        .with_max_depth(6)
        .with_learning_rate(0.1)
        .with_seed(seed);
    let model = XGRegressor::fit(&matrix(train)?, &y, params).map_err(|e| TraceError::Model(e.to_string()))?;
    Ok(Box::new(move |xs: &[&Sample]| model.predict(&matrix(xs)?).map_err(|e| TraceError::Model(e.to_string()))))
}

/// The ξ table the simulator and the Castor policies read
/// ([`orrery_model::colocation::XiTable`]): for each ordered pair of model
/// classes measured on `gpu`, the median ξ over the batch sizes measured.
/// `predicted: Some(seed)` fills it with the boosted trees' predictions
/// instead, the trees trained on 80% of the pairs (the held-out 20% are
/// genuinely unseen), as a scheduler that profiles each job once would.
pub fn xi_table(
    samples: &[Sample],
    gpu: &str,
    predicted: Option<u64>,
) -> Result<orrery_model::colocation::XiTable, TraceError> {
    let on_gpu: Vec<&Sample> = samples.iter().filter(|s| s.gpu == gpu).collect();
    if on_gpu.is_empty() {
        return Err(TraceError::Data(format!("no interference measurements on {gpu:?}")));
    }
    let values: Vec<f64> = match predicted {
        None => on_gpu.iter().map(|s| s.xi).collect(),
        Some(seed) => {
            let (train, _) = split(samples, seed)?;
            train_predictor(&train, seed)?(&on_gpu)?
        }
    };
    let mut by_class: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for (s, v) in on_gpu.iter().zip(values) {
        by_class.entry(s.classes.clone()).or_default().push(v);
    }
    let how = if predicted.is_some() { "predicted by boosted trees" } else { "measured" };
    let mut table = orrery_model::colocation::XiTable {
        xi: BTreeMap::new(),
        source: format!("gavel {gpu}, {how}, median over batch sizes"),
    };
    for ((a, b), mut v) in by_class {
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        table.insert(&a, &b, if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 });
    }
    Ok(table)
}

/// Gavel's throughputs, bundled.
pub const GAVEL_THROUGHPUTS: &str = include_str!("../../../data/profiles/gavel_simulation_throughputs.json");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theorem_one_by_hand() {
        // No interference: sharing turns 1 + 2 into 1 + 1.
        assert!((sharing_benefit(1.0, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        // ξ = 2 for both is time slicing: 2 + 2 − ... = 4 vs 3 → worse.
        assert!(sharing_benefit(2.0, 2.0) < 0.0);
        // Break-even: ξ_1 (2 − 1/ξ_2) = 2; with ξ_2 = 2, ξ_1 = 4/3.
        assert!(sharing_benefit(4.0 / 3.0, 2.0).abs() < 1e-12);
        assert!(sharing_benefit(1.3, 2.0) > 0.0 && sharing_benefit(1.4, 2.0) < 0.0);
        // Symmetric in its arguments.
        assert_eq!(sharing_benefit(2.0, 1.2), sharing_benefit(1.2, 2.0));
    }

    #[test]
    fn gavel_keys_parse() {
        assert_eq!(gavel_key("('ResNet-50 (batch size 64)', 1)"), Some(("ResNet-50".into(), 64.0, 1)));
        assert_eq!(gavel_key("('Transformer (batch size 128)', 4)").map(|k| k.2), Some(4));
        assert_eq!(gavel_key("null"), None);
    }

    #[test]
    fn gavel_xi_predictor_beats_the_mean_on_held_out_pairs() {
        let samples = gavel_samples(GAVEL_THROUGHPUTS).expect("gavel parses");
        assert!(samples.len() > 1000, "{} samples", samples.len());
        assert!(samples.iter().all(|s| s.xi.is_finite() && s.xi > 0.0));
        let e = evaluate(&samples, 1).expect("trains");
        // No pair is on both sides; roughly 20% held out.
        let share = e.test as f64 / (e.train + e.test) as f64;
        assert!((0.1..0.3).contains(&share), "held out {share}");
        assert!(e.rmse < 0.5 * e.rmse_mean, "RMSE {} vs {} for the mean", e.rmse, e.rmse_mean);
        // docs/results.md "§6.1", the Gavel row: 1,275 / 322 samples, RMSE
        // 0.348 against 0.890 for the mean, 155 held-out pairs, 9.0% flips,
        // 5.8% benefit deviation.
        assert_eq!((e.train, e.test, e.pairs), (1275, 322, 155));
        let r = |x: f64, k: f64| (x * k).round() / k;
        assert_eq!((r(e.rmse, 1e3), r(e.rmse_mean, 1e3)), (0.348, 0.890), "{e:?}");
        assert_eq!((r(100.0 * e.decision_flips, 10.0), r(100.0 * e.benefit_deviation, 10.0)), (9.0, 5.8), "{e:?}");
    }

    #[test]
    fn the_split_keeps_both_directions_of_a_pair_on_one_side() {
        let samples = gavel_samples(GAVEL_THROUGHPUTS).expect("gavel parses");
        let (train, test) = split(&samples, 7).expect("splits");
        let train_pairs: std::collections::BTreeSet<&str> = train.iter().map(|s| s.pair.as_str()).collect();
        assert!(test.iter().all(|s| !train_pairs.contains(s.pair.as_str())));
        assert_eq!(train.len() + test.len(), samples.len());
        // Another seed, another split.
        let (_, other) = split(&samples, 8).expect("splits");
        assert_ne!(test.len(), 0);
        assert_ne!(test.iter().map(|s| &s.pair).collect::<Vec<_>>(), other.iter().map(|s| &s.pair).collect::<Vec<_>>());
    }

    #[test]
    fn gavel_table_is_the_median_per_class_pair() {
        let samples = gavel_samples(GAVEL_THROUGHPUTS).expect("gavel parses");
        let t = xi_table(&samples, "v100", None).expect("v100 measured");
        // The 5 job types with a batch size (A3C and CycleGAN carry none and
        // are left out by the parser), every ordered pair measured.
        assert_eq!(t.pairs().count(), 25);
        // By hand from the JSON: ResNet-50 beside ResNet-50 on a V100, the
        // median of its 11 batch combinations is 2.56.
        let x = t.get("ResNet-50", "ResNet-50").expect("measured");
        assert!((x - 2.56).abs() < 0.01, "{x}");
        let p = xi_table(&samples, "v100", Some(1)).expect("trains");
        assert_eq!(p.pairs().count(), 25);
        let worst = t.pairs().map(|(a, b, v)| (v - p.get(a, b).expect("same pairs")).abs()).fold(0.0, f64::max);
        assert!(worst > 0.0 && worst < 2.0, "{worst}");
        assert!(xi_table(&samples, "tpu", None).is_err());
    }

    #[test]
    fn lucid_rows_give_two_samples_and_name_bad_fields() {
        let text = ",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,gpu_util,gmem_util,gmem\n\
                    0,MobileNetV3,ImageNet,1,32,0,0.983,ResNet18,CIFAR-10,1,32,0,1.034,64.789,29.461,5106\n\
                    1,MobileNetV3,ImageNet,1,32,0,0,ResNet18,CIFAR-10,1,32,1,0.97,45.562,20.849,5046\n";
        let p = lucid_samples("c.csv", text);
        assert_eq!(p.items.len(), 2);
        assert!((p.items[0].xi - 1.0 / 0.983).abs() < 1e-12 && p.items[0].pair == p.items[1].pair);
        let e = p.errors.first().expect("speed 0 is an error").to_string();
        assert!(e.contains("c.csv:3") && e.contains("speed1"), "{e}");
    }
}
