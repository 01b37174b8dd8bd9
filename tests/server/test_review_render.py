"""The review page's templates: autoescaping always on, and the `show` filter's escapes."""

from __future__ import annotations

from markupsafe import Markup

from gateway.server.review.render import make_environment, show


def test_show_escapes_html_and_marks_hidden_characters() -> None:
    shown = show('<b>"x"</b>\u202e')
    assert isinstance(shown, Markup)
    assert shown == '&lt;b&gt;&#34;x&#34;&lt;/b&gt;<span class="esc">&lt;U+202E&gt;</span>'


def test_show_cuts_and_says_how_much_is_left() -> None:
    assert show("abcdef", 2) == 'ab<span class="more">… 4 more characters</span>'
    assert show(None) == '<span class="none">-</span>'
    assert show({"a": [1, True]}) == "{&#34;a&#34;:[1,true]}"


def test_every_template_autoescapes() -> None:
    env = make_environment()
    assert env.autoescape is True
    rendered = env.from_string("{{ value }}").render(value="<script>")
    assert rendered == "&lt;script&gt;"
