//! Tables a frontend adds to the dashboard: each one a title, a note,
//! columns and rows of text, built by the frontend when the page asks
//! (every second while it is open), so the runtime shows what it does not
//! know (the decision service's RLQS buckets, for one). The page writes
//! every cell as text.

use std::sync::{Arc, RwLock};

use serde::Serialize;

/// One table on the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Panel {
    /// Its heading.
    pub title: String,
    /// A line under the heading (what the rows are, what is left out).
    pub note: String,
    /// The columns' names.
    pub columns: Vec<String>,
    /// The rows, a cell per column; keep them few (the page redraws them
    /// every second).
    pub rows: Vec<Vec<String>>,
}

/// What builds a panel when the page asks.
pub type PanelSource = Arc<dyn Fn() -> Panel + Send + Sync>;

/// The panels frontends added, in order.
#[derive(Default)]
pub(crate) struct Panels(RwLock<Vec<PanelSource>>);

impl Panels {
    /// Adds `source`'s panel after the others.
    pub(crate) fn add(&self, source: PanelSource) {
        (self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .push(source);
    }

    /// Every panel, built now.
    pub(crate) fn build(&self) -> Vec<Panel> {
        let sources = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sources.iter().map(|source| source()).collect()
    }
}
