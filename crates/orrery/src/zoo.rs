//! `orrery zoo`.

use anyhow::{Context, bail};
use orrery_model::gpu::{GPU_TYPES, gpu_type};
use orrery_model::zoo::{Cost, ModelSpec, Placement, ZOO, model};
use orrery_trace::calibration::{self, Role};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Show only this model (name or alias, e.g. vgg16, GPT-2, imagenet).
    model: Option<String>,
    /// GPU type the shape is computed for.
    #[arg(long, default_value = "v100")]
    gpu: String,
    /// Per-worker batch size (default: the model's typical batch).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(orrery_model::job::MAX_BATCH)))]
    batch: Option<u32>,
    /// Number of workers (one GPU each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    workers: u32,
    /// Workers per host (1 = every worker on its own host, so the collective
    /// crosses the network).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    per_host: u32,
    /// Host link rate in Gbit/s.
    #[arg(long, default_value_t = 50.0, value_parser = crate::numbers::positive)]
    gbps: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Print the calibration table: measured values from data/ next to the zoo's.
    #[arg(long)]
    calibration: bool,
    /// Print the LLM calibration table: each published per-GPU throughput
    /// (Megatron-LM SC'21 Table 1) next to orrery's mesh model's.
    #[arg(long)]
    llm_calibration: bool,
    /// Print the LLM architectures (layers, hidden size, parameters, FLOPs).
    #[arg(long)]
    llm: bool,
    /// With an LLM as MODEL: its device mesh as JSON, e.g.
    /// '{"tp": 8, "pp": 4, "dp": 8, "microbatches": 16}' (default: data
    /// parallel over --workers). Prints one iteration's time on --gpu,
    /// dimension by dimension, with --per-host GPUs a host and --gbps of
    /// NIC a host.
    #[arg(long, value_name = "JSON")]
    parallelism: Option<String>,
    /// Print Castor's iteration-time model (Eqs. 1-3) fitted to Pollux's
    /// measured placements, with the fit error per model.
    #[arg(long)]
    iteration_model: bool,
    /// Train and evaluate the interference-ratio predictor (Castor §6.1) on
    /// Gavel's bundled throughputs, and on Lucid's colocate_info.csv if given.
    #[arg(long)]
    interference: bool,
    /// With --interference: Lucid's `lucid_colocate_info.csv` (S-Lab licence, not bundled).
    #[arg(long, requires = "interference", value_name = "CSV")]
    lucid: Option<std::path::PathBuf>,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    if a.calibration {
        return print_calibration(a.json);
    }
    if a.iteration_model {
        return print_iteration_model(a.json);
    }
    if a.llm_calibration {
        return print_llm_calibration(a.json);
    }
    if a.llm {
        return print_llms(a.json);
    }
    if a.interference {
        return print_interference(a.lucid.as_deref());
    }
    let gpu = gpu_type(&a.gpu).with_context(|| {
        format!(
            "unknown GPU type {:?}; expected one of {}",
            a.gpu,
            GPU_TYPES.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
        )
    })?;
    if a.workers == 0 || a.per_host == 0 {
        bail!("--workers and --per-host must be at least 1");
    }
    if !(a.gbps > 0.0 && a.gbps.is_finite()) {
        bail!("--gbps must be a positive number, found {}", a.gbps);
    }
    if let Some(arch) = a.model.as_deref().and_then(orrery_model::mesh::llm) {
        return print_mesh(a, arch, gpu);
    }
    if a.parallelism.is_some() {
        bail!("--parallelism needs an LLM as MODEL (one of `orrery zoo --llm`)");
    }
    let models: Vec<&ModelSpec> = match &a.model {
        Some(name) => {
            vec![model(name).with_context(|| format!("no model {name:?} in the zoo; run `orrery zoo` for the list"))?]
        }
        None => ZOO.iter().collect(),
    };
    let placement = Placement::packed(a.workers, a.per_host);
    let rows: Vec<serde_json::Value> = models
        .iter()
        .map(|m| {
            let batch = a.batch.unwrap_or(m.default_batch);
            let shape = m.shape(gpu, batch, &placement, a.gbps);
            let circle = shape.circle();
            serde_json::json!({
                "model": m.name, "aliases": m.aliases, "family": m.family, "params_m": m.params_m,
                "fwd_gmacs": m.fwd_gmacs, "memory_mb": m.memory_mb, "parallelism": m.parallelism,
                "cost": m.cost, "used_by": m.used_by, "gpu": gpu.name, "batch": batch,
                "placement": placement.gpus_per_host, "link_gbps": a.gbps,
                "iteration_ms": shape.period_ms(), "compute_ms": shape.compute_ms(), "network_ms": shape.network_ms(),
                "duty_cycle": circle.duty_cycle(), "shape": shape, "circle": circle,
            })
        })
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{} on {} ({} workers, {} per host, {} Gbit/s links); shapes: compute then communication\n",
        if models.len() == 1 { "model" } else { "models" },
        gpu.name,
        a.workers,
        a.per_host,
        a.gbps
    );
    println!(
        "{:<18} {:>9} {:>8} {:>6} {:>10} {:>10} {:>10} {:>6}  {:<13} cost",
        "model", "params(M)", "GMACs", "batch", "iter(ms)", "compute", "network", "duty", "parallelism"
    );
    for (m, r) in models.iter().zip(&rows) {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let par = match m.parallelism {
            orrery_model::zoo::Parallelism::DataParallel => "data",
            orrery_model::zoo::Parallelism::Pipeline { .. } => "pipeline",
            orrery_model::zoo::Parallelism::EmbeddingAllToAll { .. } => "embedding-a2a",
        };
        let cost = match m.cost {
            Cost::Calibrated { source, .. } => source,
            Cost::FromFlops => "from FLOPs (family median)",
        };
        println!(
            "{:<18} {:>9.1} {:>8.2} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>5.0}%  {:<13} {}",
            m.name,
            m.params_m,
            m.fwd_gmacs,
            r["batch"].as_u64().unwrap_or(0),
            f("iteration_ms"),
            f("compute_ms"),
            f("network_ms"),
            100.0 * f("duty_cycle"),
            par,
            cost
        );
    }
    if models.len() == 1 {
        println!("\ncircle (CASSINI §3): perimeter {:.1} ms", f64_of(&rows[0]["circle"]["period_ms"]));
        if let Some(arcs) = rows[0]["circle"]["arcs"].as_array() {
            let period = f64_of(&rows[0]["circle"]["period_ms"]);
            for a in arcs {
                let (s, d, g) = (f64_of(&a["start_ms"]), f64_of(&a["duration_ms"]), f64_of(&a["gbps"]));
                println!(
                    "  up arc {:>8.1} ms .. {:>8.1} ms  ({:>5.1}° .. {:>5.1}°) at {g} Gbit/s",
                    s,
                    s + d,
                    s / period * 360.0,
                    (s + d) / period * 360.0
                );
            }
        }
    }
    Ok(())
}

fn f64_of(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn print_interference(lucid: Option<&std::path::Path>) -> anyhow::Result<()> {
    use orrery_trace::interference::{GAVEL_THROUGHPUTS, evaluate, gavel_samples, lucid_samples};
    let mut sets = vec![("gavel", gavel_samples(GAVEL_THROUGHPUTS).map_err(anyhow::Error::msg)?)];
    if let Some(p) = lucid {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let parsed = lucid_samples(&p.display().to_string(), &text);
        if let Some(e) = parsed.errors.first() {
            anyhow::bail!("{e} ({} bad rows in all)", parsed.errors.len());
        }
        sets.push(("lucid", parsed.items));
    }
    println!("interference ratio predictor: boosted trees (smartcore XGRegressor), 80/20 split by job pair, seed 1");
    println!(
        "{:<7} {:>6} {:>6} {:>7} {:>11} {:>6} {:>15} {:>18}",
        "data", "train", "test", "RMSE", "RMSE(mean)", "pairs", "decision flips", "benefit deviation"
    );
    for (name, samples) in &sets {
        let e = evaluate(samples, 1).map_err(anyhow::Error::msg)?;
        println!(
            "{:<7} {:>6} {:>6} {:>7.3} {:>11.3} {:>6} {:>14.1}% {:>17.1}%",
            name,
            e.train,
            e.test,
            e.rmse,
            e.rmse_mean,
            e.pairs,
            100.0 * e.decision_flips,
            100.0 * e.benefit_deviation
        );
    }
    Ok(())
}

fn print_iteration_model(json: bool) -> anyhow::Result<()> {
    let fits = orrery_trace::itermodel::fitted();
    if json {
        let v: Vec<serde_json::Value> = fits
            .iter()
            .map(|(app, r)| match r {
                Ok((m, e)) => serde_json::json!({ "app": app, "model": m, "error": e }),
                Err(err) => serde_json::json!({ "app": app, "error": err.to_string() }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("Castor Eqs. 1-3 fitted to data/profiles/pollux/<app>/placements.csv (times in ms)");
    println!(
        "{:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>5} {:>8} {:>8}",
        "app", "a_comp", "b_comp", "a_local", "b_local", "a_net", "b_net", "delta", "rows", "rms err", "max err"
    );
    for (app, r) in &fits {
        match r {
            Ok((m, e)) => println!(
                "{:<12} {:>8.2} {:>9.4} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>6.2} {:>5} {:>7.1}% {:>7.1}%",
                app,
                m.alpha_comp * 1e3,
                m.beta_comp * 1e3,
                m.alpha_comm_local * 1e3,
                m.beta_comm_local * 1e3,
                m.alpha_comm_net * 1e3,
                m.beta_comm_net * 1e3,
                m.delta,
                e.rows,
                100.0 * e.rms_rel,
                100.0 * e.max_rel
            ),
            Err(err) => println!("{app:<12} no fit: {err}"),
        }
    }
    Ok(())
}

fn print_calibration(json: bool) -> anyhow::Result<()> {
    let t = calibration::table();
    let all = calibration::median_error(&t, &[Role::Fit, Role::Check]);
    let checks = calibration::median_error(&t, &[Role::Check]);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "median_rel_error": all, "median_rel_error_checks": checks, "points": t,
            }))?
        );
        return Ok(());
    }
    println!("{:<15} {:<48} {:>10} {:>10} {:>4} {:>7}  role", "source", "what", "measured", "orrery", "unit", "error");
    for p in &t {
        println!(
            "{:<15} {:<48} {:>10.2} {:>10.2} {:>4} {:>6.1}%  {:?}",
            p.source,
            p.what,
            p.measured,
            p.orrery,
            p.unit,
            100.0 * p.rel_error(),
            p.role
        );
    }
    let n = t.iter().filter(|p| p.role != Role::Anchor).count();
    let nc = t.iter().filter(|p| p.role == Role::Check).count();
    println!(
        "\nmedian relative error: {:.1}% over {n} points with measured data (anchors excluded); {:.1}% over the {nc} check points",
        100.0 * all,
        100.0 * checks
    );
    Ok(())
}

/// `orrery zoo --llm`: the LLM architectures with their parameters.
fn print_llms(json: bool) -> anyhow::Result<()> {
    use orrery_model::mesh::LLMS;
    if json {
        println!("{}", serde_json::to_string_pretty(LLMS)?);
        return Ok(());
    }
    println!(
        "{:<14} {:>6} {:>6} {:>5} {:>7} {:>7} {:>9} {:>9} {:>12}  source",
        "model", "layers", "hidden", "heads", "seq", "experts", "params", "active", "GFLOP/token"
    );
    for m in LLMS {
        println!(
            "{:<14} {:>6} {:>6} {:>5} {:>7} {:>4}/{:<2} {:>8.1}B {:>8.1}B {:>12.1}  {}",
            m.name,
            m.layers,
            m.hidden,
            m.heads,
            m.seq_len,
            m.top_k,
            m.experts,
            m.params() / 1e9,
            m.active_params() / 1e9,
            m.train_flops_per_token() / 1e9,
            m.source
        );
    }
    Ok(())
}

/// `orrery zoo --llm-calibration`: published per-GPU throughput of LLM
/// meshes against orrery's prediction.
fn print_llm_calibration(json: bool) -> anyhow::Result<()> {
    let table = orrery_model::mesh::published::calibration();
    if json {
        println!("{}", serde_json::to_string_pretty(&table)?);
        return Ok(());
    }
    println!(
        "{:<12} {:>3} {:>3} {:>4} {:>5} {:>5} {:>10} {:>8} {:>7}  {:<6} {:>8} {:>7} {:>6} {:>6}",
        "model",
        "tp",
        "pp",
        "dp",
        "micro",
        "gpus",
        "published",
        "orrery",
        "error",
        "role",
        "iter s",
        "bubble",
        "TP",
        "DP"
    );
    for c in &table {
        let (r, t) = (&c.row, &c.iteration);
        let total = t.total_ms();
        println!(
            "{:<12} {:>3} {:>3} {:>4} {:>5} {:>5} {:>10.1} {:>8.1} {:>+6.1}%  {:<6} {:>8.2} {:>6.1}% {:>5.1}% {:>5.1}%",
            r.arch.name,
            r.mesh.tp,
            r.mesh.pp,
            r.mesh.dp,
            r.mesh.microbatches,
            r.mesh.gpus(),
            r.tflops,
            c.predicted_tflops,
            100.0 * c.error(),
            if c.fitted {
                "fit"
            } else if c.row.claimed {
                "check"
            } else {
                "shown"
            },
            total / 1e3,
            100.0 * t.bubble_ms / total,
            100.0 * t.tp_ms / total,
            100.0 * t.dp_ms / total,
        );
    }
    let checks: Vec<f64> = table.iter().filter(|c| !c.fitted && c.row.claimed).map(|c| c.error().abs()).collect();
    let worst = checks.iter().copied().fold(0.0, f64::max);
    println!(
        "\n{} check rows, worst error {:.1}%; per-GPU TFLOP/s as the source counts them (Megatron: with the recomputed forward; Llama 3: model FLOPs); \"shown\" rows depend on what their source does not state and are not claimed",
        checks.len(),
        100.0 * worst
    );
    if let Some(fit) = table.iter().find(|c| c.fitted) {
        println!(
            "matrix-multiply efficiency fitted on {} (A100): {:.3} of the peak, used for every GPU",
            fit.row.arch.name,
            fit.row.fit_efficiency().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

/// `orrery zoo LLM [--parallelism JSON]`: one iteration of the mesh on
/// `--gpu`, hosts of `--per-host` GPUs with `--gbps` of NIC each, alone.
fn print_mesh(a: &Args, arch: &orrery_model::mesh::LlmArch, gpu: &orrery_model::GpuType) -> anyhow::Result<()> {
    use orrery_model::mesh::Mesh;
    let mesh: Mesh = match &a.parallelism {
        Some(text) => serde_json::from_str(text).with_context(|| {
            format!("--parallelism: expected a mesh as JSON, {{\"tp\": 8, \"pp\": 4, \"dp\": 8}}; found {text:?}")
        })?,
        None => Mesh { dp: a.workers, ..Mesh::default() },
    };
    if let Some(why) = mesh.check(arch) {
        bail!("--parallelism: {why}");
    }
    let mut spec = orrery_model::JobSpec::new(
        "mesh",
        arch.name,
        a.batch.unwrap_or(1),
        mesh.gpus(),
        orrery_model::Work::Iterations(1),
        0.0,
    );
    spec.parallelism = Some(mesh);
    let per_host = a.per_host.min(mesh.gpus()).max(1);
    let hosts = vec![per_host; mesh.gpus().div_ceil(per_host) as usize];
    let shape = orrery_model::placed::mesh_iteration(arch, &spec, gpu, &hosts, (a.gbps, f64::INFINITY));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"model": arch, "mesh": mesh, "gpu": gpu.name, "shape": shape, "circle": shape.circle()})
            )?
        );
        return Ok(());
    }
    // Time per kind of segment: compute, then each dimension's group.
    let mut by: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for seg in &shape.segments {
        let kind = match seg {
            orrery_model::Segment::Compute { .. } => "compute and bubble",
            orrery_model::Segment::Comm { group, .. } if group.stride == 1 => "TP all-reduces",
            orrery_model::Segment::Comm { group, .. } if group.size == mesh.pp && group.stride == mesh.tp * mesh.dp => {
                "PP sends"
            }
            orrery_model::Segment::Comm { collective: orrery_model::Collective::AllToAll, .. } => "EP all-to-alls",
            orrery_model::Segment::Comm { .. } => "DP collectives",
        };
        *by.entry(kind).or_default() += seg.duration_ms();
    }
    let period = shape.period_ms();
    println!(
        "{} on {} GPUs of {} (tp {} × pp {} × dp {}, ep {}, {} micro-batches of {} sequences, ZeRO {}), {} a host, {} Gbit/s a host:",
        arch.name,
        mesh.gpus(),
        gpu.name,
        mesh.tp,
        mesh.pp,
        mesh.dp,
        mesh.ep,
        mesh.microbatches,
        spec.batch,
        mesh.zero,
        per_host,
        a.gbps
    );
    for (kind, ms) in &by {
        println!("  {kind:<20} {ms:>10.1} ms  {:>5.1}%", 100.0 * ms / period);
    }
    let tokens = f64::from(mesh.dp * mesh.microbatches * spec.batch) * f64::from(arch.seq_len);
    let model_tflops = arch.train_flops_per_token() * tokens / f64::from(mesh.gpus()) / (period * 1e-3) / 1e12;
    println!(
        "  iteration {period:.1} ms alone; {:.0} tokens/s; {model_tflops:.0} model TFLOP/s a GPU",
        tokens / (period * 1e-3)
    );
    if let Some(peak) = gpu.peak_tflops_16bit {
        println!(
            "  MFU {:.1}% of {peak} TFLOP/s; network arcs on the circle: {}",
            100.0 * model_tflops / peak,
            shape.circle().arcs.len()
        );
    }
    Ok(())
}
