"""Behaviour the reference's other self-tests left unchecked, found by mutation testing.

Each test here pins a behaviour that a mutmut mutant of ``tpbcast.reference_impl``
changed without any other self-test noticing (``nox -s mutation``; the mutants are
listed in reports/mutation/).  They check what a user or an operator sees -- an error
that names the setting to change, a field of an error, a deadline -- never the source
text.  All run in the pytest process: no fork, milliseconds each.
"""

from __future__ import annotations

import math

import pytest

from tpbcast.reference_impl import BroadcasterConfig, ConfigurationError, CpuTpBroadcaster

# A base path whose socket path (<base>_0.sock) is 108 bytes: one over sun_path.
_TOO_LONG = "/tmp/" + "p" * (107 - len("/tmp/") - len("_0.sock") + 1)


def test_a_too_long_socket_path_tells_how_to_fix_it() -> None:
    """The error names the knob an operator turns (the env var, spelled as it is)."""
    with pytest.raises(ConfigurationError) as info:
        CpuTpBroadcaster().initialize(0, 2, _TOO_LONG)
    path = _TOO_LONG + "_0.sock"
    assert str(info.value) == (
        "socket path is 108 bytes, the limit is 107 (sun_path); use a shorter base path or "
        f"set TPBCAST_SOCKET_DIR to a short directory [path {path}]"
    )
    assert info.value.path == path


# -- BroadcasterConfig -----------------------------------------------------------------


def test_a_non_number_deadline_is_refused_naming_the_setting_the_value_and_its_type() -> None:
    with pytest.raises(ConfigurationError) as info:
        BroadcasterConfig(init_timeout="5")  # type: ignore[arg-type]
    assert str(info.value) == "init_timeout must be a number of seconds, got '5' (type=str)"


@pytest.mark.parametrize(
    "setting", ["connect_timeout", "connect_retry_interval", "init_timeout", "io_timeout"]
)
def test_every_deadline_setting_is_checked_under_its_own_name(setting: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{setting} must be a finite number > 0, got 0"):
        BroadcasterConfig(**{setting: 0})  # type: ignore[arg-type]


@pytest.mark.parametrize("uid", [True, "1000", -1, 1.0])
def test_allowed_uids_hold_only_non_negative_ints(uid: object) -> None:
    with pytest.raises(ConfigurationError, match=f"allowed_uids must hold uids >= 0, got {uid!r}"):
        BroadcasterConfig(allowed_uids=(uid,))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_only_io_timeout_suggests_none_for_waiting_forever(bad: float) -> None:
    """connect/init deadlines cannot be None (always bounded); the io one can, and says so."""
    with pytest.raises(ConfigurationError) as io:
        BroadcasterConfig(io_timeout=bad)
    assert (
        str(io.value)
        == f"io_timeout must be a finite number > 0, got {bad!r}; use None to wait forever"
    )
    with pytest.raises(ConfigurationError) as connect:
        BroadcasterConfig(connect_timeout=bad)
    assert str(connect.value) == f"connect_timeout must be a finite number > 0, got {bad!r}"


@pytest.mark.parametrize("flag", ["require_same_uid", "abstract_namespace", "verify_socket_dir"])
def test_switches_take_only_bools(flag: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        BroadcasterConfig(**{flag: 1})  # type: ignore[arg-type]
    assert str(info.value) == f"{flag} must be a bool, got 1"


def test_allowed_uids_alone_replace_the_same_uid_rule() -> None:
    config = BroadcasterConfig(require_same_uid=False, allowed_uids=(4242, 7))
    assert config.accepted_uids(own_uid=1000) == frozenset({4242, 7})
    assert BroadcasterConfig(allowed_uids=(7,)).accepted_uids(1000) == frozenset({1000, 7})
    assert BroadcasterConfig(require_same_uid=False).accepted_uids(1000) is None
