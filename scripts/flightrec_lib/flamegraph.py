"""flamegraph: Brendan Gregg's collapsed ("folded") stacks and a self-contained
interactive SVG flame graph.

Both take the same input as calltree.build: (root-first labels, samples,
value) entries. The SVG carries its own script (no external files): hover
shows a frame's details, click zooms into it, "Search" highlights frames
matching a regular expression and reports their share, "Reset Zoom" and
Escape undo. Frames narrower than MIN_WIDTH_PX are left out (as
flamegraph.pl does) so huge profiles stay small files.
"""
import hashlib
import re
from xml.sax.saxutils import escape, quoteattr

from . import calltree

WIDTH = 1200
FRAME_H = 16
PAD_X = 10
PAD_TOP = 50
PAD_BOTTOM = 34
MIN_WIDTH_PX = 0.1
CHAR_PX = 7.0  # average glyph width at 12px: decides how many characters fit a frame


def _folded_name(label):
    # ';' separates frames and a trailing " N" is the count: keep both unambiguous.
    return str(label).replace(";", ":").replace("\n", " ")


def folded(entries):
    """Returns collapsed-stack lines "root;child;leaf N", merged and sorted.
    entries: (root-first labels, count) with integer counts."""
    merged = {}
    for path, count in entries:
        key = ";".join(_folded_name(p) for p in path)
        merged[key] = merged.get(key, 0) + count
    return ["%s %d" % (k, int(round(v))) for k, v in sorted(merged.items()) if int(round(v)) > 0]


# palette name -> (base, spread) per RGB channel; the hash of the name picks a
# point in the range so a function keeps its colour across graphs.
PALETTES = {
    "hot": ((205, 50), (0, 230), (0, 55)),    # cpu
    "io": ((80, 60), (80, 60), (190, 55)),    # off-cpu
    "mem": ((0, 0), (190, 50), (0, 210)),     # allocations
}


def _color(name, palette):
    h = hashlib.md5(name.encode("utf-8", "replace")).digest()
    chans = PALETTES.get(palette, PALETTES["hot"])
    return "rgb(%d,%d,%d)" % tuple(base + spread * h[i] // 255 for i, (base, spread) in enumerate(chans))


# Characters XML 1.0 cannot carry even as entities (controls, surrogates,
# U+FFFE/U+FFFF), and C1 controls, which a terminal showing the file would obey.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _clean(name):
    """Names as XML 1.0 can carry them: see _CONTROL."""
    return _CONTROL.sub("?", str(name))


def _fit(name, width_px):
    chars = int((width_px - 6) / CHAR_PX)
    if chars < 3:
        return ""
    return name if len(name) <= chars else name[:chars - 2] + ".."


_SCRIPT = r"""
var W, FRAMES = [], details, unzoomBtn, searchBtn, matchedText, searching = false, TOTAL, PADX, CHARPX;
function num(g, a) { return parseFloat(g.getAttribute(a)); }
function init(evt) {
  var svg = document.documentElement;
  W = num(svg, "width"); TOTAL = num(svg, "data-total"); PADX = num(svg, "data-padx");
  CHARPX = num(svg, "data-charpx");
  details = document.getElementById("details");
  unzoomBtn = document.getElementById("unzoom");
  searchBtn = document.getElementById("search");
  matchedText = document.getElementById("matched");
  var gs = document.getElementsByClassName("f");
  for (var i = 0; i < gs.length; i++) FRAMES.push(gs[i]);
  FRAMES.forEach(function (g) {
    g.addEventListener("mouseover", function () { details.textContent = g.getAttribute("data-info"); });
    g.addEventListener("mouseout", function () { details.textContent = " "; });
    g.addEventListener("click", function () { zoom(g); tellParent(g); });
  });
  unzoomBtn.addEventListener("click", unzoom);
  searchBtn.addEventListener("click", function () { if (searching) resetSearch(); else search(); });
  window.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { unzoom(); resetSearch(); }
    else if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); search(); }
  });
}
function fit(name, w) {
  var chars = Math.floor((w - 6) / CHARPX);
  if (chars < 3) return "";
  return name.length <= chars ? name : name.substring(0, chars - 2) + "..";
}
function place(g, x, w) {
  var r = g.getElementsByTagName("rect")[0], t = g.getElementsByTagName("text")[0];
  r.setAttribute("x", x); r.setAttribute("width", w);
  t.setAttribute("x", x + 3); t.textContent = fit(g.getAttribute("data-n"), w);
  g.style.display = "";
}
function zoom(node) {
  var x0 = num(node, "data-x"), w0 = num(node, "data-w"), d0 = num(node, "data-d");
  var eps = TOTAL * 1e-9, scale = (W - 2 * PADX) / w0;
  FRAMES.forEach(function (g) {
    var x = num(g, "data-x"), w = num(g, "data-w"), d = num(g, "data-d");
    g.classList.remove("parent");
    if (d < d0 && x <= x0 + eps && x + w >= x0 + w0 - eps) {
      place(g, PADX, W - 2 * PADX); g.classList.add("parent");
    } else if (d >= d0 && x >= x0 - eps && x + w <= x0 + w0 + eps) {
      place(g, PADX + (x - x0) * scale, w * scale);
    } else {
      g.style.display = "none";
    }
  });
  unzoomBtn.classList.remove("hide");
}
// Embedded in a page (flightrec-dump serve), the page shows the clicked
// frame's call tree: it hears the frame's call path, root first.
function tellParent(node) {
  if (!window.parent || window.parent === window) return;  // standalone (or a DOM without frames)
  var x0 = num(node, "data-x"), w0 = num(node, "data-w"), d0 = num(node, "data-d"), eps = TOTAL * 1e-9;
  var path = [];
  FRAMES.forEach(function (g) {
    var x = num(g, "data-x"), w = num(g, "data-w"), d = num(g, "data-d");
    if (d > 0 && d <= d0 && x <= x0 + eps && x + w >= x0 + w0 - eps) path[d - 1] = g.getAttribute("data-n");
  });
  window.parent.postMessage({flightrecFrame: path}, "*");
}
function unzoom() {
  var scale = (W - 2 * PADX) / TOTAL;
  FRAMES.forEach(function (g) {
    g.classList.remove("parent");
    place(g, PADX + num(g, "data-x") * scale, num(g, "data-w") * scale);
  });
  unzoomBtn.classList.add("hide");
}
function search() {
  var term = prompt("Search for (regular expression):", "");
  if (term === null || term === "") return;
  var re;
  try { re = new RegExp(term); } catch (e) { matchedText.textContent = "bad regexp: " + e.message; return; }
  resetSearch();
  var spans = [];
  FRAMES.forEach(function (g) {
    if (!re.test(g.getAttribute("data-n"))) return;
    var r = g.getElementsByTagName("rect")[0];
    r.setAttribute("fill", "rgb(230,0,230)");
    spans.push([num(g, "data-x"), num(g, "data-w")]);
  });
  // A match nested inside another match must not count twice: merge the spans.
  spans.sort(function (a, b) { return a[0] - b[0]; });
  var covered = 0, end = -1;
  spans.forEach(function (s) {
    var s0 = Math.max(s[0], end), s1 = s[0] + s[1];
    if (s1 > s0) { covered += s1 - s0; end = s1; }
  });
  searching = true;
  searchBtn.textContent = "Reset Search";
  matchedText.textContent = "Matched: " + (100 * covered / TOTAL).toFixed(1) + "%";
}
function resetSearch() {
  FRAMES.forEach(function (g) {
    var r = g.getElementsByTagName("rect")[0];
    r.setAttribute("fill", g.getAttribute("data-c"));
  });
  searching = false;
  searchBtn.textContent = "Search";
  matchedText.textContent = " ";
}
"""

_STYLE = """
text { font-family: Verdana, sans-serif; font-size: 12px; fill: rgb(0,0,0); }
#title { text-anchor: middle; font-size: 17px; }
#unzoom, #search { cursor: pointer; }
#matched { text-anchor: end; }
.hide { display: none; }
.f:hover rect { stroke: black; stroke-width: 0.5; cursor: pointer; }
.parent { opacity: 0.5; }
"""


def svg(entries, title="Flame Graph", unit="ns", palette="hot", paint=None, subtitle=None):
    """Returns the SVG document as a string. entries: (root-first labels,
    samples, value); frame widths follow the value (or samples when every
    value is zero). paint, if given, is called with each frame's call path
    (tuple of labels, root first) and returns (fill colour, extra tooltip
    text): a differential graph colours by change (diffflame.py)."""
    root = calltree.build(entries)
    use_value = root.value > 0
    total = root.value if use_value else root.samples
    label, fmt = calltree.UNITS[unit]

    def width_of(node):
        return node.value if use_value else node.samples

    scale = (WIDTH - 2 * PAD_X) / total if total else 0.0
    frames = []  # (depth, x offset in value units, node, name)
    max_depth = 0
    if total:
        root.name = "all"
        stack = [(root, 0, 0.0, ())]
        while stack:
            node, depth, x, path = stack.pop()
            if width_of(node) * scale < MIN_WIDTH_PX:
                continue
            frames.append((depth, x, node, path))
            max_depth = max(max_depth, depth)
            # Alphabetical order, as flame graphs are drawn: the x axis is not time.
            for name in sorted(node.children, key=str):
                child = node.children[name]
                stack.append((child, depth + 1, x, path + (name,)))
                x += width_of(child)

    top = PAD_TOP + (14 if subtitle else 0)
    height = top + (max_depth + 1) * FRAME_H + PAD_BOTTOM
    out = ['<?xml version="1.0" standalone="no"?>',
           '<svg version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" onload="init(evt)" '
           'xmlns="http://www.w3.org/2000/svg" data-total=%s data-padx="%d" data-charpx="%g">'
           % (WIDTH, height, WIDTH, height, quoteattr(repr(float(total or 1))), PAD_X, CHAR_PX),
           "<style>%s</style>" % _STYLE,
           # The script has no "]]>" in it, so CDATA keeps it verbatim.
           '<script type="text/ecmascript"><![CDATA[%s]]></script>' % _SCRIPT,
           '<rect x="0" y="0" width="%d" height="%d" fill="rgb(248,248,240)"/>' % (WIDTH, height),
           '<text id="title" x="%d" y="24">%s</text>' % (WIDTH // 2, escape(_clean(title))),
           ('<text x="%d" y="42" text-anchor="middle">%s</text>' % (WIDTH // 2, escape(_clean(subtitle)))
            if subtitle else ""),
           '<text id="unzoom" class="hide" x="%d" y="24">Reset Zoom</text>' % PAD_X,
           '<text id="search" x="%d" y="24">Search</text>' % (WIDTH - PAD_X - 60),
           '<text id="matched" x="%d" y="%d"> </text>' % (WIDTH - PAD_X, height - 12),
           '<text id="details" x="%d" y="%d"> </text>' % (PAD_X, height - 12),
           '<g id="frames">']
    if not total:
        out.append('<text x="%d" y="%d">no samples</text>' % (PAD_X, PAD_TOP + 12))
    for depth, x, node, path in frames:
        name = _clean(node.name)
        w = width_of(node)
        px, pw = PAD_X + x * scale, w * scale
        y = height - PAD_BOTTOM - (depth + 1) * FRAME_H
        pct = 100.0 * w / total
        info = "%s (%s samples, %s %s, %.2f%%)" % (name, "{:,}".format(node.samples),
                                                 fmt(node.value), label, pct)
        if paint is not None:
            color, extra = paint(path)
            info = "%s, %s" % (info[:-1], _clean(extra)) + ")" if extra else info
        else:
            color = "rgb(220,220,220)" if depth == 0 else _color(name, palette)
        out.append('<g class="f" data-n=%s data-info=%s data-x="%r" data-w="%r" data-d="%d" '
                   'data-c="%s"><title>%s</title>'
                   '<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" rx="2" ry="2"/>'
                   '<text x="%.2f" y="%d">%s</text></g>'
                   % (quoteattr(name), quoteattr(info), float(x), float(w), depth, color,
                      escape(info), px, y, pw, FRAME_H - 1, color, px + 3, y + 12,
                      escape(_fit(name, pw))))
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
