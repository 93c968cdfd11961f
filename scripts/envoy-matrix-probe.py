#!/usr/bin/env python3
"""What each Envoy of the version matrix (.envoy/<minor>/, scripts/install/35-envoy-matrix.sh)
offers the sluice filter, probed from the binary itself, never from its version number:

- its version (`envoy --version`) and its wasm runtimes (the extension registry Envoy logs at
  start: `--mode init_only` on an empty config, line `envoy.wasm.runtime: ...`);
- its dynamic-module ABI: how the load check behaves (the log/error strings in the binary: a
  strict sha256 comparison, "ABI version mismatch: got ...", or a warn-only semver comparison,
  "Dynamic module ABI version {} is deprecated"), and the ABI string itself, confirmed by
  loading a throwaway C module (built here with cc) whose `envoy_dynamic_module_on_program_init`
  returns a chosen string: a strict Envoy names the string it expected, a warn-only one says
  "matched" for the right candidate (candidates: the binary's strings shaped like one);
- the callbacks it exports (`nm -D --defined-only`, `envoy_dynamic_module_callback_*`), the event
  hooks it may look up (its `envoy_dynamic_module_on_*` strings), and both compared with a
  reference Envoy (default 1.40, the one native/ is written for);
- against the native module (`nm -D` of libsluice_filter_native.so): the callbacks it imports that
  this Envoy lacks, and what Envoy says when a config loads it (`--mode validate`);
- whether the wasm filter validates (`--mode validate` on envoy/demo.yaml).

Light on CPU: one Envoy process at a time, validate/init_only modes only (no traffic). Prints a
table; `--json FILE` also writes every fact (`-` for stdout, then no table).

  python3 scripts/envoy-matrix-probe.py --json /tmp/envoy-matrix.json
  python3 scripts/envoy-matrix-probe.py --module /work/main/target/release/libsluice_filter_native.so
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHA256_OF_NOTHING = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
STRICT_CHECK = b"ABI version mismatch: got "
WARN_CHECK = b"Dynamic module ABI version {} is deprecated"
# A module that reports the ABI string in SLUICE_PROBE_ABI and nothing else: Envoy compares it at
# load, before it resolves any hook, so the config fails after the comparison has been logged.
PROBE_C = r"""
#include <stdlib.h>
const char* envoy_dynamic_module_on_program_init(void) {
  const char* v = getenv("SLUICE_PROBE_ABI");
  return v ? v : "sluice-probe";
}
"""
PROBE_CONFIG = """static_resources:
  listeners:
  - name: probe
    address: {socket_address: {address: 127.0.0.1, port_value: 1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: probe
          route_config: {virtual_hosts: [{name: all, domains: ["*"], routes: [{match: {prefix: "/"}, direct_response: {status: 200}}]}]}
          http_filters:
          - name: envoy.filters.http.dynamic_modules
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config: {name: MODULE}
              filter_name: probe
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
"""
# Ports for the rendered repo configs: validate mode binds nothing.
PORTS = {"ENVOY_LISTEN_PORT": "10000", "ENVOY_ADMIN_PORT": "9901", "SLUICE_GRPC_PORT": "8082",
         "UPSTREAM_PORT": "8090"}


def run(args, env=None, timeout=60):
    """(exit code, stdout+stderr) of a command; a timeout is exit code None."""
    try:
        out = subprocess.run(args, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    return out.returncode, out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")


def symbols(path, kind):
    """`nm -D` names of `path`: kind `defined` or `undefined`."""
    code, out = run(["nm", "-D", f"--{kind}-only", str(path)])
    if code != 0:
        raise SystemExit(f"sluice: nm -D {path} failed: {out.strip()}")
    return sorted({line.split()[-1] for line in out.splitlines() if line.split()})


def strings_of(path):
    """Printable runs of 6+ bytes in the binary (as `strings -n 6`)."""
    data = Path(path).read_bytes()
    return data, {m.decode() for m in re.findall(rb"[\x20-\x7e]{6,}", data)}


def log_lines(text, *needles):
    """The log lines holding any needle, without Envoy's timestamp/thread prefix."""
    keep = []
    for line in text.splitlines():
        if any(n in line for n in needles):
            keep.append(re.sub(r"^\[[^]]*\]\[\d+\]", "", line).strip())
    return keep


def validate(envoy, config, env=None):
    """Envoy's verdict on a config: ok, and the lines that say why (errors, ABI, sluice)."""
    code, out = run([envoy, "--mode", "validate", "-c", str(config), "-l", "info",
                     "--disable-hot-restart"], env=env)
    lines = log_lines(out, "critical", "[error]", "ABI version", "sluice:", "compiled without")
    ok = code == 0 and re.search(r"configuration '.*' OK", out) is not None
    return {"ok": ok, "exit": code, "lines": lines}


def wasm_runtimes(envoy, tmp):
    empty = tmp / "empty.yaml"
    empty.write_text("static_resources: {}\n")
    _, out = run([envoy, "--mode", "init_only", "-c", str(empty), "-l", "info", "--disable-hot-restart"])
    m = re.search(r"envoy\.wasm\.runtime: (.*)", out)
    return [r.strip() for r in m.group(1).split(",")] if m else []


def abi(envoy, data, texts, probe_dir, tmp):
    """The load check's kind and the ABI string, each candidate confirmed by loading the probe."""
    if STRICT_CHECK in data:
        check = "strict: refuses any other string (ABI version mismatch)"
        candidates = sorted(t for t in texts if re.fullmatch(r"[0-9a-f]{64}", t) and t != SHA256_OF_NOTHING)
    elif WARN_CHECK in data:
        check = "warn-only: loads any string, warns 'is deprecated' when it differs"
        candidates = sorted(t for t in texts if re.fullmatch(r"v0\.\d+\.\d+", t))
    else:
        return {"check": "none found", "version": None, "candidates": [], "confirmed_by": None}
    config = tmp / "abi-probe.yaml"
    config.write_text(PROBE_CONFIG.replace("MODULE", "sluice_abi_probe"))
    # Envoy 1.37 reports only its fallback lookup's error: LD_LIBRARY_PATH makes that one ours too.
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=str(probe_dir), LD_LIBRARY_PATH=str(probe_dir))
    found, evidence = None, None
    for attempt in ["sluice-probe", *candidates]:
        verdict = validate(envoy, config, dict(env, SLUICE_PROBE_ABI=attempt))
        text = " ".join(verdict["lines"])
        expected = re.search(r"but expected ([0-9a-zA-Z.]+)", text)
        if expected:
            found, evidence = expected.group(1), f"a module reporting '{attempt}' was refused: {expected.group(0)}"
            break
        if f"ABI version {attempt} matched" in text:
            found, evidence = attempt, f"a module reporting '{attempt}' loaded: 'Dynamic module ABI version {attempt} matched.'"
            break
        if attempt != "sluice-probe" and "Failed to resolve symbol envoy_dynamic_module_on_http_filter_config_new" in text:
            # Past the strict check (Envoy 1.37 hides the mismatch's message behind its fallback
            # lookup's "not found in any search path"; with the right string the load goes on).
            found, evidence = attempt, (f"a module reporting '{attempt}' passed the load check (Envoy went on to "
                                        "look up its hooks: 'Failed to resolve symbol envoy_dynamic_module_on_http_filter_config_new')")
            break
    return {"check": check, "version": found, "candidates": candidates, "confirmed_by": evidence}


def build_probe(tmp):
    src, lib = tmp / "probe.c", tmp / "libsluice_abi_probe.so"
    src.write_text(PROBE_C)
    code, out = run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)])
    if code != 0:
        raise SystemExit(f"sluice: cc could not build the ABI probe module: {out.strip()}")
    return tmp


def render(template, tmp, **extra):
    env = dict(os.environ, **PORTS, **extra)
    code, out = run([str(ROOT / "envoy" / "render.sh"), template], env=env)
    if code != 0:
        raise SystemExit(f"sluice: envoy/render.sh {template}: {out.strip()}")
    path = tmp / template
    path.write_text(out)
    return path


def probe(envoy, minor, module, wasm, probe_dir, tmp):
    code, out = run([envoy, "--version"])
    m = re.search(r"version: ([0-9a-f]+)/([0-9.]+)/(\w+)/(\w+)", out)
    data, texts = strings_of(Path(envoy).resolve())
    exported = [s for s in symbols(Path(envoy).resolve(), "defined") if s.startswith("envoy_dynamic_module_callback_")]
    fact = {
        "minor": minor,
        "envoy": str(envoy),
        "version": m.group(2) if m else None,
        "commit": m.group(1) if m else None,
        "source_tree": m.group(3) if m else None,
        "version_line": out.strip(),
        "wasm_runtimes": wasm_runtimes(envoy, tmp),
        "abi": abi(envoy, data, texts, probe_dir, tmp),
        "callbacks": exported,
        "hooks": sorted(t for t in texts if re.fullmatch(r"envoy_dynamic_module_on_[a-z0-9_]+", t)),
    }
    if wasm:
        fact["wasm_filter"] = validate(envoy, render("demo.yaml", tmp, FILTER_WASM=str(wasm)))
    if module:
        imports = [s for s in symbols(module, "undefined") if s.startswith("envoy_dynamic_module_callback_")]
        hooks = [s for s in symbols(module, "defined") if s.startswith("envoy_dynamic_module_on_")]
        env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=str(module.parent), LD_LIBRARY_PATH=str(module.parent))
        fact["native_module"] = {
            "missing_callbacks": sorted(set(imports) - set(exported)),
            "hooks_envoy_does_not_know": sorted(set(hooks) - set(fact["hooks"])),
            "http_hooks_module_lacks": sorted(h for h in set(fact["hooks"]) - set(hooks)
                                              if h.startswith("envoy_dynamic_module_on_http_filter")),
            "validate": validate(envoy, render("demo_native.yaml", tmp), env),
        }
    return fact


def compare(facts, reference):
    ref = next((f for f in facts if f["minor"] == reference), None)
    for f in facts:
        if ref is None:
            f["vs_reference"] = None
            continue
        f["vs_reference"] = {
            "reference": reference,
            "callbacks_added": sorted(set(f["callbacks"]) - set(ref["callbacks"])),
            "callbacks_missing": sorted(set(ref["callbacks"]) - set(f["callbacks"])),
            "hooks_added": sorted(set(f["hooks"]) - set(ref["hooks"])),
            "hooks_missing": sorted(set(ref["hooks"]) - set(f["hooks"])),
        }


# Why Envoy refused a config, in a few words: (pattern in its log, summary; \1 is the match's group).
REASONS = [
    (r"undefined symbol: (\S+)", r"dlopen: undefined symbol \1"),
    (r"not found in any search path", "load failed (the reason hidden: 'not found in any search path')"),
    (r"compiled without support", "no V8 runtime ('compiled without support for it')"),
    (r"ABI version mismatch: got (\S+),", r"ABI version mismatch (module \1)"),
    (r"Failed to resolve symbol (\S+)", r"hook missing: \1"),
]


def verdict(check):
    """OK, or `refused: <why>` from Envoy's log."""
    if check is None:
        return "-"
    if check["ok"]:
        return "OK"
    text = " ".join(check["lines"])
    for pattern, summary in REASONS:
        m = re.search(pattern, text)
        if m:
            return "refused: " + m.expand(summary).replace("envoy_dynamic_module_", "")
    return "refused: " + (check["lines"][-1][-100:] if check["lines"] else f"exit {check['exit']}")


def table(facts):
    rows = []
    for f in facts:
        d = f["vs_reference"] or {}
        n = f.get("native_module", {})
        rows.append([
            f["version"] or f["minor"],
            "v8" if "envoy.wasm.runtime.v8" in f["wasm_runtimes"] else "null only",
            (f["abi"]["version"] or "?")[:12],
            f["abi"]["check"].split(":")[0],
            str(len(f["callbacks"])),
            f"+{len(d.get('callbacks_added', []))}/-{len(d.get('callbacks_missing', []))}" if d else "-",
            str(len(n.get("missing_callbacks", []))) if n else "-",
            verdict(f.get("wasm_filter")),
            verdict(n.get("validate")) if n else "-",
        ])
    head = ["envoy", "wasm", "ABI", "check", "callbacks", "vs ref", "native lacks", "wasm filter", "native module"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envoys", default=str(ROOT / ".envoy"), help="the matrix directory (default .envoy)")
    ap.add_argument("--reference", default="1.40", help="the minor the others are compared with")
    ap.add_argument("--module", default=str(ROOT / "target" / "release" / "libsluice_filter_native.so"))
    ap.add_argument("--wasm", default=str(ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "sluice_filter.wasm"))
    ap.add_argument("--json", help="write every fact as JSON here (- for stdout, no table)")
    args = ap.parse_args()
    envoys = sorted(Path(args.envoys).glob("*/bin/envoy"), key=lambda p: [int(x) for x in p.parent.parent.name.split(".")])
    if not envoys:
        raise SystemExit(f"sluice: no Envoy in {args.envoys}/*/bin/envoy; run scripts/install/35-envoy-matrix.sh")
    module = Path(args.module) if Path(args.module).is_file() else None
    wasm = Path(args.wasm) if Path(args.wasm).is_file() else None
    for name, path, given in (("native module", module, args.module), ("wasm filter", wasm, args.wasm)):
        if path is None:
            print(f"sluice: no {name} at {given}: its column is left empty", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="envoy-matrix-") as d:
        tmp = Path(d)
        probe_dir = build_probe(tmp)
        facts = [probe(e, e.parent.parent.name, module, wasm, probe_dir, tmp) for e in envoys]
    compare(facts, args.reference)
    if args.json == "-":
        json.dump(facts, sys.stdout, indent=1)
        return
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=1))
    table(facts)


if __name__ == "__main__":
    main()
