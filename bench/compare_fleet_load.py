"""compare_fleet_load: the load of two copies of the reader (`scripts/` before
and after a change to the loader) timed alternately on one synthetic fleet
and one private clickhouse-server (issue 42), so both see the same machine
load, and the two databases they fill compared table by table.

    /usr/bin/python3 bench/compare_fleet_load.py --old /tmp/scripts-before [--new scripts]
        [--hosts 20] [--minutes 60] [--rounds 3] [--keep DIR] [--profile FILE]

Each round loads the fleet with `--workers 1` into a fresh database per side
(old first in odd rounds, new first in even ones) and prints the wall time,
events/s, peak memory (/usr/bin/time's maximum resident set), the loader's own CPU time (user+sys of the child: less sensitive to
other engineers' load than the wall clock) and the 1-minute load average.
At the end every table of the last old and new databases is compared by row
count and sums of its integer columns and of cityHash64 of its float, text and
array columns
(load_id and loaded_ns differ by design: fresh per load). --profile FILE runs
one extra new-side load under cProfile."""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import clickhouse_server  # noqa: E402
import fleet_segments  # noqa: E402

PY = "/usr/bin/python3"
SKIP = {"load_id", "loaded_ns", "day"}


def load(scripts, url, fleet, profile=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    la = os.getloadavg()[0]
    t = time.monotonic()
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss %M"] + [PY] + prof + [
        os.path.join(scripts, "flightrec-dump"), "load", "--clickhouse", url, "--workers", "1", fleet],
        capture_output=True, timeout=3600)
    secs = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit("load with %s failed: %s" % (scripts, p.stderr.decode()[-2000:]))
    events = int(p.stdout.split(b"(")[1].split()[0])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = int(p.stderr.split(b"maxrss ")[-1].split()[0]) // 1024
    return secs, events, cpu, la, rss


def table_digest(c, db, table):
    cols = c.execute("SELECT name, type FROM system.columns WHERE database = %(d)s AND table = %(t)s",
                     {"d": db, "t": table})
    exprs = ["count()"]
    for name, typ in cols:
        if name in SKIP:
            continue
        q = "`%s`" % name
        if typ.startswith("Array(") or typ.startswith("Nullable(") or "String" in typ:
            exprs.append("sum(cityHash64(toString(%s)))" % q if not typ.startswith("Array(") else
                         "sum(cityHash64(arrayStringConcat(arrayMap(x -> toString(x), %s), '\\x01')))" % q)
        else:
            # floats by their bits: a float sum depends on the order the server adds in
            exprs.append("sum(cityHash64(%s))" % q if typ.startswith("Float") else "sum(%s)" % q)
    names = ["rows"] + [n for n, _ in cols if n not in SKIP]
    return dict(zip(names, c.execute("SELECT %s FROM %s.%s" % (", ".join(exprs), db, table))[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="the scripts/ directory before the change")
    ap.add_argument("--new", default=os.path.join(ROOT, "scripts"))
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="write the fleet here (reused when present)")
    ap.add_argument("--profile", metavar="FILE")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="flightrec-cmp-")
    fleet = os.path.join(tmp, "fleet")
    try:
        if not os.path.isdir(fleet):
            fleet_segments.write_fleet(fleet, hosts=args.hosts, minutes=args.minutes, hz=10, alloc_per_s=2,
                                       req_per_s=args.requests)
        with clickhouse_server.ClickHouseServers(1) as servers:
            c = servers.client(0)
            last = {}
            rows = []
            for r in range(args.rounds):
                order = [("old", args.old), ("new", args.new)]
                if r % 2:
                    order.reverse()
                for side, scripts in order:
                    db = "%s%d" % (side, r)
                    secs, events, cpu, la, rss = load(scripts, servers.url(0, database=db), fleet)
                    last[side] = db
                    rows.append((r, side, secs, events, cpu, la))
                    print("round %d %s: %.2f s, %d events, %.0f events/s, loader CPU %.2f s, peak memory %d MB, "
                          "load average %.2f" % (r + 1, side, secs, events, events / secs, cpu, rss, la), flush=True)
            if args.profile:
                secs, events, cpu, la, rss = load(args.new, servers.url(0, database="prof"), fleet, args.profile)
                print("profiled new: %.2f s" % secs)
                import pstats
                pstats.Stats(args.profile).sort_stats("tottime").print_stats(30)
            same = True
            for (table,) in c.execute("SELECT name FROM system.tables WHERE database = %(d)s ORDER BY name",
                                      {"d": last["old"]}):
                a, b = table_digest(c, last["old"], table), table_digest(c, last["new"], table)
                if a != b:
                    same = False
                    print("table %s DIFFERS: %s" % (table, {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)}))
                else:
                    print("table %s: same (%d rows, %d columns compared)" % (table, a["rows"], len(a) - 1))
            print("databases identical: %s" % ("yes" if same else "NO"))
            for side in ("old", "new"):
                ss = [x for x in rows if x[1] == side]
                print("%s: wall %s s; events/s %s; loader CPU %s s" % (
                    side, " ".join("%.2f" % x[2] for x in ss), " ".join("%.0f" % (x[3] / x[2]) for x in ss),
                    " ".join("%.2f" % x[4] for x in ss)))
            return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
