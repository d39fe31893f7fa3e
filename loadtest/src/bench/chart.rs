//! The benchmark's chart: throughput over time and the latency CDF, side
//! by side, as one SVG (drawn with `plotters`).

use plotters::prelude::*;

use super::measure::Throughput;

/// The chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the chart: {0}")]
pub struct ChartError(String);

pub(super) fn err(e: impl std::fmt::Display) -> ChartError {
    ChartError(e.to_string())
}

/// Width and height of the SVG, pixels.
pub const SIZE: (u32, u32) = (1100, 440);

/// The SVG text of the chart: `title` over two panels, pods bound per
/// second in each window of `tp` (a step line) against seconds since the
/// measured phase began, and `cdf` (`(latency ms, fraction)` points)
/// against latency in milliseconds.
///
/// # Errors
/// [`ChartError`] if plotters fails to lay the chart out.
pub fn render_svg(title: &str, tp: &Throughput, cdf: &[(f64, f64)]) -> Result<String, ChartError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(title, ("sans-serif", 18)).map_err(err)?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);

        let x_max = (tp.duration_seconds + tp.window_seconds).max(1e-3);
        let y_max = (tp.peak * 1.1).max(1.0);
        let mut c = ChartBuilder::on(&left)
            .caption(
                format!(
                    "Throughput: {:.0} pods/s average, {:.0} peak ({} s windows)",
                    tp.average,
                    tp.peak,
                    trim(tp.window_seconds)
                ),
                ("sans-serif", 14),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc("seconds since the measured pods were submitted")
            .y_desc("pods bound per second")
            .draw()
            .map_err(err)?;
        let steps = tp.windows.iter().flat_map(|w| {
            [
                (w.start_seconds, w.pods_per_second),
                (w.start_seconds + tp.window_seconds, w.pods_per_second),
            ]
        });
        c.draw_series(LineSeries::new(steps, BLUE.stroke_width(2)))
            .map_err(err)?;

        let l_max = cdf.last().map_or(1.0, |p| p.0).max(1e-3) * 1.05;
        let mut c = ChartBuilder::on(&right)
            .caption("Latency CDF (queue add to Binding)", ("sans-serif", 14))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0f64..l_max, 0f64..1.0)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc("latency, ms")
            .y_desc("fraction of pods")
            .draw()
            .map_err(err)?;
        c.draw_series(LineSeries::new(
            std::iter::once((0.0, 0.0)).chain(cdf.iter().copied()),
            RED.stroke_width(2),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// `0.05` → `0.05`, `1.0` → `1`.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::bench::measure;

    #[test]
    fn the_svg_has_both_panels_and_a_line_each() {
        let t0 = Instant::now();
        let binds: Vec<Instant> = (1..=500).map(|i| t0 + Duration::from_millis(i)).collect();
        let tp = measure::throughput(t0, &binds);
        let lat: Vec<f64> = (1..=500).map(f64::from).collect();
        let svg =
            render_svg("scheduling-basic, 4 workers", &tp, &measure::cdf(&lat, 50)).expect("drawn");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("scheduling-basic, 4 workers"));
        assert!(svg.contains("Throughput: 1000 pods/s average"));
        assert!(svg.contains("Latency CDF"));
        let lines = |color: &str| {
            svg.lines()
                .filter(|l| l.contains("<polyline") && l.contains(color))
                .count()
        };
        assert_eq!(lines("#0000FF"), 1, "the throughput line");
        assert_eq!(lines("#FF0000"), 1, "the CDF line");
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn window_lengths_print_short() {
        assert_eq!(trim(1.0), "1");
        assert_eq!(trim(0.05), "0.05");
    }
}
