//! The conformance vectors (testdata/eip7864.json): every tree at every group depth, through a
//! commit and a reload, and the operation sequences.

mod common;

use bintrie_keys::TreeKey;
use bintrie_trie::{MemoryStore, Trie};
use common::{h32, reference_root};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/eip7864.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read vectors")).expect("json")
}

#[test]
fn empty_root() {
    let v = vectors();
    let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
    assert_eq!(t.root(), h32(v["empty_root"].as_str().unwrap()));
}

#[test]
fn tree_vectors_every_group_depth() {
    let v = vectors();
    let trees = v["tree_vectors"].as_array().unwrap();
    assert!(trees.len() >= 10);
    for tv in trees {
        let name = tv["name"].as_str().unwrap();
        let want = h32(tv["root_sha256"].as_str().unwrap());
        let entries: Vec<(TreeKey, [u8; 32])> = tv["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    TreeKey::from_bytes(h32(e["key"].as_str().unwrap())),
                    h32(e["value"].as_str().unwrap()),
                )
            })
            .collect();
        let map: common::Entries = entries.iter().map(|(k, v)| (k.to_bytes(), *v)).collect();
        assert_eq!(reference_root(&map), want, "{name}: reference model");
        for g in 1..=8u8 {
            // One batch.
            let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            t.update(entries.clone()).unwrap();
            assert_eq!(t.root(), want, "{name} g={g}: batch");
            t.commit().unwrap();
            // One by one, in order.
            let mut one: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            for (k, val) in &entries {
                one.insert(*k, *val).unwrap();
            }
            assert_eq!(one.root(), want, "{name} g={g}: one by one");
            // Reload from the store and read every value back.
            let mut again: Trie<MemoryStore> = Trie::open(t.into_store(), g, want).unwrap();
            for (k, val) in &map {
                assert_eq!(
                    again.get(&TreeKey::from_bytes(*k)).unwrap(),
                    Some(*val),
                    "{name} g={g}: reload get"
                );
            }
            assert_eq!(again.root(), want, "{name} g={g}: reload root");
        }
    }
}

#[test]
fn sequence_vectors_every_group_depth() {
    let v = vectors();
    for seq in v["sequence_vectors"].as_array().unwrap() {
        let ops = seq["ops"].as_array().unwrap();
        for g in [1u8, 3, 5, 8] {
            let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            for (i, op) in ops.iter().enumerate() {
                let key = TreeKey::from_bytes(h32(op["key"].as_str().unwrap()));
                t.insert(key, h32(op["value"].as_str().unwrap())).unwrap();
                assert_eq!(
                    t.root(),
                    h32(op["root_sha256"].as_str().unwrap()),
                    "seed {} op {i} g={g}",
                    seq["seed"]
                );
                // Commit and reopen every few operations, so later ones run on loaded groups.
                if i % 7 == 3 {
                    let root = t.root();
                    t.commit().unwrap();
                    t = Trie::open(t.into_store(), g, root).unwrap();
                }
            }
        }
    }
}
