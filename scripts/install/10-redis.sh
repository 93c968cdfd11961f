#!/usr/bin/env bash
# redis-server and redis-cli (Debian package): the tests start their own on free loopback ports.
set -euo pipefail
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then exit 0; fi
source "$(dirname "$0")/../apt.sh"
apt_install redis-server redis-tools
