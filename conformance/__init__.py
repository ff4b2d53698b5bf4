"""tpbcast.conformance: the clause registry (SPEC.md), verdicts and reports of the suite.

``spec`` loads ``clauses.toml`` (``python -m tpbcast.conformance.spec --write`` regenerates
SPEC.md); ``_results`` folds per-test checks into per-clause verdicts; ``_report`` writes the
JSON, markdown and HTML reports.  None of these import pytest: the suite runner and its pytest
plugin build on them.

Names load lazily (PEP 562) so that ``python -m tpbcast.conformance.spec`` does not import
``spec`` twice and importing the package stays cheap for the pytest plugin.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._report import Column as Column
    from ._report import ReportFiles as ReportFiles
    from ._report import ReportRow as ReportRow
    from ._report import default_columns as default_columns
    from ._report import render_html as render_html
    from ._report import render_report_markdown as render_report_markdown
    from ._report import write_reports as write_reports
    from ._report_json import json_document as json_document
    from ._report_json import suite_from_json as suite_from_json
    from ._results import CheckResult as CheckResult
    from ._results import ClauseResult as ClauseResult
    from ._results import ImplementationInfo as ImplementationInfo
    from ._results import SuiteResult as SuiteResult
    from ._results import Verdict as Verdict
    from ._results import aggregate as aggregate
    from ._results import exit_status as exit_status
    from .spec import Clause as Clause
    from .spec import Spec as Spec
    from .spec import SpecError as SpecError
    from .spec import default_spec as default_spec
    from .spec import load_spec as load_spec
    from .spec._markdown import render_markdown as render_markdown

_LAZY: Final = {
    "Column": "._report",
    "ReportFiles": "._report",
    "ReportRow": "._report",
    "default_columns": "._report",
    "json_document": "._report_json",
    "render_html": "._report",
    "render_report_markdown": "._report",
    "suite_from_json": "._report_json",
    "write_reports": "._report",
    "CheckResult": "._results",
    "ClauseResult": "._results",
    "ImplementationInfo": "._results",
    "SuiteResult": "._results",
    "Verdict": "._results",
    "aggregate": "._results",
    "exit_status": "._results",
    "Clause": ".spec",
    "Spec": ".spec",
    "SpecError": ".spec",
    "default_spec": ".spec",
    "load_spec": ".spec",
    "render_markdown": ".spec._markdown",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "CheckResult",
    "Clause",
    "ClauseResult",
    "Column",
    "ImplementationInfo",
    "ReportFiles",
    "ReportRow",
    "Spec",
    "SpecError",
    "SuiteResult",
    "Verdict",
    "aggregate",
    "default_columns",
    "default_spec",
    "exit_status",
    "json_document",
    "load_spec",
    "render_html",
    "render_markdown",
    "render_report_markdown",
    "suite_from_json",
    "write_reports",
]
