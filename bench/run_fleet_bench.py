"""run_fleet_bench: the fleet benchmark of issue 42. Writes a synthetic fleet
(bench/fleet_segments.py: hosts x 1 hour), starts a private clickhouse-server
on loopback (tests/integration/clickhouse_server.py), and measures:

  * load rate: `flightrec-dump load --clickhouse` with --workers 1 and 2
    (events/s, wall clock, into two databases);
  * disk per event: the database's active parts (system.parts
    bytes_on_disk) against the segments' bytes;
  * report time: top, flame, folded, a two-window diff, the live heap
    (`top --kind live`, `heap`), and with requests in the fleet (--requests
    per second per host) `sockets`, `requests --slowest 10`, `requests --by
    endpoint`, and `info` over the whole fleet, from ClickHouse and from
    the files (the file reader), checking that the text reports print the
    same both ways (info: but for the segment paths).

    /usr/bin/python3 bench/run_fleet_bench.py [--hosts 100] [--minutes 60] [--hz 10] [--requests 2]
        [--only-load] [--profile-load FILE]

--only-load stops after the load (rate and disk); --profile-load FILE runs
the --workers 1 load under cProfile (output in FILE, the top functions
printed).

Prints one markdown table (the bench/RESULTS.md rows) and the raw numbers."""
import argparse
import os
import re
import shutil
import statistics
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
DUMP = os.path.join(ROOT, "scripts", "flightrec-dump")


def timed(args, repeat=1, python=()):
    times, out = [], None
    for _ in range(repeat):
        t = time.monotonic()
        p = subprocess.run([PY] + list(python) + [DUMP] + args, capture_output=True, timeout=7200)
        times.append(time.monotonic() - t)
        if p.returncode != 0:
            raise SystemExit("flightrec-dump %s failed (%d): %s" % (" ".join(args), p.returncode,
                                                                     p.stderr.decode()[-2000:]))
        out = p.stdout
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--hz", type=int, default=10)
    ap.add_argument("--allocs", type=int, default=2, help="allocation samples per second per host")
    ap.add_argument("--requests", type=int, default=2, help="server requests per second per host")
    ap.add_argument("--keep", metavar="DIR", help="write the fleet here and keep it")
    ap.add_argument("--only-load", action="store_true", help="measure the load only")
    ap.add_argument("--profile-load", metavar="FILE", help="cProfile the --workers 1 load into FILE")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="flightrec-fleet-")
    fleet = os.path.join(tmp, "fleet")
    try:
        t = time.monotonic()
        if not os.path.isdir(fleet):
            nseg, nev, nbytes = fleet_segments.write_fleet(fleet, hosts=args.hosts, minutes=args.minutes,
                                                           hz=args.hz, alloc_per_s=args.allocs,
                                                           req_per_s=args.requests)
        else:
            nseg = nev = nbytes = 0
            for root, _, files in os.walk(fleet):
                for f in files:
                    nseg += 1
                    nbytes += os.path.getsize(os.path.join(root, f))
        print("fleet: %d hosts x %d min, %d segments, %d events, %d bytes (%.0fs to write)" % (
            args.hosts, args.minutes, nseg, nev, nbytes, time.monotonic() - t), flush=True)
        with clickhouse_server.ClickHouseServers(1) as servers:
            load = {}
            for workers in (1, 2):
                url = servers.url(0, database="w%d" % workers)
                prof = ["-m", "cProfile", "-o", args.profile_load] if args.profile_load and workers == 1 else []
                secs, out = timed(["load", "--clickhouse", url, "--workers", str(workers), fleet], python=prof)
                events = int(out.split(b"(")[1].split()[0])
                nev = nev or events
                load[workers] = (secs, events)
                print("load --workers %d: %.1fs, %d events, %.0f events/s" % (workers, secs, events, events / secs),
                      flush=True)
            c = servers.client(0)
            disk = c.execute("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'w1' AND active")[0][0]
            per_table = c.execute("SELECT table, sum(bytes_on_disk), sum(rows) FROM system.parts "
                                  "WHERE database = 'w1' AND active GROUP BY table ORDER BY table")
            print("disk: %d bytes in ClickHouse (%.2f B/event) vs %d bytes of segments (%.2f B/event)" % (
                disk, disk / nev, nbytes, nbytes / nev), per_table, flush=True)
            if args.profile_load:
                import pstats
                pstats.Stats(args.profile_load).sort_stats("tottime").print_stats(25)
            url = servers.url(0, database="w1")
            out_dir = os.path.join(tmp, "out")
            os.makedirs(out_dir, exist_ok=True)
            half = "%dm" % (args.minutes // 2)
            reports = [("top", ["top"]), ("flame", ["flame", "-o", os.path.join(out_dir, "f.svg")]),
                       ("folded", ["folded"]),
                       ("diff (two halves)", ["diff", "--a-to", half, "--b-from", half]),
                       ("top --kind live", ["top", "--kind", "live"]), ("heap", ["heap"]), ("info", ["info"])]
            if args.requests:
                reports += [("sockets", ["sockets"]), ("requests --slowest 10", ["requests", "--slowest", "10"]),
                            ("requests --by endpoint", ["requests", "--by", "endpoint"])]
            if args.only_load:
                reports = []
            times = {}
            for name, rargs in reports:
                ch, out_ch = timed(rargs + ["--clickhouse", url], repeat=3)
                fl, out_fl = timed(rargs + [fleet], repeat=1)
                same = "n/a"
                if name == "info":  # the database keeps file names, not paths
                    out_fl = re.sub(rb"  \S*/([^/\s]+\.seg)\n", rb"  \1\n", out_fl)
                if name in ("top", "folded", "top --kind live", "heap", "info", "sockets", "requests --slowest 10",
                            "requests --by endpoint"):
                    same = "yes" if out_ch == out_fl else "NO"
                    if same == "NO":  # kept for a look
                        for side, out in (("clickhouse", out_ch), ("files", out_fl)):
                            with open(os.path.join(out_dir, "%s.%s.txt" % (name.split()[0], side)), "wb") as f:
                                f.write(out)
                times[name] = (ch, fl, same)
                print("%s: ClickHouse %.2fs, files %.1fs (%.1fx), same output: %s" % (name, ch, fl, fl / ch, same),
                      flush=True)
        print()
        print("| measure | value |")
        print("|---|---|")
        print("| fleet | %d hosts x %d min, %d segments, %s events, %.1f MiB of segments |" % (
            args.hosts, args.minutes, nseg, "{:,}".format(nev), nbytes / 2 ** 20))
        for w, (secs, events) in sorted(load.items()):
            print("| load, --workers %d | %.1f s, %s events/s (%s per worker) |" % (
                w, secs, "{:,.0f}".format(events / secs), "{:,.0f}".format(events / secs / w)))
        print("| disk per event | ClickHouse %.2f B, segments %.2f B |" % (disk / nev, nbytes / nev))
        for name, (ch, fl, same) in times.items():
            print("| `%s` over the fleet | ClickHouse %.2f s (median of 3), files %.1f s: %.1fx; same output: %s |" % (
                name, ch, fl, fl / ch, same))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
