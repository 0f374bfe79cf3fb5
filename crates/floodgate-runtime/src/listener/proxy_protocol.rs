//! The PROXY protocol (HAProxy's, v1 text and v2 binary) on a listener
//! behind an L4 load balancer, as nginx's `listen … proxy_protocol` with
//! `set_real_ip_from` and `real_ip_header proxy_protocol`: a connection
//! from a trusted source starts with a header whose source address becomes
//! the connection's client address.
//!
//! The rule, so that a client never chooses its own address:
//! - from a trusted source the header is required; a connection without
//!   one, with a malformed one, or whose header is not whole within the
//!   header timeout is closed;
//! - from any other peer a header is refused: the connection is closed; a
//!   connection that starts with anything else is served as usual, its
//!   client the socket peer;
//! - `LOCAL` (v2), `UNKNOWN` (v1), and v2 headers for another family or
//!   transport than TCP over IPv4 or IPv6 keep the socket peer, as nginx
//!   does.
//!
//! The header is read with `MSG_PEEK` until it is whole, then exactly its
//! bytes are consumed: what follows (a request, a TLS handshake) stays in
//! the socket for the usual path. Bounded: 107 bytes for v1, 4096 for v2
//! (nginx's bound), on the stack; nothing is allocated.

use std::io;
use std::net::{IpAddr, SocketAddr};

use ppp::PartialResult;
use ppp::{v1, v2};
use std::future::Future;
use std::os::fd::AsFd;

use tokio::io::{Interest, Ready};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};

/// Longest header read (nginx's `NGX_PROXY_PROTOCOL_MAX_HEADER`): v1's are
/// at most 107 bytes, a v2 header declaring more is refused.
pub const MAX_HEADER: usize = 4096;

/// Longest v1 header, its `\r\n` included.
const V1_MAX: usize = 107;

/// The v1 header's start.
const V1_SIGNATURE: &[u8] = b"PROXY ";

/// Which peers may send a PROXY protocol header, and must.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyProtocol {
    trusted: Vec<(IpAddr, u8)>,
}

/// Why a connection was closed while its PROXY protocol header was read.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// A trusted source sent no header.
    #[error("no PROXY protocol header from a trusted source")]
    Missing,
    /// A peer that is not a trusted source sent a header.
    #[error("a PROXY protocol header from a source that is not trusted")]
    Untrusted,
    /// A malformed v1 header.
    #[error("malformed PROXY protocol v1 header: {0}")]
    V1(v1::BinaryParseError),
    /// A malformed v2 header.
    #[error("malformed PROXY protocol v2 header: {0}")]
    V2(v2::ParseError),
    /// A v2 header longer than [`MAX_HEADER`].
    #[error("PROXY protocol v2 header of {0} bytes, longer than {MAX_HEADER}")]
    TooLong(usize),
    /// The connection closed before its first byte (a balancer's TCP
    /// health check).
    #[error("the connection closed before its first byte")]
    Closed,
    /// The connection closed within the header.
    #[error("the connection closed within the PROXY protocol header")]
    Truncated,
    /// The header was not whole within the header timeout.
    #[error("no whole PROXY protocol header within the header timeout")]
    Timeout,
    /// Reading failed.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] io::Error),
}

/// What the first bytes of a connection hold, by [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The start of a header: more bytes are needed.
    Incomplete,
    /// A whole header of `len` bytes, giving the client's address
    /// (`None`: keep the socket peer).
    Header {
        /// Its length in bytes.
        len: usize,
        /// The source address it gives.
        source: Option<SocketAddr>,
    },
}

/// Reads a PROXY protocol header (v1 or v2) at the start of `bytes`.
/// Never panics, whatever the bytes; a decision once made (a header, an
/// error) is the same for every longer input.
pub fn parse(bytes: &[u8]) -> Result<Parsed, HeaderError> {
    match bytes.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'P') => parse_v1(bytes),
        Some(_) => parse_v2(bytes),
    }
}

/// A v1 header: its line is parsed once whole (up to its `\n`, within
/// [`V1_MAX`] bytes), so that where the bytes are split never matters.
fn parse_v1(bytes: &[u8]) -> Result<Parsed, HeaderError> {
    let n = bytes.len().min(V1_SIGNATURE.len());
    if bytes[..n] != V1_SIGNATURE[..n] {
        return Err(HeaderError::Missing);
    }
    let line = match bytes.iter().take(V1_MAX).position(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None if bytes.len() < V1_MAX => return Ok(Parsed::Incomplete),
        None => &bytes[..V1_MAX],
    };
    // The protocol's `\r\n`: a bare `\n` is not an end (ppp takes one
    // after a space).
    if !line.ends_with(b"\r\n") {
        let suffix = v1::BinaryParseError::Parse(v1::ParseError::InvalidSuffix);
        return Err(HeaderError::V1(suffix));
    }
    let h = v1::Header::try_from(line).map_err(HeaderError::V1)?;
    Ok(Parsed::Header {
        len: h.header.len(),
        source: v1_source(&h.addresses),
    })
}

/// A v2 header: 16 bytes, then the length they declare (bounded).
fn parse_v2(bytes: &[u8]) -> Result<Parsed, HeaderError> {
    match v2::Header::try_from(bytes) {
        Ok(h) => Ok(Parsed::Header {
            len: h.len(),
            source: v2_source(&h),
        }),
        Err(v2::ParseError::Prefix) => Err(HeaderError::Missing),
        Err(v2::ParseError::Partial(_, length)) if length + 16 > MAX_HEADER => {
            Err(HeaderError::TooLong(length + 16))
        }
        Err(e) if e.is_incomplete() => Ok(Parsed::Incomplete),
        Err(e) => Err(HeaderError::V2(e)),
    }
}

/// Whether `bytes` start with a PROXY protocol signature (v1's `PROXY `
/// or v2's 12 bytes); `None` while they could still become one.
pub fn has_signature(bytes: &[u8]) -> Option<bool> {
    let starts = |sig: &[u8]| {
        let n = bytes.len().min(sig.len());
        (bytes[..n] == sig[..n]).then_some(n == sig.len())
    };
    match (starts(V1_SIGNATURE), starts(v2::PROTOCOL_PREFIX)) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => Some(false),
        _ => None,
    }
}

/// The source of a v1 header (none for `UNKNOWN`).
fn v1_source(addresses: &v1::Addresses) -> Option<SocketAddr> {
    match addresses {
        v1::Addresses::Tcp4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        v1::Addresses::Tcp6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        v1::Addresses::Unknown => None,
    }
}

/// The source of a v2 header: only a `PROXY` command over TCP (nginx's
/// rule; `LOCAL`, UDP, Unix and unspecified families keep the peer).
fn v2_source(h: &v2::Header<'_>) -> Option<SocketAddr> {
    if h.command != v2::Command::Proxy || h.protocol != v2::Protocol::Stream {
        return None;
    }
    match h.addresses {
        v2::Addresses::IPv4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        v2::Addresses::IPv6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        v2::Addresses::Unspecified | v2::Addresses::Unix(_) => None,
    }
}

impl ProxyProtocol {
    /// Headers from (and only from) the networks `trusted` (`(address,
    /// prefix length)`).
    pub fn new(trusted: Vec<(IpAddr, u8)>) -> Self {
        ProxyProtocol { trusted }
    }

    /// Whether `ip` is a trusted source.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let within = |&net| floodgate_policy::compile::in_network(ip, net);
        self.trusted.iter().any(within)
    }

    /// The client address of a connection from `peer`: its header's when
    /// `peer` is trusted. `None`: the connection is to be closed (the
    /// reason logged), or shutdown began. The header is due by `deadline`.
    pub(super) async fn client(
        &self,
        stream: &impl Peek,
        peer: SocketAddr,
        deadline: Instant,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<SocketAddr> {
        let trusted = self.trusts(peer.ip());
        let read = timeout_at(deadline, read(stream, peer, trusted));
        let out = tokio::select! {
            r = read => r.unwrap_or(Err(HeaderError::Timeout)),
            _ = stop.wait_for(|s| *s) => return None,
        };
        match out {
            Ok(client) => Some(client),
            // A silent peer that is not trusted: the usual header timeout,
            // closed as quietly as without the PROXY protocol.
            Err(HeaderError::Timeout) if !trusted => None,
            // A TCP health check: nothing to say.
            Err(e @ HeaderError::Closed) => {
                tracing::debug!(%peer, error = %e, "connection closed");
                None
            }
            Err(e) => {
                tracing::warn!(%peer, error = %e, "connection closed");
                None
            }
        }
    }
}

/// Reads the header of a connection from `peer` (`trusted` or not: see
/// the module's rule) and gives the client's address.
async fn read(
    stream: &impl Peek,
    peer: SocketAddr,
    trusted: bool,
) -> Result<SocketAddr, HeaderError> {
    if !trusted {
        return match peek_until(stream, has_signature).await {
            Ok(Some(true)) => Err(HeaderError::Untrusted),
            // Anything else (or nothing, or an error) goes the usual way.
            Ok(Some(false) | None) | Err(_) => Ok(peer),
        };
    }
    let decided = peek_until(stream, |b| match parse(b) {
        Ok(Parsed::Incomplete) => None,
        Ok(Parsed::Header { len, source }) => Some(Ok((len, source))),
        Err(e) => Some(Err(e)),
    });
    let (len, source) = match decided.await {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(HeaderError::Closed),
        other => other?.ok_or(HeaderError::Truncated)??,
    };
    consume(stream, len).await?;
    Ok(source.unwrap_or(peer))
}

/// Peeks at what `stream` has received, as it arrives, until `decide`
/// says something of it (`None`: the peer closed first; `UnexpectedEof`:
/// before its first byte). Waits for new bytes between two looks rather
/// than looking again at the same ones.
async fn peek_until<T>(
    stream: &impl Peek,
    mut decide: impl FnMut(&[u8]) -> Option<T>,
) -> io::Result<Option<T>> {
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        let looked = stream.try_io(Interest::READABLE, || {
            let mut buf = [0u8; MAX_HEADER];
            let n = peek(stream, &mut buf)?;
            match decide(&buf[..n]) {
                Some(t) => Ok(Some(t)),
                None if n == 0 => Err(io::ErrorKind::UnexpectedEof.into()),
                None if ready.is_read_closed() => Ok(None),
                // Nothing new to decide on: wait for more (clears the
                // readiness tokio saw).
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        });
        match looked {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return other,
        }
    }
}

/// Reads and drops the `len` bytes of the header, already received.
async fn consume(stream: &impl Peek, mut len: usize) -> io::Result<()> {
    while len > 0 {
        stream.readable().await?;
        let mut buf = [0u8; 512];
        match stream.try_read(&mut buf[..len.min(512)]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => len -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A connection whose received bytes can be looked at before they are
/// read: tokio's TCP and Unix streams.
pub trait Peek: AsFd + Send + Sync {
    /// Waits for `interest` (tokio's `ready`).
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> + Send;
    /// Runs `f`, clearing the readiness when it would block (tokio's `try_io`).
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    /// Waits until readable (tokio's `readable`).
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Reads what has arrived (tokio's `try_read`).
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;
}

macro_rules! peek_with_tokio {
    ($stream:ty) => {
        impl Peek for $stream {
            fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<Ready>> + Send {
                <$stream>::ready(self, interest)
            }
            fn try_io<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                <$stream>::try_io(self, interest, f)
            }
            fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
                <$stream>::readable(self)
            }
            fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
                <$stream>::try_read(self, buf)
            }
        }
    };
}

peek_with_tokio!(TcpStream);
peek_with_tokio!(UnixStream);

/// `recv(MSG_PEEK)`: what `stream` has received, left in the socket.
fn peek(stream: &impl Peek, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `buf` is valid for writes of its length, and the descriptor
    // is the stream's, open while it is borrowed.
    let n = unsafe {
        libc::recv(
            stream.as_fd().as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 header: `command` and `family` bytes, then `body`.
    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut h = v2::PROTOCOL_PREFIX.to_vec();
        h.extend([command, family]);
        h.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
        h.extend(body);
        h
    }

    fn header(bytes: &[u8]) -> (usize, Option<SocketAddr>) {
        match parse(bytes) {
            Ok(Parsed::Header { len, source }) => (len, source),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v1_headers_give_their_source() {
        let h = b"PROXY TCP4 192.0.2.7 198.51.100.1 4711 443\r\nGET /";
        assert_eq!(
            header(h),
            (h.len() - 5, Some("192.0.2.7:4711".parse().unwrap()))
        );
        let h = b"PROXY TCP6 2001:db8::7 2001:db8::1 4711 443\r\n";
        assert_eq!(header(h).1, Some("[2001:db8::7]:4711".parse().unwrap()));
        assert_eq!(header(b"PROXY UNKNOWN\r\n"), (15, None));
    }

    #[test]
    fn v2_headers_give_their_source_for_tcp_only() {
        let v4 = [192, 0, 2, 7, 198, 51, 100, 1, 0x12, 0x67, 1, 187];
        let h = v2(0x21, 0x11, &v4);
        assert_eq!(header(&h), (28, Some("192.0.2.7:4711".parse().unwrap())));
        let mut v6 = [0u8; 36];
        v6[..2].copy_from_slice(&[0x20, 0x01]);
        v6[15] = 7;
        v6[32..34].copy_from_slice(&4711u16.to_be_bytes());
        let h = v2(0x21, 0x21, &v6);
        assert_eq!(header(&h).1, Some("[2001::7]:4711".parse().unwrap()));
        // LOCAL, UDP, unspecified: the peer is kept.
        assert_eq!(header(&v2(0x20, 0x11, &v4)).1, None);
        assert_eq!(header(&v2(0x21, 0x12, &v4)).1, None);
        assert_eq!(header(&v2(0x21, 0x00, &[])), (16, None));
        // TLVs after the addresses are part of the header.
        let mut tlv = v4.to_vec();
        tlv.extend([0xEA, 0, 3, 1, 2, 3]);
        assert_eq!(header(&v2(0x21, 0x11, &tlv)).0, 34);
    }

    #[test]
    fn prefixes_are_incomplete_and_garbage_is_refused() {
        let h = v2(0x21, 0x11, &[192, 0, 2, 7, 198, 51, 100, 1, 0, 1, 0, 2]);
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]).unwrap(), Parsed::Incomplete, "{n}");
        }
        let t = b"PROXY TCP4 192.0.2.7 198.51.100.1 4711 443\r\n";
        for n in 0..t.len() {
            assert_eq!(parse(&t[..n]).unwrap(), Parsed::Incomplete, "{n}");
        }
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\n"),
            Err(HeaderError::Missing)
        ));
        assert!(matches!(parse(b"\x16\x03\x01"), Err(HeaderError::Missing)));
        assert!(matches!(
            parse(b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n"),
            Err(HeaderError::V1(_))
        ));
        assert!(matches!(
            parse(&[b'P'; 200]),
            Err(HeaderError::V1(_) | HeaderError::Missing)
        ));
        // No line end within 107 bytes.
        let mut long = b"PROXY TCP4 192.0.2.7 198.51.100.1 4711 443".to_vec();
        long.resize(106, b' ');
        assert_eq!(parse(&long).unwrap(), Parsed::Incomplete);
        long.push(b' ');
        assert!(matches!(parse(&long), Err(HeaderError::V1(_))));
        // A line end without `\r`, a bare `\r`: malformed, not waited on
        // (ppp alone accepts ` \n`: found by the fuzzer).
        assert!(matches!(parse(b"PROXY UNKNOWN\n"), Err(HeaderError::V1(_))));
        for bare in [
            &b"PROXY UNKNOWN 4KNOY TCP6 200NKNO711 \n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \n",
        ] {
            assert!(matches!(parse(bare), Err(HeaderError::V1(_))), "{bare:?}");
        }
        assert!(matches!(
            parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX\n"),
            Err(HeaderError::V1(_))
        ));
        // A v2 header declaring more than the bound is refused at once.
        let mut big = v2(0x21, 0x11, &[]);
        big[14..16].copy_from_slice(&5000u16.to_be_bytes());
        assert!(matches!(parse(&big), Err(HeaderError::TooLong(5016))));
        // Bad version, family, or a length shorter than the addresses.
        assert!(matches!(
            parse(&v2(0x11, 0x11, &[0; 12])),
            Err(HeaderError::V2(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x41, &[0; 12])),
            Err(HeaderError::V2(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x21, &[0; 12])),
            Err(HeaderError::V2(_))
        ));
    }

    #[test]
    fn signatures() {
        assert_eq!(has_signature(b""), None);
        assert_eq!(has_signature(b"PROX"), None);
        assert_eq!(has_signature(b"PROXY "), Some(true));
        assert_eq!(has_signature(b"POST /"), Some(false));
        assert_eq!(has_signature(b"\r\n\r\n"), None);
        assert_eq!(has_signature(b"\r\n\r\nGET"), Some(false));
        assert_eq!(has_signature(v2::PROTOCOL_PREFIX), Some(true));
        assert_eq!(has_signature(b"\x16\x03\x01"), Some(false));
    }

    #[test]
    fn trusted_networks() {
        let p = ProxyProtocol::new(vec![
            ("10.0.0.0".parse().unwrap(), 8),
            ("::1".parse().unwrap(), 128),
        ]);
        assert!(p.trusts("10.1.2.3".parse().unwrap()));
        assert!(p.trusts("::ffff:10.1.2.3".parse().unwrap()));
        assert!(p.trusts("::1".parse().unwrap()));
        assert!(!p.trusts("11.0.0.1".parse().unwrap()));
    }
}
