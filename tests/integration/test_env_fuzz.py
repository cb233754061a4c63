"""Every FLIGHTREC_* variable (the list is read from preload/runtime/config.cc, so a
new knob is fuzzed without editing this file) set to junk: empty, negative,
huge, non-numeric, very long, non-UTF-8, control characters, format
directives, and for paths symlinks, loops, files and relative paths. The host
(tests/programs/fault_worker doing threads, allocations and socket traffic)
must answer exactly as without the preload, with the same exit status, and
flightrec may print at most one line per bad variable, each a single line.

A fixed seed and a bounded number of combinations keep it deterministic and
well under a minute; FLIGHTREC_FUZZ_COMBOS raises the count for longer runs."""
import os
import random
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_CC = os.path.join(HERE, "..", "..", "preload", "runtime", "config.cc")
SCRIPT = b"work fuzz 60\nquit 5\n"
SEED = 20261130
COMBOS = int(os.environ.get("FLIGHTREC_FUZZ_COMBOS", "36"))

JUNK = [
    b"", b"-1", b"-99999999999999999999", b"18446744073709551616", b"99999999999999999999999999",
    b"1e3", b"0x10", b" 5", b"5 ", b"5k5", b"12QB", b"NaN", b"abc", b"yes please",
    b"A" * 10000, b"\xff\xfe\x80not-utf8", b"line1\nline2", b"%s%s%n%s%p", b"\x1b[31mred\x1b[0m",
    b"\t", b"0" * 300 + b"1", b"\xe2\x82\xac",
]


def knobs():
    with open(CONFIG_CC) as f:
        names = sorted(set(re.findall(r'name == "(FLIGHTREC_[A-Z0-9_]+)"', f.read())))
    assert len(names) >= 30, names  # the parser's list, not a stale copy
    return names


def path_junk(tmp_path):
    """Output paths that must be refused or handled without hurting the host."""
    real = tmp_path / "real-dir"
    real.mkdir(mode=0o700, exist_ok=True)
    for name, target in (("link-to-dir", real), ("loop", tmp_path / "loop"), ("dangling", tmp_path / "nowhere")):
        link = tmp_path / name
        if not os.path.lexists(link):
            os.symlink(target, link)
    afile = tmp_path / "a-file"
    afile.write_text("not a directory")
    return [str(tmp_path / "link-to-dir").encode(), str(tmp_path / "loop" / "sub").encode(),
            str(tmp_path / "dangling").encode(), str(afile).encode(), str(afile / "below").encode(),
            b"relative/dir", b"/proc/self", b"/dev/null", str(tmp_path / "link-to-dir" / "..").encode()]


def run(fr, out, extra, preload):
    env = {k.encode(): v.encode() for k, v in os.environ.items() if not k.startswith(("FLIGHTREC_", "AWS_"))}
    # A junk bucket name can be a valid one ("abc"): with no credentials the
    # uploader would go on to instance metadata. Tests talk to loopback only.
    env[b"AWS_EC2_METADATA_DISABLED"] = b"true"
    if preload:
        env[b"LD_PRELOAD"] = fr.lib.encode()
        env[b"FLIGHTREC_OUTPUT"] = str(out).encode()
        env[b"FLIGHTREC_ALLOC_SAMPLE_BYTES"] = b"4096"
        # Uploads go nowhere fast unless the combination itself sets these.
        env[b"FLIGHTREC_S3_ENDPOINT"] = b"http://127.0.0.1:9"
        env[b"FLIGHTREC_UPLOAD_SHUTDOWN_MS"] = b"200"
        env.update(extra)
    # In the test's directory: a relative FLIGHTREC_OUTPUT is created there.
    return subprocess.run([fr.program("fault_worker")], env=env, input=SCRIPT, capture_output=True, timeout=60,
                          cwd=os.path.dirname(str(out)))


@pytest.mark.slow
def test_junk_in_every_variable_leaves_the_host_alone(fr, tmp_path):
    names = knobs()
    paths = path_junk(tmp_path)
    plain = run(fr, tmp_path / "plain", {}, preload=False)
    assert plain.returncode == 5 and plain.stdout.startswith(b"fuzz rounds=60"), plain
    rng = random.Random(SEED)
    # Every variable alone with every junk value it is drawn with, then mixes.
    combos = [{n.encode(): rng.choice(JUNK + (paths if n == "FLIGHTREC_OUTPUT" else []))} for n in names]
    while len(combos) < len(names) + COMBOS:
        picked = rng.sample(names, rng.randint(2, 6))
        combos.append({n.encode(): rng.choice(JUNK + (paths if n == "FLIGHTREC_OUTPUT" else []))
                       for n in picked})
    worst = 0
    for i, extra in enumerate(combos):
        out = tmp_path / f"out-{i}"
        proc = run(fr, out, extra, preload=True)
        shown = {k.decode(): v[:40] for k, v in extra.items()}
        assert proc.returncode == plain.returncode, (shown, proc.returncode, proc.stderr[-2000:])
        assert proc.stdout == plain.stdout, (shown, proc.stderr[-2000:])
        lines = proc.stderr.split(b"\n")
        ours = [line for line in lines if line.startswith(b"flightrec: ")]
        others = [line for line in lines if line and not line.startswith(b"flightrec: ")]
        # Every stderr line is ours and whole: no value broke a line in two.
        assert others == [], (shown, proc.stderr[-2000:])
        assert len(ours) <= len(extra), (shown, ours)
        worst = max(worst, len(ours))
    print(f"{len(combos)} combinations of {len(names)} variables; at most {worst} flightrec line(s) per run")
