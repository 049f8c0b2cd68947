#!/usr/bin/env bash
# The loopback TLS identity of the https media tests (serve/http_fetch_test.cc,
# tests/serve/agent_test.py): a self-signed P-256 certificate for localhost and
# 127.0.0.1, valid for a century, and its key. Test-only: it guards nothing.
set -euo pipefail
cd "$(dirname "$0")"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout localhost.key -out localhost.crt 2>/dev/null
