"""requests: the request/response exchanges inferred from the recorded
socket activity (request_inference.py; docs/REQUESTS.md has the heuristic
and its limits): latency summary and histogram, and for the slowest requests a
call-tree summary of the CPU, off-CPU and allocation samples taken on the
handling thread inside the request's time window.

Samples are attributed by thread and time only. On a thread that serves
several connections at once (an event loop), request windows overlap; those
requests are marked "shared" with the number of other requests in flight on
the thread, and the samples in the overlap belong to all of them.
"""
import bisect
import json
import sys

from .. import calltree, cli, profiles, request_inference
from .cmd_sockets import format_ns, percentile

KINDS = ("cpu", "offcpu", "alloc")
KIND_EVENTS = {"cpu": "cpu.sample", "offcpu": "offcpu.sample", "alloc": "alloc.sample"}
KIND_UNITS = {"cpu": "ns", "offcpu": "ns", "alloc": "bytes"}
KIND_TITLES = {"cpu": "CPU", "offcpu": "Off-CPU", "alloc": "Allocations"}


def register(subparsers):
    p = subparsers.add_parser("requests", help="inferred requests: latency, histogram, slowest with call trees")
    p.add_argument("--json", action="store_true", help="one JSON object: requests, histogram, summary")
    p.add_argument("--slowest", type=int, default=5, metavar="N",
                   help="show the N slowest requests with call trees (default 5)")
    p.add_argument("--role", choices=("server", "client", "all"), default="all",
                   help="server-side requests (accepted connections), client-side, or both (default)")
    p.add_argument("--diff", action="store_true",
                   help="compare the slowest requests (p90 and up) with typical ones (p25..p75): "
                        "where the slow ones spend more time, per request")
    p.add_argument("--min-pct", type=float, default=1.0, metavar="P",
                   help="leave call paths below P%% of a request's samples out of its tree (default 1)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------ reading

def read_requests(trace, role):
    """Every request of the trace (recorded or derived: request_inference.py), by start."""
    return request_inference.all_requests(trace, role)


def read_connections(trace):
    """{(pid, conn): (local, peer)} from socket.open (the latest description)."""
    return request_inference.latest_connections(trace, ("local", "peer"))


def read_samples(trace, threads):
    """{kind: {(pid, tid): (times, [(time, weight, end, segment, stack id)])}}, time-sorted,
    for the given threads.
    end is time + duration for off-CPU blocks (they are clipped to the window), else time."""
    out = {k: {} for k in KINDS}
    for kind in KINDS:
        for b in trace.batches({KIND_EVENTS[kind]}):
            seg = b.segment
            if kind == "cpu":
                cols = b.columns_named(["time", "tid", "stack", "period_ns"])
            elif kind == "offcpu":
                cols = b.columns_named(["time", "tid", "stack", "duration_ns"])
            else:
                cols = b.columns_named(["time", "tid", "stack", "size", "sample_bytes"])
            if cols is None:
                continue
            pid = seg.pid
            for row in zip(*cols):
                key = (pid, row[1])
                if key not in threads:
                    continue
                t, stack = row[0], row[2]
                if kind == "cpu":
                    item = (t, row[3], t, seg, stack)
                elif kind == "offcpu":
                    item = (t, row[3], t + row[3], seg, stack)
                else:
                    item = (t, profiles.alloc_weight(row[3], row[4])[0], t, seg, stack)
                out[kind].setdefault(key, []).append(item)
    for per_thread in out.values():
        for key, items in per_thread.items():
            items.sort(key=lambda x: x[0])
            per_thread[key] = ([x[0] for x in items], items)
    return out


# ------------------------------------------------------------------ attribution

def window_entries(kind, thread_samples, lo, hi):
    """(root-first labels, samples, weight) of the samples of one thread in [lo, hi].
    Off-CPU blocks count for the part of them inside the window."""
    if not thread_samples:
        return []
    times, items = thread_samples
    start = bisect.bisect_left(times, lo)
    if kind == "offcpu":
        # A block that began before the window may reach into it. A thread has
        # one block at a time, so only the last one before the window can.
        start = max(0, start - 1)
    entries = []
    for i in range(start, len(items)):
        t, w, end, seg, stack = items[i]
        if t > hi:
            break
        if kind == "offcpu":
            overlap = min(end, hi) - max(t, lo)
            if overlap <= 0:
                continue
            w = overlap
        elif t < lo:
            continue
        frames = profiles.trim_bootstrap(seg.frames(stack)) if stack else profiles.NO_STACK
        entries.append(([profiles.frame_label(f) for f in reversed(frames)], 1, w))
    return entries


def tree_json(root):
    """The call tree as nested dicts {name, samples, value, self_value, children}."""
    def node(n):
        return {"name": n.name, "samples": n.samples, "value": n.value, "self_value": n.self_value,
                "children": []}
    top = {"samples": root.samples, "value": root.value, "children": []}
    stack = [(c, top["children"]) for c in reversed(list(root.children.values()))]
    while stack:
        n, siblings = stack.pop()
        d = node(n)
        siblings.append(d)
        for c in reversed(list(n.children.values())):
            stack.append((c, d["children"]))
    return top


def overlapping(requests_by_thread, r):
    """How many other requests on r's thread were in flight during r."""
    lst = requests_by_thread.get((r["pid"], r["tid"]), [])
    lo, hi = r["start_ns"], r["start_ns"] + r["duration_ns"]
    n = 0
    for other in lst:
        if other is r:
            continue
        if other["start_ns"] > hi:
            break
        if other["start_ns"] + other["duration_ns"] >= lo:
            n += 1
    return n


# ------------------------------------------------------------------ histogram

def _edges(limit):
    """Bucket edges 0, 1us, 2us, 5us, 10us, 20us, 50us, ... up past limit."""
    edges, base = [0], 1000
    while edges[-1] <= limit:
        for m in (1, 2, 5):
            edges.append(base * m)
        base *= 10
    return edges


def histogram(durations):
    """1-2-5 buckets from 1 us, [{lo_ns, hi_ns, count}] from the first to the last non-empty one."""
    if not durations:
        return []
    edges = _edges(max(durations))
    counts = [0] * (len(edges) - 1)
    for d in durations:
        counts[bisect.bisect_right(edges, d) - 1] += 1
    used = [i for i, c in enumerate(counts) if c]
    return [{"lo_ns": edges[i], "hi_ns": edges[i + 1], "count": counts[i]} for i in range(used[0], used[-1] + 1)]


def summary(reqs):
    d = sorted(r["duration_ns"] for r in reqs)
    if not d:
        return {"count": 0}
    return {"count": len(d), "p50": percentile(d, 50), "p90": percentile(d, 90), "p99": percentile(d, 99),
            "max": d[-1], "mean": sum(d) // len(d), "bytes_in": sum(r["bytes_in"] for r in reqs),
            "bytes_out": sum(r["bytes_out"] for r in reqs),
            "connections": len({(r["pid"], r["connection"]) for r in reqs})}


# ------------------------------------------------------------------ command

def run(args):
    if args.slowest < 0:
        raise cli.UsageError("--slowest must be 0 or more")
    if not 0 <= args.min_pct <= 100:
        raise cli.UsageError("--min-pct must be between 0 and 100")
    trace = cli.open_trace(args.paths)
    if args.diff:
        from .. import requests_diff
        return requests_diff.diff_report(trace, args.role, args.json, None, args.min_pct)
    reqs = read_requests(trace, args.role)
    conns = read_connections(trace)
    by_thread = {}
    for r in reqs:
        by_thread.setdefault((r["pid"], r["tid"]), []).append(r)
        local, peer = conns.get((r["pid"], r["connection"]), ("", ""))
        r["local"], r["peer"] = local, peer

    slowest = sorted(reqs, key=lambda r: (-r["duration_ns"], r["start_ns"]))[:args.slowest]
    samples = read_samples(trace, {(r["pid"], r["tid"]) for r in slowest}) if slowest else {}
    for r in reqs:
        r["tree"] = None
    for r in slowest:
        r["concurrent"] = overlapping(by_thread, r)
        lo, hi = r["start_ns"], r["start_ns"] + r["duration_ns"]
        trees = {}
        for kind in KINDS:
            entries = window_entries(kind, samples[kind].get((r["pid"], r["tid"])), lo, hi)
            if entries:
                trees[kind] = calltree.build(entries)
        r["_trees"] = trees
        r["tree"] = {k: tree_json(t) for k, t in trees.items()}

    hist = {role: histogram([r["duration_ns"] for r in reqs if r["role"] == role])
            for role in sorted({r["role"] for r in reqs})}
    summ = {role: summary([r for r in reqs if r["role"] == role]) for role in hist}

    if args.json:
        doc = {"requests": [{k: v for k, v in r.items() if not k.startswith("_")} for r in reqs],
               "slowest": [reqs.index(r) for r in slowest], "histogram": hist, "summary": summ}
        # dumps, not dump: only dumps uses the C encoder (dump to a stream is pure Python).
        sys.stdout.write(json.dumps(doc, separators=(",", ":")))
        print()
        return cli.exit_status(trace)

    if not reqs:
        if not trace.segments:
            print("no readable segments")
        elif not any(True for _ in trace.batches({"socket.op"})):
            print("no socket events in the trace (FLIGHTREC_SOCKETS=0, or the program used no sockets)")
        else:
            print("no requests: no connection had a request/response exchange "
                  "(see docs/REQUESTS.md for what counts as one)")
        return cli.exit_status(trace)

    names = {}
    for t in trace.threads():
        if t.get("name"):
            names[(t["pid"], t["tid"])] = t["name"]
    t0 = trace.time_range()[0] or 0
    for role, s in summ.items():
        print("%d %s-side requests on %d connections: p50 %s  p90 %s  p99 %s  max %s  (%s in, %s out)" % (
            s["count"], role, s["connections"], format_ns(s["p50"]), format_ns(s["p90"]), format_ns(s["p99"]),
            format_ns(s["max"]), cli.format_bytes(s["bytes_in"]), cli.format_bytes(s["bytes_out"])))
    for role, buckets in hist.items():
        print()
        print("latency histogram (%s):" % role)
        peak = max(b["count"] for b in buckets) or 1
        for b in buckets:
            bar = "#" * int(round(40.0 * b["count"] / peak))
            print("  %9s .. %-9s %-40s %d" % (format_ns(b["lo_ns"]), format_ns(b["hi_ns"]), bar, b["count"]))
    if slowest:
        print()
        print("slowest %d request%s:" % (len(slowest), "" if len(slowest) == 1 else "s"))
    for i, r in enumerate(slowest, 1):
        key = (r["pid"], r["tid"])
        where = "%s <- %s" % (r["local"] or "?", r["peer"] or "?") if r["role"] == "server" else \
            "%s -> %s" % (r["local"] or "?", r["peer"] or "?")
        print()
        print("#%d %s request on conn %d (%s), pid %s tid %s%s, at +%.3fs: %s, %s in, %s out" % (
            i, r["role"], r["connection"], where, r["pid"], r["tid"],
            ' "%s"' % names[key] if key in names else "", (r["start_ns"] - t0) / 1e9,
            format_ns(r["duration_ns"]), cli.format_bytes(r["bytes_in"]), cli.format_bytes(r["bytes_out"])))
        if r["concurrent"]:
            print("   shared: %d other request%s in flight on this thread (event loop?); the samples below "
                  "belong to all of them" % (r["concurrent"], "" if r["concurrent"] == 1 else "s"))
        if not r["_trees"]:
            print("   no CPU, off-CPU or allocation samples on this thread inside the request")
            continue
        for kind in KINDS:
            root = r["_trees"].get(kind)
            if root is None:
                continue
            print("   %s (%d sample%s):" % (KIND_TITLES[kind], root.samples, "" if root.samples == 1 else "s"))
            for line in calltree.render(root, unit=KIND_UNITS[kind], min_pct=args.min_pct):
                print("   " + line)
    return cli.exit_status(trace)
