#!/usr/bin/env bash
# The Debian 12 packages the two README commands need, installed when missing.
#
#   build-essential pkg-config libssl-dev  compile the workspace (native-tls links OpenSSL)
#   perl make                              the vendored OpenSSL of the Lambda build
#   postgresql-15                          psql and the Debian `postgres` user (the 16/17
#                                          servers come from scripts/pg-versions.sh)
#   pgbouncer                              the PgBouncer in front of the cluster (hk check tests)
#   nodejs npm                             scripts/pg-versions.sh installs PostgreSQL 16/17
#   python3-venv                           .venv for moto, cargo-lambda, SAM CLI, checkov
#   openssl                                certificates for the database TLS test
#   docker-registry                        the container registry (Distribution 2.8) of the
#                                          registry client's tests; its service stays off
#   git ca-certificates                    clones; TLS roots
#   golang-gitaly-proto-dev                Gitaly's published .proto files: the Gitaly
#                                          stand-in and the proto conformance test
#
# As root it runs apt-get for the missing ones (CI machines are root); otherwise it
# prints the apt-get line and fails. Usage: bash scripts/system-packages.sh [--check]
set -euo pipefail
PACKAGES=(build-essential pkg-config libssl-dev perl make postgresql-15 pgbouncer python3-venv openssl docker-registry golang-gitaly-proto-dev git ca-certificates)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
# npm by command, not by package: a machine whose Node.js comes from another
# repository (NodeSource's nodejs bundles npm) cannot install Debian's npm beside it.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present (${PACKAGES[*]}, npm $(npm --version))"
  exit 0
fi
echo "system packages missing: ${missing[*]}"
if [ "${1:-}" = "--check" ] || [ "$(id -u)" -ne 0 ]; then
  echo "install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian package enables a pgbouncer service on 127.0.0.1:6432; the tests start
# their own on a free port and need none running.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet pgbouncer 2>/dev/null; then
  systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi
# docker-registry's package enables a registry service on :5000; the registry tests start
# their own on a free port of 127.0.0.1 and need none running.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
