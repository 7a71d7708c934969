"""Self-contained HTML reports (charts inlined) per golden release and per eval run.

The eval report carries the four-layer dashboard of seed 004 §10 — product, quality,
performance, change — as daily series with deploy, prompt, index and document markers.
"""

from __future__ import annotations

import base64
import html

import pandas as pd

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-top:.6em}table{border-collapse:collapse;
font-size:.85em}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}img{max-width:100%}
.bad{color:#b00020;font-weight:bold}.ok{color:#1b5e20;font-weight:bold}"""


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def table(frame: pd.DataFrame, limit: int = 50) -> str:
    return frame.head(limit).to_html(index=False, escape=True, float_format=lambda x: f"{x:.3f}")


def page(title: str, sections: list[tuple[str, str]]) -> str:
    body = "".join(f"<h2>{html.escape(name)}</h2>{content}" for name, content in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


