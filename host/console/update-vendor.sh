#!/usr/bin/env bash
# Re-fetches the vendored xterm.js browser build (host/console/vendor/) from the npm
# registry: the UMD bundle only (no source maps), its licence and a VERSIONS file.
# Bump the versions below and run it again to update them.
set -euo pipefail

XTERM_VERSION=5.5.0

here="$(cd "$(dirname "$0")" && pwd)"
vendor="$here/vendor"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cd "$scratch"
npm init -y >/dev/null
npm install --no-audit --no-fund --ignore-scripts --save-exact \
    "@xterm/xterm@$XTERM_VERSION" >/dev/null

xterm="$scratch/node_modules/@xterm/xterm"
mkdir -p "$vendor"
# Drop the source map references: the maps are not vendored.
strip_map() { sed -e '/^\/\/# sourceMappingURL=/d' "$1" > "$2"; }
strip_map "$xterm/lib/xterm.js" "$vendor/xterm.js"
cp "$xterm/css/xterm.css" "$vendor/xterm.css"
cp "$xterm/LICENSE" "$vendor/LICENSE-xterm.txt"
cat > "$vendor/VERSIONS" <<VERSIONS
@xterm/xterm $XTERM_VERSION
VERSIONS
echo "vendored @xterm/xterm $XTERM_VERSION into $vendor"
