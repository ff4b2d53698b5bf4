"""The reference's kill switch: which values turn the UDS path off (FALLBACK-18)."""

from __future__ import annotations

import pytest

from tpbcast.reference_impl._dispatch_bootstrap import KILL_SWITCH_VARIABLES, kill_switch


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " TRUE ", "on\n"])
@pytest.mark.parametrize("name", KILL_SWITCH_VARIABLES)
def test_on_values_switch_uds_off(name, value):
    assert kill_switch({name: value}) == f"{name}={value}"


@pytest.mark.parametrize("value", ["", "0", "false", "off", "no", "2", "enabled", "t"])
def test_other_values_leave_uds_on(value):
    assert kill_switch(dict.fromkeys(KILL_SWITCH_VARIABLES, value)) is None
    assert kill_switch({}) is None
