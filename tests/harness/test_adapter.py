"""Self-tests of the adapter contract loader, with throwaway factory modules."""

from __future__ import annotations

import ast
import pickle
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tpbcast.harness import adapter as a

GOOD = """
class Bcast:
    capabilities = {caps}
    {extra}
    def initialize(self, rank, world_size, base_path): self.args = (rank, world_size, base_path)
    def broadcast(self, buffer, root=0): return None
    def reset(self): pass
    def is_initialized(self): return hasattr(self, "args")

def make():
    return Bcast()
"""


@pytest.fixture
def write_module(tmp_path, monkeypatch):
    """Write a uniquely named module into tmp_path (on sys.path); return its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"tpb_adapter_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


def good(caps: str = "()", extra: str = "") -> str:
    return GOOD.format(caps=caps, extra=extra)


def test_default_spec_is_a_string_and_never_imported():
    assert a.DEFAULT_IMPLEMENTATION == "tpbcast.reference_impl.conformance_adapter:make"
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for module in Path(a.__file__).parent.glob("*.py")  # the whole harness
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and "reference_impl" in name for name in imported)


def test_capability_names_match_the_design():
    assert {c.value for c in a.Capability} == {
        "deadlines",
        "generation",
        "abstract_namespace",
        "tensors",
        "multi_buffer",
        "peer_credentials",
        "secure_dir",
        "dispatch",
        "error_details",
        "base_path",
        "endpoint",
        "abort",
    }
    assert a.Capability.TENSORS == "tensors"  # a StrEnum compares as its name
    assert a.REQUIRED_MEMBERS == ("initialize", "broadcast", "reset", "is_initialized")


def test_load_a_minimal_implementation(write_module):
    name = write_module(good())
    impl = a.load_implementation(f"{name}:make")
    assert impl.spec == f"{name}:make"
    assert impl.name == name  # default: the module name
    assert impl.version == "unknown"  # not an installed distribution
    assert impl.capabilities == frozenset()
    one, two = impl.create(), impl.create()
    assert one is not two  # a fresh object per call
    assert isinstance(one, a.Broadcaster)
    one.initialize(1, 2, "/tmp/x")
    assert one.is_initialized() and not two.is_initialized()


def test_name_version_and_capabilities_are_read_from_the_object(write_module):
    extra = 'name = "native"\n    version = "1.2"\n    def set_deadlines(self, **kw): pass'
    name = write_module(good(caps='["deadlines", "tensors"]', extra=extra))
    impl = a.load_implementation(f"{name}:make")
    assert (impl.name, impl.version) == ("native", "1.2")
    assert impl.capabilities == {"deadlines", "tensors"}
    assert impl.supports("deadlines") and impl.supports(a.Capability.TENSORS)
    assert not impl.supports("generation")
    impl.require("deadlines")
    with pytest.raises(a.CapabilityMissing) as info:
        impl.require("generation")
    assert info.value.capability == "generation"
    assert "native 1.2" in str(info.value) and "UNSUPPORTED" in str(info.value)
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.capability, back.implementation) == ("generation", "native 1.2")


def test_supports_rejects_a_typo_instead_of_saying_unsupported(write_module):
    impl = a.load_implementation(f"{write_module(good())}:make")
    with pytest.raises(a.UnknownCapabilityError, match="did you mean 'generation'"):
        impl.supports("generaton")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "is not 'module:callable'"),
        (":make", "is not 'module:callable'"),
        ("mod:", "is not 'module:callable'"),
        ("a:b:c", "is not 'module:callable'"),
        ("tpb_surely_missing_mod:make", "module 'tpb_surely_missing_mod' not found"),
        ("tpb_surely_missing_pkg.sub:make", "module 'tpb_surely_missing_pkg.sub' not found"),
    ],
)
def test_bad_specs_teach(spec, message):
    with pytest.raises(a.ImplementationLoadError, match=message) as info:
        a.load_implementation(spec)
    assert isinstance(info.value, ImportError)


def test_module_with_a_missing_dependency(write_module):
    name = write_module("import tpb_dependency_that_is_not_there\n")
    with pytest.raises(a.ImplementationLoadError, match="was found but imports") as info:
        a.load_implementation(f"{name}:make")
    assert "tpb_dependency_that_is_not_there" in str(info.value)


def test_module_that_raises_on_import(write_module):
    name = write_module("raise RuntimeError('no GPU here')\n")
    with pytest.raises(a.ImplementationLoadError, match="RuntimeError: no GPU here"):
        a.load_implementation(f"{name}:make")


def test_missing_attribute_suggests_a_close_name(write_module):
    name = write_module(good())
    with pytest.raises(
        a.ImplementationLoadError, match="has no attribute 'mkae' - did you mean 'make'"
    ):
        a.load_implementation(f"{name}:mkae")


def test_dotted_attribute_path(write_module):
    name = write_module(good() + "\nclass Factories:\n    make = staticmethod(make)\n")
    assert a.load_implementation(f"{name}:Factories.make").create().is_initialized() is False


def test_not_callable(write_module):
    name = write_module("make = 42\n")
    with pytest.raises(a.ImplementationLoadError, match="'make' is a int, not a factory"):
        a.load_implementation(f"{name}:make")


def test_factory_that_raises(write_module):
    name = write_module("def make():\n    raise OSError('no socket dir')\n")
    with pytest.raises(a.ImplementationLoadError, match="raised OSError: no socket dir"):
        a.load_implementation(f"{name}:make")


def test_missing_members_are_all_listed(write_module):
    name = write_module("class B:\n    def reset(self): pass\n\ndef make():\n    return B()\n")
    with pytest.raises(a.ImplementationLoadError) as info:
        a.load_implementation(f"{name}:make")
    text = str(info.value)
    assert "returned a B missing:" in text
    for member in ("initialize", "broadcast", "is_initialized"):
        assert f"  - {member}()  (required)" in text
    assert "  - reset()" not in text


def test_a_declared_capability_must_bring_its_members(write_module):
    name = write_module(good(caps='("generation", "deadlines")'))
    with pytest.raises(a.ImplementationLoadError) as info:
        a.load_implementation(f"{name}:make")
    assert "set_deadlines (promised by 'deadlines')" in str(info.value)
    assert "generation (promised by 'generation')" in str(info.value)


def test_unknown_declared_capability(write_module):
    name = write_module(good(caps='["multibuffer"]'))
    with pytest.raises(a.UnknownCapabilityError, match="did you mean 'multi_buffer'"):
        a.load_implementation(f"{name}:make")


def test_create_rechecks_the_object(write_module):
    source = good() + "\nCALLS = []\ndef flaky():\n    CALLS.append(1)\n"
    source += "    return Bcast() if len(CALLS) == 1 else object()\n"
    name = write_module(source)
    impl = a.load_implementation(f"{name}:flaky")
    with pytest.raises(a.ImplementationLoadError, match="missing"):
        impl.create()


def test_parse_capabilities():
    assert a.parse_capabilities("deadlines, tensors  generation") == {
        "deadlines",
        "tensors",
        "generation",
    }
    assert a.parse_capabilities([a.Capability.DISPATCH]) == {"dispatch"}
    assert a.parse_capabilities("") == frozenset()
    with pytest.raises(a.UnknownCapabilityError, match=r"'secure-dir' in --caps - did you mean"):
        a.parse_capabilities("secure-dir", source="--caps")
    with pytest.raises(a.UnknownCapabilityError, match="known: abort, abstract_namespace"):
        a.parse_capabilities(["zzz"])
    with pytest.raises(a.UnknownCapabilityError, match="iterable of names, got int"):
        a.parse_capabilities(3)  # type: ignore[arg-type]


def test_implementation_is_frozen(write_module):
    impl = a.load_implementation(f"{write_module(good())}:make")
    with pytest.raises(AttributeError):
        impl.name = "x"  # type: ignore[misc]
