//! Plots of a run as self-contained SVG: empirical CDFs of job completion
//! times and iteration times, one line per policy (CASSINI Figs. 11–14 plot
//! the same curves).

use std::fmt::Write;

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// An empirical CDF per series on a log-10 x axis (values ≤ 0 are dropped).
pub fn cdf_svg(title: &str, x_label: &str, series: &[(String, Vec<f64>)]) -> String {
    let (w, h) = (720.0, 440.0);
    let (left, right, top, bottom) = (70.0, 170.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let all: Vec<f64> = series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| *v > 0.0 && v.is_finite()).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        esc(title)
    );
    if all.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="14" text-anchor="middle">no data</text></svg>"#,
            w / 2.0,
            h / 2.0
        );
        return s;
    }
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).log10().floor();
    let hi = all.iter().copied().fold(0.0, f64::max).log10().ceil().max(lo + 1.0);
    let x = |v: f64| left + (v.log10() - lo) / (hi - lo) * pw;
    let y = |p: f64| top + (1.0 - p) * ph;
    // Grid and axes.
    for d in (lo as i32)..=(hi as i32) {
        let xv = x(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{xv:.1}" y1="{top}" x2="{xv:.1}" y2="{}" stroke="#ddd"/>"##, top + ph);
        let _ = writeln!(
            s,
            r#"<text x="{xv:.1}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
            top + ph + 18.0,
            tick(d)
        );
    }
    for k in 0..=4 {
        let p = f64::from(k) / 4.0;
        let _ =
            writeln!(s, r##"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##, y(p), left + pw, y(p));
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" font-size="12" text-anchor="end">{p:.2}</text>"#,
            left - 6.0,
            y(p) + 4.0
        );
    }
    let _ = writeln!(s, r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 16.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" font-size="13" text-anchor="middle" transform="rotate(-90 18 {})">CDF</text>"#,
        top + ph / 2.0,
        top + ph / 2.0
    );
    for (i, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0 && v.is_finite()).collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // At most ~600 points per line: every k-th order statistic, plus the last.
        let step = n.div_ceil(600).max(1);
        let mut pts = String::new();
        for k in (0..n).step_by(step).chain(std::iter::once(n - 1)) {
            let _ = write!(pts, "{:.1},{:.1} ", x(v[k]), y((k + 1) as f64 / n as f64));
        }
        let c = COLORS[i % COLORS.len()];
        let _ = writeln!(s, r#"<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>"#);
        let ly = top + 16.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/>"#,
            left + pw + 12.0,
            left + pw + 36.0
        );
        let _ = writeln!(s, r#"<text x="{}" y="{}" font-size="12">{}</text>"#, left + pw + 42.0, ly + 4.0, esc(name));
    }
    s.push_str("</svg>\n");
    s
}

fn tick(d: i32) -> String {
    let v = 10f64.powi(d);
    if (-3..=5).contains(&d) { format!("{v}") } else { format!("1e{d}") }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_polyline_per_series_and_a_legend() {
        let svg = cdf_svg("t", "x (s)", &[("a".into(), vec![1.0, 2.0, 30.0]), ("b<".into(), vec![5.0])]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("b&lt;") && svg.trim_end().ends_with("</svg>"));
        // The last point of each CDF is at probability 1 (the top of the plot).
        assert!(svg.contains(",40.0 \"") || svg.contains(",40.0 "));
        assert!(cdf_svg("t", "x", &[]).contains("no data"));
    }
}
