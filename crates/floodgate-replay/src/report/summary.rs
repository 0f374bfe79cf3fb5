//! The terminal summary: totals per candidate, then per rule, the keys
//! denied most and the first lines not decided. Every text in it is
//! written [`printable`]: keys and lines come from a log a client wrote.

use std::io::{self, Write};

use crate::printable::printable;
use crate::run::Replay;
use crate::stats::{CandidateReport, DelayStats, KeyCount, RuleReport};

/// Delays as `p50/p99/max` in ms, `-` when none.
fn delays(d: &DelayStats) -> String {
    if d.count == 0 {
        "-".into()
    } else {
        format!("{:.1}/{:.1}/{:.1}", d.p50_ms, d.p99_ms, d.max_ms)
    }
}

/// `part` as a percentage of `whole`, `-` of nothing.
fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.2}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Writes the summary (at most `issues` lines not decided are listed).
pub fn write_summary(r: &Replay, out: &mut dyn Write, issues: usize) -> io::Result<()> {
    write_input(r, out, issues)?;
    write_totals(&r.candidates, out)?;
    for c in &r.candidates {
        writeln!(out, "\n{}:", printable(&c.name))?;
        write_notes(c, out)?;
        write_rules(&c.rules, out)?;
        write_top_denied(&c.top_denied, out)?;
    }
    Ok(())
}

/// What was read: lines, how fast, and the first `issues` lines not
/// decided; then the replay's warnings.
fn write_input(r: &Replay, out: &mut dyn Write, issues: usize) -> io::Result<()> {
    let i = &r.input;
    writeln!(
        out,
        "Replayed {} lines of {} ({}) in {:.2} s ({:.0} lines/s).",
        i.lines,
        printable(&r.sources.join(", ")),
        printable(&r.format),
        r.elapsed_secs,
        i.lines as f64 / r.elapsed_secs.max(1e-9)
    )?;
    if i.blank > 0 {
        writeln!(out, "  blank lines: {}", i.blank)?;
    }
    writeln!(
        out,
        "  not decided: {} malformed, {} later than the {} s reordering window",
        i.malformed, i.late, i.window_secs
    )?;
    for s in i.issues.iter().take(issues) {
        writeln!(out, "    {}", printable(s))?;
    }
    if (i.malformed + i.late) as usize > issues.min(i.issues.len()) {
        writeln!(
            out,
            "    ... (--rejected FILE lists every line not decided)"
        )?;
    }
    for w in &r.warnings {
        writeln!(out, "warning: {}", printable(w))?;
    }
    writeln!(out)
}

/// One line of totals per candidate.
fn write_totals(candidates: &[CandidateReport], out: &mut dyn Write) -> io::Result<()> {
    let name_w = candidates
        .iter()
        .map(|c| printable(&c.name).chars().count())
        .max()
        .unwrap_or(9)
        .max(9);
    writeln!(
        out,
        "{:<name_w$}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>20}  {:>8}",
        "candidate",
        "requests",
        "allowed",
        "delayed",
        "denied",
        "denied%",
        "delay p50/p99/max ms",
        "limited"
    )?;
    for c in candidates {
        writeln!(
            out,
            "{:<name_w$}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>20}  {:>8}",
            printable(&c.name),
            c.requests,
            c.allowed,
            c.delayed,
            c.denied,
            pct(c.denied, c.requests),
            delays(&c.delay),
            c.distinct_limited
        )?;
    }
    Ok(())
}

/// A candidate's counts that only some replays have (a full delay queue,
/// refused requests, a full store), and its notes.
fn write_notes(c: &CandidateReport, out: &mut dyn Write) -> io::Result<()> {
    if c.delay_queue_full > 0 {
        writeln!(
            out,
            "  {} denied because http.layer.max_delayed requests were already waiting",
            c.delay_queue_full
        )?;
    }
    if c.errors > 0 {
        writeln!(
            out,
            "  {} requests the engine refused (see --decisions)",
            c.errors
        )?;
    }
    if c.evictions > 0 {
        writeln!(
            out,
            "  {} keys evicted when the store was full (--capacity)",
            c.evictions
        )?;
    }
    if c.admitted_full > 0 {
        writeln!(
            out,
            "  {} requests of new keys decided without state when the store was full (--capacity)",
            c.admitted_full
        )?;
    }
    for n in &c.notes {
        writeln!(out, "  note: {}", printable(n))?;
    }
    Ok(())
}

/// A candidate's table of rules.
fn write_rules(rules: &[RuleReport], out: &mut dyn Write) -> io::Result<()> {
    let rule_w = rules
        .iter()
        .map(|r| printable(&r.name).chars().count() + if r.shadow { 9 } else { 0 })
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "  {:<rule_w$}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>20}  limits",
        "rule", "requests", "allowed", "delayed", "denied", "shadow", "delay p50/p99/max ms",
    )?;
    for r in rules {
        let name = if r.shadow {
            format!("{} (shadow)", printable(&r.name))
        } else {
            printable(&r.name).into_owned()
        };
        writeln!(
            out,
            "  {:<rule_w$}  {:>10}  {:>10}  {:>9}  {:>9}  {:>8}  {:>20}  {}",
            name,
            r.requests,
            r.allowed,
            r.delayed,
            r.denied,
            r.shadow_hits,
            delays(&r.delay),
            printable(&r.limits)
        )?;
    }
    Ok(())
}

/// The ten keys a candidate denied most (none: nothing written).
fn write_top_denied(top: &[KeyCount], out: &mut dyn Write) -> io::Result<()> {
    if top.is_empty() {
        return Ok(());
    }
    writeln!(out, "  keys denied most:")?;
    for k in top.iter().take(10) {
        let err = if k.error > 0 {
            format!(" (±{})", k.error)
        } else {
            String::new()
        };
        writeln!(
            out,
            "    {:>9}{err}  {}{}: {}",
            k.count,
            printable(&k.rule),
            if k.shadow { " (shadow)" } else { "" },
            printable(&k.key)
        )?;
    }
    Ok(())
}
