"""The disk budget in window mode (issue 38 item 10), end to end: many
short-lived processes recording windows into one directory with a small
FLIGHTREC_MAX_DISK_BYTES, one of which crashed (a trigger: its window is
kept as an incident).

Checked: the budget deletes windows, never the kept incident while there
are windows to delete; the directory's allocated size (what `du` counts:
blocks, not bytes; a 1.2 KB segment takes a 4 KiB block) stays within the
budget; the windows of processes that exited are expired once older than
the window; `info` reports the deletions, made by processes long gone.
"""
import os
import threading
import time

BUDGET = 1 << 20
# Over the budget: the tally file (one block). No process is alive when the
# directory is measured, so no active segment is counted beyond the budget.
SLACK = 4096
RUNS = 320      # ~1.3 MiB of 4 KiB segments: past the budget by blocks, far under it by bytes


def allocated(out):
    """What the directory's files take on disk, as du counts them."""
    total = 0
    for name in os.listdir(out):
        try:
            st = os.lstat(os.path.join(out, name))
        except FileNotFoundError:
            continue
        total += st.st_blocks * 512
    return total


def window_env(window, **extra):
    env = {"FLIGHTREC_MODE": "window", "FLIGHTREC_WINDOW_SECONDS": window, "FLIGHTREC_TRIGGER_AFTER_SECONDS": 0,
           "FLIGHTREC_MAX_DISK_BYTES": BUDGET}
    env.update(extra)
    return env


def run_many(fr, out, env, runs, streams=2):
    """`runs` short-lived processes, `streams` at a time; returns when all exited."""
    errors = []

    def stream(n):
        for _ in range(n):
            proc = fr.run([fr.program("short_lived")], out, env=env, check=False)
            if proc.returncode != 0:
                errors.append(proc.stderr)
    threads = [threading.Thread(target=stream, args=(runs // streams,)) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:2]


def test_the_budget_deletes_windows_and_keeps_the_incident_in_allocated_bytes(fr, trace_dir):
    env = window_env(600)   # a long window: only the budget deletes here
    crash = fr.run([fr.program("crash_test"), "segv"], trace_dir, env=env, check=False)
    assert crash.returncode == -11, crash.stderr
    kept = sorted(n for n in os.listdir(trace_dir) if "@" in n)
    assert kept, os.listdir(trace_dir)
    most = 0
    for _ in range(8):
        run_many(fr, trace_dir, env, RUNS // 8)
        most = max(most, allocated(trace_dir))
        assert most <= BUDGET + SLACK, (most, len(os.listdir(trace_dir)))
    names = os.listdir(trace_dir)
    for n in kept:
        assert n in names, (n, sorted(names)[:5])   # the incident outlived every window
    windows = [n for n in names if n.endswith(".seg") and "@" not in n]
    assert 0 < len(windows) < RUNS, len(windows)
    doc = fr.dump_json("info", "--json", trace_dir)
    [tally] = doc["disk_budget"]
    # Every run sealed one segment; what is not on disk any more was deleted
    # by the budget (the window is far longer than the test).
    assert tally["deleted_segments"] == RUNS - len(windows), (tally, len(windows))
    assert tally["deleted_incidents"] == 0 and tally["expired_windows"] == 0, tally
    assert tally["deleted_bytes"] >= 4096 * tally["deleted_segments"]   # blocks, not bytes
    crashes = [i for i in doc["incidents"] if "crash" in i["reasons"]]
    assert len(crashes) == 1, doc["incidents"]
    text = fr.dump_run("info", trace_dir).stdout
    assert "deleted to stay under FLIGHTREC_MAX_DISK_BYTES: %d segments" % tally["deleted_segments"] in text, text


def test_windows_of_exited_processes_expire(fr, trace_dir):
    env = window_env(1)
    run_many(fr, trace_dir, env, 20)
    # Exited processes' windows are older than the window by now; the next
    # seal's scan (due at least once a window) expires them.
    time.sleep(2.5)
    last = fr.run([fr.program("short_lived")], trace_dir, env=env)
    assert last.returncode == 0
    left = [n for n in os.listdir(trace_dir) if n.endswith(".seg")]
    assert len(left) <= 1, left   # only the last process's own window
    [tally] = fr.dump_json("info", "--json", trace_dir)["disk_budget"]
    assert tally["expired_windows"] == 20 and tally["deleted_segments"] == 0, tally
    assert "window segments expired" in fr.dump_run("info", trace_dir).stdout
