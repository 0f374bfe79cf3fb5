//! The RLQS table of the dashboard: the buckets with the most streams (at
//! most [`TOP`]), each with its streams, their assignments and use, and
//! the last action sent. Bucket ids are only ever shown here, as text,
//! never as a metric label.

use std::sync::{Arc, Weak};

use floodgate_runtime::host::dashboard::{Panel, PanelSource};

use super::Rlqs;
use super::shares::BucketView;

/// Buckets listed.
pub(crate) const TOP: usize = 20;

/// The panel's source, for as long as the service lives.
pub(crate) fn source(rlqs: Weak<Rlqs>) -> PanelSource {
    Arc::new(move || rlqs.upgrade().map(|r| panel(&r)).unwrap_or_default())
}

fn panel(rlqs: &Rlqs) -> Panel {
    let held = rlqs.shares.len();
    Panel {
        title: "Quota service (RLQS) buckets".into(),
        note: format!(
            "{held} buckets held; the {TOP} with the most streams of this instance. Use: the requests each stream's last report counted, per second."
        ),
        columns: [
            "domain",
            "bucket",
            "streams",
            "assignments",
            "use/s",
            "last action",
        ]
        .map(String::from)
        .to_vec(),
        rows: rlqs.shares.top(TOP).iter().map(row).collect(),
    }
}

fn row(view: &BucketView) -> Vec<String> {
    let bucket = (view.key.entries.iter())
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let terms = (view.streams.iter())
        .filter_map(|(_, last)| last.as_ref().map(|l| l.terms.clone()))
        .collect::<Vec<_>>()
        .join("; ");
    let use_per_s: u64 = view.streams.iter().filter_map(|(u, _)| *u).sum();
    let last = (view.streams.iter())
        .filter_map(|(_, last)| last.as_ref())
        .max_by_key(|l| l.at)
        .map_or_else(String::new, |l| l.kind.label().to_owned());
    vec![
        view.key.domain.clone(),
        bucket,
        view.streams.len().to_string(),
        terms,
        format!("{:.1}", use_per_s as f64 / 1000.0),
        last,
    ]
}
