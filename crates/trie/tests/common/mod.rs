//! Test helpers: an independent reference merkleization written straight from SPEC §3.
#![allow(dead_code)]

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{MAX_DEPTH, PathKey};
use bintrie_trie::{MemoryStore, Trie};
use rand::Rng;
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub(crate) type Entries = BTreeMap<[u8; 32], [u8; 32]>;

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn stem_hash(stem: &Stem, values: &BTreeMap<u8, [u8; 32]>) -> [u8; 32] {
    let mut level: Vec<[u8; 32]> = (0..=255u8)
        .map(|i| values.get(&i).map_or([0; 32], |v| sha(v)))
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| {
                if p[0] == [0; 32] && p[1] == [0; 32] {
                    [0; 32]
                } else {
                    sha(&[p[0], p[1]].concat())
                }
            })
            .collect();
    }
    let mut pre = stem.to_vec();
    pre.push(0);
    pre.extend_from_slice(&level[0]);
    sha(&pre)
}

fn bit(stem: &Stem, d: usize) -> u8 {
    (stem[d / 8] >> (7 - d % 8)) & 1
}

fn node(stems: &[(Stem, BTreeMap<u8, [u8; 32]>)], depth: usize) -> [u8; 32] {
    match stems.len() {
        0 => [0; 32],
        1 => stem_hash(&stems[0].0, &stems[0].1),
        _ => {
            let split = stems.partition_point(|(s, _)| bit(s, depth) == 0);
            let l = node(&stems[..split], depth + 1);
            let r = node(&stems[split..], depth + 1);
            sha(&[l, r].concat())
        }
    }
}

/// The root of a set of entries, by plain recursion over the sorted stems.
pub(crate) fn reference_root(entries: &Entries) -> [u8; 32] {
    let mut by_stem: BTreeMap<Stem, BTreeMap<u8, [u8; 32]>> = BTreeMap::new();
    for (k, v) in entries {
        let key = TreeKey::from_bytes(*k);
        by_stem
            .entry(key.stem)
            .or_default()
            .insert(key.sub_index, *v);
    }
    let stems: Vec<_> = by_stem.into_iter().collect();
    node(&stems, 0)
}

pub(crate) fn h32(s: &str) -> [u8; 32] {
    let s = s.trim_start_matches("0x");
    let bytes = hex::decode(format!("{s:0>64}")).expect("hex");
    bytes.try_into().expect("32 bytes")
}

/// The hash of a group blob's subtree, straight from SPEC §3 and §5: the binary subtree the
/// entries describe (an entry at relative depth `r` and position `p << (g - r)`), every internal
/// node `sha256(left ‖ right)`, an empty side zero. `entries` sorted by index, non-empty.
pub(crate) fn group_root(g: u8, entries: &[bintrie_node::GroupEntry]) -> [u8; 32] {
    fn node(g: u8, entries: &[bintrie_node::GroupEntry], rel: u8, prefix: u16) -> [u8; 32] {
        let inside: Vec<_> = entries
            .iter()
            .filter(|e| {
                // The entry lies under this node when its path starts with `prefix`.
                e.depth >= rel && (e.index >> (g - rel)) == prefix
            })
            .collect();
        match inside.as_slice() {
            [] => [0; 32],
            [e] if e.depth == rel => e.hash,
            _ => {
                let l = node(g, entries, rel + 1, prefix << 1);
                let r = node(g, entries, rel + 1, (prefix << 1) | 1);
                sha(&[l, r].concat())
            }
        }
    }
    node(g, entries, 0, 0)
}

/// Keys clustered under one prefix so that long shared paths, lone stems and empty siblings
/// occur, with several values per stem.
pub(crate) fn entries(seed: u64, n: usize) -> Entries {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    let mut rng = StdRng::seed_from_u64(seed);
    let base: [u8; 31] = rng.random();
    let mut out = Entries::new();
    for _ in 0..n {
        let mut stem = base;
        // Keep a random number of the base's leading bytes, randomise the rest.
        let keep = rng.random_range(0..31);
        rng.fill(&mut stem[keep..]);
        for _ in 0..rng.random_range(1..4) {
            let mut key = [0u8; 32];
            key[..31].copy_from_slice(&stem);
            key[31] = rng.random();
            out.insert(key, rng.random());
        }
    }
    out
}

pub(crate) fn trie(g: u8, e: &Entries) -> Trie<MemoryStore> {
    let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
    t.update(
        e.iter()
            .map(|(k, v)| (TreeKey::from_bytes(*k), *v))
            .collect(),
    )
    .unwrap();
    t
}

/// Keys to prove: every present key, absent keys in present stems, keys on other stems' paths
/// and keys in empty subtrees.
pub(crate) fn probes(e: &Entries) -> Vec<[u8; 32]> {
    let mut keys: Vec<[u8; 32]> = e.keys().copied().collect();
    for k in e.keys().take(20) {
        let mut other_index = *k;
        other_index[31] ^= 0x55;
        let mut near = *k;
        near[30] ^= 0x01; // shares 247 bits with a present stem: ends at that stem
        let mut far = *k;
        far[0] ^= 0x80; // the other half of the tree
        keys.extend([other_index, near, far]);
    }
    keys
}

/// A few hundred stems: random ones, and near-copies of a few bases (one bit flipped at a random
/// depth) so some paths run deep; 1-3 values each.
pub(crate) fn random_entries(rng: &mut StdRng, stems: usize) -> Entries {
    let bases: Vec<Stem> = (0..4).map(|_| rng.random()).collect();
    let mut out = Entries::new();
    for i in 0..stems {
        let stem: Stem = if i % 4 == 0 {
            let mut s = bases[rng.random_range(0..bases.len())];
            let bit = rng.random_range(0..MAX_DEPTH);
            s[bit / 8] ^= 0x80 >> (bit % 8);
            s
        } else {
            rng.random()
        };
        for _ in 0..rng.random_range(1..=3) {
            let sub: u8 = rng.random();
            out.insert(TreeKey::new(stem, sub).to_bytes(), rng.random());
        }
    }
    out
}

/// The entries as a batch of writes.
pub(crate) fn batch(entries: &Entries) -> Vec<(TreeKey, [u8; 32])> {
    entries
        .iter()
        .map(|(k, v)| (TreeKey::from_bytes(*k), *v))
        .collect()
}

/// Every blob of a store, by path.
pub(crate) fn snapshot(store: &MemoryStore) -> BTreeMap<PathKey, Vec<u8>> {
    store.iter().map(|(k, v)| (*k, v.clone())).collect()
}
