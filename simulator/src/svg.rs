//! Pictures for people: GPU utilisation over time and the queueing-delay CDF, one line per
//! policy, as SVG files.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::engine::PolicyRun;

#[derive(Debug, thiserror::Error)]
pub enum SvgError {
    #[error("{path}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: drawing failed: {message}")]
    Draw { path: PathBuf, message: String },
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes `utilisation.svg` and `queueing-delay-cdf.svg` into `dir`; returns their paths.
pub fn write(dir: &Path, runs: &[PolicyRun], total_gpus: u64) -> Result<Vec<PathBuf>, SvgError> {
    std::fs::create_dir_all(dir).map_err(|source| SvgError::Io { path: dir.to_path_buf(), source })?;
    let util = dir.join("utilisation.svg");
    let cdf = dir.join("queueing-delay-cdf.svg");
    utilisation(&util, runs, total_gpus).map_err(|e| SvgError::Draw { path: util.clone(), message: e.to_string() })?;
    delay_cdf(&cdf, runs).map_err(|e| SvgError::Draw { path: cdf.clone(), message: e.to_string() })?;
    Ok(vec![util, cdf])
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The policies' names and colours, boxed at `at`.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>, at: SeriesLabelPosition) -> DrawResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate,
{
    chart.configure_series_labels().position(at).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    Ok(())
}

/// Step series of busy share, in days, at most ~2,000 points per policy (a running maximum
/// per bucket keeps short peaks visible).
fn utilisation(path: &Path, runs: &[PolicyRun], total_gpus: u64) -> DrawResult {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let end_days = runs.iter().map(|r| r.end_s).max().unwrap_or(1).max(1) as f64 / 86_400.0;
    let mut chart = ChartBuilder::on(&root)
        .caption("GPU utilisation over time", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        // Headroom above 100 % for the legend, clear of every curve.
        .build_cartesian_2d(0.0..end_days, 0.0..1.3)?;
    // The headroom is the legend's: no share above 100 % is labelled on the axis.
    let share = |v: &f64| if *v <= 1.0 + 1e-9 { format!("{:.0}%", v * 100.0) } else { String::new() };
    chart.configure_mesh().x_desc("days").y_desc("GPUs busy").y_label_formatter(&share).draw()?;
    for (i, run) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let bucket = (run.end_s / 2000).max(1);
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut current: Option<(u64, u64)> = None;
        for &(t, busy) in &run.busy {
            let b = t / bucket;
            match current {
                Some((cb, peak)) if cb == b => current = Some((cb, peak.max(busy))),
                Some((cb, peak)) => {
                    points.push(((cb * bucket) as f64 / 86_400.0, peak as f64 / total_gpus.max(1) as f64));
                    current = Some((b, busy));
                }
                None => current = Some((b, busy)),
            }
        }
        if let Some((cb, peak)) = current {
            points.push(((cb * bucket) as f64 / 86_400.0, peak as f64 / total_gpus.max(1) as f64));
        }
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(run.policy.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    // In the headroom above 100 %, clear of every curve.
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

fn delay_cdf(path: &Path, runs: &[PolicyRun]) -> DrawResult {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let delays: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| {
            let mut d: Vec<f64> = r
                .jobs
                .iter()
                .filter_map(|j| j.first_start_s.map(|s| (s.saturating_sub(j.submit_s) as f64 / 3600.0).max(1e-3)))
                .collect();
            d.sort_by(f64::total_cmp);
            d
        })
        .collect();
    let max = delays.iter().filter_map(|d| d.last().copied()).fold(1.0_f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption("Queueing delay CDF", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1e-3..max * 1.1).log_scale(), 0.0..1.0)?;
    chart.configure_mesh().x_desc("queueing delay (hours, log)").y_desc("share of started jobs").draw()?;
    for (i, (run, d)) in runs.iter().zip(&delays).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let n = d.len().max(1) as f64;
        let points: Vec<(f64, f64)> = d.iter().enumerate().map(|(k, &x)| (x, (k + 1) as f64 / n)).collect();
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(run.policy.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    // Lower right: a CDF's curves are near 1 there, so the box covers none.
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}
