"""Building libcbcast: cached by source hash, atomic under races, clear when impossible."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tpbcast.conformance.adapters.native import NativeBuildError, _build
from tpbcast.harness import run_ranks


def _env(cache: Path, **extra: str) -> dict[str, str]:
    return {"TPBCAST_NATIVE_CACHE": str(cache), "PATH": os.environ.get("PATH", ""), **extra}


def test_builds_once_and_reuses_the_cached_library(tmp_path):
    env = _env(tmp_path / "cache")
    first = _build.library_path(env)
    assert first.is_file() and first.name.startswith("libcbcast-")
    mtime = first.stat().st_mtime_ns
    assert _build.library_path(env) == first
    assert first.stat().st_mtime_ns == mtime, "a cached library was rebuilt"
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0


def test_an_edited_source_gets_a_new_library(tmp_path, monkeypatch):
    src = tmp_path / "cbcast.c"
    src.write_bytes(_build.source().read_bytes())
    monkeypatch.setattr(_build, "source", lambda: src)
    env = _env(tmp_path / "cache")
    before = _build.library_path(env)
    src.write_bytes(src.read_bytes() + b"\n/* edited */\n")
    after = _build.library_path(env)
    assert before != after and before.is_file() and after.is_file()


def test_a_source_the_compiler_rejects_names_the_command_and_the_error(tmp_path, monkeypatch):
    src = tmp_path / "cbcast.c"
    src.write_text("int broken(void) { return undeclared_name; }\n")
    monkeypatch.setattr(_build, "source", lambda: src)
    cache = tmp_path / "cache"
    with pytest.raises(NativeBuildError, match="undeclared_name") as info:
        _build.library_path(_env(cache))
    assert "-Werror" in str(info.value)
    assert not [p for p in cache.iterdir()], "a failed build left files behind"


def test_no_compiler_is_a_clear_error(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"TPBCAST_NATIVE_CACHE": str(tmp_path / "cache"), "PATH": str(empty)}
    with pytest.raises(NativeBuildError, match=r"no C compiler found .*\$CC"):
        _build.library_path(env)


def test_cache_dir_follows_xdg_then_home(tmp_path):
    assert _build.cache_dir({"XDG_CACHE_HOME": "/x/c"}) == Path("/x/c/tpbcast")
    assert _build.cache_dir({"HOME": "/h"}) == Path("/h/.cache/tpbcast")
    assert _build.cache_dir({"TPBCAST_NATIVE_CACHE": "/t", "HOME": "/h"}) == Path("/t")


def test_parallel_builds_race_safely(tmp_path):
    env = _env(tmp_path / "cache")
    paths = run_ranks(
        lambda ctx: str(_build.library_path(env)), 3, timeout=120, fail_fast=False
    ).values()
    assert len(set(paths)) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [Path(paths[0]).name]


def test_the_harness_loads_the_example_by_its_factory_string(native_library):
    harness = pytest.importorskip("tpbcast.harness")
    if not hasattr(harness, "load_implementation"):
        pytest.skip("tpbcast.harness.load_implementation has not landed yet")
    impl = harness.load_implementation("tpbcast.conformance.adapters.native.adapter:make")
    assert (impl.name, impl.version) == ("tpbcast-native-example", "0.1.0")
    assert impl.capabilities == {
        "deadlines",
        "generation",
        "peer_credentials",
        "error_details",
        "multi_buffer",
    }
    assert not impl.supports("tensors") and not impl.supports("abstract_namespace")
    assert impl.create().is_initialized() is False


def test_cc_may_carry_words(tmp_path):
    env = _env(tmp_path / "cache", CC="cc -DEXTRA_FLAG=1")
    assert _build.find_compiler(env)[1:] == ["-DEXTRA_FLAG=1"]
    assert _build.library_path(env).is_file()


def test_a_cache_dir_others_can_write_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(NativeBuildError, match="not writable by group/other"):
        _build.library_path(_env(cache))
