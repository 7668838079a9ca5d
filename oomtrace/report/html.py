"""The HTML rendering: one self-contained file that opens offline.

Vega, Vega-Lite and vega-embed are inlined (the caller passes the bundle; see
:func:`oomtrace.report.javascript_bundle`); a Content-Security-Policy forbids every network
fetch, so the page cannot reach out even by accident, and lets only the page's own two scripts
run (by their hashes), without eval. All text of the report is HTML-escaped;
chart specs travel as JSON in a ``<script type="application/json">`` with ``<``, ``>`` and
``&`` escaped, and Vega draws data values as text nodes (its tooltip handler escapes HTML).
"""

from __future__ import annotations

import base64
import hashlib

from oomtrace import escape
from oomtrace.report.document import (
    NUMERIC_KINDS,
    REPORT_VERSION,
    Chart,
    Column,
    Report,
    Section,
    Table,
    culprit_ids,
    id_pieces,
)
from oomtrace.report.fmt import cell_text, value_text

# Columns that hold request ids (never wrapped inside): request_id, top_culprit_id.
REQUEST_KEYS = ("request_id", "culprit_id")

# Only the page's own scripts run: each is allowed by its SHA-256 hash, so markup that ever got
# into the page could not add one, and no script may eval (the charts are embedded with
# ``ast: true``: Vega then evaluates its expressions with its interpreter, vega-interpreter,
# which the bundle holds, instead of compiling them with the Function constructor).
CSP = (
    "default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data: blob:; "
    "connect-src 'none'; form-action 'none'; base-uri 'none'"
)

# Request ids never wrap inside themselves (a hyphen is not a place to break "cmpl-...-0"):
# they are monospace and nowrap wherever they appear; long text cells wrap instead.
STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;
 margin:0 auto;max-width:1400px;padding:0 20px 40px}
header{border-bottom:1px solid #ddd;margin-bottom:8px}
h1{font-size:1.5em;margin:.8em 0 .1em}.sub{color:#444;margin:0 0 .6em}
.sub .part{white-space:nowrap}
.alert{background:#fff4e5;border-left:4px solid #b35c00;padding:.4em .6em;margin:.4em 0}
nav{display:flex;flex-wrap:wrap;gap:.2em 1em}nav a{font-size:.9em;white-space:nowrap}
h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #eee}
h3{font-size:1em;margin:1.2em 0 .3em}
.verdict{background:#fff6f5;border-left:6px solid #D55E00;padding:4px 18px 12px;margin-top:1em}
.verdict.cls-none{background:#f4faf4;border-left-color:#009E73}
.verdict h2{border:0}
ol.lines{list-style:none;padding:0;margin:.4em 0 .8em;font-size:1.12em}
ol.lines li{margin:.15em 0}ol.lines li.what{font-weight:700;font-size:1.1em}
ol.lines li.fix{font-weight:600}
code.id,td.id{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;
 white-space:nowrap;font-size:.92em}
dl.figs{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:.6em 0}
dl.figs dt{color:#555}dl.figs dd{margin:0;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.8em}
th,td{padding:3px 4px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#fafafa}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.t{min-width:9em;overflow-wrap:anywhere}
td.src{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:.92em;
 overflow-wrap:anywhere;min-width:8em}.scroll{overflow-x:auto;max-width:100%}
figure{margin:.6em 0 1em}figcaption{color:#555;font-size:.85em}
.chart{min-height:60px;width:100%}.empty{color:#777;font-style:italic}
.tablename{font-weight:600;margin:.8em 0 0}
footer{margin-top:3em;color:#777;font-size:.8em;border-top:1px solid #eee;padding-top:.6em}
"""

SCRIPT = """
(function () {
  var specs = JSON.parse(document.getElementById("oomtrace-specs").textContent);
  window.oomtraceViews = {};
  var options = {renderer: "svg", ast: true, tooltip: {theme: "light"},
                 actions: {export: true, source: false, compiled: false, editor: false}};
  Object.keys(specs).forEach(function (key) {
    var el = document.getElementById("chart-" + key);
    vegaEmbed(el, specs[key], options).then(function (result) {
      window.oomtraceViews[key] = result.view;
      el.setAttribute("data-rendered", "true");
    }).catch(function (err) {
      el.setAttribute("data-rendered", "error");
      el.textContent = "This chart could not be drawn: " + err;
      console.error(err);
    });
  });
})();
"""


def render_html(report: Report, *, script: str, versions: str = "") -> str:
    """The page. ``script`` is the JavaScript bundle that defines ``vegaEmbed``; ``versions``
    names the library versions in the footer."""
    if "</script" in script.lower():
        script = script.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    specs = {c.key: c.spec for c in report.charts}
    nav = "".join(f'<a href="#{s.key}">{escape.html(s.title)}</a>' for s in report.sections)
    body = [
        "<header>",
        f"<h1>{escape.html(report.title)}</h1>",
        _subtitle(report.subtitle),
        *(f'<p class="alert">Warning: {escape.html(a)}</p>' for a in report.alerts),
        f'<nav><a href="#verdict">Verdict</a>{nav}</nav>',
        "</header>",
        _verdict(report),
        *(_section(s) for s in report.sections),
        (
            f"<footer>Written by oomtrace (report format {REPORT_VERSION}). Charts: drag to "
            "pan, scroll to zoom time, double-click to reset; hover for request ids and "
            f"numbers. {escape.html(versions)}</footer>"
        ),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_csp(script, SCRIPT)}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape.html(report.title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body>",
            *[b for b in body if b],
            f"<script>{script}</script>",
            (
                '<script type="application/json" id="oomtrace-specs">'
                f"{escape.script_json(specs)}</script>"
            ),
            f"<script>{SCRIPT}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _csp(*scripts: str) -> str:
    """The policy allowing exactly ``scripts`` (the text between their tags)."""
    hashes = (base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in scripts)
    return CSP.format(hashes=" ".join(f"'sha256-{h}'" for h in hashes))


def _subtitle(subtitle: str) -> str:
    """The header line, each part kept whole (a time range never wraps inside a timestamp)."""
    if not subtitle:
        return ""
    parts = " · ".join(f'<span class="part">{escape.html(p)}</span>' for p in subtitle.split(" · "))
    return f'<p class="sub">{parts}</p>'


def _figures(figures: tuple[object, ...]) -> str:
    items = "".join(
        f"<dt>{escape.html(f.label)}</dt><dd>{escape.html(value_text(f.value, f.kind))}</dd>"  # type: ignore[attr-defined]
        for f in figures
    )
    return f'<dl class="figs">{items}</dl>' if items else ""


def with_ids(text: str, ids: list[str]) -> str:
    """``text`` escaped, each of ``ids`` in it as ``<code class="id">`` (whole, never wrapped
    inside, copied as it is)."""
    return "".join(
        f'<code class="id">{escape.html(piece)}</code>' if is_id else escape.html(piece)
        for piece, is_id in id_pieces(text, ids)
    )


def _verdict(report: Report) -> str:
    v = report.verdict
    ids = culprit_ids(v)
    # what happened first and the fix last; the culprits (or cause) and the why between them
    last = len(v.lines) - 1
    classes = ["what", *(["who", "why"][: max(last - 1, 0)]), "fix"] if last else ["what"]
    lines = "".join(
        f'<li class="{cls}">{with_ids(line, ids)}</li>'
        for cls, line in zip(classes, v.lines, strict=True)
    )
    parts = [
        f'<section id="verdict" class="verdict cls-{escape.html(v.incident_class)}">',
        "<h2>Verdict</h2>",
        f'<ol class="lines">{lines}</ol>',
    ]
    if v.remedies.rows:
        parts += ["<h3>What would have prevented it</h3>", _table(v.remedies)]
    parts += [
        f"<p>{escape.html(v.paragraph)}</p>",
        _figures(v.figures),
        "<h3>Culprits</h3>",
        _table(v.culprits),
    ]
    if v.evidence:
        items = "".join(f"<li>{escape.html(e)}</li>" for e in v.evidence)
        parts += ["<h3>Evidence</h3>", f"<ul>{items}</ul>"]
    parts.append("</section>")
    return "\n".join(parts)


def _section(section: Section) -> str:
    parts = [f'<section id="{escape.html(section.key)}">', f"<h2>{escape.html(section.title)}</h2>"]
    if not (section.tables or section.charts or section.figures):
        parts.append(f'<p class="empty">{escape.html(section.empty or "Nothing.")}</p>')
    else:
        parts += [f"<p>{escape.html(p)}</p>" for p in section.paragraphs]
        parts.append(_figures(section.figures))
        parts += [_chart(c) for c in section.charts]
        for name, table in section.tables:
            title = escape.html(name.replace("_", " "))
            parts += [f'<p class="tablename">{title}</p>', _table(table)]
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _chart(chart: Chart) -> str:
    key = escape.html(chart.key)
    return (
        f'<figure><div class="chart" id="chart-{key}" data-chart="{key}" '
        f'role="img" aria-label="{escape.html(chart.title)}"></div>'
        f"<figcaption>{escape.html(chart.caption)}</figcaption></figure>"
    )


def _cell_class(column: Column, value: object) -> str:
    """Numbers right-aligned; a request id whole on one line; another id (a file, a parser)
    in the same type but free to wrap; long text with a width of its own."""
    if column.kind in NUMERIC_KINDS:
        return ' class="n"'
    if column.kind == "id":
        return ' class="id"' if column.key.endswith(REQUEST_KEYS) else ' class="src"'
    if column.kind == "text" and len(str(value or "")) > 60:
        return ' class="t"'
    return ""


def _table(table: Table) -> str:
    if not table.rows:
        return f'<p class="empty">{escape.html(table.note or "none")}</p>'
    head = "".join(f"<th>{escape.html(c.title)}</th>" for c in table.columns)
    rows = []
    for row in table.rows:
        cells = []
        for value, column in zip(row, table.columns, strict=True):
            text = escape.html(cell_text(value, column.kind))
            if column.kind == "time":
                # a narrow page may break a timestamp between its date and its time, nowhere else
                text = text.replace("T", "<wbr>T", 1)
            cells.append(f"<td{_cell_class(column, value)}>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="empty">{escape.html(table.note)}</p>' if table.note else ""
    body = "".join(rows)
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f"</div>{note}"
    )
