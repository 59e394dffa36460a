//! The figures and the self-contained `report.html` of an experiment: the
//! comparison table, per-run metrics, CDFs of JCT and iteration time, link
//! utilisation over time, the busiest link's per-job rates and circles, and
//! a Gantt of the jobs.

use crate::plot::{Bar, Figure, PlotError, Ring, Series};
use crate::summary::{Busiest, Run, Summary};
use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_interleave::{Search, solve};
use orrery_model::{JobSpec, LinkId, Topology};
use orrery_policy::Policy;
use orrery_sim::engine::{NS, SimConfig, Simulation};
use std::fmt::Write;
use std::path::Path;

/// Rows of a scenario's job table the page shows (jobs.csv has them all).
const PAGE_JOB_ROWS: usize = 200;

/// Jobs a run's Gantt panel draws at most (a sample by arrival beyond).
const GANTT_JOBS: usize = 400;

/// Runs of more events than this, or more jobs than [`REPLAY_WHOLE_JOBS`],
/// have their busiest link's window chosen in the first tenth of the run
/// and of its arrivals ([`busiest`]).
pub const REPLAY_WHOLE_EVENTS: u64 = 2_000_000;

/// See [`REPLAY_WHOLE_EVENTS`].
pub const REPLAY_WHOLE_JOBS: usize = 2_000;

/// Picks the run's busiest link (most excess demand, then most traffic),
/// replays the run up to the end of a window around its busiest second with
/// a probe on it, and collects the figure data. `policy` must be a fresh
/// instance of the run's policy; the replay is the run again (same seed, same
/// fast-forward, same scripted decisions) except that jobs crossing the
/// probed link are simulated in detail so that the probe sees their flows.
/// Cost: one more simulation up to the window's end, which for a large run
/// ([`REPLAY_WHOLE_EVENTS`]) is within its first tenth of time and of
/// arrivals; jobs on the link are
/// fast-forwarded as in the run until the window opens.
pub fn busiest(
    topo: &Topology,
    jobs: &[JobSpec],
    run: &Run,
    mut policy: Box<dyn Policy>,
    cfg: &SimConfig,
    script: &crate::script::Script,
) -> Option<Busiest> {
    let row = run
        .links
        .iter()
        .filter(|l| l.mean_util > 0.0)
        .max_by(|a, b| a.excess_gbit.total_cmp(&b.excess_gbit).then(a.mean_util.total_cmp(&b.mean_util)))?;
    let series: Vec<f64> = row.util_series.split(';').filter_map(|x| x.parse().ok()).collect();
    // The replay simulates the run up to the window, its link's jobs flow by
    // flow: for a large run, the window is the busiest bucket before a tenth
    // of the makespan and before a tenth of the jobs have arrived, so the
    // replay costs a fraction of the run instead of all of it. (A tenth of
    // the makespan alone was not: at 4,096 hosts under `metronome` the
    // arrivals fill the first tenth, and the replay took 55 s of a 92-s run.)
    let large = run.events > REPLAY_WHOLE_EVENTS || run.jobs.len() > REPLAY_WHOLE_JOBS;
    let horizon_s = large.then(|| {
        let mut arrivals: Vec<f64> = jobs.iter().map(|j| j.arrival_s).collect();
        arrivals.sort_unstable_by(f64::total_cmp);
        let tenth_arrived = arrivals.get(arrivals.len() / 10).copied().unwrap_or(0.0);
        (run.metrics.makespan_s / 10.0).min(tenth_arrived.max(row.bucket_s))
    });
    let buckets = horizon_s.map_or(series.len(), |h| ((h / row.bucket_s) as usize).clamp(1, series.len().max(1)));
    let peak = series.iter().take(buckets).enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |p| p.0);
    // A few iterations of the jobs on the link: 3 s, inside the busiest bucket.
    let start = peak as f64 * row.bucket_s + (row.bucket_s - 3.0).max(0.0) / 2.0;
    let end = start + 3.0;
    let cfg = SimConfig { max_time_s: Some(end), probe: Some((row.link, start, end)), ..cfg.clone() };
    let mut sim = Simulation::new(topo, jobs, cfg, policy.isolated_network());
    script.apply(&mut sim);
    sim.run(policy.as_mut(), &mut |_, _| {});
    let trace = sim.net.probe.take()?.trace;
    let mut owners: Vec<usize> =
        trace.iter().flat_map(|t| t.1.iter().map(|x| x.0)).filter(|&o| o < jobs.len()).collect();
    owners.sort_unstable();
    owners.dedup();
    let steps: Vec<(f64, Vec<f64>)> = trace
        .iter()
        .map(|(t, per)| {
            let rates = owners.iter().map(|o| per.iter().filter(|x| x.0 == *o).map(|x| x.1).sum()).collect();
            (*t as f64 / NS, rates)
        })
        .collect();
    // Circles of the jobs that crossed the link, as shaped on their placement.
    let on_link: Vec<(String, orrery_model::Circle)> = owners
        .iter()
        .map(|&o| &sim.jobs[o])
        .filter(|j| j.links_used().contains(&(row.link as LinkId)))
        .map(|j| (j.spec.id.clone(), j.shape.circle()))
        .filter(|(_, c)| !c.arcs.is_empty())
        .collect();
    let (before, after, score, perimeter_ms) = rings(&on_link, row.gbps);
    Some(Busiest {
        link: format!("{} → {}", row.from, row.to),
        gbps: row.gbps,
        window_s: (start, end),
        horizon_s,
        jobs: owners.iter().map(|&o| jobs[o].id.clone()).collect(),
        steps,
        before,
        after,
        score,
        perimeter_ms,
    })
}

/// Rings of jobs on their unified circle, unrotated and at the best rotation.
/// Also returns the scores and the circle's perimeter, ms.
fn rings(jobs: &[(String, orrery_model::Circle)], gbps: f64) -> (Vec<Ring>, Vec<Ring>, (f64, f64), f64) {
    let circles: Vec<CircleJob> = jobs
        .iter()
        .map(|(name, c)| CircleJob { name: name.clone(), priority: orrery_model::Priority::Low, circle: c.clone() })
        .collect();
    let Ok(u) = unify(&circles, &Params::default()) else { return (Vec::new(), Vec::new(), (1.0, 1.0), 0.0) };
    let search = if jobs.len() <= 4 { Search::OptimalCushion } else { Search::Heuristic { restarts: 4, seed: 0 } };
    let sol = solve(&u, gbps, search);
    let zero = vec![0usize; u.jobs.len()];
    let unrotated = orrery_interleave::score::compatibility(&orrery_interleave::score::demand(&u, &zero), gbps);
    let shifts = sol.shifts_ms(&u);
    let ring = |shift: &dyn Fn(usize) -> f64| -> Vec<Ring> {
        jobs.iter()
            .enumerate()
            .map(|(k, (name, c))| {
                let period = u.jobs[k].period_ms;
                let arcs = (0..u.jobs[k].iterations)
                    .flat_map(|i| {
                        c.arcs.iter().map(move |a| {
                            let s = (a.start_ms + f64::from(i) * period + shift(k)) / u.perimeter_ms;
                            (s, s + a.duration_ms / u.perimeter_ms)
                        })
                    })
                    // Wrap arcs that run past the top into two.
                    .flat_map(|(s, e)| {
                        let (s, len) = (s.rem_euclid(1.0), e - s);
                        if s + len > 1.0 { vec![(s, 1.0), (0.0, s + len - 1.0)] } else { vec![(s, s + len)] }
                    })
                    .collect();
                Ring { job: name.clone(), arcs }
            })
            .collect()
    };
    (ring(&|_| 0.0), ring(&|k| shifts[k]), (unrotated, sol.score), u.perimeter_ms)
}

/// Figures of a summary, written as SVG and PNG into `dir`; returns
/// (file stem, caption, SVG text) for the report.
pub fn figures(summary: &Summary, dir: &Path) -> Result<Vec<(String, String, String)>, PlotError> {
    let mut out = Vec::new();
    let several_scenarios = summary.runs.iter().any(|r| r.scenario != summary.runs[0].scenario);
    let label = |r: &Run| if several_scenarios { format!("{} {}", r.scenario, r.policy) } else { r.policy.clone() };
    let first_seed: Vec<&Run> = summary.runs.iter().filter(|r| r.seed == summary.seed).collect();
    // One curve per policy, its seeds pooled, and a panel per scenario: the
    // same policy keeps its colour in every panel.
    let pooled = |f: &dyn Fn(&Run) -> Vec<f64>| -> Vec<Series<f64>> {
        let mut series: Vec<Series<f64>> = Vec::new();
        for r in &summary.runs {
            match series.iter_mut().find(|s| s.name == r.policy && s.facet == r.scenario) {
                Some(s) => s.values.extend(f(r)),
                None => series.push(Series::in_facet(r.policy.clone(), r.scenario.clone(), f(r))),
            }
        }
        series
    };
    let seeds = summary.runs.iter().map(|r| r.seed).collect::<std::collections::BTreeSet<_>>().len();
    let mut pooled_note = if several_scenarios { ", a panel per scenario".to_string() } else { String::new() };
    if seeds > 1 {
        pooled_note += &format!(", {seeds} seeds pooled");
    }
    let jct = Figure::Cdf {
        title: format!("{}: job completion time", summary.experiment),
        x_label: "JCT (s, log scale)".into(),
        series: pooled(&|r| r.jobs.iter().filter_map(|j| j.jct_s).collect()),
    };
    out.push(("jct_cdf".into(), format!("CDF of job completion times{pooled_note}."), jct.save(dir, "jct_cdf")?));
    let iters = Figure::Cdf {
        title: format!("{}: iteration time", summary.experiment),
        x_label: "iteration time (s, log scale)".into(),
        series: pooled(&|r| r.iteration_s.clone()),
    };
    out.push((
        "iteration_cdf".into(),
        format!("CDF of iteration times{pooled_note} (CASSINI Fig. 11b)."),
        iters.save(dir, "iteration_cdf")?,
    ));
    // Utilisation over time of each run's busiest link (first seed).
    let util: Vec<Series<(f64, f64)>> = first_seed
        .iter()
        .filter_map(|r| {
            let row = r.links.iter().max_by(|a, b| a.mean_util.total_cmp(&b.mean_util))?;
            let pts = row
                .util_series
                .split(';')
                .filter_map(|x| x.parse::<f64>().ok())
                .enumerate()
                .map(|(i, u)| (i as f64 * row.bucket_s, 100.0 * u))
                .collect();
            Some(Series::in_facet(r.policy.clone(), r.scenario.clone(), pts))
        })
        .collect();
    let util = Figure::Lines {
        title: format!("{}: utilisation of each run's busiest link", summary.experiment),
        y_label: "utilisation (%)".into(),
        series: util,
    };
    out.push((
        "link_util".into(),
        "Utilisation of the busiest link of each run over time (bucket means, first seed), a panel per scenario."
            .into(),
        util.save(dir, "link_util")?,
    ));
    for (k, r) in first_seed.iter().enumerate() {
        let Some(b) = &r.busiest else { continue };
        let stem = format!("busiest_{k}");
        let fig = Figure::Stacked {
            title: format!("{}: {} ({} Gbit/s)", label(r), b.link, b.gbps),
            capacity: b.gbps,
            names: b.jobs.clone(),
            steps: b.steps.clone(),
        };
        let mut caption = format!(
            "{}: per-job rates on its busiest link {} over {:.1}–{:.1} s (CASSINI Fig. 15).",
            label(r),
            b.link,
            b.window_s.0,
            b.window_s.1
        );
        if let Some(h) = b.horizon_s {
            caption += &format!(
                " The window is the link's busiest second before {h:.0} s, the first tenth of the run: a run of {} jobs and {} events is not replayed whole for a figure.",
                r.jobs.len(),
                r.events
            );
        }
        out.push((stem.clone(), caption, fig.save(dir, &stem)?));
        if !b.before.is_empty() {
            let stem = format!("circles_{k}");
            let fig = Figure::Circles {
                title: format!("{}: circles of {}", label(r), b.link),
                perimeter_ms: b.perimeter_ms,
                panels: vec![
                    (format!("unrotated: score {:.2}", b.score.0), b.before.clone()),
                    (format!("best rotation: score {:.2}", b.score.1), b.after.clone()),
                ],
            };
            let caption = format!(
                "{}: the jobs on {} on their unified circle, before and after the best rotation (CASSINI Fig. 5).",
                label(r),
                b.link
            );
            out.push((stem.clone(), caption, fig.save(dir, &stem)?));
        }
    }
    out.extend(gain_figures(summary, dir)?);
    out.extend(sharing_figures(summary, dir)?);
    out.extend(tenant_figure(summary, dir)?);
    let gantt = Figure::Gantt {
        title: format!("{}: jobs over time (light: waiting, dark: running)", summary.experiment),
        panels: first_seed
            .iter()
            .take(8)
            .map(|r| {
                // Every k-th job by arrival when there are more than a
                // figure can show (all of them are in jobs.csv).
                let every = r.jobs.len().div_ceil(GANTT_JOBS).max(1);
                let bars = r
                    .jobs
                    .iter()
                    .step_by(every)
                    .map(|j| Bar {
                        job: j.id.clone(),
                        arrival_s: j.arrival_s,
                        start_s: j.queue_s.map(|q| j.arrival_s + q),
                        end_s: j.jct_s.map(|c| j.arrival_s + c),
                    })
                    .collect();
                (label(r), bars)
            })
            .collect(),
    };
    let most = first_seed.iter().take(8).map(|r| r.jobs.len()).max().unwrap_or(0);
    let caption = if most > GANTT_JOBS {
        format!(
            "Job Gantt per run (first seed): every {}th job by arrival, at most {GANTT_JOBS} of a run's {most} (all of them are in jobs.csv).",
            most.div_ceil(GANTT_JOBS)
        )
    } else {
        "Job Gantt per run (first seed).".into()
    };
    out.push(("gantt".into(), caption, gantt.save(dir, "gantt")?));
    Ok(out)
}

/// A policy name as part of a file name: anything but letters and digits
/// becomes `_` (`random+foresight` → `random_foresight`).
fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// Figures of the gain over the baseline (its mean iteration time over the
/// policy's): with five or more seeds, per policy its CDF over seeds with a
/// line per scenario (FORESIGHT Fig. 6, one seed = one placement); when
/// scenario names form a grid `a=x,b=y`, one heatmap per policy (FORESIGHT
/// Fig. 7).
fn gain_figures(summary: &Summary, dir: &Path) -> Result<Vec<(String, String, String)>, PlotError> {
    let mut out = Vec::new();
    let base = &summary.baseline;
    // Per policy, per scenario: the gain of each seed.
    let mut per_seed: Vec<(&str, Vec<Series<f64>>)> = Vec::new();
    for r in summary.runs.iter().filter(|r| &r.policy != base) {
        let Some(b) = summary.runs.iter().find(|b| &b.policy == base && b.scenario == r.scenario && b.seed == r.seed)
        else {
            continue;
        };
        let gain = b.metrics.avg_iter_s / r.metrics.avg_iter_s;
        let policy = match per_seed.iter_mut().find(|p| p.0 == r.policy) {
            Some(p) => p,
            None => {
                per_seed.push((&r.policy, Vec::new()));
                per_seed.last_mut().expect("just pushed")
            }
        };
        match policy.1.iter_mut().find(|s| s.name == r.scenario) {
            Some(s) => s.values.push(gain),
            None => policy.1.push(Series::new(r.scenario.clone(), vec![gain])),
        }
    }
    for (policy, series) in per_seed.into_iter().filter(|p| p.1.iter().any(|s| s.values.len() >= 5)) {
        let stem = format!("gain_cdf_{}", file_stem(policy));
        let fig = Figure::Cdf {
            title: format!("{}: {policy}'s gain over {base} per placement", summary.experiment),
            x_label: format!("{base} mean iteration / {policy}'s (log scale)"),
            series,
        };
        let caption = format!(
            "{policy}: CDF over seeds (placements) of the gain in mean iteration time over {base}, per scenario (FORESIGHT Fig. 6)."
        );
        out.push((stem.clone(), caption, fig.save(dir, &stem)?));
    }
    out.extend(variant_heatmap(summary, dir)?);
    // A grid: every scenario named `a=x,b=y` with the same two keys.
    let cells: Vec<Option<(&str, &str, &str, &str)>> = summary
        .comparison
        .iter()
        .map(|c| {
            let (a, b) = c.scenario.split_once(',')?;
            let (ka, va) = a.split_once('=')?;
            let (kb, vb) = b.split_once('=')?;
            Some((ka, va, kb, vb))
        })
        .collect();
    let Some(Some((ka, _, kb, _))) = cells.first().copied() else { return Ok(out) };
    if cells.iter().any(|c| !matches!(c, Some((a, _, b, _)) if *a == ka && *b == kb)) {
        return Ok(out);
    }
    let axis = |pick: fn(&(&str, &str, &str, &str)) -> String| {
        let mut v: Vec<String> = cells.iter().flatten().map(pick).collect();
        v.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => x.total_cmp(&y),
            _ => a.cmp(b),
        });
        v.dedup();
        v
    };
    let xs = axis(|c| c.1.to_string());
    let ys = axis(|c| c.3.to_string());
    if xs.len() < 2 || ys.len() < 2 {
        return Ok(out);
    }
    let mut policies: Vec<&str> = Vec::new();
    for c in summary.comparison.iter().filter(|c| &c.policy != base) {
        if !policies.contains(&c.policy.as_str()) {
            policies.push(&c.policy);
        }
    }
    for (i, p) in policies.iter().enumerate() {
        let mut values = vec![vec![None; xs.len()]; ys.len()];
        for (c, cell) in summary.comparison.iter().zip(&cells) {
            let Some((_, vx, _, vy)) = cell else { continue };
            if c.policy != *p {
                continue;
            }
            let (Some(x), Some(y)) = (xs.iter().position(|v| v == vx), ys.iter().position(|v| v == vy)) else {
                continue;
            };
            values[y][x] = Some(c.gain_avg_iter);
        }
        let stem = format!("heatmap_{i}");
        let fig = Figure::Heatmap {
            title: format!("{}: {p} gain over {base}", summary.experiment),
            x_label: ka.to_string(),
            y_label: kb.to_string(),
            xs: xs.clone(),
            ys: ys.clone(),
            values,
        };
        let caption = format!("{p}: mean iteration time of {base} over {p}'s, per {ka} and {kb} (FORESIGHT Fig. 7).");
        out.push((stem.clone(), caption, fig.save(dir, &stem)?));
    }
    Ok(out)
}

/// When policies come in pairs `P` and `P:variant` (Plebiscito's
/// `plebiscito:lgf` and `plebiscito:lgf:unaware`), a heatmap of each `P`'s
/// gain in mean JCT over its variant per scenario (Plebiscito Fig. 3).
fn variant_heatmap(summary: &Summary, dir: &Path) -> Result<Vec<(String, String, String)>, PlotError> {
    let mut policies: Vec<&str> = Vec::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for c in &summary.comparison {
        if !policies.contains(&c.policy.as_str()) {
            policies.push(&c.policy);
        }
        if !scenarios.contains(&c.scenario.as_str()) {
            scenarios.push(&c.scenario);
        }
    }
    // The most common suffix `s` with both `P` and `P:s` present.
    let mut suffixes: Vec<(&str, usize)> = Vec::new();
    for q in &policies {
        for p in &policies {
            if let Some(s) = q.strip_prefix(p).and_then(|r| r.strip_prefix(':')) {
                match suffixes.iter_mut().find(|x| x.0 == s) {
                    Some(x) => x.1 += 1,
                    None => suffixes.push((s, 1)),
                }
            }
        }
    }
    let Some(&(suffix, _)) = suffixes.iter().max_by_key(|x| x.1) else { return Ok(Vec::new()) };
    let bases: Vec<&str> =
        policies.iter().copied().filter(|p| policies.contains(&format!("{p}:{suffix}").as_str())).collect();
    let jct =
        |p: &str, sc: &str| summary.comparison.iter().find(|c| c.policy == p && c.scenario == sc).map(|c| c.avg_jct_s);
    let values: Vec<Vec<Option<f64>>> = bases
        .iter()
        .map(|p| {
            scenarios
                .iter()
                .map(|sc| Some(jct(&format!("{p}:{suffix}"), sc)? / jct(p, sc)?).filter(|v| v.is_finite()))
                .collect()
        })
        .collect();
    let fig = Figure::Heatmap {
        title: format!("{}: mean JCT of P:{suffix} over P's", summary.experiment),
        x_label: "scenario".into(),
        y_label: bases.first().and_then(|b| b.split_once(':')).map_or("P".into(), |x| format!("P = {}:…", x.0)),
        xs: scenarios.iter().map(|s| s.to_string()).collect(),
        ys: bases.iter().map(|s| s.split_once(':').map_or(*s, |x| x.1).to_string()).collect(),
        values,
    };
    let caption =
        format!("Mean JCT of each policy's `{suffix}` variant over the policy's own (> 1: the policy is faster).");
    Ok(vec![("variant_gain".into(), caption, fig.save(dir, "variant_gain")?)])
}

/// HTML rows of a table of cells; the first row is the header.
/// Whether the experiment compares GPU-sharing policies (Castor).
fn shares_gpus(summary: &Summary) -> bool {
    summary.runs.iter().any(|r| matches!(r.policy.as_str(), "castor" | "sjf-ffs" | "lucid"))
}

/// Means over seeds of `f` per (scenario, policy), in first-seen order.
fn per_policy(summary: &Summary, f: impl Fn(&Run) -> f64) -> Vec<(String, String, f64)> {
    let mut out: Vec<(String, String, f64, usize)> = Vec::new();
    for r in &summary.runs {
        let v = f(r);
        match out.iter_mut().find(|x| x.0 == r.scenario && x.1 == r.policy) {
            Some(x) => (x.2, x.3) = (x.2 + v, x.3 + 1),
            None => out.push((r.scenario.clone(), r.policy.clone(), v, 1)),
        }
    }
    out.into_iter().map(|(s, p, v, n)| (s, p, v / n as f64)).collect()
}

/// The scenarios and policies of [`per_policy`]'s rows, in first-seen order.
fn axes(rows: &[(String, String, f64)]) -> (Vec<&str>, Vec<&str>) {
    let (mut scenarios, mut policies): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for (s, p, _) in rows {
        if !scenarios.contains(&s.as_str()) {
            scenarios.push(s);
        }
        if !policies.contains(&p.as_str()) {
            policies.push(p);
        }
    }
    (scenarios, policies)
}

/// Heatmap values: a row per policy (last first, as heatmaps draw bottom up),
/// a column per scenario, each value scaled.
fn grid(rows: &[(String, String, f64)], scenarios: &[&str], policies: &[&str], scale: f64) -> Vec<Vec<Option<f64>>> {
    policies
        .iter()
        .rev()
        .map(|p| scenarios.iter().map(|s| rows.iter().find(|x| x.0 == *s && x.1 == *p).map(|x| scale * x.2)).collect())
        .collect()
}

/// A heatmap of [`per_policy`]'s rows: a column per scenario, a row per
/// policy (the first on top), each value scaled.
fn policy_heatmap(
    title: String,
    x_label: &str,
    rows: &[(String, String, f64)],
    scenarios: &[&str],
    policies: &[&str],
    scale: f64,
) -> Figure {
    Figure::Heatmap {
        title,
        x_label: x_label.into(),
        y_label: "policy".into(),
        xs: scenarios.iter().map(|s| s.to_string()).collect(),
        ys: policies.iter().rev().map(|p| p.to_string()).collect(),
        values: grid(rows, scenarios, policies, scale),
    }
}

/// Castor's figures: how GPU time splits into idle, one job and two jobs
/// per policy (Figs. 9c-d, 12c-d, by occupancy rather than SM activity),
/// and, when the scenarios are loads `load=x`, mean JCT per policy and load
/// (Fig. 16).
fn sharing_figures(summary: &Summary, dir: &Path) -> Result<Vec<(String, String, String)>, PlotError> {
    if !shares_gpus(summary) {
        return Ok(Vec::new());
    }
    let idle = per_policy(summary, |r| r.metrics.gpu_idle);
    let shared = per_policy(summary, |r| r.metrics.gpu_shared);
    let (scenarios, policies) = axes(&idle);
    let mut out = Vec::new();
    if scenarios.len() == 1 {
        let values = idle
            .iter()
            .zip(&shared)
            .map(|((_, _, i), (_, _, sh))| vec![Some(100.0 * i), Some(100.0 * (1.0 - i - sh)), Some(100.0 * sh)])
            .rev()
            .collect();
        let fig = Figure::Heatmap {
            title: format!("{}: GPU time by jobs on the GPU (%)", summary.experiment),
            x_label: "jobs on the GPU".into(),
            y_label: "policy".into(),
            xs: vec!["none".into(), "one".into(), "two".into()],
            ys: policies.iter().rev().map(|p| p.to_string()).collect(),
            values,
        };
        out.push((
            "gpu_occupancy".into(),
            "Share of GPU time with no job, one job and two jobs on the GPU, means over seeds (Castor Figs. 9c-d, \
             12c-d; occupancy, not SM activity)."
                .into(),
            fig.save(dir, "gpu_occupancy")?,
        ));
    } else {
        for (stem, what, table) in [("gpu_idle", "no job", &idle), ("gpu_shared", "two jobs", &shared)] {
            let title = format!("{}: GPU time with {what} on the GPU (%)", summary.experiment);
            let fig = policy_heatmap(title, "scenario", table, &scenarios, &policies, 100.0);
            let caption = format!(
                "Share of GPU time with {what} on the GPU per policy and scenario, means over seeds (Castor Figs. 9c-d, \
                 12c-d; occupancy, not SM activity)."
            );
            out.push((stem.into(), caption, fig.save(dir, stem)?));
        }
    }
    let jct = per_policy(summary, |r| r.metrics.avg_jct_s / 3600.0);
    let (loads, policies) = axes(&jct);
    if loads.len() > 1 && loads.iter().all(|l| l.starts_with("load=")) {
        let title = format!("{}: mean JCT (h) by load", summary.experiment);
        let fig = policy_heatmap(title, "workload intensity", &jct, &loads, &policies, 1.0);
        out.push((
            "jct_by_load".into(),
            "Mean JCT in hours per policy and workload intensity, means over seeds (Castor Fig. 16).".into(),
            fig.save(dir, "jct_by_load")?,
        ));
    }
    Ok(out)
}

/// Castor Tables 5-6: mean JCT and queueing (all time waiting) in hours, for
/// all jobs, large jobs (> 8 GPUs) and small ones, means over seeds.
pub fn size_table(summary: &Summary) -> Vec<Vec<String>> {
    let h = |f: fn(&Run) -> f64| per_policy(summary, move |r| f(r) / 3600.0);
    let cols = [
        h(|r| r.metrics.avg_jct_s),
        h(|r| r.metrics.avg_jct_large_s),
        h(|r| r.metrics.avg_jct_small_s),
        h(|r| r.metrics.avg_wait_s),
        h(|r| r.metrics.avg_wait_large_s),
        h(|r| r.metrics.avg_wait_small_s),
    ];
    let mut rows = vec![
        ["scenario", "policy", "JCT all (h)", "JCT large", "JCT small", "queue all (h)", "queue large", "queue small"]
            .map(String::from)
            .to_vec(),
    ];
    for (k, (s, p, _)) in cols[0].iter().enumerate() {
        let mut row = vec![s.clone(), p.clone()];
        row.extend(cols.iter().map(|c| format!("{:.2}", c[k].2)));
        rows.push(row);
    }
    rows
}

/// Each tenant of each run (issue 70): its quota, its jobs' mean JCT, its
/// share of the cluster's GPU time, its worst hour (GPUs held over
/// `min(demand, quota)`; ≥ 1 means its quota was honoured that hour) and
/// the longest wait of its jobs that arrived within its quota. Empty
/// without tenants.
pub fn tenant_table(summary: &Summary) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for r in summary.runs.iter().filter(|r| !r.tenant_share.is_empty()) {
        if rows.is_empty() {
            rows.push(
                [
                    "scenario",
                    "policy",
                    "seed",
                    "tenant",
                    "quota",
                    "jobs",
                    "JCT (h)",
                    "GPU share",
                    "worst hour",
                    "within quota",
                    "their max wait (s)",
                ]
                .map(String::from)
                .to_vec(),
            );
        }
        for (t, share) in &r.tenant_share {
            let m = r.by_tenant.get(t);
            rows.push(vec![
                r.scenario.clone(),
                r.policy.clone(),
                r.seed.to_string(),
                t.clone(),
                share.quota_gpus.to_string(),
                m.map_or(String::new(), |m| m.jobs.to_string()),
                m.map_or(String::new(), |m| format!("{:.2}", m.avg_jct_s / 3600.0)),
                m.map_or(String::new(), |m| format!("{:.3}", m.gpu_util)),
                share.worst_hour.map_or("-".into(), |w| format!("{w:.3}")),
                share.jobs_within_quota.to_string(),
                share.max_wait_within_quota_s.map_or("-".into(), |w| format!("{w:.1}")),
            ]);
        }
    }
    rows
}

/// GPUs each tenant held over time against what its quota guaranteed it
/// (`min(demand, quota)`), a panel per policy (first seed, first scenario).
fn tenant_figure(summary: &Summary, dir: &Path) -> Result<Vec<(String, String, String)>, PlotError> {
    let Some(first) = summary.runs.iter().find(|r| !r.tenant_share.is_empty()) else { return Ok(Vec::new()) };
    let mut series = Vec::new();
    for r in summary.runs.iter().filter(|r| r.seed == first.seed && r.scenario == first.scenario) {
        for (t, share) in &r.tenant_share {
            let pts = |f: fn(&orrery_sim::tenants::Window) -> f64| -> Vec<(f64, f64)> {
                share.windows.iter().map(|w| (w.from_s, f(w))).collect()
            };
            series.push(Series::in_facet(format!("{t}: held"), r.policy.clone(), pts(|w| w.held_gpus)));
            series.push(Series::in_facet(format!("{t}: entitled"), r.policy.clone(), pts(|w| w.entitled_gpus)));
        }
    }
    let fig = Figure::Lines {
        title: format!("{}: GPUs each tenant held, and what its quota guaranteed it", summary.experiment),
        y_label: "GPUs (10-minute means)".into(),
        series,
    };
    let caption = format!(
        "Each tenant's GPUs held over time against its entitlement, min(GPUs its jobs ask for, its quota),          10-minute means, a panel per policy (seed {}, {}). Held above entitled is borrowing; below it, the quota          was not honoured.",
        first.seed, first.scenario
    );
    Ok(vec![("tenant_share".into(), caption, fig.save(dir, "tenant_share")?)])
}

fn table_rows(h: &mut String, rows: &[Vec<String>]) {
    for (k, row) in rows.iter().enumerate() {
        let tag = if k == 0 { "th" } else { "td" };
        h.push_str("<tr>");
        for cell in row {
            let _ = write!(h, "<{tag}>{}</{tag}>", esc(cell));
        }
        h.push_str("</tr>\n");
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The policy the headline measures: the experiment's choice, else the one
/// with the best mean gain in mean JCT over the baseline (ideal networks
/// aside, as no scheduler can have one).
fn headline_policy(summary: &Summary) -> Option<String> {
    if let Some(h) = &summary.headline {
        return Some(h.clone());
    }
    let mut best: Option<(String, f64)> = None;
    for c in summary.comparison.iter().filter(|c| c.policy != summary.baseline && !c.policy.starts_with("ideal")) {
        let lines: Vec<f64> = summary
            .comparison
            .iter()
            .filter(|x| x.policy == c.policy && x.gain_avg_jct.is_finite())
            .map(|x| x.gain_avg_jct)
            .collect();
        let mean = lines.iter().sum::<f64>() / lines.len().max(1) as f64;
        if !lines.is_empty() && best.as_ref().is_none_or(|b| mean > b.1) {
            best = Some((c.policy.clone(), mean));
        }
    }
    best.map(|b| b.0)
}

/// orrery's headline: the headline policy's gains over the baseline in mean
/// and p99 iteration time and mean JCT, means over scenarios (with their
/// range when there are several). None without a policy to compare.
pub fn headline(summary: &Summary) -> Option<String> {
    let policy = headline_policy(summary)?;
    let lines: Vec<_> = summary.comparison.iter().filter(|c| c.policy == policy).collect();
    if lines.is_empty() || lines.iter().all(|c| !c.gain_avg_jct.is_finite()) {
        return None;
    }
    let stat = |f: fn(&crate::summary::Comparison) -> f64| {
        let v: Vec<f64> = lines.iter().map(|c| f(c)).filter(|v| v.is_finite()).collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        if v.len() > 1 && hi - lo >= 0.005 {
            format!("{mean:.2}× ({lo:.2}–{hi:.2}×)")
        } else {
            format!("{mean:.2}×")
        }
    };
    let over = if lines.len() > 1 { format!(", means over {} scenarios", lines.len()) } else { String::new() };
    Some(format!(
        "{policy} against {}: mean iteration time {}, p99 iteration time {}, mean JCT {} (the baseline's over \
         {policy}'s: above 1 is better{over}).",
        summary.baseline,
        stat(|c| c.gain_avg_iter),
        stat(|c| c.gain_p99_iter),
        stat(|c| c.gain_avg_jct),
    ))
}

/// The figures the report leads with: the gain figures when there are any
/// (FORESIGHT Figs. 6–7, Castor Fig. 16, Plebiscito Fig. 3), then the CDFs
/// of JCT and iteration time; at most three.
fn key_figures(figures: &[(String, String, String)]) -> Vec<usize> {
    let rank = |stem: &str| match stem {
        s if s.starts_with("heatmap_") || s.starts_with("gain_cdf_") => 0,
        "jct_by_load" | "variant_gain" | "gpu_occupancy" => 0,
        "iteration_cdf" => 1,
        "jct_cdf" => 2,
        _ => 9,
    };
    let mut order: Vec<usize> = (0..figures.len()).filter(|&i| rank(&figures[i].0) < 9).collect();
    order.sort_by_key(|&i| rank(&figures[i].0));
    order.truncate(3);
    order
}

fn figure_html(h: &mut String, (stem, caption, svg): &(String, String, String)) {
    // Drop the XML prolog, if any, to inline the SVG.
    let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
    let _ = writeln!(
        h,
        "<figure id=\"{stem}\">{body}<figcaption>{} (<a href=\"{stem}.svg\">SVG</a>, <a href=\"{stem}.png\">PNG</a>)</figcaption></figure>",
        esc(caption)
    );
}

/// A table that scrolls sideways inside the page rather than widening it.
fn table_html(h: &mut String, rows: &[Vec<String>]) {
    h.push_str("<div class=\"scroll\"><table>\n");
    table_rows(h, rows);
    h.push_str("</table></div>\n");
}

/// The per-run rows of the report's Runs table.
fn runs_rows(summary: &Summary) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "scenario",
            "policy",
            "seed",
            "finished",
            "avg JCT (s)",
            "p99 JCT (s)",
            "avg queue (s)",
            "avg slowdown",
            "GPU util",
            "link util",
            "Γ",
            "excess (Gbit)",
            "decision p99 (ms)",
            "wall (s)",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in &summary.runs {
        let m = &r.metrics;
        rows.push(vec![
            r.scenario.clone(),
            r.policy.clone(),
            r.seed.to_string(),
            format!("{}/{}", m.finished, m.jobs),
            format!("{:.0}", m.avg_jct_s),
            format!("{:.0}", m.p99_jct_s),
            format!("{:.0}", m.avg_queue_s),
            format!("{:.3}", m.avg_slowdown),
            format!("{:.0}%", 100.0 * m.gpu_util),
            format!("{:.1}%", 100.0 * m.avg_link_util),
            format!("{:.3}", m.bw_util_gamma),
            format!("{:.0}", m.excess_gbit),
            format!("{:.3}", m.decision_ms_p99),
            format!("{:.2}", r.wall_s),
        ]);
    }
    rows
}

/// `report.html`: one self-contained page (inline SVG, no scripts). It
/// leads with what the experiment is, the paper's number, orrery's headline
/// and the key figures; then the comparison, the other figures, and the
/// long tables folded.
pub fn html(summary: &Summary, figures: &[(String, String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>orrery: {0}</title>\n<style>\
         body{{font-family:'DejaVu Sans',Arial,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222;line-height:1.45}}\
         .lead{{font-size:17px}}.claims{{background:#f5f7fa;border-left:4px solid #1f77b4;padding:.4em 1em;margin:1em 0}}\
         .claims p{{margin:.4em 0}}nav{{font-size:14px;margin:1em 0}}nav a{{margin-right:1em}}\
         .scroll{{overflow-x:auto;max-width:100%}}\
         table{{border-collapse:collapse;font-size:13px;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}\
         th{{background:#f3f3f3;white-space:nowrap}}td:first-child,td:nth-child(2){{text-align:left;white-space:nowrap}}\
         figure{{margin:1.5em 0}}figcaption{{font-size:13px;color:#555}}svg{{max-width:100%;height:auto}}\
         details{{margin:1em 0}}summary{{cursor:pointer;font-weight:bold}}</style></head><body>\n\
         <h1>{0}</h1>\n",
        esc(&summary.experiment),
    );
    if let Some(d) = &summary.description {
        let _ = writeln!(h, "<p class=\"lead\">{}</p>", esc(d));
    }
    h.push_str("<div class=\"claims\">\n");
    if let Some(p) = &summary.paper {
        let _ = writeln!(h, "<p><b>The paper:</b> {}</p>", esc(p));
    }
    match headline(summary) {
        Some(line) => {
            let _ = writeln!(h, "<p><b>orrery:</b> {}</p>", esc(&line));
        }
        None => {
            let _ = writeln!(h, "<p><b>orrery:</b> one policy, {}; nothing to compare.</p>", esc(&summary.baseline));
        }
    }
    h.push_str("</div>\n");
    let key = key_figures(figures);
    let sizes = shares_gpus(summary);
    let mut contents = vec![("key-figures", "Key figures"), ("comparison", "Comparison")];
    if sizes {
        contents.push(("by-size", "By job size"));
    }
    let tenants = tenant_table(summary);
    if !tenants.is_empty() {
        contents.push(("by-tenant", "By tenant"));
    }
    if figures.len() > key.len() {
        contents.push(("figures", "More figures"));
    }
    contents.extend([("jobs", "Jobs"), ("runs", "Runs"), ("files", "Files")]);
    h.push_str("<nav><b>Contents:</b> ");
    for (id, name) in &contents {
        let _ = write!(h, "<a href=\"#{id}\">{name}</a>");
    }
    h.push_str("</nav>\n<h2 id=\"key-figures\">Key figures</h2>\n");
    for &i in &key {
        figure_html(&mut h, &figures[i]);
    }
    let _ = writeln!(
        h,
        "<h2 id=\"comparison\">Comparison</h2>\n<p>Means over seeds; each <i>x</i> column is the baseline's value \
         (<b>{}</b>) over the policy's: above 1 is better.</p>",
        esc(&summary.baseline)
    );
    table_html(&mut h, &crate::summary::comparison_table(&summary.comparison));
    if sizes {
        h.push_str(
            "<h2 id=\"by-size\">By job size</h2>\n<p>Castor Tables 5-6: large jobs use more than 8 GPUs; queueing is all \
             time spent waiting.</p>\n",
        );
        table_html(&mut h, &size_table(summary));
    }
    if !tenants.is_empty() {
        h.push_str(
            "<h2 id=\"by-tenant\">By tenant</h2>\n<p>Each tenant's quota, its jobs, its share of the cluster's GPU \
             time, its <i>worst hour</i> (GPUs held over min(demand, quota): 1 or more means its quota was honoured \
             that hour) and how long its jobs that arrived within its quota waited at most.</p>\n",
        );
        table_html(&mut h, &tenants);
    }
    if figures.len() > key.len() {
        h.push_str("<h2 id=\"figures\">More figures</h2>\n");
        for (_, f) in figures.iter().enumerate().filter(|(i, _)| !key.contains(i)) {
            figure_html(&mut h, f);
        }
    }
    let jobs = crate::summary::job_tables(summary);
    let rows: usize = jobs.iter().map(|(_, r)| r.len().saturating_sub(1)).sum();
    let _ = writeln!(
        h,
        "<h2 id=\"jobs\">Jobs</h2>\n<details><summary>Mean iteration time per job (first seed) against its time alone \
         on the same placement: {rows} rows in {} tables</summary>",
        jobs.len()
    );
    for (scenario, rows) in &jobs {
        let _ = writeln!(h, "<h3>{}</h3>", esc(scenario));
        // The header and the first rows: a page of 80,000 rows helps no one.
        table_html(&mut h, &rows[..rows.len().min(PAGE_JOB_ROWS + 1)]);
        if rows.len() > PAGE_JOB_ROWS + 1 {
            let _ = writeln!(
                h,
                "<p>The first {PAGE_JOB_ROWS} of {} jobs; all of them are in <a href=\"jobs.csv\">jobs.csv</a>.</p>",
                rows.len() - 1
            );
        }
    }
    h.push_str("</details>\n");
    let _ = writeln!(
        h,
        "<h2 id=\"runs\">Runs</h2>\n<details><summary>Metrics of each of the {} runs</summary>",
        summary.runs.len()
    );
    table_html(&mut h, &runs_rows(summary));
    h.push_str("</details>\n");
    h.push_str(
        "<h2 id=\"files\">Files</h2>\n<p>Beside this page: <a href=\"summary.json\">summary.json</a> (every number \
         here), <a href=\"jobs.csv\">jobs.csv</a>, <a href=\"links.csv\">links.csv</a>, and each figure as SVG and \
         PNG. Made by orrery.</p></body></html>\n",
    );
    h
}
