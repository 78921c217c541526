//! The PNG plot: p99 latency inflation against BE throughput, one point per policy and load,
//! with the goal region shaded. Text is drawn with a TTF font read from the system's font
//! directory (DejaVu, from Debian's `fonts-dejavu-core`), so no fontconfig is needed.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::BenchError;
use super::report::Row;

/// Fonts tried in order.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

const COLOURS: [RGBColor; 6] = [
    RGBColor(220, 50, 47),
    RGBColor(38, 139, 210),
    RGBColor(133, 153, 0),
    RGBColor(211, 54, 130),
    RGBColor(181, 137, 0),
    RGBColor(42, 161, 152),
];

fn register_font() -> Result<(), BenchError> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let (path, bytes) = FONTS
                .iter()
                .find_map(|p| std::fs::read(p).ok().map(|b| (p, b)))
                .ok_or_else(|| format!("no TTF font found (tried {FONTS:?}; install fonts-dejavu-core)"))?;
            // plotters keeps registered fonts for the process' lifetime.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path}: not a usable TTF font"))
        })
        .clone()
        .map_err(BenchError::Plot)
}

/// Writes the plot of `rows` (those with both an inflation and a BE share) for `workload`
/// panels side by side to `path`.
pub fn write_png(rows: &[Row], path: &Path, max_inflation: f64, min_share: f64) -> Result<(), BenchError> {
    register_font()?;
    let mut workloads: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let mut policies: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.be_share.is_some()) {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let width = 640 * workloads.len().max(1) as u32;
    let root = BitMapBackend::new(path, (width, 520)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| BenchError::Plot(e.to_string());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, workloads.len().max(1)));
    for (panel, workload) in panels.iter().zip(&workloads) {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.workload == *workload && r.be_share.is_some() && r.p99_inflation.is_some())
            .collect();
        // y: p99 relative to LS alone (1 = no inflation), log scale.
        let y_max = mine
            .iter()
            .filter_map(|r| r.p99_inflation)
            .map(|i| 1.0 + i)
            .fold(2.0f64, f64::max)
            * 1.5;
        let y_min = mine
            .iter()
            .filter_map(|r| r.p99_inflation)
            .map(|i| 1.0 + i)
            .fold(0.8f64, f64::min)
            .max(0.05)
            * 0.8;
        let x_max = mine
            .iter()
            .filter_map(|r| r.be_share)
            .map(|(share, _, _)| share * 100.0 + 15.0)
            .fold(110f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{workload}: LS p99 vs BE throughput"), ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("BE throughput, % of BE alone")
            .y_desc("LS p99 / p99 of LS alone")
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(min_share * 100.0, y_min), (x_max, 1.0 + max_inflation)],
                RGBColor(133, 153, 0).mix(0.15).filled(),
            )))
            .map_err(|e| err(&e))?
            .label("goal")
            .legend(|(x, y)| {
                Rectangle::new(
                    [(x, y - 5), (x + 12, y + 5)],
                    RGBColor(133, 153, 0).mix(0.3).filled(),
                )
            });
        for (i, policy) in policies.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points: Vec<(f64, f64, u32)> = mine
                .iter()
                .filter(|r| r.policy == *policy)
                .filter_map(|r| Some((r.be_share?.0 * 100.0, 1.0 + r.p99_inflation?, r.load_pct)))
                .collect();
            chart
                .draw_series(points.iter().map(|(x, y, load)| {
                    EmptyElement::at((*x, *y))
                        + Circle::new((0, 0), 5, colour.filled())
                        + Text::new(format!("{load}%"), (7, -7), ("sans-serif", 12).into_font())
                }))
                .map_err(|e| err(&e))?
                .label(*policy)
                .legend(move |(x, y)| Circle::new((x + 6, y), 5, colour.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{Point, aggregate};

    #[test]
    fn writes_a_png() {
        if FONTS.iter().all(|f| !Path::new(f).exists()) {
            println!("skipped: no DejaVu font (fonts-dejavu-core)");
            return;
        }
        let point = |policy: &str, load_pct, p99_ms, be_share| Point {
            policy: String::from(policy),
            workload: "nginx".into(),
            load_pct,
            p50_ms: 0.1,
            p99_ms,
            p999_ms: p99_ms,
            due: 1,
            errors: 0,
            timeouts: 0,
            be_share,
            be_batch_milli_cpu: be_share.map(|_| 2000),
            node_cpu: 0.5,
            loadavg: 1.0,
        };
        let rows = aggregate(
            &[
                point("ls-alone", 30, 1.0, None),
                point("ls-alone", 60, 1.0, None),
                point("k8s", 30, 5.0, Some(0.9)),
                point("cpuset", 60, 1.05, Some(0.55)),
            ],
            "ls-alone",
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.png");
        write_png(&rows, &path, 0.1, 0.5).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() > 5_000);
    }
}
