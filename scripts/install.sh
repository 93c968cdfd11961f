#!/usr/bin/env bash
# Installs every prerequisite, idempotently: each scripts/install/*.sh checks before installing,
# so a second run costs seconds. Anything missing that cannot be installed stops with one line
# saying what and how to fix it.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/install/*.sh; do
  [ -e "$step" ] || continue
  bash "$step"
done
