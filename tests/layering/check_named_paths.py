#!/usr/bin/python3
"""Every repository path a comment or document names exists.

Comments and docs point newcomers at the file that owns a step
("see preload/fds/fd_guard.h"); when a file moves, a stale pointer sends them
nowhere (issue 40 item 6). This scans the sources and docs for paths under
the project's top-level folders and fails on any that is not in the tree.
    check_named_paths.py [--self-test]
"""
import os
import re
import subprocess
import sys

ROOTS = ("preload", "sampler", "format", "uploader", "scripts", "tests", "bench", "docs")
PATH = re.compile(r"\b((?:%s)/[A-Za-z0-9_./-]+\.(?:cc|h|py|md))\b" % "|".join(ROOTS))


def named_paths(text):
    return {m.group(1) for m in PATH.finditer(text)}


def missing(repo):
    files = subprocess.run(["git", "-C", repo, "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    tracked = set(files)
    out = []
    for f in files:
        if not f.endswith((".cc", ".h", ".py", ".md")) or not os.path.isfile(os.path.join(repo, f)):
            continue
        with open(os.path.join(repo, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for p in sorted(named_paths(text)):
            if p not in tracked and not os.path.exists(os.path.join(repo, p)):
                out.append((f, p))
    return out


def self_test():
    assert named_paths("see preload/fds/fd_guard.h and (sampler/sampler.cc).") == \
        {"preload/fds/fd_guard.h", "sampler/sampler.cc"}
    assert named_paths("src/profiling/memory/client.h, /usr/include/elf.h") == set()
    print("check_named_paths self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = missing(repo)
    for f, p in bad:
        print("%s names %s, which is not in the tree (moved? say where it is now)" % (f, p))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
