#!/usr/bin/env python3
"""window_budget_disk: what the disk budget leaves on disk in window mode
when many short-lived processes share a directory (issue 38 item 10). One
crash_test segv (its window kept as an incident), then RUNS short_lived
processes one after another under the preload (FLIGHTREC_MODE=window, a
600 s window so only the budget deletes, FLIGHTREC_MAX_DISK_BYTES=1M); the
directory's allocated blocks (what du counts) are summed every 10 runs.
Prints the peak and the end, the files left and whether the incident is
still there. Not a timed test; run by hand:

    python3 bench/window_budget_disk.py [build-dir] [runs]
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def allocated(out):
    total = size = 0
    for name in os.listdir(out):
        try:
            st = os.lstat(os.path.join(out, name))
        except FileNotFoundError:
            continue
        total += st.st_blocks * 512
        size += st.st_size
    return total, size


def main():
    build = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    out = tempfile.mkdtemp(prefix="fr-budget-")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHTREC_")}
        env.update(LD_PRELOAD=os.path.join(build, "libflightrec.so"), FLIGHTREC_OUTPUT=out,
                   FLIGHTREC_MODE="window", FLIGHTREC_WINDOW_SECONDS="600", FLIGHTREC_TRIGGER_AFTER_SECONDS="0",
                   FLIGHTREC_MAX_DISK_BYTES="1M")
        subprocess.run([os.path.join(build, "programs", "crash_test"), "segv"], env=env, capture_output=True)
        kept = [n for n in os.listdir(out) if "@" in n]
        peak = 0
        for i in range(runs):
            subprocess.run([os.path.join(build, "programs", "short_lived")], env=env, capture_output=True)
            if i % 10 == 9:
                peak = max(peak, allocated(out)[0])
        blocks, size = allocated(out)
        peak = max(peak, blocks)
        names = os.listdir(out)
        print("%d runs, budget %d: peak %d bytes of blocks, end %d (%d by size), %d files, incident %s" % (
            runs, 1 << 20, peak, blocks, size, len(names),
            "kept" if kept and all(k in names for k in kept) else "GONE"))
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
