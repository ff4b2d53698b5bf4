"""The worker -> controller protocol: what a test's report carries in ``user_properties``.

A test runs in an xdist worker; its verdicts are aggregated in the controller.  The only
channel pytest gives both is the report's ``user_properties`` (pairs of name and a
JSON-able value, also written to junit.xml as ``<property>``).  :class:`ReportProperties`
is that message: :meth:`~ReportProperties.encode` on the worker side and
:meth:`~ReportProperties.decode` on the controller side sit next to each other, so a field
is added to both or to neither (a self-test round-trips every field).

A report carries the fields of its phase only: every phase the cited clauses (added to
the item at collection), setup the implementation and the seed, teardown the per-clause
checks, the test's verdict, its duration and, if any, its message and failing rank.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tpbcast.conformance._checks import Check
from tpbcast.conformance._results import ImplementationInfo, Verdict
from tpbcast.conformance.spec import DEFAULT_TRANSPORT

__all__ = ["ReportProperties"]

# The property names (visible in junit.xml as <property name=...>).
_CLAUSE: Final = "clause"
_VERDICT: Final = "tpbcast_verdict"
_MESSAGE: Final = "tpbcast_message"
_RANK: Final = "tpbcast_failing_rank"
_DURATION: Final = "tpbcast_duration"
_IMPL: Final = "tpbcast_impl_name"
_IMPL_VERSION: Final = "tpbcast_impl_version"
_IMPL_CAPS: Final = "tpbcast_impl_capabilities"
_IMPL_SPEC: Final = "tpbcast_impl_spec"
_IMPL_TRANSPORT: Final = "tpbcast_impl_transport"
_SEED: Final = "tpbcast_seed"
_CHECKS: Final = "tpbcast_checks"


@dataclass(frozen=True)
class ReportProperties:
    """One report's share of the protocol; None (or ``()``) where the phase has nothing."""

    clauses: tuple[str, ...] = ()
    impl_spec: str | None = None
    seed: int | None = None
    impl: ImplementationInfo | None = None
    """Name, version, capabilities and transport; ``spec`` stays empty (``impl_spec``)."""
    checks: tuple[Check, ...] | None = None
    verdict: Verdict | None = None
    duration: float | None = None
    """Seconds, rounded to microseconds on the wire."""
    message: str | None = None
    failing_rank: int | None = None

    def encode(self) -> list[tuple[str, object]]:
        """The ``user_properties`` pairs, in the order junit.xml shows them."""
        out: list[tuple[str, object]] = [(_CLAUSE, cid) for cid in self.clauses]
        if self.impl_spec is not None:
            out.append((_IMPL_SPEC, self.impl_spec))
        if self.seed is not None:
            out.append((_SEED, int(self.seed)))
        if self.impl is not None:
            out.append((_IMPL, self.impl.name))
            out.append((_IMPL_VERSION, self.impl.version))
            out.append((_IMPL_CAPS, ",".join(sorted(self.impl.capabilities))))
            out.append((_IMPL_TRANSPORT, self.impl.transport))
        if self.checks is not None:
            out.append((_CHECKS, _checks_json(self.checks)))
        if self.verdict is not None:
            out.append((_VERDICT, self.verdict.value))
        if self.duration is not None:
            out.append((_DURATION, round(self.duration, 6)))
        if self.message:
            out.append((_MESSAGE, self.message))
        if self.failing_rank is not None:
            out.append((_RANK, self.failing_rank))
        return out

    @classmethod
    def decode(cls, entries: Iterable[object]) -> ReportProperties:
        """Read back what :meth:`encode` wrote; pairs of other plugins are ignored."""
        pairs = [
            (str(entry[0]), entry[1])
            for entry in entries
            if isinstance(entry, tuple | list) and len(entry) == 2
        ]
        values = dict(pairs)
        impl = None
        if _IMPL in values:
            caps = str(values.get(_IMPL_CAPS, ""))
            impl = ImplementationInfo(
                name=str(values[_IMPL]),
                version=str(values.get(_IMPL_VERSION, "")),
                capabilities=frozenset(c for c in caps.split(",") if c),
                transport=str(values.get(_IMPL_TRANSPORT, DEFAULT_TRANSPORT)),
            )
        return cls(
            clauses=tuple(str(v) for k, v in pairs if k == _CLAUSE),
            impl_spec=str(values[_IMPL_SPEC]) if _IMPL_SPEC in values else None,
            seed=int(str(values[_SEED])) if _SEED in values else None,
            impl=impl,
            checks=_checks_from_json(str(values[_CHECKS])) if _CHECKS in values else None,
            verdict=Verdict(str(values[_VERDICT])) if _VERDICT in values else None,
            duration=float(str(values[_DURATION])) if _DURATION in values else None,
            message=str(values[_MESSAGE]) if _MESSAGE in values else None,
            failing_rank=int(str(values[_RANK])) if _RANK in values else None,
        )


def _checks_json(checks: Iterable[Check]) -> str:
    return json.dumps(
        [
            {
                "clause": c.clause_id,
                "verdict": c.verdict.value,
                "message": c.message,
                "rank": c.rank,
            }
            for c in checks
        ]
    )


def _checks_from_json(raw: str) -> tuple[Check, ...]:
    return tuple(
        Check(
            clause_id=str(entry["clause"]),
            verdict=Verdict(str(entry["verdict"])),
            message=str(entry["message"]),
            rank=None if entry["rank"] is None else int(entry["rank"]),
        )
        for entry in json.loads(raw)
    )
