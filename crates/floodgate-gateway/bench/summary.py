#!/usr/bin/env python3
"""Summarises the output of run.sh (docs/benchmarks.md, "Gateway").

Per configuration: the median over the rounds of requests/s, p99 and the
proxy's CPU time per request. Then the targets as ratios taken *within*
each round (the configurations of one round ran back to back, so a slow
spell of the machine hits both sides of a ratio alike) and their median
over the rounds:

* the gateway with limits against nginx with limit_req (requests/s, p99);
* the gateway with limits against the gateway without (the limiter's
  overhead, in requests/s and in CPU per request);
* for scale, nginx with limit_req against nginx without.

    summary.py RUN_OUTPUT
"""
import re
import statistics
import sys
from collections import defaultdict

NGINX_LIMIT = "nginx 1.22, limit_req"
NGINX_PLAIN = "nginx 1.22, no limit"
GW_SHAPER = "floodgate gateway, shaper"
GW_QUIET = "floodgate gateway, shaper, headers on rejections only"
GW_PLAIN = "floodgate gateway, no limit"


def parse(path):
    rounds = []  # one dict per round: label -> {rps, p99, cpu}
    label = None
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("#### round"):
            rounds.append(defaultdict(dict))
            continue
        m = re.match(r"== (.*)", line)
        if m:
            label = m.group(1).strip()
            if not rounds:
                rounds.append(defaultdict(dict))
            continue
        if label is None or not rounds:
            continue
        cur = rounds[-1][label]
        m = re.search(r"Requests/sec:\s+([\d.]+)", line)
        if m:
            cur["rps"] = float(m.group(1))
        m = re.match(r"\s+99%\s+([\d.]+)(us|ms|s)\b", line)
        if m:
            scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
            cur["p99"] = float(m.group(1)) * scale
        m = re.search(r"([\d.]+) us per request", line)
        if m:
            cur["cpu"] = float(m.group(1))
    return rounds


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt):
    return "(" + ", ".join(fmt.format(x) for x in xs) + ")"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summary.py RUN_OUTPUT")
    rounds = parse(sys.argv[1])
    labels = []
    for r in rounds:
        for k in r:
            if k not in labels:
                labels.append(k)
    print(f"{len(rounds)} round(s); medians, rounds in brackets")
    for k in labels:
        rps = [r[k]["rps"] for r in rounds if "rps" in r[k]]
        p99 = [r[k]["p99"] for r in rounds if "p99" in r[k]]
        cpu = [r[k]["cpu"] for r in rounds if "cpu" in r[k]]
        print(f"  {k}")
        print(f"    requests/s {med(rps):9.0f} {spread([x / 1000 for x in rps], '{:.1f}k')}")
        print(f"    p99        {med(p99):7.2f} ms {spread(p99, '{:.2f}')}")
        print(f"    CPU        {med(cpu):7.1f} us {spread(cpu, '{:.1f}')}")

    def ratios(a, b, key):
        return [r[a][key] / r[b][key] for r in rounds
                if key in r.get(a, {}) and key in r.get(b, {}) and r[b][key] > 0]

    def line(text, values, unit):
        """One summary line: the median and each round's value."""
        if not values:
            return
        if unit == "x":
            print(f"  {text:<72} {med(values):.3f}x {spread(values, '{:.2f}')}")
        else:  # a percentage
            pct = [v * 100 for v in values]
            print(f"  {text:<72} {med(pct):+.1f} % {spread(pct, '{:+.1f}')}")

    def overhead(text, limited, plain):
        # Lost requests/s, and extra CPU per request, against `plain`.
        line(f"{text}: limiter overhead, requests/s",
             [1 - v for v in ratios(limited, plain, "rps")], "%")
        line(f"{text}: limiter overhead, CPU per request",
             [v - 1 for v in ratios(limited, plain, "cpu")], "%")

    print("paired within each round; median (rounds)")
    for gw, name in ((GW_SHAPER, "shaper"), (GW_QUIET, "shaper, headers on rejections only")):
        if gw not in labels:
            continue
        line(f"{name}: requests/s against nginx limit_req", ratios(gw, NGINX_LIMIT, "rps"), "x")
        line(f"{name}: p99 against nginx limit_req", ratios(gw, NGINX_LIMIT, "p99"), "x")
        overhead(name, gw, GW_PLAIN)
    # For scale: the same measure of nginx's own limiter.
    overhead("nginx, limit_req", NGINX_LIMIT, NGINX_PLAIN)

if __name__ == "__main__":
    main()
