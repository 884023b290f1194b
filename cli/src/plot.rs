//! The SVG plot of a comparison, one colour per model: throughput over time (top), each
//! checkpoint's start delay over time (middle, log scale) and each completed checkpoint's
//! end-to-end duration over time (bottom, log scale).

use std::path::Path;

use plotters::prelude::*;

use crate::report::CompareReport;

const COLOURS: [RGBColor; 3] = [
    RGBColor(200, 60, 40),
    RGBColor(40, 110, 200),
    RGBColor(40, 160, 80),
];

/// Draws `report` into an SVG file at `path`: three panels, throughput over time per model, the
/// checkpoint start delay of each checkpoint over time per model, and the end-to-end duration
/// (trigger to completion at the coordinator) of each completed checkpoint over time per model.
///
/// # Errors
///
/// Any drawing or I/O error, as text.
pub fn draw(report: &CompareReport, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (1000, 1140)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, rest) = root.split_vertically(380);
    let (middle, bottom) = rest.split_vertically(380);

    let max_t = report
        .models
        .iter()
        .flat_map(|m| {
            m.throughput_series
                .iter()
                .map(|p| p.0)
                .chain(m.checkpoint_series.iter().map(|p| p.0))
                .chain(m.checkpoint_end_to_end_series.iter().map(|p| p.1))
        })
        .fold(0.1_f64, f64::max);
    let max_rate = report
        .models
        .iter()
        .flat_map(|m| m.throughput_series.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max);

    let mut chart = ChartBuilder::on(&top)
        .caption("throughput (records/s)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(70)
        // Headroom above the highest line keeps the legend (upper right) clear of the lines.
        .build_cartesian_2d(0.0..max_t * 1.02, 0.0..max_rate * 1.45)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run started")
        .y_desc("records/s")
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .y_label_formatter(&|v| si(*v))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, m) in report.models.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                m.throughput_series.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(m.model.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        // A line needs two samples: a run shorter than the sampling interval has one, shown
        // as a point.
        if let [only] = m.throughput_series.as_slice() {
            chart
                .draw_series(std::iter::once(Circle::new(*only, 4, colour.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        // In the headroom above the data (see the y ranges), never over a line.
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;

    let delays: Vec<Vec<(f64, u64)>> = report
        .models
        .iter()
        .map(|m| m.checkpoint_series.clone())
        .collect();
    points_panel(
        &middle,
        report,
        &delays,
        "checkpoint start delay (µs, log scale)",
        max_t,
    )?;
    let end_to_end: Vec<Vec<(f64, u64)>> = report
        .models
        .iter()
        .map(|m| {
            m.checkpoint_end_to_end_series
                .iter()
                .map(|&(_, t, d)| (t, d))
                .collect()
        })
        .collect();
    points_panel(
        &bottom,
        report,
        &end_to_end,
        "checkpoint end-to-end duration, trigger to completed (µs, log scale)",
        max_t,
    )?;
    root.present().map_err(|e| e.to_string())
}

/// One panel of points per model over time, `points[i]` of `report.models[i]`, on a log scale
/// of microseconds.
fn points_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    report: &CompareReport,
    points: &[Vec<(f64, u64)>],
    caption: &str,
    max_t: f64,
) -> Result<(), String> {
    let max_delay = points.iter().flatten().map(|p| p.1).fold(10_u64, u64::max) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(70)
        // Two decades of headroom keep the legend clear of the points.
        .build_cartesian_2d(0.0..max_t * 1.02, (1.0..max_delay * 100.0).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run started")
        .y_desc("µs")
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .y_label_formatter(&|v| si(*v))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (m, points)) in report.models.iter().zip(points).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(t, d)| Circle::new((t, (d.max(1)) as f64), 3, colour.filled())),
            )
            .map_err(|e| e.to_string())?
            .label(m.model.clone())
            .legend(move |(x, y)| Circle::new((x + 9, y), 3, colour.filled()));
    }
    chart
        .configure_series_labels()
        // In the headroom above the data (see the y ranges), never over a line.
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// `1200000.0` as `1.2M`: axis labels stay short and readable.
fn si(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    if scaled.fract().abs() < 1e-9 {
        format!("{scaled:.0}{suffix}")
    } else {
        format!("{scaled:.1}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ModelReport;
    use streamtask_core::metrics::LatencySummary;

    #[test]
    fn draws_an_svg_with_every_model() {
        let m = |name: &str| ModelReport {
            model: name.to_string(),
            output_digest: "x".into(),
            output_lines: 1,
            exactly_once: true,
            records_per_sec: 1.0,
            elapsed_ms: 1,
            checkpoint_delay_us: LatencySummary::default(),
            timer_lateness_us: LatencySummary::default(),
            lock_wait_us: LatencySummary::default(),
            mailbox_latency_us: LatencySummary::default(),
            idle_ms: 0,
            backpressured_ms: 0,
            checkpoints_completed: 0,
            checkpoints_aborted: 0,
            restarts: 0,
            faults_fired: 0,
            threads: 1,
            throughput_series: vec![(0.0, 10.0), (1.0, 20.0)],
            checkpoint_series: vec![(0.5, 100), (0.9, 5000)],
            checkpoint_end_to_end_series: vec![(1, 0.5, 900), (2, 0.9, 12_000)],
            ..ModelReport::default()
        };
        let report = CompareReport::new("d".into(), 1, 1, 0, vec![m("legacy"), m("mailbox")]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        draw(&report, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("legacy") && svg.contains("mailbox"));
        assert!(svg.contains("records/s") && svg.contains("µs"));
        assert!(svg.contains("end-to-end"));
        assert!(!svg.contains("(us"), "units are µs, not us");
    }

    #[test]
    fn a_single_sample_is_drawn_as_a_point() {
        let one = ModelReport {
            model: "legacy".into(),
            throughput_series: vec![(0.2, 10.0)],
            ..ModelReport::default()
        };
        let report = CompareReport::new("d".into(), 1, 1, 0, vec![one]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        draw(&report, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        // The throughput sample's point (radius 4; the other panels' legends use 3).
        assert_eq!(svg.matches(r#"r="4""#).count(), 1, "{svg}");
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(si(1_200_000.0), "1.2M");
        assert_eq!(si(5_000.0), "5k");
        assert_eq!(si(12.0), "12");
    }
}
