//! The soak plot: four panels (RSS, open descriptors, threads, cgroups) over the run, as a PNG.
//! plotters runs without fontconfig or freetype: text goes through `ab_glyph` with a TrueType
//! font read from a file (DejaVu Sans on Debian, `fonts-dejavu-core`).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::SoakError;
use super::sample::Sample;

/// Where Debian's `fonts-dejavu-core` puts DejaVu Sans.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

type Series<'a> = (&'a str, RGBColor, Box<dyn Fn(&Sample) -> f64>);

/// Draws `samples` into `png` with the TrueType font at `font`.
pub fn draw(samples: &[Sample], png: &Path, font: &Path, title: &str) -> Result<(), SoakError> {
    let bytes = std::fs::read(font).map_err(|source| SoakError::Io {
        what: format!("font {}", font.display()),
        source,
    })?;
    // plotters keeps registered fonts for the process's life.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| SoakError::Plot(format!("{} is not a TrueType font", font.display())))?;
    draw_panels(samples, png, title).map_err(|e| SoakError::Plot(e.to_string()))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn draw_panels(samples: &[Sample], png: &Path, title: &str) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(png, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 24))?;
    let panels = root.split_evenly((2, 2));
    let minutes = samples.last().map_or(1.0, |s| s.seconds / 60.0).max(0.1);
    let koordlet = RGBColor(200, 40, 40);
    let manager = RGBColor(40, 80, 200);
    let specs: [(&str, &str, Vec<Series<'_>>); 4] = [
        (
            "resident memory",
            "MiB",
            vec![
                (
                    "koordlet",
                    koordlet,
                    Box::new(|s: &Sample| mib(s.koordlet.rss_bytes)),
                ),
                (
                    "koord-manager",
                    manager,
                    Box::new(|s: &Sample| mib(s.manager.rss_bytes)),
                ),
            ],
        ),
        (
            "open file descriptors",
            "fds",
            vec![
                (
                    "koordlet",
                    koordlet,
                    Box::new(|s: &Sample| s.koordlet.open_fds as f64),
                ),
                (
                    "koord-manager",
                    manager,
                    Box::new(|s: &Sample| s.manager.open_fds as f64),
                ),
            ],
        ),
        (
            "threads",
            "threads",
            vec![
                (
                    "koordlet",
                    koordlet,
                    Box::new(|s: &Sample| s.koordlet.threads as f64),
                ),
                (
                    "koord-manager",
                    manager,
                    Box::new(|s: &Sample| s.manager.threads as f64),
                ),
            ],
        ),
        (
            "node cgroups (kubepods) and pods",
            "count",
            vec![
                (
                    "cgroup dirs",
                    RGBColor(30, 140, 60),
                    Box::new(|s: &Sample| s.cgroup_dirs as f64),
                ),
                (
                    "cgroup tasks",
                    RGBColor(150, 90, 20),
                    Box::new(|s: &Sample| s.cgroup_tasks as f64),
                ),
                ("pods", RGBColor(90, 90, 90), Box::new(|s: &Sample| s.pods as f64)),
            ],
        ),
    ];
    for (area, (caption, unit, series)) in panels.iter().zip(specs) {
        let top = samples
            .iter()
            .flat_map(|s| series.iter().map(move |(_, _, f)| f(s)))
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..minutes, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_desc(unit)
            .label_style(("sans-serif", 14))
            .draw()?;
        for (name, color, value) in &series {
            let color = *color;
            chart
                .draw_series(LineSeries::new(
                    samples.iter().map(|s| (s.seconds / 60.0, value(s))),
                    color.stroke_width(2),
                ))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
