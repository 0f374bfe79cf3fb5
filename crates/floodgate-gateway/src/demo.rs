//! A tiny upstream for demos and benchmarks (`floodgate bench upstream`):
//! answers every request 200 with a small body, over HTTP/1.1 and HTTP/2
//! (prior knowledge), after reading the request body.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// Serves the demo upstream on `listener` forever; every answer is `body`.
pub async fn serve_demo(listener: TcpListener, body: Bytes) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let body = body.clone();
                async move {
                    // Read (and drop) what was sent.
                    let _ = req.into_body().collect().await;
                    let mut res = Response::new(Full::new(body));
                    res.headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                    Ok::<_, Infallible>(res)
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Binds `addr` and serves the demo upstream forever.
pub async fn run_demo(addr: SocketAddr, body: Bytes) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_demo(listener, body).await;
    Ok(())
}
