//! Block fixtures for `bintrie exec`: one block, the state it starts from, the hashes BLOCKHASH
//! may ask for, the keys it touches, and (when the fixture records them) the values it leaves.
//!
//! Three formats are read, told apart by their top-level fields:
//! - **zkpi** (`blocks`, `extra`): `blocks[0]` holds `header`, `transaction` (signed, without
//!   `from`: senders are recovered from the signatures), `withdrawals`; `extra.preState` the
//!   pre-state, `extra.accessList` the block's touched keys, `extra.stateDiffs` the changed
//!   accounts and slots with their post values; `witness.ancestors` the recent headers.
//! - **rpccache** (`full_blocks`, optionally gzip-compressed): memoised JSON-RPC answers: the block
//!   and its parent, `balance`/`transaction_count`/`code`/`storage` at the parent (the
//!   pre-state), and `eth_getProof` answers at the parent and at the block (the post values).
//! - **block** (`transactions`, or an RPC envelope with `result`): `eth_getBlockByNumber(n, true)`
//!   output, with the pre-state from a separate file: address -> {basic {balance, nonce}, code
//!   {bytecode, original_len} or null, code_hash, storage}. It has no post values.

use crate::input::{Spellings, json_hex_bytes as hex_bytes, json_u256 as uint, shown};
use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{Transaction as _, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip4895::{Withdrawal, Withdrawals};
use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_rpc_types_eth::{Block, BlockTransactions, Header, Transaction};
use anyhow::{Context, Result, anyhow, bail};
use bintrie_keys::{AccountState, EMPTY_CODE_HASH};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// An account of the pre-state.
#[derive(Clone, Debug)]
pub(super) struct PreAccount {
    /// Nonce, balance, code and non-zero storage.
    pub state: AccountState,
    /// Set when the fixture gives the account's code hash but not its code (an account the
    /// block touches without running its code, e.g. a withdrawal recipient). `state.code` is
    /// then empty and the account is imported with this hash and no code.
    pub code_hash_only: Option<B256>,
}

impl PreAccount {
    /// An account of the pre-state; zero slots are dropped (absent from the tree).
    fn new(
        nonce: u64,
        balance: U256,
        code: Vec<u8>,
        storage: impl IntoIterator<Item = (U256, U256)>,
        code_hash_only: Option<B256>,
    ) -> Self {
        PreAccount {
            state: AccountState {
                nonce,
                balance,
                code,
                storage: storage.into_iter().filter(|(_, v)| !v.is_zero()).collect(),
            },
            code_hash_only,
        }
    }
}

/// For formats that give both code and code hash: `Some(hash)` when the code is missing (an
/// account imported with its hash only), otherwise the code must hash to `code_hash`.
fn code_hash_only(code: &[u8], code_hash: B256, at: &str) -> Result<Option<B256>> {
    if code.is_empty() && code_hash != EMPTY_CODE_HASH {
        return Ok(Some(code_hash));
    }
    check_code(code, code_hash, at)?;
    Ok(None)
}

/// The `slot -> value` entries of a JSON object; one slot spelled twice (`0x1`, `0x01`) is an
/// error.
fn storage_entries(s: &serde_json::Map<String, Value>, at: &str) -> Result<Vec<(U256, U256)>> {
    let mut seen = Spellings::new();
    s.iter()
        .map(|(k, val)| {
            let sat = format!("{at}.storage.{k}");
            let slot = uint(&Value::String(k.clone()), &sat)?;
            seen.insert(slot, k, &format!("`{at}.storage`"), "slot")?;
            Ok((slot, uint(val, &sat)?))
        })
        .collect()
}

/// The block before `number`, the one whose state the fixture gives.
fn parent_of(number: u64) -> Result<u64> {
    number.checked_sub(1).ok_or_else(|| {
        anyhow!("block 0 (genesis) cannot be executed from a fixture: it has no parent state")
    })
}

/// What an account must hold after the block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ExpectedAccount {
    /// Balance, nonce and code hash; `None` when the account must not exist (or be empty).
    pub info: Option<(U256, u64, B256)>,
    /// Storage slots and their values.
    pub storage: BTreeMap<U256, U256>,
}

/// One block to execute, with everything needed around it.
#[derive(Debug)]
pub(super) struct Fixture {
    /// `zkpi`, `rpccache` or `block`.
    pub format: &'static str,
    /// The block, with transactions and senders.
    pub block: Block,
    /// Chain id (only mainnet is supported).
    pub chain_id: u64,
    /// The state before the block.
    pub pre: BTreeMap<Address, PreAccount>,
    /// Recent block hashes (for BLOCKHASH), at least the parent's.
    pub block_hashes: BTreeMap<u64, B256>,
    /// The accounts and slots the block touches, when the fixture records them (a block access
    /// list in the sense of EIP-7928).
    pub access_list: Vec<(Address, Vec<B256>)>,
    /// Post values (every account and slot the fixture knows after the block); `None` when the
    /// fixture has none.
    pub expected: Option<BTreeMap<Address, ExpectedAccount>>,
    /// Problems found while reading that do not stop execution (a header whose hash does not
    /// match its contents, a transaction whose `from` is not its signer...). They make the
    /// block invalid.
    pub problems: Vec<String>,
}

impl Fixture {
    /// The block number.
    pub(super) fn number(&self) -> u64 {
        self.block.header.inner.number
    }
}

/// Reads a fixture (gzip is detected by its magic bytes). `pre_state` is the separate pre-state
/// file of the `block` format; when it is `None` for that format, a sibling file named like the
/// block file with `.block.json` replaced by `.pre_state.json` is used if it exists.
pub(super) fn load(path: &Path, pre_state: Option<&Path>) -> Result<Fixture> {
    let json = read_json(path)?;
    let src = path.display().to_string();
    let Some(obj) = json.as_object() else {
        bail!("{src}: expected a JSON object at the top level");
    };
    let fixture = if obj.contains_key("blocks") || obj.contains_key("extra") {
        no_pre_state_file(pre_state, "zkpi")?;
        load_zkpi(&json).with_context(|| format!("{src} (zkpi fixture)"))?
    } else if obj.contains_key("full_blocks") {
        no_pre_state_file(pre_state, "rpccache")?;
        load_rpccache(&json).with_context(|| format!("{src} (rpccache fixture)"))?
    } else if obj.contains_key("transactions") || obj.contains_key("result") {
        let pre_path = match pre_state {
            Some(p) => p.to_path_buf(),
            None => sibling_pre_state(path).ok_or_else(|| {
                anyhow!(
                    "{src} is a block without a pre-state: pass --pre-state FILE (an address -> \
                     {{basic, code, code_hash, storage}} map)"
                )
            })?,
        };
        let pre_json = read_json(&pre_path)?;
        load_block_with_pre_state(&json, &pre_json).with_context(|| {
            format!(
                "{src} with pre-state {} (block fixture)",
                pre_path.display()
            )
        })?
    } else {
        bail!(
            "{src}: not a known fixture: expected a zkpi fixture (`blocks`, `extra`), an rpccache \
             (`full_blocks`) or an eth_getBlockByNumber block (`transactions`)"
        );
    };
    Ok(fixture)
}

fn no_pre_state_file(pre_state: Option<&Path>, format: &str) -> Result<()> {
    if let Some(p) = pre_state {
        bail!(
            "--pre-state {} applies to block fixtures only: a {format} fixture carries its own \
             pre-state",
            p.display()
        );
    }
    Ok(())
}

fn sibling_pre_state(path: &Path) -> Option<std::path::PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".block.json")?;
    let p = path.with_file_name(format!("{stem}.pre_state.json"));
    p.is_file().then_some(p)
}

/// The largest fixture read, in bytes (of the file, and of its decompressed JSON): the real
/// ones are a few MB, and this stops `--fixture /dev/zero` or a gzip bomb from filling memory.
const MAX_FIXTURE_BYTES: u64 = 256 << 20;

/// Reads all of `r`, at most `MAX_FIXTURE_BYTES`.
fn read_capped(r: impl Read, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(MAX_FIXTURE_BYTES + 1)
        .read_to_end(&mut out)
        .with_context(|| format!("reading {what}"))?;
    if out.len() as u64 > MAX_FIXTURE_BYTES {
        bail!("{what}: larger than {MAX_FIXTURE_BYTES} bytes");
    }
    Ok(out)
}

fn read_json(path: &Path) -> Result<Value> {
    let src = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("reading {src}"))?;
    decode_json(&read_capped(file, &src)?, &src)
}

/// JSON from a file's bytes, gzip-compressed or not (told by the gzip magic bytes).
fn decode_json(raw: &[u8], src: &str) -> Result<Value> {
    let unzipped;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        unzipped = read_capped(
            flate2::read::GzDecoder::new(raw),
            &format!("{src} (decompressing gzip)"),
        )?;
        &unzipped[..]
    } else {
        raw
    };
    let text = std::str::from_utf8(bytes).with_context(|| format!("{src}: not UTF-8"))?;
    serde_json::from_str(text).with_context(|| format!("{src}: not valid JSON"))
}

// ---------------------------------------------------------------------------------------------
// JSON helpers: every error names where in the fixture the value is.

/// `v[key]`, an error naming `at.key` when it is missing or null.
fn field<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Value> {
    match v.get(key) {
        None | Some(Value::Null) => Err(anyhow!("missing `{}`", join(at, key))),
        Some(x) => Ok(x),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn array<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Vec<Value>> {
    field(v, key, at)?
        .as_array()
        .ok_or_else(|| anyhow!("`{}` is not an array", join(at, key)))
}

fn object<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a serde_json::Map<String, Value>> {
    field(v, key, at)?
        .as_object()
        .ok_or_else(|| anyhow!("`{}` is not an object", join(at, key)))
}

fn uint_field(v: &Value, key: &str, at: &str) -> Result<U256> {
    uint(field(v, key, at)?, &join(at, key))
}

fn u64_field(v: &Value, key: &str, at: &str) -> Result<u64> {
    let x = uint_field(v, key, at)?;
    u64::try_from(x).map_err(|_| anyhow!("`{}`: {x} does not fit in 64 bits", join(at, key)))
}

/// 32 bytes from hex (shorter hex is left-padded, as RPC quantities are).
fn word(v: &Value, at: &str) -> Result<B256> {
    Ok(B256::from(uint(v, at)?))
}

fn address(s: &str, at: &str) -> Result<Address> {
    s.parse()
        .map_err(|e| anyhow!("`{at}`: {} is not an address: {e}", shown(s)))
}

fn address_field(v: &Value, key: &str, at: &str) -> Result<Address> {
    let x = field(v, key, at)?;
    address(
        x.as_str()
            .ok_or_else(|| anyhow!("`{}` is not a string", join(at, key)))?,
        &join(at, key),
    )
}

/// Checks that `code` hashes to `code_hash`.
fn check_code(code: &[u8], code_hash: B256, at: &str) -> Result<()> {
    let h = if code.is_empty() {
        EMPTY_CODE_HASH
    } else {
        keccak256(code)
    };
    if h != code_hash {
        bail!("`{at}`: the code hashes to {h}, the fixture says {code_hash}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Blocks

/// Checks a header's hash against its contents (a problem, not an error: the block still runs).
fn check_header_hash(header: &Header, at: &str, problems: &mut Vec<String>) {
    let h = header.inner.hash_slow();
    if h != header.hash {
        problems.push(format!(
            "{at}: header hash {} does not match its contents (which hash to {h}): a header \
             field differs from the real block",
            header.hash
        ));
    }
}

/// Checks the transactions and withdrawals against the header's roots, the `from` of each
/// transaction against its signature, and the absence of uncles (whose headers no fixture has).
fn check_block(block: &Block, verify_senders: bool, problems: &mut Vec<String>) -> Result<()> {
    let header = &block.header.inner;
    check_header_hash(&block.header, "header", problems);
    if !block.uncles.is_empty() {
        bail!(
            "the block has {} uncle(s) and the fixture lacks their headers (needed for uncle rewards)",
            block.uncles.len()
        );
    }
    let txs: Vec<&Transaction> = match &block.transactions {
        BlockTransactions::Full(t) => t.iter().collect(),
        BlockTransactions::Hashes(h) if h.is_empty() => Vec::new(),
        _ => bail!("`transactions`: full transaction objects are needed, not hashes"),
    };
    let envelopes: Vec<TxEnvelope> = txs.iter().map(|t| t.inner.inner().clone()).collect();
    let root = alloy_consensus::proofs::calculate_transaction_root(&envelopes);
    if root != header.transactions_root {
        problems.push(format!(
            "transactions root: header {}, the fixture's transactions give {root}",
            header.transactions_root
        ));
    }
    for (i, t) in txs.iter().enumerate().filter(|_| verify_senders) {
        let signer = t
            .inner
            .inner()
            .recover_signer()
            .map_err(|e| anyhow!("transaction {i}: cannot recover the sender: {e}"))?;
        if signer != t.inner.signer() {
            problems.push(format!(
                "transaction {i}: `from` is {}, the signature gives {signer}",
                t.inner.signer()
            ));
        }
    }
    match (&block.withdrawals, header.withdrawals_root) {
        (Some(w), Some(root)) => {
            let got = alloy_consensus::proofs::calculate_withdrawals_root(w);
            if got != root {
                problems.push(format!(
                    "withdrawals root: header {root}, the fixture's withdrawals give {got}"
                ));
            }
        }
        (None, Some(_)) => bail!("missing `withdrawals` (the header has a withdrawals root)"),
        _ => {}
    }
    Ok(())
}

/// A transaction from its signed JSON: senders are recovered from the signature, and the
/// JSON's `hash` (when present) must be the transaction's.
fn tx_from_signed_json(
    v: &Value,
    i: usize,
    header: &Header,
    problems: &mut Vec<String>,
) -> Result<Transaction> {
    let at = format!("transaction[{i}]");
    let env: TxEnvelope =
        serde_json::from_value(v.clone()).with_context(|| format!("`{at}`: not a transaction"))?;
    let signer = env
        .recover_signer()
        .map_err(|e| anyhow!("`{at}`: cannot recover the sender: {e}"))?;
    if let Some(h) = v.get("hash").filter(|h| !h.is_null()) {
        let h = word(h, &format!("{at}.hash"))?;
        let got = env.trie_hash();
        if got != h {
            problems.push(format!(
                "{at}: hash {h} does not match its contents (which hash to {got})"
            ));
        }
    }
    Ok(Transaction {
        inner: alloy_consensus::transaction::Recovered::new_unchecked(env, signer),
        block_hash: Some(header.hash),
        block_number: Some(header.inner.number),
        transaction_index: Some(i as u64),
        effective_gas_price: None,
        block_timestamp: Some(header.inner.timestamp),
    })
}

/// An `eth_getBlockByNumber(n, true)` block; also checks each transaction's hash.
fn rpc_block(v: &Value, problems: &mut Vec<String>) -> Result<Block> {
    // Name a missing header field before serde's generic message.
    for key in [
        "hash",
        "parentHash",
        "number",
        "gasUsed",
        "timestamp",
        "transactions",
    ] {
        field(v, key, "")?;
    }
    for (i, t) in array(v, "transactions", "")?.iter().enumerate() {
        if t.is_object() {
            field(t, "from", &format!("transactions[{i}]"))?;
        }
    }
    let block: Block = serde_json::from_value(v.clone()).context("not a valid block")?;
    if let BlockTransactions::Full(txs) = &block.transactions {
        let raw = array(v, "transactions", "")?;
        for (i, (t, j)) in txs.iter().zip(raw).enumerate() {
            let h = word(field(j, "hash", &format!("transactions[{i}]"))?, "hash")?;
            let got = t.inner.inner().trie_hash();
            if got != h {
                problems.push(format!(
                    "transactions[{i}]: hash {h} does not match its contents (which hash to {got})"
                ));
            }
        }
    }
    Ok(block)
}

/// The access list of the pre-state's keys.
fn access_list_of(pre: &BTreeMap<Address, Vec<U256>>) -> Vec<(Address, Vec<B256>)> {
    pre.iter()
        .map(|(a, slots)| (*a, slots.iter().map(|s| B256::from(*s)).collect()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// zkpi

fn load_zkpi(root: &Value) -> Result<Fixture> {
    let mut problems = Vec::new();
    let blocks = array(root, "blocks", "")?;
    let b = blocks
        .first()
        .ok_or_else(|| anyhow!("`blocks` is empty: the fixture has no block"))?;
    if blocks.len() > 1 {
        bail!("`blocks` has {} blocks: exec runs one block", blocks.len());
    }
    let header_v = field(b, "header", "blocks[0]")?;
    for key in [
        "hash",
        "parentHash",
        "number",
        "gasUsed",
        "gasLimit",
        "timestamp",
        "miner",
        "receiptsRoot",
        "logsBloom",
    ] {
        field(header_v, key, "blocks[0].header")?;
    }
    let header: Header = serde_json::from_value(header_v.clone())
        .context("`blocks[0].header` is not a valid header")?;
    let txs = array(b, "transaction", "blocks[0]")?
        .iter()
        .enumerate()
        .map(|(i, t)| tx_from_signed_json(t, i, &header, &mut problems))
        .collect::<Result<Vec<_>>>()
        .context("blocks[0]")?;
    let withdrawals = match b.get("withdrawals") {
        None | Some(Value::Null) => None,
        Some(w) => Some(Withdrawals::new(
            serde_json::from_value::<Vec<Withdrawal>>(w.clone())
                .context("`blocks[0].withdrawals` is not a list of withdrawals")?,
        )),
    };
    let uncles: Vec<B256> = match b.get("uncles") {
        None | Some(Value::Null) => Vec::new(),
        Some(u) => serde_json::from_value(u.clone())
            .context("`blocks[0].uncles` is not a list of hashes")?,
    };
    let block = Block {
        header,
        uncles,
        transactions: BlockTransactions::Full(txs),
        withdrawals,
    };
    let number = block.header.inner.number;
    let parent = parent_of(number)?;
    check_block(&block, false, &mut problems)?;

    let chain_id = match root.get("chainConfig").and_then(|c| c.get("chainId")) {
        Some(c) => u64::try_from(uint(c, "chainConfig.chainId")?)
            .map_err(|_| anyhow!("`chainConfig.chainId` does not fit in 64 bits"))?,
        None => 1,
    };

    // Recent hashes: the ancestors' headers (each checked against its `hash`) and the parent.
    let mut block_hashes = BTreeMap::new();
    block_hashes.insert(parent, block.header.inner.parent_hash);
    if let Some(anc) = root.get("witness").and_then(|w| w.get("ancestors")) {
        let anc = anc
            .as_array()
            .ok_or_else(|| anyhow!("`witness.ancestors` is not an array"))?;
        for (i, a) in anc.iter().enumerate() {
            let at = format!("witness.ancestors[{i}]");
            let h: alloy_consensus::Header = serde_json::from_value(a.clone())
                .with_context(|| format!("`{at}` is not a valid header"))?;
            let hash = h.hash_slow();
            if let Some(given) = a.get("hash").filter(|x| !x.is_null()) {
                let given = word(given, &format!("{at}.hash"))?;
                if given != hash {
                    problems.push(format!(
                        "{at}: hash {given} does not match its contents (which hash to {hash})"
                    ));
                }
            }
            if let Some(prev) = block_hashes.insert(h.number, hash)
                && prev != hash
            {
                problems.push(format!(
                    "{at}: block {} hashes to {hash}, but the next header names {prev} as its parent",
                    h.number
                ));
            }
        }
    }

    let extra = field(root, "extra", "")?;
    let pre_v = object(extra, "preState", "extra")?;
    let mut addresses = Spellings::new();
    let mut pre = BTreeMap::new();
    let mut expected: BTreeMap<Address, ExpectedAccount> = BTreeMap::new();
    for (addr, v) in pre_v {
        let at = format!("extra.preState.{addr}");
        let a = address(addr, &at)?;
        addresses.insert(a, addr, "`extra.preState`", "address")?;
        if v.is_null() {
            expected.insert(a, ExpectedAccount::default());
            continue;
        }
        let balance = uint_field(v, "balance", &at)?;
        let nonce = u64_field(v, "nonce", &at)?;
        let code_hash = word(field(v, "codeHash", &at)?, &join(&at, "codeHash"))?;
        let code = match v.get("code").filter(|c| !c.is_null()) {
            Some(c) => hex_bytes(c, &join(&at, "code"))?,
            None => Vec::new(),
        };
        let hash_only = code_hash_only(&code, code_hash, &join(&at, "code"))?;
        let storage = match v.get("storage").filter(|s| !s.is_null()) {
            Some(s) => storage_entries(
                s.as_object()
                    .ok_or_else(|| anyhow!("`{at}.storage` is not an object"))?,
                &at,
            )?,
            None => Vec::new(),
        };
        expected.insert(
            a,
            ExpectedAccount {
                info: Some((balance, nonce, code_hash)),
                storage: storage.iter().copied().collect(),
            },
        );
        pre.insert(a, PreAccount::new(nonce, balance, code, storage, hash_only));
    }

    // Post values: the pre-state with the changed accounts and slots applied.
    for (i, d) in array(extra, "stateDiffs", "extra")?.iter().enumerate() {
        let at = format!("extra.stateDiffs[{i}]");
        let a = address_field(d, "address", &at)?;
        let e = expected.entry(a).or_default();
        e.info = match d.get("postAccount") {
            None | Some(Value::Null) => None,
            Some(p) => {
                let pat = join(&at, "postAccount");
                Some((
                    uint_field(p, "balance", &pat)?,
                    u64_field(p, "nonce", &pat)?,
                    word(field(p, "codeHash", &pat)?, &join(&pat, "codeHash"))?,
                ))
            }
        };
        if let Some(s) = d.get("storage").filter(|s| !s.is_null()) {
            let s = s
                .as_array()
                .ok_or_else(|| anyhow!("`{at}.storage` is not an array"))?;
            for (j, slot) in s.iter().enumerate() {
                let sat = format!("{at}.storage[{j}]");
                e.storage.insert(
                    uint_field(slot, "storageKey", &sat)?,
                    uint_field(slot, "postValue", &sat)?,
                );
            }
        }
    }

    let mut access_list = Vec::new();
    for (i, item) in array(extra, "accessList", "extra")?.iter().enumerate() {
        let at = format!("extra.accessList[{i}]");
        let a = address_field(item, "address", &at)?;
        let keys = match item.get("storageKeys") {
            None | Some(Value::Null) => Vec::new(),
            Some(k) => k
                .as_array()
                .ok_or_else(|| anyhow!("`{at}.storageKeys` is not an array"))?
                .iter()
                .enumerate()
                .map(|(j, k)| word(k, &format!("{at}.storageKeys[{j}]")))
                .collect::<Result<Vec<_>>>()?,
        };
        access_list.push((a, keys));
    }

    Ok(Fixture {
        format: "zkpi",
        block,
        chain_id,
        pre,
        block_hashes,
        access_list,
        expected: Some(expected),
        problems,
    })
}

// ---------------------------------------------------------------------------------------------
// eth_getBlockByNumber + pre-state file

fn load_block_with_pre_state(block_v: &Value, pre_v: &Value) -> Result<Fixture> {
    let mut problems = Vec::new();
    let block_v = match block_v.get("result") {
        Some(r) if r.is_object() => r,
        Some(_) => bail!("`result` is not a block"),
        None => block_v,
    };
    let block = rpc_block(block_v, &mut problems)?;
    let parent = parent_of(block.header.inner.number)?;
    check_block(&block, true, &mut problems)?;
    let chain_id = block
        .transactions
        .txns()
        .find_map(|t| t.inner.chain_id())
        .unwrap_or(1);

    let pre_obj = pre_v
        .as_object()
        .ok_or_else(|| anyhow!("the pre-state is not an object (address -> account)"))?;
    let mut pre = BTreeMap::new();
    let mut keys: BTreeMap<Address, Vec<U256>> = BTreeMap::new();
    let mut addresses = Spellings::new();
    for (addr, v) in pre_obj {
        let at = format!("pre-state {addr}");
        let a = address(addr, &at)?;
        addresses.insert(a, addr, "the pre-state", "address")?;
        let basic = field(v, "basic", &at)?;
        let bat = join(&at, "basic");
        let balance = uint_field(basic, "balance", &bat)?;
        let nonce = u64_field(basic, "nonce", &bat)?;
        let code = match v.get("code") {
            None => bail!("missing `{at}.code` (null for an account without code)"),
            Some(Value::Null) => Vec::new(),
            Some(c) => {
                let cat = join(&at, "code");
                let mut bytes = hex_bytes(field(c, "bytecode", &cat)?, &join(&cat, "bytecode"))?;
                let len = u64_field(c, "original_len", &cat)?;
                if len > bytes.len() as u64 {
                    bail!(
                        "`{cat}.original_len` is {len} but the bytecode has {} bytes",
                        bytes.len()
                    );
                }
                bytes.truncate(len as usize); // <= bytes.len()
                bytes
            }
        };
        let code_hash = match v.get("code_hash") {
            None => bail!("missing `{at}.code_hash` (null for an account without code)"),
            Some(Value::Null) => EMPTY_CODE_HASH,
            Some(h) => word(h, &join(&at, "code_hash"))?,
        };
        let hash_only = code_hash_only(&code, code_hash, &join(&at, "code"))?;
        let storage = storage_entries(object(v, "storage", &at)?, &at)?;
        keys.insert(a, storage.iter().map(|(k, _)| *k).collect());
        pre.insert(a, PreAccount::new(nonce, balance, code, storage, hash_only));
    }
    let block_hashes = BTreeMap::from([(parent, block.header.inner.parent_hash)]);
    Ok(Fixture {
        format: "block",
        access_list: access_list_of(&keys),
        block,
        chain_id,
        pre,
        block_hashes,
        expected: None,
        problems,
    })
}

// ---------------------------------------------------------------------------------------------
// rpccache

/// The entries of an rpccache table: `[[request, answer], ...]`.
fn entries<'a>(root: &'a Value, table: &str) -> Result<Vec<(&'a Value, &'a Value)>> {
    array(root, table, "")?
        .iter()
        .enumerate()
        .map(|(i, e)| match e.as_array().map(|a| a.as_slice()) {
            Some([req, ans]) => Ok((req, ans)),
            _ => Err(anyhow!("`{table}[{i}]` is not a [request, answer] pair")),
        })
        .collect()
}

fn block_no(req: &Value, at: &str) -> Result<u64> {
    u64_field(req, "block_no", at)
}

/// One account from `eth_getProof`.
struct Proof {
    balance: U256,
    nonce: u64,
    code_hash: B256,
    storage: Vec<(U256, U256)>,
}

fn proof(ans: &Value, at: &str) -> Result<Proof> {
    let mut storage = Vec::new();
    if let Some(sp) = ans.get("storageProof").filter(|s| !s.is_null()) {
        let sp = sp
            .as_array()
            .ok_or_else(|| anyhow!("`{at}.storageProof` is not an array"))?;
        for (j, s) in sp.iter().enumerate() {
            let sat = format!("{at}.storageProof[{j}]");
            storage.push((uint_field(s, "key", &sat)?, uint_field(s, "value", &sat)?));
        }
    }
    Ok(Proof {
        balance: uint_field(ans, "balance", at)?,
        nonce: u64_field(ans, "nonce", at)?,
        code_hash: word(field(ans, "codeHash", at)?, &join(at, "codeHash"))?,
        storage,
    })
}

fn load_rpccache(root: &Value) -> Result<Fixture> {
    let mut problems = Vec::new();
    let mut blocks: BTreeMap<u64, &Value> = BTreeMap::new();
    for (i, (req, b)) in entries(root, "full_blocks")?.into_iter().enumerate() {
        blocks.insert(block_no(req, &format!("full_blocks[{i}][0]"))?, b);
    }
    let (&number, block_v) = blocks
        .iter()
        .next_back()
        .ok_or_else(|| anyhow!("`full_blocks` is empty: the fixture has no block"))?;
    let block = rpc_block(block_v, &mut problems)
        .with_context(|| format!("full_blocks: block {number}"))?;
    if block.header.inner.number != number {
        bail!(
            "`full_blocks`: the entry for block {number} holds block {}",
            block.header.inner.number
        );
    }
    let parent = parent_of(number)?;
    check_block(&block, true, &mut problems)?;
    let chain_id = block
        .transactions
        .txns()
        .find_map(|t| t.inner.chain_id())
        .unwrap_or(1);

    let mut block_hashes = BTreeMap::from([(parent, block.header.inner.parent_hash)]);
    for (&n, b) in &blocks {
        if n == number {
            continue;
        }
        let at = format!("full_blocks: block {n}");
        let h: Header = serde_json::from_value((*b).clone())
            .with_context(|| format!("`{at}` has no valid header"))?;
        check_header_hash(&h, &at, &mut problems);
        if let Some(prev) = block_hashes.insert(n, h.hash)
            && prev != h.hash
        {
            problems.push(format!(
                "{at}: hash {}, but block {number} names {prev} as its parent",
                h.hash
            ));
        }
    }

    // The pre-state at the parent: balance, nonce, code and storage answers.
    let at_parent = |table: &str| -> Result<BTreeMap<Address, &Value>> {
        let mut m = BTreeMap::new();
        for (i, (req, ans)) in entries(root, table)?.into_iter().enumerate() {
            let at = format!("{table}[{i}][0]");
            if block_no(req, &at)? == parent {
                m.insert(address_field(req, "address", &at)?, ans);
            }
        }
        Ok(m)
    };
    let balances = at_parent("balance")?;
    let nonces = at_parent("transaction_count")?;
    let codes = at_parent("code")?;
    let mut slots: BTreeMap<Address, BTreeMap<U256, U256>> = BTreeMap::new();
    for (i, (req, ans)) in entries(root, "storage")?.into_iter().enumerate() {
        let at = format!("storage[{i}]");
        if block_no(req, &format!("{at}[0]"))? != parent {
            continue;
        }
        let a = address_field(req, "address", &format!("{at}[0]"))?;
        let k = uint_field(req, "index", &format!("{at}[0]"))?;
        slots
            .entry(a)
            .or_default()
            .insert(k, uint(ans, &format!("{at}[1]"))?);
    }

    // Proofs at the parent (cross-checked against the answers above, and extending the known
    // slots) and at the block (the post values).
    let mut expected: BTreeMap<Address, ExpectedAccount> = BTreeMap::new();
    let mut parent_proofs: BTreeMap<Address, Proof> = BTreeMap::new();
    for (i, (req, ans)) in entries(root, "proofs")?.into_iter().enumerate() {
        let at = format!("proofs[{i}]");
        let n = block_no(req, &format!("{at}[0]"))?;
        let a = address_field(ans, "address", &format!("{at}[1]"))?;
        let p = proof(ans, &format!("{at}[1]"))?;
        if n == number {
            let e = expected.entry(a).or_default();
            let exists = !(p.nonce == 0
                && p.balance.is_zero()
                && (p.code_hash == EMPTY_CODE_HASH || p.code_hash == B256::ZERO));
            e.info = exists.then_some((p.balance, p.nonce, p.code_hash));
            e.storage.extend(p.storage.iter().copied());
        } else if n == parent {
            parent_proofs.insert(a, p);
        }
    }
    if expected.is_empty() {
        bail!("`proofs` has no answer at block {number}: the fixture has no post values");
    }

    let mut pre = BTreeMap::new();
    let mut keys: BTreeMap<Address, Vec<U256>> = BTreeMap::new();
    let mut addresses: Vec<Address> = balances.keys().copied().collect();
    addresses.extend(parent_proofs.keys().copied());
    addresses.extend(slots.keys().copied());
    addresses.sort_unstable();
    addresses.dedup();
    for a in addresses {
        let at = format!("account {a} at block {parent}");
        let balance = match (balances.get(&a), parent_proofs.get(&a)) {
            (Some(b), _) => uint(b, &format!("balance of {a}"))?,
            (None, Some(p)) => p.balance,
            (None, None) => bail!("{at}: missing `balance`"),
        };
        let nonce = match (nonces.get(&a), parent_proofs.get(&a)) {
            (Some(n), _) => u64::try_from(uint(n, &format!("transaction_count of {a}"))?)
                .map_err(|_| anyhow!("{at}: nonce does not fit in 64 bits"))?,
            (None, Some(p)) => p.nonce,
            (None, None) => bail!("{at}: missing `transaction_count`"),
        };
        let code = match codes.get(&a) {
            Some(c) => hex_bytes(c, &format!("code of {a}"))?,
            None => Vec::new(),
        };
        let mut storage = slots.remove(&a).unwrap_or_default();
        let mut hash_only = None;
        if let Some(p) = parent_proofs.get(&a) {
            if p.balance != balance || p.nonce != nonce {
                bail!(
                    "{at}: eth_getProof says balance {} nonce {}, eth_getBalance/\
                     eth_getTransactionCount say {balance} {nonce}",
                    p.balance,
                    p.nonce
                );
            }
            let proof_hash = if p.code_hash == B256::ZERO {
                EMPTY_CODE_HASH
            } else {
                p.code_hash
            };
            if codes.contains_key(&a) {
                check_code(&code, proof_hash, &format!("code of {a}"))?;
            } else if proof_hash != EMPTY_CODE_HASH {
                hash_only = Some(proof_hash);
            }
            for (k, v) in &p.storage {
                if let Some(old) = storage.insert(*k, *v)
                    && old != *v
                {
                    bail!(
                        "{at}: slot {k} is {old} in `storage` but {v} in its eth_getProof answer"
                    );
                }
            }
        } else if !codes.contains_key(&a) {
            bail!("{at}: missing `code` (and no eth_getProof answer gives its code hash)");
        }
        keys.insert(a, storage.keys().copied().collect());
        if nonce == 0 && balance.is_zero() && code.is_empty() && hash_only.is_none() {
            if storage.values().any(|v| !v.is_zero()) {
                bail!("{at}: an empty account with non-zero storage");
            }
            continue; // absent
        }
        pre.insert(a, PreAccount::new(nonce, balance, code, storage, hash_only));
    }

    Ok(Fixture {
        format: "rpccache",
        access_list: access_list_of(&keys),
        block,
        chain_id,
        pre,
        block_hashes,
        expected: Some(expected),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::tests::arb_json;
    use alloy_consensus::{SignableTransaction, TxEip1559};
    use alloy_primitives::{Signature, TxKind, address, bytes};
    use proptest::prelude::*;
    use serde_json::json;

    const A: Address = address!("00000000000000000000000000000000000000aa");
    const B: Address = address!("00000000000000000000000000000000000000bb");

    /// A transaction "signed" with a made-up signature that recovers to some sender.
    fn signed_tx() -> (TxEnvelope, Address) {
        let tx = TxEip1559 {
            chain_id: 1,
            nonce: 1,
            gas_limit: 21_000,
            max_fee_per_gas: 10,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(B),
            value: U256::from(3),
            ..Default::default()
        };
        (1u64..)
            .find_map(|r| {
                let env = TxEnvelope::from(tx.clone().into_signed(Signature::new(
                    U256::from(r),
                    U256::from(1),
                    false,
                )));
                env.recover_signer().ok().map(|s| (env, s))
            })
            .unwrap()
    }

    const CODE: &[u8] = &[0x60, 0x00];

    /// A consistent block 1 (one transaction, one withdrawal) and its parent's header.
    fn blocks() -> (Block, Header, Vec<Value>) {
        let (env, from) = signed_tx();
        let withdrawals = Withdrawals::new(vec![Withdrawal {
            index: 0,
            validator_index: 1,
            address: B,
            amount: 5,
        }]);
        let parent = Header::new(alloy_consensus::Header::default());
        let inner = alloy_consensus::Header {
            number: 1,
            parent_hash: parent.hash,
            gas_limit: 30_000_000,
            timestamp: 12,
            transactions_root: alloy_consensus::proofs::calculate_transaction_root(
                std::slice::from_ref(&env),
            ),
            withdrawals_root: Some(alloy_consensus::proofs::calculate_withdrawals_root(
                &withdrawals,
            )),
            ..Default::default()
        };
        let header = Header::new(inner);
        let tx = Transaction {
            inner: alloy_consensus::transaction::Recovered::new_unchecked(env.clone(), from),
            block_hash: Some(header.hash),
            block_number: Some(1),
            transaction_index: Some(0),
            effective_gas_price: None,
            block_timestamp: Some(12),
        };
        let block = Block {
            header,
            uncles: vec![],
            transactions: BlockTransactions::Full(vec![tx]),
            withdrawals: Some(withdrawals),
        };
        let mut signed = serde_json::to_value(&env).unwrap();
        signed["hash"] = json!(env.trie_hash());
        (block, parent, vec![signed])
    }

    fn zkpi_json() -> Value {
        let (block, parent, txs) = blocks();
        let code_hash = keccak256(CODE);
        json!({
            "chainConfig": {"chainId": 1},
            "blocks": [{
                "header": block.header,
                "transaction": txs,
                "withdrawals": block.withdrawals,
            }],
            "witness": {"ancestors": [parent.inner]},
            "extra": {
                "preState": {
                    A.to_string(): {
                        "balance": "0x10", "nonce": "0x1", "codeHash": code_hash,
                        "code": "0x6000", "storage": {"0x1": "0x2"},
                    },
                    B.to_string(): null,
                },
                "stateDiffs": [{
                    "address": A,
                    "postAccount": {"balance": "0x11", "nonce": "0x1", "codeHash": code_hash},
                    "storage": [{"storageKey": "0x1", "postValue": "0x3"}],
                }],
                "accessList": [{"address": A, "storageKeys": ["0x01"]}],
            },
        })
    }

    fn block_json() -> (Value, Value) {
        let (block, _, _) = blocks();
        let pre = json!({
            A.to_string(): {
                "basic": {"balance": "0x10", "nonce": "0x1"},
                "code": {"bytecode": "0x600000", "original_len": 2},
                "code_hash": keccak256(CODE),
                "storage": {"0x1": "0x2"},
            },
            B.to_string(): {
                "basic": {"balance": "0x0", "nonce": "0x0"},
                "code": null, "code_hash": null, "storage": {},
            },
        });
        (serde_json::to_value(&block).unwrap(), pre)
    }

    fn rpccache_json() -> Value {
        let (block, parent, _) = blocks();
        let code_hash = keccak256(CODE);
        let at = |n: u64| json!({"block_no": n, "address": A});
        json!({
            "full_blocks": [[{"block_no": 1}, block], [{"block_no": 0}, parent]],
            "balance": [[at(0), "0x10"]],
            "transaction_count": [[at(0), "0x1"]],
            "code": [[at(0), bytes!("6000")]],
            "storage": [[{"block_no": 0, "address": A, "index": "0x1"}, "0x2"]],
            "proofs": [
                [at(1), {"address": A, "balance": "0x11", "nonce": "0x1", "codeHash": code_hash,
                         "storageProof": [{"key": "0x1", "value": "0x3"}]}],
                [at(0), {"address": A, "balance": "0x10", "nonce": "0x1", "codeHash": code_hash,
                         "storageProof": [{"key": "0x1", "value": "0x2"}]}],
            ],
        })
    }

    #[test]
    fn synthetic_fixtures_load_without_problems() {
        let fx = load_zkpi(&zkpi_json()).unwrap();
        assert_eq!(
            (fx.number(), fx.problems.len()),
            (1, 0),
            "{:?}",
            fx.problems
        );
        assert_eq!(fx.pre[&A].state.code, CODE);
        let (b, pre) = block_json();
        let fx = load_block_with_pre_state(&b, &pre).unwrap();
        assert_eq!(
            (fx.number(), fx.problems.len()),
            (1, 0),
            "{:?}",
            fx.problems
        );
        assert_eq!(fx.pre[&A].state.code, CODE);
        let fx = load_rpccache(&rpccache_json()).unwrap();
        assert_eq!(
            (fx.number(), fx.problems.len()),
            (1, 0),
            "{:?}",
            fx.problems
        );
        assert_eq!(fx.pre[&A].state.storage, [(U256::from(1), U256::from(2))]);
    }

    /// Block 0 used to reach `number - 1` (an overflow panic in debug builds).
    #[test]
    fn block_zero_is_an_error_not_an_overflow() {
        const MSG: &str = "block 0 (genesis) cannot be executed from a fixture";
        let mut z = zkpi_json();
        z["blocks"][0]["header"]["number"] = json!("0x0");
        let err = format!("{:#}", load_zkpi(&z).unwrap_err());
        assert!(err.contains(MSG), "{err}");
        let (mut b, pre) = block_json();
        b["number"] = json!("0x0");
        let err = format!("{:#}", load_block_with_pre_state(&b, &pre).unwrap_err());
        assert!(err.contains(MSG), "{err}");
        let err = format!(
            "{:#}",
            load_block_with_pre_state(&json!({ "result": b }), &pre).unwrap_err()
        );
        assert!(err.contains(MSG), "{err}");
        let mut r = rpccache_json();
        r["full_blocks"][0][0]["block_no"] = json!(0);
        r["full_blocks"][0][1]["number"] = json!("0x0");
        r["full_blocks"].as_array_mut().unwrap().truncate(1);
        let err = format!("{:#}", load_rpccache(&r).unwrap_err());
        assert!(err.contains(MSG), "{err}");
    }

    #[test]
    fn an_address_or_slot_spelled_twice_is_refused() {
        let mut z = zkpi_json();
        let pre = z["extra"]["preState"].as_object_mut().unwrap();
        let a = pre[&A.to_string()].clone();
        let bare = hex::encode(A); // no 0x, lower case (`A.to_string()` is checksummed)
        assert!(!pre.contains_key(&bare));
        pre.insert(bare.clone(), a);
        let err = format!("{:#}", load_zkpi(&z).unwrap_err());
        assert!(err.contains("same address") && err.contains(&bare), "{err}");

        let (b, mut pre) = block_json();
        pre[A.to_string()]["storage"]["0x01"] = json!("0x9");
        let err = format!("{:#}", load_block_with_pre_state(&b, &pre).unwrap_err());
        assert!(
            err.contains("same slot") && err.contains("\"0x01\""),
            "{err}"
        );
    }

    #[test]
    fn decode_json_reads_gzip_and_names_bad_bytes() {
        use flate2::{Compression, write::GzEncoder};
        use std::io::Write;
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(b"{\"a\": 1}").unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(decode_json(&gz, "f").unwrap(), json!({"a": 1}));
        let err = format!("{:#}", decode_json(&gz[..gz.len() - 4], "f").unwrap_err());
        assert!(err.starts_with("reading f (decompressing gzip)"), "{err}");
        let err = format!("{:#}", decode_json(b"\xff{}", "f").unwrap_err());
        assert!(err.starts_with("f: not UTF-8"), "{err}");
        let err = format!("{:#}", decode_json(b"{", "f").unwrap_err());
        assert!(err.starts_with("f: not valid JSON"), "{err}");
    }

    // -----------------------------------------------------------------------------------------
    // Property tests: arbitrary and mutated fixtures give a fixture or an error, never a panic.

    /// One change somewhere in a JSON document.
    #[derive(Clone, Debug)]
    enum Op {
        /// Replace the node with an arbitrary value.
        Replace(Value),
        /// Replace the node with a value chosen to hit edge cases (zero, signs, overflow...).
        Special(usize),
        /// Remove the node from its object or array.
        Remove,
        /// Add a key (objects) or an element (arrays) next to the node.
        Insert(String, Value),
        /// Insert a string into a string node at a (char) position.
        EditString(usize, String),
    }

    fn special(i: usize) -> Value {
        let values = [
            json!("0x0"),
            json!("0x0"),
            json!("0x00"),
            json!("0x"),
            json!(""),
            json!("0"),
            json!(0),
            json!("-1"),
            json!(-1),
            json!("+1"),
            json!("0x+1"),
            json!("1_0"),
            json!(" 1"),
            json!("0xé0"),
            json!(format!("0x{}", "f".repeat(64))),
            json!(format!("0x1{}", "0".repeat(64))),
            json!(format!("0x{}", "f".repeat(16))),
            json!("18446744073709551616"),
            json!(1e300),
            json!(u64::MAX),
            Value::Null,
            json!([]),
            json!({}),
            json!(true),
            json!("0x00000000000000000000000000000000000000aa"),
            json!("00000000000000000000000000000000000000AA"),
        ];
        values[i % values.len()].clone()
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => arb_json().prop_map(Op::Replace),
            3 => any::<usize>().prop_map(Op::Special),
            2 => Just(Op::Remove),
            1 => (
                prop_oneof![
                    prop::sample::select(vec![
                        "hash", "number", "transactions", "withdrawals", "code", "storage",
                        "blocks", "extra", "full_blocks", "result", "postAccount", "original_len",
                    ]).prop_map(String::from),
                    "[a-zA-Z]{1,8}",
                ],
                arb_json(),
            ).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (any::<usize>(), "[0-9a-fA-F+\\-_ xé]{0,3}")
                .prop_map(|(i, s)| Op::EditString(i, s)),
        ]
    }

    /// One step of a path into a JSON document.
    #[derive(Clone, Debug)]
    enum Step {
        Key(String),
        Index(usize),
    }

    /// The paths of every node of `v` (itself included), depth first.
    fn node_paths(v: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        out.push(path.clone());
        match v {
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    path.push(Step::Index(i));
                    node_paths(x, path, out);
                    path.pop();
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    path.push(Step::Key(k.clone()));
                    node_paths(x, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
        path.iter().fold(v, |v, step| match step {
            Step::Key(k) => &mut v[k.as_str()],
            Step::Index(i) => &mut v[*i],
        })
    }

    /// Applies `op` to the node numbered `pick` (modulo the node count, depth first), so that
    /// every node of the document is as likely to change.
    fn mutate(v: &mut Value, pick: usize, op: &Op) {
        let mut paths = Vec::new();
        node_paths(v, &mut Vec::new(), &mut paths);
        let path = &paths[pick % paths.len()];
        match (op, path.split_last()) {
            (Op::Remove, Some((last, parent))) => match (node_mut(v, parent), last) {
                (Value::Array(a), Step::Index(i)) => {
                    a.remove(*i);
                }
                (Value::Object(o), Step::Key(k)) => {
                    o.remove(k);
                }
                _ => unreachable!("a path names a child of its parent"),
            },
            (Op::Insert(key, x), Some((last, parent))) => match (node_mut(v, parent), last) {
                (Value::Array(a), Step::Index(i)) => a.insert(*i, x.clone()),
                (Value::Object(o), Step::Key(_)) => {
                    o.insert(key.clone(), x.clone());
                }
                _ => unreachable!("a path names a child of its parent"),
            },
            _ => apply_at_leaf(node_mut(v, path), op),
        }
    }

    fn apply_at_leaf(v: &mut Value, op: &Op) {
        match op {
            Op::Replace(x) => *v = x.clone(),
            Op::Special(i) => *v = special(*i),
            Op::Remove => *v = Value::Null,
            Op::Insert(..) => {}
            Op::EditString(i, s) => {
                if let Value::String(t) = v {
                    let at = t
                        .char_indices()
                        .map(|(j, _)| j)
                        .nth(*i % (t.chars().count() + 1));
                    t.insert_str(at.unwrap_or(t.len()), s);
                }
            }
        }
    }

    fn arb_mutations() -> impl Strategy<Value = Vec<(usize, Op)>> {
        prop::collection::vec((any::<usize>(), arb_op()), 1..4)
    }

    fn mutated(mut v: Value, muts: &[(usize, Op)]) -> Value {
        for (pick, op) in muts {
            mutate(&mut v, *pick, op);
        }
        v
    }

    /// Every loader and the format dispatch of [`load`], on one document.
    fn load_every_way(v: &Value, pre: &Value) {
        let _ = load_zkpi(v);
        let _ = load_rpccache(v);
        let _ = load_block_with_pre_state(v, pre);
        let _ = load_block_with_pre_state(pre, v);
    }

    /// The recorded mainnet fixtures, cut down to a few transactions, accounts and entries (so
    /// that a case stays fast); `None` when they are not on this machine.
    fn real_fixtures() -> Option<Vec<(Value, Value)>> {
        let dir = match std::env::var("BINTRIE_FIXTURES") {
            Ok(d) => std::path::PathBuf::from(d),
            Err(_) => {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/mainnet")
            }
        };
        if !dir.is_dir() {
            eprintln!(
                "skipping the mutated real fixtures: {} not found",
                dir.display()
            );
            return None;
        }
        fn cut(v: &mut Value, n: usize) {
            match v {
                Value::Array(a) => a.truncate(n),
                Value::Object(o) => {
                    let keep: serde_json::Map<String, Value> =
                        std::mem::take(o).into_iter().take(n).collect();
                    *o = keep;
                }
                _ => {}
            }
        }
        let read = |name: &str| read_json(&dir.join(name)).ok();
        let mut out = Vec::new();
        for name in ["22615247-prague.zkpi.json", "22188088-cancun.zkpi.json"] {
            let Some(mut z) = read(name) else { continue };
            cut(&mut z["blocks"][0]["transaction"], 2);
            for k in ["preState", "stateDiffs", "accessList"] {
                cut(&mut z["extra"][k], 3);
            }
            cut(&mut z["witness"]["ancestors"], 2);
            out.push((z, Value::Null));
        }
        if let (Some(mut b), Some(mut pre)) = (
            read("19426587-cancun.block.json"),
            read("19426587-cancun.pre_state.json"),
        ) {
            let b2 = if b.get("result").is_some() {
                &mut b["result"]
            } else {
                &mut b
            };
            cut(&mut b2["transactions"], 2);
            cut(&mut pre, 3);
            out.push((b, pre));
        }
        if let Some(mut r) = read("21230867-cancun.rpccache.json.gz") {
            if let Some(o) = r.as_object_mut() {
                for (k, t) in o.iter_mut() {
                    cut(t, if k == "full_blocks" { 3 } else { 4 });
                }
            }
            if let Some(fb) = r["full_blocks"].as_array_mut() {
                for e in fb {
                    cut(&mut e[1]["transactions"], 2);
                }
            }
            out.push((r, Value::Null));
        }
        Some(out)
    }

    #[test]
    fn real_fixtures_still_load() {
        let Some(fixtures) = real_fixtures() else {
            return;
        };
        let dir = match std::env::var("BINTRIE_FIXTURES") {
            Ok(d) => std::path::PathBuf::from(d),
            Err(_) => {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/mainnet")
            }
        };
        assert_eq!(fixtures.len(), 4);
        for name in [
            "22615247-prague.zkpi.json",
            "22188088-cancun.zkpi.json",
            "19426587-cancun.block.json",
            "21230867-cancun.rpccache.json.gz",
        ] {
            let fx = load(&dir.join(name), None).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(fx.problems.is_empty(), "{name}: {:?}", fx.problems);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn arbitrary_bytes_never_panic(
            raw in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..400),
                prop::collection::vec(any::<u8>(), 0..400).prop_map(|mut v| {
                    v.splice(0..0, [0x1f, 0x8b]);
                    v
                }),
                arb_json().prop_map(|j| j.to_string().into_bytes()),
            ],
        ) {
            if let Ok(v) = decode_json(&raw, "f") {
                load_every_way(&v, &Value::Null);
            }
        }

        #[test]
        fn arbitrary_json_never_panics(v in arb_json(), pre in arb_json()) {
            load_every_way(&v, &pre);
            let wrapped = json!({
                "blocks": [v.clone()],
                "extra": pre.clone(),
                "full_blocks": [[{"block_no": 1}, v.clone()]],
                "result": v,
            });
            load_every_way(&wrapped, &pre);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 1000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn mutated_zkpi_never_panics(muts in arb_mutations()) {
            let _ = load_zkpi(&mutated(zkpi_json(), &muts));
        }

        #[test]
        fn mutated_block_never_panics(muts in arb_mutations(), on_pre in any::<bool>()) {
            let (b, pre) = block_json();
            let (b, pre) = if on_pre { (b, mutated(pre, &muts)) } else { (mutated(b, &muts), pre) };
            let _ = load_block_with_pre_state(&b, &pre);
        }

        #[test]
        fn mutated_rpccache_never_panics(muts in arb_mutations()) {
            let _ = load_rpccache(&mutated(rpccache_json(), &muts));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn mutated_real_fixtures_never_panic(muts in arb_mutations(), which in any::<usize>()) {
            thread_local!(static REAL: Option<Vec<(Value, Value)>> = real_fixtures());
            REAL.with(|real| {
                if let Some(real) = real.as_ref().filter(|r| !r.is_empty()) {
                    let (v, pre) = &real[which % real.len()];
                    let v = mutated(v.clone(), &muts);
                    load_every_way(&v, pre);
                }
            });
        }
    }
}
