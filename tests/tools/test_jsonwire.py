"""jsonwire: results written as their base JSON types; request bodies read strictly, with
repeated keys found wherever they stand."""

from __future__ import annotations

import enum
from collections import OrderedDict

import pytest

from gateway.tools.jsonwire import (
    RepeatedKeys,
    RequestJSONError,
    dumps,
    loads_request,
    repeated_key,
)


class Colour(enum.StrEnum):
    RED = "red"


class Count(int):
    pass


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (
            {"a": Colour.RED, "b": Count(3), "c": [True, None, 1.5]},
            b'{"a":"red","b":3,"c":[true,null,1.5]}',
        ),
        (OrderedDict(x=1), b'{"x":1}'),
        (["plain", {"nested": Colour.RED}], b'["plain",{"nested":"red"}]'),
        ('say "hi"\n\u00e9\U0001f600', '"say \\"hi\\"\\n\u00e9\U0001f600"'.encode()),
    ],
    ids=["str-enum-and-int-subclass", "dict-subclass", "nested", "text"],
)
def test_values_are_written_as_their_base_json_types(value: object, written: bytes) -> None:
    assert dumps(value) == written


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


def test_a_lone_surrogate_in_a_result_is_escaped_not_fatal() -> None:
    # An upstream's byte that was not UTF-8, left in a message by a path that missed it.
    assert dumps({"error": {"message": "type image/\udcffpng"}}) == (
        b'{"error":{"message":"type image/\\\\xffpng"}}'
    )
