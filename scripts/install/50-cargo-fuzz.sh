#!/usr/bin/env bash
# Serves: fuzz
# cargo-fuzz (crates.io) for the short bounded fuzz runs in tests/suites/60-fuzz.sh.
set -euo pipefail
command -v cargo-fuzz >/dev/null && exit 0
echo "sluice: installing cargo-fuzz (a few minutes, once)"
cargo install cargo-fuzz --version 0.13.2 --locked >/dev/null 2>&1 || {
  echo "sluice: could not install cargo-fuzz; run: cargo install cargo-fuzz --locked" >&2; exit 1; }
