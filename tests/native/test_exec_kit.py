"""The ``exec:`` kit as a C or C++ team uses it (issue 24).

* Both examples build under the flags those teams use: the C one with
  ``-std=c11 -Wall -Wextra -Werror``, the C++ one with
  ``-std=c++17 -Wall -Wextra -Wpedantic -Wold-style-cast -Werror`` and linked with a second
  translation unit that includes the header (a definition in the header would be a
  duplicate symbol); the header alone also under stricter C++ warnings; the README's two
  skeletons compile as they are printed.
* A probe driver shows the kit's own behaviours: ``reset_checked`` errors reach the caller,
  ``err->rank`` is pre-filled, an escaped C++ exception is an error reply.
* The suite judges the C++ example on a selection of clauses with its expectations file:
  no MUST FAIL, and BCAST-11 (a check the adapter makes before the driver) UNSUPPORTED.

Compilers run once per session (``build_cached``: cached by content and flags, shared
between xdist workers); the suite run is a clause-prefix selection, ~6 s.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpbcast.conformance.adapters.exec import cxx_driver_path, driver_path, header_path
from tpbcast.conformance.adapters.exec.native import CFLAGS, CXXFLAGS
from tpbcast.conformance.adapters.native._build import (
    build_cached,
    find_compiler,
    find_cxx_compiler,
)
from tpbcast.harness import load_implementation
from tpbcast.harness._exec_errors import (
    ExecBroadcastError,
    ExecBrokenError,
    ExecConfigurationError,
    ExecPeerClosedError,
)

ROOT = Path(__file__).resolve().parents[2]
KIT = header_path().parent
README = KIT / "README.md"
EXPECTATIONS = KIT / "expectations-cxx.toml"
PROBE = Path(__file__).with_name("_kit_probe.cpp")

# The flags, exactly: the examples must build where those teams build.
C_TEAM_FLAGS = ("-std=c11", "-Wall", "-Wextra", "-Werror")
CXX_TEAM_FLAGS = ("-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Wold-style-cast", "-Werror")
# "and similar": what a stricter C++ codebase turns on; the header alone must pass them.
CXX_STRICT = (
    *CXX_TEAM_FLAGS,
    "-Wconversion",
    "-Wsign-conversion",
    "-Wuseless-cast",
    "-Wshadow",
    "-Wzero-as-null-pointer-constant",
    "-Wcast-qual",
)
# A clause-prefix selection that exercises every kit call (initialize with good and bad
# arguments, broadcast of one and several buffers, reset and generation, deadlines, the
# error classes) and BCAST-11; the full run takes ~50 s, this ~6 s.
SELECTION = (
    "INIT-1",
    "INIT-5",
    "BCAST-2",
    "BCAST-3",
    "BCAST-7",
    "BCAST-8",
    "BCAST-11",
    "RESET",
    "TIME-2",
    "FAULT-10",
)


def _compile(tmp_path: Path, compiler: list[str], flags: tuple[str, ...], *files: Path) -> str:
    """Compile ``files`` to one object each; return the diagnostics (empty = clean)."""
    out = []
    for source in files:
        obj = tmp_path / (source.name + ".o")
        done = subprocess.run(
            [
                *compiler,
                *flags,
                "-I",
                str(KIT),
                "-I",
                str(tmp_path),
                "-c",
                str(source),
                "-o",
                str(obj),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        out.append(done.stderr if done.returncode else "")
    return "".join(out)


@pytest.fixture(scope="session")
def cxx_driver() -> Path:
    """The C++ example's driver: built once (cached by content and flags)."""
    return cxx_driver_path()


@pytest.fixture(scope="session")
def probe_driver() -> Path:
    """``_kit_probe.cpp`` built with the C++ team's flags."""
    return build_cached(
        "kit-probe",
        (PROBE, header_path()),
        [*CXXFLAGS, "-I", str(KIT), str(PROBE)],
        finder=find_cxx_compiler,
    )


def test_the_examples_are_built_with_the_teams_flags():
    """The cached builds cannot hide a dropped flag: the flags are part of the cache key
    (``build_cached``), and here they must include the issue's."""
    assert set(C_TEAM_FLAGS) <= set(CFLAGS), CFLAGS
    assert set(CXX_TEAM_FLAGS) <= set(CXXFLAGS), CXXFLAGS


def test_both_examples_build(cxx_driver):
    """The C driver (-std=c11 -Wall -Wextra -Werror) and the C++ one (C++17, pedantic,
    -Wold-style-cast, -Werror, linked with tpbcast_driver_check.cpp: a second translation
    unit including the kit) build and answer their hello."""
    c_driver = driver_path()
    assert load_implementation(f"exec:{c_driver}").name == "tpbcast-native-example"
    impl = load_implementation(f"exec:{cxx_driver}")
    assert impl.name == "tpbcast-native-example-cxx"
    assert impl.supports("deadlines") and impl.supports("generation")


def test_the_header_is_clean_under_strict_cxx_and_c_warnings(tmp_path):
    """The header alone, twice in one program, under stricter warnings than the teams' own:
    no warning (each is an error here), no duplicate symbol at link."""
    one, two = tmp_path / "one.cpp", tmp_path / "two.cpp"
    one.write_text('#include "tpbcast_driver.h"\nint two();\nint main() { return two(); }\n')
    two.write_text('#include "tpbcast_driver.h"\nint two();\nint two() { return 0; }\n')
    cxx = find_cxx_compiler()
    assert _compile(tmp_path, cxx, CXX_STRICT, one, two) == ""
    link = subprocess.run(
        [*cxx, str(tmp_path / "one.cpp.o"), str(tmp_path / "two.cpp.o"), "-o", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert link.returncode == 0, f"two translation units including the kit: {link.stderr}"
    c_file = tmp_path / "one.c"
    c_file.write_text('#include "tpbcast_driver.h"\nint main(void) { return 0; }\n')
    c_strict = (*C_TEAM_FLAGS, "-Wpedantic", "-Wconversion", "-Wsign-conversion", "-Wshadow")
    assert _compile(tmp_path, find_compiler(), c_strict, c_file) == ""


_STUB_C = """\
#include <stddef.h>
int mb_init(int rank, int world_size, const char *base_path);
int mb_broadcast(void *buf, size_t nbytes, int root);
int mb_reset(void);
int mb_is_initialized(void);
int mb_timed_out(void);
int mb_last_errno(void);
const char *mb_last_error(void);
"""
_STUB_CXX = """\
#include <cstddef>
#include <stdexcept>
namespace mybcast {
struct TimeoutError : std::runtime_error { using std::runtime_error::runtime_error; };
class Broadcaster {
  public:
    void init(int rank, int world_size, const char *base_path);
    void broadcast(void *buf, std::size_t nbytes, int root);
    void reset();
    bool initialized() const;
};
}  // namespace mybcast
"""


@pytest.mark.parametrize(("lang", "suffix"), [("c", ".c"), ("cpp", ".cpp")])
def test_the_readme_skeletons_compile_as_printed(tmp_path, lang, suffix):
    blocks = re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, f"README.md: one {lang} skeleton expected, found {len(blocks)}"
    (tmp_path / "mybcast.h").write_text(_STUB_C)
    (tmp_path / "mybcast.hpp").write_text(_STUB_CXX)
    source = tmp_path / f"skeleton{suffix}"
    source.write_text(blocks[0])
    if lang == "c":
        assert _compile(tmp_path, find_compiler(), (*C_TEAM_FLAGS, "-Wpedantic"), source) == ""
    else:
        assert _compile(tmp_path, find_cxx_compiler(), CXX_TEAM_FLAGS, source) == ""


def _probe(probe_driver):
    return load_implementation(f"exec:{probe_driver}").create()


def test_a_failing_reset_checked_reaches_the_caller(probe_driver):
    bcast = _probe(probe_driver)
    bcast.initialize(2, 4, "/x/reset-fails")
    with pytest.raises(ExecBrokenError, match="probe: reset failed") as info:
        bcast.reset()
    assert (info.value.rank, info.value.errno_name, info.value.phase) == (2, "EIO", "reset")
    assert bcast.is_initialized(), "the failed reset left it initialized (the probe's own say)"
    bcast.close()


def test_the_kit_fills_in_the_rank(probe_driver):
    """The probe never sets ``err->rank``: initialize's error carries the rank asked for,
    broadcast's the rank of the last successful initialize, and after a reset none."""
    bcast = _probe(probe_driver)
    with pytest.raises(ExecConfigurationError, match="probe: refused") as refused:
        bcast.initialize(3, 4, "/x/refuse")
    assert refused.value.rank == 3
    with pytest.raises(ExecPeerClosedError) as before:
        bcast.broadcast(bytearray(1))
    assert before.value.rank is None, "no initialize succeeded yet"
    bcast.initialize(1, 4, "/x/fine")
    with pytest.raises(ExecPeerClosedError) as during:
        bcast.broadcast(bytearray(1))
    assert during.value.rank == 1
    bcast.reset()
    with pytest.raises(ExecPeerClosedError) as after:
        bcast.broadcast(bytearray(1))
    assert after.value.rank is None, "a reset forgets the rank"
    bcast.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.initialize(0, 2, "/x/throw-std"), "threw a C++ exception: probe: init"),
        (
            lambda b: b.initialize(0, 2, "/x/throw-other"),
            "threw an exception that is not a std::exception",
        ),
        (lambda b: b.broadcast(bytearray(1), 7), "threw a C++ exception: probe: broadcast"),
    ],
)
def test_an_escaped_cxx_exception_is_an_error_reply(probe_driver, call, message):
    bcast = _probe(probe_driver)
    with pytest.raises(ExecBroadcastError) as info:
        call(bcast)
    assert type(info.value) is ExecBroadcastError and info.value.error_class == "error"
    assert message in str(info.value)
    assert bcast.is_initialized() is False, "the driver kept serving"
    bcast.close()


def test_the_suite_judges_the_cxx_example(cxx_driver, tmp_path):
    """No MUST FAIL, nothing its expectations file does not announce, and BCAST-11 (a
    read-only buffer, refused by the adapter before the driver) UNSUPPORTED, not PASS."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpbcast.conformance",
            f"--tpbcast-impl=exec:{cxx_driver}",
            f"--expectations={EXPECTATIONS}",
            f"--report-dir={tmp_path}",
            "-n",
            "2",
            *SELECTION,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, f"the C++ example regressed against its expectations:\n{tail}"
    doc = json.loads((tmp_path / "conformance.json").read_text())
    clauses = {c["id"]: c for c in doc["clauses"]}
    judged = {cid: c["verdict"] for cid, c in clauses.items() if c["verdict"] != "NOT_TESTED"}
    assert len(judged) >= 15, f"the selection judged too little: {judged}"
    assert not doc["summary"]["must_failures"], doc["summary"]["must_failures"]
    bcast11 = clauses["BCAST-11"]
    assert bcast11["verdict"] == "UNSUPPORTED", bcast11
    assert "the driver was never asked" in bcast11["message"], bcast11["message"]
