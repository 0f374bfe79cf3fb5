//! The HTML report: one self-contained file — styles inline, plots as
//! inline SVG, no script and nothing fetched — readable offline and
//! attachable to a ticket.

use std::fmt::Write;

use super::plots;
use crate::format::time::write_rfc3339;
use crate::printable::push_printable;
use crate::run::Replay;
use crate::stats::{CandidateReport, DelayStats, KeyCount, RuleReport};

/// Escapes text for HTML, control characters as in the terminal summary
/// (see [`printable`](crate::printable)).
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => push_printable(&mut out, c),
        }
    }
    out
}

/// The page's style sheet.
const STYLE: &str = r#"
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
.warn { background: #fff6e0; border-left: 4px solid #e0a000; padding: 0.5em 1em; }
.note { color: #555; font-size: 0.9em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; display: block; }
ul.legend { list-style: none; margin: 0.3em 0 0 0; padding: 0; display: flex; flex-wrap: wrap; gap: 0.3em 1.5em; font-size: 0.9em; }
ul.legend .swatch { display: inline-block; width: 1.2em; height: 0.7em; margin-right: 0.4em; vertical-align: middle; }
code { background: #f4f4f4; padding: 0 0.2em; }
"#;

/// An instant (ns since the epoch) in RFC 3339; empty for none.
fn time(ns: u64) -> String {
    let mut s = String::new();
    if ns > 0 {
        write_rfc3339(ns, &mut s);
    }
    s
}

/// `part` as a percentage of `whole`, `–` of nothing.
fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "–".into();
    }
    format!("{:.2} %", part as f64 * 100.0 / whole as f64)
}

/// Delays as `p50 / p99 / max` in ms, `–` when none.
fn delay_cell(d: &DelayStats) -> String {
    if d.count == 0 {
        return "–".into();
    }
    format!("{:.1} / {:.1} / {:.1}", d.p50_ms, d.p99_ms, d.max_ms)
}

/// The report as one HTML page.
pub fn render(r: &Replay) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Floodgate replay</title><style>{STYLE}</style></head><body>\n<h1>Floodgate replay</h1>"
    );
    let _ = writeln!(
        h,
        "<p>{} lines of <code>{}</code> ({}) replayed through {} candidate{} in {:.1} s.</p>",
        r.input.lines,
        escape(&r.sources.join(", ")),
        escape(&r.format),
        r.candidates.len(),
        if r.candidates.len() == 1 { "" } else { "s" },
        r.elapsed_secs
    );
    if let Some(c) = r.candidates.first() {
        let _ = writeln!(
            h,
            "<p class=\"note\">Arrivals from {} to {}.</p>",
            time(c.first),
            time(c.last)
        );
    }
    input_section(&mut h, r);
    warnings_section(&mut h, &r.warnings);
    candidates_table(&mut h, &r.candidates);
    if r.candidates.len() > 1 {
        figure(&mut h, "side-by-side", &plots::side_by_side(&r.candidates));
        figure(
            &mut h,
            "denials-by-candidate",
            &plots::denials_by_candidate(&r.candidates),
        );
    }
    for (i, c) in r.candidates.iter().enumerate() {
        candidate_section(&mut h, i, c);
    }
    h.push_str("</body></html>\n");
    h
}

/// The replay's warnings, if any.
fn warnings_section(h: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    h.push_str("<div class=\"warn\"><strong>Warnings</strong><ul>");
    for w in warnings {
        let _ = write!(h, "<li>{}</li>", escape(w));
    }
    h.push_str("</ul></div>\n");
}

/// One row of totals per candidate.
fn candidates_table(h: &mut String, candidates: &[CandidateReport]) {
    h.push_str("<h2 id=\"candidates\">Candidates</h2>\n<table><tr><th class=\"l\">candidate</th><th>requests</th><th>allowed</th><th>delayed</th><th>denied</th><th>denied %</th><th>delay p50 / p99 / max (ms)</th><th>distinct keys limited</th><th>keys held</th></tr>\n");
    for c in candidates {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.name),
            c.requests,
            c.allowed,
            c.delayed,
            c.denied,
            pct(c.denied, c.requests),
            delay_cell(&c.delay),
            c.distinct_limited,
            c.keys_held
        );
    }
    h.push_str("</table>\n");
}

/// An SVG plot, as a figure of the page with id `id`.
fn figure(h: &mut String, id: &str, svg: &str) {
    let _ = writeln!(h, "<figure class=\"plot\" id=\"{id}\">{svg}</figure>");
}

/// What was read, and the first lines not decided.
fn input_section(h: &mut String, r: &Replay) {
    let i = &r.input;
    let _ = writeln!(
        h,
        "<table><tr><th class=\"l\">lines read</th><td>{}</td></tr>\
         <tr><th class=\"l\">blank</th><td>{}</td></tr>\
         <tr><th class=\"l\">malformed (not decided)</th><td>{}</td></tr>\
         <tr><th class=\"l\">later than the {} s reordering window (not decided)</th><td>{}</td></tr></table>",
        i.lines, i.blank, i.malformed, i.window_secs, i.late
    );
    if !i.issues.is_empty() {
        let _ = write!(
            h,
            "<details id=\"issues\"><summary>Lines not decided (the first {})</summary><ul>",
            i.issues.len()
        );
        for s in &i.issues {
            let _ = write!(h, "<li><code>{}</code></li>", escape(s));
        }
        h.push_str("</ul></details>\n");
    }
}

/// Candidate `i`'s section: its totals, its rules, its plots and the
/// keys it denied most.
fn candidate_section(h: &mut String, i: usize, c: &CandidateReport) {
    let _ = writeln!(h, "<h2 id=\"candidate-{i}\">{}</h2>", escape(&c.name));
    for n in &c.notes {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", escape(n));
    }
    let _ = writeln!(
        h,
        "<p>{} requests: {} allowed, {} delayed, {} denied ({}{}), {} not limited by any rule; {} distinct keys limited; {} counters held at the end{}.</p>",
        c.requests,
        c.allowed,
        c.delayed,
        c.denied,
        pct(c.denied, c.requests),
        if c.delay_queue_full > 0 {
            format!(
                ", {} of them because http.layer.max_delayed requests were already waiting",
                c.delay_queue_full
            )
        } else {
            String::new()
        },
        c.unlimited,
        c.distinct_limited,
        c.keys_held,
        full_store(c)
    );
    rules_table(h, &c.rules);
    figure(h, &format!("over-time-{i}"), &plots::over_time(c));
    if c.rules.iter().any(|r| r.denied > 0) {
        figure(h, &format!("rule-denials-{i}"), &plots::rule_denials(c));
    }
    top_denied(h, i, &c.top_denied);
    if c.delay.count > 0 {
        figure(
            h,
            &format!("delays-{i}"),
            &plots::delays("Delay distribution", &c.delay.buckets),
        );
    }
}

/// A candidate's table of rules.
fn rules_table(h: &mut String, rules: &[RuleReport]) {
    h.push_str("<h3>Per rule</h3>\n<table><tr><th class=\"l\">rule</th><th class=\"l\">limits</th><th>requests</th><th>allowed</th><th>delayed</th><th>denied</th><th>shadow-mode hits</th><th>delay p50 / p99 / max (ms)</th><th>distinct keys limited</th></tr>\n");
    for r in rules {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.name),
            if r.shadow { " (shadow)" } else { "" },
            escape(&r.limits),
            r.requests,
            r.allowed,
            r.delayed,
            r.denied,
            r.shadow_hits,
            delay_cell(&r.delay),
            r.distinct_limited
        );
    }
    h.push_str("</table>\n");
}

/// The keys candidate `i` denied most: a plot of the first 15, and a table.
fn top_denied(h: &mut String, i: usize, top: &[KeyCount]) {
    if top.is_empty() {
        return;
    }
    let rows: Vec<(String, u64)> = top
        .iter()
        .take(15)
        .map(|k| (format!("{}: {}", k.rule, k.key), k.count))
        .collect();
    figure(
        h,
        &format!("top-keys-{i}"),
        &plots::bars("Keys denied most", "denials", &rows),
    );
    h.push_str("<table><tr><th class=\"l\">rule</th><th class=\"l\">key</th><th>denials</th><th>± (sketch)</th></tr>\n");
    for k in top {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&k.rule),
            if k.shadow { " (shadow)" } else { "" },
            escape(&k.key),
            k.count,
            k.error
        );
    }
    h.push_str("</table>\n");
}

/// What the full store did, if anything: keys evicted, requests of new
/// keys decided without state.
fn full_store(c: &CandidateReport) -> String {
    let mut out = String::new();
    if c.evictions > 0 {
        let _ = write!(out, ", {} evicted when the store was full", c.evictions);
    }
    if c.admitted_full > 0 {
        let _ = write!(
            out,
            ", {} requests of new keys decided without state when the store was full",
            c.admitted_full
        );
    }
    out
}
