"""run_fleet_bench: the fleet benchmark of issue 42. Writes a synthetic fleet
(bench/fleet_segments.py: hosts x 1 hour), starts a private clickhouse-server
on loopback (tests/integration/clickhouse_server.py), and measures:

  * load rate: `flightrec-dump load --clickhouse` with --workers 1 and 2
    (events/s, wall clock, into two databases);
  * disk per event: the database's active parts (system.parts
    bytes_on_disk) against the segments' bytes;
  * report time: top, flame, folded and a two-window diff over the whole
    fleet, from ClickHouse and from the files (the file reader), checking
    that top prints the same both ways.

    /usr/bin/python3 bench/run_fleet_bench.py [--hosts 100] [--minutes 60] [--hz 10]

Prints one markdown table (the bench/RESULTS.md rows) and the raw numbers."""
import argparse
import os
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


def timed(args, repeat=1):
    times, out = [], None
    for _ in range(repeat):
        t = time.monotonic()
        p = subprocess.run([PY, DUMP] + args, capture_output=True, timeout=7200)
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
    ap.add_argument("--keep", metavar="DIR", help="write the fleet here and keep it")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="flightrec-fleet-")
    fleet = os.path.join(tmp, "fleet")
    try:
        t = time.monotonic()
        if not os.path.isdir(fleet):
            nseg, nev, nbytes = fleet_segments.write_fleet(fleet, hosts=args.hosts, minutes=args.minutes,
                                                           hz=args.hz, alloc_per_s=args.allocs)
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
                secs, out = timed(["load", "--clickhouse", url, "--workers", str(workers), fleet])
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
            url = servers.url(0, database="w1")
            out_dir = os.path.join(tmp, "out")
            os.makedirs(out_dir, exist_ok=True)
            half = "%dm" % (args.minutes // 2)
            reports = [("top", ["top"]), ("flame", ["flame", "-o", os.path.join(out_dir, "f.svg")]),
                       ("folded", ["folded"]),
                       ("diff (two halves)", ["diff", "--a-to", half, "--b-from", half]),
                       ("top --kind live", ["top", "--kind", "live"])]
            times = {}
            for name, rargs in reports:
                ch, out_ch = timed(rargs + ["--clickhouse", url], repeat=3)
                fl, out_fl = timed(rargs + [fleet], repeat=1)
                same = "n/a"
                if name in ("top", "folded", "top --kind live"):
                    same = "yes" if out_ch == out_fl else "NO"
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
