//! The results as CSV: one row per candidate and rule, and one per
//! candidate for all its requests (rule `*`).

use std::io::{self, Write};

use crate::run::Replay;
use crate::stats::DelayStats;

/// A CSV field: quoted when it holds a separator, a quote or a line
/// break.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The delay columns (p50, p99, max in ms), empty when none.
fn delay(d: &DelayStats) -> String {
    if d.count == 0 {
        ",,".into()
    } else {
        format!("{},{},{}", d.p50_ms, d.p99_ms, d.max_ms)
    }
}

/// Writes the results as CSV.
pub fn write_csv(r: &Replay, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "candidate,rule,domain,limits,shadow,requests,allowed,delayed,denied,shadow_hits,delay_p50_ms,delay_p99_ms,delay_max_ms,distinct_limited"
    )?;
    for c in &r.candidates {
        writeln!(
            out,
            "{},*,,,,{},{},{},{},,{},{}",
            field(&c.name),
            c.requests,
            c.allowed,
            c.delayed,
            c.denied,
            delay(&c.delay),
            c.distinct_limited
        )?;
        for rule in &c.rules {
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                field(&c.name),
                field(&rule.name),
                field(&rule.domain),
                field(&rule.limits),
                rule.shadow,
                rule.requests,
                rule.allowed,
                rule.delayed,
                rule.denied,
                rule.shadow_hits,
                delay(&rule.delay),
                rule.distinct_limited
            )?;
        }
    }
    Ok(())
}
