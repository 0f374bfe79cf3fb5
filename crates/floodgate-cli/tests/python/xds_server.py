"""An xDS management server (state of the world, Envoy's aggregated discovery
service from xds-protos over grpcio) serving envoyproxy/ratelimit's
RateLimitConfig resources, their Python code generated at start with
grpcio-tools from the repository's proto files.

Usage: xds_server.py PROTO_DIR PORT [--tls CERT KEY CA] [--silent]

Listens on 127.0.0.1:PORT (with --tls: TLS, a client certificate signed by CA
required). Commands, one JSON object per line on standard input:
  {"push": VERSION, "configs": [RateLimitConfig as JSON, ...]}
      sets the state of the world and sends it on every open stream (and to
      every stream that opens later);
  {"push_raw": VERSION, "type_url": URL, "value_hex": HEX}
      the same with one resource of any type and bytes (a malformed one);
  {"push_huge": VERSION, "bytes": N}
      the same with one resource of N bytes in its name.
With --silent, streams are accepted and never answered.
Events, one JSON object per line on standard output, flushed:
  {"event": "listening"}
  {"event": "stream", "headers": {...}}
  {"event": "request", "node": ID, "metadata": {...}, "version": V,
   "nonce": N, "error": MESSAGE or null, "type_url": URL}
  {"event": "closed"}
"""

import json
import os
import queue
import sys
import tempfile
import threading
from concurrent import futures

import grpc
from grpc_tools import protoc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2, json_format

PROTO_DIR, PORT = sys.argv[1], int(sys.argv[2])
ARGS = sys.argv[3:]
SILENT = "--silent" in ARGS
TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"


def generated_rls_conf():
    """rls_conf_pb2, compiled from the repository's proto file."""
    out = tempfile.mkdtemp()
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out}",
                      "ratelimit/config/ratelimit/v3/rls_conf.proto"])
    assert rc == 0, "protoc failed"
    sys.path.insert(0, out)
    from ratelimit.config.ratelimit.v3 import rls_conf_pb2
    return rls_conf_pb2


RLS_CONF = generated_rls_conf()
LOCK = threading.Lock()
STATE = {"response": None, "nonce": 0}
STREAMS = []


def emit(**event):
    with LOCK:
        print(json.dumps(event), flush=True)


def response(version, resources):
    with LOCK:
        STATE["nonce"] += 1
        r = discovery_pb2.DiscoveryResponse(version_info=str(version), type_url=TYPE_URL,
                                            nonce=str(STATE["nonce"]), resources=resources)
        STATE["response"] = r
        streams = list(STREAMS)
    for q in streams:
        q.put(r)


def configs(items):
    out = []
    for item in items:
        msg = json_format.ParseDict(item, RLS_CONF.RateLimitConfig())
        a = any_pb2.Any()
        a.Pack(msg)
        out.append(a)
    return out


class Ads(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def StreamAggregatedResources(self, requests, context):
        headers = {k: v for k, v in context.invocation_metadata()}
        emit(event="stream", headers=headers)
        q = queue.Queue()
        with LOCK:
            STREAMS.append(q)

        def read():
            first = True
            try:
                for req in requests:
                    metadata = json_format.MessageToDict(req.node.metadata)
                    error = req.error_detail.message if req.HasField("error_detail") else None
                    emit(event="request", node=req.node.id, metadata=metadata,
                         version=req.version_info, nonce=req.response_nonce, error=error,
                         type_url=req.type_url)
                    # A stream's first request subscribes (whatever nonce
                    # it carries from an earlier stream): the state of the
                    # world, if any, answers it.
                    if first and not SILENT:
                        with LOCK:
                            current = STATE["response"]
                        if current is not None:
                            q.put(current)
                    first = False
            except grpc.RpcError:
                pass
            q.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            while True:
                r = q.get()
                if r is None or not context.is_active():
                    break
                if not SILENT:
                    yield r
        finally:
            with LOCK:
                STREAMS.remove(q)
            emit(event="closed")


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         options=[("grpc.max_send_message_length", 64 << 20)])
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(Ads(), server)
    addr = f"127.0.0.1:{PORT}"
    if "--tls" in ARGS:
        i = ARGS.index("--tls")
        cert, key, ca = (open(p, "rb").read() for p in ARGS[i + 1:i + 4])
        creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                            require_client_auth=True)
        server.add_secure_port(addr, creds)
    else:
        server.add_insecure_port(addr)
    server.start()
    emit(event="listening")
    for line in sys.stdin:
        cmd = json.loads(line)
        if "push" in cmd:
            response(cmd["push"], configs(cmd["configs"]))
        elif "push_raw" in cmd:
            a = any_pb2.Any(type_url=cmd["type_url"], value=bytes.fromhex(cmd["value_hex"]))
            response(cmd["push_raw"], [a])
        elif "push_huge" in cmd:
            huge = RLS_CONF.RateLimitConfig(name="x" * cmd["bytes"], domain="huge")
            a = any_pb2.Any()
            a.Pack(huge)
            response(cmd["push_huge"], [a])
    server.stop(0)


serve()
