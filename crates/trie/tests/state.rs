//! Account-level vectors: state_vectors (whole accounts) and geth_api_sequence (geth's
//! BinaryTrie update/delete semantics, SPEC §4), at every group depth, with commits and reloads.

mod common;

use alloy_primitives::{Address, B256, U256};
use bintrie_keys::{
    AccountState, BasicData, TreeKey, account_entries, basic_data_key, chunkify_code,
    code_chunk_key, code_hash_key, storage_slot_key,
};
use bintrie_trie::{MemoryStore, Trie};
use common::h32;
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/eip7864.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read vectors")).expect("json")
}

fn u256(v: &Value) -> U256 {
    match v {
        Value::Number(n) => U256::from(n.as_u64().expect("u64")),
        Value::String(s) => s.parse().expect("uint"),
        other => panic!("not a number: {other}"),
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap().trim_start_matches("0x")).unwrap()
}

#[test]
fn state_vectors_every_group_depth() {
    let v = vectors();
    for sv in v["state_vectors"].as_array().unwrap() {
        let name = sv["name"].as_str().unwrap();
        let mut writes = Vec::new();
        for acct in sv["accounts"].as_array().unwrap() {
            let address: Address = acct["address"].as_str().unwrap().parse().unwrap();
            let storage = acct["storage"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, val)| (k.parse().unwrap(), val.as_str().unwrap().parse().unwrap()))
                .collect();
            let state = AccountState {
                nonce: acct["nonce"].as_u64().unwrap(),
                balance: u256(&acct["balance"]),
                code: bytes(&acct["code"]),
                storage,
            };
            writes.extend(account_entries(&address, &state).unwrap());
        }
        let want = h32(sv["root_sha256"].as_str().unwrap());
        for g in 1..=8u8 {
            let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            t.update(writes.clone()).unwrap();
            assert_eq!(t.root(), want, "{name} g={g}");
            t.commit().unwrap();
            let mut again: Trie<MemoryStore> = Trie::open(t.into_store(), g, want).unwrap();
            assert_eq!(
                again.verify().unwrap(),
                want,
                "{name} g={g}: verify after reload"
            );
        }
    }
}

#[test]
fn geth_api_sequence_every_group_depth() {
    let v = vectors();
    let ops = v["geth_api_sequence"]["ops"].as_array().unwrap();
    for g in 1..=8u8 {
        let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
        for (i, op) in ops.iter().enumerate() {
            let address: Address = op["address"].as_str().unwrap().parse().unwrap();
            let writes: Vec<(TreeKey, [u8; 32])> = match op["op"].as_str().unwrap() {
                "update_account" => {
                    let basic = BasicData {
                        version: 0,
                        code_size: op["code_len"].as_u64().unwrap() as u32,
                        nonce: op["nonce"].as_u64().unwrap(),
                        balance: u256(&op["balance"]),
                    };
                    let code_hash: B256 = op["code_hash"].as_str().unwrap().parse().unwrap();
                    vec![
                        (basic_data_key(&address), basic.encode().unwrap()),
                        (code_hash_key(&address), code_hash.0),
                    ]
                }
                "update_storage" => {
                    let value: U256 = op["value"].as_str().unwrap().parse().unwrap();
                    let slot: U256 = op["slot"].as_str().unwrap().parse().unwrap();
                    vec![(storage_slot_key(&address, &slot), value.to_be_bytes())]
                }
                "delete_storage" => {
                    let slot: U256 = op["slot"].as_str().unwrap().parse().unwrap();
                    vec![(storage_slot_key(&address, &slot), [0; 32])]
                }
                "delete_account" => vec![
                    (basic_data_key(&address), [0; 32]),
                    (code_hash_key(&address), [0; 32]),
                ],
                "update_contract_code" => chunkify_code(&bytes(&op["code"]))
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (code_chunk_key(&address, i as u64), c))
                    .collect(),
                other => panic!("unknown op {other}"),
            };
            t.update(writes).unwrap();
            let root = t.root();
            assert_eq!(
                root,
                h32(op["root_sha256"].as_str().unwrap()),
                "op {i} g={g}"
            );
            t.commit().unwrap();
            t = Trie::open(t.into_store(), g, root).unwrap();
        }
    }
}
