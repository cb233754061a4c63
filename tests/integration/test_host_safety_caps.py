"""Capabilities are per thread, while glibc runs setgid/setresgid/setgroups
on every thread and aborts the process when one thread's call fails where
the caller's succeeded. setpriv keeps its capabilities across the uid switch
(PR_SET_KEEPCAPS), raises them again with capset, then changes its groups:
under the preload our threads must follow both (preload/runtime/
recorder_caps.h), or the program dies of SIGABRT where it ran plain."""
import os
import shutil

import pytest

SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV, reason="needs root and util-linux's setpriv")
@pytest.mark.parametrize("args", [["--reuid=65534", "--regid=65534", "--clear-groups"],
                                  ["--reuid=65534", "--regid=65534", "--init-groups"],
                                  ["--regid=65534", "--reuid=65534", "--keep-groups"]])
def test_setpriv_keepcaps_then_group_change_ends_as_plain(fr, trace_dir, args):
    cmd = [SETPRIV] + args + ["id"]
    plain = fr.run(cmd, trace_dir, preload=False, check=False)
    for _ in range(3):  # the abort was not every time: a few runs
        traced = fr.run(cmd, trace_dir, check=False)
        assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced.stderr
    assert plain.returncode == 0 and "uid=65534" in plain.stdout, plain.stderr
    # setpriv's own segment (written as root, before the switch) is sealed.
    segs = [s for s in fr.segments(trace_dir) if "-setpriv-" in os.path.basename(s)]
    assert segs and all(s.endswith(".seg") for s in segs), fr.segments(trace_dir)
