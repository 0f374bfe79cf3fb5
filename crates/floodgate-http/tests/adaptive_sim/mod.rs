//! The adaptive concurrency limit in a deterministic simulation: the
//! layer's controller and admission driving a simulated upstream on a
//! virtual clock (see `model`), one test per scenario; `queued`: the same
//! with the limit's queue.

mod model;
mod queued;
mod scenarios;
