"""S3 upload of segments written after a privilege drop (root only).

A process that drops root records into OUTPUT/uid-N, which it reaches only
through a descriptor (test_privilege_drop.py). Those segments reach the S3
stand-in (test_s3_upload.py) under the same keys as any other,
{prefix}/{service}/{date}/{host}/{file} (the directory is not in the key):
shipped by the dropped process's own uploader through its descriptor, or by
a process running as root, which also looks into OUTPUT/uid-* (one level, no
symlinks, directories of root or of the uid in the name), for what a worker
left behind.
"""
import os
import shutil
import socket
import stat

import pytest

from test_s3_upload import free_port, s3, s3_env, sha  # noqa: F401 (s3 is a fixture)

ROUNDS = 10000
NOBODY = 65534
SUB = "uid-%d" % NOBODY
# Small segments: several on each side of the switch.
ENV = {"FLIGHTREC_SEGMENT_BYTES": "64k", "FLIGHTREC_ALLOC_SAMPLE_BYTES": 1, "FLIGHTREC_RING_BYTES": "8M"}


@pytest.fixture(autouse=True)
def needs_root():
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")


def run(fr, trace_dir, mode, env, rounds=ROUNDS, linger=0):
    proc = fr.run([fr.program("priv_drop"), mode, str(rounds), str(linger)], trace_dir, env={**ENV, **env})
    if mode == "stay":
        return proc, None
    m = [line.split() for line in proc.stdout.splitlines() if line.startswith("child pid=")]
    assert m and m[0][2] == "uid=%d" % NOBODY and m[0][3] == "output=EACCES", proc.stdout
    return proc, int(m[0][1].split("=")[1])


def local_segments(trace_dir):
    """{(directory relative to OUTPUT, file name)} of every segment file, sealed or not."""
    found = set()
    for where in (trace_dir, trace_dir / SUB):
        if where.is_dir():
            rel = "" if where == trace_dir else SUB
            found |= {(rel, n) for n in os.listdir(where) if n.endswith((".seg", ".active"))}
    return found


def remote(s3):
    """{file name: bytes}, checking that every key is {prefix}/{service}/{date}/{host}/{file}."""
    out = {}
    for key, data in s3.objects().items():
        parts = key.split("/")
        assert len(parts) == 5 and parts[:2] == ["flightrec", "priv_drop"], key
        name = parts[4]
        assert parts[2] == "%s-%s-%s" % (name[:4], name[4:6], name[6:8]), key  # the date in the name
        assert parts[3] == socket.gethostname(), key
        assert name not in out, key
        out[name] = data
    return out


def decoded(fr, tmp_path, objects):
    """The uploaded objects as one trace directory, with its `info`."""
    copy = tmp_path / "from-s3"
    copy.mkdir()
    for name, data in objects.items():
        (copy / name).write_bytes(data)
    doc = fr.dump_json("info", "--json", copy)
    assert not doc["errors"] and all(s["state"] == "sealed" for s in doc["segments"]), doc
    return copy, doc


def flightrec_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("flightrec:")]


@pytest.mark.slow
@pytest.mark.parametrize("keep_local", [0, 1])
def test_dropped_childs_segments_reach_s3(fr, trace_dir, tmp_path, s3, keep_local):
    # The child lives well under 5 s, so it never starts an uploader of its
    # own: its uid-N segments are shipped by its root parent at exit.
    # Per-call socket records (FLIGHTREC_SOCKETS=calls): every call is counted below.
    proc, child = run(fr, trace_dir, "drop", s3_env(s3.endpoint, FLIGHTREC_KEEP_LOCAL=keep_local,
                                                    FLIGHTREC_SOCKETS="calls"))
    assert flightrec_lines(proc) == [], proc.stderr
    objects = remote(s3)
    copy, doc = decoded(fr, tmp_path, objects)
    # Every segment of the child, on both sides of the switch: its sequence
    # numbers run unbroken and every socket call it made is in them.
    seqs = sorted(s["sequence"] for s in doc["segments"] if s["pid"] == child)
    assert seqs == list(range(len(seqs))), seqs
    ops = [e for e in fr.events(copy, "socket.op") if e["pid"] == child]
    assert len(ops) == 1 + 2 * ROUNDS + 2, len(ops)
    assert {s["pid"] for s in doc["segments"]} - {child}, "the parent's segments are shipped too"

    if keep_local:
        local = local_segments(trace_dir)
        in_sub = [n for d, n in local if d == SUB]
        assert len(in_sub) >= 2 and all(n.split("-")[-2] == str(child) for n in in_sub), local
        assert sorted(n for _, n in local) == sorted(objects), (local, sorted(objects))
        for d, n in local:
            path = trace_dir / d / n
            assert sha(path.read_bytes()) == sha(objects[n]), n
            st = os.lstat(path)
            # Kept, marked as shipped, still the writer's own.
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o400, NOBODY if d else 0), (d, n)
    else:
        assert local_segments(trace_dir) == set(), "uploaded segments are deleted, in uid-N too"
        assert (trace_dir / SUB).is_dir()
    puts = [r for r in s3.requests() if r["op"] == "PutObject"]
    assert len(puts) == len(objects) and all(r["status"] == 200 for r in puts), puts  # each exactly once


@pytest.mark.slow
def test_long_lived_dropped_child_ships_from_its_own_directory(fr, trace_dir, tmp_path, s3):
    # An nginx worker: the child lingers past the 5 s after which a forked
    # child starts an uploader of its own, rotating every second meanwhile.
    proc, child = run(fr, trace_dir, "drop", s3_env(s3.endpoint, FLIGHTREC_LOG="debug"), rounds=2000, linger=6)
    assert [line for line in flightrec_lines(proc) if " uploading from " in line] == \
        ["flightrec: uploading from %s/%s" % (trace_dir, SUB)], proc.stderr
    assert not [line for line in flightrec_lines(proc) if "cannot" in line or "S3 u" in line], proc.stderr
    objects = remote(s3)
    _, doc = decoded(fr, tmp_path, objects)
    seqs = sorted(s["sequence"] for s in doc["segments"] if s["pid"] == child)
    assert len(seqs) >= 6 and seqs == list(range(len(seqs))), seqs
    assert local_segments(trace_dir) == set()


@pytest.mark.slow
def test_process_that_drops_root_ships_from_its_own_directory(fr, trace_dir, tmp_path, s3):
    # No fork: the process itself switches to nobody while its upload thread
    # runs; nobody else could upload its uid-N segments.
    proc, pid = run(fr, trace_dir, "self", s3_env(s3.endpoint))
    before = {n for d, n in local_segments(trace_dir) if d == ""}
    # Nothing left in uid-N. What it sealed as root may stay in OUTPUT, which
    # it cannot enter any more; if that upload was under way at the switch,
    # the file was shipped but cannot be deleted: said once per file.
    assert local_segments(trace_dir) == {("", n) for n in before}
    objects = remote(s3)
    lines = flightrec_lines(proc)
    assert len(lines) == len(before & set(objects)), proc.stderr
    assert all(line.startswith("flightrec: cannot delete uploaded %s/" % trace_dir) and
               line.endswith("Permission denied") for line in lines), proc.stderr
    copy, doc = decoded(fr, tmp_path, objects)
    assert {s["pid"] for s in doc["segments"]} == {pid}, doc["segments"]
    # It allocated only after the switch: every one of those allocations
    # (sampled each) is in S3, so every segment it wrote in uid-N is.
    allocs = [e for e in fr.events(copy, "alloc.sample") if e["size"] == 4321]
    assert len(allocs) == ROUNDS, len(allocs)
    seqs = sorted({s["sequence"] for s in doc["segments"]} | {int(n[:-4].split("-")[-1]) for n in before})
    assert seqs == list(range(len(seqs))), seqs

    # A later run as root ships what the dropped process had to leave.
    run(fr, trace_dir, "stay", s3_env(s3.endpoint), rounds=10)
    assert before <= set(remote(s3))
    assert local_segments(trace_dir) == set()


@pytest.mark.slow
def test_root_run_ships_leftovers_in_uid_dirs_not_through_symlinks(fr, trace_dir, tmp_path, s3):
    # S3 down: the dropped process leaves everything behind.
    down = f"http://127.0.0.1:{free_port()}"
    proc, _ = run(fr, trace_dir, "self", s3_env(down, FLIGHTREC_UPLOAD_SHUTDOWN_MS=500))
    assert proc.stderr.count("S3 unavailable") == 1, proc.stderr
    left = {(d, n): (trace_dir / d / n).read_bytes() for d, n in local_segments(trace_dir)}
    assert [d for d, _ in left].count(SUB) >= 2, left
    # Decoys a root uploader must not follow: a symlink named like a uid
    # directory, and one owned by neither root nor the uid in its name.
    sample = next(data for (d, _), data in left.items() if d == SUB)
    other = tmp_path / "elsewhere"
    other.mkdir(mode=0o700)
    (other / "20200101T000000.000Z-priv_drop-1-0000.seg").write_bytes(sample)
    os.symlink(other, trace_dir / "uid-4444")
    planted = trace_dir / "uid-4343"
    planted.mkdir(mode=0o700)
    (planted / "20200101T000000.000Z-priv_drop-2-0000.seg").write_bytes(sample)
    os.chown(planted / "20200101T000000.000Z-priv_drop-2-0000.seg", 4343, 4343)
    os.chown(planted, 1000, 1000)

    run(fr, trace_dir, "stay", s3_env(s3.endpoint), rounds=10)
    objects = remote(s3)
    for (d, n), data in left.items():
        assert n in objects, (d, n, sorted(objects))
        assert sha(objects[n]) == sha(data), n
    assert not [n for n in objects if n.startswith("2020")], sorted(objects)
    assert local_segments(trace_dir) == set()
    assert os.listdir(other) and os.listdir(planted)
