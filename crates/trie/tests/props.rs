//! Property tests: the engine against a plain recursive merkleization, across group depths,
//! insertion orders and commit/reload cycles.

mod common;

use bintrie_keys::TreeKey;
use bintrie_node::PathKey;
use bintrie_trie::{CommitSet, MemoryStore, NodeStore, Trie};
use common::{Entries, reference_root};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Keys that exercise the tree's shapes: stems derived from a few bases by flipping one bit at a
/// random depth (long shared prefixes, deep splits), fully random stems, and several sub-indices
/// per stem.
fn arb_entries(max: usize) -> impl Strategy<Value = Vec<([u8; 32], [u8; 32])>> {
    let base = proptest::array::uniform31(any::<u8>());
    let stem = (
        proptest::collection::vec(base, 1..4),
        any::<prop::sample::Index>(),
        0usize..248,
        any::<bool>(),
        proptest::array::uniform31(any::<u8>()),
    )
        .prop_map(|(bases, which, bit, random, rnd)| {
            if random {
                return rnd;
            }
            let mut s = *which.get(&bases);
            s[bit / 8] ^= 0x80 >> (bit % 8);
            s
        });
    let value = prop_oneof![Just([0u8; 32]), proptest::array::uniform32(any::<u8>()),];
    proptest::collection::vec(
        (stem, proptest::collection::vec((any::<u8>(), value), 1..4)),
        1..max,
    )
    .prop_map(|stems| {
        stems
            .into_iter()
            .flat_map(|(stem, subs)| {
                subs.into_iter()
                    .map(move |(sub, v)| (TreeKey::new(stem, sub).to_bytes(), v))
            })
            .collect()
    })
}

fn as_batch(entries: &[([u8; 32], [u8; 32])]) -> Vec<(TreeKey, [u8; 32])> {
    entries
        .iter()
        .map(|(k, v)| (TreeKey::from_bytes(*k), *v))
        .collect()
}

/// Every blob a store holds, by path key.
fn blobs(store: &MemoryStore) -> BTreeMap<PathKey, Vec<u8>> {
    store.iter().map(|(k, v)| (*k, v.clone())).collect()
}

/// The blobs one commit of a fresh tree holding `batch` writes at group depth `g`.
fn one_commit(batch: &[(TreeKey, [u8; 32])], g: u8) -> BTreeMap<PathKey, Vec<u8>> {
    let mut fresh: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
    fresh.update(batch.to_vec()).unwrap();
    fresh.commit().unwrap();
    blobs(fresh.store())
}

fn last_wins(entries: &[([u8; 32], [u8; 32])]) -> Entries {
    entries.iter().copied().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn root_matches_reference_at_every_group_depth(entries in arb_entries(60)) {
        let want = reference_root(&last_wins(&entries));
        for g in 1..=8u8 {
            let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            t.update(as_batch(&entries)).unwrap();
            prop_assert_eq!(t.root(), want);
            t.commit().unwrap();
            // Reload, read everything back, then force rehashing of loaded groups by touching
            // every stem again with its own values (no change) and one real change.
            let mut again: Trie<MemoryStore> = Trie::open(t.into_store(), g, want).unwrap();
            for (k, v) in last_wins(&entries) {
                prop_assert_eq!(again.get(&TreeKey::from_bytes(k)).unwrap(), Some(v));
            }
            prop_assert_eq!(again.root(), want);
            let mut fresh: Trie<MemoryStore> = Trie::open(again.into_store(), g, want).unwrap();
            prop_assert_eq!(fresh.verify().unwrap(), want);
        }
    }

    #[test]
    fn insertion_order_does_not_matter(entries in arb_entries(40), seed in any::<u64>()) {
        // Distinct keys only, so the order cannot change which value wins.
        let map = last_wins(&entries);
        let mut keys: Vec<_> = map.iter().map(|(k, v)| (*k, *v)).collect();
        // Deterministic shuffle from the seed.
        let mut s = seed | 1;
        for i in (1..keys.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            keys.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 4).unwrap();
        for (i, (k, v)) in keys.iter().enumerate() {
            t.insert(TreeKey::from_bytes(*k), *v).unwrap();
            if i % 5 == 0 {
                t.root(); // interleave hashing with inserts
            }
        }
        prop_assert_eq!(t.root(), reference_root(&map));
    }

    /// Updates in several blocks with commits and reloads in between: the root follows the
    /// reference, and the store ends up holding exactly what one commit of the final tree holds
    /// (every vacated path deleted, nothing stale left behind).
    #[test]
    fn commit_reload_cycles(entries in arb_entries(80), g in 1u8..=8, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..4)) {
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(entries.len() + 1)).collect();
        bounds.push(0);
        bounds.push(entries.len());
        bounds.sort_unstable();
        let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
        let mut applied: Entries = BTreeMap::new();
        for (i, w) in bounds.windows(2).enumerate() {
            let block = &entries[w[0]..w[1]];
            t.update(as_batch(block)).unwrap();
            applied.extend(block.iter().copied());
            // Every other block, the commit's own walk does the rehash.
            let root = if i % 2 == 0 {
                let root = t.root();
                t.commit().unwrap();
                root
            } else {
                let set = t.prepare_commit();
                let root = set.root;
                t.commit_prepared(set, |s, set| s.apply(set)).unwrap();
                root
            };
            prop_assert_eq!(root, reference_root(&applied));
            t = Trie::open(t.into_store(), g, root).unwrap();
        }
        prop_assert_eq!(blobs(t.store()), one_commit(&as_batch(&entries), g));
    }
}

/// A memory store whose next `apply` fails (writing nothing) when told to.
#[derive(Default)]
struct Flaky {
    inner: MemoryStore,
    fail_next: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("the write failed")]
struct WriteFailed;

impl NodeStore for Flaky {
    type Error = WriteFailed;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.inner.get_node(key).unwrap_or_else(|e| match e {}))
    }

    fn apply(&mut self, commit: &CommitSet) -> Result<(), Self::Error> {
        if std::mem::take(&mut self.fail_next) {
            return Err(WriteFailed);
        }
        self.inner.apply(commit).unwrap_or_else(|e| match e {});
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Blocks whose commits fail (the trie is kept, not discarded) stay uncommitted: the next
    /// commit that succeeds writes their changes too, and no split after a failed commit
    /// leaves a stale blob. At the end the store holds exactly what one commit of the final
    /// tree holds.
    #[test]
    fn failed_commits_are_written_by_the_next_one(entries in arb_entries(80), g in 1u8..=8, fails in proptest::collection::vec(any::<bool>(), 5)) {
        let mut t: Trie<Flaky> = Trie::new(Flaky::default(), g).unwrap();
        let mut applied: Entries = BTreeMap::new();
        let n = fails.len();
        for (i, fail) in fails.iter().enumerate() {
            let block = &entries[i * entries.len() / n..(i + 1) * entries.len() / n];
            t.update(as_batch(block)).unwrap();
            applied.extend(block.iter().copied());
            // The last commit always succeeds.
            let fail = *fail && i + 1 < n;
            t.store_mut().fail_next = fail;
            let committed = t.commit();
            prop_assert_eq!(committed.is_err(), fail);
            prop_assert_eq!(t.root(), reference_root(&applied));
        }
        let root = t.root();
        let mut reopened: Trie<MemoryStore> = Trie::open(t.into_store().inner, g, root).unwrap();
        prop_assert_eq!(reopened.verify().unwrap(), root);
        prop_assert_eq!(blobs(reopened.store()), one_commit(&as_batch(&entries), g));
    }
}

/// `verify` recomputes from the stored blobs and catches a wrong hash in a group blob (as a
/// [`bintrie_trie::TrieError::HashMismatch`]: the damaged group no longer hashes to what its
/// parent holds).
#[test]
fn verify_detects_a_corrupt_group_hash() {
    let entries: Vec<_> = (0u8..40)
        .map(|i| (TreeKey::new([i.wrapping_mul(37); 31], i), [i; 32]))
        .collect();
    let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 3).unwrap();
    t.update(entries).unwrap();
    let root = t.root();
    t.commit().unwrap();
    let mut store = t.into_store();
    let (key, blob) = store
        .iter()
        .find(|(k, b)| !k.as_bytes().is_empty() && b[0] == 0x02)
        .map(|(k, b)| (*k, b.clone()))
        .expect("a non-root group");
    let mut damaged = blob.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    store.insert_raw(key, damaged);
    let mut t: Trie<MemoryStore> = Trie::open(store, 3, root).unwrap();
    let err = t.verify().unwrap_err();
    assert!(
        matches!(err, bintrie_trie::TrieError::HashMismatch { .. }),
        "{err}"
    );
}

/// A set prepared before a further change is not written as it stands: the commit prepares
/// again, so the store holds the tree as it is at the commit.
#[test]
fn a_stale_prepared_set_is_prepared_again() {
    let entries: Vec<_> = (0u8..40)
        .map(|i| (TreeKey::new([i.wrapping_mul(37); 31], i), [i; 32]))
        .collect();
    let (first, second) = entries.split_at(25);
    let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 4).unwrap();
    t.update(first.to_vec()).unwrap();
    let stale = t.prepare_commit();
    t.update(second.to_vec()).unwrap();
    let stats = t.commit_prepared(stale, |s, set| s.apply(set)).unwrap();
    let mut all: Entries = BTreeMap::new();
    for (k, v) in &entries {
        all.insert(k.to_bytes(), *v);
    }
    assert_eq!(stats.root, reference_root(&all));
    assert_eq!(blobs(t.store()), one_commit(&entries, 4));
}
