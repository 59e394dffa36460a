//! Figures of a run, drawn with plotters as SVG and PNG from one description
//! ([`Figure`]): CDFs (CASSINI Figs. 11–14), link utilisation over time and
//! the per-job rates on the busiest link (CASSINI Fig. 15), the circles of
//! that link before and after rotation (CASSINI Fig. 5), and a job Gantt.
//!
//! Text uses DejaVu Sans, embedded in the binary (`assets/`), so PNGs render
//! the same on a machine without fonts.

use plotters::coord::Shift;
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;
use std::path::Path;

const FONT: &str = "sans-serif";

/// Tableau-10, which stays readable when printed in grey.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Registers the embedded font once; plotters' text needs it (ab_glyph).
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF, so this cannot fail; if it did, text
        // would be missing from the figures but nothing else would break.
        let _ =
            plotters::style::register_font(FONT, FontStyle::Normal, include_bytes!("../../../assets/DejaVuSans.ttf"));
    });
}

/// One job's bar in a Gantt panel.
#[derive(Debug, Clone)]
pub struct Bar {
    /// Job id.
    pub job: String,
    /// Arrival, s.
    pub arrival_s: f64,
    /// First start, s (None: never started).
    pub start_s: Option<f64>,
    /// Finish, s (None: not finished).
    pub end_s: Option<f64>,
}

/// A job on a circle: its name and the arcs where it communicates, as
/// fractions of the circle [start, end).
#[derive(Debug, Clone)]
pub struct Ring {
    /// Job name.
    pub job: String,
    /// Communication arcs as fractions of the perimeter.
    pub arcs: Vec<(f64, f64)>,
}

/// What to draw.
#[derive(Debug, Clone)]
pub enum Figure {
    /// Empirical CDF per series, x on a log scale when the values span a
    /// decade or more (linear otherwise, without the label's "log scale").
    Cdf {
        /// Title.
        title: String,
        /// x-axis label.
        x_label: String,
        /// (name, values); values ≤ 0 are dropped.
        series: Vec<(String, Vec<f64>)>,
    },
    /// Step lines over time.
    Lines {
        /// Title.
        title: String,
        /// y-axis label.
        y_label: String,
        /// (name, (t s, y) points).
        series: Vec<(String, Vec<(f64, f64)>)>,
    },
    /// Points joined by lines on log-log axes (a scaling curve).
    LogLog {
        /// Title.
        title: String,
        /// x-axis label.
        x_label: String,
        /// y-axis label.
        y_label: String,
        /// (name, (x, y) points); non-positive values are dropped.
        series: Vec<(String, Vec<(f64, f64)>)>,
    },
    /// A grid of values with a colour scale and the value in each cell.
    Heatmap {
        /// Title.
        title: String,
        /// x-axis label.
        x_label: String,
        /// y-axis label.
        y_label: String,
        /// Column labels.
        xs: Vec<String>,
        /// Row labels, bottom to top.
        ys: Vec<String>,
        /// `values[row][column]`; `None` leaves the cell blank.
        values: Vec<Vec<Option<f64>>>,
    },
    /// Stacked per-job rates on one link over a time window.
    Stacked {
        /// Title.
        title: String,
        /// Link capacity, Gbit/s (drawn as a line).
        capacity: f64,
        /// Job names, bottom to top.
        names: Vec<String>,
        /// (t s, rate of each job) at each change; each holds until the next.
        steps: Vec<(f64, Vec<f64>)>,
    },
    /// Concentric rings, one panel per (label, rings): CASSINI's circles.
    Circles {
        /// Title.
        title: String,
        /// Panels side by side.
        panels: Vec<(String, Vec<Ring>)>,
    },
    /// Job bars (queueing light, running dark), one panel per (label, bars).
    Gantt {
        /// Title.
        title: String,
        /// Panels stacked vertically.
        panels: Vec<(String, Vec<Bar>)>,
    },
}

type DrawResult = Result<(), String>;

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("plot: {e:?}")
}

impl Figure {
    fn size(&self) -> (u32, u32) {
        match self {
            Figure::Circles { panels, .. } => (420 * panels.len().max(1) as u32, 470),
            Figure::Gantt { panels, .. } => {
                let rows: usize = panels.iter().map(|p| p.1.len().max(1)).sum();
                (900, (120 + 90 * panels.len() + 9 * rows).clamp(300, 2400) as u32)
            }
            _ => (800, 480),
        }
    }

    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, String> {
        register_font();
        let mut s = String::new();
        {
            let root = SVGBackend::with_string(&mut s, self.size()).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(err)?;
        }
        Ok(s)
    }

    /// Writes `<stem>.svg` and `<stem>.png` into `dir`; returns the SVG text.
    pub fn save(&self, dir: &Path, stem: &str) -> Result<String, String> {
        let svg = self.svg()?;
        let p = dir.join(format!("{stem}.svg"));
        orrery_model::files::write_atomic(&p, &svg).map_err(|e| format!("{}: {e}", p.display()))?;
        // The PNG encoder writes to a path: draw at the temporary one, then rename.
        let p = dir.join(format!("{stem}.png"));
        let tmp = orrery_model::files::temporary_for(&p);
        {
            let root = BitMapBackend::new(&tmp, self.size()).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(|e| format!("{}: {e:?}", p.display()))?;
        }
        orrery_model::files::commit(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(svg)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        root.fill(&WHITE).map_err(err)?;
        match self {
            Figure::Cdf { title, x_label, series } => cdf(root, title, x_label, series),
            Figure::Lines { title, y_label, series } => lines(root, title, y_label, series),
            Figure::LogLog { title, x_label, y_label, series } => log_log(root, title, x_label, y_label, series),
            Figure::Heatmap { title, x_label, y_label, xs, ys, values } => {
                heatmap(root, title, x_label, y_label, xs, ys, values)
            }
            Figure::Stacked { title, capacity, names, steps } => stacked(root, title, *capacity, names, steps),
            Figure::Circles { title, panels } => circles(root, title, panels),
            Figure::Gantt { title, panels } => gantt(root, title, panels),
        }
    }
}

fn no_data<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str) -> DrawResult {
    let (_, h) = root.dim_in_pixel();
    root.draw(&Text::new(format!("{title}: no data"), (20, h as i32 / 2), (FONT, 18))).map_err(err)?;
    Ok(())
}

/// Empirical CDFs. O(n log n) per series for the sort.
fn cdf<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    series: &[(String, Vec<f64>)],
) -> DrawResult {
    let all: Vec<f64> = series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| *v > 0.0 && v.is_finite()).collect();
    if all.is_empty() {
        return no_data(root, title);
    }
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 1.01);
    // A log axis for values over a decade or more; within one it would have
    // no tick labels, so a linear one.
    if hi / lo >= 10.0 {
        let (x0, x1) = (lo * 0.9, hi * 1.1);
        let x = (x0..x1).log_scale().with_key_points(log_ticks(x0, x1));
        let mut chart = frame(root, title).build_cartesian_2d(x, 0.0..1.0).map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("fraction")
            .x_label_formatter(&|v| tick_label(*v))
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        cdf_curves(&mut chart, series)?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    } else {
        let pad = (hi - lo).max(hi * 0.01) * 0.05;
        let label = x_label.replace(", log scale", "").replace(" (log scale)", "");
        let mut chart = frame(root, title).build_cartesian_2d((lo - pad)..(hi + pad), 0.0..1.0).map_err(err)?;
        chart.configure_mesh().x_desc(label).y_desc("fraction").label_style((FONT, 13)).draw().map_err(err)?;
        cdf_curves(&mut chart, series)?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// The empirical CDF of each series as a step line.
fn cdf_curves<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    series: &[(String, Vec<f64>)],
) -> DrawResult {
    for (i, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0 && v.is_finite()).collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        // At most ~2,000 points per curve: every k-th order statistic.
        let step = (v.len() / 2000).max(1);
        let mut pts: Vec<(f64, f64)> = Vec::new();
        for (k, &x) in v.iter().enumerate().step_by(step) {
            pts.push((x, k as f64 / n));
            pts.push((x, (k + 1) as f64 / n));
        }
        pts.push((v[v.len() - 1], 1.0));
        named_line(chart, i, name, pts)?;
    }
    Ok(())
}

/// The frame every x–y figure shares: title, margins, axis label areas.
fn frame<'a, 'b, DB: DrawingBackend>(root: &'a DrawingArea<DB, Shift>, title: &str) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, (FONT, 20)).margin(12).x_label_area_size(44).y_label_area_size(56);
    b
}

/// One named series as a 2-px line in the `i`-th colour, with its legend entry.
fn named_line<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    i: usize,
    name: &str,
    points: Vec<(f64, f64)>,
) -> DrawResult {
    let c = color(i);
    chart
        .draw_series(LineSeries::new(points, c.stroke_width(2)))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    Ok(())
}

/// The series legend, boxed, at `position`.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 13))
        .draw()
        .map_err(err)
}

/// Step lines over time.
fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> DrawResult {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let t_max = pts.clone().map(|p| p.0).fold(0.0, f64::max);
    let y_max = pts.map(|p| p.1).fold(0.0, f64::max);
    if t_max <= 0.0 {
        return no_data(root, title);
    }
    let mut chart = frame(root, title).build_cartesian_2d(0.0..t_max, 0.0..(y_max * 1.1).max(1e-9)).map_err(err)?;
    chart.configure_mesh().x_desc("time (s)").y_desc(y_label).label_style((FONT, 13)).draw().map_err(err)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let mut step = Vec::with_capacity(points.len() * 2);
        for w in points.windows(2) {
            step.push(w[0]);
            step.push((w[1].0, w[0].1));
        }
        step.extend(points.last());
        named_line(&mut chart, i, name, step)?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// Cells coloured from white (the smallest value) to dark blue (the
/// largest), each labelled with its value.
fn heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    ys: &[String],
    values: &[Vec<Option<f64>>],
) -> DrawResult {
    let all: Vec<f64> = values.iter().flatten().flatten().copied().filter(|v| v.is_finite()).collect();
    if all.is_empty() || xs.is_empty() || ys.is_empty() {
        return no_data(root, title);
    }
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (nx, ny) = (xs.len(), ys.len());
    // Room for the longest row label (about 8 px a character at 13 px).
    let widest = ys.iter().map(|y| y.chars().count()).max().unwrap_or(0) as u32;
    let mut chart = frame(root, title)
        .y_label_area_size(56.max(8 * widest + 24))
        // A range 0..n-1 has n segments; a single row or column keeps one
        // blank segment beside it rather than a zero-width axis.
        .build_cartesian_2d((0..nx.max(2) - 1).into_segmented(), (0..ny.max(2) - 1).into_segmented())
        .map_err(err)?;
    let label = |labels: &[String], v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => labels.get(*i).cloned().unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(nx)
        .y_labels(ny)
        .x_label_formatter(&|v| label(xs, v))
        .y_label_formatter(&|v| label(ys, v))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (row, cells) in values.iter().enumerate() {
        for (col, v) in cells.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite()) else { continue };
            let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
            let shade = |light: f64, dark: f64| (light + (dark - light) * t).round() as u8;
            let fill = RGBColor(shade(247.0, 8.0), shade(251.0, 48.0), shade(255.0, 107.0));
            let cell = [
                (SegmentValue::Exact(col), SegmentValue::Exact(row)),
                (SegmentValue::Exact(col + 1), SegmentValue::Exact(row + 1)),
            ];
            chart.draw_series(std::iter::once(Rectangle::new(cell, fill.filled()))).map_err(err)?;
            let ink = if t > 0.5 { WHITE } else { BLACK };
            let at = (SegmentValue::CenterOf(col), SegmentValue::CenterOf(row));
            chart
                .draw_series(std::iter::once(Text::new(format!("{v:.2}"), at, (FONT, 15).into_font().color(&ink))))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Ticks for a logarithmic axis over [lo, hi]: 1, 2 and 5 times each power
/// of ten in it, or every digit's multiple when that gives fewer than three
/// (a range within one decade), so every log axis carries labels.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let pick = |mantissas: &[f64]| -> Vec<f64> {
        let mut out = Vec::new();
        for e in lo.log10().floor() as i32..=hi.log10().ceil() as i32 {
            for &m in mantissas {
                let v = m * 10f64.powi(e);
                if v >= lo && v <= hi {
                    out.push(v);
                }
            }
        }
        out
    };
    let coarse = pick(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 3 { coarse } else { pick(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]) }
}

/// A tick's label without trailing zeros: `0.05`, `2`, `1,000`, `2e6`.
fn tick_label(v: f64) -> String {
    if v >= 1e6 || (v > 0.0 && v < 1e-3) {
        return format!("{v:e}");
    }
    if v >= 1000.0 && v.fract() == 0.0 {
        let digits = format!("{}", v as u64);
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        return out;
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Points joined by lines, both axes logarithmic.
fn log_log<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> DrawResult {
    let ok = |p: &&(f64, f64)| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite();
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().filter(ok).copied()).collect();
    if pts.is_empty() {
        return no_data(root, title);
    }
    let (x0, x1) = pts.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (x0, x1, y0, y1) = (x0 * 0.8, x1 * 1.25, y0 * 0.5, y1 * 2.0);
    let x = (x0..x1).log_scale().with_key_points(log_ticks(x0, x1));
    let y = (y0..y1).log_scale().with_key_points(log_ticks(y0, y1));
    let mut chart = frame(root, title).build_cartesian_2d(x, y).map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let c = color(i);
        let p: Vec<(f64, f64)> = points.iter().filter(ok).copied().collect();
        chart.draw_series(p.iter().map(|&q| Circle::new(q, 4, c.filled()))).map_err(err)?;
        named_line(&mut chart, i, name, p)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Stacked step areas of per-job rates, with the link capacity.
fn stacked<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    capacity: f64,
    names: &[String],
    steps: &[(f64, Vec<f64>)],
) -> DrawResult {
    if steps.len() < 2 {
        return no_data(root, title);
    }
    let (t0, t1) = (steps[0].0, steps[steps.len() - 1].0);
    let y_max = steps.iter().map(|s| s.1.iter().sum::<f64>()).fold(capacity, f64::max);
    let mut chart = frame(root, title).build_cartesian_2d(0.0..(t1 - t0) * 1e3, 0.0..y_max * 1.15).map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(format!("time (ms) from {t0:.2} s"))
        .y_desc("Gbit/s")
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    let mut below = vec![0.0; steps.len()];
    for (k, name) in names.iter().enumerate() {
        let above: Vec<f64> = steps.iter().zip(&below).map(|(s, b)| b + s.1.get(k).copied().unwrap_or(0.0)).collect();
        // The band between `below` and `above`, as steps.
        let mut poly = Vec::with_capacity(steps.len() * 4);
        for i in 0..steps.len() - 1 {
            let (a, b) = ((steps[i].0 - t0) * 1e3, (steps[i + 1].0 - t0) * 1e3);
            poly.push((a, above[i]));
            poly.push((b, above[i]));
        }
        for i in (0..steps.len() - 1).rev() {
            let (a, b) = ((steps[i].0 - t0) * 1e3, (steps[i + 1].0 - t0) * 1e3);
            poly.push((b, below[i]));
            poly.push((a, below[i]));
        }
        let c = color(k);
        chart
            .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.75).filled())))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled()));
        below = above;
    }
    chart
        .draw_series(LineSeries::new(vec![(0.0, capacity), ((t1 - t0) * 1e3, capacity)], BLACK.stroke_width(2)))
        .map_err(err)?
        .label("capacity")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Concentric rings: job k on ring k, coloured where it communicates; 0 at
/// the top, clockwise, like CASSINI Fig. 5.
fn circles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[(String, Vec<Ring>)],
) -> DrawResult {
    if panels.is_empty() {
        return no_data(root, title);
    }
    root.draw(&Text::new(title.to_string(), (14, 10), (FONT, 18))).map_err(err)?;
    let body = root.margin(40, 0, 0, 0);
    for (area, (label, rings)) in body.split_evenly((1, panels.len())).iter().zip(panels) {
        let (pw, ph) = area.dim_in_pixel();
        let (cx, cy) = (pw as f64 / 2.0, (ph as f64 - 60.0) / 2.0 + 10.0);
        let r_max = (pw.min(ph) as f64 / 2.0 - 40.0).max(20.0);
        let width = (r_max * 0.8 / rings.len().max(1) as f64).min(28.0);
        let at = |r: f64, f: f64| {
            let a = f * std::f64::consts::TAU - std::f64::consts::FRAC_PI_2;
            ((cx + r * a.cos()).round() as i32, (cy + r * a.sin()).round() as i32)
        };
        for (k, ring) in rings.iter().enumerate() {
            let (r_in, r_out) = (r_max - (k + 1) as f64 * width, r_max - k as f64 * width - 2.0);
            // The whole ring, faint, then its communication arcs.
            let full: Vec<(i32, i32)> = (0..=72).map(|i| at((r_in + r_out) / 2.0, i as f64 / 72.0)).collect();
            area.draw(&PathElement::new(full, color(k).mix(0.25).stroke_width(width.max(2.0) as u32 - 1)))
                .map_err(err)?;
            for &(a, b) in &ring.arcs {
                let n = (((b - a) * 144.0).ceil() as usize).max(2);
                let mut poly: Vec<(i32, i32)> = (0..=n).map(|i| at(r_out, a + (b - a) * i as f64 / n as f64)).collect();
                poly.extend((0..=n).rev().map(|i| at(r_in, a + (b - a) * i as f64 / n as f64)));
                area.draw(&Polygon::new(poly, color(k).filled())).map_err(err)?;
            }
        }
        area.draw(&Text::new(label.clone(), (10, ph as i32 - 50), (FONT, 15))).map_err(err)?;
        // Legend, outer ring first.
        for (k, name) in rings.iter().map(|r| &r.job).enumerate().take(6) {
            let y = ph as i32 - 30 + (k as i32 / 3) * 16;
            let x = 10 + (k as i32 % 3) * (pw as i32 / 3);
            area.draw(&Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(k).filled())).map_err(err)?;
            area.draw(&Text::new(name.clone(), (x + 16, y - 7), (FONT, 12))).map_err(err)?;
        }
    }
    Ok(())
}

/// One Gantt panel per run: a row per job, light from arrival to start,
/// dark from start to finish.
fn gantt<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, panels: &[(String, Vec<Bar>)]) -> DrawResult {
    let t_max = panels
        .iter()
        .flat_map(|p| p.1.iter())
        .map(|b| b.end_s.or(b.start_s).unwrap_or(b.arrival_s))
        .fold(0.0, f64::max);
    if panels.is_empty() || t_max <= 0.0 {
        return no_data(root, title);
    }
    root.draw(&Text::new(title.to_string(), (14, 8), (FONT, 18))).map_err(err)?;
    let body = root.margin(34, 0, 0, 0);
    let weights: Vec<usize> = panels.iter().map(|p| p.1.len().max(1) + 8).collect();
    let total: usize = weights.iter().sum();
    let (_, h) = body.dim_in_pixel();
    let mut rest = body;
    for (i, (label, bars)) in panels.iter().enumerate() {
        let ph = (h as usize * weights[i] / total) as u32;
        let (area, below) = if i + 1 < panels.len() { rest.split_vertically(ph) } else { (rest.clone(), rest.clone()) };
        let n = bars.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&area)
            .caption(label, (FONT, 15))
            .margin(6)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0.0..t_max * 1.02, 0.0..n)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("time (s)")
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        for (k, b) in bars.iter().enumerate() {
            let y = n - k as f64 - 1.0;
            let c = color(k);
            let start = b.start_s.unwrap_or(t_max);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(b.arrival_s, y + 0.15), (start, y + 0.85)],
                    c.mix(0.25).filled(),
                )))
                .map_err(err)?;
            if let Some(s) = b.start_s {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(s, y + 0.1), (b.end_s.unwrap_or(t_max), y + 0.9)],
                        c.filled(),
                    )))
                    .map_err(err)?;
            }
        }
        rest = below;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_get_ticks_within_a_decade_and_clean_labels() {
        assert_eq!(log_ticks(0.9, 110.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        let fine = log_ticks(0.3, 0.8);
        let want = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8];
        assert!(fine.len() == 6 && fine.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{fine:?}");
        assert!(log_ticks(0.0, 1.0).is_empty());
        let labels: Vec<String> = [0.05, 2.0, 1000.0, 12_500.0, 2e6].iter().map(|&v| tick_label(v)).collect();
        assert_eq!(labels, ["0.05", "2", "1,000", "12,500", "2e6"]);
    }

    #[test]
    fn every_figure_renders_to_svg_with_its_title_and_text() {
        let figs = [
            Figure::Cdf {
                title: "JCT".into(),
                x_label: "s".into(),
                series: vec![("fifo".into(), vec![1.0, 2.0, 4.0])],
            },
            Figure::Lines {
                title: "util".into(),
                y_label: "%".into(),
                series: vec![("l".into(), vec![(0.0, 1.0), (2.0, 3.0)])],
            },
            Figure::Stacked {
                title: "busiest".into(),
                capacity: 50.0,
                names: vec!["a".into(), "b".into()],
                steps: vec![(1.0, vec![50.0, 0.0]), (1.1, vec![25.0, 25.0]), (1.2, vec![0.0, 50.0])],
            },
            Figure::Circles {
                title: "circles".into(),
                panels: vec![("before".into(), vec![Ring { job: "a".into(), arcs: vec![(0.5, 1.0)] }])],
            },
            Figure::Gantt {
                title: "gantt".into(),
                panels: vec![(
                    "fifo".into(),
                    vec![Bar { job: "a".into(), arrival_s: 0.0, start_s: Some(1.0), end_s: Some(3.0) }],
                )],
            },
        ];
        for f in &figs {
            let svg = f.svg().expect("renders");
            assert!(svg.starts_with("<svg"), "{svg:.80}");
            assert!(svg.contains("<text") || svg.contains("<path"), "{f:?}");
        }
        // An empty CDF says so instead of failing.
        let empty = Figure::Cdf { title: "JCT".into(), x_label: "s".into(), series: vec![] }.svg().expect("renders");
        assert!(empty.contains("no data"));
    }
}
