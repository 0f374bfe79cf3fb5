//! The Tokio runtime a binary serves on: `workers` threads (one: a
//! current-thread runtime, no work stealing and no wake-ups across
//! threads, like an nginx worker process; none: one per core).

use tokio::runtime::{Builder, Runtime};

/// Builds the runtime of `workers` threads named `name`.
pub fn runtime(workers: Option<usize>, name: &str) -> std::io::Result<Runtime> {
    let mut builder = match workers {
        Some(1) => Builder::new_current_thread(),
        Some(w) => {
            let mut b = Builder::new_multi_thread();
            b.worker_threads(w.max(1));
            b
        }
        None => Builder::new_multi_thread(),
    };
    builder.enable_all().thread_name(name).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_is_a_current_thread_runtime() {
        let rt = runtime(Some(1), "t").unwrap();
        assert_eq!(
            rt.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::CurrentThread
        );
        let rt = runtime(Some(3), "t").unwrap();
        assert_eq!(rt.metrics().num_workers(), 3);
        let rt = runtime(None, "t").unwrap();
        assert_eq!(
            rt.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
    }
}
