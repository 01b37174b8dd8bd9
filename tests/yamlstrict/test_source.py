"""Strict composition: each hazard of hand-written YAML is one issue at its line and column
(duplicate keys, YAML 1.1 booleans, tags, alias bombs, deep nesting, several documents, binary
or oversized input), and a clean file composes with no issue at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.yamlstrict.issues import SourceError
from gateway.yamlstrict.source import MAX_DEPTH, compose, read_bounded


def codes(text: str) -> list[tuple[int, int, str]]:
    document = compose(text.encode(), source="f.yaml")
    return [(i.line, i.col, i.code) for i in document.issues]


def refusal(data: bytes, **kwargs: int) -> tuple[int, int, str]:
    with pytest.raises(SourceError) as caught:
        compose(data, source="f.yaml", **kwargs)
    (issue,) = caught.value.issues
    return issue.line, issue.col, issue.code


def test_a_clean_document_has_no_issue() -> None:
    document = compose(b"a: 1\nb: [x, y]\n", source="f.yaml")
    assert document.issues == ()
    assert document.root is not None and document.source == "f.yaml"


def test_an_empty_document_has_no_root() -> None:
    assert compose(b"# nothing\n", source="f.yaml").root is None


def test_a_key_listed_twice_is_found_where_it_repeats() -> None:
    assert codes("a: 1\nb: 2\na: 3\n") == [(3, 1, "duplicate_key")]


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "True", "NO"])
def test_yaml_1_1_booleans_are_found(word: str) -> None:
    assert codes(f"flag: {word}\n") == [(1, 7, "bad_boolean")]


def test_true_and_false_are_plain_booleans() -> None:
    assert codes("a: true\nb: false\n") == []


def test_a_tag_is_unsupported() -> None:
    assert codes("a: !!python/object x\n") == [(1, 4, "unsupported_tag")]


def test_an_alias_bomb_stops_before_it_grows() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    _, _, code = refusal("\n".join(lines).encode())
    assert code == "alias_limit"


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    depth = MAX_DEPTH + 1
    assert refusal(b"[" * depth + b"]" * depth)[2] == "too_deep"


def test_more_than_one_document_is_refused_at_the_second() -> None:
    assert refusal(b"a: 1\n---\nb: 2\n") == (2, 1, "multiple_documents")


def test_binary_input_is_one_issue_at_the_nul_byte() -> None:
    assert refusal(b"a: 1\nb: \x00\n") == (2, 4, "binary_file")


def test_input_over_the_cap_is_refused_before_parsing() -> None:
    assert refusal(b"a: 1\n" * 10, max_bytes=16)[2] == "file_too_large"


def test_broken_syntax_is_one_issue_never_a_traceback() -> None:
    assert refusal(b"a: [1, 2\n")[2] == "yaml_syntax"


def test_read_bounded_reads_a_file_and_refuses_one_too_large(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes(b"a: 1\n")
    assert read_bounded(path) == b"a: 1\n"
    with pytest.raises(SourceError) as caught:
        read_bounded(path, max_bytes=2)
    assert caught.value.issues[0].code == "file_too_large"


def test_read_bounded_refuses_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "missing.yaml"):
        with pytest.raises(SourceError) as caught:
            read_bounded(path)
        assert caught.value.issues[0].code == "unreadable"
