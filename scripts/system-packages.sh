#!/usr/bin/env bash
# The Debian 12 packages the two README commands need, installed when missing.
#
#   build-essential pkg-config libssl-dev  compile the workspace (native-tls links OpenSSL)
#   perl make                              the vendored OpenSSL of the Lambda build
#   postgresql-15                          server binaries for the throwaway clusters
#   python3-venv                           .venv for moto, cargo-lambda, SAM CLI, checkov
#   openssl                                certificates for the database TLS test
#   git ca-certificates                    clones; TLS roots
#
# As root it runs apt-get for the missing ones (CI machines are root); otherwise it
# prints the apt-get line and fails. Usage: bash scripts/system-packages.sh [--check]
set -euo pipefail
PACKAGES=(build-essential pkg-config libssl-dev perl make postgresql-15 python3-venv openssl git ca-certificates)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present (${PACKAGES[*]})"
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
