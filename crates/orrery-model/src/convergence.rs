//! How many iterations training takes to converge at each total batch size,
//! from Pollux's measured validation curves (`data/profiles/pollux/<app>/
//! validation-<B>.csv`, compiled in): the last row of each file is the
//! iteration at which the job reaches its target metric with total batch `B`.
//! Other batch sizes are interpolated linearly in log(B)–log(iterations);
//! below the smallest profiled batch iterations scale as 1/B, above the
//! largest they stay flat. The ratio between two batch sizes is Pollux's
//! statistical efficiency (Pollux §3.1), used for elastic jobs.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Convergence profiles: (application, total batch, file contents).
static VALIDATION: &[(&str, u32, &str)] = &[
    ("bert", 12, include_str!("../../../data/profiles/pollux/bert/validation-12.csv")),
    ("bert", 192, include_str!("../../../data/profiles/pollux/bert/validation-192.csv")),
    ("bert", 24, include_str!("../../../data/profiles/pollux/bert/validation-24.csv")),
    ("bert", 384, include_str!("../../../data/profiles/pollux/bert/validation-384.csv")),
    ("bert", 48, include_str!("../../../data/profiles/pollux/bert/validation-48.csv")),
    ("bert", 96, include_str!("../../../data/profiles/pollux/bert/validation-96.csv")),
    ("cifar10", 1024, include_str!("../../../data/profiles/pollux/cifar10/validation-1024.csv")),
    ("cifar10", 128, include_str!("../../../data/profiles/pollux/cifar10/validation-128.csv")),
    ("cifar10", 2048, include_str!("../../../data/profiles/pollux/cifar10/validation-2048.csv")),
    ("cifar10", 256, include_str!("../../../data/profiles/pollux/cifar10/validation-256.csv")),
    ("cifar10", 4096, include_str!("../../../data/profiles/pollux/cifar10/validation-4096.csv")),
    ("cifar10", 512, include_str!("../../../data/profiles/pollux/cifar10/validation-512.csv")),
    ("deepspeech2", 160, include_str!("../../../data/profiles/pollux/deepspeech2/validation-160.csv")),
    ("deepspeech2", 20, include_str!("../../../data/profiles/pollux/deepspeech2/validation-20.csv")),
    ("deepspeech2", 320, include_str!("../../../data/profiles/pollux/deepspeech2/validation-320.csv")),
    ("deepspeech2", 40, include_str!("../../../data/profiles/pollux/deepspeech2/validation-40.csv")),
    ("deepspeech2", 640, include_str!("../../../data/profiles/pollux/deepspeech2/validation-640.csv")),
    ("deepspeech2", 80, include_str!("../../../data/profiles/pollux/deepspeech2/validation-80.csv")),
    ("imagenet", 12800, include_str!("../../../data/profiles/pollux/imagenet/validation-12800.csv")),
    ("imagenet", 1600, include_str!("../../../data/profiles/pollux/imagenet/validation-1600.csv")),
    ("imagenet", 200, include_str!("../../../data/profiles/pollux/imagenet/validation-200.csv")),
    ("imagenet", 3200, include_str!("../../../data/profiles/pollux/imagenet/validation-3200.csv")),
    ("imagenet", 400, include_str!("../../../data/profiles/pollux/imagenet/validation-400.csv")),
    ("imagenet", 6400, include_str!("../../../data/profiles/pollux/imagenet/validation-6400.csv")),
    ("imagenet", 800, include_str!("../../../data/profiles/pollux/imagenet/validation-800.csv")),
    ("ncf", 1024, include_str!("../../../data/profiles/pollux/ncf/validation-1024.csv")),
    ("ncf", 16384, include_str!("../../../data/profiles/pollux/ncf/validation-16384.csv")),
    ("ncf", 2048, include_str!("../../../data/profiles/pollux/ncf/validation-2048.csv")),
    ("ncf", 256, include_str!("../../../data/profiles/pollux/ncf/validation-256.csv")),
    ("ncf", 32768, include_str!("../../../data/profiles/pollux/ncf/validation-32768.csv")),
    ("ncf", 4096, include_str!("../../../data/profiles/pollux/ncf/validation-4096.csv")),
    ("ncf", 512, include_str!("../../../data/profiles/pollux/ncf/validation-512.csv")),
    ("ncf", 8192, include_str!("../../../data/profiles/pollux/ncf/validation-8192.csv")),
    ("yolov3", 128, include_str!("../../../data/profiles/pollux/yolov3/validation-128.csv")),
    ("yolov3", 16, include_str!("../../../data/profiles/pollux/yolov3/validation-16.csv")),
    ("yolov3", 256, include_str!("../../../data/profiles/pollux/yolov3/validation-256.csv")),
    ("yolov3", 32, include_str!("../../../data/profiles/pollux/yolov3/validation-32.csv")),
    ("yolov3", 512, include_str!("../../../data/profiles/pollux/yolov3/validation-512.csv")),
    ("yolov3", 64, include_str!("../../../data/profiles/pollux/yolov3/validation-64.csv")),
    ("yolov3", 8, include_str!("../../../data/profiles/pollux/yolov3/validation-8.csv")),
];

/// The Pollux application whose convergence profile stands in for a zoo
/// model: the exact one for Pollux's own models, else the closest family —
/// ImageNet CNNs for vision models, BERT for transformers, NCF for DLRM
/// (an approximation: the papers publish no profiles for the others).
pub fn profile_of(model: &str) -> Option<&'static str> {
    let m = model.to_ascii_lowercase();
    Some(match m.as_str() {
        "resnet18-cifar" => "cifar10",
        "deepspeech2" => "deepspeech2",
        "ncf" | "dlrm" => "ncf",
        "yolov3" => "yolov3",
        _ if ["vgg", "resnet", "wideresnet", "densenet", "googlenet", "alexnet", "inception", "mobilenet"]
            .iter()
            .any(|f| m.starts_with(f)) =>
        {
            "imagenet"
        }
        _ if ["bert", "roberta", "xlm", "camembert", "gpt", "transformer"].iter().any(|f| m.starts_with(f)) => "bert",
        _ => return None,
    })
}

/// Per application, (ln total batch, ln iterations to converge) of each
/// profile, by batch: the last row of each file, parsed on first use (a
/// scheduler asks for every size of every job it sizes, each round).
fn curves() -> &'static HashMap<&'static str, Vec<(f64, f64)>> {
    static CURVES: OnceLock<HashMap<&'static str, Vec<(f64, f64)>>> = OnceLock::new();
    CURVES.get_or_init(|| {
        let mut curves: HashMap<&'static str, Vec<(f64, f64)>> = HashMap::new();
        for &(app, batch, text) in VALIDATION {
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            let iteration = last.and_then(|l| l.split(',').nth(1)).and_then(|i| i.trim().parse::<f64>().ok());
            if let Some(iteration) = iteration {
                curves.entry(app).or_default().push((f64::from(batch).ln(), iteration.max(1.0).ln()));
            }
        }
        for points in curves.values_mut() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        curves
    })
}

/// Iterations at total batch `to` that do the work of one iteration at total
/// batch `from` (Pollux's statistical efficiency, from the convergence
/// profiles: I(to) / I(from)). Without a profile, samples count equally:
/// `from / to`.
pub fn iterations_per_reference(model: &str, from: u32, to: u32) -> f64 {
    let linear = f64::from(from.max(1)) / f64::from(to.max(1));
    let Some(app) = profile_of(model) else { return linear };
    match (iterations_to_converge(app, from), iterations_to_converge(app, to)) {
        (Some(a), Some(b)) if a > 0 => b as f64 / a as f64,
        _ => linear,
    }
}

/// Iterations at which `app` converges with total batch `batch`
/// (`None` for an unknown application).
/// O(profiles of the application); the files are read once per process.
pub fn iterations_to_converge(app: &str, batch: u32) -> Option<u64> {
    let points = curves().get(app)?;
    let x = f64::from(batch.max(1)).ln();
    let (first, last) = (*points.first()?, *points.last()?);
    // Below the smallest profiled batch, iterations scale as 1/B (perfect
    // scaling); above the largest, no further gain is assumed.
    let y = if x <= first.0 {
        first.1 + (first.0 - x)
    } else if x >= last.0 {
        last.1
    } else {
        let i = points.windows(2).position(|w| x >= w[0].0 && x <= w[1].0)?;
        let (a, b) = (points[i], points[i + 1]);
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    };
    Some(y.exp().round().max(1.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_batches_need_fewer_but_less_efficient_iterations() {
        // ImageNet: 200 → 12,800 total batch. Fewer iterations, but fewer than
        // 64× fewer (statistical efficiency below 1 at large batches).
        let r = iterations_per_reference("resnet50", 200, 12_800);
        assert!(r < 1.0 && r > 1.0 / 64.0, "{r}");
        // Same batch: one for one; unknown model: linear in samples.
        assert_eq!(iterations_per_reference("vgg19", 256, 256), 1.0);
        assert_eq!(iterations_per_reference("no-such-model", 100, 400), 0.25);
        assert_eq!(profile_of("GPT2"), Some("bert"));
        assert_eq!(profile_of("dlrm"), Some("ncf"));
    }
}
