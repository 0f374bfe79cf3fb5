"""Envoy RLS v3 semantics, checked with the gRPC client code generated from Envoy's own protos
(xds-protos) over grpcio against a running floodgate server.

Usage: rls_semantics.py HOST:PORT RUN_ID [TEST...]
Every descriptor value carries RUN_ID, so runs never share counters.
Prints one line per check and "N passed, M failed"; exits 1 on failure.

The limits are fixed windows of the real clock (days, a week, an hour
override): before each check, the suite makes sure no hour boundary (which
every day and week boundary is too) is about to pass, so that a count never
resets between two calls of one check.
"""

import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

ADDR, RUN = sys.argv[1], sys.argv[2]
CHANNEL = grpc.insecure_channel(ADDR)
STUB = rls_pb2_grpc.RateLimitServiceStub(CHANNEL)
R = rls_pb2.RateLimitResponse
OK, OVER = R.OK, R.OVER_LIMIT
Entry = ratelimit_pb2.RateLimitDescriptor.Entry


def desc(*pairs, limit=None, hits=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[Entry(key=k, value=v) for k, v in pairs])
    if limit is not None:
        d.limit.requests_per_unit, d.limit.unit = limit
    if hits is not None:
        d.hits_addend.value = hits
    return d


def call(domain, *descriptors, hits=0, metadata=None):
    req = rls_pb2.RateLimitRequest(domain=domain, descriptors=list(descriptors),
                                   hits_addend=hits)
    resp = STUB.ShouldRateLimit(req, timeout=5, metadata=metadata)
    assert resp.overall_code in (OK, OVER), f"overall_code {resp.overall_code}"
    assert len(resp.statuses) == len(descriptors), resp
    return resp


def v(name):
    return f"{name}-{RUN}"


def clear_of_boundary(period=3600, margin=10.0):
    """Returns once at least `margin` seconds are left before the next
    boundary of the epoch-aligned windows of `period` seconds, waiting just
    past that boundary when it is nearer."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 0.05)


def seconds(d):
    """A duration_until_reset: whole seconds, as envoyproxy/ratelimit sends it."""
    assert d.nanos == 0, d
    return d.seconds


def until_window_end(period, t):
    """envoyproxy/ratelimit's duration_until_reset at `t`: windows are
    aligned to the epoch, and the time is in whole seconds
    (`unit - now % unit`)."""
    return period - int(t) % period


def codes(resp):
    return [s.code for s in resp.statuses]


def expect_error(code, domain, descriptors, hits=0):
    try:
        STUB.ShouldRateLimit(rls_pb2.RateLimitRequest(
            domain=domain, descriptors=descriptors, hits_addend=hits), timeout=5)
    except grpc.RpcError as e:
        assert e.code() == code, f"{e.code()} != {code}: {e.details()}"
        return e
    raise AssertionError(f"expected {code}")


def t_exact_counts():
    for i in range(3):
        r = call("counts", desc(("user", v("alice"))))
        assert r.overall_code == OK, (i, r)
        s = r.statuses[0]
        assert s.limit_remaining == 2 - i, s
        assert s.current_limit.requests_per_unit == 3
        assert s.current_limit.unit == R.RateLimit.DAY
        assert s.current_limit.name == "per-user"
        assert 0 < s.duration_until_reset.seconds <= 86400
    for _ in range(2):
        r = call("counts", desc(("user", v("alice"))))
        assert r.overall_code == OVER and r.statuses[0].code == OVER, r
        assert r.statuses[0].limit_remaining == 0
    # Another value has its own counter.
    assert call("counts", desc(("user", v("bob")))).overall_code == OK


def t_fresh_key_reset():
    # A key never seen, checked without charging (a descriptor's hits_addend
    # 0): duration_until_reset is the time to its window's end, as for a
    # used key, not 0.
    before = time.time()
    r = call("counts", desc(("user", v("fresh-reset")), hits=0))
    after = time.time()
    s = r.statuses[0]
    assert s.code == OK and s.limit_remaining == 3, s
    assert s.current_limit.unit == R.RateLimit.DAY, s
    got = seconds(s.duration_until_reset)
    lo, hi = until_window_end(86400, after), until_window_end(86400, before)
    assert lo <= got <= hi, (got, lo, hi)
    # A cost the limit can never admit counts nothing either.
    before = time.time()
    r = call("counts", desc(("user", v("fresh-never")), hits=9))
    after = time.time()
    s = r.statuses[0]
    assert s.code == OVER, s
    got = seconds(s.duration_until_reset)
    lo, hi = until_window_end(86400, after), until_window_end(86400, before)
    assert lo <= got <= hi, (got, lo, hi)
    # A limit override (an hour) on a fresh key, checked only.
    before = time.time()
    r = call("counts", desc(("anything", v("fresh-ov")), limit=(5, R.RateLimit.HOUR), hits=0))
    after = time.time()
    got = seconds(r.statuses[0].duration_until_reset)
    lo, hi = until_window_end(3600, after), until_window_end(3600, before)
    assert lo <= got <= hi, (got, lo, hi)
    # The week: windows aligned to the epoch too.
    before = time.time()
    r = call("week", desc(("k", v("fresh-week")), hits=0))
    after = time.time()
    got = seconds(r.statuses[0].duration_until_reset)
    lo, hi = until_window_end(604800, after), until_window_end(604800, before)
    assert lo <= got <= hi, (got, lo, hi)


def t_multiple_descriptors():
    a, b = desc(("a", v("x"))), desc(("b", v("x")))
    for i in range(2):
        r = call("multi", a, b)
        assert r.overall_code == OK and codes(r) == [OK, OK], r
        assert [s.limit_remaining for s in r.statuses] == [1 - i, 4 - i], r
    r = call("multi", a, b)
    assert r.overall_code == OVER and codes(r) == [OVER, OK], r
    # The denied request was not charged to b (atomic).
    assert r.statuses[1].limit_remaining == 3, r


def t_nested_wildcard_default():
    # Nested: tier=free -> user.
    assert call("nested", desc(("tier", "free"), ("user", v("u")))).overall_code == OK
    assert call("nested", desc(("tier", "free"), ("user", v("u")))).overall_code == OVER
    # A one-entry descriptor does not match the nested rule.
    r = call("nested", desc(("tier", "free")))
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit"), r
    # Wildcard /api/* (limit 2) before the default (limit 4).
    p = f"/api/{RUN}"
    r = call("nested", desc(("path", p)))
    assert r.statuses[0].current_limit.requests_per_unit == 2, r
    call("nested", desc(("path", p)))
    assert call("nested", desc(("path", p))).overall_code == OVER
    # Default: any other value, its own counter of 4.
    q = f"/other/{RUN}"
    for _ in range(4):
        assert call("nested", desc(("path", q))).overall_code == OK
    assert call("nested", desc(("path", q))).overall_code == OVER
    # Exempt value: an unlimited node.
    for _ in range(6):
        r = call("nested", desc(("path", "/exempt")))
        assert r.overall_code == OK and not r.statuses[0].HasField("current_limit"), r


def t_replaces():
    g, p = desc(("k", "general")), desc(("k", "premium"))
    for _ in range(3):
        r = call("replaces", g, p)
        assert r.overall_code == OK, r
        assert not r.statuses[0].HasField("current_limit"), r
        assert r.statuses[1].current_limit.requests_per_unit == 5, r


def t_unlimited():
    for _ in range(5):
        r = call("unlimited", desc(("k", v("u"))))
        assert r.overall_code == OK, r
        assert r.statuses[0].limit_remaining == 2**32 - 1, r
        assert not r.statuses[0].HasField("current_limit")


def t_shadow():
    for _ in range(3):
        r = call("shadow", desc(("k", v("s"))))
        assert r.overall_code == OK and r.statuses[0].code == OK, r


def t_hits_addend():
    u = ("user", v("hits"))
    r = call("counts", desc(u), hits=2)
    assert r.statuses[0].limit_remaining == 1, r
    # Descriptor-level 0: check only, nothing charged.
    r = call("counts", desc(u, hits=0), hits=5)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 1, r
    # Descriptor-level overrides the request's.
    r = call("counts", desc(u, hits=2), hits=1)
    assert r.overall_code == OVER, r
    r = call("counts", desc(u), hits=0)  # 0 means 1
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 0, r


def t_unknown_domain():
    r = call("no-such-domain", desc(("k", "v")), desc(("x", "y")))
    assert r.overall_code == OK and codes(r) == [OK, OK], r
    assert not r.statuses[0].HasField("current_limit")


def t_limit_override():
    # A key no rule matches, in a configured domain: the override applies.
    d = desc(("anything", v("ov")), limit=(2, R.RateLimit.DAY))
    for i in range(2):
        r = call("counts", d)
        assert r.overall_code == OK, r
        assert r.statuses[0].current_limit.requests_per_unit == 2, r
        assert r.statuses[0].limit_remaining == 1 - i, r
    assert call("counts", d).overall_code == OVER
    # An unknown domain has no limits at all (as envoyproxy/ratelimit).
    assert call("no-such-domain", d).overall_code == OK
    # An override replaces the configured limit (3/day here).
    d = desc(("user", v("ovr")), limit=(1, R.RateLimit.HOUR))
    assert call("counts", d).overall_code == OK
    r = call("counts", d)
    assert r.overall_code == OVER and r.statuses[0].current_limit.unit == R.RateLimit.HOUR, r


def t_week_unit():
    r = call("week", desc(("k", v("w"))))
    assert r.statuses[0].current_limit.unit == R.RateLimit.WEEK, r
    assert R.RateLimit.Unit.Name(7) == "WEEK"


def t_response_headers():
    r = call("counts", desc(("user", v("hdr"))), desc(("a", v("hdr"))), )
    # counts: 3/day -> 2 left; "a" is not a key of "counts": no limit.
    h = {x.key.lower(): x.value for x in r.response_headers_to_add}
    assert h["ratelimit-limit"] == "3" and h["ratelimit-remaining"] == "2", h
    assert 0 < int(h["ratelimit-reset"]) <= 86400, h
    assert h["x-ratelimit-limit"] == '3, 3;w=86400;name="per-user"', h
    assert h["x-ratelimit-remaining"] == "2", h
    names = [x.key for x in r.response_headers_to_add]
    assert "RateLimit-Limit" in names, names  # configured case kept


def t_concurrency_exact():
    d = desc(("k", v("conc")))
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda _: call("concurrency", d).overall_code, range(50)))
    assert results.count(OK) == 20, results.count(OK)
    assert results.count(OVER) == 30


def t_errors_and_recovery():
    C = grpc.StatusCode
    expect_error(C.INVALID_ARGUMENT, "", [desc(("k", "v"))])
    expect_error(C.INVALID_ARGUMENT, "counts", [])
    expect_error(C.INVALID_ARGUMENT, "counts", [desc(("k", str(i))) for i in range(10000)])
    expect_error(C.INVALID_ARGUMENT, "counts", [desc(("user", "x" * 100_000))])
    # A descriptor without entries, or with an empty key, matches nothing:
    # answered OK without a limit, as envoyproxy/ratelimit answers it.
    r = call("counts", ratelimit_pb2.RateLimitDescriptor(), desc(("", "v")))
    assert r.overall_code == OK, r
    assert [s.code for s in r.statuses] == [OK, OK], r
    assert not any(s.HasField("current_limit") for s in r.statuses), r
    bad_unit = desc(("user", "z"))
    bad_unit.limit.requests_per_unit, bad_unit.limit.unit = 1, 0
    expect_error(C.INVALID_ARGUMENT, "counts", [bad_unit])
    # Larger than the server's message limit (1 MiB): refused before decoding,
    # as gRPC servers refuse a message over their limit.
    expect_error(C.RESOURCE_EXHAUSTED, "counts", [desc(("user", "y" * (2 << 20)))])
    # Still serving.
    assert call("counts", desc(("user", v("after-errors")))).overall_code == OK


def t_health_and_reflection():
    check = CHANNEL.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    assert check(b"", timeout=5) == b"\x08\x01"  # SERVING
    name = b"envoy.service.ratelimit.v3.RateLimitService"
    assert check(b"\x0a" + bytes([len(name)]) + name, timeout=5) == b"\x08\x01"
    info = CHANNEL.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                 request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    replies = list(info(iter([b"\x3a\x00"]), timeout=5))  # list_services: ""
    assert any(name in r for r in replies), replies
    # file_containing_symbol: what grpcurl asks to describe the method.
    ask = b"\x22" + bytes([len(name)]) + name
    replies = list(info(iter([ask]), timeout=5))
    assert any(b"envoy/service/ratelimit/v3/rls.proto" in r for r in replies), replies
    assert any(b"ratelimit_unit.proto" in r or b"RateLimitDescriptor" in r for r in replies), replies


TESTS = [(n, f) for n, f in list(globals().items()) if n.startswith("t_")]

if __name__ == "__main__":
    grpc.channel_ready_future(CHANNEL).result(timeout=10)
    only = sys.argv[3:] or None
    passed = failed = 0
    for name, f in TESTS:
        if only and name not in only:
            continue
        try:
            clear_of_boundary()
            f()
            passed += 1
            print(f"ok     {name}")
        except Exception:
            failed += 1
            print(f"FAILED {name}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
