#!/usr/bin/env bash
# Renders an Envoy config template from envoy/ to stdout, filling dollar-brace placeholders from
# the environment (the same syntax Python's string.Template reads in the tests). Refuses to
# render when a placeholder has no value, naming it.
#   ENVOY_LISTEN_PORT=10000 ENVOY_ADMIN_PORT=9901 SLUICE_GRPC_PORT=8082 UPSTREAM_PORT=8090 \
#   FILTER_WASM=$PWD/target/wasm32-wasip1/wasm-release/sluice_filter.wasm envoy/render.sh demo.yaml > /tmp/envoy.yaml
set -euo pipefail
template="$(dirname "$0")/${1:?usage: envoy/render.sh TEMPLATE.yaml}"
[ -f "$template" ] || template="$1"
python3 - "$template" <<'PY'
import os, string, sys
text = open(sys.argv[1]).read()
try:
    sys.stdout.write(string.Template(text).substitute(os.environ))
except KeyError as e:
    sys.exit(f"sluice: {sys.argv[1]} needs the environment variable {e.args[0]}")
PY
