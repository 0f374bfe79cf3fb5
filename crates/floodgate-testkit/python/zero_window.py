"""HTTP/2 client connections whose receive window stays shut.

Each connection announces SETTINGS_INITIAL_WINDOW_SIZE=0 in its preface
and never sends a WINDOW_UPDATE: the server can send it headers, never a
byte of a body. It opens its streams, then only answers what the protocol
requires (SETTINGS and PING acknowledgements) and reports, one line each,
on standard output:

  open C                   connection C has sent its streams
  headers C S STATUS GRPC  response headers (GRPC: grpc-status or -)
  ended C S                the stream ended (a trailers-only answer)
  reset C S CODE           the server reset the stream
  closed C                 the server closed the connection (GOAWAY or EOF)

Arguments: one JSON object {"port", "connections", "streams", "waves",
"headers": [[name, value], ...], "body": hex}: `waves` times, that many
connections with that many streams each, a wave opened once every stream
of the one before has its response headers (or was reset), all kept
open. Exits when every connection is closed or stdin closes.
"""

import json
import selectors
import socket
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

spec = json.loads(sys.argv[1])
body = bytes.fromhex(spec.get("body", ""))
headers = [tuple(h) for h in spec["headers"]]
sel = selectors.DefaultSelector()


def say(*words):
    print(*words, flush=True)


class Conn:
    def __init__(self, index):
        self.index = index
        self.sock = socket.create_connection(("127.0.0.1", spec["port"]))
        self.sock.setblocking(False)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000,
            },
        )
        self.h2.initiate_connection()
        # Request bodies wait for the server's windows.
        self.bodies = {}
        for _ in range(spec["streams"]):
            sid = self.h2.get_next_available_stream_id()
            self.h2.send_headers(sid, headers, end_stream=not body)
            if body:
                self.bodies[sid] = body
        self.send_bodies()
        self.pending = self.h2.data_to_send()
        self.open = True
        self.answered = set()
        sel.register(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, self)

    def send_bodies(self):
        for sid in list(self.bodies):
            rest = self.bodies[sid]
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if room <= 0:
                continue
            chunk, rest = rest[:room], rest[room:]
            self.h2.send_data(sid, chunk, end_stream=not rest)
            if rest:
                self.bodies[sid] = rest
            else:
                del self.bodies[sid]

    def flush(self):
        self.pending += self.h2.data_to_send()
        try:
            while self.pending:
                n = self.sock.send(self.pending)
                self.pending = self.pending[n:]
        except BlockingIOError:
            pass
        except OSError:
            self.close()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.pending else 0)
        if self.open:
            sel.modify(self.sock, events, self)
            if not self.pending and not getattr(self, "announced", False):
                self.announced = True
                say("open", self.index)

    def read(self):
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            # Frames after the server's GOAWAY: it is closing.
            self.close()
            return
        for e in events:
            if isinstance(e, (h2.events.StreamReset, h2.events.StreamEnded)):
                self.bodies.pop(e.stream_id, None)
            if isinstance(e, (h2.events.ResponseReceived, h2.events.StreamReset)):
                self.answered.add(e.stream_id)
            if isinstance(e, h2.events.ResponseReceived):
                h = dict(e.headers)
                say("headers", self.index, e.stream_id, h.get(":status"), h.get("grpc-status", "-"))
            elif isinstance(e, h2.events.StreamEnded):
                say("ended", self.index, e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                say("reset", self.index, e.stream_id, int(e.error_code))
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.close()
                return
        self.send_bodies()
        self.flush()

    def close(self):
        if self.open:
            self.open = False
            sel.unregister(self.sock)
            self.sock.close()
            say("closed", self.index)


per_wave = spec["connections"]
waves = spec.get("waves", 1)
conns = [Conn(i) for i in range(per_wave)]
sel.register(sys.stdin, selectors.EVENT_READ, None)
while any(c.open for c in conns):
    wave = conns[-per_wave:]
    if len(conns) < per_wave * waves and all(
        not c.open or len(c.answered) == spec["streams"] for c in wave
    ):
        conns += [Conn(len(conns) + i) for i in range(per_wave)]
    for key, mask in sel.select():
        c = key.data
        if c is None:
            if not sys.stdin.buffer.read1(1):
                sys.exit(0)
            continue
        if mask & selectors.EVENT_READ:
            c.read()
        if c.open and mask & selectors.EVENT_WRITE:
            c.flush()
