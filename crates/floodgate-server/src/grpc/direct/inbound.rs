//! The frames a client sends, each checked against RFC 9113 §6 as it
//! arrives: a connection error ends the connection with a `GOAWAY`, a
//! stream error resets the stream.

use bytes::{Bytes, BytesMut};

use super::calls::Answer;
use super::conn::{Block, Conn, Fault, STREAM_WINDOW, fault, out};
use super::frame::{self, Head, MAX_WINDOW, Reason, flag, kind, setting};
use super::request::{RequestHead, Target};
use super::stream::{Out, Phase, Stream};

/// Buffers kept for bodies that span frames, and the largest kept.
const SPARE_BODIES: usize = 16;
const SPARE_BODY_BYTES: usize = 64 * 1024;

impl Conn {
    /// Handles one frame.
    pub(super) fn frame(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if let Some(block) = &self.block
            && (head.kind != kind::CONTINUATION || head.stream != block.stream)
        {
            return Err(fault(Reason::ProtocolError, "a header block interrupted"));
        }
        match head.kind {
            kind::DATA => self.data(head, payload),
            kind::HEADERS => self.headers(head, payload),
            kind::CONTINUATION => self.continuation(head, payload),
            kind::PRIORITY => self.priority(head, payload),
            kind::RST_STREAM => self.reset(head, payload),
            kind::SETTINGS => self.settings(head, payload),
            kind::PING => self.ping(head, payload),
            kind::GOAWAY => self.goaway(head, payload),
            kind::WINDOW_UPDATE => self.window_update(head, payload),
            kind::PUSH_PROMISE => Err(fault(Reason::ProtocolError, "PUSH_PROMISE from a client")),
            _ => Ok(()),
        }
    }

    fn index(&self, id: u32) -> Option<usize> {
        self.table.iter().position(|s| s.id == id && !s.is_done())
    }

    /// Checks a stream's identifier is one the client may use: odd, not 0.
    fn client_stream(id: u32) -> Result<(), Fault> {
        if id == 0 || id.is_multiple_of(2) {
            return Err(fault(
                Reason::ProtocolError,
                "a stream identifier a client may not use",
            ));
        }
        Ok(())
    }

    fn reset_stream(&mut self, i: usize, reason: Reason) {
        let id = self.table[i].id;
        out!(self).reset(id, reason);
        let s = &mut self.table[i];
        if matches!(s.phase, Phase::Waiting) {
            self.orphans += 1;
        }
        s.phase = Phase::Done;
    }

    fn data(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        Self::client_stream(head.stream)?;
        self.recv_window -= payload.len() as i64;
        if self.recv_window < 0 {
            return Err(fault(
                Reason::FlowControlError,
                "DATA beyond the connection's window",
            ));
        }
        let (data, _) = frame::unpadded(head, payload).ok_or(fault(
            Reason::ProtocolError,
            "padding longer than the frame",
        ))?;
        let end = head.has(flag::END_STREAM);
        if data.is_empty() && !end {
            self.idle_frame()?;
        }
        let Some(i) = self.index(head.stream) else {
            if head.stream > self.last {
                return Err(fault(Reason::ProtocolError, "DATA on a stream not opened"));
            }
            // A stream already answered (and reset) or refused.
            return Ok(());
        };
        let s = &mut self.table[i];
        if s.stopped {
            return Ok(());
        }
        s.recv_window -= payload.len() as i64;
        if s.recv_window < 0 {
            self.reset_stream(i, Reason::FlowControlError);
            return Ok(());
        }
        if s.ended {
            self.reset_stream(i, Reason::StreamClosed);
            return Ok(());
        }
        self.body(i, data, end);
        Ok(())
    }

    /// A piece of stream `i`'s body; at its end, the call.
    fn body(&mut self, i: usize, data: &[u8], end: bool) {
        let limit = self.calls.svc.body_limit + 5;
        let s = &mut self.table[i];
        if !matches!(s.phase, Phase::Receiving) {
            s.ended |= end;
            return;
        }
        if s.body.len() + data.len() > limit {
            let answer = self.calls.too_large(s.started);
            out!(self).answer(&mut self.table[i], answer);
            return;
        }
        if !end {
            if s.body.capacity() == 0 {
                s.body = self.spare.pop().unwrap_or_default();
            }
            s.body.extend_from_slice(data);
            if s.recv_window < STREAM_WINDOW / 2 {
                frame::put_window_update(
                    &mut self.out,
                    s.id,
                    (STREAM_WINDOW - s.recv_window) as u32,
                );
                s.recv_window = STREAM_WINDOW;
            }
            return;
        }
        s.ended = true;
        if s.body.is_empty() {
            self.call(i, data);
        } else {
            s.body.extend_from_slice(data);
            let mut body = std::mem::take(&mut s.body);
            self.call(i, &body);
            self.give_back(&mut body);
        }
    }

    /// Keeps a body's buffer for the next body that spans frames (a few,
    /// of a bounded size).
    fn give_back(&mut self, body: &mut BytesMut) {
        if self.spare.len() < SPARE_BODIES && body.capacity() <= SPARE_BODY_BYTES {
            body.clear();
            self.spare.push(std::mem::take(body));
        }
    }

    /// Stream `i`'s call, its body whole.
    fn call(&mut self, i: usize, body: &[u8]) {
        let s = &mut self.table[i];
        let id = s.id;
        let timeout = s
            .deadline
            .map_or(s.timeout, |d| d.saturating_duration_since(s.started));
        let answer = match &s.target {
            Target::Rls => self
                .calls
                .rls(id, body, s.fields.as_ref(), timeout, s.started),
            Target::Other(path) => {
                let body = Bytes::copy_from_slice(body);
                Err(self.calls.tonic(id, path, s.fields.take(), body, timeout))
            }
            Target::None | Target::Streaming => return,
        };
        match answer {
            Ok(answer) => out!(self).answer(&mut self.table[i], answer),
            Err(later) => {
                self.table[i].phase = Phase::Waiting;
                self.table[i].deadline = None;
                self.later.push(later);
            }
        }
    }

    fn headers(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        Self::client_stream(head.stream)?;
        let (block, depends_on) = frame::unpadded(head, payload).ok_or(fault(
            Reason::ProtocolError,
            "padding longer than the frame",
        ))?;
        if depends_on == Some(head.stream) {
            return Err(fault(
                Reason::ProtocolError,
                "a stream that depends on itself",
            ));
        }
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            return self.header_block(head.stream, end_stream, block);
        }
        let mut bytes = BytesMut::with_capacity(block.len() * 2);
        bytes.extend_from_slice(block);
        self.block = Some(Block {
            stream: head.stream,
            end_stream,
            bytes,
        });
        self.check_block()
    }

    fn continuation(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        let Some(block) = &mut self.block else {
            return Err(fault(
                Reason::ProtocolError,
                "CONTINUATION without a header block",
            ));
        };
        block.bytes.extend_from_slice(payload);
        if payload.is_empty() {
            self.idle_frame()?;
        }
        self.check_block()?;
        if head.has(flag::END_HEADERS) {
            let block = self.block.take().expect("a block is open");
            return self.header_block(block.stream, block.end_stream, &block.bytes);
        }
        Ok(())
    }

    /// A header block arriving in pieces may not grow past what a head
    /// within the limit can take.
    fn check_block(&self) -> Result<(), Fault> {
        let len = self.block.as_ref().map_or(0, |b| b.bytes.len());
        if len > self.max_header_bytes.max(frame::MAX_FRAME) * 2 {
            return Err(fault(
                Reason::EnhanceYourCalm,
                "a header block far over the limit",
            ));
        }
        Ok(())
    }

    /// A whole header block: a new stream's request, or its trailers.
    fn header_block(&mut self, id: u32, end_stream: bool, block: &[u8]) -> Result<(), Fault> {
        let mut head = RequestHead::default();
        self.hpack
            .decode(block, |name, value| {
                head.field(name, value);
                Ok(())
            })
            .map_err(|_| {
                fault(
                    Reason::CompressionError,
                    "a header block HPACK cannot decode",
                )
            })?;
        if id <= self.last {
            return self.trailers(id, end_stream);
        }
        self.last = id;
        self.open_stream(id, end_stream, head);
        Ok(())
    }

    /// A request's trailers: they end its body.
    fn trailers(&mut self, id: u32, end_stream: bool) -> Result<(), Fault> {
        let Some(i) = self.index(id) else {
            if self.reset.contains(id) {
                return Ok(());
            }
            return Err(fault(
                Reason::ProtocolError,
                "HEADERS on a stream closed or never opened",
            ));
        };
        if self.table[i].stopped {
            return Ok(());
        }
        if !end_stream || self.table[i].ended {
            self.reset_stream(i, Reason::ProtocolError);
            return Ok(());
        }
        self.body(i, &[], true);
        Ok(())
    }

    /// A new stream: refused, answered at once, or its call begun.
    fn open_stream(&mut self, id: u32, end_stream: bool, head: RequestHead) {
        if self.going_away || self.full() {
            return out!(self).reset(id, Reason::RefusedStream);
        }
        if head.malformed.is_some() || !head.complete() {
            return out!(self).reset(id, Reason::ProtocolError);
        }
        let svc = &self.calls.svc;
        let timeout = head
            .timeout
            .map_or(svc.request_timeout, |t| t.min(svc.request_timeout));
        let early = self.early_answer(&head);
        let windows = (STREAM_WINDOW, self.peer_window);
        let mut s = Stream::new(id, head, windows, timeout);
        s.ended = end_stream;
        s.call = self.calls.svc.calls.begin();
        let early = match s.call {
            None => Some(self.calls.shed()),
            Some(_) => early,
        };
        self.table.push(s);
        let i = self.table.len() - 1;
        if let Some(answer) = early {
            out!(self).answer(&mut self.table[i], answer);
        } else if end_stream {
            self.call(i, &[]);
        }
    }

    /// The answer of a call refused before its body is read.
    fn early_answer(&self, head: &RequestHead) -> Option<Answer> {
        if head.size > self.max_header_bytes {
            return Some(Answer::Plain(
                431,
                "the request's header list is too large\n".into(),
            ));
        }
        match head.target {
            Target::Streaming => Some(Answer::Error(
                tonic::Code::Unimplemented as i32,
                "streaming methods are served with `server.grpc_http2: hyper`".into(),
            )),
            Target::Rls => self.calls.rls_refusal(head),
            _ => None,
        }
    }

    fn priority(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        Self::client_stream(head.stream)?;
        if payload.len() != 5 {
            return Err(fault(Reason::FrameSizeError, "PRIORITY of the wrong size"));
        }
        Ok(())
    }

    fn reset(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if payload.len() != 4 {
            return Err(fault(
                Reason::FrameSizeError,
                "RST_STREAM of the wrong size",
            ));
        }
        Self::client_stream(head.stream)?;
        if head.stream > self.last {
            return Err(fault(
                Reason::ProtocolError,
                "RST_STREAM on a stream not opened",
            ));
        }
        if let Some(i) = self.index(head.stream) {
            if matches!(self.table[i].phase, Phase::Waiting) {
                self.orphans += 1;
            }
            self.table[i].phase = Phase::Done;
            self.idle_frame()?;
        }
        Ok(())
    }

    fn settings(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if head.stream != 0 {
            return Err(fault(Reason::ProtocolError, "SETTINGS on a stream"));
        }
        if head.has(flag::ACK) {
            return match payload.is_empty() {
                true => Ok(()),
                false => Err(fault(
                    Reason::FrameSizeError,
                    "a SETTINGS acknowledgement with a payload",
                )),
            };
        }
        if !payload.len().is_multiple_of(6) {
            return Err(fault(Reason::FrameSizeError, "SETTINGS of the wrong size"));
        }
        for pair in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([pair[0], pair[1]]);
            let value = u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]);
            self.setting(id, value)?;
        }
        frame::put_settings_ack(&mut self.out);
        self.pump_all();
        Ok(())
    }

    fn setting(&mut self, id: u16, value: u32) -> Result<(), Fault> {
        match id {
            setting::ENABLE_PUSH if value > 1 => Err(fault(
                Reason::ProtocolError,
                "SETTINGS_ENABLE_PUSH neither 0 nor 1",
            )),
            setting::INITIAL_WINDOW_SIZE => {
                let value = i64::from(value);
                if value > MAX_WINDOW {
                    return Err(fault(
                        Reason::FlowControlError,
                        "SETTINGS_INITIAL_WINDOW_SIZE too large",
                    ));
                }
                let delta = value - self.peer_window;
                self.peer_window = value;
                for s in &mut self.table {
                    s.send_window += delta;
                    if s.send_window > MAX_WINDOW {
                        return Err(fault(
                            Reason::FlowControlError,
                            "a stream's window past 2^31-1",
                        ));
                    }
                }
                Ok(())
            }
            setting::MAX_FRAME_SIZE => {
                if !(frame::MAX_FRAME as u32..=(1 << 24) - 1).contains(&value) {
                    return Err(fault(
                        Reason::ProtocolError,
                        "SETTINGS_MAX_FRAME_SIZE out of range",
                    ));
                }
                self.peer_max_frame = value as usize;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn ping(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if head.stream != 0 {
            return Err(fault(Reason::ProtocolError, "PING on a stream"));
        }
        if payload.len() != 8 {
            return Err(fault(Reason::FrameSizeError, "PING of the wrong size"));
        }
        if !head.has(flag::ACK) {
            frame::put_ping_ack(&mut self.out, payload);
        }
        Ok(())
    }

    fn goaway(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if head.stream != 0 {
            return Err(fault(Reason::ProtocolError, "GOAWAY on a stream"));
        }
        if payload.len() < 8 {
            return Err(fault(Reason::FrameSizeError, "GOAWAY too short"));
        }
        self.going_away = true;
        Ok(())
    }

    fn window_update(&mut self, head: &Head, payload: &[u8]) -> Result<(), Fault> {
        if payload.len() != 4 {
            return Err(fault(
                Reason::FrameSizeError,
                "WINDOW_UPDATE of the wrong size",
            ));
        }
        let increment = i64::from(
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff,
        );
        if head.stream == 0 {
            if increment == 0 {
                return Err(fault(Reason::ProtocolError, "a WINDOW_UPDATE of zero"));
            }
            self.send_window += increment;
            if self.send_window > MAX_WINDOW {
                return Err(fault(
                    Reason::FlowControlError,
                    "the connection's window past 2^31-1",
                ));
            }
        } else {
            self.stream_window_update(head.stream, increment)?;
        }
        self.pump_all();
        Ok(())
    }

    fn stream_window_update(&mut self, id: u32, increment: i64) -> Result<(), Fault> {
        Self::client_stream(id)?;
        if id > self.last {
            return Err(fault(
                Reason::ProtocolError,
                "WINDOW_UPDATE on a stream not opened",
            ));
        }
        let Some(i) = self.index(id) else {
            return Ok(());
        };
        if increment == 0 {
            self.reset_stream(i, Reason::ProtocolError);
            return Ok(());
        }
        let s = &mut self.table[i];
        s.send_window += increment;
        if s.send_window > MAX_WINDOW {
            self.reset_stream(i, Reason::FlowControlError);
        }
        Ok(())
    }
}
