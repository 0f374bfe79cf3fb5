//! Binding listeners and serving routers on them.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::RuntimeError;

/// Binds `addr`, logging it as the `what` listener.
pub async fn bind(what: &str, addr: SocketAddr) -> Result<TcpListener, RuntimeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| RuntimeError::Bind { addr, source })?;
    if let Ok(a) = listener.local_addr() {
        tracing::info!(listener = what, addr = %a, "listening");
        if !a.ip().is_loopback() {
            tracing::warn!(
                listener = what,
                addr = %a,
                "listening beyond loopback: reachable from other hosts"
            );
        }
    }
    Ok(listener)
}

/// Serves `router` on `listener` until `stop` turns true, then lets the
/// requests in flight finish.
pub fn spawn_router(
    listener: TcpListener,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|v| *v).await;
            })
            .await
            .map_err(|e| e.to_string())
    })
}
