//! A server run by the test process itself, on a runtime of its own: the
//! upstream a `floodgate gateway` under test proxies to.

use std::future::Future;
use std::net::SocketAddr;

/// A server on an ephemeral port of 127.0.0.1, served by a one-thread
/// tokio runtime of its own (stopped on drop), so that blocking tests can
/// run one too.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Upstream {
    /// Binds 127.0.0.1:0 and runs `serve` on that listener, e.g.
    /// `Upstream::start(|l| floodgate_gateway::demo::serve_demo(l, body))`.
    pub fn start<F, Fut>(serve: F) -> Upstream
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the upstream");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the upstream");
        let addr = listener.local_addr().expect("the upstream's address");
        runtime.spawn(serve(listener));
        Upstream {
            addr,
            _runtime: runtime,
        }
    }
}
