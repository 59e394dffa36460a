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
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

mod raster;
pub use raster::png_of;

/// The family plotters writes into the SVG; the PNG renderer maps it to the
/// embedded DejaVu Sans.
const FONT: &str = "sans-serif";
const FONT_BYTES: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

/// Tableau-10, which stays readable when printed in grey: the first ten
/// colours of every figure.
const TABLEAU: [RGBColor; 10] = [
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

/// `n` colours, no two alike: Tableau-10 for up to ten; beyond, evenly spaced
/// hues alternating between a dark and a light shade, so that neighbours in
/// the legend differ in both. O(n).
pub fn palette(n: usize) -> Vec<RGBColor> {
    if n <= TABLEAU.len() {
        return TABLEAU[..n].to_vec();
    }
    (0..n)
        .map(|i| {
            let hue = i as f64 / n as f64 * 360.0;
            let (s, l) = if i % 2 == 0 { (0.70, 0.38) } else { (0.65, 0.58) };
            hsl(hue, s, l)
        })
        .collect()
}

/// HSL (hue in degrees, saturation and lightness in 0–1) to RGB.
fn hsl(h: f64, s: f64, l: f64) -> RGBColor {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(byte(r), byte(g), byte(b))
}

/// Registers the embedded font once; plotters' text needs it (ab_glyph)
/// to measure text, even when drawing SVG.
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF, so this cannot fail; if it did, text
        // would be missing from the figures but nothing else would break.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES);
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ring {
    /// Job name.
    pub job: String,
    /// Communication arcs as fractions of the perimeter.
    pub arcs: Vec<(f64, f64)>,
}

/// One named curve of a figure, in a facet (a panel of its own; "" for a
/// figure of one panel). Curves of the same name share a colour and one
/// legend entry across facets.
#[derive(Debug, Clone)]
pub struct Series<T> {
    /// Legend name.
    pub name: String,
    /// Panel title; curves with the same facet share a panel.
    pub facet: String,
    /// Values (CDF) or points.
    pub values: Vec<T>,
}

impl<T> Series<T> {
    /// A curve in the figure's only panel.
    pub fn new(name: impl Into<String>, values: Vec<T>) -> Self {
        Series { name: name.into(), facet: String::new(), values }
    }

    /// A curve in panel `facet`.
    pub fn in_facet(name: impl Into<String>, facet: impl Into<String>, values: Vec<T>) -> Self {
        Series { name: name.into(), facet: facet.into(), values }
    }
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
        /// Values; values ≤ 0 are dropped.
        series: Vec<Series<f64>>,
    },
    /// Step lines over time.
    Lines {
        /// Title.
        title: String,
        /// y-axis label.
        y_label: String,
        /// (t s, y) points.
        series: Vec<Series<(f64, f64)>>,
    },
    /// Points joined by lines on log-log axes (a scaling curve).
    LogLog {
        /// Title.
        title: String,
        /// x-axis label.
        x_label: String,
        /// y-axis label.
        y_label: String,
        /// (x, y) points; non-positive values are dropped.
        series: Vec<Series<(f64, f64)>>,
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
        /// The circle's perimeter, ms: marks the quarter turns.
        perimeter_ms: f64,
        /// Panels side by side; the same jobs in each, outer ring first.
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

/// What went wrong drawing or writing a figure.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// plotters could not draw (a backend error).
    #[error("drawing the figure: {0}")]
    Draw(String),
    /// resvg could not read the SVG back, or the figure is too large.
    #[error("rendering the PNG: {0}")]
    Render(String),
    /// A figure file could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

type DrawResult = Result<(), PlotError>;

fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// Size of one panel of a faceted figure, and of a figure of one panel.
const PANEL: (u32, u32) = (460, 330);
const SINGLE: (u32, u32) = (800, 480);
/// Height of a legend row, px.
const KEY_ROW: u32 = 18;
/// Legend names are cut to this many characters.
const KEY_CHARS: usize = 48;

/// Facets of `series` in first-seen order.
fn facet_names<T>(series: &[Series<T>]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in series {
        if !out.contains(&s.facet.as_str()) {
            out.push(&s.facet);
        }
    }
    out
}

/// Legend names of `series` in first-seen order; a curve's colour is its
/// name's index here.
fn key_names<T>(series: &[Series<T>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in series {
        if !out.contains(&s.name) {
            out.push(s.name.clone());
        }
    }
    out
}

/// Columns and rows of a grid of `k` panels: one, two or three columns.
fn grid_of(k: usize) -> (u32, u32) {
    let cols = match k {
        0 | 1 => 1,
        2..=4 => 2,
        _ => 3,
    };
    (cols, k.max(1).div_ceil(cols as usize) as u32)
}

/// Width of the legend column beside a plot: enough for the longest name
/// (about 7 px a character at 13 px), none for an unnamed single curve.
fn key_width(names: &[String]) -> u32 {
    if names.is_empty() || (names.len() == 1 && names[0].is_empty()) {
        return 0;
    }
    let chars = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).min(KEY_CHARS) as u32;
    48 + 7 * chars
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Swatch {
    Line,
    Block,
}

/// The legend as a column beside the plot, one row per name, never over
/// the data. Names longer than [`KEY_CHARS`] are cut with "…".
fn draw_key<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    entries: &[(String, RGBColor, Swatch)],
) -> DrawResult {
    for (k, (name, c, swatch)) in entries.iter().enumerate() {
        let y = top + (k as u32 * KEY_ROW) as i32;
        match swatch {
            Swatch::Line => area.draw(&PathElement::new(vec![(8, y), (30, y)], c.stroke_width(3))),
            Swatch::Block => area.draw(&Rectangle::new([(10, y - 6), (28, y + 6)], c.filled())),
        }
        .map_err(err)?;
        let shown: String = if name.chars().count() > KEY_CHARS {
            name.chars().take(KEY_CHARS - 1).chain(std::iter::once('…')).collect()
        } else {
            name.clone()
        };
        area.draw(&Text::new(shown, (36, y - 8), (FONT, 13))).map_err(err)?;
    }
    Ok(())
}

impl Figure {
    /// Pixel size: panels in a grid, plus a legend column, tall enough for
    /// every legend row.
    fn size(&self) -> (u32, u32) {
        let faceted = |facets: usize, names: &[String]| {
            let (cols, rows) = grid_of(facets);
            let (pw, ph, title) = if facets <= 1 { (SINGLE.0, SINGLE.1, 0) } else { (PANEL.0, PANEL.1, 40) };
            let key = key_width(names);
            let key_h = 60 + KEY_ROW * names.len() as u32;
            (cols * pw + key, (title + rows * ph).max(key_h))
        };
        match self {
            Figure::Cdf { series, .. } => faceted(facet_names(series).len(), &key_names(series)),
            Figure::Lines { series, .. } | Figure::LogLog { series, .. } => {
                faceted(facet_names(series).len(), &key_names(series))
            }
            Figure::Stacked { names, .. } => {
                let mut all = names.clone();
                all.push("capacity".into());
                faceted(1, &all)
            }
            Figure::Circles { panels, .. } => {
                let names = ring_names(panels);
                (
                    420 * panels.len().max(1) as u32 + circle_key_width(&names),
                    480.max(120 + KEY_ROW * names.len() as u32),
                )
            }
            Figure::Gantt { panels, .. } => {
                let rows: usize = panels.iter().map(|p| p.1.len().max(1)).sum();
                (960, (120 + 90 * panels.len() + 12 * rows).clamp(300, 3200) as u32)
            }
            Figure::Heatmap { .. } => SINGLE,
        }
    }

    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, PlotError> {
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
    /// The PNG is the SVG rendered by resvg at twice its size, with text
    /// shaped (kerned) from the embedded font.
    pub fn save(&self, dir: &Path, stem: &str) -> Result<String, PlotError> {
        let svg = self.svg()?;
        let write = |path: std::path::PathBuf, bytes: &[u8]| {
            orrery_model::files::write_atomic(&path, bytes).map_err(|source| PlotError::Write { path, source })
        };
        write(dir.join(format!("{stem}.svg")), svg.as_bytes())?;
        write(dir.join(format!("{stem}.png")), &png_of(&svg, 2.0)?)?;
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
            Figure::Circles { title, perimeter_ms, panels } => circles(root, title, *perimeter_ms, panels),
            Figure::Gantt { title, panels } => gantt(root, title, panels),
        }
    }
}

fn no_data<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str) -> DrawResult {
    let (_, h) = root.dim_in_pixel();
    root.draw(&Text::new(format!("{title}: no data"), (20, h as i32 / 2), (FONT, 18))).map_err(err)?;
    Ok(())
}

/// Splits `root` into the plot (a grid of `facets` panels under the title)
/// and the legend column; returns the panels, in facet order, and the legend.
type Areas<'a, DB> = (Vec<DrawingArea<DB, Shift>>, DrawingArea<DB, Shift>);
fn layout<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    facets: usize,
    names: &[String],
) -> Result<Areas<'a, DB>, PlotError> {
    let (w, _) = root.dim_in_pixel();
    let key = key_width(names);
    let (plot, legend) = root.split_horizontally(w - key);
    if facets <= 1 {
        return Ok((vec![plot], legend));
    }
    plot.draw(&Text::new(title.to_string(), (14, 10), (FONT, 20))).map_err(err)?;
    let (cols, rows) = grid_of(facets);
    let body = plot.margin(40, 0, 0, 0);
    let mut panels = body.split_evenly((rows as usize, cols as usize));
    panels.truncate(facets);
    Ok((panels, legend))
}

/// A facet's name and its curves as (colour index, values).
type Facet<'s, T> = (&'s str, Vec<(usize, &'s [T])>);

/// Each facet's curves, in facet order.
fn by_facet<'s, T>(series: &'s [Series<T>], names: &[String]) -> Vec<Facet<'s, T>> {
    facet_names(series)
        .into_iter()
        .map(|f| {
            let curves = series
                .iter()
                .filter(|s| s.facet == f)
                .map(|s| (names.iter().position(|n| *n == s.name).unwrap_or(0), s.values.as_slice()))
                .collect();
            (f, curves)
        })
        .collect()
}

/// The legend of line curves.
fn line_key<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, names: &[String], colors: &[RGBColor]) -> DrawResult {
    if key_width(names) == 0 {
        return Ok(());
    }
    let entries: Vec<_> = names.iter().zip(colors).map(|(n, c)| (n.clone(), *c, Swatch::Line)).collect();
    draw_key(area, 50, &entries)
}

/// Empirical CDFs, one panel per facet on a shared x axis. O(n log n) per
/// series for the sort.
fn cdf<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    series: &[Series<f64>],
) -> DrawResult {
    let all: Vec<f64> =
        series.iter().flat_map(|s| s.values.iter().copied()).filter(|v| *v > 0.0 && v.is_finite()).collect();
    if all.is_empty() {
        return no_data(root, title);
    }
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 1.01);
    let names = key_names(series);
    let colors = palette(names.len());
    let facets = by_facet(series, &names);
    let (panels, key) = layout(root, title, facets.len(), &names)?;
    // A log axis for values over a decade or more; within one it would have
    // no tick labels, so a linear one.
    let log = hi / lo >= 10.0;
    let label = if log { x_label.to_string() } else { x_label.replace(", log scale", "").replace(" (log scale)", "") };
    for (area, (facet, curves)) in panels.iter().zip(&facets) {
        let caption = if facets.len() == 1 { title } else { facet };
        if log {
            let (x0, x1) = (lo * 0.9, hi * 1.1);
            let x = (x0..x1).log_scale().with_key_points(log_ticks(x0, x1));
            let mut chart = frame(area, caption, facets.len()).build_cartesian_2d(x, 0.0..1.0).map_err(err)?;
            mesh(&mut chart, &label, "fraction")?;
            cdf_curves(&mut chart, curves, &colors)?;
        } else {
            let pad = (hi - lo).max(hi * 0.01) * 0.05;
            let mut chart =
                frame(area, caption, facets.len()).build_cartesian_2d((lo - pad)..(hi + pad), 0.0..1.0).map_err(err)?;
            mesh(&mut chart, &label, "fraction")?;
            cdf_curves(&mut chart, curves, &colors)?;
        }
    }
    line_key(&key, &names, &colors)
}

/// Axis descriptions, and tick labels without trailing zeros.
fn mesh<'a, DB, X, Y>(chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>, x_desc: &str, y_desc: &str) -> DrawResult
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)
}

/// The empirical CDF of each curve as a step line.
fn cdf_curves<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'a, DB, CT>,
    curves: &[(usize, &[f64])],
    colors: &[RGBColor],
) -> DrawResult {
    for &(i, values) in curves {
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
        // The last step, flat then up, so a subsampled curve ends as a step.
        let last = v[v.len() - 1];
        pts.push((last, pts.last().map_or(0.0, |p| p.1)));
        pts.push((last, 1.0));
        chart.draw_series(LineSeries::new(pts, colors[i].stroke_width(2))).map_err(err)?;
    }
    Ok(())
}

/// The frame every x–y panel shares: caption, margins, axis label areas.
/// Panels of a faceted figure get a smaller caption.
fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    facets: usize,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(caption, (FONT, if facets > 1 { 15 } else { 20 })).margin(12).x_label_area_size(44).y_label_area_size(60);
    b
}

/// Step lines over time, one panel per facet on shared axes.
fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    series: &[Series<(f64, f64)>],
) -> DrawResult {
    let pts = series.iter().flat_map(|s| s.values.iter());
    let t_max = pts.clone().map(|p| p.0).fold(0.0, f64::max);
    let y_max = pts.map(|p| p.1).fold(0.0, f64::max);
    if t_max <= 0.0 {
        return no_data(root, title);
    }
    let names = key_names(series);
    let colors = palette(names.len());
    let facets = by_facet(series, &names);
    let (panels, key) = layout(root, title, facets.len(), &names)?;
    for (area, (facet, curves)) in panels.iter().zip(&facets) {
        let caption = if facets.len() == 1 { title } else { facet };
        let mut chart = frame(area, caption, facets.len())
            .build_cartesian_2d(0.0..t_max, 0.0..(y_max * 1.1).max(1e-9))
            .map_err(err)?;
        mesh(&mut chart, "time (s)", y_label)?;
        for &(i, points) in curves {
            let mut step = Vec::with_capacity(points.len() * 2);
            for w in points.windows(2) {
                step.push(w[0]);
                step.push((w[1].0, w[0].1));
            }
            step.extend(points.last());
            chart.draw_series(LineSeries::new(step, colors[i].stroke_width(2))).map_err(err)?;
        }
    }
    line_key(&key, &names, &colors)
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
    let mut chart = frame(root, title, 1)
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
/// of ten in it; every digit's multiple when that gives fewer than three (a
/// range within one decade), so every log axis carries labels; only the
/// powers of ten when it gives more than ten.
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
    match coarse.len() {
        0..=2 => pick(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
        // Over about three decades 1-2-5 labels run into each other.
        3..=10 => coarse,
        _ => pick(&[1.0]),
    }
}

/// A tick's label without trailing zeros: `0.05`, `2`, `1,000`, `2e6`.
fn tick_label(v: f64) -> String {
    if v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-3) {
        return format!("{v:e}");
    }
    if v.abs() >= 1000.0 && v.fract() == 0.0 {
        return crate::tables::thousands(&format!("{v:.0}"));
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// Points joined by lines, both axes logarithmic.
fn log_log<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<(f64, f64)>],
) -> DrawResult {
    let ok = |p: &&(f64, f64)| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite();
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.values.iter().filter(ok).copied()).collect();
    if pts.is_empty() {
        return no_data(root, title);
    }
    let (x0, x1) = pts.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (x0, x1, y0, y1) = (x0 * 0.8, x1 * 1.25, y0 * 0.5, y1 * 2.0);
    let names = key_names(series);
    let colors = palette(names.len());
    let (panels, key) = layout(root, title, 1, &names)?;
    let x = (x0..x1).log_scale().with_key_points(log_ticks(x0, x1));
    let y = (y0..y1).log_scale().with_key_points(log_ticks(y0, y1));
    let mut chart = frame(&panels[0], title, 1).build_cartesian_2d(x, y).map_err(err)?;
    mesh(&mut chart, x_label, y_label)?;
    for (i, s) in series.iter().enumerate() {
        let c = colors[names.iter().position(|n| *n == s.name).unwrap_or(i)];
        let p: Vec<(f64, f64)> = s.values.iter().filter(ok).copied().collect();
        chart.draw_series(p.iter().map(|&q| Circle::new(q, 4, c.filled()))).map_err(err)?;
        chart.draw_series(LineSeries::new(p, c.stroke_width(2))).map_err(err)?;
    }
    line_key(&key, &names, &colors)
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
    let colors = palette(names.len());
    let mut keyed = names.to_vec();
    keyed.push("capacity".into());
    let (panels, key) = layout(root, title, 1, &keyed)?;
    let mut chart =
        frame(&panels[0], title, 1).build_cartesian_2d(0.0..(t1 - t0) * 1e3, 0.0..y_max * 1.15).map_err(err)?;
    mesh(&mut chart, &format!("time (ms) from {t0:.2} s"), "Gbit/s")?;
    let mut below = vec![0.0; steps.len()];
    for (k, c) in colors.iter().enumerate() {
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
        chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.8).filled()))).map_err(err)?;
        below = above;
    }
    chart
        .draw_series(LineSeries::new(vec![(0.0, capacity), ((t1 - t0) * 1e3, capacity)], BLACK.stroke_width(2)))
        .map_err(err)?;
    let mut entries: Vec<_> = names.iter().zip(&colors).map(|(n, c)| (n.clone(), *c, Swatch::Block)).collect();
    entries.push(("capacity".into(), BLACK, Swatch::Line));
    draw_key(&key, 50, &entries)
}

/// Concentric rings: job k on ring k, coloured where it communicates; 0 at
/// the top, clockwise, like CASSINI Fig. 5. Quarter turns are marked with
/// their time on the circle; the legend names each ring, outer first.
fn circles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    perimeter_ms: f64,
    panels: &[(String, Vec<Ring>)],
) -> DrawResult {
    if panels.is_empty() {
        return no_data(root, title);
    }
    let names = ring_names(panels);
    let colors = palette(names.len());
    let (w, _) = root.dim_in_pixel();
    let (plot, key) = root.split_horizontally(w - circle_key_width(&names));
    plot.draw(&Text::new(title.to_string(), (14, 10), (FONT, 18))).map_err(err)?;
    let body = plot.margin(40, 0, 0, 0);
    for (area, (label, rings)) in body.split_evenly((1, panels.len())).iter().zip(panels) {
        let (pw, ph) = area.dim_in_pixel();
        let (cx, cy) = (pw as f64 / 2.0, (ph as f64 - 40.0) / 2.0 + 6.0);
        // Room outside the rings for the quarter-turn labels ("1,234 ms").
        let r_max = (pw as f64 / 2.0 - 72.0).min(ph as f64 / 2.0 - 48.0).max(20.0);
        let width = (r_max * 0.8 / rings.len().max(1) as f64).min(28.0);
        let at = |r: f64, f: f64| {
            let a = f * std::f64::consts::TAU - std::f64::consts::FRAC_PI_2;
            ((cx + r * a.cos()).round() as i32, (cy + r * a.sin()).round() as i32)
        };
        for (k, ring) in rings.iter().enumerate() {
            let c = colors[k];
            let (r_in, r_out) = (r_max - (k + 1) as f64 * width, r_max - k as f64 * width - 2.0);
            // The whole ring, faint (computing), then its communication arcs.
            let full: Vec<(i32, i32)> = (0..=72).map(|i| at((r_in + r_out) / 2.0, i as f64 / 72.0)).collect();
            area.draw(&PathElement::new(full, c.mix(0.2).stroke_width(width.max(2.0) as u32 - 1))).map_err(err)?;
            for &(a, b) in &ring.arcs {
                let n = (((b - a) * 144.0).ceil() as usize).max(2);
                let mut poly: Vec<(i32, i32)> = (0..=n).map(|i| at(r_out, a + (b - a) * i as f64 / n as f64)).collect();
                poly.extend((0..=n).rev().map(|i| at(r_in, a + (b - a) * i as f64 / n as f64)));
                area.draw(&Polygon::new(poly, c.filled())).map_err(err)?;
            }
        }
        // Quarter turns: a tick outside the rings and the time on the circle.
        for q in 0..4 {
            let f = f64::from(q) / 4.0;
            area.draw(&PathElement::new(vec![at(r_max + 2.0, f), at(r_max + 9.0, f)], BLACK.stroke_width(2)))
                .map_err(err)?;
            let text =
                if q == 0 { "0 ms".to_string() } else { format!("{} ms", tick_label((perimeter_ms * f).round())) };
            // Top and bottom labels centred; side labels set off from the tick.
            let (x, y) = at(r_max + if q % 2 == 0 { 20.0 } else { 12.0 }, f);
            let h = [HPos::Center, HPos::Left, HPos::Center, HPos::Right][q as usize];
            area.draw(&Text::new(text, (x, y), anchored(12, h))).map_err(err)?;
        }
        area.draw(&Text::new(label.clone(), (10, ph as i32 - 28), (FONT, 15))).map_err(err)?;
    }
    key.draw(&Text::new("ring, outer first:", (8, 40), (FONT, 13))).map_err(err)?;
    let entries: Vec<_> = names.iter().zip(&colors).map(|(n, c)| (n.clone(), *c, Swatch::Block)).collect();
    draw_key(&key, 70, &entries)?;
    let below = 70 + (KEY_ROW * names.len() as u32) as i32 + 10;
    key.draw(&Text::new("solid: communicating", (8, below), (FONT, 12))).map_err(err)?;
    key.draw(&Text::new("faint: computing", (8, below + 16), (FONT, 12))).map_err(err)?;
    key.draw(&Text::new("clockwise from the top", (8, below + 32), (FONT, 12))).map_err(err)?;
    Ok(())
}

/// Text of `size` px centred vertically on its point, aligned by `h`.
fn anchored(size: u32, h: HPos) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(h, VPos::Center))
}

/// The jobs of the panel with the most rings: the legend, and ring k's
/// colour k in every panel.
fn ring_names(panels: &[(String, Vec<Ring>)]) -> Vec<String> {
    panels.iter().max_by_key(|p| p.1.len()).map_or_else(Vec::new, |p| p.1.iter().map(|r| r.job.clone()).collect())
}

/// The circles' legend column: the jobs' names, and room for its notes.
fn circle_key_width(names: &[String]) -> u32 {
    key_width(names).max(170)
}

/// Job ids shown on a Gantt panel's axis: all up to 60 rows, else every
/// k-th so that about 60 are.
const GANTT_LABELS: usize = 60;

/// One Gantt panel per run on a shared time axis: a row per job (its id on
/// the axis), light from arrival to start, dark from start to finish, and
/// a line at the run's last finish.
fn gantt<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, panels: &[(String, Vec<Bar>)]) -> DrawResult {
    let last = |bars: &[Bar]| bars.iter().map(|b| b.end_s.or(b.start_s).unwrap_or(b.arrival_s)).fold(0.0, f64::max);
    let t_max = panels.iter().map(|p| last(&p.1)).fold(0.0, f64::max);
    if panels.is_empty() || t_max <= 0.0 {
        return no_data(root, title);
    }
    let run = TABLEAU[0];
    root.draw(&Text::new(title.to_string(), (14, 8), (FONT, 18))).map_err(err)?;
    let (w, _) = root.dim_in_pixel();
    let key = [("waiting".to_string(), run.mix(0.3), 0), ("running".to_string(), run.mix(1.0), 1)];
    for (name, c, k) in &key {
        let x = w as i32 - 220 + k * 100;
        root.draw(&Rectangle::new([(x, 14), (x + 18, 26)], c.filled())).map_err(err)?;
        root.draw(&Text::new(name.clone(), (x + 24, 12), (FONT, 13))).map_err(err)?;
    }
    let body = root.margin(34, 0, 0, 0);
    let weights: Vec<usize> = panels.iter().map(|p| p.1.len().max(1) + 8).collect();
    let total: usize = weights.iter().sum();
    let (_, h) = body.dim_in_pixel();
    let widest = panels.iter().flat_map(|p| p.1.iter()).map(|b| b.job.chars().count()).max().unwrap_or(0).min(24);
    let mut rest = body;
    for (i, (label, bars)) in panels.iter().enumerate() {
        let ph = (h as usize * weights[i] / total) as u32;
        let (area, below) = if i + 1 < panels.len() { rest.split_vertically(ph) } else { (rest.clone(), rest.clone()) };
        let n = bars.len().max(1);
        let every = n.div_ceil(GANTT_LABELS);
        let mut chart = ChartBuilder::on(&area)
            .caption(label, (FONT, 15))
            .margin(6)
            .x_label_area_size(30)
            .y_label_area_size((7 * widest + 14) as u32)
            .build_cartesian_2d(0.0..t_max * 1.02, 0.0..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("time (s)")
            .x_label_formatter(&|v| tick_label(*v))
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        let end = last(bars);
        for (k, b) in bars.iter().enumerate() {
            // Row k sits at y = n - k - 1 .. n - k, its id left of the axis.
            let y = (n - k - 1) as f64;
            if k % every == 0 {
                let (px, py) = chart.backend_coord(&(0.0, y + 0.5));
                let id: String = b.job.chars().take(24).collect();
                root.draw(&Text::new(id, (px - 5, py), anchored(11, HPos::Right))).map_err(err)?;
            }
            let start = b.start_s.unwrap_or(end);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(b.arrival_s, y + 0.15), (start, y + 0.85)],
                    run.mix(0.3).filled(),
                )))
                .map_err(err)?;
            if let Some(s) = b.start_s {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(s, y + 0.1), (b.end_s.unwrap_or(end), y + 0.9)],
                        run.filled(),
                    )))
                    .map_err(err)?;
            }
        }
        chart
            .draw_series(LineSeries::new(vec![(end, 0.0), (end, n as f64)], BLACK.mix(0.6).stroke_width(1)))
            .map_err(err)?;
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
        assert_eq!(log_ticks(1.5, 30_000.0), vec![10.0, 100.0, 1000.0, 10_000.0]);
        let labels: Vec<String> = [0.05, 2.0, 1000.0, 12_500.0, 2e6].iter().map(|&v| tick_label(v)).collect();
        assert_eq!(labels, ["0.05", "2", "1,000", "12,500", "2e6"]);
    }

    #[test]
    fn every_figure_renders_to_svg_with_its_title_and_text() {
        let figs = [
            Figure::Cdf {
                title: "JCT".into(),
                x_label: "s".into(),
                series: vec![Series::new("fifo", vec![1.0, 2.0, 4.0])],
            },
            Figure::Lines {
                title: "util".into(),
                y_label: "%".into(),
                series: vec![Series::new("l", vec![(0.0, 1.0), (2.0, 3.0)])],
            },
            Figure::Stacked {
                title: "busiest".into(),
                capacity: 50.0,
                names: vec!["a".into(), "b".into()],
                steps: vec![(1.0, vec![50.0, 0.0]), (1.1, vec![25.0, 25.0]), (1.2, vec![0.0, 50.0])],
            },
            Figure::Circles {
                title: "circles".into(),
                perimeter_ms: 200.0,
                panels: vec![("before".into(), vec![Ring { job: "a".into(), arcs: vec![(0.5, 1.0)] }])],
            },
            // Panels with different rings: the fullest names the legend.
            Figure::Circles {
                title: "uneven".into(),
                perimeter_ms: 200.0,
                panels: vec![
                    ("empty".into(), vec![]),
                    (
                        "two".into(),
                        vec![Ring { job: "a".into(), arcs: vec![(0.0, 0.5)] }, Ring { job: "b".into(), arcs: vec![] }],
                    ),
                ],
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
