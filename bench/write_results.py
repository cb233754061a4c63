#!/usr/bin/python3
"""Writes bench/RESULTS.md and the overhead plot from the raw outputs of a
`make bench` run (RESULTS_DIR: machine.json, macro.json, the micro
benchmarks' text, capture_costs.json, trace_figures.json,
perf_profile.json, pinned/macro.json). Everything in the document comes
from those files; a missing file shows as "not run". Exits 1 after
writing if any macro run failed.
    write_results.py RESULTS_DIR OUT.md OUT.png
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from macro import stats  # noqa: E402

GOAL_CPU, GOAL_RPS = 1.02, 0.98


# ---------------------------------------------------------------- loading

def load_json(d, name):
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def load_text(d, name):
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        return f.read()


def socket_hook_ns(text, kind="send/recv"):
    """(ns added per recorded socket call on the calling thread, how measured).
    sock_bench's in-process comparison (hooked vs libc direct, per call) when
    it prints one: the `kind` column ("send/recv": a blocking socket,
    "nonblock": a non-blocking one), its median flavour if there is one; else,
    for "send/recv", its process-level line (per call, from pairs)."""
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        if "added ns per call" not in line:
            continue
        header = next((h for h in lines[i:i + 5] if "send/recv fast" in h or "send/recv med" in h), None)
        row = next((r for r in lines[i:i + 9] if r.strip().startswith("preloaded, recording")), None)
        if not header or not row:
            break
        cols = re.split(r"\s{2,}", header.strip())
        vals = re.findall(r"-?\d+\.\d+", row)
        want = [j for j, c in enumerate(cols) if kind in c]
        pick = next((j for j in want if "med" in cols[j]), want[0] if want else None)
        if pick is not None and pick < len(vals):
            return float(vals[pick]), "in-process, hooked vs libc direct, column '%s'" % cols[pick]
        break
    if kind != "send/recv":
        return None, "not measured"
    v = grab(text, r"recorded socket call: \+?(-?[\d.]+) ns on the calling thread")
    return v, "process level, preloaded vs plain"


def grab(text, pattern, group=1, conv=float):
    if not text:
        return None
    m = re.search(pattern, text, re.M)
    return conv(m.group(group)) if m else None


# ---------------------------------------------------------------- formatting

def fx(s, digits=2):
    """A ratio summary as '1.23× (1.10–1.30)'."""
    if not s:
        return "–"
    if s["n"] == 1:
        return "%.*f×" % (digits, s["median"])
    return "%.*f× (%.*f–%.*f)" % (digits, s["median"], digits, s["lo"], digits, s["hi"])


def num(v, fmt="%.2f", missing="n/a"):
    return missing if v is None else fmt % v


def human_bytes(v):
    if v is None:
        return "–"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return "%.1f %s" % (v / size, unit)
    return "%.0f B" % v


def mib(kb):
    return kb / 1024.0


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def yes_no(ok):
    return "–" if ok is None else ("**yes**" if ok else "**no**")


# ---------------------------------------------------------------- macro tables

def side_list(macro):
    return [s["name"] for s in macro["sides"]]


def labels(macro):
    return {s["name"]: s["label"] for s in macro["sides"]}


def rss_cell(runs, w, side, key):
    base = stats.absolute(runs, w, "plain", key)
    if side == "plain":
        return "%.1f MiB" % mib(base["median"]) if base else "–"
    d = stats.delta(runs, w, side, key)
    return "%+.1f MiB" % mib(d["median"]) if d else "–"


def drops_cell(runs, w, side):
    d = stats.absolute(runs, w, side, stats.drops)
    e = stats.absolute(runs, w, side, stats.events)
    if not d or not e:
        return ""
    return "%d of %d" % (d["median"], e["median"] + d["median"])


def server_table(macro, w, out):
    runs = macro["runs"]
    plain = lambda key: stats.absolute(runs, w, "plain", key)  # noqa: E731
    p_cpu, p_rps, p_p99 = plain("cpu_us_per_req"), plain("rps"), plain("p99_ms")
    out.append("| side | CPU / request | throughput | p99 latency | peak RSS | trace bytes/s | trace bytes/request "
               "| flightrec drops (of events) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for side in side_list(macro):
        if side == "plain":
            out.append("| plain | %s µs | %s req/s | %s ms | %s | – | – | |" % (
                num(p_cpu and p_cpu["median"]), num(p_rps and p_rps["median"], "%.0f"),
                num(p_p99 and p_p99["median"], "%.3f"), rss_cell(runs, w, side, "hwm_kb")))
            continue
        bs = stats.absolute(runs, w, side, "trace_bytes_per_s")
        br = stats.absolute(runs, w, side, "trace_bytes_per_req")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            side, fx(stats.ratio(runs, w, side, "cpu_us_per_req")), fx(stats.ratio(runs, w, side, "rps")),
            fx(stats.ratio(runs, w, side, "p99_ms")), rss_cell(runs, w, side, "hwm_kb"),
            human_bytes(bs and bs["median"]) + "/s" if bs else "–", num(br and br["median"], "%.1f"),
            drops_cell(runs, w, side)))


def server_detail_table(macro, w, out):
    runs = macro["runs"]
    out.append("| side | server process only, CPU / request | whole life (start-up and exit too), CPU | "
               "flightrec's threads, share of the server's CPU | RSS of the side's processes |")
    out.append("|---|---|---|---|---|")
    for side in side_list(macro):
        if side == "plain":
            continue
        share = stats.absolute(runs, w, side, stats.recorder_share)
        out.append("| %s | %s | %s | %s | %s |" % (
            side, fx(stats.ratio(runs, w, side, "server_cpu_us_per_req")),
            fx(stats.ratio(runs, w, side, "total_cpu_s")),
            "%.1f%%" % (100 * share["median"]) if share else "–", rss_cell(runs, w, side, "tree_rss_kb")))


def server_heading(title, wl, out):
    """A server workload's section heading and the commands that ran it."""
    out += ["## " + title, ""]
    out += ["    %-7s %s" % (k + ":", wl[k]) for k in ("server", "client", "stop")]
    out.append("")


def server_tables(macro, w, out):
    """Server workload w's summary table, then its detail table."""
    server_table(macro, w, out)
    out.append("")
    server_detail_table(macro, w, out)
    out.append("")


def redis_tests_table(macro, out):
    runs = macro["runs"]
    tests = ["SET", "GET", "LPUSH", "LPOP"]
    out.append("| side | " + " | ".join("%s req/s" % t for t in tests) + " | " +
               " | ".join("%s p99" % t for t in tests) + " |")
    out.append("|---|" + "---|" * (2 * len(tests)))
    for side in side_list(macro):
        if side == "plain":
            cells = []
            for key in ("rps", "p99_ms"):
                for t in tests:
                    s = stats.absolute(runs, "redis", side, lambda m, t=t, key=key: m["tests"][t][key])
                    cells.append(num(s and s["median"], "%.0f" if key == "rps" else "%.3f ms"))
        else:
            cells = [fx(stats.ratio(runs, "redis", side, lambda m, t=t, key=key: m["tests"][t][key]))
                     for key in ("rps", "p99_ms") for t in tests]
        out.append("| %s | %s |" % (side, " | ".join(cells)))


def program_table(macro, w, out):
    runs = macro["runs"]
    out.append("| side | wall | CPU | work loop wall | work loop CPU | CPU outside the work loop | peak RSS | trace bytes "
               "| trace bytes/s |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    outside = lambda m: 1e3 * (m["cpu_s"] - m["inner_cpu_s"])  # noqa: E731  start-up and exit, ms
    for side in side_list(macro):
        if side == "plain":
            vals = [stats.absolute(runs, w, side, k) for k in ("wall_s", "cpu_s", "inner_wall_s", "inner_cpu_s")]
            o = stats.absolute(runs, w, side, outside)
            out.append("| plain | %s | %s ms | %s | – | – |" % (
                " | ".join(num(v and v["median"], "%.3f s") for v in vals), num(o and o["median"], "%.0f"),
                rss_cell(runs, w, side, "maxrss_kb")))
            continue
        tb = stats.absolute(runs, w, side, "trace_bytes")
        tbs = stats.absolute(runs, w, side, "trace_bytes_per_s")
        o = stats.delta(runs, w, side, outside)
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            side, fx(stats.ratio(runs, w, side, "wall_s")), fx(stats.ratio(runs, w, side, "cpu_s")),
            fx(stats.ratio(runs, w, side, "inner_wall_s")), fx(stats.ratio(runs, w, side, "inner_cpu_s")),
            "%+.0f ms" % o["median"] if o else "–", rss_cell(runs, w, side, "maxrss_kb"), human_bytes(tb and tb["median"]),
            human_bytes(tbs and tbs["median"]) + "/s" if tbs else "–"))


ESTIMATED = (("redis", "cpu_us_per_req", "redis CPU / request"), ("nginx", "cpu_us_per_req", "nginx CPU / request"),
             ("cpu", "inner_cpu_s", "CPU-bound work loop CPU"), ("alloc", "inner_cpu_s", "allocation-heavy work loop CPU"))


def estimators_table(macro, out):
    """The headline CPU ratios three ways; where they disagree, the run cannot
    resolve the difference."""
    runs = macro["runs"]
    cols = [e for e in ESTIMATED if e[0] in macro["workloads"]]
    out.append("| side | " + " | ".join(c[2] for c in cols) + " |")
    out.append("|---|" + "---|" * len(cols))
    for side in side_list(macro):
        if side == "plain":
            continue
        cells = []
        for w, key, _ in cols:
            a = stats.ratio(runs, w, side, key)
            b = stats.ratio_vs_both_plains(runs, w, side, key) if side != "plain-again" else None
            c = stats.ratio_of_medians(runs, w, side, key)
            cells.append(" / ".join(num(x and x["median"], "%.2f", "–") for x in (a, b, c)))
        out.append("| %s | %s |" % (side, " | ".join(cells)))


def per_event_costs(macro):
    """From the servers' flightrec-defaults runs, {workload: (flush thread µs
    per recorded event, flush thread share, sampler thread share of the
    server's CPU)}. The sampler's work is per perf record read, most of
    which never become events (short off-CPU blocks, losses), so it is
    given as a share, not per event."""
    out = {}
    for w in ("redis", "nginx"):
        flush, fshare, sshare = [], [], []
        for r in macro["runs"]:
            if r["workload"] != w or r["side"] != "fr-default":
                continue
            m = r["metrics"]
            th, ev = m.get("recorder_thread_cpu_s", {}), m.get("flightrec", {}).get("events", {})
            n = sum(ev.values())
            if n:
                flush.append(1e6 * th.get("flightrec-flush", 0.0) / n)
            if m.get("server_cpu_s"):
                fshare.append(th.get("flightrec-flush", 0.0) / m["server_cpu_s"])
                sshare.append(th.get("flightrec-sampl", 0.0) / m["server_cpu_s"])
        if flush:
            out[w] = (med(flush), med(fshare), med(sshare))
    return out


GOAL_ALLOC_DEFAULT, GOAL_ALLOC_CORE, GOAL_PACED_P99 = 1.05, 1.01, 1.10


def issue28_rows(macro, paced, alloc_text, out):
    """Issue #28's allocation-heavy and paced-latency rows: alloc_work's
    whole-process CPU from the macro run, and run_paced_latency.py's
    p99/p99.9 of redis answering a paced client."""
    rows = []
    if macro and "alloc" in macro["workloads"]:
        runs = macro["runs"]
        for side, goal, what in (("fr-default", GOAL_ALLOC_DEFAULT, "all defaults"),
                                 ("fr-core", GOAL_ALLOC_CORE, "every feature off")):
            r = stats.ratio(runs, "alloc", side, "cpu_s")
            rows.append("| `alloc_work`, %s: process CPU ≤ %.2f× plain | %s (macro run, `%s`) | %s |" % (
                what, goal, fx(r, 3), side, yes_no(r and r["median"] <= goal)))
    idle = grab(alloc_text, r"multi-threaded mode \(plain with one idle thread\): ([+-]?[\d.]+) ns \(64B\)")
    if idle is not None:
        rows.append("| glibc's multi-threaded malloc (any second thread, e.g. the flush thread), malloc(64)+free "
                    "pair | %+.2f ns (`alloc_bench`, plain with one idle thread) | (what no preload can avoid) |" % idle)
    if paced:
        m, r = paced["median"], paced["ratios"]
        rows.append("| redis at %d requests/s on one connection (paced, not saturated): p99 ≤ %.2f× plain | "
                    "p99 %.1f µs plain, %.1f µs flightrec: **%.3f×**; p99.9 %.1f / %.1f µs: %.3f×; p50 %.3f× "
                    "(median of %d interleaved rounds of %d s, `run_paced_latency.py`) | %s |" % (
                        paced["rate"], GOAL_PACED_P99, m["plain"]["p99_us"], m["fr-default"]["p99_us"],
                        r.get("p99_us", 0), m["plain"]["p999_us"], m["fr-default"]["p999_us"], r.get("p999_us", 0),
                        r.get("p50_us", 0), paced["rounds"], paced["seconds"],
                        yes_no(r.get("p99_us", 99) <= GOAL_PACED_P99)))
    if not rows:
        return
    out.append("## Allocation-heavy code and paced latency (issue #28)")
    out.append("")
    out.append("| goal | measured | met |")
    out.append("|---|---|---|")
    out.extend(rows)
    out.append("")
    if paced:
        out.append("Paced latency: `redis-server` (as in the macro run) answering `bench/micro/paced_client` "
                   "(SET/GET alternately, one connection, open loop at a fixed rate, the first second not "
                   "measured), plain and under every default, a fresh server per run, the order alternating "
                   "each round. Latency is from the send to the whole reply; at this rate a request waits for "
                   "nothing but the server's thread (and, on a loaded machine, for a CPU: see the load "
                   "averages above), so a slower tail is a stall on that thread.")
        out.append("")


# ---------------------------------------------------------------- plot

def plot(macro, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = macro["runs"]
    series = [("redis", "cpu_us_per_req", "redis: CPU / request"),
              ("nginx", "cpu_us_per_req", "nginx: CPU / request"),
              ("cpu", "cpu_s", "CPU-bound program: CPU"),
              ("alloc", "cpu_s", "allocation-heavy program: CPU")]
    series = [s for s in series if s[0] in macro["workloads"]]
    sides = [s for s in side_list(macro) if s != "plain"]
    fig, ax = plt.subplots(figsize=(10, 0.9 * len(sides) + 1.8))
    height = 0.8 / max(len(series), 1)
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2"]
    for i, (w, key, label) in enumerate(series):
        ys, meds, lo, hi = [], [], [], []
        for j, side in enumerate(sides):
            s = stats.ratio(runs, w, side, key)
            if not s:
                continue
            ys.append(j + i * height - 0.4 + height / 2)
            meds.append(s["median"])
            lo.append(s["median"] - s["lo"])
            hi.append(s["hi"] - s["median"])
        ax.barh(ys, [m - 1 for m in meds], left=1, height=height, color=colors[i % len(colors)], label=label,
                xerr=[lo, hi], error_kw={"elinewidth": 0.8, "capsize": 2})
    ax.set_yticks(range(len(sides)))
    ax.set_yticklabels(sides)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(GOAL_CPU, color="grey", linestyle="--", linewidth=0.8, label="goal for redis (1.02×)")
    ax.set_xlabel("× plain (median of per-round ratios; whiskers: lowest and highest round), log scale")
    ax.set_title("Overhead per side (%d interleaved rounds)" % macro["rounds"])
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- document

def main():
    d, md_path, png_path = sys.argv[1], sys.argv[2], sys.argv[3]
    machine = load_json(d, "machine.json") or {}
    macro = load_json(d, "macro.json")
    pinned = load_json(d, os.path.join("pinned", "macro.json"))
    capture = load_json(d, "capture_costs.json")
    tf = load_json(d, "trace_figures.json")
    perf = load_json(d, "perf_profile.json")
    paced = load_json(d, "paced_latency.json")
    texts = {k: load_text(d, k + ".txt") for k in ("runtime", "sockets", "alloc", "cpu", "capture", "idle",
                                                   "short", "trace_figures", "perf_profile", "settings", "pg_memory",
                                                   "server_memory", "redis_memory")}
    out = []
    add = out.append

    add("# flightrec benchmark results")
    add("")
    add("Regenerated by `make bench` (%s) — do not edit by hand; the raw outputs are in `build/bench/results/`. "
        "Every figure below was measured in that one run; the commands are listed with each table. "
        "Issue #8 has the goals." % (texts["settings"] or "settings unknown").strip().replace("make bench: ", ""))
    add("")

    # -- machine
    add("## Machine")
    add("")
    la = machine.get("loadavg_at_start") or []
    add("| | |")
    add("|---|---|")
    add("| date | %s |" % machine.get("date_utc", "?"))
    add("| CPU | %s × %s (`nproc`) |" % (machine.get("cpu_model", "?"), machine.get("nproc", "?")))
    add("| kernel | %s (perf_event_paranoid %s, run as uid %s) |" % (
        machine.get("kernel", "?"), machine.get("perf_event_paranoid", "?"), machine.get("uid", "?")))
    add("| memory | %.1f GiB |" % (machine.get("mem_total_kb", 0) / 1048576.0))
    add("| load average at start (1, 5, 15 min) | %s |" % ", ".join(la))
    if macro and macro["runs"]:
        loads = [r["loadavg"][0] for r in macro["runs"]]
        add("| 1-min load average during the macro runs | min %.2f, median %.2f, max %.2f |" % (
            min(loads), statistics.median(loads), max(loads)))
    add("| flightrec | commit %s |" % machine.get("flightrec_commit", "?"))
    pk = machine.get("packages", {})
    add("| tools | %s |" % ", ".join("%s %s" % kv for kv in sorted(pk.items())))
    add("")
    add("**The machine is shared**: two vCPUs, with other engineers' builds and tests running during the "
        "whole benchmark (see the load averages: anything above 2 means runnable work was waiting for a CPU). "
        "Absolute figures (requests/s, latencies) mostly measure that contention and vary from run to run. "
        "The comparisons are built to survive it: every side runs once per round, in a new shuffled order "
        "each round, each ratio is taken inside its round (side / plain, minutes apart) and the "
        "tables give the median over rounds with the lowest and highest round in brackets. Wide brackets "
        "mean the neighbours moved the figure more than the side did.")
    add("")

    # -- goals
    add("## Goals (issue #8)")
    add("")
    add("| goal | measured | met |")
    add("|---|---|---|")
    if macro:
        runs = macro["runs"]
        cpu_r = stats.ratio(runs, "redis", "fr-default", "cpu_us_per_req")
        rps_r = stats.ratio(runs, "redis", "fr-default", "rps")
        both = stats.ratio_vs_both_plains(runs, "redis", "fr-default", "cpu_us_per_req")
        share = stats.absolute(runs, "redis", "fr-default", stats.recorder_share)
        floor = 1 / (1 - share["median"]) if share else None  # the recorder's threads alone
        met = None if cpu_r is None else (cpu_r["median"] <= GOAL_CPU and (floor is None or floor <= GOAL_CPU))
        add("| redis-server, all defaults: CPU per request ≤ %.2f× plain | %s per round against plain; %s against "
            "both plain runs; within each run flightrec's own threads took %s of the server's CPU, i.e. at "
            "least %s before counting the hooks on redis's thread | %s |" % (
                GOAL_CPU, fx(cpu_r, 3), num(both and both["median"], "%.3f×"),
                num(share and 100 * share["median"], "%.1f%%"), num(floor, "%.3f×"), yes_no(met)))
        add("| redis-server, all defaults: throughput ≥ %.2f× plain | %s | %s |" % (
            GOAL_RPS, fx(rps_r, 3), yes_no(rps_r and rps_r["median"] >= GOAL_RPS)))
        ht = stats.ratio(runs, "redis", "heaptrack", "cpu_us_per_req")
        gp = stats.ratio(runs, "redis", "gperftools", "cpu_us_per_req")
        add("| heaptrack and gperftools measured in the same run (CPU per request) | heaptrack %s, gperftools %s "
            "| %s |" % (fx(ht), fx(gp), yes_no(bool(ht and gp))))
    ring = grab(texts["runtime"], r"median ([\d.]+) ns per push")
    add("| ring push ≤ 10 ns | %s ns (median batch, `ring_bench`) | %s |" % (num(ring), yes_no(
        None if ring is None else ring <= 10)))
    unsampled = grab(texts["alloc"], r"unsampled ([+-]?[\d.]+) ns \(64B\)")
    add("| unsampled malloc/free ≤ 2 ns added | %s ns per malloc(64)+free pair (`alloc_bench`) | %s |" % (
        num(unsampled, "%+.2f"), yes_no(None if unsampled is None else unsampled <= 2)))
    sock, sock_how = socket_hook_ns(texts["sockets"])
    nb, nb_how = socket_hook_ns(texts["sockets"], "nonblock")
    add("| socket hook ≤ 30 ns added | non-blocking socket (servers' sockets: the hook makes the system call, "
        "`preload/sockets/socket_direct.h`): %s ns (%s); blocking socket (through libc's wrapper): %s ns (%s); per "
        "recorded call on the calling thread, `sock_bench` | non-blocking %s, blocking %s |" % (
            num(nb, "%+.1f"), nb_how, num(sock, "%+.1f"), sock_how,
            yes_no(None if nb is None else nb <= 30), yes_no(None if sock is None else sock <= 30)))
    if tf:
        op = tf["by_type"].get("socket.op")
        add("| ≤ 3 bytes per socket event on disk | %s bytes per `socket.op` event (redis trace, block header "
            "included) | %s |" % (num(op and op["bytes_per_event"]), yes_no(op and op["bytes_per_event"] <= 3)))
        rate = tf["decode"]["library_events_per_s"]
        add("| decode ≥ 1M events/s | %.2fM events/s (dump library, every column of every block) | %s |" % (
            rate / 1e6, yes_no(rate >= 1e6)))
    short_added = grab(texts["short"], r"fork\+exec wall plain [\d.]+ ms, flightrec defaults [\d.]+ ms: \+([-\d.]+) ms")
    short_segs = grab(texts["short"], r"fork\+exec segments: ([\d.]+) sealed segment files per program image")
    if short_added is not None and short_segs is not None:
        add("| fork+exec of /bin/true from a shell: ≤ +0.5 ms and ≤ 1 segment per program image (issue #28) | "
            "%+.3f ms per process, %.2f segments per image (`run_short_lived.py`) | %s |" % (
                short_added, short_segs, yes_no(short_added <= 0.5 and short_segs <= 1.0)))
    add("")

    # -- issue #28 rows
    issue28_rows(macro, paced, texts["alloc"], out)

    # -- plot
    if macro and macro["runs"]:
        plot(macro, png_path)
        add("![overhead per side](%s)" % os.path.basename(png_path))
        add("")

    # -- sides
    if macro:
        add("## Sides")
        add("")
        add("Each workload runs under every side; `$OUT` is the run's own output directory, whose size after "
            "the run is the side's trace bytes.")
        add("")
        add("| side | what | added to the command |")
        add("|---|---|---|")
        for s in macro["sides"]:
            add("| %s | %s | `%s` |" % (s["name"], s["label"], s["command"]))
        add("")
        if any(s["name"] == "plain-again" for s in macro["sides"]):
            add("`plain-again` is plain measured as if it were a tool: its ratios would be 1.00 on a quiet machine, "
                "so their spread is the noise floor every other row sits on. A side whose range overlaps "
                "`plain-again`'s cannot be told apart from no tool in this run.")
            add("")
        add("Settings are passed with `env` right before the measured program, never to a wrapper in front of "
            "it. Off-CPU sampling rides on the CPU sampler (it has no side of its own): its cost is "
            "`fr-cpu+offcpu` minus `fr-cpu`. `fr-core` is the runtime with every feature off (thread "
            "registry, flush thread, rusage and thread events).")
        add("")
        add("Run: `make bench` → `bench/run_macro.py --rounds %d --scale %g%s` (%d runs in %.0f min, %d failed)." % (
            macro["rounds"], macro["scale"], " --pin" if macro.get("pinned") else "", len(macro["runs"]),
            macro.get("elapsed_s", 0) / 60, len(macro["errors"])))
        add("")

    # -- how sure
    if macro and macro["runs"] and any(s["name"] == "plain-again" for s in macro["sides"]):
        add("## How far the ratios can be trusted")
        add("")
        add("Each cell: the median of per-round ratios against plain (what every other table reports) / the same "
            "against the geometric mean of the round's two plain runs (plain and plain-again) / the ratio of the "
            "medians over all rounds (unpaired). The `plain-again` row is the noise floor. Where the three "
            "disagree by more than the gap between a side and `plain-again`, this run cannot tell that side's "
            "cost apart from the machine's noise; the within-run figures (the share of the server's CPU on "
            "flightrec's threads in the tables below, and the perf profile) do not depend on other runs and "
            "are the firmer evidence.")
        add("")
        estimators_table(macro, out)
        add("")

    # -- redis
    if macro and "redis" in macro["workloads"]:
        wl = macro["workloads"]["redis"]
        server_heading("redis-server under redis-benchmark", wl, out)
        add("%d requests per run (SET, GET, LPUSH, LPOP; 20 clients; loopback). CPU per request is the CPU "
            "time of the server and every process the side runs alongside it (heaptrack's interpreter and "
            "compressor), from `/proc/PID/stat` before and after the load, divided by the requests. "
            "Throughput is requests / Σ(requests / req/s) over the four tests; p99 is the geometric mean "
            "of the four tests' p99 from `--csv`. Peak RSS is the server's VmHWM." % wl["requests_per_run"])
        add("")
        server_tables(macro, "redis", out)
        add("Per test (plain: absolute; others: × plain):")
        add("")
        redis_tests_table(macro, out)
        add("")

    # -- nginx
    if macro and "nginx" in macro["workloads"]:
        wl = macro["workloads"]["nginx"]
        server_heading("nginx under wrk", wl, out)
        add("A %d-byte static file, 2 connections per core. nginx runs in the foreground with "
            "`master_process off`, so the process each side was injected into is the one serving: with a "
            "master, workers are forked, and gperftools' ITIMER_PROF is not inherited across fork (it would "
            "profile only the idle master). The generated config:" % wl["file_bytes"])
        add("")
        add("```nginx")
        add(wl["config"].rstrip())
        add("```")
        add("")
        server_tables(macro, "nginx", out)

    # -- programs
    for w, title, what in (
            ("cpu", "CPU-bound program", "`bench/micro/cpu_bench.cc`: a hash loop through a few noinline frames, one "
             "thread, fixed work"),
            ("alloc", "Allocation-heavy program", "`bench/micro/alloc_work.cc`: strings, a hash map of vectors and a "
             "chain of small nodes built and torn down, one thread, fixed work (~245k allocation calls per "
             "round)")):
        if not macro or w not in macro["workloads"]:
            continue
        add("## %s" % title)
        add("")
        add("    %s" % macro["workloads"][w]["command"])
        add("")
        add("%s. Wall and CPU cover the whole process life, start-up and exit included (a tool that writes "
            "its file at exit pays for it here); CPU is getrusage of the process and every helper it waited "
            "for. The work loop columns are the program's own measurement of its loop (wall, process CPU "
            "time including the recorder's threads). Peak RSS from GNU time." % what)
        add("")
        program_table(macro, w, out)
        add("")

    # -- micro
    add("## Micro benchmarks")
    add("")
    add("| figure | value | source |")
    add("|---|---|---|")
    add("| ring push (reserve + 32-byte write + commit) | %s ns median per push | `ring_bench` |" % num(ring))
    default_rate = grab(texts["alloc"], r"default rate ([+-]?[\d.]+) ns")
    add("| malloc(64)+free pair, added: unsampled / default rate (512 KiB) | %s ns / %s ns | `alloc_bench` |" % (
        num(unsampled, "%+.2f"), num(default_rate, "%+.2f")))
    if capture:
        a = capture["alloc_sample"]
        add("| one sampled allocation (stack capture, ring push, table insert, matched free), 16 frames deep | "
            "+%.0f ns per sampled malloc+free (rounds %.0f–%.0f; %d samples, %d dropped) | "
            "`run_capture_costs.py` |" % (a["ns_per_sampled_pair"], a["lo"], a["hi"], a["samples_median"],
                                          a["dropped_median"]))
        for name in ("perf", "sigprof"):
            c = capture["cpu_sample"].get(name)
            if c and c["thread_us_per_sample"] is not None:
                add("| one CPU sample on the sampled thread, %s sampler at %d Hz, 24 frames deep | %.2f µs "
                    "(rounds %.2f–%.2f); %.2f µs of process CPU per sample in all (unwinding, encoding) | "
                    "`run_capture_costs.py` |" % (name, capture["hz"], c["thread_us_per_sample"],
                                                  c["thread_us_lo"], c["thread_us_hi"],
                                                  c["process_us_per_sample"]))
            else:
                add("| one CPU sample, %s sampler | no samples recorded | `run_capture_costs.py` |" % name)
        add("| (the SIGPROF fallback's thread-CPU timers fire at most once per kernel tick, 250 Hz here, so its runs "
            "hold a few hundred samples and its per-sample figure is below this machine's noise) | | |")
        o = capture.get("offcpu_switch")
        if o:
            add("| off-CPU recording (perf context-switch samples), per voluntary context switch, pipe ping-pong "
                "20 frames deep | %+.2f µs process CPU (rounds %.2f–%.2f), %+.2f µs wall (rounds %.2f–%.2f); "
                "%d switches gave %d `offcpu.sample` events (a ping-pong block lasts microseconds: only blocks of "
                "`FLIGHTREC_OFFCPU_MIN_US`, 1 ms by default, or more become events; every switch is still read "
                "and timed), %d records dropped (%s) | `run_capture_costs.py` |" % (
                    o["cpu_us_per_switch"], o["cpu_lo"], o["cpu_hi"], o["wall_us_per_switch"], o["wall_lo"],
                    o["wall_hi"], o["switches_median"], o["offcpu_samples_median"], o["dropped_median"],
                    ", ".join(o["dropped_kinds"]) or "none"))
    sock_proc = grab(texts["sockets"], r"ns on the calling thread, \+?(-?[\d.]+) ns of process CPU")
    add("| socket call, recorded: added on the calling thread / process CPU incl. the flush thread | %s ns / %s ns "
        "| `sock_bench` (%s) |" % (num(sock, "%+.1f"), num(sock_proc, "%+.1f"), sock_how))
    add("| socket call on a non-blocking socket, recorded: added on the calling thread | %s ns | `sock_bench` (%s) |"
        % (num(nb, "%+.1f"), nb_how))
    recs = grab(texts["runtime"], r"pipeline: (\d+) records", conv=int)
    fcpu = grab(texts["runtime"], r"flush thread CPU ([\d.]+) s")
    fpct = grab(texts["runtime"], r"flush thread CPU [\d.]+ s = ([\d.]+)% of one core")
    pbytes = grab(texts["runtime"], r"= ([\d.]+) bytes per event after zstd")
    if recs and fcpu is not None:
        add("| flush thread, encode cost per event (thread.name records at 100k/s) | %.2f µs per event "
            "(%.2f%% of one core) | `run_pipeline_bench.py` |" % (1e6 * fcpu / recs, fpct or 0))
    fsock = re.search(r"flush_socket_bench: median ([\d.]+) ns per socket.op event \(min ([\d.]+), max ([\d.]+); "
                      r"(\d+) runs of (\d+) events\), ([\d.]+) bytes", texts["runtime"] or "")
    if fsock:
        add("| flush thread, socket.op record to disk (in-process: event, connection table, columns, encode, zstd, "
            "write; no ring, no wake-ups) | %s ns per event (runs %s–%s), %s bytes per event | "
            "`flush_socket_bench` (%s runs of %s redis-like events) |" % (fsock[1], fsock[2], fsock[3], fsock[6],
                                                                          fsock[4], fsock[5]))
    fex = re.search(r"flush_socket_bench: median ([\d.]+) ns per socket.exchange \(RESP endpoint classified\) event "
                    r"\(min ([\d.]+), max ([\d.]+); (\d+) runs of (\d+) events\), ([\d.]+) bytes", texts["runtime"] or "")
    if fex:
        add("| flush thread, socket.exchange record to disk, the default (in-process: endpoint classification of a "
            "RESP question, event, connection table, columns, encode, zstd, write) | %s ns per exchange (runs %s–%s), "
            "%s bytes per exchange; goal ≤ 40 ns: **missed** | `flush_socket_bench N R exchanges` (%s runs of %s "
            "redis-like exchanges) |" % (fex[1], fex[2], fex[3], fex[6], fex[4], fex[5]))
    fsam = re.search(r"flush_sample_bench: .*?; (\d+) rounds of (\d+) samples \(mean depth ([\d.]+)\)\n"
                     r"\s+steady state: median ([\d.]+) ns per cpu.sample record \(min ([\d.]+), max ([\d.]+)\), "
                     r"([\d.]+) bytes per sample on disk.*\n"
                     r"\s+first pass .*?: ([\d.]+) ns per sample \(([\d.]+) ms for (\d+) distinct pcs\)\n"
                     r"\s+a new segment's first pass .*?: median ([\d.]+) ns", texts["runtime"] or "")
    if fsam:
        add("| flush thread, cpu.sample record to disk (in-process: the sample queue, stack interned, columns, "
            "encode, zstd, write; 400 call paths, Zipf) | steady state %s ns per sample (rounds %s–%s), %s bytes per "
            "sample; first pass %s ms for %s distinct pcs (symbolized), a new segment's first pass %s ns per sample; "
            "goal ≤ 40 ns: **missed** | `flush_sample_bench` (%s rounds of %s samples, mean depth %s) |"
            % (fsam[4], fsam[5], fsam[6], fsam[7], fsam[9], fsam[10], fsam[11], fsam[1], fsam[2], fsam[3]))
    flive = re.search(r"flush thread CPU per socket.op event, live \((\d+) send\+recv pairs, (\d+) alternating "
                      r"rounds, medians\):\n\s+\S+\s+([\d.]+) ns/event", texts["runtime"] or "")
    if flive:
        add("| flush thread, socket.op record to disk, live (a preloaded process's send+recv pairs: the above plus "
            "cross-core ring reads and wake-ups) | %s ns per event (median of %s runs) | `flush_live_bench` (%s "
            "pairs per run) |" % (flive[3], flive[2], flive[1]))
    if macro:
        for w, (fl, fs, ss) in per_event_costs(macro).items():
            add("| flush thread CPU per recorded event, %s under the defaults (socket ops, samples: decode, "
                "connection tracking, encode, zstd, write) | %.2f µs per event; the flush thread is %.1f%% and the "
                "sampler thread %.1f%% of the server's CPU | macro `fr-default` runs |" % (w, fl, 100 * fs, 100 * ss))
    if pbytes is not None:
        add("| bytes per thread.name event after zstd (pipeline run) | %.2f | `run_pipeline_bench.py` |" % pbytes)
    for label, cpu_ms, pct, wakes in re.findall(
            r"^\s+idle (.+?):\s+([\d.]+) ms CPU per second \(([\d.]+)% of a core\), (\d+) wake-ups per second",
            texts["idle"] or "", re.M):
        add("| an idle process (`sleep`), flightrec's threads, %s | %s ms CPU per second (%s%% of a core), %s "
            "wake-ups per second | `run_idle_cost.py` |" % (label, cpu_ms, pct, wakes))
    for plain_ms, traced_ms, added_ms in re.findall(
            r"^\s+start plain ([\d.]+) ms, flightrec defaults ([\d.]+) ms: \+([\d.]+) ms per process",
            texts["idle"] or "", re.M):
        add("| process start and exit (`/bin/true`), CPU of the whole process: plain / defaults | %s ms / %s ms "
            "(+%s ms per process) | `run_idle_cost.py` |" % (plain_ms, traced_ms, added_ms))
    for segments, crowded_ms, added_ms in re.findall(
            r"^\s+into a directory already holding (\d+) segments: ([\d.]+) ms: \+([\d.]+) ms per process",
            texts["idle"] or "", re.M):
        add("| the same, into an output directory already holding %s segments (what a test suite run under the "
            "preload leaves) | %s ms (+%s ms per process) | `run_idle_cost.py` |" % (segments, crowded_ms, added_ms))
    short = re.search(r"fork\+exec wall plain ([\d.]+) ms, flightrec defaults ([\d.]+) ms: \+([-\d.]+) ms per "
                      r"process, ratio ([\d.]+)x", texts["short"] or "")
    short_cpu = re.search(r"fork\+exec CPU \(bash and children\) plain ([\d.]+) ms, flightrec defaults ([\d.]+) ms",
                          texts["short"] or "")
    short_segs = grab(texts["short"], r"fork\+exec segments: ([\d.]+) sealed segment files per program image")
    if short:
        add("| a shell loop fork+exec'ing `/bin/true`, wall time per process: plain / defaults | %s ms / %s ms (+%s ms "
            "per process, %s×); CPU %s ms / %s ms; %s segment files per program image | `run_short_lived.py` |" % (
                short[1], short[2], short[3], short[4], short_cpu and short_cpu[1], short_cpu and short_cpu[2],
                num(short_segs)))
    short_faults = re.search(r"fork\+exec page faults \(bash and children\) plain (\d+), flightrec defaults (\d+): "
                             r"\+(-?\d+) per process; one fault here costs ([\d.]+) us \(first write to a fresh page; "
                             r"([^)]*)\), so the added faults are ~([\d.]+) ms", texts["short"] or "")
    if short_faults:
        add("| the same loop, page faults per process: plain / defaults | %s / %s (+%s); one fault costs %s us on "
            "this VM (%s): the added faults are ~%s ms of the added time | `run_short_lived.py` |" % tuple(
                short_faults.groups()))
    if tf:
        dec = tf["decode"]
        add("| `flightrec-dump` decode rate: library, every column of every block | %.2fM events/s (%d events in "
            "%.3f s) | `run_trace_figures.py` |" % (dec["library_events_per_s"] / 1e6, dec["events"],
                                                     dec["library_s"]))
        add("| `flightrec-dump events --json` end to end (resolved stacks, JSON lines to /dev/null) | %.0fk "
            "events/s (%.2f s wall) | `run_trace_figures.py` |" % (dec["cli_events_per_s"] / 1e3,
                                                                   dec["cli_events_wall_s"]))
    cpu_lines = re.findall(r"^\s+(\d+ Hz)\s+cpu median.*?ratio vs plain \(median of rounds\) ([\d.]+)x",
                           texts["cpu"] or "", re.M)
    for hz, r in cpu_lines:
        add("| CPU sampling at %s on fixed work, process CPU × plain | %s× | `run_cpu_bench.py` |" % (hz, r))
    add("")

    # -- bytes per event
    if tf:
        add("## Bytes per event on disk, by type")
        add("")
        add("From the trace of the last `fr-default` redis run (%d segment(s), %s, %d events, %.2f bytes per event "
            "overall). Each EVENTS block holds one event type: its 20-byte header plus its stored (zstd) payload, "
            "divided by its events; *raw* is the columnar payload before zstd." % (
                tf["files"], human_bytes(tf["total_bytes"]), tf["total_events"], tf["bytes_per_event_overall"]))
        add("")
        add("| event type | events | bytes | bytes/event | raw bytes/event |")
        add("|---|---|---|---|---|")
        for name, t in sorted(tf["by_type"].items(), key=lambda kv: -kv[1]["events"]):
            add("| %s | %d | %d | %.2f | %.2f |" % (name, t["events"], t["bytes"], t["bytes_per_event"],
                                                   t["raw_bytes_per_event"]))
        other = ", ".join("%s %s" % (k, human_bytes(v["bytes"])) for k, v in sorted(tf["other_blocks"].items()))
        add("")
        add("Other blocks: %s; segment headers %s." % (other, human_bytes(tf["segment_headers_bytes"])))
        add("")

    # -- perf
    if perf:
        add("## Where flightrec's time goes on redis (perf)")
        add("")
        add("`bench/run_perf_profile.py`: redis-server under the defaults, the same redis-benchmark load "
            "(%d requests), `perf record -F %d -p PID` for the load, then `perf report --no-children --sort "
            "comm,dso,sym`. About %d samples. Shares are of all the server's samples." % (
                perf["requests"], perf["freq"], perf["samples"]))
        add("")
        add("* by thread: %s" % ", ".join("%s %.1f%%" % kv for kv in sorted(perf["by_comm"].items(),
                                                                          key=lambda kv: -kv[1])))
        add("* flightrec's own threads: **%.1f%%**; flightrec's code on redis's thread (the hooks): **%.1f%%**" % (
            perf["recorder_threads_pct"], perf["host_threads_in_flightrec_pct"]))
        ours = [(k, v) for k, v in perf["by_comm_dso"].items() if k.startswith("flightrec-") and v >= 0.1]
        add("* flightrec's threads by library: " + ", ".join("%s %.1f%%" % kv for kv in ours))
        add("")
        add("| share | thread | library | function (self time) |")
        add("|---|---|---|---|")
        for e in perf["recorder_top"][:12] + perf["host_threads_in_flightrec_top"][:6]:
            sym = e["sym"] if len(e["sym"]) < 90 else e["sym"][:87] + "…"
            add("| %.2f%% | %s | %s | `%s` |" % (e["pct"], e["comm"], e["dso"], sym.replace("|", "\\|")))
        add("")
        add("Kernel time on this VM is attributed to where interrupts are re-enabled (`pvm_irq_enable`), so "
            "what perf does for the sampler inside the scheduler (copying a stack at a context switch) cannot "
            "be told apart from the switch itself here; the `fr-cpu` and `fr-cpu+offcpu` sides measure it "
            "instead.")
        add("")

    # -- pinning
    if pinned and pinned["runs"] and macro:
        add("## Pinning")
        add("")
        pr = pinned["runs"]
        pc = stats.absolute(pr, "redis", "plain", "cpu_us_per_req")
        uc = stats.absolute(macro["runs"], "redis", "plain", "cpu_us_per_req")
        add("`make pinning` reran redis (plain and `fr-default`, %d rounds, %d requests per run) with the server "
            "on CPU 0 and redis-benchmark on CPU 1 (`run_macro.py --pin`). Plain redis then needed %s µs of CPU "
            "per request against %s µs unpinned (above): on this VM each request becomes a cross-CPU wakeup, "
            "and the inflated denominator makes every side look cheaper (`fr-default` CPU per request %s "
            "pinned, %s unpinned). The macro run therefore leaves placement to the scheduler." % (
                pinned["rounds"], pinned["workloads"]["redis"]["requests_per_run"],
                num(pc and pc["median"]), num(uc and uc["median"]),
                fx(stats.ratio(pr, "redis", "fr-default", "cpu_us_per_req")),
                fx(stats.ratio(macro["runs"], "redis", "fr-default", "cpu_us_per_req"))))
        add("")

    # -- failures
    if macro and macro["errors"]:
        add("## Failed runs")
        add("")
        for e in macro["errors"]:
            add("* %s round %d, %s: %s" % (e["workload"], e["round"], e["side"], e["error"].splitlines()[0][:300]))
        add("")

    # -- raw
    if texts["pg_memory"]:
        add("## Memory and threads per process: PostgreSQL (issue #44)")
        add("")
        add("`make -C bench pg-memory` (`bench/run_pg_memory.py BUILD 16,64`): two PostgreSQL clusters started by the "
            "script, plain and under the preload, side by side under `pgbench -S`; PSS from `/proc/PID/smaps_rollup` of "
            "the postmaster and every child, threads from `/proc/PID/task`, and the added PSS sorted by mapping "
            "(`bench/process_memory.py` says how each mapping is classified).")
        add("")
        add("```")
        out.extend(texts["pg_memory"].rstrip("\n").split("\n"))
        add("```")
        add("")
    if texts["server_memory"]:
        add("## Memory and threads per process: nginx and a preforking Python server (issue #44)")
        add("")
        add("`make -C bench server-memory` (`bench/run_server_memory.py BUILD`): nginx (`master_process on; "
            "worker_processes 4;`, a 1 KiB static file) and a preforking Python server (`bench/prefork_server.py`: "
            "a master and 4 forked workers accepting on one socket), each started twice from a temporary directory "
            "on loopback ports, plain and under the preload, side by side under its own `wrk -t1 -c8`; the same "
            "figures as the PostgreSQL run, read and printed by the same code (`bench/memory_report.py`).")
        add("")
        add("```")
        out.extend(texts["server_memory"].rstrip("\n").split("\n"))
        add("```")
        add("")

    if texts["redis_memory"]:
        add("## Peak memory of one big process: redis-server (issue #44)")
        add("")
        add("`make -C bench redis-memory` (`bench/run_redis_memory.py BUILD 3`): redis-server plain and under the "
            "preload, side by side, each under its own redis-benchmark (SET, GET, LPUSH, LPOP, 20 clients); the "
            "added peak RSS (`VmHWM`) per round, and half-way into the load the added PSS by mapping (the same "
            "code as the forking servers).")
        add("")
        add("```")
        out.extend(texts["redis_memory"].rstrip("\n").split("\n"))
        add("```")
        add("")

    add("## Raw outputs")
    add("")
    for name, title in (("runtime", "ring_bench + flush_socket_bench + flush_sample_bench + flush_live_bench + run_pipeline_bench.py"), ("sockets", "sock_bench"),
                        ("alloc", "alloc_bench"), ("cpu", "run_cpu_bench.py"), ("capture", "run_capture_costs.py"),
                        ("idle", "run_idle_cost.py"), ("short", "run_short_lived.py"),
                        ("trace_figures", "run_trace_figures.py"),
                        ("perf_profile", "run_perf_profile.py")):
        add("<details><summary>%s</summary>" % title)
        add("")
        add("```")
        add((texts[name] or "(not run)").rstrip())
        add("```")
        add("")
        add("</details>")
        add("")

    with open(md_path, "w") as f:
        f.write("\n".join(out))
    print("wrote %s%s" % (md_path, " and " + png_path if macro and macro["runs"] else ""))
    if macro and macro["errors"]:
        print("%d macro runs failed (listed in %s)" % (len(macro["errors"]), md_path), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
