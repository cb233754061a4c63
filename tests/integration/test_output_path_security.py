"""Where a root process writes, ships and deletes (issue #29, items 11-13; root only).

The output path is walked from "/" one component at a time, never through a
symlink another user owns, never into a directory other users may write to
unless it is sticky and ours (preload/flush/safe_path.h, docs/LIMITS.md);
the uploader ships and deletes only regular files with one name, owned by
us (or, in OUTPUT/uid-N, by N); and a process that switched its effective
uid to N and back to root records as root in OUTPUT again, not in uid-N.
"""
import os
import stat

import pytest

from test_s3_upload import s3, s3_env  # noqa: F401 (s3 is a fixture)

NOBODY = 65534
SUB = "uid-%d" % NOBODY


@pytest.fixture(autouse=True)
def needs_root():
    if os.geteuid() != 0:
        pytest.skip("files of another user need root")


def flightrec_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("flightrec:")]


def segment_files(d):
    return sorted(n for n in os.listdir(d) if n.endswith((".seg", ".active"))) if os.path.isdir(d) else []


def all_sealed(fr, out):
    doc = fr.dump_json("info", "--json", out)
    return bool(doc["segments"]) and all(s["state"] == "sealed" for s in doc["segments"])


def test_symlink_owned_by_another_user_is_not_followed(fr, tmp_path):
    # /tmp-like: anyone may create names in it, and uid 65534 made `link`.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = shared / "link"
    os.symlink(target, link)
    os.lchown(link, NOBODY, NOBODY)
    proc = fr.run([fr.program("crash_test"), "none"], link / "fr")
    assert os.listdir(target) == [], "segments were written in the target of another user's symlink"
    lines = flightrec_lines(proc)
    assert len(lines) == 1 and "symlink owned by uid 65534" in lines[0], proc.stderr
    # The same link, root's own (as /var/run -> /run): followed.
    os.lchown(link, 0, 0)
    proc = fr.run([fr.program("crash_test"), "none"], link / "fr")
    assert flightrec_lines(proc) == [], proc.stderr
    assert segment_files(target / "fr") and all_sealed(fr, target / "fr")


def test_directory_on_the_way_that_others_can_write_is_refused(fr, tmp_path):
    # World-writable and not sticky: anyone could swap `fr` for a symlink.
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    proc = fr.run([fr.program("crash_test"), "none"], open_dir / "fr")
    lines = flightrec_lines(proc)
    assert len(lines) == 1 and "writable by other users and not sticky" in lines[0], proc.stderr
    assert not os.path.exists(open_dir / "fr")


@pytest.mark.parametrize("mode,owner,accepted", [
    (0o777, 0, False),       # ours, but anyone may rename or delete our files
    (0o770, 0, False),       # the same for the group (root's group is ours, so a foreign group)
    (0o1777, 0, True),       # ours and sticky: others may add files, never touch ours
    (0o1777, NOBODY, False),  # sticky but another user's, even with FLIGHTREC_ALLOW_FOREIGN_DIR=1
])
def test_output_directory_others_can_write(fr, tmp_path, mode, owner, accepted):
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, mode)
    os.chown(out, owner, 4343 if mode == 0o770 else 0)
    proc = fr.run([fr.program("crash_test"), "none"], out, env={"FLIGHTREC_ALLOW_FOREIGN_DIR": 1})
    lines = flightrec_lines(proc)
    if accepted:
        assert lines == [], proc.stderr
        assert segment_files(out) and all_sealed(fr, out)
    else:
        assert len(lines) == 1 and "is writable by other users; refusing it" in lines[0], proc.stderr
        assert segment_files(out) == []


def test_root_uploader_ships_and_deletes_no_planted_hardlink(fr, trace_dir, tmp_path, s3):
    # A sticky output directory of root's (accepted), in which another user
    # made uid-65534 and planted hardlinks to a root-only file, named like
    # segments, there and in OUTPUT itself.
    os.chmod(trace_dir, 0o1777)
    secret = tmp_path / "root-only"
    secret.write_bytes(b"ROOT-ONLY-SECRET " * 64)
    os.chmod(secret, 0o600)
    sub = trace_dir / SUB
    sub.mkdir(mode=0o700)
    os.chown(sub, NOBODY, NOBODY)
    planted = [sub / "20200101T000000.000Z-crash_test-1-0000.seg",
               trace_dir / "20200101T000000.000Z-crash_test-2-0000.seg"]
    for p in planted:
        os.link(secret, p)
    proc = fr.run([fr.program("crash_test"), "none"], trace_dir, env=s3_env(s3.endpoint))
    assert flightrec_lines(proc) == [], proc.stderr
    objects = s3.objects()
    assert objects, "the process's own segments are shipped"
    assert not [k for k in objects if "/2020" in k], sorted(objects)
    assert not [v for v in objects.values() if b"ROOT-ONLY-SECRET" in v]
    assert all(p.exists() for p in planted), "a planted hardlink was deleted"
    assert os.stat(secret).st_nlink == 3
    assert segment_files(trace_dir) == sorted(p.name for p in planted if p.parent == trace_dir)


def test_seteuid_back_to_root_records_in_output_again(fr, trace_dir):
    rounds = 1000
    proc = fr.run([fr.program("euid_return"), str(rounds)], trace_dir,
                  env={"FLIGHTREC_ALLOC_SAMPLE_BYTES": 1, "FLIGHTREC_RING_BYTES": "8M"})
    assert "as-user euid=65534" in proc.stdout and "back euid=0" in proc.stdout, proc.stdout
    assert flightrec_lines(proc) == [], proc.stderr
    sub = trace_dir / SUB
    sizes = {}  # directory -> {allocation size: count}
    seqs = {}   # directory -> segment sequence numbers
    for d in (trace_dir, sub):
        for name in segment_files(d):
            # Nothing root wrote sits in the directory uid 65534 owns.
            assert d == trace_dir or os.stat(d / name).st_uid == NOBODY, (name, os.stat(d / name).st_uid)
            assert name.endswith(".seg"), name
            seqs.setdefault(d, []).append(int(name[:-4].split("-")[-1]))
            for e in fr.events(d / name, "alloc.sample"):
                if e["size"] in (1111, 2222):
                    counts = sizes.setdefault(d, {})
                    counts[e["size"]] = counts.get(e["size"], 0) + 1
    # Root, then the user in uid-N, then root again in OUTPUT.
    assert seqs.get(sub) and max(seqs[trace_dir]) > max(seqs[sub]) > min(seqs[trace_dir]), seqs
    if not fr.sanitized:  # under a sanitizer's allocator nothing is sampled
        assert sizes.get(sub) == {1111: rounds}, sizes
        assert sizes.get(trace_dir) == {2222: rounds}, sizes
    st = os.lstat(trace_dir)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)


def test_uploader_follows_the_way_back_to_root(fr, trace_dir, s3):
    # The segment written as 65534 is shipped from uid-N, the ones root wrote
    # after seteuid(0) from OUTPUT: nothing is left behind.
    rounds = 1000
    proc = fr.run([fr.program("euid_return"), str(rounds)], trace_dir,
                  env=s3_env(s3.endpoint, FLIGHTREC_ALLOC_SAMPLE_BYTES=1, FLIGHTREC_RING_BYTES="8M"))
    # Root's first segment, if its upload was under way at seteuid(65534),
    # cannot be deleted then (OUTPUT is root's 0700); back as root, it is.
    assert not [line for line in flightrec_lines(proc) if "cannot delete uploaded" not in line], proc.stderr
    assert segment_files(trace_dir) == [] and segment_files(trace_dir / SUB) == [], \
        (segment_files(trace_dir), segment_files(trace_dir / SUB))
    copy = trace_dir.parent / "from-s3"
    copy.mkdir()
    for key, data in s3.objects().items():
        (copy / key.rsplit("/", 1)[1]).write_bytes(data)
    sizes = [e["size"] for e in fr.events(copy, "alloc.sample") if e["size"] in (1111, 2222)]
    assert sorted(sizes) == [1111] * rounds + [2222] * rounds
