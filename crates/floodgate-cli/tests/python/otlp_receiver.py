"""An OTLP trace receiver, over gRPC (TraceService/Export) and HTTP
(POST /v1/traces, protobuf), with the message classes of opentelemetry-proto.

Usage: otlp_receiver.py MODE [CERT KEY CLIENT_CA]

Listens on two free loopback ports and prints "READY GRPC_PORT HTTP_PORT",
then one line "SPAN {json}" per span received: its name, trace id, span id,
parent span id (hex), kind, attributes and its resource's attributes.
MODE "answer" answers every export; "hang" accepts each export and never
answers it (a collector that is stuck). With CERT, KEY and CLIENT_CA both
listeners speak TLS and require a client certificate from CLIENT_CA. Each span
line carries the export's `x-api-key` header (or metadata) as "api_key".
Runs until killed.
"""

import json
import ssl
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

MODE = sys.argv[1]
STUCK = threading.Event()
PRINT = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def report(request, api_key):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                line = {
                    "name": s.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent": s.parent_span_id.hex(),
                    "kind": s.kind,
                    "attributes": attributes(s.attributes),
                    "resource": resource,
                    "api_key": api_key,
                }
                with PRINT:
                    print("SPAN " + json.dumps(line), flush=True)


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        if MODE == "hang":
            STUCK.wait()
        metadata = dict(context.invocation_metadata())
        report(request, metadata.get("x-api-key"))
        return trace_service_pb2.ExportTraceServiceResponse()


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if MODE == "hang":
            STUCK.wait()
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        report(request, self.headers.get("x-api-key"))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


TLS = sys.argv[2:5] if len(sys.argv) >= 5 else None


def read(path):
    with open(path, "rb") as f:
        return f.read()


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
if TLS:
    cert, key, client_ca = TLS
    credentials = grpc.ssl_server_credentials(
        [(read(key), read(cert))], root_certificates=read(client_ca),
        require_client_auth=True)
    grpc_port = server.add_secure_port("127.0.0.1:0", credentials)
else:
    grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
ThreadingHTTPServer.daemon_threads = True
http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
if TLS:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED
    http.socket = context.wrap_socket(http.socket, server_side=True)
threading.Thread(target=http.serve_forever, daemon=True).start()
print(f"READY {grpc_port} {http.server_address[1]}", flush=True)
server.wait_for_termination()
