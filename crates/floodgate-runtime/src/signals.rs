//! Process signals: SIGTERM/SIGINT end the process (after the drain);
//! SIGHUP reloads (see [`Watching`](crate::lifecycle::Watching)).

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
