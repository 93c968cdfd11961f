# Preamble of a suite that builds with cargo (20-envoy, 30-browser, 50-reliability, 60-fuzz),
# sourced as its first line: `source "$(dirname "$0")/lib/cargo-suite.bash"`. Strict mode, the
# repository root as working directory, ~/.cargo/bin on PATH, scripts/suite-lib.sh loaded, SUITE set
# from the sourcing script ($0), and a suite that cannot run without cargo says so. Not a suite
# itself: scripts/test.sh runs tests/suites/*.sh only.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
source scripts/suite-lib.sh
suite_init "$0"
suite_need cargo "install Rust (https://rustup.rs)"

# suite_build COMMAND...: a build the suite needs when it runs alone. Under scripts/test.sh, which
# built everything first (scripts/build-for-tests.sh) and runs suites side by side, it builds
# nothing (SLUICE_TESTS_BUILT=1): a build there could swap a module or binary under another
# suite's Envoy or backend as it starts.
suite_build() {
  [ "${SLUICE_TESTS_BUILT:-}" = 1 ] || "$@"
}
