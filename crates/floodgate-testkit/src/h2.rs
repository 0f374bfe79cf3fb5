//! A raw HTTP/2 client connection (hyper's), for tests that set every
//! header and frame themselves.

use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// An HTTP/2 connection (prior knowledge) to 127.0.0.1:`port`, driven by
/// a task of the current runtime.
pub async fn h2_connect<B>(port: u16) -> SendRequest<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect over HTTP/2");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("the HTTP/2 handshake");
    tokio::spawn(conn);
    send
}
