//! Process signals: SIGTERM/SIGINT end the process (after the drain),
//! SIGHUP reloads.

use tokio::task::JoinHandle;

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received: shutting down"),
    }
}

/// Runs `on_hangup` on every SIGHUP until the returned guard is dropped
/// (none: the signal cannot be listened to). A SIGHUP then no longer ends
/// the process, as it would by default.
pub fn on_hangup(on_hangup: impl Fn() + Send + 'static) -> AbortOnDrop {
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| tracing::warn!(error = %e, "cannot listen to SIGHUP"))
        .ok();
    AbortOnDrop(hup.map(|mut hup| {
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received: reloading the configuration");
                on_hangup();
            }
        })
    }))
}

/// Aborts a task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub Option<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}
