"""requests_diff: the question people bring to a flight recorder — what do
the slow requests do that the typical ones do not? (`requests --diff`,
`diff --requests`.)

The slow group is every request at or above the 90th percentile of latency
(at least one); the typical group is the requests between the 25th and
75th percentiles. Each group's CPU and off-CPU samples are those taken on
the handling thread inside its requests' windows (attribution as in
cmd_requests), divided by the group's size: the table compares one slow
request with one typical request, function by function (diff.py), the
largest growth of self time first.
"""
import json
import sys

from . import cli, diff
from .commands.cmd_sockets import format_ns, percentile

KINDS = ("cpu", "offcpu")
TITLES = {"cpu": "CPU", "offcpu": "Off-CPU"}
SLOW_PCT = 90
TYPICAL = (25, 75)


def groups(reqs):
    """(slow, typical) lists of requests; ([], []) when there are too few to compare."""
    durations = sorted(r["duration_ns"] for r in reqs)
    if len(durations) < 3:
        return [], []
    slow_from = percentile(durations, SLOW_PCT)
    lo, hi = percentile(durations, TYPICAL[0]), percentile(durations, TYPICAL[1])
    slow = [r for r in reqs if r["duration_ns"] >= slow_from]
    typical = [r for r in reqs if lo <= r["duration_ns"] <= hi and r["duration_ns"] < slow_from]
    return slow, typical


def _group_stats(group):
    d = sorted(r["duration_ns"] for r in group)
    if not d:
        return {"count": 0}
    return {"count": len(d), "min_ns": d[0], "max_ns": d[-1], "mean_ns": sum(d) // len(d)}


def _entries(kind, group, samples, window_entries):
    out = []
    for r in group:
        out.extend(window_entries(kind, samples[kind].get((r["pid"], r["tid"])), r["start_ns"],
                                  r["start_ns"] + r["duration_ns"]))
    return out


def diff_report(trace, role, as_json, limit, min_pct):
    """Prints the slow-against-typical comparison; returns the exit status."""
    from .commands import cmd_requests  # the request reading and sample attribution live there
    reqs = cmd_requests.read_requests(trace, role)
    slow, typical = groups(reqs)
    doc = {"slow": _group_stats(slow), "typical": _group_stats(typical), "kinds": {}}
    if slow and typical:
        threads = {(r["pid"], r["tid"]) for r in slow + typical}
        samples = cmd_requests.read_samples(trace, threads)
        for kind in KINDS:
            a = diff.Side(_entries(kind, typical, samples, cmd_requests.window_entries), per=len(typical),
                          label="typical")
            b = diff.Side(_entries(kind, slow, samples, cmd_requests.window_entries), per=len(slow), label="slow")
            if not a.entries and not b.entries:
                continue
            rows = diff.function_rows(a, b, order="value")
            rows = [r for r in rows if max(r["a_total_pct"], r["b_total_pct"]) >= min_pct]
            doc["kinds"][kind] = {"typical_samples": a.samples, "slow_samples": b.samples,
                                  "typical_ns_per_request": a.weight / a.per,
                                  "slow_ns_per_request": b.weight / b.per,
                                  "functions": rows if limit is None else rows[:limit]}
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return cli.exit_status(trace)
    if not slow or not typical:
        print("too few requests to compare slow with typical ones (%d request%s; see `requests`)" % (
            len(reqs), "" if len(reqs) == 1 else "s"))
        return cli.exit_status(trace)
    s, t = doc["slow"], doc["typical"]
    print("slow: %d request%s at or above p%d (%s .. %s, mean %s)" % (
        s["count"], "" if s["count"] == 1 else "s", SLOW_PCT, format_ns(s["min_ns"]), format_ns(s["max_ns"]),
        format_ns(s["mean_ns"])))
    print("typical: %d requests between p%d and p%d (%s .. %s, mean %s)" % (
        t["count"], TYPICAL[0], TYPICAL[1], format_ns(t["min_ns"]), format_ns(t["max_ns"]), format_ns(t["mean_ns"])))
    print("per request, on the handling thread; the largest growth of self time first")
    if not doc["kinds"]:
        print("\nno CPU or off-CPU samples inside these requests")
    shown_limit = 20 if limit is None else limit
    for kind, k in doc["kinds"].items():
        print()
        print("%s: typical %s, slow %s per request" % (TITLES[kind], format_ns(k["typical_ns_per_request"]),
                                                      format_ns(k["slow_ns_per_request"])))
        table = [("typical self", "slow self", "Δ self", "typical total", "slow total", "Δ total", "function")]
        for r in k["functions"][:shown_limit]:
            table.append((format_ns(r["a_self"]), format_ns(r["b_self"]), _signed(r["delta_self"]),
                          format_ns(r["a_total"]), format_ns(r["b_total"]), _signed(r["delta_total"]),
                          r["function"]))
        widths = [max(len(row[i]) for row in table) for i in range(6)]
        for row in table:
            print("  " + "  ".join(row[i].rjust(widths[i]) for i in range(6)) + "  " + row[6])
    return cli.exit_status(trace)


def _signed(ns):
    return ("+" if ns >= 0 else "-") + format_ns(abs(ns))
