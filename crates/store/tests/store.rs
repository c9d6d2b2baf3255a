//! The MDBX store under the trie: round trips at every group depth, both read paths, reopen,
//! group-depth mismatch, a full map, and snapshot isolation.

use bintrie_keys::TreeKey;
use bintrie_store::{
    Durability, ExternalSort, ReadPath, StateStore, StoreError, StoreOptions, stems_of,
};
use bintrie_trie::Trie;
use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use std::collections::BTreeMap;

fn opts(g: u8) -> StoreOptions {
    StoreOptions {
        group_depth: Some(g),
        durability: Durability::Relaxed,
        ..Default::default()
    }
}

fn random_writes(rng: &mut StdRng, n: usize) -> Vec<(TreeKey, [u8; 32])> {
    (0..n)
        .map(|_| {
            let mut stem = [0u8; 31];
            rng.fill(&mut stem[..]);
            // Some stems share long prefixes.
            if rng.random_bool(0.2) {
                stem[..20].fill(0xaa);
            }
            (TreeKey::new(stem, rng.random()), rng.random())
        })
        .collect()
}

#[test]
fn round_trip_every_group_depth_and_both_read_paths() {
    let mut rng = StdRng::seed_from_u64(7);
    let blocks: Vec<_> = (0..3).map(|_| random_writes(&mut rng, 400)).collect();
    let mut expected: BTreeMap<TreeKey, [u8; 32]> = BTreeMap::new();
    for b in &blocks {
        expected.extend(b.iter().copied());
    }
    let mut want_root = None;
    for g in 1..=8u8 {
        let dir = tempfile::tempdir().unwrap();
        let mut roots = Vec::new();
        {
            let store = StateStore::open(dir.path(), &opts(g)).unwrap();
            let mut trie: Trie<StateStore> = Trie::new(store, g).unwrap();
            for b in &blocks {
                trie.update(b.clone()).unwrap();
                roots.push(trie.commit().unwrap().root);
                // Reopen the trie from the store between blocks.
                let store = trie.into_store();
                let root = store.meta().root;
                trie = Trie::open(store, g, root).unwrap();
            }
        }
        let root = *roots.last().unwrap();
        assert_eq!(
            *want_root.get_or_insert(root),
            root,
            "root differs at g={g}"
        );
        // Reopen the database: meta, values by both paths, full verification.
        let store = StateStore::open(
            dir.path(),
            &StoreOptions {
                group_depth: None,
                ..opts(g)
            },
        )
        .unwrap();
        assert_eq!(store.meta().group_depth, g);
        assert_eq!(store.meta().block, 3);
        assert_eq!(store.meta().root, root);
        {
            let reader = store.reader().unwrap();
            for (k, v) in expected.iter().step_by(7) {
                let flat = reader.get_stem(&k.stem, ReadPath::Flat).unwrap().unwrap();
                let walk = reader
                    .get_stem(&k.stem, ReadPath::TrieWalk)
                    .unwrap()
                    .unwrap();
                assert_eq!(flat, walk);
                assert_eq!(flat.get(k.sub_index), Some(v));
            }
            let absent = [0x55u8; 31];
            assert!(reader.get_stem(&absent, ReadPath::Flat).unwrap().is_none());
            assert!(
                reader
                    .get_stem(&absent, ReadPath::TrieWalk)
                    .unwrap()
                    .is_none()
            );
            let s = reader.stats();
            assert!(s.lookups > 0 && s.bytes > 0);
        }
        let mut trie: Trie<StateStore> = Trie::open(store, g, root).unwrap();
        assert_eq!(trie.verify().unwrap(), root);
    }
}

#[test]
fn group_depth_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(StateStore::open(dir.path(), &opts(5)).unwrap());
    let err = StateStore::open(dir.path(), &opts(6)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::GroupDepthMismatch {
                stored: 5,
                requested: 6
            }
        ),
        "{err}"
    );
    assert!(StateStore::open(dir.path(), &opts(5)).is_ok());
    let missing = dir.path().join("nope");
    let err = StateStore::open(
        &missing,
        &StoreOptions {
            create: false,
            ..opts(5)
        },
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)));
}

#[test]
fn map_full_leaves_the_last_block_intact() {
    let dir = tempfile::tempdir().unwrap();
    let small = StoreOptions {
        max_size: Some(1 << 20),
        growth_step: Some(1 << 16),
        ..opts(4)
    };
    let mut rng = StdRng::seed_from_u64(9);
    let store = StateStore::open(dir.path(), &small).unwrap();
    let mut trie: Trie<StateStore> = Trie::new(store, 4).unwrap();
    trie.update(random_writes(&mut rng, 100)).unwrap();
    let first = trie.commit().unwrap().root;
    trie.update(random_writes(&mut rng, 50_000)).unwrap();
    let err = trie.commit().unwrap_err();
    assert!(
        matches!(err, bintrie_trie::TrieError::Store(StoreError::MapFull)),
        "{err}"
    );
    drop(trie);
    let store = StateStore::open(dir.path(), &small).unwrap();
    assert_eq!(store.meta().root, first);
    assert_eq!(store.meta().block, 1);
    let mut trie: Trie<StateStore> = Trie::open(store, 4, first).unwrap();
    assert_eq!(trie.verify().unwrap(), first);
}

#[test]
fn reader_snapshot_is_stable_during_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let store = StateStore::open(dir.path(), &opts(5)).unwrap();
    let reader_store = store.clone();
    let mut trie: Trie<StateStore> = Trie::new(store, 5).unwrap();
    let w = random_writes(&mut rng, 200);
    let key = w[0].0;
    trie.update(w).unwrap();
    let r1 = trie.commit().unwrap().root;
    let reader = reader_store.reader().unwrap();
    let before = reader.get_stem(&key.stem, ReadPath::Flat).unwrap();
    // A writer on another thread overwrites the key and commits.
    std::thread::scope(|s| {
        s.spawn(|| {
            trie.insert(key, [0xee; 32]).unwrap();
            trie.commit().unwrap();
        });
    });
    assert_eq!(reader.root().unwrap(), r1);
    assert_eq!(reader.get_stem(&key.stem, ReadPath::Flat).unwrap(), before);
    assert_eq!(
        reader.get_stem(&key.stem, ReadPath::TrieWalk).unwrap(),
        before
    );
    let fresh = reader_store.reader().unwrap();
    assert_eq!(
        fresh
            .get_stem(&key.stem, ReadPath::Flat)
            .unwrap()
            .unwrap()
            .get(key.sub_index),
        Some(&[0xee; 32])
    );
}

/// The trie prefetcher: blobs preloaded for the paths of the next block's stems serve the trie
/// update (fewer store reads), the result is the same tree, and blobs preloaded for one block
/// are never served after a commit has changed the tree.
#[test]
fn warmed_trie_paths_serve_the_update_and_never_outlive_a_commit() {
    use bintrie_trie::MemoryStore;
    use std::sync::atomic::AtomicBool;
    let mut rng = StdRng::seed_from_u64(11);
    let g = 4;
    let base = random_writes(&mut rng, 3_000);
    let next = random_writes(&mut rng, 200);
    let mut reference: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
    reference.update(base.clone()).unwrap();
    reference.update(next.clone()).unwrap();
    let want = reference.root();

    let build = |dir: &std::path::Path| {
        let store = StateStore::open(dir, &opts(g)).unwrap();
        let mut trie: Trie<StateStore> = Trie::new(store, g).unwrap();
        trie.update(base.clone()).unwrap();
        trie.commit().unwrap();
        let store = trie.into_store();
        let root = store.meta().root;
        Trie::<StateStore>::open(store, g, root).unwrap()
    };
    let stems: Vec<_> = next.iter().map(|(k, _)| k.stem).collect();
    let no_stop = AtomicBool::new(false);

    // Without preloading: every blob on the paths comes from MDBX.
    let cold_dir = tempfile::tempdir().unwrap();
    let mut cold = build(cold_dir.path());
    cold.update(next.clone()).unwrap();
    assert_eq!(cold.root(), want);
    let cold_loads = cold.stats().nodes_loaded;

    // With preloading: the same tree, and the blobs were taken from memory.
    let warm_dir = tempfile::tempdir().unwrap();
    let mut warm = build(warm_dir.path());
    let loaded = warm.store().warm_trie_paths(&stems, 3, &no_stop).unwrap();
    assert!(loaded.lookups > 0 && loaded.bytes > 0);
    assert_eq!(warm.store().warm_blobs() as u64, loaded.lookups);
    warm.update(next.clone()).unwrap();
    assert_eq!(warm.root(), want);
    assert_eq!(warm.stats().nodes_loaded, cold_loads);
    // Every blob the update needed was preloaded, so it took them all from memory.
    assert_eq!(
        loaded.lookups - warm.store().warm_blobs() as u64,
        cold_loads,
        "the update did not take its blobs from the preload"
    );
    warm.commit().unwrap();
    assert_eq!(warm.store().meta().root, want);
    assert_eq!(
        warm.store().warm_blobs(),
        0,
        "a commit drops preloaded blobs"
    );

    // Preload for the current tree, then commit a block that rewrites those paths: the next
    // update must not see the stale blobs (it would compute a wrong root or fail to decode).
    let stale_dir = tempfile::tempdir().unwrap();
    let mut t = build(stale_dir.path());
    t.store().warm_trie_paths(&stems, 2, &no_stop).unwrap();
    t.update(next[..100].to_vec()).unwrap();
    t.commit().unwrap();
    let store = t.into_store();
    let root = store.meta().root;
    let mut t: Trie<StateStore> = Trie::open(store, g, root).unwrap();
    t.update(next[100..].to_vec()).unwrap();
    assert_eq!(t.root(), want);
    assert_eq!(t.verify().unwrap(), want);

    // Below a depth: only the blobs at or under it are kept and handed on, once each.
    let handed = |below: usize| {
        let dir = tempfile::tempdir().unwrap();
        let t = build(dir.path());
        let keys = std::sync::Mutex::new(Vec::new());
        let each = |key: &bintrie_node::PathKey, _: &[u8]| keys.lock().unwrap().push(*key);
        let stats = t
            .store()
            .warm_trie_paths_with(&stems, below, 3, &no_stop, Some(&each))
            .unwrap();
        let mut keys = keys.into_inner().unwrap();
        keys.sort_unstable();
        (stats.lookups, keys)
    };
    let (all_kept, all) = handed(0);
    assert_eq!(all_kept, all.len() as u64);
    for below in [1, usize::from(g), 2 * usize::from(g) + 1, 248, usize::MAX] {
        let want: Vec<_> = all
            .iter()
            .filter(|k| k.bit_len() >= below)
            .copied()
            .collect();
        let (kept, keys) = handed(below);
        assert_eq!(keys, want, "below {below}");
        assert_eq!(
            kept,
            want.len() as u64,
            "below {below}: kept blobs above it"
        );
    }

    // A set stop flag loads nothing.
    let stopped = AtomicBool::new(true);
    let stop_dir = tempfile::tempdir().unwrap();
    let t = build(stop_dir.path());
    assert_eq!(
        t.store()
            .warm_trie_paths(&stems, 2, &stopped)
            .unwrap()
            .lookups,
        0
    );
}

/// `shape` counts what a database holds from one snapshot: as many stem blobs as flat stems,
/// their depths summing to the stem count, and the meta of that snapshot.
#[test]
fn shape_counts_groups_stems_and_depths() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), &StoreOptions::default()).unwrap();
    let empty = store.shape().unwrap();
    assert_eq!(
        (empty.nodes, empty.stems, empty.depth_summary()),
        (0, 0, (0, 0.0, 0))
    );
    let mut trie: Trie<StateStore> = Trie::new(store, 4).unwrap();
    // Three stems: two sharing their first byte, one apart.
    let writes = [[0x00u8; 31], [0x01; 31], [0x80; 31]]
        .into_iter()
        .map(|s| (TreeKey::new(s, 0), [1u8; 32]))
        .collect::<Vec<_>>();
    trie.update(writes).unwrap();
    let root = trie
        .commit_with(|s, set| s.write_block(set, 1, &[]))
        .unwrap()
        .root;
    let shape = trie.store().shape().unwrap();
    assert_eq!((shape.meta.root, shape.meta.block), (root, 1));
    assert_eq!(shape.stems, 3);
    assert!(shape.is_consistent(), "{shape:?}");
    assert_eq!(shape.nodes, shape.groups + 3);
    // 0x00.. and 0x01.. share 7 bits: they sit at depth 8; 0x80.. at depth 1.
    assert_eq!(shape.stem_depths[8], 2, "{:?}", shape.depth_summary());
    assert_eq!(shape.stem_depths[1], 1);
    let (min, mean, max) = shape.depth_summary();
    assert_eq!((min, max), (1, 8));
    assert!((mean - 17.0 / 3.0).abs() < 1e-9);
}

/// Clustered random stems (long shared prefixes, lone stems, full subtrees) with a few values
/// each, by stem.
fn clustered_state(rng: &mut StdRng, n: usize) -> BTreeMap<[u8; 31], bintrie_node::StemValues> {
    let base: [u8; 31] = rng.random();
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let mut stem = base;
        let keep = rng.random_range(0..31);
        rng.fill(&mut stem[keep..]);
        let values: &mut bintrie_node::StemValues = out.entry(stem).or_default();
        for _ in 0..rng.random_range(1..4) {
            values.set(rng.random(), rng.random());
        }
    }
    out
}

/// Every entry of the node table, the flat value of every stem, and the meta.
type Tables = (
    Vec<(Vec<u8>, Vec<u8>)>,
    Vec<Option<bintrie_node::StemValues>>,
    bintrie_store::Shape,
);

fn tables(store: &StateStore, stems: &BTreeMap<[u8; 31], bintrie_node::StemValues>) -> Tables {
    let mut nodes = Vec::new();
    store
        .for_each_node(|k, v| nodes.push((k.to_vec(), v.to_vec())))
        .unwrap();
    let reader = store.reader().unwrap();
    let flat = stems
        .keys()
        .map(|s| reader.get_stem(s, ReadPath::Flat).unwrap())
        .collect();
    (nodes, flat, store.shape().unwrap())
}

/// The streaming build, fed unsorted writes through the external sort, writes the same tables
/// as a bulk load of the same state, at every group depth, however small its write batches;
/// bad input leaves the database empty.
#[test]
fn a_sorted_build_writes_the_same_tables_as_a_bulk_load() {
    let mut rng = StdRng::seed_from_u64(15);
    let code: Vec<([u8; 32], Vec<u8>)> = (0..3u8)
        .map(|i| (alloy_primitives::keccak256([i]).0, vec![i]))
        .collect();
    for (n, batch_bytes) in [(1, 1 << 20), (2, 1), (300, 4096), (2000, 1 << 20)] {
        let state = clustered_state(&mut rng, n);
        for g in 1..=8 {
            let a = tempfile::tempdir().unwrap();
            let mut trie: Trie<StateStore> =
                Trie::new(StateStore::open(a.path(), &opts(g)).unwrap(), g).unwrap();
            trie.update(
                state
                    .iter()
                    .flat_map(|(s, v)| v.iter().map(|(i, x)| (TreeKey::new(*s, i), *x)))
                    .collect(),
            )
            .unwrap();
            let root = trie
                .commit_with(|s, set| s.bulk_load(set, 1, &code))
                .unwrap()
                .root;
            let b = tempfile::tempdir().unwrap();
            let mut store = StateStore::open(b.path(), &opts(g)).unwrap();
            let mut seen = 0;
            // The same writes unsorted, each first written with a stale value, through the
            // external sort (runs of 1,024 writes spilled to files, merged, last write wins).
            let mut writes: Vec<(TreeKey, [u8; 32])> = state
                .iter()
                .flat_map(|(s, v)| v.iter().map(|(i, x)| (TreeKey::new(*s, i), *x)))
                .collect();
            writes.shuffle(&mut rng);
            let mut sorter = ExternalSort::new(b.path(), 0);
            for (k, _) in &writes {
                sorter.push(*k, rng.random()).unwrap();
            }
            for (k, v) in &writes {
                sorter.push(*k, *v).unwrap();
            }
            let sorted = sorter.finish().unwrap();
            let built = store
                .build_sorted(stems_of(sorted), &code, 1, batch_bytes, &mut |n| seen = n)
                .unwrap();
            assert_eq!(built, root, "n={n} g={g}");
            assert_eq!(seen, state.len() as u64);
            let (mut x, y) = (tables(&store, &state), tables(trie.store(), &state));
            assert!(x.0 == y.0, "node table differs: n={n} g={g}");
            assert!(x.1 == y.1, "flat table differs: n={n} g={g}");
            // The tables are the same; the file may have grown by another MDBX growth step
            // (the build spans transactions).
            x.2.file_bytes = y.2.file_bytes;
            assert_eq!(x.2, y.2, "n={n} g={g}");
            assert_eq!(store.verify(&|_| {}).unwrap().root, root);
        }
    }
    // Out of order, or an error from the source: nothing is written.
    let state = clustered_state(&mut rng, 50);
    let dir = tempfile::tempdir().unwrap();
    let mut store = StateStore::open(dir.path(), &opts(4)).unwrap();
    let mut reversed: Vec<_> = state.iter().map(|(s, v)| Ok((*s, v.clone()))).collect();
    reversed.reverse();
    let err = store
        .build_sorted(reversed, &[], 1, 1 << 20, &mut |_| {})
        .unwrap_err();
    assert!(err.to_string().contains("strictly increasing"), "{err}");
    // Failing after several transactions were committed (one per blob): they are taken back.
    let failing = state
        .iter()
        .map(|(s, v)| Ok((*s, v.clone())))
        .take(30)
        .chain([Err(StoreError::Corrupt("the source broke".into()))]);
    assert!(store.build_sorted(failing, &[], 1, 1, &mut |_| {}).is_err());
    let shape = store.shape().unwrap();
    assert_eq!((shape.nodes, shape.stems), (0, 0));
    assert_eq!(store.meta().block, 0);
    drop(store);
    let mut store = StateStore::open(dir.path(), &opts(4)).unwrap();
    // A database that holds a block is refused.
    store
        .build_sorted(
            state.iter().map(|(s, v)| Ok((*s, v.clone()))),
            &[],
            1,
            1 << 20,
            &mut |_| {},
        )
        .unwrap();
    assert!(
        store
            .build_sorted(std::iter::empty(), &[], 2, 1, &mut |_| {})
            .is_err()
    );
}

/// Not a test on its own: run by [`a_build_killed_midway_is_refused_on_open`] in a child
/// process, it starts a sorted build in `$BINTRIE_KILLED_BUILD` that commits a transaction per
/// blob and aborts the process (as kill -9 would) after 40 stems.
#[test]
#[ignore = "a helper process for another test"]
fn killed_build() {
    let Ok(dir) = std::env::var("BINTRIE_KILLED_BUILD") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(16);
    let state = clustered_state(&mut rng, 100);
    // Durable: every partial transaction, the marker included, survives the abort.
    let options = StoreOptions {
        durability: Durability::Durable,
        ..opts(5)
    };
    let mut store = StateStore::open(&dir, &options).unwrap();
    let stems = state.into_iter().enumerate().map(|(i, sv)| {
        if i == 40 {
            std::process::abort();
        }
        Ok(sv)
    });
    let _ = store.build_sorted(stems, &[], 1, 1, &mut |_| {});
}

/// A process killed in the middle of a sorted build that spans transactions leaves partial
/// tables; every open refuses them with a message that says so, and nothing is formatted over.
#[test]
fn a_build_killed_midway_is_refused_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_build", "--ignored", "--nocapture"])
        .env("BINTRIE_KILLED_BUILD", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the build was not killed");
    let before = std::fs::read(dir.path().join("mdbx.dat")).unwrap();
    for err in [
        StateStore::open_read_only(dir.path()).unwrap_err(),
        StateStore::open(dir.path(), &opts(5)).unwrap_err(),
    ] {
        assert!(
            matches!(err, StoreError::NotADatabase { .. })
                && err.to_string().contains("interrupted sorted build"),
            "{err}"
        );
    }
    assert!(std::fs::read(dir.path().join("mdbx.dat")).unwrap() == before);
}

/// The pages of `data` in the page cache, as `fincore` (util-linux, through `mincore`, which
/// reads nothing) counts them; `None` without `fincore`.
fn resident_pages(data: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new("fincore")
        .args(["--raw", "--noheadings", "--output", "PAGES"])
        .arg(data)
        .output()
        .ok()?;
    assert!(out.status.success(), "fincore: {out:?}");
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}

/// `warm_branch_pages` leaves the stem and node tables' branch pages in the page cache and not
/// the leaf pages its lookups met: after a full eviction, the cached pages number at least the
/// branch pages and fewer than half the leaves looked up more.
#[test]
fn warming_the_branch_pages_leaves_the_leaves_cold() {
    // Two spaces running and non-ASCII in the path: the mapping is found by its exact name.
    let dir = tempfile::Builder::new()
        .prefix("warm  ü ")
        .tempdir()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(12);
    {
        let store = StateStore::open(dir.path(), &opts(5)).unwrap();
        let mut trie: Trie<StateStore> = Trie::new(store, 5).unwrap();
        trie.update(random_writes(&mut rng, 30_000)).unwrap();
        trie.commit().unwrap();
    }
    let data = dir.path().join("mdbx.dat");
    // Dirty pages cannot be evicted: written out first.
    std::fs::File::open(&data).unwrap().sync_data().unwrap();
    bintrie_store::evict_page_cache(dir.path()).unwrap();
    let Some(before) = resident_pages(&data) else {
        eprintln!("no fincore (util-linux): nothing to check");
        return;
    };
    if before > 4 {
        eprintln!("this filesystem keeps evicted pages ({before} cached): nothing to check");
        return;
    }
    let warm = bintrie_store::warm_branch_pages(dir.path()).unwrap();
    assert!(warm.branch_pages >= 2, "{warm:?}");
    assert!(warm.lookups <= warm.branch_pages * 8, "{warm:?}");
    assert!(warm.leaf_pages_evicted > warm.branch_pages, "{warm:?}");
    // Without the leaves' eviction: the branch pages, every leaf met, and the few pages any
    // open reads (meta pages, the catalog, the other tables' roots: 19 here).
    let added = resident_pages(&data).unwrap() - before;
    eprintln!("{added} pages cached after {warm:?}");
    assert!(
        added >= warm.branch_pages && added < warm.branch_pages + warm.leaf_pages_evicted / 2,
        "{added} pages cached after {warm:?}"
    );
}
