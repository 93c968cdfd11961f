"""A module built for one dynamic-module ABI, loaded into an Envoy with another (issue 33): every
module build (target/release/abi-<ABI>/) in every Envoy of the matrix (.envoy/<minor>/), through
`envoy --mode validate` of envoy/demo_native.yaml (which loads the module and runs its
`on_program_init`). Either Envoy loads it (its own ABI, or a warn-only Envoy whose callbacks are
all there: Envoy's "deprecated" line names the module's ABI), or it is refused with the module's
line naming the ABI mismatch: never a crash, never a silent load."""

import importlib.util
import re
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("envoy_matrix_probe", ROOT / "scripts" / "envoy-matrix-probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

ENVOYS = sorted((ROOT / ".envoy").glob("*/bin/envoy"), key=lambda p: [int(x) for x in p.parent.parent.name.split(".")])
MODULES = sorted(d for d in (ROOT / "target" / "release").glob("abi-*") if (d / "libsluice_filter_native.so").is_file())


def test_the_matrix_and_the_module_builds_are_there():
    assert len(ENVOYS) >= 2, "no Envoy matrix: SLUICE_ENVOY_MATRIX=1 bash scripts/install/35-envoy-matrix.sh"
    assert {d.name for d in MODULES} >= {"abi-v0.1.0", "abi-v0.2.0"}, "run scripts/build-filter.sh"


def load(envoy, module_dir):
    with tempfile.TemporaryDirectory(prefix="sluice-abi-") as d:
        config = probe.render("demo_native.yaml", Path(d))
        env = dict(probe.os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=str(module_dir))
        return probe.run([str(envoy), "--mode", "validate", "-c", str(config), "-l", "info",
                          "--disable-hot-restart"], env=env)


@pytest.mark.parametrize("module_dir", MODULES, ids=[d.name for d in MODULES])
@pytest.mark.parametrize("envoy", ENVOYS, ids=[e.parent.parent.name for e in ENVOYS])
def test_a_module_loads_as_its_abi_or_is_refused_naming_the_mismatch(envoy, module_dir):
    abi = module_dir.name.removeprefix("abi-")
    code, out = load(envoy, module_dir)
    assert code is not None, f"Envoy hung validating the config:\n{out[-2000:]}"
    assert code >= 0, f"Envoy died of signal {-code}:\n{out[-2000:]}"
    assert "Caught Segmentation" not in out and "Backtrace" not in out, out[-2000:]
    if code == 0:
        assert re.search(r"configuration '.*' OK", out), out[-2000:]
        assert (f"Dynamic module ABI version {abi} matched" in out
                or f"Dynamic module ABI version {abi} is deprecated" in out), out[-2000:]
        assert f"(ABI {abi})" in out, "the module's own configured line names its ABI"
    else:
        assert f"sluice: ABI mismatch: this module is built for dynamic-module ABI {abi}" in out, out[-2000:]
        # Envoy's own line: "Failed to initialize dynamic module" (1.36, 1.38 on); 1.37 words
        # every load failure as "not found in any search path", after the module's line.
        assert "Failed to load dynamic module" in out, out[-2000:]


@pytest.mark.parametrize("minor,abi", [("1.36", "v0.2.0"), ("1.37", "v0.1.0"), ("1.38", "v0.2.0"), ("1.39", "v0.2.0")])
def test_known_mismatches_are_refused(minor, abi):
    """The cases the matrix must refuse (so the test above cannot pass by loading everything); 1.39
    has every callback the 1.40 build calls, and is told apart by one 1.40 added."""
    envoy = ROOT / ".envoy" / minor / "bin" / "envoy"
    if not envoy.exists():
        pytest.fail(f"Envoy {minor} is not installed in .envoy/")
    code, out = load(envoy, ROOT / "target" / "release" / f"abi-{abi}")
    assert code == 1, out[-2000:]
    assert f"sluice: ABI mismatch: this module is built for dynamic-module ABI {abi}" in out


def test_an_older_module_loads_on_the_next_envoy_with_its_warning():
    """Envoy's ABI policy: v0.1.y works with v0.2.x. The 1.38/1.39 build on 1.40 loads, and Envoy
    says it is deprecated."""
    code, out = load(ROOT / ".envoy" / "1.40" / "bin" / "envoy", ROOT / "target" / "release" / "abi-v0.1.0")
    assert code == 0, out[-2000:]
    assert "Dynamic module ABI version v0.1.0 is deprecated" in out
