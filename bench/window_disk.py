#!/usr/bin/env python3
"""window_disk: how much disk window mode holds during a run, against
continuous mode (issue 31). Runs tests' s3_worker for 20 s under the preload
in each mode (FLIGHTREC_WINDOW_SECONDS=4, 1 s segments), polls the output
directory's .seg/.active bytes every 100 ms, prints the most seen and what
is left at exit. Not a timed test; run by hand:

    python3 bench/window_disk.py [build-dir]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def dir_bytes(out, sealed_only=False):
    total = 0
    for f in os.listdir(out):
        if f.endswith(".seg") or (not sealed_only and f.endswith(".active")):
            try:
                total += os.stat(os.path.join(out, f)).st_size
            except FileNotFoundError:
                pass
    return total


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    lib, prog = os.path.join(build, "libflightrec.so"), os.path.join(build, "programs", "s3_worker")
    for mode in ("window", "continuous"):
        out = tempfile.mkdtemp(prefix="fr-window-disk-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLIGHTREC_")}
        env.update(LD_PRELOAD=lib, FLIGHTREC_OUTPUT=out, FLIGHTREC_MODE=mode, FLIGHTREC_WINDOW_SECONDS="4",
                   FLIGHTREC_SEGMENT_SECONDS="1")
        proc = subprocess.Popen([prog, "20000"], env=env, stdout=subprocess.DEVNULL)
        most = 0
        while proc.poll() is None:
            most = max(most, dir_bytes(out))
            time.sleep(0.1)
        written = len({f.split("@")[0] for f in os.listdir(out) if f.endswith(".seg")})
        print("%-10s most on disk %7d bytes, at exit %7d bytes in %d segment(s)" % (
            mode, most, dir_bytes(out, True), written))
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
