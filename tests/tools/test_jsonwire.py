"""jsonwire: a page's text written from its UTF-8 is byte for byte what orjson writes."""

from __future__ import annotations

import enum
from collections import OrderedDict

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.provenance.markers import sanitize
from gateway.tools.jsonwire import (
    JsonText,
    RepeatedKeys,
    RequestJSONError,
    dumps,
    json_literal,
    loads_request,
    repeated_key,
)

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


# --- request bodies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b'{"url": 1, "url": 2}', "url"),
        (b'{"url": 1, "\\u0075rl": 2}', "url"),
        (b'{"a": {"b": 1, "b": 2}}', "a.b"),
        (b'{"a": [0, {"c": 1, "c": 1}]}', "a.1.c"),
        (b'[{"x": 1}, {"y": 1, "y": 2}]', "1.y"),
        (b'{"url": 1, "URL": 2}', None),
        (b'{"a": {"b": 1}, "c": {"b": 2}}', None),
    ],
)
def test_repeated_keys_are_found_wherever_they_stand(raw: bytes, path: str | None) -> None:
    assert repeated_key(loads_request(raw)) == path


def test_the_last_value_is_kept_and_marked() -> None:
    value = loads_request(b'{"url": "a", "url": "b"}')
    assert isinstance(value, RepeatedKeys) and value == {"url": "b"} and value.key == "url"


@pytest.mark.parametrize(
    "raw", [b'{"a": NaN}', b'{"a": 1', b'{"a": "\\ud800"}', b"\xff", b"[" * 1010 + b"]" * 1010]
)
def test_what_orjson_refuses_or_cannot_read_is_malformed(raw: bytes) -> None:
    with pytest.raises(RequestJSONError):
        loads_request(raw)
