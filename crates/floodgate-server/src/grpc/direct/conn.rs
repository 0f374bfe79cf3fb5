//! One HTTP/2 connection: each wake-up reads what has arrived, handles
//! every whole frame in it, and writes every answer made in one write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use floodgate_runtime::listener::{ConnectionError, ConnectionLimits, Io, Open, Streams};

use super::calls::{Answer, Calls, Later};
use super::frame::{self, Reason, setting};
use super::hpack::Decoder;
use super::stream::{Out, Stream};

/// The window each stream opens to the client.
pub(super) const STREAM_WINDOW: i64 = 1 << 20;

/// The window the connection opens to the client.
const CONNECTION_WINDOW: i64 = 4 << 20;

/// The decoder's dynamic table, in bytes (HTTP/2's default, not
/// announced).
const TABLE_SIZE: usize = 4096;

/// Room kept free in the read buffer before each read.
const READ_ROOM: usize = 16 * 1024 + frame::HEAD;

/// Frames that do nothing useful (empty `DATA`, resets of open streams)
/// a connection may send beyond one per call answered, before it is told
/// to calm down.
pub(super) const IDLE_FRAMES: u32 = 1000;

/// The writer of answers, borrowing the connection's fields it needs.
macro_rules! out {
    ($conn:expr) => {
        Out {
            buf: &mut $conn.out,
            window: &mut $conn.send_window,
            max_frame: $conn.peer_max_frame,
            send_timeout: $conn.send_timeout,
            reset: &mut $conn.reset,
            calm: &mut $conn.calm,
        }
    };
}
pub(super) use out;

/// A connection-level error: what the `GOAWAY` says.
#[derive(Debug, thiserror::Error)]
#[error("{reason:?}: {why}")]
pub(super) struct Fault {
    pub(super) reason: Reason,
    pub(super) why: &'static str,
}

pub(super) fn fault(reason: Reason, why: &'static str) -> Fault {
    Fault { reason, why }
}

/// The streams the server reset last: the client may still send frames on
/// them, which are ignored (RFC 9113 §5.1), where frames on any other
/// closed stream are an error.
#[derive(Default)]
pub(super) struct Recent {
    ids: [u32; 32],
    next: usize,
}

impl Recent {
    pub(super) fn add(&mut self, id: u32) {
        self.ids[self.next] = id;
        self.next = (self.next + 1) % self.ids.len();
    }

    pub(super) fn contains(&self, id: u32) -> bool {
        id != 0 && self.ids.contains(&id)
    }
}

/// A header block arriving in `CONTINUATION` frames.
pub(super) struct Block {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) bytes: BytesMut,
}

/// One connection's state.
pub(super) struct Conn {
    pub(super) calls: Arc<Calls>,
    pub(super) streams: Streams,
    open: Option<Open>,
    pub(super) max_streams: usize,
    pub(super) max_header_bytes: usize,
    pub(super) send_timeout: Duration,
    pub(super) hpack: Decoder,
    pub(super) out: BytesMut,
    pub(super) table: Vec<Stream>,
    /// The highest stream the client opened.
    pub(super) last: u32,
    pub(super) block: Option<Block>,
    /// Buffers for bodies that span frames, kept between calls.
    pub(super) spare: Vec<BytesMut>,
    pub(super) peer_max_frame: usize,
    pub(super) peer_window: i64,
    pub(super) send_window: i64,
    pub(super) recv_window: i64,
    pub(super) later: FuturesUnordered<Later>,
    /// Answers still to come for streams the client reset.
    pub(super) orphans: usize,
    /// The streams reset last.
    pub(super) reset: Recent,
    /// A `GOAWAY` was sent or received: no new stream.
    pub(super) going_away: bool,
    /// What idle frames the connection may still send.
    pub(super) calm: u32,
}

impl Conn {
    pub(super) fn new(calls: Arc<Calls>, streams: Streams, limits: &ConnectionLimits) -> Self {
        Conn {
            calls,
            streams,
            open: None,
            max_streams: limits.max_concurrent_streams.max(1) as usize,
            max_header_bytes: limits.max_header_bytes,
            send_timeout: limits.send_timeout,
            hpack: Decoder::new(TABLE_SIZE),
            out: BytesMut::with_capacity(16 * 1024),
            table: Vec::new(),
            last: 0,
            block: None,
            spare: Vec::new(),
            peer_max_frame: frame::MAX_FRAME,
            peer_window: 65_535,
            send_window: 65_535,
            recv_window: CONNECTION_WINDOW,
            later: FuturesUnordered::new(),
            orphans: 0,
            reset: Recent::default(),
            going_away: false,
            calm: IDLE_FRAMES,
        }
    }

    /// Serves the connection until the client leaves, a fault ends it, or
    /// it has finished after being asked to (`shutdown`).
    pub(super) async fn serve(
        mut self,
        mut io: Box<dyn Io>,
        shutdown: Arc<Notify>,
    ) -> Result<(), ConnectionError> {
        let mut read = BytesMut::with_capacity(2 * READ_ROOM);
        // The listener has read the preface already (it tells HTTP/2 by
        // it): this takes it again from what the listener kept.
        preface(&mut io, &mut read).await?;
        self.start();
        loop {
            if let Err(f) = self.frames(&mut read) {
                frame::put_goaway(&mut self.out, self.last, f.reason, f.why);
                let _ = write(&mut io, &mut self.out).await;
                return Err(Box::new(f));
            }
            self.tidy();
            write(&mut io, &mut self.out).await?;
            if self.going_away && self.table.is_empty() && self.later.is_empty() {
                return Ok(());
            }
            read.reserve(READ_ROOM);
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                () = shutdown.notified(), if !self.going_away => self.go_away(),
                Some((id, answer)) = self.later.next(), if !self.later.is_empty() => self.answered(id, answer),
                () = sleep_until(deadline), if deadline.is_some() => self.expire(Instant::now()),
                n = io.read_buf(&mut read) => if n? == 0 {
                    return Ok(());
                },
            }
            self.take_answers_ready();
        }
    }

    /// Takes every answer already decided, so that they go out together.
    fn take_answers_ready(&mut self) {
        while let Some(Some((id, answer))) = self.later.next().now_or_never() {
            self.answered(id, answer);
        }
    }

    /// Our settings and the connection's window.
    fn start(&mut self) {
        frame::put_settings(
            &mut self.out,
            &[
                (setting::MAX_CONCURRENT_STREAMS, self.max_streams as u32),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW as u32),
                (
                    setting::MAX_HEADER_LIST_SIZE,
                    self.max_header_bytes.min(u32::MAX as usize) as u32,
                ),
            ],
        );
        frame::put_window_update(&mut self.out, 0, (CONNECTION_WINDOW - 65_535) as u32);
    }

    /// Handles every whole frame in `read`.
    fn frames(&mut self, read: &mut BytesMut) -> Result<(), Fault> {
        let mut at = 0;
        while read.len() - at >= frame::HEAD {
            let head = frame::Head::parse(&read[at..]);
            if head.len > frame::MAX_FRAME {
                return Err(fault(
                    Reason::FrameSizeError,
                    "a frame larger than SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            let end = at + frame::HEAD + head.len;
            if read.len() < end {
                break;
            }
            self.frame(&head, &read[at + frame::HEAD..end])?;
            at = end;
        }
        read.advance(at);
        self.give_back_window();
        Ok(())
    }

    /// Opens the connection's window again once a quarter of it is used.
    fn give_back_window(&mut self) {
        let used = CONNECTION_WINDOW - self.recv_window;
        if used >= CONNECTION_WINDOW / 4 {
            frame::put_window_update(&mut self.out, 0, used as u32);
            self.recv_window = CONNECTION_WINDOW;
        }
    }

    /// Sends `answer` on stream `id`, if it is still there.
    pub(super) fn answered(&mut self, id: u32, answer: Answer) {
        let mut out = out!(self);
        match self.table.iter_mut().find(|s| s.id == id && !s.is_done()) {
            Some(s) => out.answer(s, answer),
            // The client reset it: the answer is dropped, and gives back
            // no idle frame (so that resets of calls still being decided,
            // the rapid-reset attack, run out of them).
            None => self.orphans = self.orphans.saturating_sub(1),
        }
    }

    /// Sends what the windows now allow of every answer.
    pub(super) fn pump_all(&mut self) {
        let mut out = out!(self);
        for s in &mut self.table {
            out.pump(s);
        }
    }

    /// Drops finished streams, and tells the listener whether any is open.
    fn tidy(&mut self) {
        self.table.retain(|s| !s.is_done());
        let busy = !self.table.is_empty() || !self.later.is_empty();
        match (busy, self.open.is_some()) {
            (true, false) => self.open = Some(self.streams.open()),
            (false, true) => self.open = None,
            _ => {}
        }
    }

    /// Asks the client to open no more streams; those open are answered.
    fn go_away(&mut self) {
        self.going_away = true;
        frame::put_goaway(&mut self.out, self.last, Reason::NoError, "");
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.table.iter().filter_map(|s| s.deadline).min()
    }

    /// Streams past their deadline: a call whose body has not ended is
    /// answered `DEADLINE_EXCEEDED`; an answer that has waited for room
    /// for the send timeout is dropped, its stream reset.
    fn expire(&mut self, now: Instant) {
        let calls = self.calls.clone();
        let mut out = out!(self);
        for s in self
            .table
            .iter_mut()
            .filter(|s| s.deadline.is_some_and(|d| d <= now))
        {
            if matches!(s.phase, super::stream::Phase::Receiving) {
                let answer = calls.expired(s.started, s.timeout);
                out.answer(s, answer);
            } else {
                out.reset(s.id, Reason::Cancel);
                s.phase = super::stream::Phase::Done;
                self.streams.send_timed_out();
            }
        }
    }

    /// Whether a new stream would exceed the concurrent streams.
    pub(super) fn full(&self) -> bool {
        self.table.len() + self.orphans >= self.max_streams
    }

    /// Takes one idle frame from the budget.
    pub(super) fn idle_frame(&mut self) -> Result<(), Fault> {
        self.calm = self.calm.checked_sub(1).ok_or(fault(
            Reason::EnhanceYourCalm,
            "too many frames that do nothing",
        ))?;
        Ok(())
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(d) = deadline {
        tokio::time::sleep_until(d.into()).await;
    }
}

/// Reads and checks the client's preface.
async fn preface(io: &mut Box<dyn Io>, read: &mut BytesMut) -> Result<(), ConnectionError> {
    while read.len() < frame::PREFACE.len() {
        if io.read_buf(read).await? == 0 {
            return Err("the connection closed before its preface".into());
        }
    }
    if &read[..frame::PREFACE.len()] != frame::PREFACE {
        return Err("not the HTTP/2 connection preface".into());
    }
    read.advance(frame::PREFACE.len());
    Ok(())
}

/// Writes what is due, in one write when the socket takes it.
async fn write(io: &mut Box<dyn Io>, out: &mut BytesMut) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    io.write_all(out).await?;
    out.clear();
    io.flush().await
}
