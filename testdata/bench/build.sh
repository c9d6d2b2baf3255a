#!/bin/sh
# Rebuilds the whole-system benchmark's contracts (see README.md):
#   sh testdata/bench/build.sh
# Installs the pinned solc (solcjs, the npm package) into a temporary
# directory, compiles Token.sol and Driver.sol through the standard-JSON
# interface, and writes, beside this script:
#   Token.runtime.hex, Driver.runtime.hex  runtime (deployed) bytecode,
#                                          lowercase hex, no 0x, one line
#   abi.json                               {"Driver": [...], "Token": [...]}
#   selectors.json                         {"Driver": {"sig": "4-byte hex"}, "Token": {...}}
# and checks that README.md lists every selector. Needs node and npm.
set -eu

SOLC_VERSION=0.8.28

dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

npm install --silent --no-audit --no-fund --prefix "$tmp" "solc@$SOLC_VERSION" >/dev/null

SOLC_DIR="$tmp/node_modules/solc" BENCH_DIR="$dir" SOLC_VERSION="$SOLC_VERSION" node - <<'EOF'
const fs = require("fs");
const path = require("path");
const solc = require(process.env.SOLC_DIR);
const dir = process.env.BENCH_DIR;

const version = solc.version();
if (!version.startsWith(process.env.SOLC_VERSION + "+")) {
  throw new Error(`expected solc ${process.env.SOLC_VERSION}, got ${version}`);
}

const contracts = ["Driver", "Token"];
const input = {
  language: "Solidity",
  sources: Object.fromEntries(
    contracts.map((c) => [`${c}.sol`, { content: fs.readFileSync(path.join(dir, `${c}.sol`), "utf8") }])
  ),
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    // No CBOR metadata trailer: the bytecode depends on the code only, not on
    // comments or file names.
    metadata: { appendCBOR: false },
    outputSelection: {
      "*": {
        "*": [
          "abi",
          "evm.methodIdentifiers",
          "evm.deployedBytecode.object",
          "evm.deployedBytecode.immutableReferences",
          "evm.deployedBytecode.linkReferences",
        ],
      },
    },
  },
};

const output = JSON.parse(solc.compile(JSON.stringify(input)));
let failed = false;
for (const e of output.errors || []) {
  process.stderr.write(e.formattedMessage || e.message);
  if (e.severity === "error") failed = true;
}
if (failed) process.exit(1);

const sortKeys = (o) => Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]]));
const abis = {};
const selectors = {};
for (const c of contracts) {
  const out = output.contracts[`${c}.sol`][c];
  const dep = out.evm.deployedBytecode;
  if (Object.keys(dep.immutableReferences || {}).length) throw new Error(`${c}: has immutables`);
  if (Object.keys(dep.linkReferences || {}).length) throw new Error(`${c}: needs linking`);
  const hex = dep.object.toLowerCase();
  if (!/^([0-9a-f]{2})+$/.test(hex)) throw new Error(`${c}: runtime bytecode is not hex`);
  fs.writeFileSync(path.join(dir, `${c}.runtime.hex`), hex + "\n");
  abis[c] = out.abi;
  selectors[c] = sortKeys(out.evm.methodIdentifiers);
  console.log(`${c}: ${hex.length / 2} bytes of runtime code`);
}
fs.writeFileSync(path.join(dir, "abi.json"), JSON.stringify(abis, null, 2) + "\n");
fs.writeFileSync(path.join(dir, "selectors.json"), JSON.stringify(selectors, null, 2) + "\n");
console.log(`solc ${version} (optimizer on, runs 200, evmVersion cancun, no CBOR metadata)`);

// README.md must list each selector as "`0x<hex>` | `<signature>`".
const readme = fs.readFileSync(path.join(dir, "README.md"), "utf8");
const missing = [];
for (const c of contracts) {
  for (const [sig, sel] of Object.entries(selectors[c])) {
    if (!readme.includes("`0x" + sel + "` | `" + sig + "`")) missing.push(`${c}: 0x${sel} ${sig}`);
  }
}
if (missing.length) {
  console.error("README.md does not list these selectors:\n  " + missing.join("\n  "));
  process.exit(1);
}
EOF
