//! Writing a replay's results: a terminal summary, JSON, CSV and a
//! self-contained HTML report with plots.

mod csv;
pub(crate) mod html;
mod json;
mod plots;
mod summary;

pub use csv::write_csv;
pub use html::render as html;
pub use json::write_json;
pub use summary::write_summary;
