//! A request body written by the gateway's own client as the client sends
//! it: `Content-Length` bytes as they are, else the chunked coding (its
//! trailers included). The next frame is taken from the client only once
//! the previous one is written (the upstream's pace holds the client
//! back); the request's own task writes it while it waits for the
//! response head, and the response body goes on with it if the head came
//! first.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE,
    HOST, MAX_FORWARDS, SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING,
};
use http::{HeaderMap, HeaderName};
use http_body::Body;
use tokio::io::AsyncWrite;

use super::Conn;
use crate::connection::ExchangeError;
use crate::forward::named_fields;
use crate::upload::UploadBody;

/// A request body on its way to the upstream.
pub struct Upload {
    body: UploadBody,
    /// Written with the chunked coding.
    pub(crate) chunked: bool,
    /// A frame was taken from the body: the request cannot be sent again.
    started: bool,
    /// The body has ended: what is left is in `queue`.
    ended: bool,
    /// Everything is written and flushed.
    complete: bool,
    /// What to write before the next frame is taken: a chunk's size line,
    /// its data, its end.
    queue: [Bytes; 3],
    /// The trailer fields announced (chunked only).
    announced: Vec<HeaderName>,
}

/// Fields never sent as trailers (framing, routing, authentication).
const NOT_TRAILERS: [HeaderName; 12] = [
    AUTHORIZATION,
    CACHE_CONTROL,
    CONTENT_ENCODING,
    CONTENT_LENGTH,
    CONTENT_RANGE,
    CONTENT_TYPE,
    HOST,
    MAX_FORWARDS,
    SET_COOKIE,
    TRAILER,
    TRANSFER_ENCODING,
    TE,
];

impl Upload {
    /// The body (not empty) of a request with `headers`: chunked unless it
    /// has a `Content-Length`.
    pub fn new(body: UploadBody, headers: &HeaderMap) -> Self {
        let chunked = !headers.contains_key(CONTENT_LENGTH);
        let announced = if chunked {
            named_fields(headers, &TRAILER)
                .filter(|name| !NOT_TRAILERS.contains(name))
                .collect()
        } else {
            Vec::new()
        };
        Upload {
            chunked,
            announced,
            body,
            started: false,
            ended: false,
            complete: false,
            queue: Default::default(),
        }
    }

    /// Whether the whole body is written.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The body, if nothing of it was taken (the request may then be sent
    /// again on another connection).
    pub fn into_untouched(self) -> Option<UploadBody> {
        (!self.started).then_some(self.body)
    }
}

impl Conn {
    /// Writes what `upload` has, until the body or the connection makes it
    /// wait; ready once the whole body is written and flushed.
    pub(crate) fn poll_upload(
        &mut self,
        upload: &mut Upload,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ExchangeError>> {
        if upload.complete {
            return Poll::Ready(Ok(()));
        }
        let mut stream = Pin::new(&mut self.stream);
        loop {
            while let Some(bytes) = upload.queue.iter_mut().find(|b| !b.is_empty()) {
                let n =
                    ready!(stream.as_mut().poll_write(cx, bytes)).map_err(ExchangeError::Write)?;
                if n == 0 {
                    let zero = std::io::ErrorKind::WriteZero.into();
                    return Poll::Ready(Err(ExchangeError::Write(zero)));
                }
                bytes.advance(n);
            }
            ready!(stream.as_mut().poll_flush(cx)).map_err(ExchangeError::Write)?;
            if upload.ended {
                upload.complete = true;
                return Poll::Ready(Ok(()));
            }
            let frame = match ready!(Pin::new(&mut upload.body).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Err(ExchangeError::Upload(e))),
                None => {
                    upload.ended = true;
                    if upload.chunked {
                        upload.queue[0] = Bytes::from_static(b"0\r\n\r\n");
                    }
                    continue;
                }
            };
            upload.started = true;
            match frame.into_data() {
                // An empty chunk would end the body.
                Ok(data) if upload.chunked && !data.is_empty() => {
                    let size = Bytes::from(format!("{:x}\r\n", data.len()));
                    upload.queue = [size, data, Bytes::from_static(b"\r\n")];
                }
                Ok(data) => upload.queue[1] = data,
                // Trailers end the body; only the chunked coding carries
                // them.
                Err(frame) => {
                    upload.ended = true;
                    if upload.chunked {
                        let mut last = b"0\r\n".to_vec();
                        let trailers = frame.trailers_ref().into_iter().flatten();
                        let announced =
                            |(name, _): &(&HeaderName, _)| upload.announced.contains(name);
                        super::head::encode_fields(&mut last, trailers.filter(announced));
                        last.extend_from_slice(b"\r\n");
                        upload.queue[0] = last.into();
                    }
                }
            }
        }
    }
}
