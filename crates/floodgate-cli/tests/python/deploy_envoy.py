"""Checks an Envoy bootstrap of deploy/ with Envoy's own published protos
(xds-protos), then plays its rate limit actions against a running Floodgate.

Usage:
  deploy_envoy.py check ENVOY_YAML
      Parses the file into envoy.config.bootstrap.v3.Bootstrap, strictly
      (an unknown field or type fails), and checks that every reference
      resolves: each route's and the rate limit service's cluster is
      defined, each cluster's load assignment names itself, the rate limit
      cluster speaks HTTP/2, the router is the last HTTP filter and the rate
      limit filter comes before it. Prints the rate limit filter's domain.
  deploy_envoy.py play ENVOY_YAML HOST:PORT
      Builds, as Envoy does from the route's `rate_limits` actions, the
      descriptors of requests from one client address with one API key,
      sends them to Floodgate's RLS listener with grpcio, and checks that the
      limits of the example hold: 5 requests per API key in a minute, and
      the client address's own descriptor answered with its limit.

Exits 1 with the reason on the first failure.
"""

import importlib
import os
import sys
import uuid

import grpc
import yaml
from google.protobuf import json_format
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
RATELIMIT = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def type_urls(node):
    """Every `@type` in a parsed YAML tree."""
    if isinstance(node, dict):
        if "@type" in node:
            yield node["@type"]
        for value in node.values():
            yield from type_urls(value)
    elif isinstance(node, list):
        for value in node:
            yield from type_urls(value)


def register(type_url):
    """Imports the generated modules of the type's package, so that the
    default pool knows the message an `Any` names."""
    full_name = type_url.rsplit("/", 1)[-1]
    package = full_name.rsplit(".", 1)[0]
    module = importlib.import_module(package)
    for path in module.__path__:
        for name in sorted(os.listdir(path)):
            if name.endswith("_pb2.py"):
                importlib.import_module(f"{package}.{name[:-3]}")


def parse(path):
    with open(path) as f:
        tree = yaml.safe_load(f)
    for url in set(type_urls(tree)):
        try:
            register(url)
        except ModuleNotFoundError:
            fail(f"{path}: no proto package for {url}")
    bootstrap = bootstrap_pb2.Bootstrap()
    try:
        json_format.ParseDict(tree, bootstrap, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        fail(f"{path} is not a valid Envoy bootstrap: {e}")
    return tree


def managers(tree):
    for listener in tree["static_resources"].get("listeners", []):
        for chain in listener.get("filter_chains", []):
            for f in chain.get("filters", []):
                config = f.get("typed_config", {})
                if config.get("@type") == HCM:
                    yield config


def check_clusters(tree):
    clusters = {}
    for c in tree["static_resources"].get("clusters", []):
        named = c.get("load_assignment", {}).get("cluster_name")
        if named != c["name"]:
            fail(f"cluster {c['name']}: its load assignment names {named!r}")
        clusters[c["name"]] = c
    return clusters


def speaks_http2(cluster):
    if "http2_protocol_options" in cluster:
        return True
    options = cluster.get("typed_extension_protocol_options", {}).get(HTTP_OPTIONS, {})
    return "http2_protocol_options" in options.get("explicit_http_config", {})


def check_filters(manager, clusters):
    filters = manager.get("http_filters", [])
    types = [f.get("typed_config", {}).get("@type") for f in filters]
    if not types or types[-1] != ROUTER:
        fail("the router is not the last HTTP filter")
    if RATELIMIT not in types:
        fail("no rate limit filter")
    ratelimit = filters[types.index(RATELIMIT)]["typed_config"]
    service = ratelimit["rate_limit_service"]
    if service.get("transport_api_version") != "V3":
        fail("the rate limit service is not asked with transport_api_version V3")
    cluster = service["grpc_service"]["envoy_grpc"]["cluster_name"]
    if cluster not in clusters:
        fail(f"the rate limit service's cluster {cluster!r} is not defined")
    if not speaks_http2(clusters[cluster]):
        fail(f"cluster {cluster!r} carries gRPC but does not speak HTTP/2")
    return ratelimit


def routes(manager):
    for host in manager["route_config"]["virtual_hosts"]:
        for route in host.get("routes", []):
            yield route


def check(path):
    tree = parse(path)
    clusters = check_clusters(tree)
    found = list(managers(tree))
    if not found:
        fail("no HTTP connection manager")
    domains = set()
    for manager in found:
        domains.add(check_filters(manager, clusters)["domain"])
        for route in routes(manager):
            target = route.get("route", {}).get("cluster")
            if target is not None and target not in clusters:
                fail(f"a route names the undefined cluster {target!r}")
    print(" ".join(sorted(domains)))
    return tree


def descriptor(actions, request):
    """The descriptor Envoy builds from one `rate_limits` entry, or None when
    an action produces no entry (a header absent)."""
    entries = []
    for action in actions:
        if "remote_address" in action:
            entries.append(("remote_address", request["address"]))
        elif "request_headers" in action:
            spec = action["request_headers"]
            value = request["headers"].get(spec["header_name"].lower())
            if value is None:
                return None
            entries.append((spec["descriptor_key"], value))
        elif "generic_key" in action:
            spec = action["generic_key"]
            entries.append((spec.get("descriptor_key", "generic_key"), spec["descriptor_value"]))
        else:
            fail(f"the player does not know the action {sorted(action)}")
    Entry = ratelimit_pb2.RateLimitDescriptor.Entry
    return ratelimit_pb2.RateLimitDescriptor(entries=[Entry(key=k, value=v) for k, v in entries])


def play(path, addr):
    tree = check(path)
    manager = next(managers(tree))
    domain = check_filters(manager, check_clusters(tree))["domain"]
    route = next(routes(manager))
    run = uuid.uuid4().hex[:8]
    request = {"address": f"10.{int(run[:2], 16)}.{int(run[2:4], 16)}.7",
               "headers": {"x-api-key": f"key-{run}"}}
    descriptors = [d for d in (descriptor(r["actions"], request)
                               for r in route["route"]["rate_limits"]) if d is not None]
    if len(descriptors) != 2:
        fail(f"expected a descriptor per client address and per API key, got {descriptors}")
    stub = rls_pb2_grpc.RateLimitServiceStub(grpc.insecure_channel(addr))
    R = rls_pb2.RateLimitResponse
    codes = []
    for _ in range(6):
        resp = stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors), timeout=5)
        codes.append(R.Code.Name(resp.overall_code))
        for status in resp.statuses:
            if status.code == R.OK and not status.HasField("current_limit"):
                fail(f"a descriptor matched no limit of domain {domain}: {resp}")
    expected = ["OK"] * 5 + ["OVER_LIMIT"]
    if codes != expected:
        fail(f"the API key's 5 requests a minute: got {codes}, expected {expected}")
    print("played: " + " ".join(codes))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "play":
        play(sys.argv[2], sys.argv[3])
    else:
        print(__doc__)
        sys.exit(2)
