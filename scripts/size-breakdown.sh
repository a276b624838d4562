#!/usr/bin/env bash
# The per-crate size breakdown of one function's Lambda build (docs/benchmarks.md,
# "Binary size of the Lambda build"): what each megabyte of the bootstrap is.
#
#   scripts/size-breakdown.sh [function]      (default: remove-expired-members)
#
# Builds the function as scripts/package-lambdas.sh does (fat LTO, one codegen unit,
# Rust at opt-level "s", the vendored OpenSSL's C at -Os, OpenSSL linked statically)
# but for the host target (x86-64 glibc: the code is the same as the Lambda build's)
# and without stripping, since the breakdown reads the symbol table; then prints
# `cargo bloat --crates`: the .text bytes of each crate, with the C libraries linked
# through a crate (OpenSSL through openssl-sys, ring's C and assembly through ring)
# counted under that crate. The stripped size of the same build is printed last, to
# compare with the package's. Takes about 15 minutes on 2 CPUs (OpenSSL from source,
# fat LTO) in its own target directory (target/size-breakdown).
set -euo pipefail
cd "$(dirname "$0")/.."
fn=${1:-remove-expired-members}
test -d "functions/$fn" || { echo "no function $fn under functions/" >&2; exit 2; }
tools="$PWD/target/tools"
export PATH="$tools/bin:$PATH"
if ! command -v cargo-bloat >/dev/null; then
  cargo install --locked cargo-bloat --version 0.12.1 --root "$tools"
fi
export CARGO_PROFILE_RELEASE_OPT_LEVEL=s CFLAGS=-Os CARGO_PROFILE_RELEASE_STRIP=false
dir=target/size-breakdown
cargo bloat --release -p "$fn" --features shared/vendored-openssl --target-dir "$dir" \
  --crates -n 30
bin="$dir/release/$fn"
cp "$bin" "$dir/$fn.stripped"
strip "$dir/$fn.stripped"
echo "unstripped: $(stat -c %s "$bin") bytes; stripped: $(stat -c %s "$dir/$fn.stripped") bytes"
