//! The SVG charts (plotters' SVG backend: text is written as `<text>` elements, no fonts needed).

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::view::{Combo, Vary, View};
use crate::model::{ConfigKey, Metric, Workload};

/// What a chart shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChartKind {
    /// Median Mgas/s by group depth, one line per combination, for one workload.
    MgasByGd,
    /// Stacked median stage times by group depth for one workload and combination.
    Breakdown,
    /// Median state read by group depth, trie against flat, across workloads.
    ReadPaths,
    /// Median state read by group depth, prefetch off against on, across workloads.
    Prefetch,
    /// Median ms per cold slot read by group depth for one workload, one line per
    /// combination, each with the device's floor (its pages at the drive's QD16 rate) dashed.
    ColdRead,
    /// Median per-slot cost (cold read, or written slot) by state size, one line per workload
    /// and group depth, in the preferred combination.
    StateSize,
    /// Median witness bytes per key touched by group depth for one workload: the multiproof
    /// and the stored blobs.
    Witness,
}

/// The x axis of a chart: group depths, or state sizes on a log scale.
#[derive(Clone, Copy)]
enum XAxis {
    /// Group depths 1..=8, padded by half a depth.
    GroupDepth,
    /// log10 of the state size in stems, padded by a fifth of a decade.
    Stems,
}

impl XAxis {
    /// The x range covering `xs`, padded on each side.
    fn range(self, xs: impl Iterator<Item = f64>) -> (f64, f64) {
        let pad = match self {
            XAxis::GroupDepth => 0.5,
            XAxis::Stems => 0.2,
        };
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        if lo.is_finite() {
            (lo - pad, hi + pad)
        } else {
            (1.0 - pad, 1.0 + pad)
        }
    }
}

/// One chart written next to the report.
#[derive(Clone, Debug)]
pub(super) struct Chart {
    /// What it shows.
    pub kind: ChartKind,
    /// The workload of a per-workload chart.
    pub workload: Option<Workload>,
    /// File name, relative to the report directory.
    pub file: String,
    /// Caption.
    pub title: String,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

const SIZE: (u32, u32) = (900, 540);

/// The stages of the breakdown chart, by legend label: the trie update is split into its
/// wait for the trie prefetch's reads (`trie_wait_ms`; 0 in older results) and the rest.
const STAGES: [&str; 5] = [
    "state read",
    "execution",
    "trie update: waiting for reads",
    "trie update: own work",
    "commit",
];

/// The medians of the [`STAGES`] of `key` (0 where absent).
fn stages(view: &View<'_>, key: &ConfigKey) -> [f64; 5] {
    let med = |m: Metric| view.median(key, m).unwrap_or(0.0).max(0.0);
    let update = med(Metric::TrieUpdateMs);
    let own = view
        .trie_own_work_ms(key)
        .map_or(update, |own| own.min(update));
    [
        med(Metric::StateReadMs),
        med(Metric::ExecutionMs),
        update - own,
        own,
        med(Metric::CommitMs),
    ]
}

/// One line of a line chart.
struct Series {
    label: String,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// The prefixes of the charts drawn per workload (`PREFIX<workload>.svg`).
const PER_WORKLOAD: [&str; 4] = ["mgas_by_gd_", "cold_read_", "witness_", "breakdown_"];

/// The charts drawn once per report.
const ONCE: [&str; 4] = [
    "state_size_reads.svg",
    "state_size_writes.svg",
    "read_paths.svg",
    "prefetch.svg",
];

/// Whether `name` is the name of a chart [`write_charts`] may draw (the report's tests check
/// every chart it draws against this).
pub(super) fn is_chart_name(name: &str) -> bool {
    ONCE.contains(&name)
        || PER_WORKLOAD.iter().any(|p| {
            name.strip_prefix(p)
                .and_then(|rest| rest.strip_suffix(".svg"))
                .is_some_and(|w| Workload::ALL.iter().any(|x| x.name() == w))
        })
}

/// Writes every chart whose data is present into `out` and returns them in report order:
/// per workload the Mgas/s and breakdown charts, then the read-path and prefetch charts.
pub(super) fn write_charts(view: &View, out: &Path) -> anyhow::Result<Vec<Chart>> {
    let mut charts = Vec::new();
    let multi_page = view.multi_page();
    for w in view.workloads() {
        let series: Vec<Series> = view
            .combos(w)
            .into_iter()
            .enumerate()
            .map(|(i, c)| Series {
                label: view.label(c),
                color: COLORS[i % COLORS.len()],
                dashed: false,
                points: points(view, w, c, Metric::MgasS),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            let file = format!("mgas_by_gd_{}.svg", w.name());
            let title = format!("{}: throughput by group depth", w.name());
            line_chart(
                &out.join(&file),
                &title,
                "Mgas/s (median)",
                &series,
                XAxis::GroupDepth,
            )?;
            charts.push(Chart {
                kind: ChartKind::MgasByGd,
                workload: Some(w),
                file,
                title,
            });
        }
        if w.reads() {
            let mut series = Vec::new();
            for (i, c) in view.combos(w).into_iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let measured = points(view, w, c, Metric::MsPerColdRead);
                if measured.is_empty() {
                    continue;
                }
                series.push(Series {
                    label: view.label(c),
                    color,
                    dashed: false,
                    points: measured,
                });
                let floor: Vec<(f64, f64)> = view
                    .group_depths(w, c)
                    .into_iter()
                    .filter_map(|gd| {
                        Some((f64::from(gd), view.device_ms_per_cold_read(&c.key(w, gd))?))
                    })
                    .collect();
                if !floor.is_empty() {
                    series.push(Series {
                        label: format!("{}: device at QD16", view.label(c)),
                        color,
                        dashed: true,
                        points: floor,
                    });
                }
            }
            if !series.is_empty() {
                let file = format!("cold_read_{}.svg", w.name());
                let title = format!(
                    "{}: ms per cold slot read, and the device's time for its pages (dashed)",
                    w.name()
                );
                line_chart(
                    &out.join(&file),
                    &title,
                    "ms per cold slot read (median)",
                    &series,
                    XAxis::GroupDepth,
                )?;
                charts.push(Chart {
                    kind: ChartKind::ColdRead,
                    workload: Some(w),
                    file,
                    title,
                });
            }
        }
        if let Some(c) = super::witness::witness_combo(view, w) {
            let rows = super::witness::witness_rows(view, w, c);
            let line = |label: &str, i: usize, pick: fn(&(u8, f64, f64, f64)) -> f64| Series {
                label: label.to_string(),
                color: COLORS[i],
                dashed: false,
                points: rows
                    .iter()
                    .filter(|r| r.1 > 0.0)
                    .map(|r| (f64::from(r.0), pick(r) / r.1))
                    .collect(),
            };
            let series = vec![
                line("multiproof", 0, |r| r.2),
                line("stored blobs (geth's witness)", 1, |r| r.3),
            ];
            if series.iter().any(|s| !s.points.is_empty()) {
                let file = format!("witness_{}.svg", w.name());
                let title = format!("{}: witness bytes per key touched", w.name());
                line_chart(
                    &out.join(&file),
                    &title,
                    "bytes per key (median, code included)",
                    &series,
                    XAxis::GroupDepth,
                )?;
                charts.push(Chart {
                    kind: ChartKind::Witness,
                    workload: Some(w),
                    file,
                    title,
                });
            }
        }
        if let Some(c) = view.preferred_combo(w) {
            let bars: Vec<(f64, [f64; 5])> = view
                .group_depths(w, c)
                .into_iter()
                .map(|gd| (f64::from(gd), stages(view, &c.key(w, gd))))
                .filter(|(_, parts)| parts.iter().any(|&p| p > 0.0))
                .collect();
            if !bars.is_empty() {
                let file = format!("breakdown_{}.svg", w.name());
                let title = format!("{}: block time by stage ({})", w.name(), view.label(c));
                breakdown_chart(&out.join(&file), &title, &bars)?;
                charts.push(Chart {
                    kind: ChartKind::Breakdown,
                    workload: Some(w),
                    file,
                    title,
                });
            }
        }
    }
    if view.multi_size() {
        for (metric, select, file, title, y) in [
            (
                Metric::MsPerColdRead,
                Workload::reads as fn(Workload) -> bool,
                "state_size_reads.svg",
                "Cold slot read by state size",
                "ms per cold slot read (median)",
            ),
            (
                Metric::MsPerWrittenSlot,
                Workload::writes,
                "state_size_writes.svg",
                "Written slot by state size",
                "ms per written slot (median)",
            ),
        ] {
            let mut series = Vec::new();
            // The combination the lines are drawn in, named in the title: each workload's
            // preferred one (the same for all when they were measured alike).
            let mut combos = Vec::new();
            for w in view.workloads().into_iter().filter(|&w| select(w)) {
                let lines = view.by_state_size(w, metric);
                if let (false, Some(c)) = (lines.is_empty(), view.preferred_combo(w)) {
                    combos.push(c.label_with(multi_page, false));
                }
                for (gd, points) in lines {
                    series.push(Series {
                        label: format!("{}, GD-{gd}", w.name()),
                        color: COLORS[series.len() % COLORS.len()],
                        dashed: false,
                        points: points
                            .into_iter()
                            .map(|(n, v)| ((n as f64).log10(), v))
                            .collect(),
                    });
                }
            }
            if !series.is_empty() {
                combos.dedup();
                let title = format!("{title} ({})", combos.join("; "));
                line_chart(&out.join(file), &title, y, &series, XAxis::Stems)?;
                charts.push(Chart {
                    kind: ChartKind::StateSize,
                    workload: None,
                    file: file.to_string(),
                    title,
                });
            }
        }
    }
    for (kind, vary, file, title) in [
        (
            ChartKind::ReadPaths,
            Vary::ReadPath,
            "read_paths.svg",
            "State read by group depth: trie path (dashed) vs flat path (solid)",
        ),
        (
            ChartKind::Prefetch,
            Vary::Prefetch,
            "prefetch.svg",
            "State read by group depth: prefetch off (dashed) vs on (solid)",
        ),
    ] {
        let mut series = Vec::new();
        for (i, w) in view.workloads().into_iter().enumerate() {
            let Some((a, b)) = view.pair(w, vary) else {
                continue;
            };
            for (c, dashed) in [(a, true), (b, false)] {
                let s = Series {
                    label: format!("{}, {}", w.name(), view.label(c)),
                    color: COLORS[i % COLORS.len()],
                    dashed,
                    points: points(view, w, c, Metric::StateReadMs),
                };
                if !s.points.is_empty() {
                    series.push(s);
                }
            }
        }
        if !series.is_empty() {
            line_chart(
                &out.join(file),
                title,
                "state read ms (median)",
                &series,
                XAxis::GroupDepth,
            )?;
            charts.push(Chart {
                kind,
                workload: None,
                file: file.to_string(),
                title: title.to_string(),
            });
        }
    }
    Ok(charts)
}

/// (group depth, median of `metric`) for every measured group depth of `workload` in `combo`.
fn points(view: &View, workload: Workload, combo: Combo, metric: Metric) -> Vec<(f64, f64)> {
    view.group_depths(workload, combo)
        .into_iter()
        .filter_map(|gd| {
            let m = view.median(&combo.key(workload, gd), metric)?;
            Some((f64::from(gd), m))
        })
        .collect()
}

/// Labels a log10 tick as the state size it stands for (`1M`, `4M`, `16M`).
fn stems_tick(x: &f64) -> String {
    super::format::stems(10f64.powf(*x).round() as u64)
}

/// Labels integer ticks as group depths; other ticks stay blank.
fn gd_tick(x: &f64) -> String {
    if (x - x.round()).abs() < 1e-9 && *x >= 1.0 {
        format!("{}", x.round() as i64)
    } else {
        String::new()
    }
}

/// Upper end of the y axis: the data maximum plus headroom for a legend of `entries` lines.
fn y_top(max: f64, entries: usize) -> f64 {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    max * (1.1 + 0.075 * entries as f64)
}

/// A white chart area on `root` with the title, `axis` on x (`x` range) and `y_desc` from 0
/// to `y_max` on y: the frame every chart here shares.
fn axes<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    x: (f64, f64),
    y_max: f64,
    axis: XAxis,
) -> anyhow::Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(x.0..x.1, 0.0..y_max)?;
    type Tick = fn(&f64) -> String;
    let (labels, desc, fmt): (usize, &str, Tick) = match axis {
        XAxis::GroupDepth => (
            ((x.1 - x.0).ceil() as usize + 1).max(2),
            "group depth",
            gd_tick,
        ),
        XAxis::Stems => (8, "state size, stems (log scale)", stems_tick),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels)
        .x_label_formatter(&fmt)
        .x_desc(desc)
        .y_desc(y_desc)
        .draw()?;
    Ok(chart)
}

/// Draws the legend in the upper right and writes the SVG out.
fn finish<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Draws `series` as lines with point markers and a legend into the SVG file `path`, `axis`
/// on x.
fn line_chart(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series],
    axis: XAxis,
) -> anyhow::Result<()> {
    let (x0, x1) = axis.range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let mut svg = String::new();
    let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
    let mut chart = axes(
        &root,
        title,
        y_desc,
        (x0, x1),
        y_top(ymax, series.len()),
        axis,
    )?;
    for s in series {
        let color = s.color;
        let style = color.stroke_width(2);
        let anno = if s.dashed {
            chart.draw_series(DashedLineSeries::new(s.points.clone(), 8, 5, style))?
        } else {
            chart.draw_series(LineSeries::new(s.points.clone(), style))?
        };
        // A dash longer than the legend's 21-pixel line draws it solid.
        let (dash, gap) = if s.dashed { (8, 5) } else { (100, 1) };
        anno.label(s.label.clone()).legend(move |(x, y)| {
            DashedPathElement::new(vec![(x, y), (x + 21, y)], dash, gap, color.stroke_width(2))
        });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    finish(&root, &mut chart)?;
    drop(chart);
    drop(root);
    crate::runner::write_replacing(path, svg.as_bytes())
}

/// Draws `bars` (group depth, the [`STAGES`] medians) as stacked bars into `path`.
fn breakdown_chart(path: &Path, title: &str, bars: &[(f64, [f64; 5])]) -> anyhow::Result<()> {
    let (x0, x1) = XAxis::GroupDepth.range(bars.iter().map(|b| b.0));
    let ymax = bars
        .iter()
        .map(|(_, parts)| parts.iter().sum::<f64>())
        .fold(0.0f64, f64::max);
    let mut svg = String::new();
    let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
    let mut chart = axes(
        &root,
        title,
        "ms per block (median of each stage)",
        (x0, x1),
        y_top(ymax, STAGES.len()),
        XAxis::GroupDepth,
    )?;
    // Results from before `trie_wait_ms` have no wait: their update is one stage, as it was.
    let waited = bars.iter().any(|(_, parts)| parts[2] > 0.0);
    for (i, label) in STAGES.iter().enumerate() {
        if i == 2 && !waited {
            continue;
        }
        let label = if i == 3 && !waited {
            "trie update"
        } else {
            label
        };
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(bars.iter().map(|(gd, parts)| {
                let bottom: f64 = parts[..i].iter().sum();
                Rectangle::new(
                    [(gd - 0.35, bottom), (gd + 0.35, bottom + parts[i])],
                    color.filled(),
                )
            }))?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    finish(&root, &mut chart)?;
    drop(chart);
    drop(root);
    crate::runner::write_replacing(path, svg.as_bytes())
}
