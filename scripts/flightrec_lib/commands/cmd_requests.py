"""requests: the request/response exchanges inferred from the recorded
socket activity (request_inference.py; docs/REQUESTS.md has the heuristic
and its limits): latency summary and histogram, and for the slowest requests a
call-tree summary of the CPU, off-CPU and allocation samples taken on the
handling thread inside the request's time window.

Samples are attributed by thread and time only. On a thread that serves
several connections at once (an event loop), request windows overlap; those
requests are marked "shared" with the number of other requests in flight on
the thread, and the samples in the overlap belong to all of them.

Memory does not grow with the requests (issue 29): they are summarised as
they are derived (RoleStats), the slowest kept in a bounded heap, and
`--json` lists them from a sorted spill file (spill_sort.py).
"""
import bisect
import heapq
import json
import sys

from .. import calltree, cli, downstream, profiles, request_inference
from ..request_inference import BYTES_IN, BYTES_OUT, CONN, DURATION, ENDPOINT, PID, ROLE, START, TID, TRACE
from ..spill_sort import SpillSort
from ..request_report import EDGES, request_dict, request_filter, tree_json
from ..request_samples import KIND_EVENTS, KINDS, read_samples, window_entries
from ..units import EXACT_TOTAL, Durations, format_ns, reset_exact_budget

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
    p.add_argument("--by", choices=("endpoint",),
                   help="one line per endpoint: count, latency percentiles, CPU, off-CPU, sampled allocations "
                        "and bytes per request, sorted by total time")
    p.add_argument("--tree", action="store_true",
                   help="per server endpoint, the downstream calls its requests made (to databases, caches, other "
                        "services), counted and timed: [# calls] wall ms | own ms | name (docs/REQUESTS.md)")
    p.add_argument("--endpoint", metavar="E",
                   help="only requests whose endpoint matches E (shell wildcards: 'GET /api/*')")
    p.add_argument("--trace-id", metavar="T",
                   help="the requests of W3C trace T (a prefix of the trace id, or an x-request-id): "
                        "their call trees and socket activity (FLIGHTREC_TRACE_CONTEXT=1)")
    cli.add_paths_argument(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------ reading

def read_connections(trace):
    """{(pid, conn): (local, peer)} from socket.open (the latest description)."""
    return request_inference.latest_connections(trace, ("local", "peer"))


def concurrency(trace, role, slowest, also=None):
    """[how many other requests were in flight on r's thread during r] for
    each r of slowest: a second pass over the requests of their processes,
    every one of which (of any role) also goes to also(r) when given."""
    counts = [0] * len(slowest)
    on_thread = {}
    for i, r in enumerate(slowest):
        on_thread.setdefault((r[PID], r[TID]), []).append((i, r))
    for x in request_inference.iter_requests(trace, "all" if also else role, {r[PID] for r in slowest}):
        if also is not None:
            also(x)
            if role != "all" and x[ROLE] != role:
                continue
        mine = on_thread.get((x[PID], x[TID]))
        if not mine:
            continue
        x_end = x[START] + x[DURATION]
        for i, r in mine:
            if x[START] <= r[START] + r[DURATION] and x_end >= r[START] and x != r:
                counts[i] += 1
    return counts


# ------------------------------------------------------------------ histogram

class RoleStats:
    """What the summary and histogram of one role need, kept as requests go
    by: counts, sums, the connections, 1-2-5 bucket counts, and the durations
    (exact up to EXACT_TOTAL over the command, then a histogram whose
    percentiles are within 0.8%: units.Durations)."""

    def __init__(self):
        self.durations = Durations(limit=EXACT_TOTAL)
        self.total_ns = self.bytes_in = self.bytes_out = 0
        self.connections = set()
        self.buckets = {}

    def add(self, r):
        d = r[DURATION]
        self.durations.add(d)
        self.total_ns += d
        self.bytes_in += r[BYTES_IN]
        self.bytes_out += r[BYTES_OUT]
        self.connections.add((r[PID], r[CONN]))
        i = bisect.bisect_right(EDGES, d) - 1
        self.buckets[i] = self.buckets.get(i, 0) + 1

    def histogram(self):
        """1-2-5 buckets from 1 us, [{lo_ns, hi_ns, count}] from the first to the last non-empty one."""
        if not self.buckets:
            return []
        return [{"lo_ns": EDGES[i], "hi_ns": EDGES[i + 1], "count": self.buckets.get(i, 0)}
                for i in range(min(self.buckets), max(self.buckets) + 1)]

    def summary(self):
        d = self.durations
        if not d.count:
            return {"count": 0}
        p50, p90, p99 = d.percentiles((50, 90, 99))
        out = {"count": d.count, "p50": p50, "p90": p90, "p99": p99, "max": d.max,
               "mean": self.total_ns // d.count, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
               "connections": len(self.connections)}
        if d.hist is not None:
            out["approximate"] = True
        return out


def _slowest_key(r):
    return (-r[DURATION], r[START], r[PID], r[CONN])


# ------------------------------------------------------------------ command

def run(args):
    if args.slowest < 0:
        raise cli.UsageError("--slowest must be 0 or more")
    if not 0 <= args.min_pct <= 100:
        raise cli.UsageError("--min-pct must be between 0 and 100")
    trace = cli.open_trace(args.paths)
    fleet = getattr(trace, "fleet", False)
    if args.diff:
        from .. import requests_diff
        if fleet:  # percentiles and members from the database (fleet_reports.py)
            from .. import fleet_reports
            return requests_diff.diff_report(trace, args.role, args.json, None, args.min_pct,
                                             fleet_reports.diff_groups, fleet_reports.read_samples)
        return requests_diff.diff_report(trace, args.role, args.json, None, args.min_pct)
    only = request_filter(args.endpoint, args.trace_id)
    if args.tree:
        if fleet:  # server requests with no downstream calls summed in ClickHouse (fleet_reports.py)
            from .. import fleet_reports
            rep = downstream_report(trace, att=fleet_reports.downstream_attribution(trace, args.endpoint,
                                                                                    args.trace_id))
        else:
            rep = downstream_report(trace, only)
        if args.json:
            json.dump(rep, sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
        else:
            print_downstream(rep)
        return cli.exit_status(trace)
    if args.by == "endpoint":
        if fleet:  # aggregated in ClickHouse (fleet_reports.py)
            from .. import fleet_reports
            rows = fleet_reports.by_endpoint(trace, args.role, args.endpoint, args.trace_id)
        else:
            rows = by_endpoint(trace, args.role, only)
        if args.json:
            json.dump({"endpoints": rows}, sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
        else:
            print_by_endpoint(rows)
        return cli.exit_status(trace)
    slowest_n = args.slowest
    if args.trace_id is not None:
        slowest_n = max(slowest_n, 20)  # every request of the trace, up to 20, with its trees
    if fleet:  # aggregated in ClickHouse (fleet_reports.py), formatted below as from files
        from .. import fleet_reports
        rep = fleet_reports.analyse(trace, args.role, slowest_n, args.endpoint, args.trace_id, listing=args.json)
    else:
        rep = analyse(trace, args.role, slowest_n, listing=args.json, only=only)
    if args.trace_id is not None and not rep["slowest"] and not args.json:
        print("no request with trace id or request id %r (recorded with FLIGHTREC_TRACE_CONTEXT=1?)" % args.trace_id)
        return cli.exit_status(trace)
    stats, slowest, details, hist, summ, conns = (rep["stats"], rep["slowest"], rep["details"], rep["histogram"],
                                                 rep["summary"], rep["conns"])
    listing, role_ids = rep["listing"], rep["role_ids"]

    if args.json:
        write_json(listing, list(role_ids), slowest, details, hist, summ, conns)
        return cli.exit_status(trace)

    if not stats:
        if not trace.segments:
            print("no readable segments")
        elif not any(True for _ in trace.batches({"socket.op", "socket.exchange"})):
            print("no socket events in the trace (FLIGHTREC_SOCKETS=0, or the program used no sockets)")
        else:
            print("no requests: no connection had a request/response exchange "
                  "(see docs/REQUESTS.md for what counts as one)")
        return cli.exit_status(trace)

    names = {}
    for t in trace.threads():
        if t.get("name"):
            names[(t["pid"], t["tid"])] = t["name"]
    t0 = getattr(trace, "mono_range", trace.time_range)()[0] or 0
    for role, s in summ.items():
        approx = "~" if s.get("approximate") else ""
        print("%d %s-side requests on %d connections: p50 %s  p90 %s  p99 %s  max %s  (%s in, %s out)" % (
            s["count"], role, s["connections"], approx + format_ns(s["p50"]), approx + format_ns(s["p90"]),
            approx + format_ns(s["p99"]), format_ns(s["max"]), cli.format_bytes(s["bytes_in"]),
            cli.format_bytes(s["bytes_out"])))
    if any(s.get("approximate") for s in summ.values()):
        print("(~: from a histogram of the durations, within 0.8%; there were too many to keep them all)")
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
    for i, (r, trees) in enumerate(details, 1):
        key = (r["pid"], r["tid"])
        where = "%s <- %s" % (r["local"] or "?", r["peer"] or "?") if r["role"] == "server" else \
            "%s -> %s" % (r["local"] or "?", r["peer"] or "?")
        print()
        print("#%d %s request%s on conn %d (%s), pid %s tid %s%s, at +%.3fs: %s, %s in, %s out" % (
            i, r["role"], " " + cli.escape_text(r["endpoint"]) if r.get("endpoint") else "", r["connection"], where,
            r["pid"], r["tid"], ' "%s"' % names[key] if key in names else "", (r["start_ns"] - t0) / 1e9,
            format_ns(r["duration_ns"]), cli.format_bytes(r["bytes_in"]), cli.format_bytes(r["bytes_out"])))
        tr = r.get("trace")
        if tr:
            print("   trace %s parent span %s%s%s" % (
                tr.get("trace_id", "-"), tr.get("parent_span_id", "-"), " sampled" if tr.get("sampled") else "",
                ", request id " + cli.escape_text(tr["request_id"]) if tr.get("request_id") else ""))
        if r["concurrent"]:
            print("   shared: %d other request%s in flight on this thread (event loop?); the samples below "
                  "belong to all of them" % (r["concurrent"], "" if r["concurrent"] == 1 else "s"))
        ds = r.get("downstream")
        if ds is not None and (ds["calls"] or ds["ambiguous_calls"]):
            print("   downstream calls (own = wall minus the time waiting on them):")
            for line in downstream.render_request(ds, cli.escape_text(r.get("endpoint") or "request")):
                print("   " + line)
        if not trees:
            print("   no CPU, off-CPU or allocation samples on this thread inside the request")
            continue
        for kind in KINDS:
            root = trees.get(kind)
            if root is None:
                continue
            print("   %s (%d sample%s):" % (KIND_TITLES[kind], root.samples, "" if root.samples == 1 else "s"))
            for line in calltree.render(root, unit=KIND_UNITS[kind], min_pct=args.min_pct):
                print("   " + line)
    return cli.exit_status(trace)


def analyse(trace, role="all", slowest_n=5, listing=False, only=None):
    """The requests report as data (the viewer shows it, run prints it):
    {"stats": {role: RoleStats}, "slowest": [request tuples], "details":
    [(request dict as --json lists it, {kind: call tree})], "histogram",
    "summary" (per role), "conns", and with listing=True "listing" (the
    sorted spill of every request, which the caller closes) and "role_ids"}."""
    conns = read_connections(trace)

    # One pass over the requests, holding none of them: the summaries and
    # histograms, the N slowest, and for --json every request as a line of
    # a sorted spill (spill_sort.py).
    reset_exact_budget()
    stats = {}
    listing = SpillSort(7, prefix="flightrec-requests-") if listing else None
    role_ids = {}  # a role's text may hold anything (older traces recorded it): listed by number

    def tap():
        for r in request_inference.iter_requests(trace, role):
            if only is not None and not only(r):
                continue
            st = stats.get(r[ROLE])
            if st is None:
                st = stats[r[ROLE]] = RoleStats()
            st.add(r)
            if listing is not None:
                rid = role_ids.setdefault(r[ROLE], str(len(role_ids)))
                listing.add((r[START], r[PID], r[CONN], r[TID], r[DURATION], r[BYTES_IN], r[BYTES_OUT],
                             json.dumps([rid, r[ENDPOINT], r[TRACE]], separators=(",", ":"))))
            yield r

    if slowest_n:
        slowest = heapq.nsmallest(slowest_n, tap(), key=_slowest_key)
    else:
        slowest = []
        for _ in tap():
            pass
    # What each slow server request waited on (downstream.py): the client
    # exchanges of their threads are taken in the same pass.
    served = [r for r in slowest if r[ROLE] == "server"]
    slow_threads = {(r[PID], r[TID]) for r in served}
    clients = downstream.ClientCollector(slow_threads)
    in_flight = concurrency(trace, role, slowest, clients.add if served else None) if slowest else []
    waited = {}
    if clients.clients:  # else none of them waited on anything
        waited = downstream.attribute(trace, only=lambda r: False, keep=[downstream.request_key(r) for r in served],
                                      threads=slow_threads, clients=clients.clients)["requests"]
    windows = {}
    for r in slowest:
        windows.setdefault((r[PID], r[TID]), []).append((r[START], r[START] + r[DURATION]))
    samples = read_samples(trace, windows) if slowest else {}
    details = []  # per slowest request: (dict as --json lists it, {kind: call tree})
    for r, n in zip(slowest, in_flight):
        lo, hi = r[START], r[START] + r[DURATION]
        trees = {}
        for kind in KINDS:
            entries = window_entries(kind, samples[kind].get((r[PID], r[TID])), lo, hi)
            if entries:
                trees[kind] = calltree.build(entries)
        d = request_dict(r, conns)
        d["tree"] = {k: tree_json(t) for k, t in trees.items()}
        d["concurrent"] = n
        if r[ROLE] == "server":
            d["downstream"] = waited.get(downstream.request_key(r)) or downstream.no_calls(r)
        details.append((d, trees))

    hist = {name: stats[name].histogram() for name in sorted(stats)}
    summ = {name: stats[name].summary() for name in hist}

    return {"stats": stats, "slowest": slowest, "details": details, "histogram": hist, "summary": summ,
            "conns": conns, "listing": listing, "role_ids": role_ids}


def write_json(listing, roles, slowest, details, hist, summ, conns):
    """{"requests": [every request, by start], "slowest": [their indexes],
    "histogram", "summary"}, written as the spill is read back."""
    out = sys.stdout
    detail_of = {r: d for r, (d, _) in zip(slowest, details)}
    index_of = {}
    out.write('{"requests":[')
    for i, (start, pid, conn, tid, dur, bin_, bout, extra) in enumerate(listing.sorted()):
        role, endpoint, tr = json.loads(extra)
        r = (start, pid, conn, tid, roles[int(role)], dur, bin_, bout, endpoint, tuple(tr) if tr else None)
        d = detail_of.get(r)
        if d is None:
            d = request_dict(r, conns)
        else:
            index_of[r] = i
        # dumps, not dump: only dumps uses the C encoder (dump to a stream is pure Python).
        out.write(("," if i else "") + json.dumps(d, separators=(",", ":")))
    listing.close()
    out.write('],"slowest":' + json.dumps([index_of[r] for r in slowest], separators=(",", ":")))
    out.write(',"histogram":' + json.dumps(hist, separators=(",", ":")))
    out.write(',"summary":' + json.dumps(summ, separators=(",", ":")) + "}\n")


# ------------------------------------------------------------------ downstream tree

def downstream_report(trace, only=None, att=None):
    """{"endpoints": [per server endpoint: requests, wall/own ns, downstream
    calls by peer and endpoint with calls per request, ambiguous calls], by
    total wall time; "calls": the client exchanges by outcome}. att:
    downstream.attribute's result when the caller made it (--clickhouse)."""
    if att is None:
        att = downstream.attribute(trace, only=only)
    rows = [t.as_dict(ep) for ep, t in att["endpoints"].items()]
    rows.sort(key=lambda x: (-x["wall_ns"], x["endpoint"]))
    return {"endpoints": rows, "calls": att["totals"]}


def print_downstream(rep):
    rows, tot = rep["endpoints"], rep["calls"]
    if not rows:
        print("no server-side requests (see docs/REQUESTS.md for what counts as one)")
        return
    print("downstream calls per endpoint (wall and own summed over the requests; own = wall minus the time "
          "waiting on downstream calls):")
    print()
    print(downstream.HEADER)
    for row in rows:
        for line in downstream.render_endpoint(row, cli.escape_text):
            print(line)
    print()
    print("client-side exchanges: %d; attributed to a request %d, ambiguous %d (several requests in flight on "
          "the thread), outside any request %d, on threads that served none %d" % (
              tot["client_calls"], tot["attributed"], tot["ambiguous"], tot["outside"], tot["other_thread"]))


# ------------------------------------------------------------------ by endpoint

def by_endpoint(trace, role="all", only=None):
    """[{role, endpoint, count, p50, p90, p99, max, total_ns, cpu_ns, offcpu_ns,
    alloc_bytes (sampled, scaled), bytes_in, bytes_out (all per request but
    count and total_ns)}], by total time. Samples count for the request in
    flight on their thread at their time (on an event loop's thread, where
    requests overlap, for the one that began last). Memory: a window per
    request (issue 41 asks for every request's share)."""
    reset_exact_budget()
    groups = {}   # (role, endpoint) -> [Durations, total, bytes_in, bytes_out, cpu, offcpu, alloc]
    windows = {}  # (pid, tid) -> [(start, end, group key)]
    for r in request_inference.iter_requests(trace, role):
        if only is not None and not only(r):
            continue
        key = (r[ROLE], r[ENDPOINT] or "(unnamed)")
        g = groups.get(key)
        if g is None:
            g = groups[key] = [Durations(limit=EXACT_TOTAL), 0, 0, 0, 0, 0, 0]
        g[0].add(r[DURATION])
        g[1] += r[DURATION]
        g[2] += r[BYTES_IN]
        g[3] += r[BYTES_OUT]
        windows.setdefault((r[PID], r[TID]), []).append((r[START], r[START] + r[DURATION], key))
    index = {}
    for k, ws in windows.items():
        ws.sort()
        index[k] = ([w[0] for w in ws], ws)
    if index:
        pids = {k[0] for k in index}
        for kind, slot in (("cpu", 4), ("offcpu", 5), ("alloc", 6)):
            for b in trace.batches({KIND_EVENTS[kind]}):
                pid = b.segment.pid
                if pid not in pids:
                    continue
                if kind == "alloc":
                    cols = b.columns_named(["time", "tid", "size", "sample_bytes"])
                else:
                    cols = b.columns_named(["time", "tid", "period_ns" if kind == "cpu" else "duration_ns"])
                if cols is None:
                    continue
                for row in zip(*cols):
                    ix = index.get((pid, row[1]))
                    if ix is None:
                        continue
                    t = row[0]
                    i = bisect.bisect_right(ix[0], t) - 1
                    if i < 0:
                        continue
                    lo, hi, key = ix[1][i]
                    if t > hi:
                        continue
                    if kind == "alloc":
                        w = profiles.alloc_weight(row[2], row[3])[0]
                    elif kind == "offcpu":
                        w = max(0, min(t + row[2], hi) - t)  # the part of the block inside the request
                    else:
                        w = row[2]
                    groups[key][slot] += w
    rows = []
    for (rl, ep), (d, total, bin_, bout, cpu, off, alloc) in groups.items():
        n = d.count
        p50, p90, p99 = d.percentiles((50, 90, 99))
        row = {"role": rl, "endpoint": ep, "count": n, "p50": p50, "p90": p90, "p99": p99, "max": d.max,
               "total_ns": total, "cpu_ns": cpu // n, "offcpu_ns": off // n, "alloc_bytes": int(alloc // n),
               "bytes_in": bin_ // n, "bytes_out": bout // n}
        if d.hist is not None:
            row["approximate"] = True
        rows.append(row)
    rows.sort(key=lambda x: (-x["total_ns"], x["role"], x["endpoint"]))
    return rows


def print_by_endpoint(rows):
    if not rows:
        print("no requests (see docs/REQUESTS.md for what counts as one)")
        return
    print("%-6s %-36s %8s %9s %9s %9s %9s %9s %9s %9s %9s %9s" % (
        "role", "endpoint", "count", "p50", "p90", "p99", "max", "cpu/req", "offcpu/req", "alloc/req",
        "in/req", "out/req"))
    for r in rows:
        approx = "~" if r.get("approximate") else ""
        print("%-6s %-36s %8d %9s %9s %9s %9s %9s %9s %9s %9s %9s" % (
            r["role"], cli.escape_text(r["endpoint"]), r["count"], approx + format_ns(r["p50"]),
            approx + format_ns(r["p90"]), approx + format_ns(r["p99"]), format_ns(r["max"]), format_ns(r["cpu_ns"]),
            format_ns(r["offcpu_ns"]), cli.format_bytes(r["alloc_bytes"]), cli.format_bytes(r["bytes_in"]),
            cli.format_bytes(r["bytes_out"])))
    if any(r.get("approximate") for r in rows):
        print("(~: from a histogram of the durations, within 0.8%)")
