"""The README's example test file runs and passes, so the front page cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_the_example() -> None:
    assert any("def test_" in block for block in _python_blocks())


def test_readme_example_passes(pytester: pytest.Pytester) -> None:
    (example,) = [block for block in _python_blocks() if "def test_" in block]
    pytester.makepyfile(test_readme_example=example)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    # one direct harness test, the broadcast test at world sizes 2 and 4, one fault test
    result.assert_outcomes(passed=4)


def test_the_session_table_lists_every_nox_session() -> None:
    """A newcomer scans the README's table for a session: every one in noxfile.py is there."""
    noxfile = (README.parent / "noxfile.py").read_text(encoding="utf-8")
    sessions = set(re.findall(r"@nox\.session[^\n]*\ndef (\w+)\(", noxfile))
    rows = set(re.findall(r"^\| `(\w+)` \|", README.read_text(encoding="utf-8"), re.M))
    assert sessions and rows == sessions, (sorted(sessions - rows), sorted(rows - sessions))
