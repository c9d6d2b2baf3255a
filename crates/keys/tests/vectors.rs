//! Conformance against the project's EIP-7864 vectors (`testdata/eip7864.json`), SHA-256 rows.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::OnceLock;

use bintrie_keys::{
    AccountState, Address, BasicData, TreeKey, U256, account_entries, basic_data_key,
    chunkify_code, code_chunk_key, code_hash_key, get_stem, storage_slot_key, tree_key,
};
use serde_json::Value;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/eip7864.json");

fn vectors() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        let text = std::fs::read_to_string(VECTORS).expect("read vectors file");
        serde_json::from_str(&text).expect("parse vectors file")
    })
}

fn list<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} is not an array"))
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} is not a string: {v}"))
}

fn bytes(hex: &str) -> Vec<u8> {
    alloy_primitives::hex::decode(hex).unwrap_or_else(|e| panic!("bad hex {hex}: {e}"))
}

fn b32(hex: &str) -> [u8; 32] {
    bytes(hex)
        .try_into()
        .unwrap_or_else(|_| panic!("not 32 bytes: {hex}"))
}

fn key(hex: &str) -> TreeKey {
    TreeKey::from_bytes(b32(hex))
}

fn u256(text: &str) -> U256 {
    U256::from_str(text).unwrap_or_else(|e| panic!("bad number {text}: {e}"))
}

fn address(text: &str) -> Address {
    Address::from_str(text).unwrap_or_else(|e| panic!("bad address {text}: {e}"))
}

#[test]
fn key_vectors() {
    let kvs = list(vectors(), "key_vectors");
    assert!(!kvs.is_empty());
    let (mut slots, mut chunks, mut overflow) = (0, 0, 0);
    for kv in kvs {
        let addr = address(s(kv, "address"));
        assert_eq!(basic_data_key(&addr), key(s(kv, "basic_data_key_sha256")));
        assert_eq!(code_hash_key(&addr), key(s(kv, "code_hash_key_sha256")));
        for st in list(kv, "storage_sha256") {
            let slot = u256(s(st, "slot"));
            let expected = key(s(st, "key"));
            assert_eq!(
                storage_slot_key(&addr, &slot),
                expected,
                "{addr} slot {slot:#x}"
            );
            assert_eq!(storage_slot_key(&addr, &slot).to_bytes(), b32(s(st, "key")));
            slots += 1;
            if slot.byte(31) == 0xff {
                overflow += 1;
            }
        }
        for ch in list(kv, "code_chunk_sha256") {
            let i = ch["chunk"].as_u64().expect("chunk index");
            assert_eq!(
                code_chunk_key(&addr, i),
                key(s(ch, "key")),
                "{addr} chunk {i}"
            );
            chunks += 1;
        }
    }
    assert_eq!(slots, kvs.len() * 19);
    assert_eq!(chunks, kvs.len() * 10);
    assert!(
        overflow >= kvs.len(),
        "vectors cover the top-byte-0xff slots"
    );
}

#[test]
fn key_preimage_examples() {
    let examples = list(vectors(), "key_preimage_examples");
    assert!(!examples.is_empty());
    for ex in examples {
        let what = s(ex, "what");
        let preimage = bytes(s(ex, "preimage"));
        assert_eq!(preimage.len(), 64, "{what}");
        assert_eq!(&preimage[..12], &[0u8; 12], "{what}");
        let addr = Address::from_slice(&preimage[12..32]);
        let tree_index = u256(s(ex, "tree_index"));
        assert_eq!(&preimage[32..], &tree_index.to_be_bytes::<32>(), "{what}");
        let sha = b32(s(ex, "sha256"));
        let stem = get_stem(&addr, &tree_index);
        assert_eq!(&stem[..], &sha[..31], "{what}");
        let sub = u8::try_from(ex["sub_index"].as_u64().expect("sub_index")).expect("u8");
        let k = tree_key(&addr, &tree_index, sub);
        assert_eq!(k, key(s(ex, "key_sha256")), "{what}");
        assert_eq!(k.sub_index, sub);
    }
}

#[test]
fn key_preimage_examples_match_the_helpers() {
    // Each example also names the helper that must produce the same key.
    for ex in list(vectors(), "key_preimage_examples") {
        let what = s(ex, "what");
        let preimage = bytes(s(ex, "preimage"));
        let addr = Address::from_slice(&preimage[12..32]);
        let expected = key(s(ex, "key_sha256"));
        let got = if what == "basic_data" {
            basic_data_key(&addr)
        } else if let Some(rest) = what.strip_prefix("slot ") {
            let slot = match rest.split(' ').next().expect("slot") {
                "2**256-1" => U256::MAX,
                n => u256(n),
            };
            storage_slot_key(&addr, &slot)
        } else if let Some(rest) = what.strip_prefix("chunk ") {
            code_chunk_key(&addr, rest.parse().expect("chunk index"))
        } else {
            panic!("unknown example {what}");
        };
        assert_eq!(got, expected, "{what}");
    }
}

#[test]
fn basic_data_vectors() {
    let vs = list(vectors(), "basic_data_vectors");
    assert!(!vs.is_empty());
    for v in vs {
        let bd = BasicData {
            version: 0,
            code_size: u32::try_from(v["code_size"].as_u64().expect("code_size")).expect("u32"),
            nonce: v["nonce"].as_u64().expect("nonce"),
            balance: u256(s(v, "balance")),
        };
        let leaf = b32(s(v, "value"));
        assert_eq!(bd.encode(), Ok(leaf), "{v}");
        assert_eq!(BasicData::decode(&leaf), Ok(bd), "{v}");
    }
}

#[test]
fn chunkify_vectors() {
    let vs = list(vectors(), "chunkify_vectors");
    assert!(!vs.is_empty());
    for v in vs {
        let code = bytes(s(v, "code"));
        let expected: Vec<[u8; 32]> = list(v, "chunks")
            .iter()
            .map(|c| b32(c.as_str().expect("chunk")))
            .collect();
        assert_eq!(chunkify_code(&code), expected, "{}", s(v, "name"));
    }
}

fn account_state(a: &Value) -> (Address, AccountState) {
    let storage = a["storage"]
        .as_object()
        .expect("storage object")
        .iter()
        .map(|(slot, value)| (u256(slot), u256(value.as_str().expect("storage value"))))
        .collect();
    let acct = AccountState {
        nonce: a["nonce"].as_u64().expect("nonce"),
        balance: u256(s(a, "balance")),
        code: bytes(s(a, "code")),
        storage,
    };
    (address(s(a, "address")), acct)
}

#[test]
fn state_vectors() {
    let vs = list(vectors(), "state_vectors");
    assert!(!vs.is_empty());
    let mut saw_zero_storage = false;
    for v in vs {
        let name = s(v, "name");
        let mut expected = BTreeMap::new();
        for e in list(v, "tree_entries_sha256") {
            let prev = expected.insert(key(s(e, "key")), b32(s(e, "value")));
            assert!(prev.is_none(), "{name}: duplicate expected key");
        }
        let mut got = BTreeMap::new();
        for a in list(v, "accounts") {
            let (addr, acct) = account_state(a);
            saw_zero_storage |= acct.storage.iter().any(|(_, v)| v.is_zero());
            for (k, val) in account_entries(&addr, &acct).expect(name) {
                assert!(got.insert(k, val).is_none(), "{name}: duplicate key {k:?}");
            }
        }
        assert_eq!(got, expected, "{name}");
    }
    // The vectors include slots listed with value zero, and expect present zero leaves for them.
    assert!(saw_zero_storage);
}
