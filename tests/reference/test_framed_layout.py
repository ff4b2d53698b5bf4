"""The reference's framed-wire layout, checked against the wire document's bytes.

The conformance suite judges the framed mode through the adapter (conformance/tests/
test_framed.py); these pin the small pieces that have one right answer: the header bytes
(framed §4's table), the generation wrap (§5), the timeout variable's range (§7), the
decision board's compare-and-swap and the state file's checks (§3, §5), and the exec
hello's transport word.
"""

from __future__ import annotations

import os

import pytest

from tpbcast.harness import wire
from tpbcast.harness._exec_adapter import split_transport
from tpbcast.harness.adapter import UnknownTransportError
from tpbcast.reference_impl._errors import ConfigurationError, SecurityError
from tpbcast.reference_impl._framed import (
    ABORT_BIT,
    TIMEOUT_ENV,
    DecisionBoard,
    broadcast_timeout_from_env,
    next_generation,
    pack_header,
    unpack_header,
)


def test_header_bytes_are_the_documents_and_the_suites():
    assert pack_header(9).hex(" ") == "50 54 4d 4c 4c 50 54 52 09 00 00 00 00 00 00 00"
    assert pack_header(9) == wire.pack_frame_header(9)
    assert unpack_header(wire.pack_frame_header(5, magic=1)) == (1, 5)


def test_generations_wrap_to_zero():
    assert next_generation(0) == 1
    assert next_generation(0x7FFFFFFE) == 0x7FFFFFFF
    assert next_generation(0x7FFFFFFF) == 0


@pytest.mark.parametrize("value", ["", "invalid", "-1", "86400001", "50ms", "1" * 24, "5 x"])
def test_timeout_variable_refuses_what_the_document_refuses(value):
    with pytest.raises(ConfigurationError, match=TIMEOUT_ENV):
        broadcast_timeout_from_env({TIMEOUT_ENV: value})


def test_timeout_variable_values():
    assert broadcast_timeout_from_env({}) == (False, None)
    assert broadcast_timeout_from_env({TIMEOUT_ENV: "0"}) == (True, None)
    assert broadcast_timeout_from_env({TIMEOUT_ENV: " +1500"}) == (True, 1.5)
    assert broadcast_timeout_from_env({TIMEOUT_ENV: "86400000"}) == (True, 86400.0)


def test_board_publishes_once_and_reports_the_winner(tmp_path):
    path = str(tmp_path / "g.state")
    root = DecisionBoard.create(path, rank=0)
    peer = DecisionBoard.open(path, rank=1)
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        # A peer's abort wins; rank 0's later commit sees it.
        assert peer.publish(1, 0, 1 | ABORT_BIT) == 1 | ABORT_BIT
        assert root.publish(1, 0, 1) == 1 | ABORT_BIT
        # The commit first: a peer's failed wait reads it and does not overwrite it.
        assert root.publish(2, 0, 2) == 2
        assert peer.publish(2, 0, 2 | ABORT_BIT) == 2
        assert (peer.load(1), peer.load(2)) == (1 | ABORT_BIT, 2)
    finally:
        root.close()
        peer.close()


def test_board_refuses_a_loose_or_wrong_file(tmp_path):
    loose = tmp_path / "loose.state"
    loose.write_bytes(b"\0" * 8)
    loose.chmod(0o644)
    with pytest.raises(SecurityError, match="mode 0644"):
        DecisionBoard.open(str(loose), rank=1)
    short = tmp_path / "short.state"
    short.write_bytes(b"\0" * 4)
    short.chmod(0o600)
    with pytest.raises(SecurityError, match="4 bytes"):
        DecisionBoard.open(str(short), rank=1)
    link = tmp_path / "link.state"
    link.symlink_to(loose)
    with pytest.raises(SecurityError):
        DecisionBoard.open(str(link), rank=1)
    with pytest.raises(SecurityError):
        DecisionBoard.create(str(loose), rank=0)  # exclusive: an existing file is refused


def test_exec_hello_declares_its_transport_with_one_word():
    assert split_transport(["deadlines", "transport=uds-framed"]) == (("deadlines",), "uds-framed")
    assert split_transport(["deadlines"]) == (("deadlines",), "uds-v1")
    with pytest.raises(UnknownTransportError):
        split_transport(["transport=uds-framd"])
