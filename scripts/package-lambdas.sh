#!/usr/bin/env bash
# Build every function for AWS Lambda (provided.al2023) with cargo-lambda:
#   target/lambda/<function>/bootstrap  (+ rds-global-bundle.pem when given)
# One build for the whole workspace, so shared dependencies compile once.
#
#   scripts/package-lambdas.sh [--arm64 | --x86-64] [--ca-bundle <global-bundle.pem>] [--check]
#                              [--function <name> --out <dir>]
#
# --function NAME --out DIR (what `sam build` runs, through infra/Makefile): build that
# function only and copy its bootstrap (and the CA bundle) into DIR, SAM's artifacts
# directory. Every function crate has the same dependencies (`shared`), so the ten
# one-function builds of a `sam build` compile the dependencies once, and after a
# whole-workspace build with the same flags each is a no-op.
#
# --check (what CI runs) builds the same binaries without LTO and with parallel
# codegen: it proves every function builds for the Lambda target in a fraction of the
# time (thin LTO over ten binaries costs ~25 CPU-minutes on this kind of machine);
# deploy builds keep the full [profile.release].
#
# --arm64 is the default (the template's default Architecture); it needs the
# aarch64-unknown-linux-gnu Rust target. OpenSSL is vendored (built from source and
# linked statically). The CA bundle (https://truststore.pki.rds.amazonaws.com/global/
# global-bundle.pem for RDS) is copied next to each bootstrap, where
# DATABASE_CA_BUNDLE=/var/task/rds-global-bundle.pem finds it.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=--arm64
ca=""
only=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --arm64|--x86-64) arch=$1 ;;
    --ca-bundle) ca=$2; shift ;;
    --function) only=$2; shift ;;
    --out) out=$2; shift ;;
    --check) export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 ;;
    *) echo "usage: $0 [--arm64|--x86-64] [--ca-bundle <pem>] [--check] [--function <name> --out <dir>]" >&2; exit 2 ;;
  esac
  shift
done
# Lambda bootstraps are optimized for size: the functions wait on PostgreSQL, not on
# the CPU, and a smaller bootstrap loads faster (issue 8, footprint: 12.75 → 10.40 MiB
# for remove-expired-members, start 8.8 ms either way, page RSS 13.7 → 12.0 MiB). Rust
# code at opt-level "s", and the C of the vendored OpenSSL (and ring) at -Os.
export CARGO_PROFILE_RELEASE_OPT_LEVEL="${CARGO_PROFILE_RELEASE_OPT_LEVEL:-s}"
export CFLAGS="${CFLAGS:--Os}"
if [ -x .venv/bin/cargo-lambda ]; then export PATH="$PWD/.venv/bin:$PATH"; fi
command -v cargo-lambda >/dev/null || { echo "cargo-lambda not found: pip install cargo-lambda==1.9.2 ziglang==0.17.0 (scripts/test.sh does)" >&2; exit 1; }
if [ "$arch" = "--arm64" ] && ! rustup target list --installed | grep -q aarch64-unknown-linux-gnu; then
  rustup target add aarch64-unknown-linux-gnu
fi
if [ -n "$ca" ] && [ ! -s "$ca" ]; then echo "CA bundle $ca: no such file (or empty)" >&2; exit 1; fi
functions=$(ls functions)
if [ -n "$only" ]; then
  [ -d "functions/$only" ] || { echo "no function $only under functions/" >&2; exit 2; }
  [ -n "$out" ] || { echo "--function needs --out <dir>" >&2; exit 2; }
  functions=$only
fi
# cargo-lambda writes under cargo's target directory (CARGO_TARGET_DIR when set).
lambda_dir="${CARGO_TARGET_DIR:-target}/lambda"
cargo lambda build --release "$arch" --output-format binary --features shared/vendored-openssl \
  $(for f in $functions; do printf -- '--package %s ' "$f"; done)
for f in $functions; do
  test -x "$lambda_dir/$f/bootstrap" || { echo "missing $lambda_dir/$f/bootstrap" >&2; exit 1; }
  if [ -n "$ca" ]; then cp "$ca" "$lambda_dir/$f/rds-global-bundle.pem"; fi
done
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$lambda_dir/$only/bootstrap" "$out/bootstrap"
  if [ -n "$ca" ]; then cp "$ca" "$out/rds-global-bundle.pem"; fi
  echo "packaged: $only ($arch) into $out"
  exit 0
fi
echo "packaged: $(echo $functions | wc -w) functions ($arch)"
ls -l "$lambda_dir"/*/bootstrap | awk '{printf "  %-60s %6.2f MB (%d bytes)\n", $9, $5/1000000, $5}'
