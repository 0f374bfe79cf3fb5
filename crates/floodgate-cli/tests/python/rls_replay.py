"""Sends RLS v3 requests with the gRPC client code generated from Envoy's own
protos (xds-protos) over grpcio, and writes every field of each answer.

Usage: rls_replay.py HOST:PORT
Reads one request per line on standard input, as JSON:
  {"domain": str, "hits_addend": int,
   "descriptors": [{"entries": [[key, value], ...],
                    "limit": [requests_per_unit, unit] or null,
                    "hits_addend": int or null}]}
and writes one line per request, as JSON, with the time before and after
the call (Unix seconds, floats):
  {"before": t, "after": t, "response": {"overall_code": int, "statuses":
   [{"code": int, "current_limit": [rpu, unit, name] or null,
     "limit_remaining": int, "duration_until_reset": [seconds, nanos] or null}],
   "headers": [[key, value], ...]}}
or, when the call fails, {"before": t, "after": t, "error": "STATUS_CODE"}.
"""

import json
import sys
import time

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

CHANNEL = grpc.insecure_channel(sys.argv[1])
STUB = rls_pb2_grpc.RateLimitServiceStub(CHANNEL)
Entry = ratelimit_pb2.RateLimitDescriptor.Entry


def request(j):
    descriptors = []
    for d in j["descriptors"]:
        pb = ratelimit_pb2.RateLimitDescriptor(
            entries=[Entry(key=k, value=v) for k, v in d["entries"]])
        if d["limit"] is not None:
            pb.limit.requests_per_unit, pb.limit.unit = d["limit"]
        if d["hits_addend"] is not None:
            pb.hits_addend.SetInParent()
            pb.hits_addend.value = d["hits_addend"]
        descriptors.append(pb)
    return rls_pb2.RateLimitRequest(domain=j["domain"], descriptors=descriptors,
                                    hits_addend=j["hits_addend"])


def answer(r):
    statuses = []
    for s in r.statuses:
        statuses.append({
            "code": s.code,
            "current_limit": [s.current_limit.requests_per_unit, s.current_limit.unit,
                              s.current_limit.name] if s.HasField("current_limit") else None,
            "limit_remaining": s.limit_remaining,
            "duration_until_reset": [s.duration_until_reset.seconds, s.duration_until_reset.nanos]
            if s.HasField("duration_until_reset") else None,
        })
    return {"overall_code": r.overall_code, "statuses": statuses,
            "headers": [[h.key, h.value] for h in r.response_headers_to_add]}


def main():
    grpc.channel_ready_future(CHANNEL).result(timeout=10)
    for line in sys.stdin:
        req = request(json.loads(line))
        before = time.time()
        try:
            out = {"response": answer(STUB.ShouldRateLimit(req, timeout=10))}
        except grpc.RpcError as e:
            out = {"error": e.code().name}
        out["before"], out["after"] = before, time.time()
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
