"""A process started as root whose forked child switches to `nobody` (setgroups,
setgid, setuid: what nginx does for its workers) keeps recording. The output
directory is root's and 0700, so after the switch the child cannot even open
it; its segments go to OUTPUT/uid-65534, made for it while it was still root,
and the trace of the child is whole: every socket call, every sampled
allocation, CPU samples, all segments sealed, rotation working on both sides
of the switch. A switch from root to root changes nothing."""
import os
import re
import stat

import pytest

ROUNDS = 10000
MSG = 64
ALLOC_SIZE = 4321
NOBODY = 65534
# Segments of at most a second and a child that lingers for two after its
# work, so it rotates after the switch whatever the machine's load (rotation
# by size depends on how the drains happened to cut the work); rings big
# enough and every allocation sampled, so the counts below are exact.
# Per-call socket records (FLIGHTREC_SOCKETS=calls): the tests count every call.
ENV = {"FLIGHTREC_SEGMENT_SECONDS": 1, "FLIGHTREC_ALLOC_SAMPLE_BYTES": 1, "FLIGHTREC_RING_BYTES": "8M",
       "FLIGHTREC_SOCKETS": "calls"}
LINGER_S = 2


def run(fr, trace_dir, mode):
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    proc = fr.run([fr.program("priv_drop"), mode, str(ROUNDS), str(LINGER_S)], trace_dir, env=ENV)
    assert [line for line in proc.stderr.splitlines() if line.startswith("flightrec:")] == [], proc.stderr
    m = re.search(r"^child pid=(\d+) uid=(\d+) output=(\S+)$", proc.stdout, re.M)
    assert m and "parent done status=0" in proc.stdout, proc.stdout
    doc = fr.dump_json("info", "--json", trace_dir)
    assert doc["segments"] and not doc["errors"], doc["errors"]
    assert all(s["state"] == "sealed" and not s["bad_blocks"] and not s["problems"] for s in doc["segments"]), \
        doc["segments"]
    assert {s["service"] for s in doc["segments"]} == {"priv_drop"}
    return int(m.group(1)), int(m.group(2)), m.group(3), doc


def child_trace_is_whole(fr, trace_dir, child, doc):
    """Every call the child made, across its segments in both directories."""
    ops = [e for e in fr.events(trace_dir, "socket.op") if e["pid"] == child]
    # socketpair, ROUNDS sends and ROUNDS receives (one message each: a unix
    # stream pair delivers 64 bytes whole), two closes.
    assert len(ops) == 1 + 2 * ROUNDS + 2, len(ops)
    assert not {k: v for k, v in doc["dropped"].items() if not k.startswith("sampler.")}, doc["dropped"]
    sockets = fr.dump_json("sockets", "--json", trace_dir)
    pair = sorted((c["bytes_out"], c["bytes_in"]) for c in sockets["connections"] if c["pid"] == child)
    assert pair == [(0, ROUNDS * MSG), (ROUNDS * MSG, 0)], pair
    allocs = [e for e in fr.events(trace_dir, "alloc.sample") if e["pid"] == child and e["size"] == ALLOC_SIZE]
    assert len(allocs) == ROUNDS
    burns = [e for e in fr.events(trace_dir, "cpu.sample")
             if e["pid"] == child and any(f["function"] == "child_burn" for f in e["stack"])]
    assert burns, "no CPU sample of the child's burn"
    return len(burns)


@pytest.mark.slow
def test_child_that_drops_root_keeps_recording(fr, trace_dir):
    child, uid, output, doc = run(fr, trace_dir, "drop")
    # The switch really cut the child off from the output directory.
    assert (uid, output) == (NOBODY, "EACCES")
    top = str(trace_dir)
    sub = os.path.join(top, "uid-%d" % NOBODY)
    where = {}
    for s in doc["segments"]:
        where.setdefault((s["pid"], os.path.dirname(s["path"])), []).append(s["sequence"])
    parent = {pid for pid, _ in where} - {child}
    assert len(parent) == 1 and (parent.pop(), sub) not in where
    # Before the switch the child wrote next to its parent; after it, in its
    # own directory, rotating there (numbering goes on).
    before, after = where.get((child, top), []), where.get((child, sub), [])
    assert before and len(after) >= 2, where
    assert sorted(before + after) == list(range(len(before) + len(after))) and max(before) < min(after)
    # Files and directories as the security model says: the output directory
    # untouched (root, 0700), the per-uid one the uid's own, 0700, files 0600.
    st = os.lstat(top)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    st = os.lstat(sub)
    assert stat.S_ISDIR(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o700)
    for name in os.listdir(sub):
        st = os.lstat(os.path.join(sub, name))
        assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600), name
    burns = child_trace_is_whole(fr, trace_dir, child, doc)
    print("child %d: %d segments before the switch, %d after in %s; %d CPU samples in child_burn"
          % (child, len(before), len(after), sub, burns))


@pytest.mark.slow
def test_root_to_root_changes_nothing(fr, trace_dir):
    child, uid, output, doc = run(fr, trace_dir, "stay")
    assert (uid, output) == (0, "OK")
    assert os.listdir(trace_dir) and not [n for n in os.listdir(trace_dir) if n.startswith("uid-")]
    assert {os.path.dirname(s["path"]) for s in doc["segments"]} == {str(trace_dir)}
    child_trace_is_whole(fr, trace_dir, child, doc)
