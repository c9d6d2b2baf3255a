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

use crate::input::{json_hex_bytes as hex_bytes, json_u256 as uint};
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
pub struct PreAccount {
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

/// The `slot -> value` entries of a JSON object.
fn storage_entries(s: &serde_json::Map<String, Value>, at: &str) -> Result<Vec<(U256, U256)>> {
    s.iter()
        .map(|(k, val)| {
            let sat = format!("{at}.storage.{k}");
            Ok((uint(&Value::String(k.clone()), &sat)?, uint(val, &sat)?))
        })
        .collect()
}

/// What an account must hold after the block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpectedAccount {
    /// Balance, nonce and code hash; `None` when the account must not exist (or be empty).
    pub info: Option<(U256, u64, B256)>,
    /// Storage slots and their values.
    pub storage: BTreeMap<U256, U256>,
}

/// One block to execute, with everything needed around it.
#[derive(Debug)]
pub struct Fixture {
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
    pub fn number(&self) -> u64 {
        self.block.header.inner.number
    }
}

/// Reads a fixture (gzip is detected by its magic bytes). `pre_state` is the separate pre-state
/// file of the `block` format; when it is `None` for that format, a sibling file named like the
/// block file with `.block.json` replaced by `.pre_state.json` is used if it exists.
pub fn load(path: &Path, pre_state: Option<&Path>) -> Result<Fixture> {
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

fn read_json(path: &Path) -> Result<Value> {
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_string(&mut s)
            .with_context(|| format!("{}: decompressing gzip", path.display()))?;
        s
    } else {
        String::from_utf8(raw).with_context(|| format!("{}: not UTF-8", path.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))
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
        .map_err(|e| anyhow!("`{at}`: {s:?} is not an address: {e}"))
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
    check_block(&block, false, &mut problems)?;
    let number = block.header.inner.number;

    let chain_id = match root.get("chainConfig").and_then(|c| c.get("chainId")) {
        Some(c) => u64::try_from(uint(c, "chainConfig.chainId")?)
            .map_err(|_| anyhow!("`chainConfig.chainId` does not fit in 64 bits"))?,
        None => 1,
    };

    // Recent hashes: the ancestors' headers (each checked against its `hash`) and the parent.
    let mut block_hashes = BTreeMap::new();
    block_hashes.insert(number - 1, block.header.inner.parent_hash);
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
    let mut pre = BTreeMap::new();
    let mut expected: BTreeMap<Address, ExpectedAccount> = BTreeMap::new();
    for (addr, v) in pre_v {
        let at = format!("extra.preState.{addr}");
        let a = address(addr, &at)?;
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
    check_block(&block, true, &mut problems)?;
    let number = block.header.inner.number;
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
    for (addr, v) in pre_obj {
        let at = format!("pre-state {addr}");
        let a = address(addr, &at)?;
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
                let len = u64_field(c, "original_len", &cat)? as usize;
                if len > bytes.len() {
                    bail!(
                        "`{cat}.original_len` is {len} but the bytecode has {} bytes",
                        bytes.len()
                    );
                }
                bytes.truncate(len);
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
    let block_hashes = BTreeMap::from([(number - 1, block.header.inner.parent_hash)]);
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
    check_block(&block, true, &mut problems)?;
    let parent = number
        .checked_sub(1)
        .ok_or_else(|| anyhow!("block 0 has no pre-state"))?;
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
