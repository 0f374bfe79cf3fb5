//! The results as one JSON document, counts over time included.

use std::io::{self, Write};

use serde_json::{Map, Value, json};

use crate::run::Replay;

/// Writes the results as JSON.
pub fn write_json(r: &Replay, out: &mut dyn Write) -> io::Result<()> {
    let mut doc = serde_json::to_value(r).map_err(io::Error::other)?;
    if let Some(cands) = doc.get_mut("candidates").and_then(Value::as_array_mut) {
        for (v, c) in cands.iter_mut().zip(&r.candidates) {
            let mut rules = Map::new();
            for (i, rule) in c.rules.iter().enumerate() {
                rules.insert(
                    rule.name.clone(),
                    json!({
                        "requests": c.rule_requests_over_time(i),
                        "denied": c.rule_denied_over_time(i),
                    }),
                );
            }
            if let Some(obj) = v.as_object_mut() {
                obj.insert(
                    "timeline".into(),
                    json!({
                        "origin_ns": c.timeline.origin,
                        "bucket_secs": c.timeline.width as f64 / 1e9,
                        "requests": c.requests_over_time(),
                        "delayed": c.delayed_over_time(),
                        "denied": c.denied_over_time(),
                        "rules": rules,
                    }),
                );
            }
        }
    }
    serde_json::to_writer_pretty(&mut *out, &doc).map_err(io::Error::other)?;
    writeln!(out)
}
