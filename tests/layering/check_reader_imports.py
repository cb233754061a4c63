#!/usr/bin/env python3
"""The reader's layering, checked (issue 40 item 5; docs/ARCHITECTURE.md,
"The reader's layers").

Reads every import of scripts/flightrec-dump and scripts/flightrec_lib/
(with the ast module: imports inside functions count too) and fails when

  * the modules import each other in a cycle, or
  * a command module (commands/cmd_*.py) imports another command module, or
  * a module outside commands/ imports a command module, unless the fenced
    block after "Reader import exceptions" in docs/ARCHITECTURE.md lists that
    edge (`viewer_views -> commands.cmd_heap`, one a line); an entry no
    import needs any more fails too, so the list only shrinks.

The CLI finds the commands by name (importlib), which is not an import edge.

    tests/layering/check_reader_imports.py [ROOT]    exit 0, or 1 with one line per problem
    tests/layering/check_reader_imports.py --self-test
"""
import ast
import os
import re
import sys
import tempfile

PACKAGE = "flightrec_lib"


def modules(scripts_dir):
    """{module name relative to the package ("cli", "commands.cmd_top"): path},
    plus the flightrec-dump script as "flightrec-dump"."""
    out = {}
    top = os.path.join(scripts_dir, PACKAGE)
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), top)[:-3].replace(os.sep, ".")
            if rel == "__init__":
                rel = ""
            elif rel.endswith(".__init__"):
                rel = rel[:-len(".__init__")]
            out[rel] = os.path.join(dirpath, name)
    script = os.path.join(scripts_dir, "flightrec-dump")
    if os.path.exists(script):
        out["flightrec-dump"] = script
    return out


def _resolve(name, known):
    """The known module an absolute dotted name stands for, or None."""
    if name == PACKAGE:
        return ""
    if name.startswith(PACKAGE + "."):
        rel = name[len(PACKAGE) + 1:]
        return rel if rel in known else None
    return None


def imports(mods):
    """{module: set of package modules it imports}."""
    graph = {}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = os.path.basename(path) == "__init__.py"
        parts = [] if mod in ("", "flightrec-dump") else mod.split(".")
        package = parts if is_pkg else parts[:-1]
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _resolve(alias.name, mods)
                    if target is not None:
                        out.add(target)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                    dotted = ".".join(base + (node.module.split(".") if node.module else []))
                    absolute = PACKAGE + ("." + dotted if dotted else "")
                else:
                    absolute = node.module or ""
                base_mod = _resolve(absolute, mods)
                for alias in node.names:
                    sub = _resolve(absolute + "." + alias.name, mods)
                    if sub is not None:
                        out.add(sub)       # `from . import cli`: the module cli
                    elif base_mod is not None:
                        out.add(base_mod)  # `from .units import format_ns`: the module units
        out.discard(mod)
        graph[mod] = out
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan),
    each sorted; sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def is_command(mod):
    return mod.startswith("commands.cmd_")


def exceptions(root):
    """{(module, command module)} from the fenced block after "Reader import exceptions"."""
    text = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    m = re.search(r"Reader import exceptions.*?```\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("docs/ARCHITECTURE.md: no fenced block after \"Reader import exceptions\"")
    pairs = set()
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            a, b = (s.strip() for s in line.split("->"))
            pairs.add((a, b))
    return pairs


def check_graph(graph, allow=frozenset()):
    """Problem lines for an import graph ({module: set of modules})."""
    problems = []
    for comp in cycles(graph):
        ties = ["%s -> %s" % (a, b) for a in comp for b in sorted(graph[a]) if b in comp]
        problems.append("import cycle among %s (%s): move what they share into a module below them "
                        "(docs/ARCHITECTURE.md, \"The reader's layers\")" % (", ".join(comp), "; ".join(ties)))
    used = set()
    for mod in sorted(graph):
        for target in sorted(graph[mod]):
            if not is_command(target):
                continue
            if is_command(mod):
                problems.append("%s imports %s: a command may not use another command; move what they "
                                "share into a library module" % (mod, target))
            elif mod != "flightrec-dump":
                if (mod, target) in allow:
                    used.add((mod, target))
                    continue
                problems.append("%s imports %s: only commands sit above the library; move what it needs "
                                "out of the command (or list the debt under \"Reader import exceptions\")"
                                % (mod, target))
    for mod, target in sorted(set(allow) - used):
        problems.append("docs/ARCHITECTURE.md lists %s -> %s as a reader import exception, but no such "
                        "import is left: take it off the list" % (mod, target))
    return problems


def check(root):
    graph = imports(modules(os.path.join(root, "scripts")))
    return check_graph(graph, exceptions(root))


def self_test():
    """The check on a made-up package: it must see a cycle through a
    function-level import, a command importing a command, a library module
    importing a command, and a stale exception; and pass a clean package."""
    files = {
        "flightrec_lib/__init__.py": "",
        "flightrec_lib/low.py": "def f():\n    from . import high  # a cycle only at call time\n",
        "flightrec_lib/high.py": "from .low import f\n",
        "flightrec_lib/commands/__init__.py": "",
        "flightrec_lib/commands/cmd_a.py": "from .. import low\nfrom . import cmd_b\n",
        "flightrec_lib/commands/cmd_b.py": "from ..high import f\n",
        "flightrec_lib/viewer.py": "from .commands import cmd_b\n",
        "flightrec_lib/other.py": "from .commands.cmd_a import register\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        graph = imports(modules(tmp))
        problems = check_graph(graph, {("viewer", "commands.cmd_b"), ("other", "commands.cmd_b")})
        expected = [
            "import cycle among high, low",
            "commands.cmd_a imports commands.cmd_b: a command may not",
            "other imports commands.cmd_a: only commands",
            "lists other -> commands.cmd_b as a reader import exception",
        ]
        for e in expected:
            assert sum(e in p for p in problems) == 1, (e, problems)
        assert len(problems) == len(expected), problems
        # Break the cycle, drop the command edges: clean.
        os.remove(os.path.join(tmp, "flightrec_lib/low.py"))
        with open(os.path.join(tmp, "flightrec_lib/low.py"), "w") as f:
            f.write("def f():\n    return 1\n")
        with open(os.path.join(tmp, "flightrec_lib/commands/cmd_a.py"), "w") as f:
            f.write("from .. import low\n")
        os.remove(os.path.join(tmp, "flightrec_lib/other.py"))
        graph = imports(modules(tmp))
        assert check_graph(graph, {("viewer", "commands.cmd_b")}) == [], check_graph(graph)
    print("check_reader_imports self-test: ok")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = check(os.path.normpath(root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
