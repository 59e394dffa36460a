//! SVG drawings of circles.
