# Sourced by scripts/test.sh, scripts/install.sh and every tests/suites/*.sh: what a suite is
# called, whether its skip was asked for, and how a suite that cannot run says so.
#
# A suite that cannot run (a tool missing, an engine that does not start) FAILS, naming itself and
# what is missing: a test command that stays green without a suite would claim what nobody tested.
# The only way past a suite is to ask for it by name:
#
#   SLUICE_SKIP_SUITES=compose,fuzz ./scripts/test.sh
#
# (names: the suite file's name without its number and .sh, e.g. tests/suites/70-compose.sh is
# `compose`). scripts/test.sh then does not run it, scripts/install.sh does not install what only
# it needs, and the final summary lists it as skipped by request. A name that is no suite is an
# error, so a typo cannot silently run (or skip) something else.

# suite_name tests/suites/70-compose.sh -> compose
suite_name() {
  local base
  base=$(basename "$1" .sh)
  echo "${base#[0-9][0-9]-}"
}

# The names of every suite in tests/suites, one a line.
suite_names() {
  local root f
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  for f in "$root"/tests/suites/*.sh; do
    [ -e "$f" ] && suite_name "$f"
  done
}

# The names SLUICE_SKIP_SUITES asks to skip, one a line; fails naming any that is no suite.
suite_skips() {
  local known name list=${SLUICE_SKIP_SUITES:-}
  known=$(suite_names)
  for name in ${list//,/ }; do
    if ! grep -qx -- "$name" <<<"$known"; then
      echo "sluice: SLUICE_SKIP_SUITES names '$name', which is no suite; the suites are: $(echo $known | tr ' ' ',')" >&2
      return 1
    fi
    echo "$name"
  done
}

# suite_skip_requested NAME: true when SLUICE_SKIP_SUITES names NAME.
suite_skip_requested() {
  local skips
  skips=$(suite_skips) || exit 1
  grep -qx -- "$1" <<<"$skips"
}

# For a suite script: `suite_init "$0"` sets SUITE (its name) and SUITE_FILE.
suite_init() {
  SUITE_FILE="tests/suites/$(basename "$1")"
  SUITE=$(suite_name "$1")
}

# suite_cannot_run WHAT WHY: the suite cannot run here: it needs WHAT (a tool, an engine), and WHY
# it has none. Says so (and, under scripts/test.sh, writes the line where its summary reads it),
# then exits 1.
suite_cannot_run() {
  local line="suite $SUITE ($SUITE_FILE) cannot run: it needs $1: $2 (to skip it on purpose: SLUICE_SKIP_SUITES=$SUITE)"
  echo "sluice: $line" >&2
  [ -z "${SLUICE_SUITE_REASON:-}" ] || echo "$line" >>"$SLUICE_SUITE_REASON"
  exit 1
}

# suite_need TOOL WHY: fails the suite unless TOOL is on PATH.
suite_need() {
  command -v "$1" >/dev/null || suite_cannot_run "$1" "not found on PATH; $2"
}

# suite_install STEP WHAT: runs scripts/install/STEP (idempotent); if it fails, the suite cannot
# run, naming WHAT.
suite_install() {
  bash "scripts/install/$1" || suite_cannot_run "$2" "scripts/install/$1 could not install it (its error is above)"
}
