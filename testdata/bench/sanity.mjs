// Executes Token.runtime.hex and Driver.runtime.hex in @ethereumjs/evm (Prague
// rules) with storage written by hand, the way the benchmark places them in
// state, and checks every Token and Driver function. Run through sanity.sh.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const modules = process.env.SANITY_NODE_MODULES;
const require = createRequire(join(modules, "noop.js"));
const { createEVM } = await import(require.resolve("@ethereumjs/evm"));
const { Common, Mainnet, Hardfork } = await import(require.resolve("@ethereumjs/common"));
const util = await import(require.resolve("@ethereumjs/util"));
const { keccak_256 } = await import(require.resolve("@noble/hashes/sha3.js"));

const dir = dirname(fileURLToPath(import.meta.url));
const hexCode = (name) => util.hexToBytes("0x" + readFileSync(join(dir, name), "utf8").trim());
const selectors = JSON.parse(readFileSync(join(dir, "selectors.json"), "utf8"));

let passed = 0;
let failed = 0;
function check(what, ok, detail = "") {
  if (ok) passed++;
  else {
    failed++;
    console.log(`FAIL ${what} ${detail}`);
  }
}

const word = (v) => util.setLengthLeft(util.bigIntToBytes(BigInt(v)), 32);
const toBig = (b) => (b.length ? util.bytesToBigInt(b) : 0n);
const keccak = (...parts) => keccak_256(util.concatBytes(...parts));
// Storage slot of mapping[key] where the mapping is at `slot`.
const mapSlot = (key, slot) => keccak(word(key), word(slot));
function calldata(contract, sig, args) {
  const sel = selectors[contract][sig];
  if (!sel) throw new Error(`no selector for ${contract}.${sig}`);
  return util.concatBytes(util.hexToBytes("0x" + sel), ...args.map(word));
}
// Solidity short-string storage word: bytes left-aligned, low byte 2*len.
function shortString(s) {
  const b = new TextEncoder().encode(s);
  if (b.length > 31) throw new Error("not a short string");
  const w = new Uint8Array(32);
  w.set(b, 0);
  w[31] = b.length * 2;
  return w;
}

const common = new Common({ chain: Mainnet, hardfork: Hardfork.Prague });
const evm = await createEVM({ common });
const sm = evm.stateManager;

const TOKEN = 0x7070n;
const DRIVER = 0xd0d0n;
const EOA = 0xeeeen;
const NOCODE = 0xdeadn;
const addr = (v) => util.createAddressFromBigInt(BigInt(v));
for (const a of [TOKEN, DRIVER, EOA, NOCODE]) await sm.putAccount(addr(a), new util.Account(0n, 10n ** 18n));
await sm.putCode(addr(TOKEN), hexCode("Token.runtime.hex"));
await sm.putCode(addr(DRIVER), hexCode("Driver.runtime.hex"));

const putSlot = (a, slot, v) => sm.putStorage(addr(a), slot instanceof Uint8Array ? slot : word(slot), util.setLengthLeft(v instanceof Uint8Array ? v : util.bigIntToBytes(BigInt(v)), 32));
const getSlot = async (a, slot) => toBig(await sm.getStorage(addr(a), slot instanceof Uint8Array ? slot : word(slot)));

// Token state, written by hand: holders HOLDER0 .. HOLDER0+N-1 own (i+1) ether.
const HOLDER0 = 0x100000n;
const N = 8n;
let supply = 0n;
for (let i = 0n; i < N; i++) {
  const bal = (i + 1n) * 10n ** 18n;
  supply += bal;
  await putSlot(TOKEN, mapSlot(HOLDER0 + i, 0), bal);
}
await putSlot(TOKEN, 2, supply);
await putSlot(TOKEN, 3, shortString("Bench Token"));
await putSlot(TOKEN, 4, shortString("BENCH"));

async function call(to, contract, sig, args = [], caller = EOA) {
  const r = await evm.runCall({
    to: addr(to),
    caller: addr(caller),
    origin: addr(caller),
    data: calldata(contract, sig, args),
    gasLimit: 30_000_000n,
  });
  return { ok: r.execResult.exceptionError === undefined, ret: r.execResult.returnValue, logs: r.execResult.logs || [], gas: r.execResult.executionGasUsed };
}
const decodeString = (ret) => {
  const off = Number(toBig(ret.slice(0, 32)));
  const len = Number(toBig(ret.slice(off, off + 32)));
  return new TextDecoder().decode(ret.slice(off + 32, off + 32 + len));
};

// --- Token views ---
let r = await call(TOKEN, "Token", "name()");
check("name", r.ok && decodeString(r.ret) === "Bench Token", decodeString(r.ret));
r = await call(TOKEN, "Token", "symbol()");
check("symbol", r.ok && decodeString(r.ret) === "BENCH");
r = await call(TOKEN, "Token", "decimals()");
check("decimals", r.ok && toBig(r.ret) === 18n);
r = await call(TOKEN, "Token", "totalSupply()");
check("totalSupply", r.ok && toBig(r.ret) === supply);
for (let i = 0n; i < N; i++) {
  r = await call(TOKEN, "Token", "balanceOf(address)", [HOLDER0 + i]);
  check(`balanceOf ${i}`, r.ok && toBig(r.ret) === (i + 1n) * 10n ** 18n);
}

// --- transfer ---
const TRANSFER_TOPIC = util.bytesToHex(keccak(new TextEncoder().encode("Transfer(address,address,uint256)")));
const APPROVAL_TOPIC = util.bytesToHex(keccak(new TextEncoder().encode("Approval(address,address,uint256)")));
const OTHER = 0x200000n;
r = await call(TOKEN, "Token", "transfer(address,uint256)", [OTHER, 10n ** 18n], HOLDER0);
check("transfer ok", r.ok && toBig(r.ret) === 1n);
check("transfer log", r.logs.length === 1 && util.bytesToHex(r.logs[0][1][0]) === TRANSFER_TOPIC && toBig(r.logs[0][1][2]) === OTHER && toBig(r.logs[0][2]) === 10n ** 18n);
check("transfer debit", (await getSlot(TOKEN, mapSlot(HOLDER0, 0))) === 0n);
check("transfer credit", (await getSlot(TOKEN, mapSlot(OTHER, 0))) === 10n ** 18n);
r = await call(TOKEN, "Token", "transfer(address,uint256)", [OTHER, 1n], HOLDER0);
check("transfer insufficient reverts", !r.ok);
r = await call(TOKEN, "Token", "transfer(address,uint256)", [HOLDER0 + 1n, 5n], HOLDER0 + 1n);
check("self transfer keeps balance", r.ok && (await getSlot(TOKEN, mapSlot(HOLDER0 + 1n, 0))) === 2n * 10n ** 18n);

// --- approve / allowance / transferFrom ---
const OWNER = HOLDER0 + 2n; // 3 ether
r = await call(TOKEN, "Token", "approve(address,uint256)", [EOA, 100n], OWNER);
check("approve ok", r.ok && toBig(r.ret) === 1n && r.logs.length === 1 && util.bytesToHex(r.logs[0][1][0]) === APPROVAL_TOPIC);
check("allowance slot", (await getSlot(TOKEN, keccak(word(EOA), mapSlot(OWNER, 1)))) === 100n);
r = await call(TOKEN, "Token", "allowance(address,address)", [OWNER, EOA]);
check("allowance view", r.ok && toBig(r.ret) === 100n);
r = await call(TOKEN, "Token", "transferFrom(address,address,uint256)", [OWNER, OTHER, 101n]);
check("transferFrom over allowance reverts", !r.ok);
r = await call(TOKEN, "Token", "transferFrom(address,address,uint256)", [OWNER, OTHER, 40n]);
check("transferFrom ok", r.ok && toBig(r.ret) === 1n);
check("transferFrom allowance left", (await getSlot(TOKEN, keccak(word(EOA), mapSlot(OWNER, 1)))) === 60n);
check("transferFrom moved", (await getSlot(TOKEN, mapSlot(OTHER, 0))) === 10n ** 18n + 40n);
await call(TOKEN, "Token", "approve(address,uint256)", [EOA, 2n ** 256n - 1n], OWNER);
r = await call(TOKEN, "Token", "transferFrom(address,address,uint256)", [OWNER, OTHER, 3n * 10n ** 18n]);
check("transferFrom over balance reverts", !r.ok);
r = await call(TOKEN, "Token", "transferFrom(address,address,uint256)", [OWNER, OTHER, 1n]);
check("infinite allowance kept", r.ok && (await getSlot(TOKEN, keccak(word(EOA), mapSlot(OWNER, 1)))) === 2n ** 256n - 1n);

// --- Driver: ERC-20 loops ---
const balances = [];
for (let i = 0n; i < N; i++) balances.push(await getSlot(TOKEN, mapSlot(HOLDER0 + i, 0)));
const sumBal = balances.reduce((a, b) => a + b, 0n);
r = await call(DRIVER, "Driver", "balanceOfLoop(address,uint256,uint256)", [TOKEN, HOLDER0, N]);
check("balanceOfLoop sum", r.ok && toBig(r.ret) === sumBal, `${toBig(r.ret)} != ${sumBal}`);
r = await call(DRIVER, "Driver", "balanceOfLoop(address,uint256,uint256)", [TOKEN, HOLDER0, 0n]);
check("balanceOfLoop empty", r.ok && toBig(r.ret) === 0n);
r = await call(DRIVER, "Driver", "balanceOfLoop(address,uint256,uint256)", [NOCODE, HOLDER0, 1n]);
check("balanceOfLoop on codeless token reverts", !r.ok);

const SP = 0x300000n;
r = await call(DRIVER, "Driver", "approveLoop(address,uint256,uint256)", [TOKEN, SP, 5n]);
check("approveLoop ok", r.ok && r.logs.length === 5);
for (let i = 0n; i < 5n; i++) {
  check(`approveLoop allowance ${i}`, (await getSlot(TOKEN, keccak(word(SP + i), mapSlot(DRIVER, 1)))) === i + 1n);
}
console.log(`approveLoop(5 fresh slots): ${r.gas} gas`);

const MS = HOLDER0;
r = await call(DRIVER, "Driver", "mixed(address,uint256,uint256,uint256)", [TOKEN, MS, N, 3n]);
check("mixed sum", r.ok && toBig(r.ret) === sumBal);
check("mixed logs", r.logs.length === 3);
for (let i = 0n; i < 3n; i++) {
  check(`mixed allowance ${i}`, (await getSlot(TOKEN, keccak(word(MS + N + i), mapSlot(DRIVER, 1)))) === i + 1n);
}
check("mixed did not approve read range", (await getSlot(TOKEN, keccak(word(MS + N - 1n), mapSlot(DRIVER, 1)))) === 0n);

// --- Driver: raw storage loops ---
for (let i = 0n; i < 10n; i++) await putSlot(DRIVER, i, i + 1n);
r = await call(DRIVER, "Driver", "sloadLoop(uint256,uint256)", [0n, 10n]);
check("sloadLoop", r.ok && toBig(r.ret) === 55n);
r = await call(DRIVER, "Driver", "sloadLoop(uint256,uint256)", [3n, 0n]);
check("sloadLoop empty", r.ok && toBig(r.ret) === 0n);

for (let i = 0n; i < 5n; i++) await putSlot(DRIVER, 100n + i, 1n);
r = await call(DRIVER, "Driver", "sstoreLoop(uint256,uint256,uint256,bool)", [100n, 5n, 7n, 1n]);
check("sstoreLoop loadFirst acc", r.ok && toBig(r.ret) === 5n);
for (let i = 0n; i < 5n; i++) check(`sstoreLoop slot ${i}`, (await getSlot(DRIVER, 100n + i)) === 7n);
r = await call(DRIVER, "Driver", "sstoreLoop(uint256,uint256,uint256,bool)", [110n, 3n, 9n, 0n]);
check("sstoreLoop no load acc", r.ok && toBig(r.ret) === 0n);
for (let i = 0n; i < 3n; i++) check(`sstoreLoop fresh slot ${i}`, (await getSlot(DRIVER, 110n + i)) === 9n);

const C = 4n;
for (let i = 0n; i < C; i++) {
  await putSlot(DRIVER, 300n + i, 1n); // nonzero -> other
  await putSlot(DRIVER, 400n + i, 5n); // nonzero -> same
}
const variants = [200n, 300n, 400n, 500n, C, 9n, 5n];
r = await call(DRIVER, "Driver", "sstoreVariants(uint256,uint256,uint256,uint256,uint256,uint256,uint256,bool)", [...variants, 1n]);
check("sstoreVariants acc", r.ok && toBig(r.ret) === C * 1n + C * 5n, `${toBig(r.ret)}`);
for (let i = 0n; i < C; i++) {
  check(`sstoreVariants fresh ${i}`, (await getSlot(DRIVER, 200n + i)) === 9n);
  check(`sstoreVariants other ${i}`, (await getSlot(DRIVER, 300n + i)) === 9n);
  check(`sstoreVariants same ${i}`, (await getSlot(DRIVER, 400n + i)) === 5n);
  check(`sstoreVariants zero ${i}`, (await getSlot(DRIVER, 500n + i)) === 0n);
}
// Without loadFirst, on fresh ranges.
r = await call(DRIVER, "Driver", "sstoreVariants(uint256,uint256,uint256,uint256,uint256,uint256,uint256,bool)", [600n, 300n, 400n, 700n, C, 11n, 5n, 0n]);
check("sstoreVariants no load acc", r.ok && toBig(r.ret) === 0n);
check("sstoreVariants no load wrote", (await getSlot(DRIVER, 600n)) === 11n && (await getSlot(DRIVER, 303n)) === 11n && (await getSlot(DRIVER, 700n)) === 0n);

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
