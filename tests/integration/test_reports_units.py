"""Unit-level tests of the report renderers (scripts/flightrec_lib): the call
tree layout, folded stacks, the pprof encoder (decoded back by `go tool
pprof`) and the flame graph SVG (parsed, and its script exercised in node).
They need no trace: the input is what profiles.py hands the renderers."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from flightrec_lib import calltree, flamegraph, pprof_proto  # noqa: E402

PERIOD = 10101010  # ns per sample at 99 Hz


def split_entries():
    """300 samples: worker_main -> outer_step -> leaf_a (210) / leaf_b (90)."""
    return ([(["worker_main", "outer_step", "leaf_a"], 1, PERIOD)] * 210 +
            [(["worker_main", "outer_step", "leaf_b"], 1, PERIOD)] * 90)


# ---- call tree ------------------------------------------------------------------------

def test_calltree_matches_documented_layout():
    lines = calltree.render(calltree.build(split_entries()))
    assert lines == [
        "      # samples |  total ms |   self ms | call tree",
        "            300 |  3,030.30 |      0.00 | ┬ worker_main",
        "            300 |  3,030.30 |      0.00 | ╰┬ outer_step",
        "            210 |  2,121.21 |  2,121.21 |  ├─ leaf_a",
        "             90 |    909.09 |    909.09 |  ╰─ leaf_b",
    ]


def test_calltree_first_seen_order_self_time_and_nesting():
    entries = [(["main", "b"], 1, 5), (["main", "a", "x"], 1, 7), (["main", "a"], 2, 3),
               (["main", "b"], 1, 5), (["other"], 4, 100)]
    root = calltree.build(entries)
    rows = [(n.name, n.samples, n.value, n.self_value, drawn)
            for n, drawn, _ in calltree.rows(root)]
    assert rows == [
        ("main", 5, 20, 0, "┬ "),
        ("b", 2, 10, 10, "├─ "),       # b was seen before a
        ("a", 3, 10, 3, "╰┬ "),
        ("x", 1, 7, 7, " ╰─ "),
        ("other", 4, 100, 100, "─ "),
    ]
    text = calltree.render(root, unit="bytes")
    assert text[0].split("|")[1].strip() == "total bytes"
    assert text[-1].split("|")[1].strip() == "100"


def test_calltree_deep_branch_draws_continuation_bars():
    entries = [(["r", "a", "a1"], 1, 1), (["r", "a", "a2"], 1, 1), (["r", "b"], 1, 1)]
    tree = [line.split("| ")[-1] for line in calltree.render(calltree.build(entries))[1:]]
    assert tree == ["┬ r", "├┬ a", "│├─ a1", "│╰─ a2", "╰─ b"]


def test_calltree_min_pct_prunes_small_subtrees():
    entries = [(["main", "big"], 1, 96), (["main", "small", "deeper"], 1, 4)]
    names = [n.name for n, _, _ in calltree.rows(calltree.build(entries), min_pct=5)]
    assert names == ["main", "big"]
    names = [n.name for n, _, _ in calltree.rows(calltree.build(entries), min_pct=4)]
    assert names == ["main", "big", "small", "deeper"]
    # A parent that loses every child is drawn as a leaf.
    line = calltree.render(calltree.build([(["p", "c"], 1, 1)]), min_pct=0)[1]
    assert line.endswith("┬ p")
    assert calltree.render(calltree.build([(["p"], 1, 1)]))[1].endswith("─ p")


def test_calltree_survives_very_deep_stacks():
    path = ["f%d" % i for i in range(5000)]
    lines = calltree.render(calltree.build([(path, 1, 1)]))
    assert len(lines) == 5001
    assert lines[-1].endswith(" ╰─ f4999")


# ---- folded -----------------------------------------------------------------------------

def test_folded_merges_and_escapes():
    entries = [(["main", "a;b", "leaf"], 2), (["main", "x"], 1), (["main", "a;b", "leaf"], 3)]
    assert flamegraph.folded(entries) == ["main;a:b;leaf 5", "main;x 1"]


# ---- pprof ------------------------------------------------------------------------------

MAPPING = {"path": "/opt/app/bin/service", "build_id": "0123456789abcdef", "start": 0x400000,
           "end": 0x480000, "offset": 0}
LIBC = {"path": "/usr/lib/x86_64-linux-gnu/libc.so.6", "build_id": "feedface",
        "start": 0x7f0000000000, "end": 0x7f0000100000, "offset": 0x1000}


def frame(fn, addr, line, inlined=False, mapping=MAPPING, file="service.cc"):
    return {"function": fn, "file": file, "line": line, "address": addr, "mapping": mapping,
            "inlined": inlined}


def go_pprof(*args):
    go = shutil.which("go")
    assert go, "go is missing: `make deps` installs golang-go (a test dependency)"
    env = dict(os.environ, PPROF_BINARY_PATH="/nonexistent", PPROF_TMPDIR="/tmp")
    proc = subprocess.run([go, "tool", "pprof", "-symbolize=none"] + list(args),
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def build_cpu_profile(path):
    b = pprof_proto.ProfileBuilder([("samples", "count"), ("cpu", "nanoseconds")],
                                   ("cpu", "nanoseconds"), PERIOD, default_sample_type="cpu")
    # leaf_a is inlined into hot_loop (one pc, two frames), called from outer_step.
    chain_a = [frame("leaf_a", 0x401000, 12, inlined=True), frame("hot_loop", 0x401000, 40),
               frame("outer_step", 0x402000, 55), frame("worker_main", 0x403000, 70)]
    chain_b = [frame("leaf_b", 0x401100, 20), frame("outer_step", 0x402010, 56),
               frame("worker_main", 0x403000, 70)]
    unknown = [{"function": "", "file": "", "line": 0, "address": 0x7f0000002345,
                "mapping": LIBC, "inlined": False}, frame("worker_main", 0x403000, 70)]
    for _ in range(210):
        b.add(chain_a, [1, PERIOD], {"thread": "worker", "tid": 42})
    b.add(chain_b, [90, 90 * PERIOD], {"thread": "worker", "tid": 42})
    b.add(unknown, [3, 3 * PERIOD])
    data = b.encode(time_nanos=1_700_000_000_000_000_000, duration_nanos=3_000_000_000,
                    main_path=MAPPING["path"], comments=["kind=cpu"])
    with open(path, "wb") as f:
        f.write(data)
    return data


def test_pprof_is_gzip_and_top_reads_it(tmp_path):
    out = tmp_path / "cpu.pb.gz"
    data = build_cpu_profile(out)
    assert gzip.decompress(data)  # a valid gzip stream
    top = go_pprof("-top", "-nodecount=100", "-unit=ms", str(out))
    flat, cum = top_table(top)
    assert flat["leaf_a"] == "2121.21ms"
    assert flat["leaf_b"] == "909.09ms"
    assert flat["outer_step"] == "0" and cum["outer_step"] == "3030.30ms"
    assert cum["worker_main"] == "3060.61ms"
    assert "[libc.so.6]" in flat  # the unsymbolized pc is charged to its mapping
    assert "Type: cpu" in top and "Build ID: 0123456789abcdef" in top


def top_table(top):
    """{function: flat}, {function: cum} from `pprof -top` rows."""
    flat, cum = {}, {}
    for line in top.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1].endswith("%") and parts[4].endswith("%"):
            flat[parts[5]], cum[parts[5]] = parts[0], parts[3]
    return flat, cum


def test_pprof_raw_keeps_inline_frames_mappings_and_values(tmp_path):
    out = tmp_path / "cpu.pb.gz"
    build_cpu_profile(out)
    raw = go_pprof("-raw", str(out))
    assert "PeriodType: cpu nanoseconds" in raw
    assert "Period: %d" % PERIOD in raw
    assert "samples/count cpu/nanoseconds[dflt]" in raw
    # 210 identical samples were merged into one.
    assert ("210 %d:" % (210 * PERIOD)) in raw.replace("  ", " ")
    assert "thread:[worker]" in raw and "tid:[42]" in raw
    # The inlined callee is the first Line of its location, its physical caller next.
    lines = raw.splitlines()
    i = next(k for k, ln in enumerate(lines) if "leaf_a service.cc:12" in ln)
    assert "0x401000" in lines[i]
    assert lines[i + 1].split() == ["hot_loop", "service.cc:40", "s=0"]
    # Mappings carry build ids; the main binary comes first.
    maps = lines[lines.index("Mappings") + 1:]
    assert maps[0].startswith("1: 0x400000/0x480000/0x0 /opt/app/bin/service 0123456789abcdef")
    assert "[IN]" in maps[0]
    assert any("libc.so.6 feedface" in m for m in maps)


def test_pprof_rejects_value_count_mismatch():
    b = pprof_proto.ProfileBuilder([("samples", "count")], ("cpu", "nanoseconds"), 1)
    with pytest.raises(ValueError):
        b.add([frame("f", 1, 1)], [1, 2])


def test_pprof_alloc_profile_types(tmp_path):
    b = pprof_proto.ProfileBuilder([("alloc_objects", "count"), ("alloc_space", "bytes")],
                                   ("space", "bytes"), 524288, default_sample_type="alloc_space")
    b.add([frame("make_buffers", 0x401000, 3), frame("main", 0x403000, 9)], [4, 4 * 1048576])
    out = tmp_path / "alloc.pb.gz"
    out.write_bytes(b.encode())
    top = go_pprof("-top", "-sample_index=alloc_space", "-unit=B", str(out))
    assert "Type: alloc_space" in top
    flat, cum = top_table(top)
    assert flat["make_buffers"] == "4194304B" and cum["main"] == "4194304B"


# ---- flame graph ------------------------------------------------------------------------

SVG_NS = "{http://www.w3.org/2000/svg}"


def frames_of(svg_text):
    root = ET.fromstring(svg_text.encode("utf-8"))
    return root, [g for g in root.iter(SVG_NS + "g") if g.get("class") == "f"]


def test_flame_svg_is_well_formed_and_proportional():
    entries = split_entries() + [(["worker_main", "<odd & \"name\">"], 1, PERIOD)]
    root, frames = frames_of(flamegraph.svg(entries, title="CPU <profile>"))
    by_name = {g.get("data-n"): g for g in frames}
    assert set(by_name) == {"all", "worker_main", "outer_step", "leaf_a", "leaf_b",
                            "<odd & \"name\">"}
    width = lambda n: float(by_name[n].find(SVG_NS + "rect").get("width"))  # noqa: E731
    assert width("leaf_a") / width("leaf_b") == pytest.approx(210 / 90, rel=1e-3)
    assert width("all") == pytest.approx(flamegraph.WIDTH - 2 * flamegraph.PAD_X)
    assert "210 samples" in by_name["leaf_a"].find(SVG_NS + "title").text
    # Children sit on top of (above) their parent.
    y = lambda n: float(by_name[n].find(SVG_NS + "rect").get("y"))  # noqa: E731
    assert y("all") > y("worker_main") > y("outer_step") > y("leaf_a")
    assert root.find(SVG_NS + "script") is not None


def test_flame_svg_empty_profile_is_still_valid():
    root, frames = frames_of(flamegraph.svg([], title="nothing"))
    assert frames == []
    assert any(t.text == "no samples" for t in root.iter(SVG_NS + "text"))


def test_flame_svg_drops_frames_narrower_than_a_tenth_of_a_pixel():
    entries = [(["main", "hot"], 1, 10 ** 9)] + [(["main", "tiny%d" % i], 1, 1) for i in range(50)]
    _, frames = frames_of(flamegraph.svg(entries))
    assert {g.get("data-n") for g in frames} == {"all", "main", "hot"}


NODE_HARNESS = r"""
// A minimal DOM: enough of it for the flame graph's script to run headless.
const data = JSON.parse(require('fs').readFileSync(0, 'utf8'));
function El(attrs) { this.a = Object.assign({}, attrs); this.textContent = attrs._text || "";
  this.style = {}; this.listeners = {}; const self = this;
  this.classList = { set: new Set((attrs["class"] || "").split(" ").filter(Boolean)),
    add(c) { this.set.add(c); }, remove(c) { this.set.delete(c); }, contains(c) { return this.set.has(c); } }; }
El.prototype.getAttribute = function (k) { return this.a[k]; };
El.prototype.setAttribute = function (k, v) { this.a[k] = String(v); };
El.prototype.addEventListener = function (e, f) { this.listeners[e] = f; };
const frames = data.frames.map(f => { const g = new El(f.g); g.rect = new El(f.rect); g.text = new El(f.text);
  g.getElementsByTagName = t => [t === "rect" ? g.rect : g.text]; return g; });
const byId = {}; for (const id of ["details", "unzoom", "search", "matched"]) byId[id] = new El({"class": id === "unzoom" ? "hide" : ""});
global.document = { documentElement: new El(data.svg), getElementById: id => byId[id],
  getElementsByClassName: () => frames };
global.window = { addEventListener() {} };
global.prompt = () => data.search;
eval(data.script + "\ninit({}); global.zoom = zoom; global.search = search;");
const find = n => frames.find(g => g.getAttribute("data-n") === n);
find(data.zoom).listeners.click();
const after = {};
for (const g of frames) after[g.getAttribute("data-n")] = { shown: g.style.display !== "none",
  x: parseFloat(g.rect.getAttribute("x")), w: parseFloat(g.rect.getAttribute("width")),
  label: g.text.textContent, parent: g.classList.contains("parent") };
byId.search.listeners.click();
console.log(JSON.stringify({ after, matched: byId.matched.textContent,
  searchFill: find(data.zoom).rect.getAttribute("fill"), unzoomHidden: byId.unzoom.classList.contains("hide") }));
"""


def test_flame_svg_script_zooms_and_searches_in_node(tmp_path):
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        pytest.skip("node is not installed; the SVG's script cannot be exercised headless")
    entries = (split_entries() + [(["main_thread", "idle"], 1, PERIOD)] * 100)
    root, frames = frames_of(flamegraph.svg(entries))
    data = {"svg": dict(root.attrib), "script": root.find(SVG_NS + "script").text,
            "zoom": "outer_step", "search": "^leaf_",
            "frames": [{"g": dict(g.attrib), "rect": dict(g.find(SVG_NS + "rect").attrib),
                        "text": dict(g.find(SVG_NS + "text").attrib)} for g in frames]}
    proc = subprocess.run([node, "-e", NODE_HARNESS], input=json.dumps(data), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    after = res["after"]
    full = flamegraph.WIDTH - 2 * flamegraph.PAD_X
    # Zoomed into outer_step: it fills the width, its ancestors are full-width
    # dimmed parents, its children split the width 210:90, unrelated frames hide.
    assert after["outer_step"]["shown"] and after["outer_step"]["w"] == pytest.approx(full)
    assert after["worker_main"]["parent"] and after["all"]["w"] == pytest.approx(full)
    assert after["leaf_a"]["w"] == pytest.approx(full * 0.7)
    assert after["leaf_b"]["x"] == pytest.approx(flamegraph.PAD_X + full * 0.7)
    assert not after["main_thread"]["shown"] and not after["idle"]["shown"]
    assert after["leaf_a"]["label"] == "leaf_a"
    assert not res["unzoomHidden"]
    # Search ^leaf_ covers leaf_a + leaf_b = 300 of 400 samples.
    assert res["matched"] == "Matched: 75.0%"
