"""Developer entry points: ``nox -s tests``, ``nox -s conformance``, ``nox -s lint``, ...

Every session installs what it needs into its own venv, pinning torch through
``constraints/torch.txt`` (an unpinned torch pulls a multi-GB CUDA build).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "conformance"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
CONSTRAINTS = ("-c", "constraints/torch.txt")
# expecttest: torch.testing._internal (tpbcast.fixtures.torch builds on it) imports it.
TEST_DEPS = ("pytest>=8.4", "pytest-xdist>=3.6", "numpy>=1.26", "coverage>=7.10", "expecttest")


def _install_project(session: nox.Session, *extra: str, torch: bool = True) -> None:
    deps = [*TEST_DEPS, *extra]
    if torch:
        deps.append("torch")
    session.install(*CONSTRAINTS, *deps)
    session.install(*CONSTRAINTS, "-e", ".")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Self-tests of every layer (reference, harness, plugin, suite machinery)."""
    _install_project(session)
    session.run("pytest", "-n", "auto", "-p", "no:cacheprovider", "tests", *session.posargs)


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """Judge an implementation (default: the reference); reports in reports/conformance/."""
    _install_project(session)
    session.run("python", "-m", "tpbcast.conformance", *session.posargs)


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """The suite's fuzz tests (conformance/tests/test_fuzz.py) in their long profile: at
    least 5,000 cases each, a rogue peer and a rogue root, on 2 workers; reports in
    reports/fuzz/ (summary.jsonl: cases, seconds, seed, load per test), failing cases kept
    in .hypothesis/tpbcast-fuzz (replay: conformance/tests/README.md).  Arguments go to
    ``python -m tpbcast.conformance`` (``--tpbcast-impl``, ...);
    ``TPBCAST_FUZZ_EXAMPLES=N`` changes the number of cases."""
    _install_project(session)
    session.run(
        "python",
        "-m",
        "tpbcast.conformance",
        "-n",
        "2",
        "--report-dir",
        "reports/fuzz",
        *session.posargs,
        "--",
        "-k",
        "test_fuzz",
        env={"TPBCAST_FUZZ_PROFILE": "long", "TPBCAST_FUZZ_SUMMARY": "reports/fuzz/summary.jsonl"},
    )


NATIVE_IMPL = "tpbcast.conformance.adapters.native.adapter:make"
NATIVE_EXPECTATIONS = "conformance/adapters/native/expectations.toml"


@nox.session(python=PYTHON)
def native(session: nox.Session) -> None:
    """Judge the native C example against its expectations file: only news fails (a FAIL it
    does not list, or a listed clause that passes now); reports in reports/native/."""
    _install_project(session)
    session.run(
        "python",
        "-m",
        "tpbcast.conformance",
        f"--tpbcast-impl={NATIVE_IMPL}",
        f"--expectations={NATIVE_EXPECTATIONS}",
        "--report-dir=reports/native",
        *session.posargs,
    )


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """The mutant kill matrix: the suite against each tests/mutants/m_*.py, the reference and
    the native example; reports in reports/mutants/ (``-- --fast``: CI's quick subset)."""
    _install_project(session)
    session.run("python", "tools/mutants.py", *session.posargs)


# vLLM is judged as installed, without its dependencies (they pull CUDA torch and a web
# stack): `shm_broadcast` imports only these four besides torch (checked on 0.33.0:
# `python -c "from vllm.distributed.device_communicators import shm_broadcast"`).
VLLM = "vllm==0.33.0"
VLLM_IMPORT_DEPS = ("psutil", "pyzmq", "urllib3", "regex")
# SGLang likewise, --no-deps: its broadcast code (sglang.srt.utils.common and
# shm_broadcast) imports these ten besides torch (the project's `sglang` extra lists them;
# checked on 0.5.23); tpbcast.conformance.adapters.sglang shims the rest (sglang.lang's
# front end, triton) without touching the installed package.
SGLANG = "sglang==0.5.23"


@nox.session(python=PYTHON)
def ecosystem(session: nox.Session) -> None:
    """Every real implementation whose engine is installed, side by side: the reference, the
    native C example (ctypes and exec:), vLLM's shm MessageQueue and SGLang's
    broadcast_pyobj and MessageQueue (both installed here with --no-deps, torch pinned to
    the CPU build), torch's own gloo broadcast and the shm ring of tests/mutants/, each
    against its expectations file; reports in reports/ecosystem/ (tools/ecosystem.py;
    ``-- --only vllm`` for one row, ``-- --render-only`` to rebuild the reports)."""
    _install_project(session)
    session.install(*CONSTRAINTS, *VLLM_IMPORT_DEPS)
    session.install("--no-deps", VLLM)
    session.install(*CONSTRAINTS, "-e", ".[sglang]")
    session.install("--no-deps", SGLANG)
    session.run("python", "tools/ecosystem.py", *session.posargs)


MUTMUT = "mutmut==3.8.1"


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation score of reference_impl with mutmut: machine-made one-token mutants of the
    reference's own source, each judged by the reference's self-tests (tests/reference,
    tests/dispatch); summary and survivor triage in reports/mutation/ (tools/mutation.py).
    Not ``mutants``: that one judges hand-written one-defect implementations
    (tests/mutants/) with the conformance suite, i.e. it scores the suite; this one scores
    the reference's self-tests.  Without options: the measured plan (small modules whole,
    a seeded sample of the others; mutants judged before keep their verdict).  Options
    after ``--``: ``--full``, ``--module _wire``, ``--sample N``, ``--report-only``."""
    _install_project(session, MUTMUT)
    session.run("python", "tools/mutation.py", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict and the import-linter layer contract."""
    # The type checker sees the same optional dependencies (torch, coverage) as the tests.
    session.install(
        *CONSTRAINTS, "ruff", "mypy", "import-linter", "types-psutil", *TEST_DEPS, "torch"
    )
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # mypy and import-linter see the folders under their tpbcast.* names through a
    # symlink tree (neither follows setuptools' editable import hook).
    session.run("python", "tools/typecheck.py")
    session.run("python", "tools/typecheck.py", "--imports")


COVERAGE_DIR = "reports/coverage"
# Line+branch floor per layer that must keep it (the suite and plugin layers are measured
# and reported, not held to it).
COVERAGE_FLOORS = {"reference_impl": 90, "harness": 90}


@nox.session(python=PYTHON)
def coverage(session: nox.Session) -> None:
    """Self-tests under coverage, counting lines executed in forked ranks; terminal, HTML
    and XML reports in reports/coverage/; fails under 90 % line+branch for reference_impl
    or harness."""
    _install_project(session)
    session.run("coverage", "erase")
    session.run(
        "coverage",
        "run",
        "-m",
        "pytest",
        "-n",
        "auto",
        "-p",
        "no:cacheprovider",
        "tests",
        *session.posargs,
    )
    # The suite against the reference counts too: it is what exercises the suite's own
    # tests and the reference's fault paths through forked ranks.
    session.run(
        "coverage",
        "run",
        "-m",
        "tpbcast.conformance",
        "--report-dir",
        "reports/coverage-conformance",
    )
    # Ranks (forked, saved by the harness) and subprocesses each wrote a data file;
    # combine maps installed copies of the package back onto the project's files.
    session.run("coverage", "combine")
    session.run("coverage", "html", "-d", f"{COVERAGE_DIR}/html")  # makes COVERAGE_DIR
    session.run("coverage", "xml", "-o", f"{COVERAGE_DIR}/coverage.xml")
    with open(f"{COVERAGE_DIR}/report.txt", "w") as text:
        session.run("coverage", "report", "--no-skip-covered", stdout=text)
    session.run("coverage", "report")
    for layer, floor in COVERAGE_FLOORS.items():
        session.log(f"{layer}: line+branch coverage must be at least {floor} %")
        session.run("coverage", "report", f"--include={layer}/*", f"--fail-under={floor}")


@nox.session(python=PYTHON)
def spec(session: nox.Session) -> None:
    """Regenerate conformance/SPEC.md from conformance/clauses.toml."""
    session.install("-e", ".")
    session.run("python", "-m", "tpbcast.conformance.spec", "--write")


# torch_suite runs torch's own _DistTestBase slice on the harness and on torch's spawn
# runner (its parity test takes a few minutes: the spawn side).
EXAMPLES = ("examples/ring_allreduce", "examples/dist_mean", "examples/torch_suite")
# pytest-forked 1.7.5 marshals each TestReport.__dict__ from the forked child; pytest 9.2.0
# made TestReport._id a NodeId object, which marshal refuses, so under 9.2 every --forked
# test fails as "EXITED with status 3".  9.1.1 is the newest pytest it works with.  Drop the
# pin once pytest-forked ships a fix: tests/fixtures/test_plugin_report.py probes for the
# incompatibility and stops skipping its --forked case by itself.
FORKED_PYTEST = "pytest==9.1.1"


@nox.session(python=PYTHON, reuse_venv=False)
def examples(session: nox.Session) -> None:
    """Each example project's own tests, from a fresh venv with tpbcast installed from here."""
    session.install(*CONSTRAINTS, ".", "pytest>=8.4")
    for example in EXAMPLES:
        session.install(*CONSTRAINTS, example)
        with session.chdir(example):
            session.run("pytest", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON)
def forked(session: nox.Session) -> None:
    """The plugin under pytest --forked, on the newest pytest that pytest-forked supports."""
    session.install(
        *CONSTRAINTS, FORKED_PYTEST, "pytest-forked", "pytest-xdist>=3.6", "numpy>=1.26"
    )
    session.install(*CONSTRAINTS, "-e", ".", *EXAMPLES)
    session.run("pytest", "-p", "no:cacheprovider", "tests/fixtures", *session.posargs)
    # torch_suite's parity test runs torch's spawn runner over the whole slice (minutes):
    # `nox -s examples` does that; here three tests of it show --forked works.
    parity = {"TORCHSUITE_PARITY_TESTS": "test_get_rank,test_broadcast,test_broadcast_group"}
    for example in EXAMPLES:
        with session.chdir(example):
            session.run(
                "pytest", "-p", "no:cacheprovider", "--forked", *session.posargs, env=parity
            )


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """Soak an implementation through the adapter (default: the reference): 10,000 checksummed
    broadcasts at TP 4 with resets and re-inits, fd/RSS per rank first vs last thousand, RSS
    at TP 8; reports in reports/soak/ (``-- --broadcasts 2000`` for a shorter run,
    ``-- --impl exec:...`` for another implementation)."""
    _install_project(session, "matplotlib", torch=False)
    session.run("python", "benchmarks/soak.py", *session.posargs)


HARNESS_QUICK = ("--rounds", "1", "--tests", "5", "--mptc-tests", "1", "--reps", "30")
HARNESS_QUICK += ("--conformance-rounds", "1")
SOAK_QUICK = ("--broadcasts", "1000", "--window", "100")
SUITE_QUICK = ("--rounds", "1", "--reps", "5", "--tests")
SUITE_QUICK += ("test_get_rank,test_broadcast,test_broadcast_group",)
CONTINUOUS_QUICK = ("--tests", "test_all_reduce_sum,test_broadcast_root0,test_gather")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Ratio benchmarks (never timed assertions): UDS vs fallback path, broadcast vs its
    baselines, harness cost per test and over a bare fork, torch's own distributed tests
    on the harness vs torch's spawn runner, the soak's fd/RSS; one summary,
    reports/bench/bench.md.  ``-- quick``: a smoke run of each, written under
    .nox/bench/tmp/quick/ so the committed reports stay as they are."""
    # matplotlib: the PNG plots in reports/bench/; expecttest: torch's MultiProcessTestCase
    # (torch.testing._internal.common_distributed), the baseline of bench_harness_cost.py.
    _install_project(session, "matplotlib", "expecttest")
    # `quick` selects the smoke runs of the benchmarks below; other posargs go to this one.
    quick = "quick" in session.posargs
    rest = [arg for arg in session.posargs if arg != "quick"]
    reports = f"{session.create_tmp()}/quick" if quick else "reports"
    out = ("--out", f"{reports}/bench")
    # broadcast_cpu on the UDS path vs the gloo fallback (<reports>/bench/dispatch.md).
    session.run("python", "benchmarks/bench_dispatch.py", *out, *rest)
    # Broadcast latency/throughput vs size, reference vs its baselines (~1 min on 2 idle
    # cores; `quick`: 4 sizes, a tenth of the rounds); <reports>/bench/broadcast*.
    session.run("python", "benchmarks/bench_broadcast.py", *out, *(["--quick"] if quick else []))
    # Per-test cost of a multi-rank test (tpbcast_run vs torch's MultiProcessTestCase and
    # MultiProcContinuousTest), run_ranks vs a bare fork, fork cost vs parent size, the
    # conformance run serial vs -n 2 (~8 min on 2 idle cores; `quick`: one small round);
    # <reports>/bench/harness*.
    harness_quick = HARNESS_QUICK if quick else ()
    session.run("python", "benchmarks/bench_harness_cost.py", *out, *harness_quick)
    # torch's own _DistTestBase slice (examples/torch_suite, 55 tests) on torch's spawn
    # runner vs the harness, per test and per session with the load, and the empty-group
    # floor (~30 min on 2 cores: the spawn side; `quick`: 3 tests, one round);
    # <reports>/bench/torch_suite*.
    session.run("python", "benchmarks/bench_torch_suite.py", *out, *(SUITE_QUICK if quick else ()))
    # Warm groups: tpbcast's MultiProcContinuousTest vs torch's and vs the spawn runner on
    # 30+ gloo tests, one failing test on both continuous bases (torch's poison pill),
    # and the torch_suite slice on warm groups vs spawn (~15 min on 2 cores: the spawn
    # sides; `quick`: 3 tests, no slice); <reports>/bench/continuous*.
    session.run(
        "python",
        "benchmarks/bench_continuous.py",
        *out,
        *(CONTINUOUS_QUICK if quick else ("--slice",)),
    )
    # fd count and RSS per rank over 10,000 broadcasts (first vs last thousand) and RSS per
    # rank at TP 8: the soak's report (<reports>/soak/, also `nox -s soak`; ~15 s; `quick`:
    # 1,000 broadcasts).
    soak = ("--seed", "20261201", "--report-dir", f"{reports}/soak")
    session.run("python", "benchmarks/soak.py", *soak, *(SOAK_QUICK if quick else ()))
    # <reports>/bench/bench.md = the section files the benchmarks wrote (broadcast.md, ...),
    # then <reports>/soak/soak.md.
    session.run("python", "benchmarks/bench_summary.py", "--dir", f"{reports}/bench")
