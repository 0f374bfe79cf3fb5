//! One stream's state, from its request's head to its answer's last
//! frame, and the writing of answers within the peer's flow-control
//! windows.

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;

use super::calls::Answer;
use super::conn::{IDLE_FRAMES, Recent};
use super::frame::{self, flag, kind};
use super::request::{RequestHead, Target};
use super::respond;
use crate::call::Call;

/// Where a stream is.
pub(super) enum Phase {
    /// Its request's body is arriving.
    Receiving,
    /// Its answer is being decided (by a store that needs IO, or tonic).
    Waiting,
    /// Its answer's message is going out as the windows allow, then what
    /// ends it.
    Sending(Bytes, Ending),
    /// Nothing more (removed at the end of the batch).
    Done,
}

/// What ends an answer after its message.
pub(super) enum Ending {
    /// `grpc-status: 0`.
    Ok,
    /// These trailers.
    Trailers(HeaderMap),
    /// The last `DATA` frame carries `END_STREAM`.
    EndOfData,
}

/// One stream.
pub(super) struct Stream {
    pub(super) id: u32,
    pub(super) phase: Phase,
    pub(super) target: Target,
    pub(super) fields: Option<HeaderMap>,
    /// The request's body when it spans frames.
    pub(super) body: BytesMut,
    /// The client has ended its side.
    pub(super) ended: bool,
    /// The server answered before the client ended its side, and reset
    /// the stream: what the client still sends on it is ignored.
    pub(super) stopped: bool,
    /// When its call times out, or its answer has waited too long for
    /// room.
    pub(super) deadline: Option<Instant>,
    pub(super) timeout: Duration,
    pub(super) recv_window: i64,
    pub(super) send_window: i64,
    pub(super) started: Instant,
    /// Its place among the calls in flight, held until its answer has
    /// gone out whole (the stream is then dropped).
    pub(super) call: Option<Call>,
}

impl Stream {
    pub(super) fn new(id: u32, head: RequestHead, windows: (i64, i64), timeout: Duration) -> Self {
        let started = Instant::now();
        Stream {
            id,
            phase: Phase::Receiving,
            target: head.target,
            fields: head.fields,
            body: BytesMut::new(),
            ended: false,
            stopped: false,
            deadline: Some(started + timeout),
            timeout,
            recv_window: windows.0,
            send_window: windows.1,
            started,
            call: None,
        }
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }
}

/// The peer's flow control and frame size, as the writer needs them.
pub(super) struct Out<'a> {
    pub(super) buf: &'a mut BytesMut,
    pub(super) window: &'a mut i64,
    pub(super) max_frame: usize,
    pub(super) send_timeout: Duration,
    pub(super) reset: &'a mut Recent,
    /// The connection's budget of idle frames, refilled by each answer.
    pub(super) calm: &'a mut u32,
}

impl Out<'_> {
    /// Starts `answer` on `stream`: its head goes out at once, its
    /// message as the windows allow.
    pub(super) fn answer(&mut self, s: &mut Stream, answer: Answer) {
        s.deadline = None;
        *self.calm = (*self.calm + 1).min(IDLE_FRAMES);
        match answer {
            Answer::Message(m) => {
                respond::grpc_head(self.buf, s.id, false);
                s.phase = Phase::Sending(m, Ending::Ok);
            }
            Answer::Error(code, message) => {
                respond::grpc_error(self.buf, s.id, code, &message);
                s.phase = Phase::Done;
            }
            Answer::Plain(status, text) => {
                let allow: &[(&[u8], &[u8])] = if status == 405 {
                    &[(b"allow", b"POST")]
                } else {
                    &[]
                };
                respond::plain_head(self.buf, s.id, status, allow);
                s.phase = Phase::Sending(Bytes::from(text), Ending::EndOfData);
            }
            Answer::Tonic(answer) => {
                let (head, body, trailers) = *answer;
                let end = body.is_empty() && trailers.is_none();
                respond::head_of(self.buf, s.id, &head, end);
                s.phase = match (end, trailers) {
                    (true, _) => Phase::Done,
                    (false, Some(t)) => Phase::Sending(body, Ending::Trailers(t)),
                    (false, None) => Phase::Sending(body, Ending::EndOfData),
                };
            }
        }
        self.stop_reading(s);
        self.pump(s);
    }

    /// A stream answered before its client finished sending is told to
    /// stop (RFC 9113 §8.1).
    fn stop_reading(&mut self, s: &mut Stream) {
        if !s.ended && !s.stopped {
            s.stopped = true;
            self.reset(s.id, frame::Reason::NoError);
        }
    }

    /// Resets stream `id`.
    pub(super) fn reset(&mut self, id: u32, reason: frame::Reason) {
        frame::put_reset(self.buf, id, reason);
        self.reset.add(id);
    }

    /// Sends what the windows allow of `s`'s message, then its ending.
    pub(super) fn pump(&mut self, s: &mut Stream) {
        let Phase::Sending(message, ending) = &mut s.phase else {
            return;
        };
        let mut ended = false;
        while !message.is_empty() {
            let room = (*self.window).min(s.send_window).max(0) as usize;
            let n = message.len().min(room).min(self.max_frame);
            if n == 0 {
                if s.deadline.is_none() && !self.send_timeout.is_zero() {
                    s.deadline = Some(Instant::now() + self.send_timeout);
                }
                return;
            }
            let last = n == message.len();
            let end = last && matches!(ending, Ending::EndOfData);
            frame::put_head(
                self.buf,
                n,
                kind::DATA,
                if end { flag::END_STREAM } else { 0 },
                s.id,
            );
            self.buf.put_slice(&message[..n]);
            message.advance(n);
            ended = end;
            *self.window -= n as i64;
            s.send_window -= n as i64;
            s.deadline = None;
        }
        match ending {
            Ending::Ok => respond::grpc_ok_trailers(self.buf, s.id),
            Ending::Trailers(t) => respond::trailers_of(self.buf, s.id, t),
            Ending::EndOfData if !ended => {
                frame::put_head(self.buf, 0, kind::DATA, flag::END_STREAM, s.id);
            }
            Ending::EndOfData => {}
        }
        s.phase = Phase::Done;
    }
}
