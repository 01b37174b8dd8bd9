"""audit.repair: a record that would not serialise, made writable, naming what changed."""

from __future__ import annotations

import orjson

from gateway.audit.repair import MAX_PATHS, repair_record


def test_a_clean_record_comes_back_equal_with_no_paths() -> None:
    record = {"event": {"action": "WebFetch"}, "list": [1, 2.5, None, True], "s": "é"}
    repaired, paths = repair_record(record, limit=100)
    assert repaired == record and paths == []


def test_each_kind_of_bad_value_is_repaired_and_named() -> None:
    record = {
        "http": {"response": {"status_line": "200 O\udcffK", "headers": ["\ud800"]}},
        "big": 2**80,
        "obj": object(),
        7: "int key",
        "long": "y" * 50,
    }
    repaired, paths = repair_record(record, limit=20)
    orjson.dumps(repaired)
    assert repaired["http"]["response"]["status_line"] == "200 O\\xffK"
    assert repaired["http"]["response"]["headers"] == ["\\ud800"]
    assert repaired["big"] == str(2**80)[:20] + "…[5 more characters]"
    assert repaired["obj"].startswith("<object object")
    assert repaired["7"] == "int key"
    assert repaired["long"] == "y" * 20 + "…[30 more characters]"
    assert sorted(paths) == sorted(
        ["http.response.status_line", "http.response.headers[0]", "big", "obj", ".<key>", "long"]
    )


def test_the_callers_record_is_not_changed() -> None:
    inner = {"v": "\udcff"}
    record = {"a": inner}
    repair_record(record, limit=10)
    assert inner == {"v": "\udcff"}


def test_lists_are_cut_and_paths_capped() -> None:
    repaired, paths = repair_record({"l": ["\udcff"] * 50}, limit=10, max_items=30)
    assert len(repaired["l"]) == 31 and repaired["l"][-1] == "…[20 more items]"
    assert len(paths) == MAX_PATHS
