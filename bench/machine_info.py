#!/usr/bin/python3
"""Prints, as JSON, the machine a benchmark run is about to use: CPU model
and count, kernel, memory, the load average right now (the machine is
shared), the tool versions, and the flightrec commit.
    machine_info.py > results/machine.json"""
import datetime
import json
import os
import platform
import subprocess


def first_line(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text else None


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def mem_total_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return None


def packages(names):
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + names, capture_output=True, text=True)
    return dict(line.split(" ", 1) for line in p.stdout.splitlines() if " " in line)


def snapshot():
    here = os.path.dirname(os.path.abspath(__file__))
    head = first_line(["git", "-C", here, "rev-parse", "--short", "HEAD"])
    # The library is built from the working tree, which other people may be editing.
    dirty = subprocess.run(["git", "-C", os.path.join(here, ".."), "status", "--porcelain", "--", "preload",
                            "sampler", "format", "uploader"], capture_output=True, text=True).stdout.strip()
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "mem_total_kb": mem_total_kb(),
        "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
        "perf_event_paranoid": open("/proc/sys/kernel/perf_event_paranoid").read().strip(),
        "uid": os.getuid(),
        "flightrec_commit": (head or "?") + (" + uncommitted changes in the library sources" if dirty else ""),
        "packages": packages(["redis-server", "redis-tools", "nginx", "wrk", "heaptrack", "libgoogle-perftools4",
                              "linux-perf", "python3-matplotlib", "g++"]),
    }


if __name__ == "__main__":
    print(json.dumps(snapshot(), indent=1))
