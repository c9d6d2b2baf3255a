#!/bin/sh
# Optional check of the built bytecode (see README.md):
#   sh testdata/bench/sanity.sh
# Installs @ethereumjs/evm into a temporary directory and runs sanity.mjs,
# which executes Token.runtime.hex and Driver.runtime.hex under Prague rules
# with hand-written storage and checks every function. Needs node and npm.
set -eu

EJS_VERSION=10.1.3

dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

npm install --silent --no-audit --no-fund --prefix "$tmp" \
  "@ethereumjs/evm@$EJS_VERSION" "@ethereumjs/common@$EJS_VERSION" "@ethereumjs/util@$EJS_VERSION" \
  "@noble/hashes@2" >/dev/null

SANITY_NODE_MODULES="$tmp/node_modules" node "$dir/sanity.mjs"
