"""Watches the limit a rate limit service applies to one descriptor, with the
gRPC client code generated from Envoy's own protos (xds-protos) over grpcio.

Usage: rls_watch.py HOST:PORT DOMAIN KEY VALUE SECONDS

Calls ShouldRateLimit every 50 ms for SECONDS and prints a line
"UNIX_TIME CODE REQUESTS_PER_UNIT" at the first answer and whenever the
limit changes (CODE: OK or OVER_LIMIT; UNIX_TIME when the answer came), so
that a caller can time a reload against its own clock. A call that fails
prints "UNIX_TIME ERROR message" once per distinct error.
"""

import sys
import time

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

ADDR, DOMAIN, KEY, VALUE, SECONDS = sys.argv[1:6]
STUB = rls_pb2_grpc.RateLimitServiceStub(grpc.insecure_channel(ADDR))
Entry = ratelimit_pb2.RateLimitDescriptor.Entry
REQUEST = rls_pb2.RateLimitRequest(
    domain=DOMAIN,
    descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[Entry(key=KEY, value=VALUE)])])
CODES = rls_pb2.RateLimitResponse.Code


def observe():
    try:
        resp = STUB.ShouldRateLimit(REQUEST, timeout=2)
    except grpc.RpcError as e:
        return f"ERROR {e.code().name} {e.details()}"
    limit = resp.statuses[0].current_limit.requests_per_unit if resp.statuses else 0
    return f"{CODES.Name(resp.overall_code)} {limit}"


last_limit = None
end = time.time() + float(SECONDS)
while time.time() < end:
    seen = observe()
    limit = seen.split(" ", 1)[1] if not seen.startswith("ERROR") else seen
    if limit != last_limit:
        print(f"{time.time():.3f} {seen}", flush=True)
        last_limit = limit
    time.sleep(0.05)
