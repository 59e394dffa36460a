//! SVG drawings of unified circles before and after rotation (the picture of
//! CASSINI Figs. 4–5): one ring per job, its Up phases coloured with an
//! opacity that grows with bandwidth, and an outer ring of total demand with
//! the excess over capacity in red. Angles run counter-clockwise from the
//! x-axis, as in the paper's figures.

use crate::score::demand;
use crate::unified::UnifiedCircle;
use std::fmt::Write;

const PALETTE: [&str; 8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"];

/// Both panels side by side; `names` label the rings.
pub fn before_after(u: &UnifiedCircle, capacity: f64, rotations: &[usize], names: &[String], title: &str) -> String {
    let panel = 420.0;
    let legend_h = 24.0 * names.len() as f64 + 20.0;
    let (w, h) = (2.0 * panel, panel + 60.0 + legend_h);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="26" font-size="18" text-anchor="middle">{}</text>"#, w / 2.0, escape(title));
    let zero = vec![0; u.jobs.len()];
    for (p, (rot, label)) in [(&zero[..], "before rotation"), (rotations, "after rotation")].into_iter().enumerate() {
        let cx = panel * (p as f64 + 0.5);
        let cy = 50.0 + panel / 2.0;
        let score = crate::score::compatibility(&demand(u, rot), capacity);
        let _ = writeln!(
            s,
            r#"<text x="{cx}" y="{}" font-size="14" text-anchor="middle">{label}: score {score:.3}</text>"#,
            50.0 + panel - 4.0
        );
        panel_rings(&mut s, u, capacity, rot, cx, cy, panel * 0.42);
    }
    for (i, n) in names.iter().enumerate() {
        let y = 50.0 + panel + 24.0 * i as f64 + 20.0;
        let c = PALETTE[i % PALETTE.len()];
        let j = &u.jobs[i];
        let _ = writeln!(s, r#"<rect x="30" y="{}" width="14" height="14" fill="{c}"/>"#, y - 12.0);
        let _ = writeln!(
            s,
            r#"<text x="52" y="{y}" font-size="13">ring {}: {} — {:.1} ms × {} on a {:.1} ms circle, rotated {:.0}°</text>"#,
            i + 1,
            escape(n),
            j.period_ms,
            j.iterations,
            u.perimeter_ms,
            rotations.get(i).copied().unwrap_or(0) as f64 * 360.0 / u.precision as f64
        );
    }
    let y = 50.0 + panel + 24.0 * names.len() as f64 + 20.0;
    let _ = writeln!(
        s,
        r##"<text x="30" y="{y}" font-size="13" fill="#444">outer ring: total demand (grey) and excess over {capacity} Gbit/s (red)</text>"##
    );
    s.push_str("</svg>\n");
    s
}

#[allow(clippy::too_many_arguments)]
fn panel_rings(s: &mut String, u: &UnifiedCircle, capacity: f64, rot: &[usize], cx: f64, cy: f64, r_max: f64) {
    let a = u.precision;
    let n = u.jobs.len();
    let ring = r_max / (n as f64 + 2.0);
    let _ = writeln!(s, r##"<circle cx="{cx}" cy="{cy}" r="{}" fill="none" stroke="#ccc"/>"##, ring);
    for (i, j) in u.jobs.iter().enumerate() {
        let (r0, r1) = (ring * (i as f64 + 1.0), ring * (i as f64 + 1.9));
        let _ = writeln!(
            s,
            r##"<circle cx="{cx}" cy="{cy}" r="{}" fill="none" stroke="#eee" stroke-width="{}"/>"##,
            (r0 + r1) / 2.0,
            r1 - r0
        );
        let peak = j.peak_gbps.max(1e-9);
        for b in 0..a {
            let v = j.demand[(b + a - rot[i] % a) % a];
            if v > 0.0 {
                let op = (0.25 + 0.75 * v / peak).min(1.0);
                wedge(s, cx, cy, r0, r1, b, a, PALETTE[i % PALETTE.len()], op);
            }
        }
    }
    let total = demand(u, rot);
    let (r0, r1) = (ring * (n as f64 + 1.0), ring * (n as f64 + 1.9));
    let max = total.iter().copied().fold(capacity, f64::max);
    for (b, &v) in total.iter().enumerate() {
        if v > 0.0 {
            let carried = r0 + (r1 - r0) * v.min(capacity) / max;
            wedge(s, cx, cy, r0, carried, b, a, "#999", 1.0);
            if v > capacity * (1.0 + 1e-9) {
                wedge(s, cx, cy, carried, r0 + (r1 - r0) * v / max, b, a, "#d62728", 1.0);
            }
        }
    }
    let cap_r = r0 + (r1 - r0) * capacity / max;
    let _ = writeln!(
        s,
        r##"<circle cx="{cx}" cy="{cy}" r="{cap_r:.2}" fill="none" stroke="#d62728" stroke-dasharray="3,3"/>"##
    );
}

/// An annular sector for bin `b` of `a`, counter-clockwise from the x-axis.
#[allow(clippy::too_many_arguments)]
fn wedge(s: &mut String, cx: f64, cy: f64, r0: f64, r1: f64, b: usize, a: usize, fill: &str, opacity: f64) {
    let t0 = b as f64 / a as f64 * std::f64::consts::TAU;
    let t1 = (b + 1) as f64 / a as f64 * std::f64::consts::TAU;
    let p = |r: f64, t: f64| (cx + r * t.cos(), cy - r * t.sin());
    let (x0, y0) = p(r1, t0);
    let (x1, y1) = p(r1, t1);
    let (x2, y2) = p(r0, t1);
    let (x3, y3) = p(r0, t0);
    let _ = writeln!(
        s,
        r#"<path d="M{x0:.2},{y0:.2} A{r1:.2},{r1:.2} 0 0 0 {x1:.2},{y1:.2} L{x2:.2},{y2:.2} A{r0:.2},{r0:.2} 0 0 1 {x3:.2},{y3:.2} Z" fill="{fill}" fill-opacity="{opacity:.2}" stroke="{fill}" stroke-opacity="{opacity:.2}" stroke-width="0.6"/>"#
    );
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unified::{CircleJob, Params, unify};
    use orrery_model::{Arc, Circle, Priority};

    #[test]
    fn draws_both_panels_with_excess_only_before() {
        let job = |p| CircleJob {
            name: "j".into(),
            priority: p,
            circle: Circle { period_ms: 100.0, arcs: vec![Arc { start_ms: 0.0, duration_ms: 50.0, gbps: 50.0 }] },
        };
        let u = unify(&[job(Priority::High), job(Priority::Low)], &Params::default()).expect("ok");
        let svg = before_after(&u, 50.0, &[0, 36], &["a".into(), "b<c".into()], "t");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("before rotation: score 0.500") && svg.contains("after rotation: score 1.000"));
        // 36 excess wedges before rotation, none after.
        assert_eq!(svg.matches("#d62728\" fill-opacity").count(), 36);
        assert!(svg.contains("b&lt;c"));
    }
}
