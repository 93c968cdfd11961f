#!/usr/bin/env python3
"""The Envoy version matrix (issue 33): the smoke suite (`tests/e2e`, `-m smoke`: one test of each
kind of behaviour) on every Envoy in .envoy/<minor>/ (scripts/install/35-envoy-matrix.sh) but the
one the full suite runs on (.venv's), with every build that Envoy can load, then the README's
compatibility table written from what ran.

Per Envoy, probed from the binary (scripts/envoy-matrix-probe.py), never from its version number:
- the wasm build where it has the V8 runtime; where it has none, a pass that loads no sluice filter
  (`SLUICE_FILTER_BUILD=none`) still runs the RLS tests;
- the native build where a module was built for its dynamic-module ABI
  (target/release/abi-<ABI>/, scripts/build-filter.sh); where none was, the default module's
  refusal is recorded (tests/matrix/test_abi_refusal.py asserts it).

  python3 tests/matrix/run.py                # run, write target/matrix/results.jsonl, check README
  python3 tests/matrix/run.py --write-readme # the same, then rewrite the README's table
  python3 tests/matrix/run.py --table-only --write-readme  # from the last results, no run

Exits non-zero when a smoke test failed or the README's table differs from what ran."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "target" / "matrix" / "results.jsonl"
FACTS = ROOT / "target" / "matrix" / "facts.json"
README = ROOT / "README.md"
START, END = "<!-- envoy-matrix:start -->", "<!-- envoy-matrix:end -->"
PYTEST = ROOT / ".venv" / "bin" / "pytest"
REFERENCE_ENVOY = ROOT / ".venv" / "bin" / "envoy"
MODULES = ROOT / "target" / "release"
V8 = "envoy.wasm.runtime.v8"


def load_probe():
    spec = importlib.util.spec_from_file_location("envoy_matrix_probe", ROOT / "scripts" / "envoy-matrix-probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


def version_of(envoy):
    out = subprocess.run([str(envoy), "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"version: [0-9a-f]+/([0-9.]+)/", out)
    return m.group(1) if m else None


def envoys():
    found = sorted((ROOT / ".envoy").glob("*/bin/envoy"),
                   key=lambda p: [int(x) for x in p.parent.parent.name.split(".")])
    if not found:
        raise SystemExit("sluice matrix: no Envoy in .envoy/*/bin/envoy; run "
                         "SLUICE_ENVOY_MATRIX=1 bash scripts/install/35-envoy-matrix.sh")
    return found


def modules():
    """{ABI string: directory holding that build's libsluice_filter_native.so}."""
    return {d.name.removeprefix("abi-"): d for d in sorted(MODULES.glob("abi-*"))
            if (d / "libsluice_filter_native.so").is_file()}


def facts_of(envoy, probe, probe_dir, tmp):
    data, texts = probe.strings_of(envoy.resolve())
    return {"envoy": str(envoy), "minor": envoy.parent.parent.name, "version": version_of(envoy),
            "wasm_runtimes": probe.wasm_runtimes(envoy, tmp),
            "abi": probe.abi(envoy, data, texts, probe_dir, tmp)["version"]}


def smoke_files():
    return sorted(str(p) for p in (ROOT / "tests" / "e2e").glob("test_*.py")
                  if "@pytest.mark.smoke" in p.read_text())


def run_pass(fact, build, module_dir, results):
    env = dict(os.environ, SLUICE_ENVOY=fact["envoy"], SLUICE_FILTER_BUILD=build,
               SLUICE_MATRIX_RESULTS=str(results))
    if module_dir is not None:
        env["SLUICE_FILTER_NATIVE_DIR"] = str(module_dir)
    label = f"Envoy {fact['version']} {build}" + (f" (module ABI {module_dir.name[4:]})" if module_dir else "")
    print(f"== matrix: {label}", flush=True)
    t0 = time.monotonic()
    code = subprocess.run([str(PYTEST), "-q", "-p", "no:cacheprovider", "-m", "smoke", *smoke_files()],
                          env=env, cwd=ROOT).returncode
    print(f"== matrix: {label}: exit {code} in {time.monotonic() - t0:.0f} s", flush=True)
    # 5: no test ran (all skipped or deselected) is fine for a pass that skips by design.
    return code in (0, 5)


def run(facts, results):
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("")
    built = modules()
    reference = version_of(REFERENCE_ENVOY)
    ok = True
    for fact in facts:
        if fact["version"] == reference:
            continue
        has_v8 = V8 in fact["wasm_runtimes"]
        ok &= run_pass(fact, "wasm" if has_v8 else "none", None, results)
        if fact["abi"] in built:
            ok &= run_pass(fact, "native", built[fact["abi"]], results)
    return ok


def cell(rows, kind, build):
    picked = [r for r in rows if r["kind"] == kind and (build is None or r["build"] == build)]
    ran = [r for r in picked if r["outcome"] != "skipped"]
    if not ran:
        return None
    failed = [r for r in ran if r["outcome"] == "failed"]
    if failed:
        return f"**FAILED** {len(failed)} of {len(ran)} smoke tests"
    text = f"tested: {len(ran)} smoke tests pass"
    # Skips other than by design of the pass (a filter test in the RLS-only pass, say): named.
    why = sorted({r["reason"].removeprefix("Skipped: ") for r in picked if r["outcome"] == "skipped"
                  and "configuration-level counters" in r["reason"]})
    skipped = [r for r in picked if r["outcome"] == "skipped" and r["reason"].removeprefix("Skipped: ") in why]
    if skipped:
        text += f" ({len(skipped)} skipped: {'; '.join(why)})"
    return text


def table(facts, rows):
    reference = version_of(REFERENCE_ENVOY)
    built = modules()
    lines = ["| Envoy | wasm filter | native module (dynamic module) | Envoy's ratelimit filter → sluice RLS |",
             "|---|---|---|---|"]
    for fact in facts:
        version = fact["version"]
        if version == reference:
            full = "tested: the full suite (tests/suites/20-envoy.sh)"
            lines.append(f"| {version} | {full} | {full}; module ABI `{fact['abi']}` | {full} |")
            continue
        mine = [r for r in rows if r["envoy"] == fact["envoy"]]
        if V8 in fact["wasm_runtimes"]:
            wasm = cell(mine, "filter", "wasm") or "not run"
        else:
            wasm = "no: this Envoy build has no V8 wasm runtime (only " + ", ".join(fact["wasm_runtimes"]) + ")"
        abi = fact["abi"]
        short = abi if len(abi) < 20 else abi[:12] + "…"
        if abi in built:
            native = (cell(mine, "filter", "native") or "not run") + f"; module ABI `{abi}`"
        else:
            native = (f"no: ABI `{short}` has no module build (its callbacks differ from 1.38's on); "
                      "the other builds are refused at load, naming the ABI mismatch")
        rls = cell(mine, "rls", None) or "not run"
        lines.append(f"| {version} | {wasm} | {native} | {rls} |")
    return "\n".join(lines)


def readme_with(text, table_text):
    if START not in text or END not in text:
        raise SystemExit(f"sluice matrix: README.md lacks the markers {START} / {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table_text}\n{END}{tail}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-readme", action="store_true", help="rewrite the README's table from what ran")
    ap.add_argument("--table-only", action="store_true", help="no run: the table from the last results")
    args = ap.parse_args()
    if args.table_only:
        facts = json.loads(FACTS.read_text())
        ok = True
    else:
        probe = load_probe()
        with tempfile.TemporaryDirectory(prefix="sluice-matrix-") as d:
            tmp = Path(d)
            probe_dir = probe.build_probe(tmp)
            facts = [facts_of(e, probe, probe_dir, tmp) for e in envoys()]
        FACTS.parent.mkdir(parents=True, exist_ok=True)
        FACTS.write_text(json.dumps(facts, indent=1))
        ok = run(facts, RESULTS)
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    table_text = table(facts, rows)
    print(table_text)
    text = README.read_text()
    wanted = readme_with(text, table_text)
    if args.write_readme:
        README.write_text(wanted)
    elif wanted != text:
        print("sluice matrix: README.md's compatibility table differs from what ran; rewrite it with "
              "python3 tests/matrix/run.py --table-only --write-readme", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
