"""Envoy instances on the Rate Limit Quota Service (RLQS v3), built from
Envoy's published protos (xds-protos), playing a scenario.

Usage: rlqs.py TARGET SCENARIO

Each instance is one StreamRateLimitQuotas stream. A scenario prints one
line per answer: `NAME: ACTION[; ACTION...]`, each action
`k=v[,k=v] allow_all|deny_all|share N/UNIT|token_bucket max=N fill=N/Ss|abandon ttl=SECONDS`,
or `NAME: ERR <status code> <details>` when the stream ends in error.
"""

import os
import queue
import sys
import threading
import time

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc
from envoy.type.v3 import ratelimit_strategy_pb2, ratelimit_unit_pb2
from google.protobuf import duration_pb2

STRATEGY = ratelimit_strategy_pb2.RateLimitStrategy


class Instance:
    """One Envoy instance: a stream, fed from a queue, its answers read by
    a thread into another (so that pushes between reports can wait)."""

    def __init__(self, stub, name, domain="api"):
        self.name, self.domain = name, domain
        self.sent, self.received = queue.Queue(), queue.Queue()
        answers = stub.StreamRateLimitQuotas(iter(self.sent.get, None), timeout=20)
        threading.Thread(target=self.read, args=(answers,), daemon=True).start()

    def read(self, answers):
        """Every answer, then the error that ended the stream or None."""
        try:
            for answer in answers:
                self.received.put(answer)
            self.received.put(None)
        except grpc.RpcError as e:
            self.received.put(e)

    def report(self, usages, domain=None, bucket_ids=None):
        """Sends one report of `usages` ({(k, v) tuple: allowed}); prints the answer."""
        reports = rlqs_pb2.RateLimitQuotaUsageReports(
            domain=self.domain if domain is None else domain)
        for pairs, allowed in usages.items():
            usage = reports.bucket_quota_usages.add()
            usage.bucket_id.bucket.update(dict(pairs))
            usage.time_elapsed.CopyFrom(duration_pb2.Duration(seconds=1))
            usage.num_requests_allowed = allowed
        self.sent.put(reports)
        return self.answer()

    def answer(self, label=""):
        """The next answer, printed (after `label`)."""
        line = describe(self.received.get(timeout=20))
        print(f"{self.name}{label}: {line}", flush=True)
        return line

    def pushed(self):
        """The next answer, which no report asked for, printed."""
        return self.answer(" pushed")

    def drain(self):
        """The answers already received (pushes), not printed."""
        lines = []
        while not self.received.empty():
            lines.append(describe(self.received.get()))
        return lines

    def close(self):
        """Ends the stream, and waits for the service to end its side."""
        self.sent.put(None)
        while isinstance(self.received.get(timeout=20), rlqs_pb2.RateLimitQuotaResponse):
            pass


def describe(answer):
    """An answer's line: its actions, or the error that ended the stream."""
    if isinstance(answer, grpc.RpcError):
        return f"ERR {answer.code().name} {(answer.details() or '')}"
    if answer is None:
        return "END"
    return "; ".join(action(a) for a in answer.bucket_action)


def action(a):
    bucket = ",".join(f"{k}={v}" for k, v in sorted(a.bucket_id.bucket.items()))
    if a.HasField("abandon_action"):
        return f"{bucket} abandon"
    q = a.quota_assignment_action
    ttl = q.assignment_time_to_live.seconds
    s = q.rate_limit_strategy
    kind = s.WhichOneof("strategy")
    if kind == "requests_per_time_unit":
        r = s.requests_per_time_unit
        unit = ratelimit_unit_pb2.RateLimitUnit.Name(r.time_unit)
        return f"{bucket} share {r.requests_per_time_unit}/{unit} ttl={ttl}"
    if kind == "token_bucket":
        t = s.token_bucket
        every = t.fill_interval.seconds + t.fill_interval.nanos / 1e9
        return (f"{bucket} token_bucket max={t.max_tokens} "
                f"fill={t.tokens_per_fill.value}/{every:g}s ttl={ttl}")
    rule = STRATEGY.BlanketRule.Name(s.blanket_rule).lower()
    return f"{bucket} {rule} ttl={ttl}"


A = (("user", "a"),)


def shares(stub):
    """Two instances share one limit; a third bucket no rule matches."""
    one, two = Instance(stub, "one"), Instance(stub, "two")
    one.report({A: 0})
    two.report({A: 0})
    one.pushed()
    one.report({A: 0})
    one.report({(("tier", "x"),): 5})


def tokens(stub):
    """Two instances sharing a token-bucket rule's burst and rate."""
    one = Instance(stub, "one", domain="tokens")
    one.report({A: 0})
    two = Instance(stub, "two", domain="tokens")
    two.report({A: 0})
    one.pushed()
    one.report({A: 0})


def spent(stub):
    """The limit spent: deny all; counts kept across a cut stream."""
    one = Instance(stub, "one")
    one.report({A: 60})
    one.close()
    again = Instance(stub, "again")
    again.report({A: 0})
    again.report({A: 40})


def liar(stub):
    """An honest instance and one that lies, under- then over-reporting."""
    honest, liar = Instance(stub, "honest"), Instance(stub, "liar")
    honest.report({A: 10})
    liar.report({A: 0})
    honest.pushed()
    honest.report({A: 10})
    liar.report({A: 4294967295})
    honest.report({A: 0})


def refused(stub):
    """Bad reports, each ending its stream with a clear status."""
    Instance(stub, "huge").report({A: 2**64 - 1})
    Instance(stub, "negative").report({A: 2**64 - 5})
    Instance(stub, "nodomain", domain="").report({A: 1})
    bad = Instance(stub, "emptyvalue")
    bad.report({(("user", ""),): 1})
    other = Instance(stub, "otherdomain")
    other.report({A: 0})
    other.report({A: 0}, domain="elsewhere")


def many(stub):
    """More buckets than a stream may report."""
    Instance(stub, "many").report({(("user", str(i)),): 0 for i in range(3)})


def full(stub):
    """More buckets than the service holds (both streams open)."""
    one, two = Instance(stub, "one"), Instance(stub, "two")
    one.report({A: 0})
    two.report({(("user", "b"),): 0})


def reload(stub):
    """The bucket's rule removed by a reload: abandoned (argv[3]: the configuration)."""
    one = Instance(stub, "one")
    one.report({A: 0})
    path = sys.argv[3]
    text = open(path).read()
    with open(path + ".new", "w") as f:
        f.write(text.replace("key: user", "key: member"))
    os.replace(path + ".new", path)
    one.answer()
    one.report({A: 0})


def silent(stub):
    """One of two instances falls silent: once the time to live has passed
    since its last report, the other's share is the whole limit again."""
    one, two = Instance(stub, "one"), Instance(stub, "two")
    one.report({A: 0})
    two.report({A: 0})
    one.pushed()
    started = time.monotonic()
    while "share 100/" not in quiet(one, {A: 0}):
        assert time.monotonic() - started < 10, "the silent stream kept its share"
        time.sleep(0.05)
    print(f"one: whole again after {time.monotonic() - started:.1f}s", flush=True)


def across(stub):
    """One stream on each of two instances sharing Redis (argv[3]: the
    second's target): each gets half the limit; once the second's stream
    has been silent for the time to live, the first's is the whole limit."""
    with grpc.insecure_channel(sys.argv[3]) as channel:
        other = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        one, two = Instance(stub, "one"), Instance(other, "two")
        one.report({A: 0})
        two.report({A: 0})
        one.report({A: 0})
        started = time.monotonic()
        while "share 100/" not in quiet(one, {A: 0}):
            assert time.monotonic() - started < 10, "the silent stream kept its share"
            time.sleep(0.05)
        print(f"one: whole again after {time.monotonic() - started:.1f}s", flush=True)


def busy_across(stub):
    """An idle stream on one instance, a busy one on another (argv[3]: its
    target): the busy one gets what the idle one does not use."""
    with grpc.insecure_channel(sys.argv[3]) as channel:
        other = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        idle, busy = Instance(stub, "idle"), Instance(other, "busy")
        idle.report({A: 0})
        busy.report({A: 10})
        idle.report({A: 0})


def outage(stub):
    """A report before Redis stops answering, and one while it does not
    (argv[3]: a file written between them, argv[4]: a file that exists
    once Redis is paused)."""
    one = Instance(stub, "one")
    one.report({A: 0})
    open(sys.argv[3], "w").close()
    started = time.monotonic()
    while not os.path.exists(sys.argv[4]):
        assert time.monotonic() - started < 10, "Redis was never paused"
        time.sleep(0.02)
    one.report({A: 1})


def expired(stub):
    """Two instances; the second falls silent while the first reports once
    more: the first is pushed the whole limit once the second's time to
    live has passed, without reporting again."""
    one, two = Instance(stub, "one"), Instance(stub, "two")
    one.report({A: 0})
    started = time.monotonic()
    two.report({A: 0})
    one.pushed()
    time.sleep(0.6)
    one.report({A: 0})
    one.pushed()
    print(f"one: pushed after {time.monotonic() - started:.1f}s", flush=True)


def quiet(instance, usages):
    """A report whose answer is not printed."""
    saved = sys.stdout
    sys.stdout = open(os.devnull, "w")
    try:
        return instance.report(usages)
    finally:
        sys.stdout = saved


class Enforcer:
    """What Envoy does with its assignments: a new strategy starts a full
    bucket of its share; deny-all (or none yet) admits nothing. The run is
    shorter than the rule's minute, so nothing refills."""

    def __init__(self, instance):
        self.instance, self.strategy, self.tokens = instance, "none", 0

    def round(self, demand):
        for line in self.instance.drain():
            self.assigned(line)
        admitted = min(demand, self.tokens)
        self.tokens -= admitted
        self.assigned(quiet(self.instance, {A: admitted}))
        return admitted

    def assigned(self, line):
        strategy = line.split(" ttl=")[0]
        if strategy != self.strategy:
            self.strategy = strategy
            self.tokens = int(strategy.split("share ")[1].split("/")[0]) if "share" in strategy else 0


def fleet(stub):
    """Three instances joining one after another, each offered 10 requests
    a round, reporting each round: the fleet's admitted total."""
    if time.time() % 60 > 50:  # keep the run inside one minute of the rule
        time.sleep(60 - time.time() % 60)
    enforcers, total = [], 0
    for r in range(40):
        if r in (0, 5, 10):
            enforcers.append(Enforcer(Instance(stub, f"i{r}")))
        total += sum(e.round(10) for e in enforcers)
    print(f"admitted {total}", flush=True)


def hold(stub):
    """A stream left open while the service shuts down (argv[3]: a file
    written once the stream has its first answer)."""
    one = Instance(stub, "one")
    one.report({A: 0})
    open(sys.argv[3], "w").close()
    one.answer()


def shown(stub):
    """Two streams reporting one bucket and one a bucket whose value is
    markup, left open until the service shuts down (argv[3]: a file
    written once they have their answers)."""
    one, two = Instance(stub, "one"), Instance(stub, "two")
    one.report({A: 0, (("user", HOSTILE),): 0})
    two.report({A: 0})
    one.pushed()
    open(sys.argv[3], "w").close()
    one.answer()


HOSTILE = "<img src=x onerror=\"document.title='owned'\">"


def report(stub):
    """One instance's one report of argv[3] requests allowed."""
    Instance(stub, "one").report({A: int(sys.argv[3])})


def main():
    target, scenario = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(target) as channel:
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(channel)
        globals()[scenario](stub)


if __name__ == "__main__":
    main()
