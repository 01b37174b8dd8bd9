"""jsonwire: a page's text written from its UTF-8 is byte for byte what orjson writes."""

from __future__ import annotations

import enum
from collections import OrderedDict

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.provenance.markers import sanitize
from gateway.tools.jsonwire import JsonText, dumps, json_literal

text_strategy = st.text(
    st.characters(codec="utf-8") | st.sampled_from('"\\\n\t\r\x00\x1f<>&\u2028\u00e9\U0001f600'),
    max_size=300,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(text_strategy, text_strategy, text_strategy)
@example('say "hi"\\', "line\none\ttab", 'end "quoted"')
@example("", "", "")
def test_a_json_text_is_written_as_orjson_writes_its_str(head: str, raw: str, tail: str) -> None:
    clean = sanitize(raw).text  # what the gateway ever passes: sanitised text
    whole = head + clean + tail
    value = JsonText(whole, json_literal(head, clean.encode(), tail))
    assert value == whole and isinstance(value, str)
    assert dumps({"content": value}) == orjson.dumps({"content": whole})
    assert orjson.loads(dumps([value]))[0] == whole


class Colour(enum.StrEnum):
    RED = "red"


class Count(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {"a": Colour.RED, "b": Count(3), "c": [True, None, 1.5]},
        OrderedDict(x=1),
        ["plain", {"nested": Colour.RED}],
    ],
    ids=["str-enum-and-int-subclass", "dict-subclass", "nested"],
)
def test_other_values_are_written_as_orjson_writes_them(value: object) -> None:
    assert dumps(value) == orjson.dumps(value)


def test_what_json_cannot_hold_is_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})
