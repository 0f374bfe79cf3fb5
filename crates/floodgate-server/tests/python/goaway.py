"""Watches a gRPC connection age out, frame by frame (raw HTTP/2 with
hyperframe and hpack, which keep no connection state: a GOAWAY does not stop
this client from finishing its call, as it must not).

Usage: goaway.py HOST PORT MODE

Opens a connection, starts one ShouldRateLimit call and sends half of its
message: the call is in flight, waiting for its client. Then waits for the
server's GOAWAY. MODE `complete`: sends the rest of the message and reads
the answer's grpc-status, then waits for the server to close the
connection. MODE `abandon`: sends nothing more and waits for the server to
close the connection (at the end of the grace).
Prints one JSON object: seconds from connect to the first GOAWAY and to the
close, the GOAWAY's error code, the call's grpc-status (or null).
"""

import json
import socket
import struct
import sys
import time

import hpack
from hyperframe.frame import (DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              SettingsFrame)
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

HOST, PORT, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def message():
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value="goaway")
    body = rls_pb2.RateLimitRequest(
        domain="api", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[entry])]
    ).SerializeToString()
    return b"\x00" + struct.pack(">I", len(body)) + body


def read_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def frames(sock):
    """Frames until the server closes the connection."""
    while True:
        header = read_exact(sock, 9)
        if header is None:
            return
        frame, length = Frame.parse_frame_header(memoryview(header))
        body = read_exact(sock, length) if length else b""
        if body is None:
            return
        frame.parse_body(memoryview(body))
        yield frame


def main():
    start = time.monotonic()
    sock = socket.create_connection((HOST, PORT), timeout=60)
    enc, dec = hpack.Encoder(), hpack.Decoder()
    sock.sendall(PREFACE + SettingsFrame(0).serialize())
    headers = HeadersFrame(1)
    headers.data = enc.encode([
        (":method", "POST"), (":scheme", "http"), (":authority", f"{HOST}:{PORT}"),
        (":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
        ("content-type", "application/grpc"), ("te", "trailers"),
    ])
    headers.flags.add("END_HEADERS")
    msg = message()
    half = DataFrame(1)
    half.data = msg[:3]
    sock.sendall(headers.serialize() + half.serialize())
    out = {"goaway_after": None, "goaway_error": None, "status": None, "closed_after": None}
    for frame in frames(sock):
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
        elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
            pong = PingFrame(0, flags=["ACK"])
            pong.opaque_data = frame.opaque_data
            sock.sendall(pong.serialize())
        elif isinstance(frame, GoAwayFrame) and out["goaway_after"] is None:
            out["goaway_after"] = time.monotonic() - start
            out["goaway_error"] = frame.error_code
            if MODE == "complete":
                rest = DataFrame(1, flags=["END_STREAM"])
                rest.data = msg[3:]
                sock.sendall(rest.serialize())
        elif isinstance(frame, HeadersFrame):
            for name, value in dec.decode(frame.data):
                name = name.decode() if isinstance(name, bytes) else name
                if name == "grpc-status":
                    out["status"] = value.decode() if isinstance(value, bytes) else value
    out["closed_after"] = time.monotonic() - start
    print(json.dumps(out))


main()
