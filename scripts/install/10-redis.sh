#!/usr/bin/env bash
# redis-server and redis-cli (Debian package): the tests start their own on free loopback ports.
# Sentinels too: Debian's redis-server runs sentinel mode (`redis-server sentinel.conf --sentinel`),
# so the redis-sentinel package is not needed (tests/reliability/test_failover.py, backend/tests/it/sentinel.rs).
set -euo pipefail
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then exit 0; fi
source "$(dirname "$0")/../apt.sh"
apt_install redis-server redis-tools
