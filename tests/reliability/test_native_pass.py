"""tests/e2e/builds.py decides which tests the native pass of this suite (and of tests/e2e) runs.
Checked here on functions made for it: a config of envoy/ named in a helper a test calls, in a
fixture, in a module constant or in a parameter is found; a test naming no config, or only
configs without the sluice filter, is not a filter test; and the wasm pass's check stops an Envoy
that loads the filter, started by a test the native pass skips, before it runs. No process is
started."""

import types

import pytest

import builds
import stack

CONSTANT = "e2e_lease.yaml"


def helper_naming_a_filter_config():
    return "e2e.yaml"


def helper_calling_a_helper():
    return helper_naming_a_filter_config()


def helper_naming_rls_only():
    return "rls.yaml"


class Rig:
    def start(self):
        return CONSTANT


def fixture_naming_a_filter_config():
    return "e2e_grpc.yaml"


def uses_nothing():
    return 1 + 1


def item(function, fixtures=(), params=None, path=None):
    """A stand-in for a pytest item: what builds.py reads of one."""
    defs = {f.__name__: [types.SimpleNamespace(func=f)] for f in fixtures}
    fake = types.SimpleNamespace(function=function, _fixtureinfo=types.SimpleNamespace(name2fixturedefs=defs),
                                 stash=pytest.Stash(), nodeid=f"fake::{function.__name__}",
                                 path=path or stack.ROOT / "tests" / "reliability" / "fake.py",
                                 originalname=function.__name__, markers=[])
    fake.add_marker = fake.markers.append
    if params is not None:
        fake.callspec = types.SimpleNamespace(params=params)
    return fake


def found(fake):
    return builds.verdicts(builds.reachable_sources(fake))


def test_configs_are_found_through_helpers_fixtures_constants_classes_and_parameters():
    assert found(item(helper_calling_a_helper)) == {True}
    assert found(item(uses_nothing, fixtures=[fixture_naming_a_filter_config])) == {True}
    assert found(item(lambda: Rig().start())) == {True}
    assert found(item(uses_nothing, params={"config": "e2e_cost.yaml"})) == {True}


def test_no_config_or_only_rls_configs_is_not_a_filter_test():
    assert found(item(uses_nothing)) == set()
    assert found(item(helper_naming_rls_only)) == {False}
    assert found(item(lambda: (helper_naming_rls_only(), helper_naming_a_filter_config()))) == {True, False}


def test_a_test_the_native_pass_skips_may_not_start_an_envoy_with_the_filter(tmp_path):
    plugin = builds.NativePass(tmp_path, lambda it: False)
    try:
        skipped = item(uses_nothing, path=tmp_path / "test_x.py")
        plugin.pytest_collection_modifyitems(None, [skipped])
        if stack.FILTER_BUILD == "native":
            assert [m.kwargs["reason"] for m in skipped.markers] == ["loads no sluice filter: runs in the wasm pass only"]
            return
        assert skipped.markers == []  # runs in the wasm pass, checked there
        envoy = stack.Envoy(tmp_path, "e2e.yaml", {"BACKEND_PORT": 1, "UPSTREAM_PORT": 2, "TIMEOUT_MS": 3},
                            ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
        plugin.current = skipped
        with pytest.raises(RuntimeError, match="native pass would skip it"):
            envoy.start()
        assert envoy.proc is None, "the check must stop the Envoy before it starts"
        # A test the native pass runs may start it.
        plugin.current = item(helper_naming_a_filter_config, path=tmp_path / "test_y.py")
        plugin._launching(envoy)
    finally:
        plugin.current = None
        stack.filter_launch_hooks.remove(plugin._launching)
