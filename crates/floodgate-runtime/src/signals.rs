//! Process signals: SIGTERM/SIGINT end the process (after the drain);
//! SIGHUP reloads (see [`Watching`](crate::lifecycle::Watching)).

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Resolves on SIGTERM or SIGINT. The handlers are installed by this call,
/// not when the future is first polled: call it (inside the runtime)
/// before the listeners start, so that a signal that comes as soon as the
/// process answers ends it through the drain rather than at once.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let received = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => s.recv().await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = received(term) => tracing::info!("SIGTERM received: shutting down"),
            _ = received(int) => tracing::info!("SIGINT received: shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// A signal that comes before the future is first polled (the
    /// listeners starting) is not lost, nor does it end the process.
    #[tokio::test]
    async fn a_signal_before_the_first_poll_is_received() {
        let shutdown = super::shutdown_signal();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        // Delivered to the process before the future runs.
        std::thread::sleep(Duration::from_millis(50));
        tokio::time::timeout(Duration::from_secs(10), shutdown)
            .await
            .expect("SIGTERM received");
    }
}
