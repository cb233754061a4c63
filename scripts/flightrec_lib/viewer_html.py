"""viewer_html: the HTML the viewer (`flightrec-dump serve`) sends — the
page shell (style, navigation, the selection form, the small script that
opens a clicked flame-graph frame in the call tree), and the pieces views
are built from (tables, call trees, an embedded flame graph, bar charts).

Every page is self-contained: its style and script are inline, a flame
graph is its SVG (flamegraph.py's, with its own script) in a data: URL
frame, charts are inline SVG; nothing is fetched after the page arrives.
That is what makes "save as HTML" work offline: a saved page is the same
document without the navigation. The Content-Security-Policy forbids any
load from elsewhere (and says so in the page's error box if something
tries).

Everything from the trace (function, thread and file names, addresses,
notes) goes through esc(): the recorded program chose those strings.
"""
import base64
import html
import json
import re
import urllib.parse

from . import calltree, flamegraph
from .units import format_ns

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "frame-src data:; form-action 'self'; base-uri 'none'")

VIEWS = [("", "Traces"), ("flame", "Flame graph"), ("top", "Top"), ("timeline", "Timeline"),
         ("requests", "Requests"), ("sockets", "Sockets"), ("heap", "Heap"), ("crashes", "Crashes"),
         ("incidents", "Incidents"), ("diff", "Compare"), ("report", "Incident report")]

_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 0; color: #222; background: #fff; }
header { background: #263238; color: #eee; padding: 6px 12px; }
header a { color: #cfe8fc; margin-right: 12px; text-decoration: none; }
header a.on { color: #fff; font-weight: bold; border-bottom: 2px solid #fff; }
header .src { color: #9ab; font-size: 12px; }
form.sel { background: #eceff1; padding: 6px 12px; font-size: 13px; }
form.sel input { width: 7em; } form.sel input.wide { width: 12em; }
main { padding: 8px 16px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 22px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #cfd8dc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #f7f9fa; }
.problems { background: #fff3e0; border: 1px solid #ffb74d; padding: 6px 10px; margin: 8px 0; }
.error { background: #ffebee; border: 1px solid #e57373; padding: 10px; margin: 8px 0; font-size: 15px; }
.note { color: #555; font-size: 13px; }
pre { font-size: 12px; background: #fafafa; border: 1px solid #eee; padding: 6px; overflow-x: auto; }
iframe.flame { width: 1220px; max-width: 100%; border: 1px solid #ddd; }
details { margin-left: 14px; } details > summary { cursor: pointer; white-space: nowrap; font-size: 13px; }
details.leaf > summary { list-style: none; }
summary .v { color: #555; font-variant-numeric: tabular-nums; }
.hit > summary { background: #fff59d; }
#page-errors { background: #ffebee; border: 1px solid #e57373; padding: 6px; }
"""

# Uncaught errors, refused loads (CSP) and promise rejections are shown in
# the page itself (and counted in data-count), so a page that went wrong
# says so, for a person and for the tests.
_ERROR_SCRIPT = """
(function () {
  var errs = [];
  function show(text) {
    errs.push(text);
    var box = document.getElementById("page-errors");
    if (!box) return;
    box.hidden = false; box.setAttribute("data-count", String(errs.length));
    var line = document.createElement("div"); line.textContent = text; box.appendChild(line);
  }
  window.addEventListener("error", function (e) { show("script error: " + e.message); });
  window.addEventListener("unhandledrejection", function (e) { show("script error: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    show("refused to load " + e.blockedURI + " (" + e.violatedDirective + ")"); });
})();
"""

# A click on a flame-graph frame (flamegraph.py posts its call path) opens
# that path in the call tree below the graph.
_TREE_SCRIPT = """
window.addEventListener("message", function (e) {
  var frames = document.querySelectorAll("iframe.flame"), ok = false;
  for (var i = 0; i < frames.length; i++) if (e.source === frames[i].contentWindow) ok = true;
  if (!ok || !e.data || !Array.isArray(e.data.flightrecFrame)) return;
  var want = JSON.stringify(e.data.flightrecFrame.map(String));
  var nodes = document.querySelectorAll("details[data-path]"), hit = null;
  for (var j = 0; j < nodes.length; j++) {
    nodes[j].classList.remove("hit");
    if (nodes[j].getAttribute("data-path") === want) hit = nodes[j];
  }
  var shown = document.getElementById("tree-focus");
  if (!hit) { if (shown) shown.textContent = "not in the tree below (under its cut-off)"; return; }
  for (var p = hit; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
  hit.classList.add("hit");
  if (shown) shown.textContent = e.data.flightrecFrame.join(" > ");
  hit.scrollIntoView({block: "center"});
});
"""


def esc(text):
    return html.escape(str(text), quote=True)


def fmt_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


fmt_ns = format_ns  # the reports' own formatting (units.py), under the name this module's pages use


def fmt_value(v, unit):
    return fmt_ns(v) if unit == "ns" else fmt_bytes(v) if unit == "bytes" else "{:,}".format(int(round(v)))


def link(view, params, **changes):
    """The URL of a view with the page's parameters, some changed (None drops one)."""
    q = {k: v for k, v in params.items() if v not in (None, "") and k != "save"}
    for k, v in changes.items():
        if v is None:
            q.pop(k, None)
        else:
            q[k] = str(v)
    query = urllib.parse.urlencode(sorted(q.items()))
    return "/" + view + ("?" + query if query else "")


def table(headers, rows, numeric=()):
    """headers: names; rows: lists of cell HTML (already escaped); numeric:
    indexes of right-aligned columns."""
    out = ["<table><tr>"]
    out += ['<th%s>%s</th>' % (' class="n"' if i in numeric else "", esc(h)) for i, h in enumerate(headers)]
    out.append("</tr>")
    for r in rows:
        out.append("<tr>" + "".join('<td%s>%s</td>' % (' class="n"' if i in numeric else "", c)
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def flame_frame(svg_text, title):
    """The flame graph SVG (flamegraph.py's, interactive on its own) in a
    frame of its own: a data: URL keeps the page one file."""
    data = base64.b64encode(svg_text.encode("utf-8")).decode("ascii")
    height = 200
    for part in svg_text.split(">", 3)[:3]:
        if 'height="' in part:
            try:
                height = int(part.split('height="', 1)[1].split('"', 1)[0]) + 20
            except ValueError:
                pass
            break
    return ('<iframe class="flame" title="%s" style="height:%dpx" src="data:image/svg+xml;base64,%s"></iframe>'
            % (esc(title), min(height, 3000), data))


def call_tree(root, unit, min_pct=0.5, open_depth=3, max_nodes=4000):
    """The call tree as nested <details> (open a few levels deep), one per
    call path at or above min_pct of the total; each carries its root-first
    path (data-path, as the flame graph names frames) so a click in the
    graph can open it. Iterative: stacks thousands of frames deep are fine."""
    use_value = root.value > 0
    total = (root.value if use_value else root.samples) or 1
    floor = total * min_pct / 100.0

    def amount(n):
        return n.value if use_value else n.samples

    out = []
    shown = 0
    stack = [("node", c, (), 0) for c in reversed(list(root.children.values()))]
    while stack:
        item = stack.pop()
        if item[0] == "close":
            out.append("</details>")
            continue
        _, node, parent, depth = item
        if amount(node) < floor or node.samples <= 0:
            continue
        if shown >= max_nodes:
            out.append('<div class="note">(tree cut at %d call paths)</div>' % max_nodes)
            break
        shown += 1
        name = flamegraph._clean(node.name)
        path = parent + (name,)
        kids = [c for c in node.children.values() if amount(c) >= floor and c.samples > 0]
        out.append('<details%s%s data-path="%s"><summary><span class="v">%5.1f%% %s (self %s)</span> %s</summary>'
                   % (" open" if depth < open_depth else "", "" if kids else ' class="leaf"',
                      esc(json.dumps(list(path), ensure_ascii=False, separators=(",", ":"))),
                      100.0 * amount(node) / total, esc(fmt_value(node.value, unit) if use_value else
                                                        "%d samples" % node.samples),
                      esc(fmt_value(node.self_value, unit) if use_value else "%d" % node.self_samples),
                      esc(name)))
        stack.append(("close",))
        for c in reversed(kids):
            stack.append(("node", c, path, depth + 1))
    return "".join(out) or '<p class="note">no call paths</p>'


def text_tree(root, unit, min_pct=1.0):
    """The `tree` report's text layout (calltree.render), in a <pre>."""
    return "<pre>%s</pre>" % esc("\n".join(calltree.render(root, unit=unit, min_pct=min_pct)))


def bars(buckets, label_of, width=640, bar_h=16):
    """A horizontal bar chart (inline SVG) of (label, count) rows."""
    peak = max([c for _, c in buckets] or [0]) or 1
    h = bar_h * len(buckets) + 4
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img">' % (width + 260, h)]
    for i, (lo, count) in enumerate(buckets):
        y = i * bar_h + 2
        w = int(round(width * count / peak))
        out.append('<text x="0" y="%d" font-size="11">%s</text>' % (y + 11, esc(label_of(lo))))
        out.append('<rect x="150" y="%d" width="%d" height="%d" fill="#4f8fc0"/>' % (y, max(w, 0), bar_h - 3))
        out.append('<text x="%d" y="%d" font-size="11">%d</text>' % (155 + w, y + 11, count))
    out.append("</svg>")
    return "".join(out)


def selection_form(view, params):
    """The filters every report takes (service, host, pid, time window, and
    kind/thread for profiles), as a GET form: the URL then says them."""
    if view == "diff":
        return ""
    if view == "":  # the Traces page: which processes to list
        fields = [("service", "service", "name or glob"), ("host", "host", "name or glob"), ("pid", "pid", "")]
    else:
        fields = [("service", "service", ""), ("host", "host", ""), ("pid", "pid", ""),
                  ("incident", "incident", ""), ("from", "from", "e.g. 1.5s"), ("to", "to", "-2s")]
    if view in ("flame", "top", "report"):
        fields += [("thread", "thread", "tid or name")]
    if view in ("flame", "top", "requests", "report"):
        fields += [("endpoint", "endpoint", "GET /api/*")]
    if view == "requests":
        fields += [("trace_id", "trace id", "trace id prefix or x-request-id")]
    out = ['<form class="sel" method="get" action="/%s">' % esc(view)]
    for name, label, hint in fields:
        out.append('<label>%s <input name="%s" value="%s" placeholder="%s"></label> ' % (
            esc(label), esc(name), esc(params.get(name) or ""), esc(hint)))
    if view in ("flame", "top", "report", "diff"):
        out.append('<label>kind <select name="kind">%s</select></label> ' % "".join(
            '<option%s>%s</option>' % (" selected" if params.get("kind", "cpu") == k else "", k)
            for k in ("cpu", "offcpu", "alloc", "live")))
    for keep in ("prefix", "role") if view == "requests" else ("prefix",):
        if params.get(keep):
            out.append('<input type="hidden" name="%s" value="%s">' % (keep, esc(params[keep])))
    out.append('<button>show</button></form>')
    return "".join(out)


def page(view, params, title, body, source, saved=False, problems=(), generated=""):
    """A whole document. saved: the self-contained copy (no navigation)."""
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="%s">' % esc(CSP),
           '<meta name="viewport" content="width=device-width">',
           "<title>%s — flightrec</title>" % esc(title),
           "<style>%s</style><script>%s</script></head><body>" % (_STYLE, _ERROR_SCRIPT)]
    out.append('<header data-view="%s">' % esc(view or "index"))
    if saved:
        out.append('<b>flightrec</b> — %s <span class="src">saved from flightrec-dump serve %s%s; '
                   'view %s</span>' % (esc(title), esc(source), (" at " + esc(generated)) if generated else "",
                                       esc(link(view, params))))
    else:
        for v, label in VIEWS:
            out.append('<a href="%s"%s>%s</a>' % (esc(link(v, params) if v else link(v, {
                k: params.get(k) for k in ("prefix",)})), ' class="on"' if v == view else "", esc(label)))
        if view:
            out.append('<a href="%s" title="one HTML file that opens offline">Save as HTML</a>'
                       % esc(link(view, params, save="1")))
        out.append('<div class="src">source: %s</div>' % esc(source))
    out.append("</header>")
    if not saved:
        out.append(selection_form(view, params))
    out.append('<main><div id="page-errors" hidden data-count="0"></div>')
    if problems:
        out.append('<div class="problems"><b>Some input could not be read</b> (the rest is shown):<ul>%s</ul></div>'
                   % "".join("<li>%s: %s</li>" % (esc(p), esc(m)) for p, m in problems))
    if saved:
        # Links into the server lead nowhere from a file: keep their text.
        body = _SERVER_LINK.sub(r"\1", body)
    out.append(body)
    out.append("</main><script>%s</script></body></html>" % _TREE_SCRIPT)
    return "".join(out)


_SERVER_LINK = re.compile(r'<a href="/[^"]*">(.*?)</a>', re.S)


def error_page(view, params, title, message, source):
    return page(view, params, title, '<h1>%s</h1><div class="error" id="error">%s</div>' % (
        esc(title), esc(message)), source)
