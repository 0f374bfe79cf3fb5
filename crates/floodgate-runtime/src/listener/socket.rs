//! The sockets a listener accepts connections on ([`Listen`]): TCP, or a
//! Unix socket ([`UnixSocket`]) for clients on the same host — a sidecar
//! proxy in the same pod — under the same cap and protections.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::proxy_protocol::Peek;
use crate::error::RuntimeError;

/// A listening socket.
pub trait Listen: Send + Sync + 'static {
    /// An accepted connection.
    type Stream: AsyncRead + AsyncWrite + AsFd + Peek + Unpin + Send + 'static;

    /// The next connection and its client's address.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;

    /// Readies an accepted connection (TCP: no Nagle delay).
    fn ready(_stream: &Self::Stream) {}
}

impl Listen for TcpListener {
    type Stream = TcpStream;

    fn accept(&self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }

    fn ready(stream: &TcpStream) {
        let _ = stream.set_nodelay(true);
    }
}

/// The address a Unix socket's clients are given where a client address
/// is asked for (they have none): `0.0.0.0:0`.
pub const UNIX_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// A listening Unix socket; its file is removed when it is dropped (when
/// its listener stops).
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl UnixSocket {
    /// Listens on a new socket at `path`, logged as the `what` listener.
    /// A socket there that nobody listens on (left by a process killed
    /// before it could remove it) is replaced; a live socket, or any other
    /// file, is an error naming it, left in place. The socket's permissions
    /// are what the process's umask leaves of `rwxrwxrwx` (umask 022:
    /// `rwxr-xr-x`, so that only its owner's user, and root, may connect).
    pub fn bind(what: &str, path: &Path) -> Result<UnixSocket, RuntimeError> {
        remove_if_stale(what, path);
        let listener = UnixListener::bind(path).map_err(|source| RuntimeError::BindUnix {
            path: path.to_owned(),
            source,
        })?;
        tracing::info!(listener = what, path = %path.display(), "listening on a Unix socket");
        Ok(UnixSocket {
            listener,
            path: path.to_owned(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes the socket at `path` if nothing listens on it (connecting is
/// refused): a process killed (`SIGKILL`, out of memory) leaves its socket
/// behind, and a container restarted in the same pod finds it there.
fn remove_if_stale(what: &str, path: &Path) {
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return;
    }
    let refused = std::os::unix::net::UnixStream::connect(path)
        .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
    if refused && std::fs::remove_file(path).is_ok() {
        tracing::warn!(
            listener = what,
            path = %path.display(),
            "removed a stale Unix socket (nothing listened on it)"
        );
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Listen for UnixSocket {
    type Stream = UnixStream;

    async fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (stream, _) = self.listener.accept().await?;
        Ok((stream, UNIX_PEER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file, or a live socket, at the path is an error naming it, left
    /// alone; a stale socket is replaced; the socket is removed when its
    /// listener is dropped.
    #[tokio::test]
    async fn an_existing_path_is_refused_unless_stale_and_the_socket_removed_after() {
        let dir = tempfile::tempdir().unwrap();
        let taken = dir.path().join("taken.sock");
        std::fs::write(&taken, "someone's").unwrap();
        let Err(e) = UnixSocket::bind("test", &taken) else {
            panic!("bound over an existing file");
        };
        assert!(e.to_string().contains("taken.sock"), "{e}");
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "someone's");

        // A live socket is another process's.
        let live = dir.path().join("live.sock");
        let _other = std::os::unix::net::UnixListener::bind(&live).unwrap();
        assert!(UnixSocket::bind("test", &live).is_err());
        assert!(live.exists());

        // A socket nobody listens on is replaced (the standard library's
        // listener leaves its file, as a killed process does).
        let path = dir.path().join("grpc.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let socket = UnixSocket::bind("test", &path).unwrap();
        let client = UnixStream::connect(&path);
        let (client, accepted) = tokio::join!(client, Listen::accept(&socket));
        assert!(client.is_ok());
        assert_eq!(accepted.unwrap().1, UNIX_PEER);
        drop(socket);
        assert!(!path.exists());
    }
}
