//! The admin listener (the `server.admin` address, loopback by default):
//! `/metrics` (Prometheus), `/healthcheck`, `/ready`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// What the admin endpoints report.
#[derive(Clone)]
pub struct Admin {
    /// The metrics registry (none: `/metrics` is empty).
    pub metrics: Option<PrometheusHandle>,
    /// Set when shutdown begins: `/ready` turns 503.
    pub draining: Arc<AtomicBool>,
}

impl Admin {
    fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, body) = match req.uri().path() {
            "/metrics" => {
                let text = self
                    .metrics
                    .as_ref()
                    .map(|h| h.render())
                    .unwrap_or_default();
                let mut res = Response::new(Full::new(Bytes::from(text)));
                res.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                return res;
            }
            "/healthcheck" => (StatusCode::OK, "OK"),
            "/ready" if self.draining.load(Ordering::Relaxed) => {
                (StatusCode::SERVICE_UNAVAILABLE, "draining")
            }
            "/ready" => (StatusCode::OK, "ready"),
            _ => (StatusCode::NOT_FOUND, "not found"),
        };
        let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *res.status_mut() = status;
        res
    }

    /// Serves the endpoints on `listener` (until the task is dropped).
    pub async fn serve(self, listener: TcpListener) {
        let admin = Arc::new(self);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let admin = admin.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let res = admin.answer(&req);
                    async move { Ok::<_, Infallible>(res) }
                });
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    }
}
