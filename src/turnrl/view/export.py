"""The viewer's page, served (``turnrl view RUN``) or exported as one self-contained HTML file
(``turnrl view RUN --export FILE.html``; also the ``report.html`` a run writes at its end).

An export inlines Plotly, the viewer's script and style, and the data: every run's summary and
the trajectory records of its newest steps that fit ``records_mb`` (all of a short run's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnrl.files import write_atomic
from turnrl.view.data import run_summary
from turnrl.view.records import read_step, record_steps

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = ("plotly-basic.min.js", "viewer.js", "viewer.css")


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no "</" can close it early ("<\\/" is JSON for "</")."""
    return (
        json.dumps(data, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\u0021--")
    )


def render_page(title: str, data: dict[str, Any] | None = None) -> str:
    """The page; ``data`` None links the assets and reads the server's API, else it is inlined."""
    template = (STATIC / "index.html").read_text(encoding="utf-8")
    if data is None:
        style = '<link rel="stylesheet" href="static/viewer.css">'
        scripts = (
            # the data request starts now, while the browser still parses Plotly
            '<script>window.TURNRL = {mode: "serve", runs: fetch("api/runs")};</script>\n'
            '<script src="static/plotly-basic.min.js"></script>\n'
            '<script src="static/viewer.js"></script>'
        )
    else:
        style = "<style>\n" + (STATIC / "viewer.css").read_text(encoding="utf-8") + "</style>"
        scripts = "\n".join(
            [
                '<script>window.TURNRL = {mode: "embedded"};</script>',
                '<script type="application/json" id="turnrl-runs">',
                _script_json(data["runs"]) + "</script>",
                # one element per step: opening a trajectory parses its step's records only
                *(
                    f'<script type="application/json" id="turnrl-step-{key.replace(":", "-")}">'
                    + _script_json(recs)
                    + "</script>"
                    for key, recs in data["steps"].items()
                ),
                "<script>" + (STATIC / "plotly-basic.min.js").read_text(encoding="utf-8"),
                "</script>",
                "<script>" + (STATIC / "viewer.js").read_text(encoding="utf-8") + "</script>",
            ]
        )
    title = title.replace("&", "&amp;").replace("<", "&lt;")
    return (
        template.replace("{{TITLE}}", title)
        .replace("{{STYLE}}", style)
        .replace("{{SCRIPTS}}", scripts)
    )


def embedded_steps(runs: list[Path], records_mb: float) -> dict[str, list[dict]]:
    """``"RUN:STEP" -> records``, newest steps of every run first, until ``records_mb`` of JSON."""
    budget = records_mb * 2**20
    queue = [(step, ri) for ri, run in enumerate(runs) for step in record_steps(run)]
    out: dict[str, list[dict]] = {}
    for step, ri in sorted(queue, reverse=True):
        recs = read_step(runs[ri], step)
        size = len(json.dumps(recs, separators=(",", ":")))
        if size > budget:
            break
        budget -= size
        out[f"{ri}:{step}"] = recs
    return out


def export_html(runs: list[Path], out: Path, records_mb: float = 4.0) -> Path:
    """Write the self-contained page for ``runs`` to ``out``."""
    runs = [Path(r) for r in runs]
    data = {
        "runs": [run_summary(r) for r in runs],
        "steps": embedded_steps(runs, records_mb),
    }
    page = render_page(", ".join(r.name for r in runs), data)
    out = Path(out)
    write_atomic(out, page)  # a full disk names the file and leaves no temporary one
    return out
