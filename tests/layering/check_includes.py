#!/usr/bin/env python3
"""The dependency rule of docs/ARCHITECTURE.md, checked (issue 40 item 4).

Every `#include "room/..."` in preload/, sampler/, uploader/ and format/ must
point in an allowed direction:

  format/                         includes only format/ (the bottom layer)
  the runtime's rooms             format/ and the runtime's rooms
    (preload/{runtime,threads,flush,crash,fds,stacks,heap})
  each producer                   format/, the runtime's rooms and itself
    (preload/alloc, preload/sockets, sampler, uploader)

so producers know the runtime only through its recording API and the
runtime knows producers only through registration. The exceptions are the
fenced block after "Include exceptions" in docs/ARCHITECTURE.md, one
`from -> included` per line; an exception no file needs any more fails too,
so the list shrinks as the debts are paid.

    tests/layering/check_includes.py [ROOT]     exit 0, or 1 with one line per violation
"""
import os
import re
import sys

RUNTIME = ("preload/runtime", "preload/threads", "preload/flush", "preload/crash", "preload/fds",
           "preload/stacks", "preload/heap")
PRODUCERS = ("preload/alloc", "preload/sockets", "sampler", "uploader")
SOURCE_DIRS = ("format", "preload", "sampler", "uploader")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    """The room a repository path belongs to: the longest known prefix."""
    for room in sorted(RUNTIME + PRODUCERS + ("format",), key=len, reverse=True):
        if path == room or path.startswith(room + "/"):
            return room
    return None


def allowed(from_room, to_room):
    if to_room == "format":
        return True
    if from_room == "format":
        return False
    if to_room in RUNTIME:
        return True
    return from_room == to_room  # a producer within itself


def exceptions(root):
    """{(from_file, included)} from the fenced block after "Include exceptions"."""
    text = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    m = re.search(r"Include exceptions.*?```\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("docs/ARCHITECTURE.md: no fenced block after \"Include exceptions\"")
    pairs = set()
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            a, b = (s.strip() for s in line.split("->"))
            pairs.add((a, b))
    return pairs


def includes(root):
    """(from_file, included) for every quoted include under SOURCE_DIRS."""
    for top in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for inc in INCLUDE.findall(f.read()):
                        yield rel, inc


def check(root):
    allow = exceptions(root)
    used, problems = set(), []
    for src, inc in includes(root):
        a, b = room_of(src), room_of(inc)
        if a is None or b is None or allowed(a, b):
            continue
        if (src, inc) in allow:
            used.add((src, inc))
            continue
        problems.append("%s includes %s: %s may not depend on %s (docs/ARCHITECTURE.md, "
                        "\"The one rule of dependency\")" % (src, inc, a, b))
    for src, inc in sorted(allow - used):
        problems.append("docs/ARCHITECTURE.md lists %s -> %s as an exception, but no such include "
                        "is left: take it off the list" % (src, inc))
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = check(os.path.normpath(root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
