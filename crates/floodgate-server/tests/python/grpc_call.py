"""One ShouldRateLimit call with grpcio over a new channel, in cleartext, TLS or mTLS.

Usage: grpc_call.py TARGET [--ca FILE [--cert FILE --key FILE]] [--authority NAME]
                    [--calls N] [--every SECONDS]

TARGET is grpcio's (`127.0.0.1:8081`, `unix:/path/grpc.sock`). With --ca the
channel is TLS, trusting FILE only; --cert/--key present a client certificate.
--authority sets the channel's `:authority` (grpcio's default over `unix:` is
the percent-encoded path, which is not a valid authority: see docs/service.md).
With --calls N, N calls on the one channel, --every seconds apart.
Prints one line per call: `OK <overall_code>` or `ERR <status code> <details>`.
"""

import argparse

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
import time


def channel(args):
    options = [("grpc.default_authority", args.authority)] if args.authority else []
    if args.ca is None:
        return grpc.insecure_channel(args.target, options=options)
    read = lambda path: open(path, "rb").read() if path else None
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(args.ca),
        private_key=read(args.key),
        certificate_chain=read(args.cert))
    return grpc.secure_channel(args.target, creds, options=options)


def call(stub):
    entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value="py")
    request = rls_pb2.RateLimitRequest(
        domain="api", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=[entry])])
    try:
        response = stub.ShouldRateLimit(request, timeout=5)
        return f"OK {rls_pb2.RateLimitResponse.Code.Name(response.overall_code)}"
    except grpc.RpcError as e:
        details = (e.details() or "").replace("\n", " ")
        return f"ERR {e.code().name} {details}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--authority")
    p.add_argument("--calls", type=int, default=1)
    p.add_argument("--every", type=float, default=0.0)
    args = p.parse_args()
    with channel(args) as ch:
        stub = rls_pb2_grpc.RateLimitServiceStub(ch)
        for i in range(args.calls):
            if i:
                time.sleep(args.every)
            print(call(stub), flush=True)


main()
