//! The resident top ([`Trie::keep_resident`], [`Trie::trim`]): the nodes above a depth stay
//! loaded across blocks, while every block reads (and checks) only what lies below, writes the
//! same blobs as a fresh trie would and reaches the reference root.

mod common;

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{MAX_DEPTH, Path, PathKey};
use bintrie_trie::{CommitSet, MemoryStore, NodeStore, Trie, TrieError};
use common::{Entries, batch, random_entries, reference_root, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

/// A memory store that records the depth (in bits) of every blob read from it.
#[derive(Default)]
struct Recording {
    inner: MemoryStore,
    reads: Mutex<Vec<usize>>,
}

impl Recording {
    fn take_reads(&self) -> Vec<usize> {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }
}

impl NodeStore for Recording {
    type Error = std::convert::Infallible;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, Self::Error> {
        self.reads.lock().unwrap().push(key.bit_len());
        self.inner.get_node(key)
    }

    fn apply(&mut self, commit: &CommitSet) -> Result<(), Self::Error> {
        self.inner.apply(commit)
    }
}

/// One block's writes: new values for some stems already in `entries`, new stems (random
/// ones, and near-copies of existing stems, so splits run below the resident depth too).
fn block_writes(rng: &mut StdRng, entries: &Entries) -> Entries {
    let stems: Vec<Stem> = entries
        .keys()
        .map(|k| TreeKey::from_bytes(*k).stem)
        .collect();
    let mut out = Entries::new();
    for _ in 0..40 {
        let stem: Stem = match rng.random_range(0..3) {
            0 => stems[rng.random_range(0..stems.len())],
            1 => {
                let mut s = stems[rng.random_range(0..stems.len())];
                let bit = rng.random_range(0..MAX_DEPTH);
                s[bit / 8] ^= 0x80 >> (bit % 8);
                s
            }
            _ => rng.random(),
        };
        out.insert(TreeKey::new(stem, rng.random()).to_bytes(), rng.random());
    }
    out
}

/// At every group depth: a trie that keeps its top (two groups deep) across eight blocks reads
/// only blobs below the top after loading it once, writes exactly the blobs a fresh trie per
/// block writes, and reaches the reference root after every block.
#[test]
fn the_top_stays_loaded_and_each_block_writes_what_a_fresh_trie_writes() {
    for g in 1..=8u8 {
        let mut rng = StdRng::seed_from_u64(0x7e51_0000 + u64::from(g));
        let mut entries = random_entries(&mut rng, 300);
        let mut fresh = Trie::<MemoryStore>::new(MemoryStore::new(), g).unwrap();
        fresh.update(batch(&entries)).unwrap();
        let root = fresh.commit().unwrap().root;
        let mut fresh_root = root;
        let mut fresh_store = fresh.into_store();
        let store = Recording {
            inner: fresh_store.clone(),
            ..Default::default()
        };
        let depth = 2 * g as usize;
        let mut kept = Trie::<Recording>::open(store, g, root).unwrap();
        kept.keep_resident(depth).unwrap();
        assert_eq!(kept.resident_depth(), Some(depth));
        let loaded = kept.load_resident().unwrap();
        assert!(loaded > 1, "g={g}: the top is {loaded} blobs");
        let reads = kept.store().take_reads();
        assert!(reads.iter().all(|&d| d < depth), "g={g}: {reads:?}");
        let mut reread = 0;
        for block in 0..8 {
            let writes = block_writes(&mut rng, &entries);
            entries.extend(writes.iter().map(|(k, v)| (*k, *v)));
            kept.update(batch(&writes)).unwrap();
            let root = kept.commit().unwrap().root;
            assert_eq!(root, reference_root(&entries), "g={g} block {block}");
            let reads = kept.store().take_reads();
            assert!(!reads.is_empty(), "g={g} block {block}: nothing read");
            assert!(
                reads.iter().all(|&d| d >= depth),
                "g={g} block {block}: the top was read again: {reads:?}"
            );

            let mut fresh = Trie::<MemoryStore>::open(fresh_store, g, fresh_root).unwrap();
            fresh.update(batch(&writes)).unwrap();
            fresh_root = fresh.commit().unwrap().root;
            fresh_store = fresh.into_store();
            assert_eq!(fresh_root, root);
            assert!(
                snapshot(&fresh_store) == snapshot(&kept.store().inner),
                "g={g} block {block}: the stores differ"
            );
            kept.trim().unwrap();
            // What lay below the top was dropped: reading the block's keys again reads it.
            for (k, v) in &writes {
                assert_eq!(kept.get(&TreeKey::from_bytes(*k)).unwrap(), Some(*v));
            }
            let reads = kept.store().take_reads();
            assert!(reads.iter().all(|&d| d >= depth), "g={g}: {reads:?}");
            reread += reads.len();
            kept.trim().unwrap();
        }
        assert!(reread > 0, "g={g}: nothing was trimmed");
    }
}

/// `trim` refuses to drop uncommitted changes (and changes nothing); `keep_resident` refuses a
/// depth where an internal node could be neither a group root nor above one.
#[test]
fn trim_refuses_uncommitted_changes_and_a_misaligned_depth_is_refused() {
    let mut rng = StdRng::seed_from_u64(7);
    let entries = random_entries(&mut rng, 100);
    let mut t = Trie::<MemoryStore>::new(MemoryStore::new(), 4).unwrap();
    for bad in [3, 5, 249, 300] {
        let err = t.keep_resident(bad).unwrap_err();
        assert!(matches!(err, TrieError::BadResidentDepth { .. }), "{err}");
    }
    assert_eq!(t.resident_depth(), None);
    t.keep_resident(8).unwrap();
    t.keep_resident(MAX_DEPTH).unwrap();
    t.keep_resident(8).unwrap();
    t.update(batch(&entries)).unwrap();
    let err = t.trim().unwrap_err();
    assert!(matches!(err, TrieError::Uncommitted), "{err}");
    let root = t.commit().unwrap().root;
    assert_eq!(
        root,
        reference_root(&entries),
        "the changes survived the refused trim"
    );
    t.trim().unwrap();
    assert_eq!(t.root(), root);
}

/// A flipped byte in a blob below the top is still caught when a block reads it after a trim;
/// one inside the top is never read again (the top was checked when it was loaded), so the
/// block still reaches the right root.
#[test]
fn blobs_below_the_top_are_checked_on_every_block() {
    let g = 4;
    let depth = 8;
    let mut rng = StdRng::seed_from_u64(11);
    let mut entries = random_entries(&mut rng, 400);
    let mut t = Trie::<MemoryStore>::new(MemoryStore::new(), g).unwrap();
    t.keep_resident(depth).unwrap();
    t.update(batch(&entries)).unwrap();
    t.commit().unwrap();
    t.trim().unwrap();
    // A stem below the top, and the group blob at the resident depth on its path.
    let (key, at, blob) = entries
        .keys()
        .find_map(|k| {
            let key = TreeKey::from_bytes(*k);
            let at = Path::from_stem_prefix(&key.stem, depth).to_key();
            let blob = t.store().get_node(&at).unwrap()?;
            // A group blob (a stem blob starts with the stem tag).
            (blob[0] == bintrie_node::GROUP_TAG).then_some((key, at, blob))
        })
        .expect("a group at the resident depth");
    let top = Path::from_stem_prefix(&key.stem, g as usize).to_key();
    let top_blob = t
        .store()
        .get_node(&top)
        .unwrap()
        .expect("a group inside the top");

    let mut damaged = top_blob.clone();
    *damaged.last_mut().unwrap() ^= 1;
    t.store_mut().insert_raw(top, damaged);
    let mut write = Entries::new();
    write.insert(key.to_bytes(), [0x5a; 32]);
    entries.extend(write.clone());
    t.update(batch(&write)).unwrap();
    assert_eq!(t.commit().unwrap().root, reference_root(&entries));
    t.trim().unwrap();

    // The commit rewrote the blob at `at`: damage the new one.
    let written = t.store().get_node(&at).unwrap().unwrap();
    assert_ne!(written, blob);
    let mut damaged = written;
    *damaged.last_mut().unwrap() ^= 1;
    t.store_mut().insert_raw(at, damaged);
    write.insert(key.to_bytes(), [0xa5; 32]);
    let err = t.update(batch(&write)).unwrap_err();
    assert!(matches!(err, TrieError::HashMismatch { .. }), "{err}");
}

/// A blob the trie already holds (the resident top) is not decoded ahead again; one below it
/// is, until a load below the top brought it into memory (the trie then walks to it before
/// deciding, as it does not while nothing below the top is loaded).
#[test]
fn the_resident_top_is_not_decoded_ahead() {
    let g = 2;
    let mut rng = StdRng::seed_from_u64(3);
    let entries = random_entries(&mut rng, 200);
    let mut t = Trie::<MemoryStore>::new(MemoryStore::new(), g).unwrap();
    t.update(batch(&entries)).unwrap();
    t.commit().unwrap();
    t.keep_resident(4).unwrap();
    t.unload().unwrap();
    t.load_resident().unwrap();
    let stem = TreeKey::from_bytes(*entries.keys().next().unwrap()).stem;
    for (len, expect) in [(0, false), (2, false), (4, true)] {
        let key = Path::from_stem_prefix(&stem, len).to_key();
        let blob = t.store().get_node(&key).unwrap().unwrap();
        assert_eq!(t.decode_ahead(&key, &blob), expect, "depth {len}");
    }
    assert_eq!(t.decoded_ahead(), 1);
    // A lookup loads the path below the top (taking the blob decoded ahead): held now.
    let key = TreeKey::from_bytes(*entries.keys().next().unwrap());
    assert!(t.get(&key).unwrap().is_some());
    assert_eq!(t.decoded_ahead(), 0, "the load took it");
    let below = Path::from_stem_prefix(&stem, 4).to_key();
    let blob = t.store().get_node(&below).unwrap().unwrap();
    assert!(
        !t.decode_ahead(&below, &blob),
        "a node loaded below the top"
    );
    // After a trim, nothing below the top is held: decoded ahead again.
    t.trim().unwrap();
    assert!(t.decode_ahead(&below, &blob), "trimmed");
}

/// A top that reaches depth 248 holds the whole tree: once loaded, blocks read nothing from
/// the store, and still reach the reference root.
#[test]
fn a_top_at_depth_248_holds_everything() {
    let g = 3;
    let mut rng = StdRng::seed_from_u64(248);
    let mut entries = random_entries(&mut rng, 150);
    let mut t = Trie::<MemoryStore>::new(MemoryStore::new(), g).unwrap();
    t.update(batch(&entries)).unwrap();
    let root = t.commit().unwrap().root;
    let store = Recording {
        inner: t.into_store(),
        ..Default::default()
    };
    let mut kept = Trie::<Recording>::open(store, g, root).unwrap();
    kept.keep_resident(MAX_DEPTH).unwrap();
    assert!(kept.load_resident().unwrap() > 150);
    kept.store().take_reads();
    for block in 0..4 {
        let writes = block_writes(&mut rng, &entries);
        entries.extend(writes.iter().map(|(k, v)| (*k, *v)));
        kept.update(batch(&writes)).unwrap();
        assert_eq!(
            kept.commit().unwrap().root,
            reference_root(&entries),
            "block {block}"
        );
        kept.trim().unwrap();
        assert_eq!(
            kept.store().take_reads(),
            Vec::<usize>::new(),
            "block {block}"
        );
    }
}

/// A stem above the resident depth that a write pushes down to it, on another prefix than the
/// written stem's, is dropped by the next trim like everything else below the top.
#[test]
fn a_stem_pushed_down_to_the_resident_depth_is_trimmed() {
    let (g, depth) = (2u8, 4usize);
    let s: Stem = [0u8; 31];
    let far: Stem = [0xff; 31];
    let mut t = Trie::<Recording>::new(Recording::default(), g).unwrap();
    t.keep_resident(depth).unwrap();
    t.update(vec![
        (TreeKey::new(s, 1), [1; 32]),
        (TreeKey::new(far, 1), [2; 32]),
    ])
    .unwrap();
    t.commit().unwrap();
    t.trim().unwrap();
    // `s` sits at depth 1. This stem shares its first three bits, so `s` goes down to depth 4
    // (bit 3 differs), under a prefix the write does not have.
    let mut near = s;
    near[0] = 0b0001_0000;
    t.update(vec![(TreeKey::new(near, 1), [3; 32])]).unwrap();
    t.commit().unwrap();
    t.trim().unwrap();
    t.store().take_reads();
    assert_eq!(t.get(&TreeKey::new(s, 1)).unwrap(), Some([1; 32]));
    assert_eq!(
        t.store().take_reads(),
        vec![depth],
        "`s` was dropped and read again"
    );
}

/// `keep_resident` drops what is loaded (so a trim can find what it must drop from then on)
/// and refuses to while there are uncommitted changes.
#[test]
fn keep_resident_starts_from_an_unloaded_tree() {
    let mut rng = StdRng::seed_from_u64(5);
    let entries = random_entries(&mut rng, 50);
    let mut t = Trie::<MemoryStore>::new(MemoryStore::new(), 4).unwrap();
    t.update(batch(&entries)).unwrap();
    let err = t.keep_resident(8).unwrap_err();
    assert!(matches!(err, TrieError::Uncommitted), "{err}");
    let root = t.commit().unwrap().root;
    assert!(t.is_loaded());
    t.keep_resident(8).unwrap();
    assert!(!t.is_loaded());
    t.keep_resident(0).unwrap();
    assert_eq!(t.resident_depth(), None);
    assert_eq!(t.root(), root);
}

/// A stem written into an empty slot at the resident depth, under a resident internal node
/// (nothing loaded on its way, nothing pushed down), is dropped by the next trim.
#[test]
fn a_stem_written_into_an_empty_slot_at_the_resident_depth_is_trimmed() {
    let (g, depth) = (2u8, 4usize);
    let mut a: Stem = [0u8; 31];
    let mut b = a;
    b[0] = 0b0000_1000; // shares 4 bits with `a`: an internal node at depth 4
    let far: Stem = [0xff; 31];
    let mut t = Trie::<Recording>::new(Recording::default(), g).unwrap();
    t.keep_resident(depth).unwrap();
    let entries = [a, b, far].map(|s| (TreeKey::new(s, 0), [9; 32]));
    t.update(entries.to_vec()).unwrap();
    t.commit().unwrap();
    t.trim().unwrap();
    // Bits 0001: the empty sibling, at depth 4, of the internal node above `a` and `b`.
    a[0] = 0b0001_0000;
    t.update(vec![(TreeKey::new(a, 0), [7; 32])]).unwrap();
    t.commit().unwrap();
    assert_eq!(
        t.store().take_reads(),
        Vec::<usize>::new(),
        "nothing was loaded"
    );
    t.trim().unwrap();
    assert_eq!(t.get(&TreeKey::new(a, 0)).unwrap(), Some([7; 32]));
    assert_eq!(
        t.store().take_reads(),
        vec![depth],
        "the new stem was dropped and read again"
    );
}
