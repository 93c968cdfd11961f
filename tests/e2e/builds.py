"""Which tests a suite's native pass runs, and the check that keeps that choice honest. Shared by
tests/e2e/conftest.py and tests/reliability/conftest.py.

Those suites run twice: with the wasm filter, then with the dynamic module
(SLUICE_FILTER_BUILD=native, tests/e2e/stack.py: every Envoy is started by stack.Envoy, which
loads the build the variable names). The native pass only needs the tests whose Envoys load the
sluice filter; the rest (Envoy's own ratelimit filter in front of sluice's RLS, or no Envoy at
all: bad input, the security walk, Redis failover through the decision API) would only test the
same thing twice. Each suite decides per test, from source: the `envoy/` configs the test names
(quoted, e.g. "e2e.yaml") in the code it can reach, and whether any of them carries the filter's
block. Nothing is listed by hand, so a new test file needs no entry anywhere.

A choice made from source can be wrong (a config name built at run time, say). So the wasm pass
checks it: a test that the native pass would skip, yet starts an Envoy loading the sluice filter,
fails in the wasm pass at that Envoy's start, naming itself. A wrong choice is a red run, never a
native pass that silently tests less than it says."""

import functools
import inspect
import re
import sys
import types
from pathlib import Path

import pytest

import stack

_YAML_NAME = re.compile(r"""["']([A-Za-z0-9_.-]+\.yaml)["']""")
TESTS_DIR = Path(__file__).resolve().parents[1]
# Set on a test, in the wasm pass, that the native pass skips (see NativePass._launching); in the
# `none` pass, on every test that runs (none may load the filter).
_ONCE = pytest.StashKey[bool]()
# Whether a test loads the sluice filter (a filter test) or only Envoy's own filters (an RLS test):
# how tests/matrix/ sorts its results into the wasm, native and RLS columns.
FILTER_TEST = pytest.StashKey[bool]()


def _source(obj):
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=None)
def config_has_sluice(name):
    """True/False for a config of envoy/ with/without the filter's block; None: not a config there."""
    path = stack.ROOT / "envoy" / name
    if not path.is_file():
        return None
    return stack.SLUICE_BLOCK in path.read_text()


def verdicts(texts):
    """{True, False} subset: whether the envoy/ configs named in `texts` have the filter's block."""
    return {config_has_sluice(n) for t in texts for n in _YAML_NAME.findall(t)} - {None}


def fixture_sources(item):
    info = getattr(item, "_fixtureinfo", None)
    return [_source(d.func) for defs in (info.name2fixturedefs.values() if info is not None else ()) for d in defs]


def module_sources(item, helper_dir):
    """The test module's source and that of the modules of `helper_dir` it uses (imported whole or
    by name)."""
    module = item.module
    if module is None:
        return []
    seen = {module}
    for value in vars(module).values():
        other = value if inspect.ismodule(value) else sys.modules.get(getattr(value, "__module__", None) or "")
        if other is None or other in seen:
            continue
        path = getattr(other, "__file__", None)
        if path and Path(path).resolve().parent == helper_dir:
            seen.add(other)
    return [_source(m) for m in seen]


def _names(code):
    """Every global or attribute name a code object (and the functions nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _in_tests(obj):
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return bool(path) and Path(path).resolve().is_relative_to(TESTS_DIR)


def reachable_sources(item):
    """The source a test can run: its function and its fixtures' functions, then, followed through
    the names their code reads, every function and class defined under tests/ (in the test's
    module or a helper module such as rstack), module-level values (a config name in a constant),
    closures, and the test's parameters. Over-approximate by design: a name read is taken as a
    call."""
    info = getattr(item, "_fixtureinfo", None)
    todo = [item.function] + [d.func for defs in (info.name2fixturedefs.values() if info is not None else ())
                              for d in defs]
    texts = [repr(item.callspec.params)] if hasattr(item, "callspec") else []
    seen = set()
    while todo:
        obj = todo.pop()
        obj = getattr(obj, "__func__", obj)  # bound, static and class methods
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (str, list, tuple, dict, set, frozenset)):
            texts.append(repr(obj))
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not _in_tests(obj):
            continue
        texts.append(_source(obj))
        if inspect.isclass(obj):
            for klass in obj.__mro__:
                if _in_tests(klass):
                    todo.extend(vars(klass).values())
            continue
        func = inspect.unwrap(obj)
        todo.extend(cell.cell_contents for cell in (func.__closure__ or ()) if _filled(cell))
        names = _names(func.__code__)
        for name in names:
            value = func.__globals__.get(name)
            if inspect.ismodule(value):
                if _in_tests(value):
                    todo.extend(getattr(value, n) for n in names if hasattr(value, n))
            elif value is not None:
                todo.append(value)
    return texts


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


class NativePass:
    """A pytest plugin (registered by a suite's conftest for the tests under `root`): in the
    native pass, skips each test the suite's `runs_native(item)` says is not a test of the filter,
    and those named in `wasm_only` (file names) or `wasm_only_tests` (test names); in the wasm
    pass, fails a test that runs_native refused at the start of any Envoy of it that loads the
    sluice filter."""

    def __init__(self, root, runs_native, wasm_only=(), wasm_only_tests=()):
        self.root = Path(root).resolve()
        self.runs_native = runs_native
        self.wasm_only = set(wasm_only)
        self.wasm_only_tests = set(wasm_only_tests)
        self.current = None
        stack.filter_launch_hooks.append(self._launching)

    def pytest_report_header(self, config):
        return f"sluice filter build ({self.root.name}): {stack.FILTER_BUILD} ({stack.FILTER})"

    def pytest_collection_modifyitems(self, config, items):
        skip = pytest.mark.skip(reason="wasm build only (SLUICE_FILTER_BUILD=native)")
        once = pytest.mark.skip(reason="loads no sluice filter: runs in the wasm pass only")
        no_filter = pytest.mark.skip(reason="loads the sluice filter: this pass loads none (SLUICE_FILTER_BUILD=none)")
        for item in items:
            if not item.path.resolve().is_relative_to(self.root):
                continue
            filter_test = self.is_filter_test(item)
            item.stash[FILTER_TEST] = filter_test
            if stack.FILTER_BUILD == "none":
                if filter_test:
                    item.add_marker(no_filter)
                else:
                    item.stash[_ONCE] = True
            elif item.path.name in self.wasm_only or item.originalname in self.wasm_only_tests:
                if stack.FILTER_BUILD == "native":
                    item.add_marker(skip)
            elif not filter_test:
                if stack.FILTER_BUILD == "native":
                    item.add_marker(once)
                else:
                    item.stash[_ONCE] = True

    def is_filter_test(self, item):
        """Whether a test loads the sluice filter (the wasm-only files do; otherwise `runs_native`
        decides)."""
        return (item.path.name in self.wasm_only or item.originalname in self.wasm_only_tests
                or bool(self.runs_native(item)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.current = item
        try:
            return (yield)
        finally:
            self.current = None

    def _launching(self, envoy):
        item = self.current
        if item is not None and item.stash.get(_ONCE, False):
            if stack.FILTER_BUILD == "none":
                raise RuntimeError(f"{item.nodeid} starts an Envoy that loads the sluice filter ({envoy.template}) "
                                   "in a pass that loads none (SLUICE_FILTER_BUILD=none)")
            raise RuntimeError(
                f"{item.nodeid} starts an Envoy that loads the sluice filter ({envoy.template}), but the "
                "native pass would skip it: it names no envoy/ config with the filter in the code "
                "tests/e2e/builds.py can see. Name the config (quoted) in the test, a fixture, or a "
                "helper it calls.")
