//! Figures as PNG: the SVG rendered by resvg on white with the embedded
//! font, and written by the png crate as RGB (docs/results.md, "Cost as the
//! cluster grows", session 10, for the encoder's settings).

use super::{FONT_BYTES, PlotError};

/// An SVG rendered to PNG bytes at `scale` (resvg; the font database holds
/// only the embedded DejaVu Sans, so output does not depend on the machine).
pub fn png_of(svg: &str, scale: f32) -> Result<Vec<u8>, PlotError> {
    let pixmap = pixmap_of(svg, scale)?;
    encode_opaque_png(pixmap.data(), pixmap.width(), pixmap.height())
        .map_err(|e| PlotError::Render(format!("encoding the PNG: {e}")))
}

/// An SVG rendered on white at `scale`: every pixel opaque.
fn pixmap_of(svg: &str, scale: f32) -> Result<resvg::tiny_skia::Pixmap, PlotError> {
    use resvg::{tiny_skia, usvg};
    static FONTS: std::sync::OnceLock<std::sync::Arc<usvg::fontdb::Database>> = std::sync::OnceLock::new();
    let fonts = FONTS.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_font_data(FONT_BYTES.to_vec());
        db.set_sans_serif_family("DejaVu Sans");
        std::sync::Arc::new(db)
    });
    let opt = usvg::Options { font_family: "DejaVu Sans".into(), fontdb: fonts.clone(), ..usvg::Options::default() };
    let render = |why: String| PlotError::Render(why);
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| render(format!("reading the SVG: {e}")))?;
    let too_large = || render("the figure is too large".into());
    let size = tree.size().to_int_size().scale_by(scale).ok_or_else(too_large)?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(too_large)?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::from_scale(scale, scale), &mut pixmap.as_mut());
    Ok(pixmap)
}

/// PNG bytes of an opaque RGBA image (`rgba`: premultiplied, as tiny-skia
/// keeps it; on an opaque pixel premultiplied and straight colour are the
/// same). Written as 8-bit RGB, each row filtered against the row above
/// (`Up`: a plot's rows mostly repeat the one above) and deflated at zlib's
/// default level. tiny-skia's own `encode_png` copied and demultiplied the
/// pixmap and tried every filter on every row of RGBA: a third of a
/// 256-host `orrery run --out` (callgrind), for larger files (docs/results.md,
/// "Cost as the cluster grows", session 10). O(pixels).
fn encode_opaque_png(rgba: &[u8], width: u32, height: u32) -> Result<Vec<u8>, png::EncodingError> {
    let mut rgb = vec![0; rgba.len() / 4 * 3];
    for (to, from) in rgb.chunks_exact_mut(3).zip(rgba.chunks_exact(4)) {
        to[0] = from[0];
        to[1] = from[1];
        to[2] = from[2];
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Balanced);
    encoder.set_filter(png::Filter::Up);
    encoder.write_header()?.write_image_data(&rgb)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{Figure, Series};

    #[test]
    fn a_figures_png_holds_its_rendered_pixels_and_is_no_larger_than_tiny_skias() {
        let fig = Figure::Cdf {
            title: "JCT".into(),
            x_label: "s".into(),
            series: vec![Series::new("fifo", vec![1.0, 2.0, 4.0]), Series::new("orrery", vec![0.5, 1.5, 3.0])],
        };
        let svg = fig.svg().expect("renders");
        let pixmap = pixmap_of(&svg, 2.0).expect("renders");
        let bytes = png_of(&svg, 2.0).expect("encodes");
        let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("a PNG");
        let mut rgb = vec![0; reader.output_buffer_size().expect("its size")];
        let info = reader.next_frame(&mut rgb).expect("its pixels");
        assert_eq!((info.width, info.height, info.color_type), (pixmap.width(), pixmap.height(), png::ColorType::Rgb));
        // Opaque everywhere (drawn on white), so RGB loses nothing.
        assert!(pixmap.data().chunks_exact(4).all(|p| p[3] == 255));
        let want: Vec<u8> = pixmap.data().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        assert!(rgb[..info.buffer_size()] == want[..], "the decoded pixels differ from the rendered ones");
        let theirs = pixmap.encode_png().expect("tiny-skia encodes").len();
        assert!(bytes.len() <= theirs, "{} bytes against tiny-skia's {theirs}", bytes.len());
    }
}
