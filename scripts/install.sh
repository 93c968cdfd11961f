#!/usr/bin/env bash
# Installs every prerequisite, idempotently: each scripts/install/*.sh checks before installing,
# so a second run costs seconds. Anything missing that cannot be installed stops with one line
# saying what and how to fix it. A step that serves a single suite says so in a `# Serves: <suite>`
# line; it is left out when SLUICE_SKIP_SUITES asks to skip that suite (scripts/suite-lib.sh), and
# its failure names the suite that cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/suite-lib.sh
for step in scripts/install/*.sh; do
  [ -e "$step" ] || continue
  serves=$(sed -n 's/^# Serves: \([a-z0-9-]*\)$/\1/p' "$step" | head -n 1)
  if [ -n "$serves" ] && suite_skip_requested "$serves"; then
    echo "sluice: $step not run: suite $serves skipped by request (SLUICE_SKIP_SUITES)"
    continue
  fi
  if ! bash "$step"; then
    if [ -n "$serves" ]; then
      SUITE=$serves SUITE_FILE=$(ls tests/suites/*-"$serves".sh) \
        suite_cannot_run "what $step installs" "it could not be installed (its error is above)"
    fi
    exit 1
  fi
done
