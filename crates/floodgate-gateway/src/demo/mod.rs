//! A tiny upstream for demos and benchmarks (`floodgate bench upstream`):
//! answers every request 200 with a small body, over HTTP/1.1 and HTTP/2
//! (prior knowledge), after reading the request body; with a
//! [`Capacity`], as a server of a few workers would (a queue, a service
//! time, failures).

mod capacity;

pub use capacity::{Capacity, ServiceTime, Work};

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// A field on every answer of the demo upstream with a [`Capacity`], so
/// that a client tells its answers (its failures included) from the
/// gateway's own (a 503 of shedding, a 504 of an upstream timeout).
pub const ANSWERED_BY: HeaderName = HeaderName::from_static("x-demo-upstream");

/// Serves the demo upstream on `listener` forever; every answer is `body`.
pub async fn serve_demo(listener: TcpListener, body: Bytes) {
    serve(listener, body, None).await;
}

/// Serves the demo upstream on `listener` forever, its requests served as
/// `capacity` allows; a request served is answered `body`, one that failed
/// 503 (an overload signal to an adaptive limit in front).
pub async fn serve_with_capacity(listener: TcpListener, body: Bytes, capacity: Capacity) {
    serve(listener, body, Some(capacity)).await;
}

async fn serve(listener: TcpListener, body: Bytes, capacity: Option<Capacity>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (body, capacity) = (body.clone(), capacity.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                answer(req, body.clone(), capacity.clone())
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Reads (and drops) what was sent, is served, and answers.
async fn answer(
    req: Request<Incoming>,
    body: Bytes,
    capacity: Option<Capacity>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let _ = req.into_body().collect().await;
    let marked = capacity.is_some();
    let failed = match capacity {
        Some(c) => c.serve().await,
        None => false,
    };
    let mut res = Response::new(Full::new(if failed { Bytes::new() } else { body }));
    if failed {
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    let headers = res.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if marked {
        headers.insert(ANSWERED_BY, HeaderValue::from_static("1"));
    }
    Ok(res)
}

/// Binds `addr` and serves the demo upstream forever.
pub async fn run_demo(addr: SocketAddr, body: Bytes) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_demo(listener, body).await;
    Ok(())
}
