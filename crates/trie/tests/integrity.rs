//! Integrity on load: every blob the trie reads is checked against the hash its parent holds,
//! so a damaged store is an error, never a wrong value or a wrong committed root; and a store
//! whose paths run past depth 248 is an error, never a panic.

mod common;

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{
    GroupBlob, GroupEntry, MAX_DEPTH, NodeBlob, Path, PathKey, STEM_TAG, Sha256Hasher, StemValues,
};
use bintrie_trie::{MemoryStore, Trie, TrieError};
use common::{Entries, batch, group_root, random_entries, reference_root, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type T = Trie<MemoryStore>;
type TE = TrieError<std::convert::Infallible>;

/// `entries` committed at group depth `g` into a fresh store; returns the store and the root.
fn committed(entries: &Entries, g: u8) -> (MemoryStore, [u8; 32]) {
    let mut t = T::new(MemoryStore::new(), g).unwrap();
    t.update(batch(entries)).unwrap();
    let root = t.commit().unwrap().root;
    (t.into_store(), root)
}

/// The paths whose blob differs between two stores, or that only one holds (a count, so a
/// failure does not print two whole stores).
fn differing_blobs(a: &MemoryStore, b: &MemoryStore) -> usize {
    let (a, b) = (snapshot(a), snapshot(b));
    a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).count()
        + b.keys().filter(|k| !a.contains_key(*k)).count()
}

/// A random stored blob with the given tag, preferring one below the root.
fn pick_blob(store: &MemoryStore, tag: u8, rng: &mut StdRng) -> (PathKey, Vec<u8>) {
    let mut found: Vec<_> = store
        .iter()
        .filter(|(_, b)| b[0] == tag)
        .map(|(k, b)| (*k, b.clone()))
        .collect();
    found.sort();
    let deep: Vec<_> = found
        .iter()
        .filter(|(k, _)| !k.as_bytes().is_empty())
        .cloned()
        .collect();
    let from = if deep.is_empty() { &found } else { &deep };
    from[rng.random_range(0..from.len())].clone()
}

/// Asserts that an update touching `bad` fails with a hash mismatch at `at`, and that nothing
/// of it was applied: same root, a commit afterwards writes nothing, and a later successful
/// update (away from the damage) commits exactly the committed `entries` plus its own write.
fn assert_update_refused(
    store: &MemoryStore,
    g: u8,
    root: [u8; 32],
    entries: &Entries,
    bad: TreeKey,
    at: Path,
) {
    let mut t = T::open(store.clone(), g, root).unwrap();
    // A write under the damaged blob, and writes elsewhere in the same batch.
    let mut writes = vec![(bad, [0xaa; 32])];
    writes.extend((0..20u8).map(|i| (TreeKey::new([i.wrapping_mul(13); 31], i), [i | 1; 32])));
    let err = t.update(writes).unwrap_err();
    assert!(
        matches!(err, TE::HashMismatch { path, .. } if path == at),
        "g={g}: {err}"
    );
    assert_eq!(t.root(), root, "g={g}: a refused update changed the root");
    let before = snapshot(t.store());
    let stats = t.commit().unwrap();
    assert_eq!(
        (stats.root, stats.blobs, stats.removed),
        (root, 0, 0),
        "g={g}: a refused update was committed"
    );
    assert_eq!(snapshot(t.store()), before);
    // Somewhere the damage is not on the way to: the root is the old one plus this write only.
    let Some(elsewhere) = entries
        .keys()
        .map(|k| TreeKey::from_bytes(*k))
        .find(|k| !at.is_prefix_of(&k.stem))
    else {
        return; // the damaged blob is the root
    };
    t.insert(elsewhere, [0xbb; 32]).unwrap();
    let mut want = entries.clone();
    want.insert(elsewhere.to_bytes(), [0xbb; 32]);
    assert_eq!(t.commit().unwrap().root, reference_root(&want), "g={g}");
}

/// One byte flipped in a stem blob's values: `get` of a key of that stem is an error (not a
/// wrong value), other keys still read, and an update touching the stem is refused whole.
#[test]
fn flipped_stem_value_is_detected_at_every_group_depth() {
    for g in 1..=8u8 {
        let mut rng = StdRng::seed_from_u64(0x5eed_0000 + g as u64);
        let entries = random_entries(&mut rng, 300);
        let (mut store, root) = committed(&entries, g);
        let (key, blob) = pick_blob(&store, STEM_TAG, &mut rng);
        let path = Path::from_key(key.as_bytes()).unwrap();
        let NodeBlob::Stem(stem, values) = NodeBlob::decode(&blob).unwrap() else {
            unreachable!()
        };
        // A byte of the k-th present value.
        let header = 1 + 31 + 32;
        let offset = rng.random_range(header..blob.len());
        let sub = values.iter().nth((offset - header) / 32).unwrap().0;
        let mut damaged = blob.clone();
        damaged[offset] ^= 1 << rng.random_range(0..8);
        store.insert_raw(key, damaged);

        let mut t = T::open(store.clone(), g, root).unwrap();
        let hit = TreeKey::new(stem, sub);
        let err = t.get(&hit).unwrap_err();
        assert!(
            matches!(err, TE::HashMismatch { path: p, .. } if p == path),
            "g={g}: {err}"
        );
        // Every other stem still reads its committed values.
        for (k, v) in &entries {
            let k = TreeKey::from_bytes(*k);
            if k.stem != stem {
                assert_eq!(t.get(&k).unwrap(), Some(*v), "g={g}");
            }
        }
        // A write to another sub-index of the damaged stem is refused too.
        assert_update_refused(
            &store,
            g,
            root,
            &entries,
            TreeKey::new(stem, sub ^ 0x80),
            path,
        );
    }
}

/// One byte flipped in a group blob's hash area: every key under that group is an error, keys
/// elsewhere still read, and an update under it is refused whole.
#[test]
fn flipped_group_hash_is_detected_at_every_group_depth() {
    for g in 1..=8u8 {
        let mut rng = StdRng::seed_from_u64(0x6e0b_0000 + g as u64);
        let entries = random_entries(&mut rng, 300);
        let (mut store, root) = committed(&entries, g);
        let (key, blob) = pick_blob(&store, bintrie_node::GROUP_TAG, &mut rng);
        let path = Path::from_key(key.as_bytes()).unwrap();
        let n = GroupBlob::decode(&blob).unwrap().entries.len();
        let offset = rng.random_range(blob.len() - 32 * n..blob.len());
        let mut damaged = blob.clone();
        damaged[offset] ^= 1 << rng.random_range(0..8);
        store.insert_raw(key, damaged);

        let mut t = T::open(store.clone(), g, root).unwrap();
        let mut under = None;
        for (k, v) in &entries {
            let k = TreeKey::from_bytes(*k);
            if path.is_prefix_of(&k.stem) {
                let err = t.get(&k).unwrap_err();
                assert!(
                    matches!(err, TE::HashMismatch { path: p, .. } if p == path),
                    "g={g}: {err}"
                );
                under = Some(k);
            } else {
                assert_eq!(t.get(&k).unwrap(), Some(*v), "g={g}");
            }
        }
        let under = under.expect("a committed group holds at least two stems");
        assert_update_refused(&store, g, root, &entries, under, path);
        assert!(T::open(store, g, root).unwrap().verify().is_err());
    }
}

/// No false positives: an undamaged store reopened, updated and committed over several rounds
/// gives the root of the same entries built from scratch in memory (and the reference), reads
/// back every value, and verifies.
#[test]
fn reopen_update_commit_matches_a_tree_built_from_scratch() {
    for g in 1..=8u8 {
        let mut rng = StdRng::seed_from_u64(0xc1ea_0000 + g as u64);
        let mut all = random_entries(&mut rng, 300);
        let (mut store, mut root) = committed(&all, g);
        for round in 0..3 {
            // New keys and overwrites of existing ones (including a present zero).
            let mut writes = random_entries(&mut rng, 40);
            let existing: Vec<[u8; 32]> = all.keys().copied().collect();
            for i in 0..40 {
                let k = existing[rng.random_range(0..existing.len())];
                writes.insert(k, if i == 0 { [0; 32] } else { rng.random() });
            }
            let mut t = T::open(store, g, root).unwrap();
            t.update(batch(&writes)).unwrap();
            all.extend(writes);
            root = t.commit().unwrap().root;
            let mut fresh = T::new(MemoryStore::new(), g).unwrap();
            fresh.update(batch(&all)).unwrap();
            assert_eq!(root, fresh.root(), "g={g} round {round}");
            assert_eq!(root, reference_root(&all), "g={g} round {round}");
            store = t.into_store();
        }
        let mut t = T::open(store.clone(), g, root).unwrap();
        for (k, v) in &all {
            assert_eq!(t.get(&TreeKey::from_bytes(*k)).unwrap(), Some(*v), "g={g}");
        }
        assert_eq!(T::open(store, g, root).unwrap().verify().unwrap(), root);
    }
}

/// Internal nodes of the group (relative positions above the entries), counted independently of
/// the engine: the union of every entry's ancestors.
fn group_inner_nodes(g: u8, entries: &[GroupEntry]) -> u64 {
    let mut inner = std::collections::BTreeSet::new();
    for e in entries {
        for rel in 0..e.depth {
            inner.insert((rel, e.index >> (g - rel)));
        }
    }
    inner.len() as u64
}

/// The hash counter covers verification (each loaded group hashes its inner nodes, each loaded
/// stem its values), and a change inside a loaded group then rehashes only its path: the stem
/// and one internal node per level above it, not the rest of the group.
#[test]
fn load_counts_its_hashes_and_a_change_rehashes_only_its_path() {
    for g in [3u8, 8] {
        let mut rng = StdRng::seed_from_u64(0xc0_0000 + g as u64);
        let entries = random_entries(&mut rng, 300);
        let (store, root) = committed(&entries, g);
        let key = TreeKey::from_bytes(*entries.keys().nth(77).unwrap());

        // What loading the path to `key` costs: every blob on it, by path.
        let mut want_loaded = 0u64;
        let mut want_hashes = 0u64;
        let mut stem_depth = 0;
        for (k, blob) in store.iter() {
            let p = Path::from_key(k.as_bytes()).unwrap();
            if !p.is_prefix_of(&key.stem) {
                continue;
            }
            want_loaded += 1;
            match NodeBlob::decode(blob).unwrap() {
                NodeBlob::Group(gb) => want_hashes += group_inner_nodes(g, &gb.entries),
                NodeBlob::Stem(stem, values) => {
                    assert_eq!(stem, key.stem);
                    want_hashes += values.stem_hash::<Sha256Hasher>(&stem).1 as u64;
                    stem_depth = p.len() as u64;
                }
            }
        }
        let mut t = T::open(store, g, root).unwrap();
        assert_eq!(
            t.get(&key).unwrap(),
            Some(entries[&key.to_bytes()]),
            "g={g}"
        );
        let s = t.stats();
        assert_eq!(
            (s.nodes_loaded, s.hashes),
            (want_loaded, want_hashes),
            "g={g}"
        );

        t.insert(key, [0xee; 32]).unwrap();
        let values: StemValues = t.get_stem(&key.stem).unwrap().unwrap().clone();
        t.reset_stats();
        t.root();
        let stem_calls = values.stem_hash::<Sha256Hasher>(&key.stem).1 as u64;
        assert_eq!(t.stats().hashes, stem_calls + stem_depth, "g={g}");
    }
}

/// Two stems that differ only in their last bit sit at depth 248, the deepest a node can be:
/// they commit and load at every group depth (the depth checks are not off by one).
#[test]
fn stems_at_depth_248_load_at_every_group_depth() {
    let a: Stem = [0x5a; 31];
    let mut b = a;
    b[30] ^= 1;
    let mut entries = Entries::new();
    entries.insert(TreeKey::new(a, 1).to_bytes(), [1; 32]);
    entries.insert(TreeKey::new(b, 2).to_bytes(), [2; 32]);
    entries.insert(TreeKey::new([0xa5; 31], 3).to_bytes(), [3; 32]);
    for g in 1..=8u8 {
        let (store, root) = committed(&entries, g);
        assert!(
            store
                .iter()
                .any(|(k, _)| Path::from_key(k.as_bytes()).unwrap().len() == MAX_DEPTH)
        );
        let mut t = T::open(store.clone(), g, root).unwrap();
        for (k, v) in &entries {
            assert_eq!(t.get(&TreeKey::from_bytes(*k)).unwrap(), Some(*v), "g={g}");
        }
        t.insert(TreeKey::new(b, 9), [9; 32]).unwrap();
        let new_root = t.commit().unwrap().root;
        let mut all = entries.clone();
        all.insert(TreeKey::new(b, 9).to_bytes(), [9; 32]);
        assert_eq!(new_root, reference_root(&all), "g={g}");
        assert_eq!(
            T::open(t.into_store(), g, new_root)
                .unwrap()
                .verify()
                .unwrap(),
            new_root
        );
    }
}

/// A store holding a chain of one-entry group blobs down the all-zero path, with hashes that
/// verify, whose last group would expand into internal nodes at depth 248 (where only stems
/// can sit). Returns the store and its root.
fn chain_to_248(g: u8) -> (MemoryStore, [u8; 32]) {
    let zero: Stem = [0; 31];
    let last = MAX_DEPTH / g as usize; // groups at 0, g, .., last * g (the last at or past 248 - g)
    let mut store = MemoryStore::new();
    let mut below = [7u8; 32];
    for k in (0..=last).rev() {
        let entries = [GroupEntry {
            index: 0,
            depth: g,
            hash: below,
        }];
        let mut blob = Vec::new();
        GroupBlob::encode(g, &entries, &mut blob);
        store.insert_raw(Path::from_stem_prefix(&zero, k * g as usize).to_key(), blob);
        below = group_root(g, &entries);
    }
    (store, below)
}

/// A chain of group blobs reaching depth 248: `get`, `get_stem`, `update` and `verify` of a key
/// down that path return an error; none panics or loops.
#[test]
fn group_chain_reaching_depth_248_is_an_error_not_a_panic() {
    for g in 1..=8u8 {
        let (store, root) = chain_to_248(g);
        let key = TreeKey::new([0; 31], 5);
        let deep = |e: &TE| matches!(e, TE::Corrupt { .. } | TE::TooDeep);

        let mut t = T::open(store.clone(), g, root).unwrap();
        let e = t.get(&key).unwrap_err();
        assert!(deep(&e), "g={g}: {e}");
        let e = t.get_stem(&key.stem).unwrap_err();
        assert!(deep(&e), "g={g}: {e}");

        let mut t = T::open(store.clone(), g, root).unwrap();
        let e = t
            .update(vec![(key, [1; 32]), (TreeKey::new([0xff; 31], 0), [2; 32])])
            .unwrap_err();
        assert!(deep(&e), "g={g}: {e}");
        assert_eq!(t.root(), root, "g={g}");
        assert_eq!(t.commit().unwrap().blobs, 0, "g={g}");

        let e = T::open(store.clone(), g, root)
            .unwrap()
            .verify()
            .unwrap_err();
        assert!(deep(&e), "g={g}: {e}");

        // The same chain with a hash that does not verify stops at the root, before any depth.
        let mut t = T::open(store, g, [9; 32]).unwrap();
        let e = t.get(&key).unwrap_err();
        assert!(
            matches!(e, TE::HashMismatch { path, .. } if path == Path::ROOT),
            "g={g}: {e}"
        );
    }
}

/// The two ways an update stays atomic. On top of uncommitted changes (a first update not
/// committed yet), a refused update changes nothing: its loads all come before its writes, and
/// the first update's changes stay and commit. With nothing uncommitted (just committed, a
/// resident top kept loaded), loading and writing are one walk, and a refused update goes back
/// to that commit: the same root, nothing written, and the next update and commit go on from
/// there.
#[test]
fn a_refused_update_keeps_what_was_uncommitted_and_what_was_committed() {
    for g in [1u8, 4, 5, 8] {
        let mut rng = StdRng::seed_from_u64(0xa70a_0000 + g as u64);
        let mut entries = random_entries(&mut rng, 300);
        let (mut store, root) = committed(&entries, g);
        let (key, blob) = pick_blob(&store, STEM_TAG, &mut rng);
        let path = Path::from_key(key.as_bytes()).unwrap();
        let NodeBlob::Stem(stem, values) = NodeBlob::decode(&blob).unwrap() else {
            unreachable!()
        };
        let mut damaged = blob.clone();
        // The last byte of the last value.
        *damaged.last_mut().unwrap() ^= 1;
        store.insert_raw(key, damaged);
        let bad = TreeKey::new(stem, values.iter().next().unwrap().0);
        let mut away = || loop {
            let k = TreeKey::from_bytes(rng.random());
            if !path.is_prefix_of(&k.stem) {
                break k;
            }
        };
        let refused = |t: &mut T, other: TreeKey| {
            let err = t
                .update(vec![(other, [2; 32]), (bad, [3; 32])])
                .unwrap_err();
            assert!(
                matches!(err, TE::HashMismatch { path: p, .. } if p == path),
                "g={g}: {err}"
            );
        };

        let mut t = T::open(store, g, root).unwrap();
        let first = away();
        t.insert(first, [1; 32]).unwrap();
        refused(&mut t, away());
        entries.insert(first.to_bytes(), [1; 32]);
        let want = reference_root(&entries);
        assert_eq!(t.root(), want, "g={g}: the uncommitted update was lost");
        assert_eq!(t.commit().unwrap().root, want, "g={g}");

        if path.len() >= g as usize {
            t.keep_resident(g as usize).unwrap();
            t.load_resident().unwrap();
        }
        refused(&mut t, away());
        assert_eq!(t.root(), want, "g={g}: a refused update changed the root");
        let stats = t.commit().unwrap();
        assert_eq!(
            (stats.root, stats.blobs, stats.removed),
            (want, 0, 0),
            "g={g}"
        );
        let next = away();
        t.insert(next, [4; 32]).unwrap();
        entries.insert(next.to_bytes(), [4; 32]);
        assert_eq!(t.commit().unwrap().root, reference_root(&entries), "g={g}");
    }
}

/// One trie committing round after round, never reopened (the dirty flags and the stems'
/// stored depths cleared and set by each commit, in parallel below depth 8): each commit
/// writes only what changed, a commit with no change writes nothing, and the store ends
/// exactly as the store of the same entries committed once from scratch (a stem pushed deeper
/// leaves no stale blob at its old path).
#[test]
fn commits_of_one_live_trie_leave_the_store_a_fresh_build_leaves() {
    for g in [1u8, 4, 5, 8] {
        let mut rng = StdRng::seed_from_u64(0x11fe_0000 + g as u64);
        let mut all = random_entries(&mut rng, 1500);
        let mut t = T::new(MemoryStore::new(), g).unwrap();
        t.update(batch(&all)).unwrap();
        t.commit().unwrap();
        for round in 0..4 {
            let unchanged = t.commit().unwrap();
            assert_eq!(
                (unchanged.blobs, unchanged.removed),
                (0, 0),
                "g={g} round {round}"
            );
            let writes = random_entries(&mut rng, 200);
            t.update(batch(&writes)).unwrap();
            all.extend(writes);
            let stats = t.commit().unwrap();
            assert!(stats.blobs > 0 && stats.blobs < 200 * (256 / g as usize + 2));
        }
        let mut fresh = T::new(MemoryStore::new(), g).unwrap();
        fresh.update(batch(&all)).unwrap();
        fresh.commit().unwrap();
        assert_eq!(
            differing_blobs(t.store(), fresh.store()),
            0,
            "g={g}: blobs where the live trie's store differs from a fresh build's"
        );
    }
}

/// A reopened trie loads its groups and stems from the store as batches reach them, and each
/// commit writes the loaded groups it changed. Committing small batches round after round on
/// one such trie (each touching few paths of each group it loads, so most of every rewritten
/// group is what was loaded, not what was built) must leave exactly what a fresh build of the
/// same entries leaves, every round: the test the live-trie one above cannot be, as that
/// trie never loads.
#[test]
fn commits_of_one_reopened_trie_leave_the_store_a_fresh_build_leaves() {
    for g in [1u8, 2, 5, 8] {
        let mut rng = StdRng::seed_from_u64(0x2e0e_0000 + g as u64);
        let mut all = random_entries(&mut rng, 1500);
        let (store, root) = committed(&all, g);
        let mut t = T::open(store, g, root).unwrap();
        for round in 0..6 {
            // New stems and new values on stored stems.
            let mut writes = random_entries(&mut rng, 8);
            let stored: Vec<[u8; 32]> = all.keys().copied().collect();
            for _ in 0..8 {
                let key = stored[rng.random_range(0..stored.len())];
                writes.insert(key, rng.random());
            }
            t.update(batch(&writes)).unwrap();
            all.extend(writes);
            let got = t.commit().unwrap().root;
            let (fresh, fresh_root) = committed(&all, g);
            assert_eq!(got, fresh_root, "g={g} round {round}");
            assert_eq!(
                differing_blobs(t.store(), &fresh),
                0,
                "g={g} round {round}: blobs where the reopened trie's store differs from a \
                 fresh build's"
            );
        }
    }
}

/// `discard` drops uncommitted changes: after it, the trie builds on its last commit alone
/// (the root it was opened at, then each commit's), and the next commit writes what a fresh
/// build of the committed entries and the new ones writes.
#[test]
fn discarded_changes_never_reach_a_commit() {
    for g in [1u8, 5, 8] {
        let mut rng = StdRng::seed_from_u64(0xd15c_0000 + g as u64);
        let mut all = random_entries(&mut rng, 400);
        let (store, root) = committed(&all, g);
        let mut t = T::open(store, g, root).unwrap();
        t.update(batch(&random_entries(&mut rng, 100))).unwrap();
        assert_ne!(t.root(), root);
        t.discard();
        assert_eq!(t.root(), root);
        let more = random_entries(&mut rng, 100);
        t.update(batch(&more)).unwrap();
        all.extend(more);
        let second = t.commit().unwrap().root;
        let (fresh, _) = committed(&all, g);
        assert_eq!(differing_blobs(t.store(), &fresh), 0, "g={g}");
        // After a commit, `discard` returns to that commit, not to the opening root.
        t.update(batch(&random_entries(&mut rng, 50))).unwrap();
        t.discard();
        assert_eq!(t.root(), second, "g={g}");
    }
}

/// `blob` changed so that it still decodes but hashes otherwise: the last byte of a stem
/// blob is in its last value, of a group blob in its last entry's hash.
fn forged(blob: &[u8]) -> Vec<u8> {
    let mut b = blob.to_vec();
    *b.last_mut().expect("blobs are never empty") ^= 1;
    assert!(NodeBlob::decode(&b).is_ok());
    b
}

/// Blobs decoded ahead (`Trie::decode_ahead`) are only a shortcut. A reopened trie given every
/// blob of its store ahead loads, hashes, updates and commits exactly what one reading the
/// store does, and takes each blob it loads from what was decoded ahead. Blobs that are stale
/// (an older commit's) or forged (they decode, but hash to something else) are never used:
/// the load reads the store instead, and a damaged store is still refused.
#[test]
fn blobs_decoded_ahead_are_used_only_when_they_hash_to_the_parent() {
    for g in [1u8, 2, 5, 8] {
        let mut rng = StdRng::seed_from_u64(0xa4ea_0000 + g as u64);
        let mut all = random_entries(&mut rng, 600);
        let (store, root) = committed(&all, g);
        let stale = snapshot(&store);
        let mut t = T::open(store, g, root).unwrap();
        let more = random_entries(&mut rng, 200);
        t.update(batch(&more)).unwrap();
        all.extend(more);
        let root = t.commit().unwrap().root;
        let store = t.into_store();
        // New stems, and new values on stored ones.
        let mut writes = random_entries(&mut rng, 40);
        let stored: Vec<[u8; 32]> = all.keys().copied().collect();
        for _ in 0..40 {
            writes.insert(stored[rng.random_range(0..stored.len())], rng.random());
        }

        let mut plain = T::open(store.clone(), g, root).unwrap();
        plain.update(batch(&writes)).unwrap();
        let want_root = plain.root();
        let want_stats = plain.stats();
        plain.commit().unwrap();
        assert!(want_stats.nodes_loaded > 0);

        let current: Vec<(PathKey, Vec<u8>)> = store.iter().map(|(k, b)| (*k, b.clone())).collect();
        let forgeries: Vec<(PathKey, Vec<u8>)> =
            current.iter().map(|(k, b)| (*k, forged(b))).collect();
        let stale: Vec<(PathKey, Vec<u8>)> = stale.into_iter().collect();
        for (what, ahead) in [
            ("current", &current),
            ("stale", &stale),
            ("forged", &forgeries),
        ] {
            let mut t = T::open(store.clone(), g, root).unwrap();
            for (k, b) in ahead {
                assert!(t.decode_ahead(k, b), "g={g} {what}: a stored blob decodes");
            }
            // What does not decode is not kept: an empty or a truncated blob.
            let (k, b) = &ahead[0];
            assert!(!t.decode_ahead(k, &[]), "g={g} {what}");
            assert!(!t.decode_ahead(k, &b[..b.len() - 1]), "g={g} {what}");
            let before = t.decoded_ahead();
            t.update(batch(&writes)).unwrap();
            assert_eq!(t.root(), want_root, "g={g} {what}");
            let stats = t.stats();
            assert_eq!(
                (stats.nodes_loaded, stats.bytes_loaded, stats.hashes),
                (
                    want_stats.nodes_loaded,
                    want_stats.bytes_loaded,
                    want_stats.hashes
                ),
                "g={g} {what}: loads and hashes as from the store"
            );
            // Every load took its path's blob, used or not.
            if what == "current" || what == "forged" {
                assert_eq!(
                    before - t.decoded_ahead(),
                    stats.nodes_loaded as usize,
                    "g={g} {what}"
                );
            }
            t.commit().unwrap();
            assert_eq!(
                t.decoded_ahead(),
                0,
                "g={g} {what}: a commit drops the rest"
            );
            assert_eq!(
                differing_blobs(t.store(), plain.store()),
                0,
                "g={g} {what}: blobs where the store differs from the plain trie's"
            );
        }

        // A damaged store with a forgery of the undamaged blob ahead: still refused.
        let (key, blob) = pick_blob(&store, STEM_TAG, &mut rng);
        let path = Path::from_key(key.as_bytes()).unwrap();
        let NodeBlob::Stem(stem, values) = NodeBlob::decode(&blob).unwrap() else {
            unreachable!()
        };
        // Another bit than the forgery's: the store and the forgery differ from the original
        // and from each other.
        let mut bad = blob.clone();
        *bad.last_mut().unwrap() ^= 2;
        let mut damaged = store.clone();
        damaged.insert_raw(key, bad);
        let mut t = T::open(damaged, g, root).unwrap();
        assert!(t.decode_ahead(&key, &forged(&blob)));
        let sub = values.iter().next().unwrap().0;
        let err = t.get(&TreeKey::new(stem, sub)).unwrap_err();
        assert!(
            matches!(err, TE::HashMismatch { path: p, .. } if p == path),
            "g={g}: {err}"
        );
    }
}

/// A "caterpillar" batch that splits at every one of the 248 levels with a large batch left on
/// one side (one stem parts at each bit, 256 keys of one stem go all the way down) updates,
/// commits, reloads, verifies and makes, encodes, decodes and checks a witness of the deepest
/// keys on rayon workers with a 256 KB stack: every walk over the tree takes its next level
/// through `bintrie_node::deeper`, which moves to a fresh stack segment when the current one
/// runs low. (Before, the update split into rayon tasks at every level and a debug build
/// overflowed a worker's 2 MB stack; with `deeper` a no-op this test overflows.)
#[test]
fn a_batch_that_splits_at_every_level_does_not_overflow_the_stack() {
    let base = base_stem();
    let mut entries = Entries::new();
    for i in 0..=255u8 {
        entries.insert(TreeKey::new(base, i).to_bytes(), [i; 32]);
    }
    for bit in 0..MAX_DEPTH {
        let mut stem = base;
        stem[bit / 8] ^= 0x80 >> (bit % 8);
        entries.insert(TreeKey::new(stem, 0).to_bytes(), [0xa1; 32]);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .stack_size(256 * 1024)
        .build()
        .unwrap();
    pool.install(|| caterpillar(&entries));
}

fn caterpillar(entries: &Entries) {
    for g in [1u8, 5] {
        let mut t = T::new(MemoryStore::new(), g).unwrap();
        t.update(batch(entries)).unwrap();
        let root = t.commit().unwrap().root;
        assert_eq!(root, reference_root(entries), "g={g}");
        assert_eq!(
            T::open(t.store().clone(), g, root)
                .unwrap()
                .verify()
                .unwrap(),
            root
        );
        // A witness of the two deepest stems' keys, through its byte form.
        let mut last = base_stem();
        last[30] ^= 1;
        let keys = [TreeKey::new(base_stem(), 7), TreeKey::new(last, 0)];
        let mut bytes = Vec::new();
        T::open(t.store().clone(), g, root)
            .unwrap()
            .witness(&keys)
            .unwrap()
            .encode(&mut bytes);
        let mut w = bintrie_trie::PartialTree::<Sha256Hasher>::decode(&bytes).unwrap();
        w.verify(&root).unwrap();
        assert_eq!(w.get(&keys[0]).unwrap(), Some([7; 32]), "g={g}");
        // The same batch again over the committed, unloaded tree: the loads take the same
        // split.
        let mut again = T::open(t.into_store(), g, root).unwrap();
        let changed: Vec<_> = batch(entries)
            .into_iter()
            .map(|(k, v)| (k, [v[0] ^ 1; 32]))
            .collect();
        again.update(changed).unwrap();
        assert_ne!(again.commit().unwrap().root, root, "g={g}");
    }
}

fn base_stem() -> Stem {
    [0x3c; 31]
}

/// A crafted store that reads a stem's node as an internal one (its preimage is `stem ‖ 0x00 ‖
/// subtree root`, the same 64 bytes) and its values' halves as a group below: every blob hashes
/// to what its parent holds, and without a check a key of that stem would walk into the empty
/// upper half of its values, "absent" though present. The walk refuses to turn right past a
/// left child that is its own stem followed by 0x00; another stem's key passes.
#[test]
fn a_stem_read_as_an_internal_node_from_the_store_is_refused() {
    use bintrie_node::TreeHasher;
    let stem: Stem = [0xe0; 31];
    let mut values = StemValues::new();
    values.set(0, [1; 32]);
    values.set(1, [2; 32]);
    let (subtree_root, _) = values.subtree_root::<Sha256Hasher>();
    let lower = values.leaf_siblings::<Sha256Hasher>(128)[7];
    assert_eq!(Sha256Hasher::hash_pair(&lower, &[0; 32]), subtree_root);
    let mut stem_half = [0u8; 32];
    stem_half[..31].copy_from_slice(&stem);
    let mut store = MemoryStore::new();
    let mut put = |path: Path, entries: &[GroupEntry]| {
        let mut blob = Vec::new();
        GroupBlob::encode(1, entries, &mut blob);
        store.insert_raw(path.to_key(), blob);
    };
    let top = [
        GroupEntry {
            index: 0,
            depth: 1,
            hash: stem_half,
        },
        GroupEntry {
            index: 1,
            depth: 1,
            hash: subtree_root,
        },
    ];
    let halves = [GroupEntry {
        index: 0,
        depth: 1,
        hash: lower,
    }];
    put(Path::ROOT, &top);
    put(Path::from_stem_prefix(&stem, 1), &halves);
    let root = group_root(1, &top);
    assert_eq!(
        root,
        bintrie_node::stem_node_hash::<Sha256Hasher>(&stem, &subtree_root)
    );
    let mut t = T::open(store.clone(), 1, root).unwrap();
    let e = t.get(&TreeKey::new(stem, 0)).unwrap_err();
    assert!(
        matches!(&e, TE::Corrupt { reason, .. } if reason.contains("own node's left half")),
        "{e}"
    );
    // A key of another stem down the same side walks on (the node is not its stem's).
    let mut t = T::open(store, 1, root).unwrap();
    assert_eq!(t.get(&TreeKey::new([0xf0; 31], 0)).unwrap(), None);
}
