//! The trie over a store full of damaged and made-up blobs: every operation returns `Ok` or an
//! error, never panics, never hangs; a refused update changes nothing; and whatever a
//! successful update commits reads back.
//!
//! A case starts from a real committed tree, then damages the store (flipped bytes, random or
//! truncated blobs, made-up group and stem blobs at random paths, chains of groups down to depth
//! 248, deleted blobs). Half the cases then "reseal" it: recompute every hash bottom-up from the
//! root so the damaged blobs pass the hash check, which takes the trie past loading into its
//! structural checks.

mod common;

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{
    GroupBlob, GroupEntry, Hash32, MAX_DEPTH, NodeBlob, Path, Sha256Hasher, StemValues,
};
use bintrie_trie::{MemoryStore, NodeStore, Trie};
use common::group_root;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

type T = Trie<MemoryStore>;

/// Stems with long shared prefixes (near-copies of two bases) and random ones.
fn stems(rng: &mut StdRng, n: usize) -> Vec<Stem> {
    let bases: [Stem; 2] = [rng.random(), rng.random()];
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                rng.random()
            } else {
                let mut s = bases[i % 2];
                let bit = rng.random_range(0..MAX_DEPTH);
                s[bit / 8] ^= 0x80 >> (bit % 8);
                s
            }
        })
        .collect()
}

/// A path near the known stems: a prefix of one, usually at a group boundary or near 248.
fn some_path(rng: &mut StdRng, known: &[Stem], g: u8) -> Path {
    let stem = if rng.random_bool(0.8) {
        known[rng.random_range(0..known.len())]
    } else {
        rng.random()
    };
    let len = match rng.random_range(0..4) {
        0 => rng.random_range(0..=MAX_DEPTH),
        1 => MAX_DEPTH - rng.random_range(0..12),
        _ => (rng.random_range(0..=MAX_DEPTH) / g as usize) * g as usize,
    };
    Path::from_stem_prefix(&stem, len)
}

/// A made-up but decodable group blob (bottom entries and sometimes an early stem pair).
fn made_up_group(rng: &mut StdRng, g: u8) -> Vec<u8> {
    let width = 1u16 << g;
    let mut entries = BTreeMap::new();
    for _ in 0..rng.random_range(1..6) {
        let index = rng.random_range(0..width);
        entries.insert(
            index,
            GroupEntry {
                index,
                depth: g,
                hash: rng.random(),
            },
        );
    }
    if g >= 2 && rng.random_bool(0.3) {
        // Two early stems at relative depth 1 (each the other's sibling).
        entries.clear();
        for half in [0, width / 2] {
            entries.insert(
                half,
                GroupEntry {
                    index: half,
                    depth: 1,
                    hash: rng.random(),
                },
            );
        }
    }
    let entries: Vec<_> = entries.into_values().collect();
    let mut blob = Vec::new();
    GroupBlob::encode(g, &entries, &mut blob);
    blob
}

fn made_up_stem(rng: &mut StdRng, stem: Stem) -> Vec<u8> {
    let mut values = StemValues::new();
    for _ in 0..rng.random_range(1..4) {
        values.set(rng.random(), rng.random());
    }
    let mut blob = Vec::new();
    values.encode_blob(&stem, &mut blob);
    blob
}

/// One random act of damage.
fn damage(rng: &mut StdRng, store: &mut MemoryStore, known: &[Stem], g: u8) {
    let mut keys: Vec<_> = store.iter().map(|(k, _)| *k).collect();
    keys.sort();
    let existing = |rng: &mut StdRng| keys[rng.random_range(0..keys.len())];
    match rng.random_range(0..8) {
        0 if !keys.is_empty() => {
            let k = existing(rng);
            let mut b = store.get_node(&k).unwrap().unwrap();
            // An earlier act may have cut this blob to nothing: nothing to flip then.
            if !b.is_empty() {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
                store.insert_raw(k, b);
            }
        }
        1 if !keys.is_empty() => {
            let k = existing(rng);
            let mut b = store.get_node(&k).unwrap().unwrap();
            b.truncate(rng.random_range(0..b.len().max(1)));
            store.insert_raw(k, b);
        }
        2 if !keys.is_empty() => {
            // Deleting the root blob makes every case a missing-node case: spare it mostly.
            let k = existing(rng);
            if !k.as_bytes().is_empty() || rng.random_bool(0.1) {
                let old = std::mem::take(store);
                for (key, blob) in old.iter().filter(|(key, _)| **key != k) {
                    store.insert_raw(*key, blob.clone());
                }
            }
        }
        3 => {
            let len = rng.random_range(0..120);
            let mut b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if !b.is_empty() && rng.random_bool(0.7) {
                b[0] = rng.random_range(1..=2);
            }
            store.insert_raw(some_path(rng, known, g).to_key(), b);
        }
        4 => {
            let gg = if rng.random_bool(0.8) {
                g
            } else {
                rng.random_range(1..=8)
            };
            let blob = made_up_group(rng, gg);
            store.insert_raw(some_path(rng, known, g).to_key(), blob);
        }
        5 => {
            let path = some_path(rng, known, g);
            // A stem under its path, or (sometimes) one that is not.
            let mut stem = known[rng.random_range(0..known.len())];
            if rng.random_bool(0.7) {
                for i in 0..path.len() {
                    let mask = 0x80 >> (i % 8);
                    stem[i / 8] = (stem[i / 8] & !mask) | (path.bit(i) * mask);
                }
            }
            let blob = made_up_stem(rng, stem);
            store.insert_raw(path.to_key(), blob);
        }
        6 => {
            // A chain of one-entry groups along a known stem, from a group boundary down past
            // depth 248, ending in a stem blob or nothing.
            let stem = known[rng.random_range(0..known.len())];
            let mut d = (rng.random_range(0..=MAX_DEPTH) / g as usize) * g as usize;
            while d <= MAX_DEPTH {
                let p = Path::from_stem_prefix(&stem, d);
                let bits = (0..g as usize).fold(0u16, |acc, i| {
                    let depth = d + i;
                    let bit = if depth < MAX_DEPTH {
                        (stem[depth / 8] >> (7 - depth % 8)) & 1
                    } else {
                        0
                    };
                    (acc << 1) | bit as u16
                });
                let entry = GroupEntry {
                    index: bits,
                    depth: g,
                    hash: rng.random(),
                };
                let mut blob = Vec::new();
                GroupBlob::encode(g, &[entry], &mut blob);
                store.insert_raw(p.to_key(), blob);
                d += g as usize;
            }
            if rng.random_bool(0.5) {
                let blob = made_up_stem(rng, stem);
                store.insert_raw(Path::from_stem_prefix(&stem, MAX_DEPTH).to_key(), blob);
            }
        }
        _ => {
            // A real stem blob moved to another path.
            if !keys.is_empty() {
                let b = store.get_node(&existing(rng)).unwrap().unwrap();
                store.insert_raw(some_path(rng, known, g).to_key(), b);
            }
        }
    }
}

/// Rewrites every decodable group reachable from `path` so its entries hold the hashes their
/// children really have, and returns the hash of the node at `path` (by the trie's rules), or
/// `None` if there is no decodable blob there. Paths only deepen, so this ends.
fn reseal(store: &mut MemoryStore, path: Path) -> Option<Hash32> {
    let blob = store.get_node(&path.to_key()).unwrap()?;
    match NodeBlob::decode(&blob).ok()? {
        NodeBlob::Stem(stem, values) => Some(values.stem_hash::<Sha256Hasher>(&stem).0),
        NodeBlob::Group(mut group) => {
            let g = group.group_depth;
            for e in &mut group.entries {
                let bits = e.index >> (g - e.depth);
                let mut child = Some(path);
                for i in (0..e.depth).rev() {
                    child = child.and_then(|p| p.child(((bits >> i) & 1) as u8));
                }
                if let Some(h) = child.and_then(|c| reseal(store, c)) {
                    e.hash = h;
                }
            }
            let mut blob = Vec::new();
            GroupBlob::encode(g, &group.entries, &mut blob);
            store.insert_raw(path.to_key(), blob);
            Some(group_root(g, &group.entries))
        }
    }
}

/// A key of the original tree, another key of a known stem, or a random key.
fn key(rng: &mut StdRng, original: &[TreeKey], known: &[Stem]) -> TreeKey {
    match rng.random_range(0..8) {
        0..4 => original[rng.random_range(0..original.len())],
        4..7 => TreeKey::new(known[rng.random_range(0..known.len())], rng.random()),
        _ => TreeKey::from_bytes(rng.random()),
    }
}

fn run_case(seed: u64, g: u8) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.random_range(2..40);
    let known = stems(&mut rng, n);
    let original: Vec<TreeKey> = known
        .iter()
        .map(|s| TreeKey::new(*s, rng.random()))
        .collect();
    let mut t = T::new(MemoryStore::new(), g).unwrap();
    t.update(original.iter().map(|k| (*k, rng.random())).collect())
        .unwrap();
    let mut root = t.commit().unwrap().root;
    let mut store = t.into_store();
    for _ in 0..rng.random_range(0..10) {
        damage(&mut rng, &mut store, &known, g);
    }
    if rng.random_bool(0.5)
        && let Some(h) = reseal(&mut store, Path::ROOT)
    {
        root = h;
    }

    let mut t = T::open(store, g, root).unwrap();
    // Values written by successful updates since the last commit, and all committed ones.
    let mut pending: BTreeMap<TreeKey, [u8; 32]> = BTreeMap::new();
    let mut committed: BTreeMap<TreeKey, [u8; 32]> = BTreeMap::new();
    for _ in 0..rng.random_range(1..16) {
        match rng.random_range(0..6) {
            0 | 1 => {
                let _ = t.get(&key(&mut rng, &original, &known));
            }
            2 | 3 => {
                let before = t.root();
                let writes: Vec<_> = (0..rng.random_range(1..6))
                    .map(|_| (key(&mut rng, &original, &known), rng.random()))
                    .collect();
                match t.update(writes.clone()) {
                    Ok(()) => pending.extend(writes),
                    Err(_) => assert_eq!(t.root(), before, "a refused update changed the root"),
                }
            }
            4 => {
                if let Ok(h) = t.verify() {
                    assert_eq!(h, t.root(), "verify and root disagree");
                }
            }
            _ => {
                let stats = t.commit().unwrap();
                committed.append(&mut pending);
                t = T::open(t.into_store(), g, stats.root).unwrap();
                for (k, v) in &committed {
                    assert_eq!(t.get(k).unwrap(), Some(*v), "a committed write reads back");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_store_never_panics(seed in any::<u64>(), g in 1u8..=8) {
        run_case(seed, g);
    }
}
