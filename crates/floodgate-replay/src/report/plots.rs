//! The report's plots, drawn by plotters into SVG text (embedded in the
//! HTML page as it is: no file, no script, no network). A plot's legend
//! is HTML beside its SVG, never over the plotted area, where it would
//! hide the data.

use plotters::prelude::*;

use crate::printable::printable;
use crate::stats::{CandidateReport, Timeline};

/// A plot's width, px.
const WIDTH: u32 = 900;
/// A plot's usual height, px.
const HEIGHT: u32 = 320;
/// Series colours, in order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A colour of the palette.
pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// What drawing a plot gives.
type Draw = Result<(), Box<dyn std::error::Error>>;

/// Runs `draw` on an SVG canvas of `height`; the SVG text, or an inline
/// note when drawing failed.
fn svg(
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Draw,
) -> String {
    let mut text = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut text, (WIDTH, height)).into_drawing_area();
        let r = root
            .fill(&WHITE)
            .map_err(|e| e.to_string().into())
            .and_then(|()| draw(&root));
        r.and_then(|()| root.present().map_err(|e| e.to_string().into()))
    };
    match result {
        Ok(()) => text,
        Err(e) => format!(
            "<p class=\"plot-error\">plot not drawn: {}</p>",
            super::html::escape(&e.to_string())
        ),
    }
}

/// Seconds from the timeline's origin of bucket `k`.
fn x_of(t: &Timeline, k: usize) -> f64 {
    k as f64 * t.width as f64 / 1e9
}

/// The time axis' label, with `t`'s bucket width.
fn axis_label(t: &Timeline) -> String {
    let w = t.width as f64 / 1e9;
    format!("seconds from the first request (buckets of {w} s)")
}

/// The legend of a plot's series, (name, colour) each, as HTML below the
/// plot.
fn legend<'a>(entries: impl IntoIterator<Item = (&'a str, RGBColor)>) -> String {
    let mut out = String::from("<ul class=\"legend\">");
    for (name, RGBColor(r, g, b)) in entries {
        out.push_str(&format!(
            "<li><span class=\"swatch\" style=\"background: rgb({r}, {g}, {b})\"></span>{}</li>",
            super::html::escape(name)
        ));
    }
    out.push_str("</ul>");
    out
}

/// Lines over one timeline: (name, values, colour); the plot and its
/// legend.
pub(crate) fn lines(title: &str, t: &Timeline, series: &[(String, Vec<u64>, RGBColor)]) -> String {
    let names = series.iter().map(|(name, _, c)| (name.as_str(), *c));
    lines_svg(title, t, series) + &legend(names)
}

/// The SVG of [`lines`].
fn lines_svg(title: &str, t: &Timeline, series: &[(String, Vec<u64>, RGBColor)]) -> String {
    svg(HEIGHT, |root| {
        let len = t.len.max(1);
        let x_max = x_of(t, len).max(1.0);
        let y_max = series
            .iter()
            .flat_map(|(_, v, _)| v.iter().copied())
            .max()
            .unwrap_or(0)
            .max(1) as f64
            * 1.1;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(axis_label(t))
            .y_desc("requests per bucket")
            .draw()?;
        for (_, values, c) in series {
            chart.draw_series(LineSeries::new(
                values
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| (x_of(t, k), v as f64)),
                c.stroke_width(2),
            ))?;
        }
        Ok(())
    })
}

/// Requests, delays and denials over time.
pub(crate) fn over_time(c: &CandidateReport) -> String {
    lines(
        "Requests, delays and denials over time",
        &c.timeline,
        &[
            ("requests".into(), c.requests_over_time(), colour(0)),
            ("delayed".into(), c.delayed_over_time(), colour(2)),
            ("denied".into(), c.denied_over_time(), colour(1)),
        ],
    )
}

/// Denials per rule over time (the rules that denied most).
pub(crate) fn rule_denials(c: &CandidateReport) -> String {
    let mut order: Vec<usize> = (0..c.rules.len())
        .filter(|&i| c.rules[i].denied > 0)
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(c.rules[i].denied));
    order.truncate(PALETTE.len());
    let series: Vec<(String, Vec<u64>, RGBColor)> = order
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            (
                printable(&c.rules[i].name).into_owned(),
                c.rule_denied_over_time(i),
                colour(n),
            )
        })
        .collect();
    lines("Denials over time, per rule", &c.timeline, &series)
}

/// Horizontal bars: (label, value).
pub(crate) fn bars(title: &str, unit: &str, rows: &[(String, u64)]) -> String {
    let height = 60 + 24 * rows.len().max(1) as u32;
    svg(height.max(140), |root| {
        let n = rows.len().max(1);
        let max = rows.iter().map(|r| r.1).max().unwrap_or(0).max(1) as f64 * 1.1;
        let labels: Vec<String> = rows.iter().map(|r| shorten(&r.0, 48)).collect();
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(330)
            .build_cartesian_2d(0f64..max, (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(unit)
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    labels.get(*i).cloned().unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()?;
        chart.draw_series(rows.iter().enumerate().map(|(i, (_, v))| {
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*v as f64, SegmentValue::Exact(i + 1)),
                ],
                colour(1).mix(0.7).filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            bar
        }))?;
        Ok(())
    })
}

/// A histogram of delays: (upper bound in ms, count) buckets.
pub(crate) fn delays(title: &str, buckets: &[(f64, u64)]) -> String {
    svg(HEIGHT, |root| {
        let max_x = buckets.last().map_or(1.0, |b| b.0).max(0.001);
        let max_y = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64 * 1.1;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y)?;
        chart
            .configure_mesh()
            .x_desc("delay (ms)")
            .y_desc("requests")
            .draw()?;
        let mut low = 0.0;
        chart.draw_series(buckets.iter().map(|&(high, n)| {
            let bar = Rectangle::new([(low, 0.0), (high, n as f64)], colour(2).mix(0.8).filled());
            low = high;
            bar
        }))?;
        Ok(())
    })
}

/// The parts of each candidate's bar in [`side_by_side`], in order.
const PARTS: [(&str, usize); 3] = [("allowed", 3), ("delayed", 2), ("denied", 1)];

/// Candidates side by side: allowed, delayed and denied per candidate;
/// the plot and its legend.
pub(crate) fn side_by_side(cands: &[CandidateReport]) -> String {
    side_by_side_svg(cands) + &legend(PARTS.iter().map(|&(name, c)| (name, colour(c))))
}

/// The SVG of [`side_by_side`].
fn side_by_side_svg(cands: &[CandidateReport]) -> String {
    let height = 80 + 34 * cands.len().max(1) as u32;
    svg(height.max(160), |root| {
        let n = cands.len().max(1);
        let max = cands.iter().map(|c| c.requests).max().unwrap_or(0).max(1) as f64 * 1.05;
        let names: Vec<String> = cands.iter().map(|c| shorten(&c.name, 40)).collect();
        let mut chart = ChartBuilder::on(root)
            .caption("Candidates side by side", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(260)
            .build_cartesian_2d(0f64..max, (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("requests")
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    names.get(*i).cloned().unwrap_or_default()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()?;
        for (p, &(_, c)) in PARTS.iter().enumerate() {
            chart.draw_series(cands.iter().enumerate().map(|(i, cand)| {
                let counts = [cand.allowed, cand.delayed, cand.denied];
                let start: u64 = counts[..p].iter().sum();
                let mut bar = Rectangle::new(
                    [
                        (start as f64, SegmentValue::Exact(i)),
                        ((start + counts[p]) as f64, SegmentValue::Exact(i + 1)),
                    ],
                    colour(c).filled(),
                );
                bar.set_margin(5, 5, 0, 0);
                bar
            }))?;
        }
        Ok(())
    })
}

/// Denials over time of every candidate, on the first one's time axis
/// (they replay the same log, so the axes match).
pub(crate) fn denials_by_candidate(cands: &[CandidateReport]) -> String {
    let Some(first) = cands.first() else {
        return String::new();
    };
    let series: Vec<(String, Vec<u64>, RGBColor)> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                printable(&c.name).into_owned(),
                c.denied_over_time(),
                colour(i),
            )
        })
        .collect();
    lines("Denials over time, by candidate", &first.timeline, &series)
}

/// `s`, printable, cut to `max` characters (`…` ending a cut one).
fn shorten(s: &str, max: usize) -> String {
    let s = printable(s);
    if s.chars().count() <= max {
        return s.into_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}
