//! The processes a benchmark starts: free ports for them, retries when a
//! port was taken meanwhile, and a kill when the case ends.

use std::net::TcpListener;
use std::process::Child;

/// Picks a free port on the loopback interface.
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// How many times a server is started on new ports when the ones picked
/// were taken before it bound them (by another process's connection).
pub(super) const STARTS: usize = 5;

/// A child process killed on drop.
pub(super) struct Proc(pub(super) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
