"""Hostile HTTP/2 clients of the gRPC listener, on raw sockets: frames are
written by hand (HPACK blocks with the `hpack` package `h2` depends on,
or byte by byte where they must be wrong), and what the server sends back
is read frame by frame.

Usage: h2_hostile.py PORT SCENARIO
Prints one JSON line with what the client observed and exits 0, unless
the script itself failed. Observations of one connection:
  closed    the server closed it (EOF, a reset, or a write refused);
  throttled a write blocked: the server stopped reading;
  goaway    the error code of the server's GOAWAY, or null;
  resets    [[stream, error code], ...] of the server's RST_STREAMs;
  answered  how many streams got a whole response;
  grpc      [[stream, grpc-status], ...], http [[stream, :status], ...];
  ok        [[stream, RateLimitResponse.overall_code], ...];
plus fields of the scenario. Scenarios of several connections print one
observation per case under "cases".
"""

import json
import signal
import socket
import struct
import sys
import time

import h2.events
import hpack

import rapid_reset

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
RLS_PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
MAX_FRAME = 16384
# How long a client waits for a state (an answer, a close) before it
# reports what it saw: generous, for a loaded machine.
WAIT = 5.0


def frame(kind, flags, stream, payload=b""):
    """One frame: its 9-byte head, then the payload."""
    head = struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream)
    return head + payload


def field(number, payload):
    """A length-delimited protobuf field."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def rls_message(user):
    """A gRPC message holding a RateLimitRequest of domain `d` with one
    descriptor `user: <user>`, encoded by hand."""
    entry = field(1, b"user") + field(2, user.encode())
    body = field(1, b"d") + field(2, field(1, entry))
    return b"\0" + struct.pack(">I", len(body)) + body


def overall_code(message):
    """RateLimitResponse.overall_code (field 1) of a gRPC message."""
    body = message[5:]
    if len(body) >= 2 and body[0] == 0x08:
        return body[1]
    return 0


def call_headers(port, timeout=None):
    """The request headers of a ShouldRateLimit call."""
    h = [(":method", "POST"), (":scheme", "http"), (":path", RLS_PATH),
         (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
         ("te", "trailers")]
    if timeout:
        h.append(("grpc-timeout", timeout))
    return h


class Conn:
    """One client connection and what the server sent on it."""

    def __init__(self, port, preface=True, ack_settings=True):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ack_settings = ack_settings
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 24
        self.buf = b""
        self.closed, self.throttled, self.goaway, self.resets = False, False, None, []
        self.settings, self.acks = {}, {PING: 0, SETTINGS: 0}
        self.streams = {}
        if preface:
            self.send(PREFACE + frame(SETTINGS, 0, 0))

    def send(self, data):
        """Writes `data`; False when the server refused it (closed) or
        stopped reading it for WAIT (throttled)."""
        try:
            self.sock.sendall(data)
            return True
        except socket.timeout:
            self.throttled = True
            return False
        except OSError:
            self.closed = True
            return False

    def block(self, headers):
        """An HPACK header block of `headers`, in order, as given."""
        return self.encoder.encode(headers, huffman=True)

    def request(self, stream, headers, body=None, end=True):
        """HEADERS (then DATA of `body`) on `stream`; `end` ends it."""
        flags = END_HEADERS | (END_STREAM if end and body is None else 0)
        out = frame(HEADERS, flags, stream, self.block(headers))
        if body is not None:
            out += frame(DATA, END_STREAM if end else 0, stream, body)
        return self.send(out)

    def call(self, stream, user="hostile", timeout=None):
        """A whole ShouldRateLimit call on `stream`."""
        return self.request(stream, call_headers(self.port, timeout), rls_message(user))

    def handshake(self):
        """Waits for the server's SETTINGS (acknowledged unless told not to)."""
        self.pump(lambda: "seen" in self.settings)

    def pump(self, until=lambda: False, seconds=WAIT):
        """Reads frames until `until()` holds, the connection closes, or
        `seconds` pass."""
        end = time.monotonic() + seconds
        while not until() and not self.closed:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                return
            except OSError:
                self.closed = True
                return
            if not chunk:
                self.closed = True
                return
            self.buf += chunk
            self.frames()
        self.sock.settimeout(WAIT)

    def frames(self):
        """Handles every whole frame read so far."""
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                return
            kind, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            self.handle(kind, flags, stream, payload)

    def handle(self, kind, flags, stream, payload):
        if kind == SETTINGS and flags & ACK:
            self.acks[SETTINGS] += 1
        elif kind == SETTINGS:
            for i in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[i:i + 6])
                self.settings[key] = value
            self.settings["seen"] = True
            if self.ack_settings:
                self.send(frame(SETTINGS, ACK, 0))
        elif kind == PING and flags & ACK:
            self.acks[PING] += 1
        elif kind == GOAWAY:
            self.goaway = struct.unpack(">I", payload[4:8])[0]
        elif kind == RST_STREAM:
            self.resets.append([stream, struct.unpack(">I", payload[:4])[0]])
        elif kind in (HEADERS, DATA):
            self.response(kind, flags, stream, payload)

    def response(self, kind, flags, stream, payload):
        s = self.streams.setdefault(stream, {"data": b"", "ended": False})
        if kind == HEADERS:
            # The server's blocks fit a frame: no CONTINUATION expected.
            for name, value in self.decoder.decode(payload):
                s[name] = value
        else:
            s["data"] += payload
        if flags & END_STREAM:
            s["ended"] = True

    def ended(self, stream):
        return self.streams.get(stream, {}).get("ended", False)

    def refused(self, stream):
        return any(sid == stream for sid, _ in self.resets)

    def done(self, stream):
        """Whether `stream` is answered or reset, or the connection gone."""
        return self.ended(stream) or self.refused(stream) or self.closed

    def observed(self, **extra):
        ended = {k: v for k, v in self.streams.items() if v["ended"]}
        seen = {
            "closed": self.closed, "throttled": self.throttled,
            "goaway": self.goaway, "resets": self.resets,
            "answered": len(ended),
            "grpc": [[k, int(v["grpc-status"])] for k, v in ended.items() if "grpc-status" in v],
            "http": [[k, int(v[":status"])] for k, v in ended.items() if ":status" in v],
            "ok": [[k, overall_code(v["data"])] for k, v in ended.items() if len(v["data"]) > 5],
        }
        seen.update(extra)
        self.sock.close()
        return seen

    def until_closed(self, seconds=WAIT):
        self.pump(seconds=seconds)


def send_for(conn, data, chunk):
    """Writes `data` in pieces of `chunk` bytes without reading; how many
    bytes the server took before it closed or stopped reading."""
    sent = 0
    for i in range(0, len(data), chunk):
        if not conn.send(data[i:i + chunk]):
            return sent
        sent += min(chunk, len(data) - i)
    return sent


# -- Scenarios -------------------------------------------------------------


def valid_call(port):
    c = Conn(port)
    c.call(1, "valid")
    c.pump(lambda: c.done(1))
    return c.observed()


def bad_preface(port):
    c = Conn(port, preface=False)
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\xde\xad\xbe\xef" * 64)
    c.until_closed()
    return c.observed()


def oversized_frame(port):
    c = Conn(port)
    c.handshake()
    limit = c.settings.get(5, MAX_FRAME)
    c.send(frame(HEADERS, END_HEADERS, 1, b"\0" * (limit + 1)))
    c.until_closed()
    return c.observed(length=limit + 1)


def flood_block(count):
    """`count` literal header fields of new names, 113 bytes each."""
    return b"".join(b"\x00\x0ax-flood-%02d\x64" % (i % 100) + b"a" * 100
                    for i in range(count))


def continuation_flood(port):
    c = Conn(port)
    c.handshake()
    total = 10 << 20
    piece = flood_block(MAX_FRAME // 113)
    head = frame(HEADERS, 0, 1, c.block(call_headers(port)))
    frames = head + frame(CONTINUATION, 0, 1, piece) * (total // len(piece))
    sent = send_for(c, frames, 1 << 16)
    c.until_closed()
    return c.observed(sent=sent, total=len(frames))


def header_list_too_large(port):
    c = Conn(port)
    c.handshake()
    block = c.block(call_headers(port)) + flood_block(200_000 // 113)
    pieces = [block[i:i + MAX_FRAME] for i in range(0, len(block), MAX_FRAME)]
    out = frame(HEADERS, 0, 1, pieces[0])
    for i, p in enumerate(pieces[1:], 2):
        out += frame(CONTINUATION, END_HEADERS if i == len(pieces) else 0, 1, p)
    c.send(out + frame(DATA, END_STREAM, 1, rls_message("large")))
    c.pump(lambda: c.done(1))
    return c.observed(bytes=len(block))


def bad_block(port, representation):
    """A call whose header block ends with `representation`."""
    c = Conn(port)
    c.handshake()
    block = c.block(call_headers(port)) + representation
    c.send(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, rls_message("h")))
    c.pump(lambda: c.done(1))
    return c.observed()


def bad_hpack(port):
    return {"cases": {
        # Indexed field 70: the static table has 61, the dynamic none.
        "index_beyond_table": bad_block(port, b"\xc6"),
        # A literal whose Huffman value '0' (00000) is padded with 000,
        # not the most significant bits of EOS (ones).
        "huffman_padding": bad_block(port, b"\x00\x01a\x81\x00"),
        # A dynamic table size update to 8192, above SETTINGS_HEADER_TABLE_SIZE.
        "table_size_update": bad_block(port, b"\x3f\xe1\x3f"),
    }}


def call_on(s, conn, port):
    """A ShouldRateLimit call on an `h2` library connection: its
    grpc-status, "closed" when the server ends the connection first, or
    None when WAIT passes first."""
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, call_headers(port))
    conn.send_data(sid, rls_message("after-resets"), end_stream=True)
    end = time.monotonic() + WAIT
    try:
        s.sendall(conn.data_to_send())
        while time.monotonic() < end:
            s.settimeout(max(end - time.monotonic(), 0.01))
            data = s.recv(1 << 16)
            if not data:
                return "closed"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    return "closed"
                if getattr(event, "stream_id", None) == sid and hasattr(event, "headers"):
                    status = dict(event.headers).get("grpc-status")
                    if status is not None:
                        return int(status)
            s.sendall(conn.data_to_send())
    except socket.timeout:
        return None
    except OSError:
        return "closed"
    return None


def rapid_reset_flood(port):
    """rapid_reset.py's flood of 10 000 streams on one connection; then,
    when the server kept it open, one call on it."""
    s, conn = rapid_reset.connect(port)
    closed = rapid_reset.reset_streams(s, conn, 10_000)
    after = None if closed else call_on(s, conn, port)
    # The server may close the connection only once it has read the
    # flood, after the client sent it all into the socket's buffers.
    if after == "closed":
        closed, after = True, None
    s.close()
    return {"closed": closed, "after": after}


def control_flood(port, kind, payload):
    """100 000 frames of `kind` without reading, then the answers read."""
    c = Conn(port)
    c.handshake()
    count = 100_000
    one = frame(kind, 0, 0, payload)
    sent = send_for(c, one * count, len(one) * 1000) // len(one)
    c.pump(lambda: c.acks[kind] >= sent, seconds=2 * WAIT)
    return c.observed(sent=sent, count=count, acks=c.acks[kind])


def ping_flood(port):
    return control_flood(port, PING, b"hostile!")


def settings_flood(port):
    return control_flood(port, SETTINGS, b"")


def window_update(increment):
    return struct.pack(">I", increment)


def window_overflow(port):
    cases = {}
    c = Conn(port)
    c.handshake()
    c.send(frame(WINDOW_UPDATE, 0, 0, window_update(0x7FFFFFFF)))
    c.until_closed()
    cases["connection"] = c.observed()
    c = Conn(port)
    c.handshake()
    c.request(1, call_headers(port), end=False)
    c.send(frame(WINDOW_UPDATE, 0, 1, window_update(0x7FFFFFFF)))
    c.pump(lambda: c.done(1))
    cases["stream"] = c.observed()
    return {"cases": cases}


def data_beyond_window(port):
    """DATA in one burst beyond the stream's window, whichever the server
    counts: the 65 535 octets every stream starts with, or the
    SETTINGS_INITIAL_WINDOW_SIZE it advertised (left unacknowledged, so a
    server may hold either until the ACK)."""
    c = Conn(port, ack_settings=False)
    c.handshake()
    window = max(65_535, c.settings.get(4, 65_535))
    prefix = b"\0" + struct.pack(">I", 4 * window)
    piece = frame(DATA, 0, 1, b"\0" * MAX_FRAME)
    c.request(1, call_headers(port), end=False)
    c.send(frame(DATA, 0, 1, prefix) + piece * (window // MAX_FRAME + 2))
    c.pump(lambda: c.done(1))
    return c.observed(window=window)


def even_stream(port):
    c = Conn(port)
    c.handshake()
    c.call(2, "even")
    c.pump(lambda: c.done(2))
    return c.observed()


def decreasing_stream(port):
    c = Conn(port)
    c.handshake()
    c.call(5, "five")
    c.call(3, "three")
    c.pump(lambda: c.done(3) and c.done(5))
    return c.observed()


def headers_on_closed_stream(port):
    c = Conn(port)
    c.handshake()
    c.call(1, "first")
    c.pump(lambda: c.done(1))
    first = c.ended(1)
    c.streams.pop(1, None)
    c.call(1, "again")
    c.pump(lambda: c.done(1) or c.goaway is not None)
    return c.observed(first_answered=first)


def data_on_idle_stream(port):
    c = Conn(port)
    c.handshake()
    c.send(frame(DATA, END_STREAM, 3, rls_message("idle")))
    c.pump(lambda: c.done(3) or c.goaway is not None)
    return c.observed()


def stream_id_games(port):
    return {"cases": {
        "even": even_stream(port),
        "decreasing": decreasing_stream(port),
        "headers_on_closed": headers_on_closed_stream(port),
        "data_on_idle": data_on_idle_stream(port),
    }}


def too_many_streams(port):
    c = Conn(port)
    c.handshake()
    limit = c.settings.get(3, 1000)
    excess = 50
    out = b""
    for i in range(limit + excess):
        sid = 2 * i + 1
        out += frame(HEADERS, END_HEADERS, sid, c.block(call_headers(port, "20S")))
        out += frame(DATA, 0, sid, rls_message("held")[:3])
    c.send(out)
    beyond = {2 * i + 1 for i in range(limit, limit + excess)}

    def refused():
        # REFUSED_STREAM or PROTOCOL_ERROR, as RFC 9113 5.1.2 lets a server choose.
        return [s for s, code in c.resets if s in beyond and code in (1, 7)]

    c.pump(lambda: len(refused()) >= excess)
    answered_beyond = sum(1 for s in beyond if c.ended(s))
    return c.observed(limit=limit, excess=excess, refused=len(refused()),
                      answered_beyond=answered_beyond)


def zero_length_flood(port):
    c = Conn(port)
    c.handshake()
    c.request(1, call_headers(port), end=False)
    sent = send_for(c, frame(DATA, 0, 1) * 100_000, 9 * 1000)
    if not c.closed and not c.throttled:
        c.send(frame(DATA, END_STREAM, 1, rls_message("after-empty")))
    c.pump(lambda: c.done(1))
    return c.observed(sent=sent // 9)


def malformed(port, headers):
    c = Conn(port)
    c.handshake()
    c.request(1, headers, rls_message("malformed"))
    c.pump(lambda: c.done(1))
    return c.observed()


def malformed_requests(port):
    good = call_headers(port)
    no_path = [h for h in good if h[0] != ":path"]
    return {"cases": {
        "missing_path": malformed(port, no_path),
        "uppercase_name": malformed(port, good + [("X-Upper", "1")]),
        "connection_header": malformed(port, good + [("connection", "keep-alive")]),
        "te_gzip": malformed(port, [h for h in good if h[0] != "te"] + [("te", "gzip")]),
        "pseudo_after_regular": malformed(port, good[:3] + [("x-a", "1")] + good[3:]),
    }}


def half_open_body(port):
    c = Conn(port)
    c.handshake()
    started = time.monotonic()
    c.request(1, call_headers(port, "200m"), rls_message("half")[:3], end=False)
    c.pump(lambda: c.done(1))
    return c.observed(elapsed_ms=int((time.monotonic() - started) * 1000))


SCENARIOS = {
    "valid_call": valid_call,
    "bad_preface": bad_preface,
    "oversized_frame": oversized_frame,
    "continuation_flood": continuation_flood,
    "header_list_too_large": header_list_too_large,
    "bad_hpack": bad_hpack,
    "rapid_reset": rapid_reset_flood,
    "ping_flood": ping_flood,
    "settings_flood": settings_flood,
    "window_overflow": window_overflow,
    "data_beyond_window": data_beyond_window,
    "stream_id_games": stream_id_games,
    "too_many_streams": too_many_streams,
    "zero_length_flood": zero_length_flood,
    "malformed_requests": malformed_requests,
    "half_open_body": half_open_body,
}


def main():
    port, name = int(sys.argv[1]), sys.argv[2]
    # The script's own bound: every wait above is shorter.
    signal.alarm(60)
    print(json.dumps(SCENARIOS[name](port)), flush=True)


if __name__ == "__main__":
    main()
