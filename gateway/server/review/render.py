"""Turning the review values into HTML: one Jinja2 environment with autoescaping always on,
and the filters that show hostile text as text (hidden characters as visible `<U+XXXX>`
escapes, long values cut with the rest behind a click). No value is ever put in a link's
target: the page links only to its own views, built from its own parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from gateway.review.text import cut, segments

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


def as_text(value: Any) -> str:
    """A field's value as the page shows it: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def show(value: Any, limit: int | None = None) -> Markup:
    """Escaped text with hidden characters made visible; cut to `limit` characters, saying
    how many more there are."""
    if value is None:
        return Markup('<span class="none">-</span>')
    text = as_text(value)
    left = 0
    if limit is not None:
        text, left = cut(text, limit)
    parts = [
        Markup('<span class="esc">{}</span>').format(piece) if hidden else escape(piece)
        for piece, hidden in segments(text)
    ]
    if left:
        parts.append(Markup('<span class="more">… {} more characters</span>').format(left))
    return Markup("").join(parts)


def make_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["show"] = show
    env.filters["text_length"] = lambda value: len(as_text(value))
    return env
