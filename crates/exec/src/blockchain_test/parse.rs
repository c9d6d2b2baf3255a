//! Reading test files: [`test_files`], [`load_file`], [`parse_test`].

use super::{BlockchainTest, TestBlock};
use crate::json::{Spellings, json_hex_bytes, json_u256};
use alloy_consensus::{Block, TxEnvelope};
use alloy_primitives::Address;
use alloy_rlp::Decodable;
use anyhow::{Context, Result, anyhow, bail};
use bintrie_keys::AccountState;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every `.json` and `.json.gz` file under `paths` (files as given, directories recursively),
/// sorted. Errors name a path that does not exist or cannot be listed.
///
/// A directory is walked once however many links lead to it (a symlink loop would otherwise
/// repeat or never end), a file found twice through links counts once, and in a walk only
/// regular files are taken (a FIFO named `*.json` would block the run).
pub fn test_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt;
    /// The directories walked and the files taken so far, by (device, inode): what a path
    /// leads to, whatever links it goes through.
    type Seen = HashSet<(u64, u64)>;
    fn id(meta: &std::fs::Metadata) -> (u64, u64) {
        (meta.dev(), meta.ino())
    }
    fn walk(dir: &Path, seen: &mut Seen, out: &mut Vec<PathBuf>) -> Result<()> {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
        for entry in entries {
            let path = entry
                .with_context(|| format!("listing {}", dir.display()))?
                .path();
            // Follows links. A dangling one is left out; a test file that cannot be looked at
            // otherwise (no permission, a link to itself) is taken, and fails as a test naming
            // why, rather than go missing from the count.
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => {
                    if is_test_file(&path) {
                        out.push(path);
                    }
                    continue;
                }
            };
            if meta.is_dir() {
                if seen.insert(id(&meta)) {
                    walk(&path, seen, out)?;
                }
            } else if meta.is_file() && is_test_file(&path) && seen.insert(id(&meta)) {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    let mut seen = Seen::default();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        // A file given twice (under two spellings, or also found in a directory given) is
        // taken once, as a directory is walked once.
        if seen.insert(id(&meta)) {
            if meta.is_dir() {
                walk(p, &mut seen, &mut out)?;
            } else {
                out.push(p.clone());
            }
        }
    }
    out.sort();
    Ok(out)
}

fn is_test_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".json") || name.ends_with(".json.gz")
}

/// The largest test file read, uncompressed (the largest in `ethereum/tests` is ~50 MB).
const MAX_FILE_BYTES: u64 = 512 << 20;

/// Reads a test file (gzipped when it starts with the gzip magic) into its tests, by name, in
/// file order. Errors name the file and what is wrong with it; a test that does not parse is
/// returned as an error in its place, so the file's other tests still run.
pub fn load_file(path: &Path) -> Result<Vec<(String, Result<BlockchainTest>)>> {
    // Bounded reads: neither a huge file nor a gzip bomb is read whole, nor parsed into more
    // values than any test file holds; a key given twice in an object (a test, an account, a
    // slot) is refused, not overridden by the last.
    let json = crate::input::read_json_at_most(path, MAX_FILE_BYTES)?;
    let obj = json
        .as_object()
        .ok_or_else(|| anyhow!("{}: not an object of test name -> test", path.display()))?;
    // Some other JSON object (a report's results.json): said once, not as one failed test per
    // key. A file with any test-like entry has its other entries fail as tests, by name.
    let test_like = |t: &Value| {
        ["network", "genesisRLP", "blocks"]
            .iter()
            .any(|f| t.get(f).is_some())
    };
    if !obj.is_empty() && !obj.values().any(test_like) {
        bail!(
            "{}: not a blockchain test file: none of its {} entries is a test (an object with \
             `network`, `genesisRLP` and `blocks`)",
            path.display(),
            obj.len()
        );
    }
    Ok(obj
        .iter()
        .map(|(name, t)| (name.clone(), parse_test(name, t)))
        .collect())
}

/// Parses one test. Errors name the field.
pub fn parse_test(name: &str, t: &Value) -> Result<BlockchainTest> {
    let field = |f: &str| t.get(f).ok_or_else(|| anyhow!("`{f}` is missing"));
    let network = field("network")?
        .as_str()
        .ok_or_else(|| anyhow!("`network` is not a string"))?
        .to_string();
    let genesis_rlp = json_hex_bytes(field("genesisRLP")?, "genesisRLP")?;
    let genesis = decode_exact::<Block<TxEnvelope>>(&genesis_rlp)
        .map_err(|e| anyhow!("genesisRLP: {e}"))?
        .header;
    let blocks = field("blocks")?
        .as_array()
        .ok_or_else(|| anyhow!("`blocks` is not an array"))?
        .iter()
        .enumerate()
        .map(|(i, b)| {
            Ok(TestBlock {
                rlp: json_hex_bytes(
                    b.get("rlp")
                        .ok_or_else(|| anyhow!("blocks[{i}].rlp is missing"))?,
                    &format!("blocks[{i}].rlp"),
                )?,
                expect_exception: b
                    .get("expectException")
                    .map(|e| e.as_str().unwrap_or("(not a string)").to_string()),
            })
        })
        .collect::<Result<_>>()?;
    let post = match (t.get("postState"), t.get("postStateHash")) {
        (Some(p), _) => Some(accounts(p, "postState")?),
        (None, Some(h)) => {
            // A hash, or the test states no result (`null` or `[]` passed as one).
            h.as_str()
                .and_then(|h| h.parse::<alloy_primitives::B256>().ok())
                .ok_or_else(|| anyhow!("`postStateHash` is not a 32-byte hash in hex"))?;
            None
        }
        // Without either the test states no result: it would pass on any state.
        (None, None) => bail!("neither `postState` nor `postStateHash` is given"),
    };
    let last = field("lastblockhash")?
        .as_str()
        .ok_or_else(|| anyhow!("`lastblockhash` is not a string"))?;
    Ok(BlockchainTest {
        name: name.to_string(),
        network,
        pre: accounts(field("pre")?, "pre")?,
        genesis,
        blocks,
        post,
        last_block_hash: last
            .parse()
            .map_err(|e| anyhow!("lastblockhash: not a 32-byte hash: {e}"))?,
    })
}

/// `address -> {balance, nonce, code, storage}`, zero slots dropped.
fn accounts(v: &Value, at: &str) -> Result<BTreeMap<Address, AccountState>> {
    let obj = v
        .as_object()
        .ok_or_else(|| anyhow!("`{at}` is not an object of address -> account"))?;
    let mut out = BTreeMap::new();
    for (a, acct) in obj {
        let aat = format!("{at}.{a}");
        let address: Address = a
            .parse()
            .map_err(|e| anyhow!("{aat}: not a 20-byte address: {e}"))?;
        let get = |f: &str| acct.get(f).ok_or_else(|| anyhow!("{aat}.{f} is missing"));
        let nonce = json_u256(get("nonce")?, &format!("{aat}.nonce"))?;
        let mut storage = Vec::new();
        let slots = get("storage")?
            .as_object()
            .ok_or_else(|| anyhow!("{aat}.storage is not an object"))?;
        // One slot under two spellings ("0x0" and "0x00") is refused, as an address is: a map
        // kept the last, so a wrong expected value spelled before the right one passed.
        let mut spelled = Spellings::new();
        for (k, val) in slots {
            let sat = format!("{aat}.storage.{k}");
            let slot = json_u256(&Value::String(k.clone()), &sat)?;
            let value = json_u256(val, &sat)?;
            spelled.insert(slot, k, &format!("{aat}.storage"), "slot")?;
            if !value.is_zero() {
                storage.push((slot, value));
            }
        }
        let state = AccountState {
            nonce: u64::try_from(nonce).map_err(|_| anyhow!("{aat}.nonce: over 64 bits"))?,
            balance: json_u256(get("balance")?, &format!("{aat}.balance"))?,
            code: json_hex_bytes(get("code")?, &format!("{aat}.code"))?,
            storage,
        };
        if out.insert(address, state).is_some() {
            bail!("{aat}: the address is given twice");
        }
    }
    Ok(out)
}

/// Decodes `T` from all of `bytes`: trailing bytes are an error.
pub(super) fn decode_exact<T: Decodable>(bytes: &[u8]) -> Result<T, String> {
    let mut buf = bytes;
    let v = T::decode(&mut buf).map_err(|e| format!("bad RLP: {e}"))?;
    if !buf.is_empty() {
        return Err(format!("{} bytes after the RLP item", buf.len()));
    }
    Ok(v)
}
