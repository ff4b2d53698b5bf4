"""The worker -> controller codec of the conformance plugin round-trips every field.

A test's verdicts cross from an xdist worker to the controller only as the report's
``user_properties``: a field encoded but not decoded (or decoded under another name) would
drop verdicts silently.  Each field is set to a value unlike its default, so a codec that
forgets one fails here, naming it.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tpbcast.conformance._checks import Check
from tpbcast.conformance._plugin.codec import ReportProperties
from tpbcast.conformance._results import ImplementationInfo, Verdict

FULL = ReportProperties(
    clauses=("WIRE-1", "FAULT-2"),
    impl_spec="pkg.mod:make",
    seed=1234567,
    impl=ImplementationInfo(
        name="impl",
        version="1.2",
        capabilities=frozenset({"deadlines", "tensors"}),
        transport="shm",
    ),
    checks=(
        Check("WIRE-1", Verdict.PASS, "WIRE-1: fine"),
        Check("FAULT-2", Verdict.FAIL, 'FAULT-2: "quoted" -- rank 2: got None', rank=2),
    ),
    verdict=Verdict.FAIL,
    duration=1.234567,
    message="FAULT-2: it hung",
    failing_rank=2,
)


def test_every_field_round_trips() -> None:
    assert ReportProperties.decode(FULL.encode()) == FULL


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(ReportProperties)])
def test_each_field_alone_round_trips(name: str) -> None:
    alone = ReportProperties(**{name: getattr(FULL, name)})
    assert ReportProperties.decode(alone.encode()) == alone, name


def test_an_empty_message_property_is_not_sent() -> None:
    assert ReportProperties(message="").encode() == []


def test_pairs_of_other_plugins_and_junit_shapes_are_read() -> None:
    """xdist may hand the pairs over as lists; other plugins add pairs of their own."""
    entries = [list(pair) for pair in FULL.encode()] + [("other_plugin", 1), "not a pair"]
    assert ReportProperties.decode(entries) == FULL


def test_the_checks_travel_as_one_json_property() -> None:
    """junit.xml shows one property per check list, readable by other tools."""
    (raw,) = [v for k, v in FULL.encode() if k == "tpbcast_checks"]
    assert json.loads(str(raw))[1] == {
        "clause": "FAULT-2",
        "verdict": "FAIL",
        "message": 'FAULT-2: "quoted" -- rank 2: got None',
        "rank": 2,
    }
