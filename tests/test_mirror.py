"""The tests mirror the package: every module of gateway/ has its test module
(`tests/<package>/test_<module>.py`, `tests/test_<module>.py` at the top), or a row of
docs/design.md's "Where each module is tested" table naming the existing tests that cover it.
A row for a module that has its own test module, or that no longer exists, is stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gateway"
DESIGN = ROOT / "docs" / "design.md"
SECTION = "## Where each module is tested"
ROW = re.compile(r"^\| `(gateway/[^`]+\.py)` \| (.+) \|$")
TEST_PATH = re.compile(r"`(tests/[^`]+\.py)`")


def own_test_module(module: Path) -> Path:
    relative = module.relative_to(PACKAGE)
    return ROOT / "tests" / relative.parent / f"test_{relative.stem}.py"


def covered_in_docs() -> dict[str, list[str]]:
    text = DESIGN.read_text()
    assert SECTION in text, f"docs/design.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = TEST_PATH.findall(match.group(2))
    return rows


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_every_module_has_its_test_module_or_a_row_naming_its_tests() -> None:
    rows = covered_in_docs()
    missing = [
        str(module.relative_to(ROOT))
        for module in modules()
        if not own_test_module(module).exists() and str(module.relative_to(ROOT)) not in rows
    ]
    assert not missing, (
        "modules without tests/<package>/test_<module>.py or a row in docs/design.md's "
        f"table: {missing}"
    )


def test_every_row_names_a_module_without_its_own_tests_and_existing_tests() -> None:
    problems = []
    for module, tests in covered_in_docs().items():
        path = ROOT / module
        if not path.exists():
            problems.append(f"{module}: no such module")
        elif own_test_module(path).exists():
            problems.append(
                f"{module}: has {own_test_module(path).relative_to(ROOT)}; drop the row"
            )
        if not tests:
            problems.append(f"{module}: the row names no test")
        problems.extend(
            f"{module}: no such test {test}" for test in tests if not (ROOT / test).exists()
        )
    assert not problems, "stale rows in docs/design.md's table:\n" + "\n".join(problems)


def test_the_required_modules_have_their_own_tests() -> None:
    for module in ("tools/webfetch.py", "fetch/resolver.py", "fetch/tunnel.py", "policy/rules.py"):
        assert own_test_module(PACKAGE / module).exists(), module
