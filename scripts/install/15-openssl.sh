#!/usr/bin/env bash
# The openssl CLI (Debian package): the TLS tests make their certificates with it at test time
# (backend/tests/it/tls_rig.rs, tests/e2e/test_tls.py); none is committed.
set -euo pipefail
if command -v openssl >/dev/null; then exit 0; fi
source "$(dirname "$0")/../apt.sh"
apt_install openssl
