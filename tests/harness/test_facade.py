"""The harness's public surface, tier by tier: pinned so a change to it is a decision.

``tpbcast.harness`` is the test author's API; the machinery lives in the public tiers
``wire``, ``rogue``, ``env``, ``adapter`` and ``runtime``.  Adding or removing a name
means editing the table below in the same change, which is the point.
"""

from __future__ import annotations

import importlib
import pickle
import warnings

import pytest

from tpbcast import harness


def _names(text: str) -> set[str]:
    return set(text.split())


TIERS = {  # each tier's __all__
    "tpbcast.harness": _names(
        """
        CapabilityMissing Delay EngineNotAsked Exit FaultAction FaultPlan FaultRecord
        ForkSafetyError GroupResult Implementation Kill Pause Raise RankContext RankGroupFailure
        RankOutcome Segfault SignalStorm Status SyncError SyncTimeoutError WarmGroup
        load_implementation run_ranks
        """
    ),
    "tpbcast.harness.wire": _names(
        """
        PROBE RANK_STRUCT CloseKind CloseObservation Deadline PeerCredentials
        WireClosedError WireError WireTimeoutError accept address_of connect expect_closed
        listen pack_rank peer_credentials recv_exact recv_until_eof send_all socket_path
        unpack_rank unread wait_hung_up
        ABORT_BIT FRAME_ACK FRAME_HEADER FRAME_MAGIC STATE_READY STATE_SIZE DecisionWords
        FileFacts pack_frame_header state_path unpack_frame_header
        """
    ),
    "tpbcast.harness.rogue": _names(
        """
        PEER_BEHAVIOURS ROOT_BEHAVIOURS LinkReport RogueAction RogueError RogueReport
        RogueTarget rogue_peer rogue_root
        ACK_BEHAVIOURS FramedReport framed_peer framed_root
        """
    ),
    "tpbcast.harness.env": _names(
        """
        BufferProof EnvironmentFaultUnavailable PathProof UidProof as_foreign_uid
        foreign_owner_dir leave_stale_socket loose_dir regular_file_at stale_socket
        symlink_at tiny_socket_buffers
        """
    ),
    "tpbcast.harness.adapter": _names(
        """
        DEFAULT_IMPLEMENTATION DEFAULT_TRANSPORT ENGINE_SURFACES REQUIRED_MEMBERS
        TRANSPORT_PROFILES AdapterError Broadcaster Capability CapabilityMissing EngineNotAsked
        ExecBroadcastError ExecDriverError ExecNotAsked Implementation ImplementationLoadError
        TransportProfile UnknownCapabilityError UnknownTransportError load_implementation
        parse_capabilities parse_transport transport_names transport_profile transport_profiles
        """
    ),
    "tpbcast.harness.observe": _names(
        """
        PID_FILE_PREFIX SHM_DIR Held Proc Spinner alive all_stopped cpu_seconds current_cpu
        dead describe descendants
        fd_cloexec fd_targets held kill load_observation loose modes_in named_now new_held
        pid_path pinned private_tmpdir publish_pid published_pid save_observation shm_names
        signal_masks still_named still_there thread_count thread_wait unix_listening wait_dead
        wait_gone wait_until
        """
    ),
    "tpbcast.harness.runtime": _names(
        """
        SEED_ENV WORKDIR_PREFIX WORKDIR_ROOT_ENV NativeThread PlannedFault TargetRef
        make_private_dir native_threads release_workdirs sweep_stale_dirs Leak pending_leaks
        remove_leaks size_text take_leaks claim
        """
    ),
}


@pytest.mark.parametrize("module_name", sorted(TIERS))
def test_each_tier_exports_exactly_its_pinned_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert set(module.__all__) == TIERS[module_name]
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what it does not define: {missing}"


def test_the_test_authors_api_stays_small() -> None:
    assert len(harness.__all__) <= 24, "the top level is the test author's API, ~20 names"
    assert set(harness.TIERS) == {name.rsplit(".", 1)[1] for name in TIERS if "." in name[8:]}


@pytest.mark.parametrize("module_name", sorted(TIERS))
def test_classes_and_functions_show_the_public_module_they_are_imported_from(
    module_name: str,
) -> None:
    """A traceback or ``exc_type`` must name a path the reader can import from."""
    module = importlib.import_module(module_name)
    private = [
        f"{name} -> {obj.__module__}"
        for name in module.__all__
        if (isinstance(obj := getattr(module, name), type) or callable(obj))
        and getattr(obj, "__qualname__", None) == name
        and ".harness._" in str(obj.__module__)
    ]
    assert not private, private


def test_exceptions_pickle_by_their_public_path() -> None:
    """Exceptions cross the fork by reference; the public path must load them back."""
    error = harness.wire.WireClosedError(
        "recv", expected=4, got=b"\x01", how="eof", elapsed=0.1, errno_name=None
    )
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is harness.wire.WireClosedError and str(again) == str(error)


@pytest.mark.parametrize(
    ("old", "tier"),
    [
        ("connect", "wire"),
        ("rogue_peer", "rogue"),
        ("stale_socket", "env"),
        ("AdapterError", "adapter"),
        ("make_private_dir", "runtime"),
    ],
)
def test_a_name_that_moved_still_resolves_with_a_warning_naming_its_tier(
    old: str, tier: str
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"tpbcast\.harness\.{tier}\b"):
        moved = getattr(harness, old)
    assert moved is getattr(importlib.import_module(f"tpbcast.harness.{tier}"), old)
    assert old not in harness.__all__ and old not in dir(harness)


def test_a_rogue_function_that_went_private_points_at_rogue_peer_and_root() -> None:
    with pytest.warns(DeprecationWarning, match=r'rogue_peer\("silent"'):
        fn = harness.peer_silent  # type: ignore[attr-defined]
    assert fn is harness.rogue.PEER_BEHAVIOURS["silent"]
    with pytest.warns(DeprecationWarning, match=r'rogue_root\("wrong_probe"'):
        assert harness.root_wrong_probe is harness.rogue.ROOT_BEHAVIOURS["wrong_probe"]  # type: ignore[attr-defined]


def test_an_unknown_name_is_an_attribute_error_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
            harness.no_such_name  # type: ignore[attr-defined]  # noqa: B018
