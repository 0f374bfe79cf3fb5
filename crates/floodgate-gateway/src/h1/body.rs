//! A response body read by the gateway's own client: decoded from its
//! connection as the client side asks for it (data frames share the read
//! buffer's bytes), the rest of the request body written meanwhile if the
//! head came first, the connection returned to its pool at the body's end
//! when it can carry another exchange, closed otherwise (a body dropped
//! early, a close-delimited body, stray bytes after the body, a request
//! body not written whole).

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::AsyncReadExt;

use super::Conn;
use super::conn::READ_CHUNK;
use super::framing::{Framing, Step};
use super::upload::Upload;
use crate::connection::ExchangeError;
use crate::pool::HostPool;

struct Reading {
    conn: Conn,
    framing: Framing,
    /// What is left of the request body (boxed: rare).
    upload: Option<Box<Upload>>,
    /// Where the connection goes back to (none: it closes at the end).
    pool: Option<Weak<HostPool>>,
}

/// The body of a response from the gateway's own client.
pub struct ResponseBody {
    reading: Option<Reading>,
}

impl ResponseBody {
    /// The body framed by `framing` on `conn`, whose head was just read
    /// (with what is left of the request body, `upload`); `conn` goes back
    /// to `pool` at the end, if any.
    pub fn new(
        conn: Conn,
        framing: Framing,
        upload: Option<Box<Upload>>,
        pool: Option<Weak<HostPool>>,
    ) -> Self {
        let mut body = ResponseBody {
            reading: Some(Reading {
                conn,
                framing,
                upload,
                pool,
            }),
        };
        if framing == Framing::Length(0) {
            // Nothing to read: the connection is free already.
            body.end();
        }
        body
    }

    /// The body has ended: the connection goes back to the pool if it
    /// can carry another exchange.
    fn end(&mut self) {
        if let Some(r) = self.reading.take() {
            let reusable =
                r.framing != Framing::Close && r.conn.buf.is_empty() && r.upload.is_none();
            if reusable && let Some(pool) = r.pool.and_then(|p| p.upgrade()) {
                pool.checkin(r.conn);
            }
        }
    }

    /// Closes the connection now (an exchange given up on).
    pub fn close(&mut self) {
        self.reading = None;
    }

    /// The next frame of what is buffered (the body's end included);
    /// `None` when more must be read first.
    #[inline]
    fn next_frame(&mut self) -> Option<Polled> {
        let r = self.reading.as_mut()?;
        match r.framing.step(&mut r.conn.buf) {
            Ok(Step::Data(d)) => {
                // The last bytes of a length: the connection is free now
                // (the server may not poll again).
                if r.framing == Framing::Length(0) {
                    self.end();
                }
                Some(Some(Ok(Frame::data(d))))
            }
            Ok(Step::Trailers(t)) => {
                self.end();
                Some(Some(Ok(Frame::trailers(t))))
            }
            Ok(Step::End) => {
                self.end();
                Some(None)
            }
            Ok(Step::More) => None,
            Err(e) => {
                self.reading = None;
                Some(Some(Err(e.into())))
            }
        }
    }

    /// Reads more of the body into the spent buffer; `None` once some was
    /// read, else what the body then is (pending, ended, failed).
    #[inline]
    fn read_more(&mut self, cx: &mut Context<'_>) -> Option<Poll<Polled>> {
        let r = self.reading.as_mut()?;
        let buf = &mut r.conn.buf;
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK * 2);
        }
        let read = std::pin::pin!(r.conn.stream.read_buf(&mut r.conn.buf)).poll(cx);
        match read {
            Poll::Pending => Some(Poll::Pending),
            Poll::Ready(Ok(0)) => {
                let complete = r.framing == Framing::Close;
                self.reading = None;
                Some(Poll::Ready(if complete {
                    None
                } else {
                    Some(Err(ExchangeError::Incomplete))
                }))
            }
            Poll::Ready(Ok(_)) => None,
            Poll::Ready(Err(e)) => {
                self.reading = None;
                Some(Poll::Ready(Some(Err(ExchangeError::Read(e)))))
            }
        }
    }
}

/// What polling the body gives when ready: a frame, an error, or its end.
type Polled = Option<Result<Frame<Bytes>, ExchangeError>>;

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = ExchangeError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        loop {
            let Some(r) = self.reading.as_mut() else {
                return Poll::Ready(None);
            };
            if let Some(upload) = r.upload.as_deref_mut() {
                match r.conn.poll_upload(upload, cx) {
                    Poll::Ready(Ok(())) => r.upload = None,
                    Poll::Ready(Err(e)) => {
                        self.reading = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Pending => {}
                }
            }
            if let Some(frame) = self.next_frame() {
                return Poll::Ready(frame);
            }
            if let Some(done) = self.read_more(cx) {
                return done;
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading.as_ref() {
            None => SizeHint::with_exact(0),
            Some(Reading {
                framing: Framing::Length(n),
                ..
            }) => SizeHint::with_exact(*n),
            Some(_) => SizeHint::default(),
        }
    }
}
