//! The store off the happy path: read-only opens, files that are not databases, racing
//! writers, stale preloads, and flipped bytes found by `verify` and the verified walk.

use bintrie_keys::TreeKey;
use bintrie_node::{Sha256Hasher, StemValues};
use bintrie_store::{BufferOptions, Durability, ReadPath, StateStore, StoreError, StoreOptions};
use bintrie_trie::{MemoryStore, Trie};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::Path;

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
            (TreeKey::new(stem, rng.random()), rng.random())
        })
        .collect()
}

/// A database at group depth `g` holding `writes` as block 1 (and `code` in the code table).
fn build(dir: &Path, g: u8, writes: &[(TreeKey, [u8; 32])], code: &[Vec<u8>]) -> [u8; 32] {
    let store = StateStore::open(dir, &opts(g)).unwrap();
    let mut trie: Trie<StateStore> = Trie::new(store, g).unwrap();
    trie.update(writes.to_vec()).unwrap();
    let code: Vec<([u8; 32], Vec<u8>)> = code
        .iter()
        .map(|c| (alloy_primitives::keccak256(c).0, c.clone()))
        .collect();
    trie.commit_with(|s, set| s.write_block(set, 1, &code))
        .unwrap()
        .root
}

fn file_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("mdbx.dat")).unwrap()
}

/// Calls `edit(bytes, at)` at every occurrence of `pattern` in the data file (MDBX keeps older
/// copies of pages, so a value may sit there more than once), going on after the pattern when
/// `edit` returns true (it changed something) and after one byte otherwise; writes the file
/// back. Returns how many it changed.
fn edit_each(dir: &Path, pattern: &[u8], mut edit: impl FnMut(&mut [u8], usize) -> bool) -> usize {
    let path = dir.join("mdbx.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + pattern.len() <= bytes.len() {
        if bytes[i..i + pattern.len()] == *pattern && edit(&mut bytes, i) {
            n += 1;
            i += pattern.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(&path, bytes).unwrap();
    n
}

/// Flips the byte at `offset` within every occurrence of `pattern` in the data file. Returns
/// how many.
fn flip_all(dir: &Path, pattern: &[u8], offset: usize) -> usize {
    edit_each(dir, pattern, |bytes, at| {
        bytes[at + offset] ^= 0x01;
        true
    })
}

#[test]
fn read_only_opens_never_write_and_never_create() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let writes = random_writes(&mut rng, 300);
    let root = build(dir.path(), 5, &writes, &[]);
    let before = file_bytes(dir.path());
    {
        let store = StateStore::open_read_only(dir.path()).unwrap();
        assert!(store.is_read_only());
        assert_eq!(store.meta().root, root);
        store.counts().unwrap();
        store.for_each_node(|_, _| {}).unwrap();
        let reader = store.reader().unwrap();
        let (k, v) = writes[0];
        for path in [ReadPath::Flat, ReadPath::TrieWalk] {
            let got = reader.get_stem(&k.stem, path).unwrap().unwrap();
            assert_eq!(got.get(k.sub_index), Some(&v));
        }
        drop(reader);
        // A write through a read-only store is refused.
        let mut store = store;
        let set = {
            let mut t: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
            t.insert(k, [9; 32]).unwrap();
            t.prepare_commit()
        };
        assert!(matches!(
            store.write_block(&set, 2, &[]),
            Err(StoreError::ReadOnly)
        ));
    }
    assert_eq!(
        file_bytes(dir.path()),
        before,
        "a read-only open changed the file"
    );

    // A read-only open of a missing database creates nothing.
    let missing = dir.path().join("nope");
    assert!(matches!(
        StateStore::open_read_only(&missing),
        Err(StoreError::NotFound(_))
    ));
    assert!(!missing.exists());
}

#[test]
fn read_only_open_works_on_a_read_only_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(2);
    let root = build(dir.path(), 4, &random_writes(&mut rng, 50), &[]);
    let data = dir.path().join("mdbx.dat");
    let mut perm = std::fs::metadata(&data).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&data, perm).unwrap();
    let store = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!(store.meta().root, root);
    assert_eq!(store.verify(&|_| {}).unwrap().root, root);
}

#[test]
fn a_file_that_is_not_a_database_is_never_formatted() {
    let mut rng = StdRng::seed_from_u64(3);
    let writes = random_writes(&mut rng, 2_000);
    // A real database truncated to 8 KB, 8 KB of garbage, a page of zeros. (An empty file is
    // a creation cut short, which a writer finishes: the test below.)
    let truncated = {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), 5, &writes, &[]);
        let mut b = file_bytes(dir.path());
        b.truncate(8192);
        b
    };
    // Cut inside a page: the writer's open cut the partial page off and then failed, and
    // readers took it for an unclean close and advised that open.
    let cut_mid_page = {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), 5, &writes, &[]);
        let mut b = file_bytes(dir.path());
        b.truncate(b.len() / 2 + 1000);
        b
    };
    let garbage: Vec<u8> = (0..8192).map(|_| rng.random()).collect();
    // Cut at a page boundary, MDBX finds a header page past the end: said so.
    {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mdbx.dat"), &truncated).unwrap();
        let e = StateStore::open_read_only(dir.path()).unwrap_err();
        assert!(
            e.to_string().contains("shorter than its own header says"),
            "{e}"
        );
    }
    for (name, content) in [
        ("truncated", truncated),
        ("cut mid-page", cut_mid_page),
        ("garbage", garbage),
        ("zeros", vec![0u8; 4096]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mdbx.dat"), &content).unwrap();
        let ro = StateStore::open_read_only(dir.path());
        assert!(
            matches!(ro, Err(StoreError::NotADatabase { .. })),
            "{name}: read-only open gave {ro:?}"
        );
        let rw = StateStore::open(dir.path(), &opts(5));
        assert!(
            matches!(rw, Err(StoreError::NotADatabase { .. })),
            "{name}: read-write open gave {rw:?}"
        );
        assert_eq!(
            file_bytes(dir.path()),
            content,
            "{name}: the file was changed"
        );
    }
    // A directory in the data file's place: said as that (MDBX said "File descriptor in bad
    // state").
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("mdbx.dat")).unwrap();
    for opened in [
        StateStore::open_read_only(dir.path()),
        StateStore::open(dir.path(), &opts(5)),
    ] {
        let Err(e) = opened else {
            panic!("a directory is no database")
        };
        assert!(
            e.to_string().contains("not a regular file but a directory"),
            "{e}"
        );
    }
}

/// An empty data file is what a creation killed before MDBX wrote anything leaves (the kill -9
/// test of the command line hit it): a reader refuses it, saying what it is and how to finish
/// it, and leaves it as it is; a writer makes the database in it. Before, both refused it as
/// "not a database", so one kill left a directory nothing would open.
#[test]
fn an_empty_data_file_is_a_creation_cut_short_that_a_writer_finishes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mdbx.dat"), b"").unwrap();
    let e = StateStore::open_read_only(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::NotADatabase { .. }), "{e:?}");
    for said in ["creation was cut short", "open it for writing once"] {
        assert!(e.to_string().contains(said), "{e}");
    }
    assert!(file_bytes(dir.path()).is_empty(), "a reader changed it");
    // A writer that may not create refuses it too (a study reopening what it built).
    let no_create = StoreOptions {
        create: false,
        ..opts(5)
    };
    let e = StateStore::open(dir.path(), &no_create).unwrap_err();
    assert!(e.to_string().contains("creation was cut short"), "{e}");
    assert!(
        file_bytes(dir.path()).is_empty(),
        "a writer that may not create changed it"
    );
    // Not an empty file elsewhere behind a link, nor one beside a log's segments.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("empty");
    std::fs::write(&target, b"").unwrap();
    let linked = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&target, linked.path().join("mdbx.dat")).unwrap();
    let e = StateStore::open(linked.path(), &opts(5)).unwrap_err();
    assert!(matches!(e, StoreError::NotADatabase { .. }), "{e:?}");
    assert!(
        std::fs::read(&target).unwrap().is_empty(),
        "formatted through a link"
    );
    let beside_log = tempfile::tempdir().unwrap();
    std::fs::write(beside_log.path().join("mdbx.dat"), b"").unwrap();
    std::fs::write(beside_log.path().join("log.000001"), b"").unwrap();
    let e = StateStore::open(beside_log.path(), &opts(5)).unwrap_err();
    assert!(matches!(e, StoreError::OtherLayout(_)), "{e:?}");
    // A writer that may create makes the database in it.
    let writes = random_writes(&mut StdRng::seed_from_u64(12), 50);
    let root = build(dir.path(), 5, &writes, &[]);
    let store = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!((store.meta().root, store.meta().block), (root, 1));
}

/// A writer never makes a database beside a log layout's state (one made first, or by another
/// writer starting on the same new directory): the open is refused and creates nothing. Other
/// files, even ones named like a segment but for the digits, do not count.
#[test]
fn a_database_is_never_made_beside_a_log() {
    for (name, log) in [
        ("log.000001", true),
        ("log.000042", true),
        ("log.1", false),
        ("log.00000x", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), b"").unwrap();
        let opened = StateStore::open(dir.path(), &opts(5));
        if log {
            assert!(
                matches!(&opened, Err(StoreError::OtherLayout(d)) if d == dir.path()),
                "{name}: {opened:?}"
            );
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                left,
                [std::ffi::OsString::from(name)],
                "nothing was created"
            );
        } else {
            assert!(opened.is_ok(), "{name}: {opened:?}");
        }
    }
}

/// A page size asked for that is not an existing database's own is refused by every open,
/// never silently ignored (the database keeps the one it was made with); its own is taken.
#[test]
fn a_page_size_that_is_not_the_databases_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let made = StoreOptions {
        page_size: Some(8192),
        ..opts(5)
    };
    drop(StateStore::open(dir.path(), &made).unwrap());
    for (page_size, ok) in [
        (Some(8192), true),
        (None, true),
        (Some(4096), false),
        (Some(16384), false),
    ] {
        let opened = StateStore::open(
            dir.path(),
            &StoreOptions {
                page_size,
                ..opts(5)
            },
        );
        match opened {
            Ok(store) => {
                assert!(ok, "{page_size:?} was taken");
                assert_eq!(store.meta().page_size, 8192);
            }
            Err(e) => {
                assert!(!ok, "{page_size:?}: {e}");
                assert!(e.to_string().contains("page size is 8192 bytes"), "{e}");
            }
        }
    }
}

#[test]
fn a_second_writer_handle_cannot_commit_over_a_newer_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(4);
    build(dir.path(), 5, &random_writes(&mut rng, 100), &[]);
    let store = StateStore::open(dir.path(), &opts(5)).unwrap();
    let other = store.clone();
    let root = store.meta().root;
    // Writer B loads block 1's tree and prepares changes on it.
    let mut b: Trie<StateStore> = Trie::open(other, 5, root).unwrap();
    b.update(random_writes(&mut rng, 10)).unwrap();
    // Writer A commits block 2 meanwhile.
    let mut a: Trie<StateStore> = Trie::open(store, 5, root).unwrap();
    a.update(random_writes(&mut rng, 10)).unwrap();
    a.commit_with(|s, set| s.write_block(set, 2, &[])).unwrap();
    let after_a = a.store().meta();
    // B built on block 1 and must not commit over block 2.
    let err = b
        .commit_with(|s, set| s.write_block(set, 2, &[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed under this writer"), "{err}");
    // Loading more of block 1's tree now finds block 2's blobs: that is the other writer, not
    // corruption, and the error says so (rather than "hashes to ... but its parent holds").
    let err = b
        .update(random_writes(&mut rng, 50))
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed under this writer"), "{err}");
    drop((a, b));
    let reopened = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reopened.meta(), after_a);
    assert_eq!(reopened.verify(&|_| {}).unwrap().root, after_a.root);
}

/// Block numbers never go back, buffered or not: a block below the last is refused with
/// nothing written (the journal and the meta stay at the last block); the same number again
/// is taken. A reader's transaction pinned to a handle's meta is refused once another handle
/// committed past it.
#[test]
fn a_block_below_the_last_is_refused_and_a_pinned_reader_never_reads_past_its_handle() {
    for buffer in [None, Some(BufferOptions::default())] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(5);
        build(dir.path(), 4, &random_writes(&mut rng, 50), &[]);
        let options = StoreOptions { buffer, ..opts(4) };
        let store = StateStore::open(dir.path(), &options).unwrap();
        let stale = store.clone();
        let root = store.meta().root;
        let mut trie: Trie<StateStore> = Trie::open(store, 4, root).unwrap();
        trie.update(random_writes(&mut rng, 10)).unwrap();
        let err = trie
            .commit_with(|s, set| s.write_block(set, 0, &[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("block 0 is below the last committed block 1"),
            "{err}"
        );
        assert_eq!(trie.store().meta().block, 1, "{buffer:?}");
        assert_eq!(trie.store().buffered_blocks(), 0, "nothing journaled");
        assert!(stale.reader_at_meta().is_ok(), "nothing was written");
        trie.commit_with(|s, set| s.write_block(set, 1, &[]))
            .unwrap();
        let after = trie.store().meta();
        assert_ne!(after.root, root);
        let err = stale.reader_at_meta().err().expect("moved on").to_string();
        assert!(err.contains("moved on under this handle"), "{err}");
        assert_eq!(
            trie.store().reader_at_meta().unwrap().root().unwrap(),
            after.root
        );
        trie.store_mut().flush().unwrap();
    }
}

/// A blob preloaded by the trie prefetcher and left unused must never be served after a commit
/// rewrote its path: the trie had the path loaded already, so the update did not take the
/// preloaded copy, and the commit wrote a new blob there.
#[test]
fn a_preloaded_blob_never_outlives_the_root_it_was_read_at() {
    use std::sync::atomic::AtomicBool;
    let g = 4;
    let mut rng = StdRng::seed_from_u64(5);
    let base = random_writes(&mut rng, 500);
    let dir = tempfile::tempdir().unwrap();
    let root = build(dir.path(), g, &base, &[]);
    let store = StateStore::open(dir.path(), &opts(g)).unwrap();
    let mut trie: Trie<StateStore> = Trie::open(store, g, root).unwrap();
    let (key, _) = base[0];
    // Load the path first, then preload it: the preloaded copies stay unused.
    trie.get(&key).unwrap();
    let no_stop = AtomicBool::new(false);
    trie.store()
        .warm_trie_paths(&[key.stem], 1, &no_stop)
        .unwrap();
    assert!(trie.store().warm_blobs() > 0);
    trie.insert(key, [0x77; 32]).unwrap();
    let new_root = trie.commit().unwrap().root;
    // A fresh trie over the same store handle reads the new tree, not the preloaded old one.
    let store = trie.into_store();
    let mut fresh: Trie<StateStore> = Trie::open(store, g, new_root).unwrap();
    assert_eq!(fresh.get(&key).unwrap(), Some([0x77; 32]));
    assert_eq!(fresh.verify().unwrap(), new_root);
}

#[test]
fn verify_passes_on_a_good_database_at_every_group_depth() {
    let mut rng = StdRng::seed_from_u64(6);
    let writes = random_writes(&mut rng, 700);
    let code = vec![vec![0x60, 0x00, 0x60, 0x00, 0xf3], vec![0x5b; 100]];
    let mut root = None;
    for g in 1..=8 {
        let dir = tempfile::tempdir().unwrap();
        let r = build(dir.path(), g, &writes, &code);
        assert_eq!(*root.get_or_insert(r), r);
        let store = StateStore::open_read_only(dir.path()).unwrap();
        let report = store.verify(&|_| {}).unwrap();
        let (nodes, stems, codes) = store.counts().unwrap();
        assert_eq!(report.root, r);
        assert_eq!(report.block, 1);
        assert_eq!(
            (report.nodes, report.stems, report.code),
            (nodes, stems, codes)
        );
        assert_eq!(report.groups + report.stems, report.nodes);
        assert_eq!(codes, 2);
        let reader = store.reader().unwrap();
        for (k, v) in writes.iter().take(50) {
            let got = reader.get_stem_verified(&k.stem).unwrap().unwrap();
            assert_eq!(got.get(k.sub_index), Some(v), "g={g}");
        }
        // An absent stem is proven absent.
        assert_eq!(reader.get_stem_verified(&[0x5a; 31]).unwrap(), None);
    }
}

/// Values unlikely to occur anywhere else in the file, so a byte search finds their blob.
type Marked = (Vec<(TreeKey, [u8; 32])>, TreeKey, [u8; 32]);

fn marked_writes(rng: &mut StdRng) -> Marked {
    let mut writes = random_writes(rng, 400);
    let key = writes[7].0;
    let marker = [0xa5u8; 32];
    writes[7].1 = marker;
    (writes, key, marker)
}

#[test]
fn a_flipped_byte_in_a_stem_blob_is_caught() {
    for g in [1u8, 5, 8] {
        let mut rng = StdRng::seed_from_u64(7);
        let (writes, key, marker) = marked_writes(&mut rng);
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), g, &writes, &[]);
        // The stem blob starts with the tag and the stem; flip a byte of the marked value in
        // the node table's copy only.
        let mut values = StemValues::new();
        values.set(key.sub_index, marker);
        let mut blob = Vec::new();
        values.encode_blob(&key.stem, &mut blob);
        assert!(flip_all(dir.path(), &blob, blob.len() - 1) >= 1);
        let store = StateStore::open_read_only(dir.path()).unwrap();
        let err = store.verify(&|_| {}).unwrap_err().to_string();
        assert!(err.contains("hashes to"), "g={g}: {err}");
        let reader = store.reader().unwrap();
        let err = reader.get_stem_verified(&key.stem).unwrap_err().to_string();
        assert!(err.contains("hashes to"), "g={g}: {err}");
        // The flat table is untouched, so the flat read still gives the committed value.
        let flat = reader.get_stem_flat(&key.stem).unwrap().unwrap();
        assert_eq!(flat.get(key.sub_index), Some(&marker));
    }
}

#[test]
fn a_flipped_byte_in_the_flat_table_is_caught() {
    let mut rng = StdRng::seed_from_u64(8);
    let (writes, key, marker) = marked_writes(&mut rng);
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 5, &writes, &[]);
    let mut values = StemValues::new();
    values.set(key.sub_index, marker);
    let mut blob = Vec::new();
    values.encode_blob(&key.stem, &mut blob);
    // The flat entry is the stem (its key) followed by bitmap and values; the node table's
    // copy is preceded by the tag byte. Flip every copy, then restore the node blob's.
    let flat_tail = &blob[1..];
    let flipped = flip_all(dir.path(), flat_tail, flat_tail.len() - 1);
    assert!(flipped >= 2, "{flipped}");
    let mut restored = blob.clone();
    *restored.last_mut().unwrap() ^= 0x01;
    assert!(flip_all(dir.path(), &restored, restored.len() - 1) >= 1);
    let store = StateStore::open_read_only(dir.path()).unwrap();
    let err = store.verify(&|_| {}).unwrap_err().to_string();
    assert!(err.contains("flat stem table"), "{err}");
    // The verified walk does not use the flat table.
    let reader = store.reader().unwrap();
    let got = reader.get_stem_verified(&key.stem).unwrap().unwrap();
    assert_eq!(got.get(key.sub_index), Some(&marker));
}

#[test]
fn a_flipped_byte_in_a_group_blob_is_caught() {
    let mut rng = StdRng::seed_from_u64(9);
    let (writes, key, marker) = marked_writes(&mut rng);
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 5, &writes, &[]);
    // The parent group holds the stem's hash: flip a byte of it there.
    let mut values = StemValues::new();
    values.set(key.sub_index, marker);
    let (stem_hash, _) = values.stem_hash::<Sha256Hasher>(&key.stem);
    assert!(flip_all(dir.path(), &stem_hash, 3) >= 1);
    let store = StateStore::open_read_only(dir.path()).unwrap();
    let err = store.verify(&|_| {}).unwrap_err().to_string();
    assert!(err.contains("the group hashes to"), "{err}");
    let err = store
        .reader()
        .unwrap()
        .get_stem_verified(&key.stem)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hashes to"), "{err}");
}

#[test]
fn a_flipped_byte_in_code_is_caught() {
    let mut rng = StdRng::seed_from_u64(10);
    let code = vec![0x5b, 0x60, 0x42, 0x60, 0x13, 0x37, 0x00, 0xfe, 0xfd, 0xfc];
    let dir = tempfile::tempdir().unwrap();
    build(
        dir.path(),
        5,
        &random_writes(&mut rng, 20),
        std::slice::from_ref(&code),
    );
    assert!(flip_all(dir.path(), &code, 2) >= 1);
    let store = StateStore::open_read_only(dir.path()).unwrap();
    let err = store.verify(&|_| {}).unwrap_err().to_string();
    assert!(err.contains("code stored under hash"), "{err}");
}

#[test]
fn a_stray_node_or_flat_entry_is_caught() {
    let mut rng = StdRng::seed_from_u64(11);
    let writes = random_writes(&mut rng, 100);
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 5, &writes, &[]);
    // Write a stem blob into a second database's tables by hand: a node and a flat entry
    // that the tree does not reach.
    {
        let db = libmdbx::Database::<libmdbx::NoWriteMap>::open_with_options(
            dir.path(),
            libmdbx::DatabaseOptions {
                max_tables: Some(8),
                ..Default::default()
            },
        )
        .unwrap();
        let txn = db.begin_rw_txn().unwrap();
        let flat = txn.open_table(Some("stems")).unwrap();
        let mut v = vec![0u8; 64];
        v[0] = 0x80;
        txn.put(&flat, [0x33u8; 31], &v, libmdbx::WriteFlags::UPSERT)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = StateStore::open_read_only(dir.path()).unwrap();
    let err = store.verify(&|_| {}).unwrap_err().to_string();
    assert!(
        err.contains("flat stem table holds") && err.contains(&"33".repeat(31)),
        "{err}"
    );
}

/// Not a test on its own: run by [`a_relaxed_writer_opens_beside_a_reader_that_came_first`] in a
/// child process (MDBX allows one open of an environment per process), it opens the database
/// in `$BINTRIE_HOLD_READER` read-only, says `open`, and holds it until its stdin closes.
#[test]
#[ignore = "a helper process for another test"]
fn hold_a_reader_open() {
    let Ok(dir) = std::env::var("BINTRIE_HOLD_READER") else {
        return;
    };
    let _reader = StateStore::open_read_only(&dir).unwrap();
    println!("open");
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
}

/// The first process to open an environment fixes its durability; a reader that got there first
/// holds it durable. A relaxed writer opened beside it must still open (its commits are then
/// durable), not fail with "another durability".
#[test]
fn a_relaxed_writer_opens_beside_a_reader_that_came_first() {
    use std::io::{BufRead, Read};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    build(dir.path(), 4, &random_writes(&mut rng, 50), &[]);
    let mut reader = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hold_a_reader_open", "--ignored", "--nocapture"])
        .env("BINTRIE_HOLD_READER", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(reader.stdout.take().unwrap());
    assert!(
        out.by_ref()
            .lines()
            .map_while(Result::ok)
            .any(|l| l.trim() == "open"),
        "the reader process did not open the database"
    );
    let store = StateStore::open(dir.path(), &opts(4)).unwrap();
    let root = store.meta().root;
    let mut trie: Trie<StateStore> = Trie::open(store, 4, root).unwrap();
    trie.update(random_writes(&mut rng, 20)).unwrap();
    let new_root = trie
        .commit_with(|s, set| s.write_block(set, 2, &[]))
        .unwrap()
        .root;
    drop(trie);
    drop(reader.stdin.take());
    out.read_to_end(&mut Vec::new()).unwrap();
    assert!(reader.wait().unwrap().success());
    let reopened = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reopened.meta().root, new_root);
}

/// Not a test on its own: run by [`a_killed_relaxed_writer_is_recovered_by_the_next_writer`]
/// in a child process, it commits three relaxed blocks (not synced) into
/// `$BINTRIE_KILLED_WRITER` and aborts, as kill -9 would.
#[test]
#[ignore = "a helper process for another test"]
fn killed_relaxed_writer() {
    let Ok(dir) = std::env::var("BINTRIE_KILLED_WRITER") else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(21);
    let store = StateStore::open(&dir, &opts(5)).unwrap();
    let mut trie: Trie<StateStore> = Trie::new(store, 5).unwrap();
    for block in 1..=3 {
        trie.update(random_writes(&mut rng, 200)).unwrap();
        trie.commit_with(|s, set| s.write_block(set, block, &[]))
            .unwrap();
    }
    std::process::abort();
}

/// A relaxed writer killed after unsynced commits leaves a database MDBX must roll back: a
/// reader is told so (not "not a database"), the next writer recovers it, and it is whole.
#[test]
fn a_killed_relaxed_writer_is_recovered_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_relaxed_writer",
            "--ignored",
            "--nocapture",
        ])
        .env("BINTRIE_KILLED_WRITER", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the writer was not killed");
    match StateStore::open_read_only(dir.path()) {
        // MDBX may find nothing to roll back (the kernel wrote the pages anyway).
        Ok(_) => {}
        Err(e) => assert!(
            matches!(e, StoreError::NeedsRecovery(_)) && e.to_string().contains("-i /dev/null"),
            "{e}"
        ),
    }
    let writer = StateStore::open(dir.path(), &opts(5)).unwrap();
    let block = writer.meta().block;
    assert!(block <= 3);
    drop(writer);
    let reader = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.meta().block, block);
    assert_eq!(reader.verify(&|_| {}).unwrap().block, block);
}

/// The cleanup of a failed command's new directory removes only what holds nothing: no files,
/// MDBX's own files around no database or one with no block. A database with a block, one
/// that does not open, or any other file keeps the directory (a failed `exec` that had built
/// a base inside its `--db` deleted it).
#[test]
fn remove_if_empty_removes_only_what_holds_nothing() {
    use bintrie_store::remove_if_empty;
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir(&d).unwrap();
        d
    };
    let nothing = dir("nothing");
    assert!(remove_if_empty(&nothing) && !nothing.exists());
    let fresh = dir("fresh");
    drop(StateStore::open(&fresh, &opts(5)).unwrap());
    assert!(remove_if_empty(&fresh) && !fresh.exists());
    let empty_file = dir("empty-file");
    std::fs::write(empty_file.join("mdbx.dat"), b"").unwrap();
    assert!(remove_if_empty(&empty_file) && !empty_file.exists());

    let block = dir("block");
    build(
        &block,
        5,
        &random_writes(&mut StdRng::seed_from_u64(3), 10),
        &[],
    );
    let garbage = dir("garbage");
    std::fs::write(garbage.join("mdbx.dat"), vec![0x5a; 64 << 10]).unwrap();
    let other = dir("other");
    drop(StateStore::open(&other, &opts(5)).unwrap());
    std::fs::create_dir(other.join("base")).unwrap();
    let foreign = dir("foreign");
    std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();
    for kept in [&block, &garbage, &other, &foreign] {
        assert!(!remove_if_empty(kept), "{}", kept.display());
        assert!(kept.exists());
    }
    assert!(other.join("base").is_dir() && foreign.join("notes.txt").is_file());
}

/// `remove_made` (a stopped command's cleanup) removes a database with a committed block,
/// which `remove_if_empty` keeps, and keeps one beside other files. (A writer holding it keeps
/// it too: the same journal lock as `remove_if_empty`, tested below in a child.)
#[test]
fn remove_made_removes_a_database_with_blocks() {
    let mut rng = StdRng::seed_from_u64(11);
    let writes = random_writes(&mut rng, 200);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("made");
    build(&db, 5, &writes, &[]);
    assert!(!bintrie_store::remove_if_empty(&db), "it holds block 1");
    std::fs::write(db.join("notes.txt"), b"mine").unwrap();
    assert!(!bintrie_store::remove_made(&db) && db.join("notes.txt").exists());
    std::fs::remove_file(db.join("notes.txt")).unwrap();
    assert!(bintrie_store::remove_made(&db) && !db.exists());
}

/// Not a test on its own: run by [`remove_if_empty_keeps_a_database_a_writer_has_open`] in a
/// child process (another command's cleanup), it runs `remove_if_empty` on
/// `$BINTRIE_REMOVE_IF_EMPTY` and prints `removed` or `kept`.
#[test]
#[ignore = "a helper process for another test"]
fn remove_if_empty_in_a_child() {
    let Ok(dir) = std::env::var("BINTRIE_REMOVE_IF_EMPTY") else {
        return;
    };
    let removed = bintrie_store::remove_if_empty(Path::new(&dir));
    println!("{}", if removed { "removed" } else { "kept" });
}

/// A database with no block that a writer in another process has open, buffered (exclusive
/// lock) or not (shared), is not removed under it: a failed run of a command that made the
/// directory would otherwise delete what this writer is about to commit. Without a writer
/// it is, leaving no directory behind (nor the sibling it was moved to).
#[test]
fn remove_if_empty_keeps_a_database_a_writer_has_open() {
    let cleanup = |dir: &Path| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "remove_if_empty_in_a_child",
                "--ignored",
                "--nocapture",
            ])
            .env("BINTRIE_REMOVE_IF_EMPTY", dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stdout);
        match (said.contains("removed"), said.contains("kept")) {
            (true, false) => true,
            (false, true) => false,
            _ => panic!("{said}"),
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    for (name, buffered) in [("unbuffered", false), ("buffered", true)] {
        let dir = tmp.path().join(name);
        let options = StoreOptions {
            buffer: buffered.then(BufferOptions::default),
            ..opts(5)
        };
        let store = StateStore::open(&dir, &options).unwrap();
        assert!(!cleanup(&dir), "{name}: removed under its writer");
        assert!(dir.join("mdbx.dat").is_file());
        let mut trie: Trie<StateStore> = Trie::new(store, 5).unwrap();
        trie.insert(TreeKey::from_bytes([7; 32]), [1; 32]).unwrap();
        let root = trie
            .commit_with(|s, set| s.write_block(set, 1, &[]))
            .unwrap()
            .root;
        drop(trie);
        assert_eq!(StateStore::open_read_only(&dir).unwrap().meta().root, root);
        // Once it has a block, it stays; a new one no writer holds goes.
        assert!(!cleanup(&dir));
        let fresh = tmp.path().join(format!("{name}-fresh"));
        drop(StateStore::open(&fresh, &options).unwrap());
        assert!(cleanup(&fresh) && !fresh.exists());
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

/// Sets the stored value length of every entry whose key is `key` (a `key.len()`-byte key, at
/// the end of an MDBX node header: the value's length as 4 bytes little-endian, flags, extra,
/// the key's length as 2 bytes) to `len`. Returns how many.
fn set_value_len(dir: &Path, key: &[u8], len: u32) -> usize {
    edit_each(dir, key, |bytes, at| {
        let is_key =
            at >= 8 && u16::from_le_bytes([bytes[at - 2], bytes[at - 1]]) as usize == key.len();
        if is_key {
            bytes[at - 8..at - 4].copy_from_slice(&len.to_le_bytes());
        }
        is_key
    })
}

/// A stored length made huge by a flipped byte is an error naming the table and key, for a
/// lookup and for `verify`: MDBX hands a value out as its place in the map and that length,
/// and the copy read past the file's end (the process died of SIGBUS, silently).
#[test]
fn a_damaged_value_length_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(18);
    let writes = random_writes(&mut rng, 200);
    build(dir.path(), 5, &writes, &[]);
    let stem = writes[0].0.stem;
    assert!(set_value_len(dir.path(), &stem, 0x7fff_0000) >= 1);
    let store = StateStore::open_read_only(dir.path()).unwrap();
    let e = store.reader().unwrap().get_stem_flat(&stem).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, StoreError::Corrupt(_))
            && text.contains("table stems")
            && text.contains(&alloy_primitives::hex::encode(stem))
            && text.contains("2147418112-byte value"),
        "{text}"
    );
    // Another stem reads as before.
    let (k, v) = writes[1];
    let got = store
        .reader()
        .unwrap()
        .get_stem_flat(&k.stem)
        .unwrap()
        .unwrap();
    assert_eq!(got.get(k.sub_index), Some(&v));
    let e = store.verify(&|_| {}).unwrap_err();
    assert!(e.to_string().contains("stored lengths are damaged"), "{e}");
    drop(store);
    // A writer replacing that entry: refused before MDBX moves bytes by the damaged length
    // (the process died of SIGSEGV, and with the block in the journal every writer after it).
    let root = {
        let store = StateStore::open(dir.path(), &opts(5)).unwrap();
        let meta = store.meta();
        let mut trie: Trie<StateStore> = Trie::open(store, 5, meta.root).unwrap();
        trie.update(vec![(writes[0].0, [0x42; 32])]).unwrap();
        let e = trie
            .commit_with(|s, set| s.write_block(set, 2, &[]))
            .unwrap_err();
        assert!(e.to_string().contains("stored lengths are damaged"), "{e}");
        meta.root
    };
    let store = StateStore::open(dir.path(), &opts(5)).unwrap();
    assert_eq!((store.meta().root, store.meta().block), (root, 1));
    drop(store);

    // A node blob's length, read by a writer's trie (`NodeStore::get_node`), and a meta
    // record's, read by every open: errors too.
    let mut deep = None;
    StateStore::open_read_only(dir.path())
        .unwrap()
        .for_each_node(|k, _| {
            if k.len() >= 3 && deep.is_none() {
                deep = Some(k.to_vec());
            }
        })
        .unwrap();
    let deep = deep.expect("a node below the top levels");
    assert!(set_value_len(dir.path(), &deep, 0x7fff_0000) >= 1);
    let store = StateStore::open(dir.path(), &opts(5)).unwrap();
    let key = bintrie_node::PathKey::from_bytes(&deep).unwrap();
    let e = bintrie_trie::NodeStore::get_node(&store, &key).unwrap_err();
    assert!(
        e.to_string().contains("table nodes") && e.to_string().contains("2147418112-byte value"),
        "{e}"
    );
    drop(store);
    assert!(set_value_len(dir.path(), b"root", 0x7fff_0000) >= 1);
    let e = StateStore::open_read_only(dir.path()).unwrap_err();
    assert!(e.to_string().contains("table meta"), "{e}");
}

/// A second open of a database this process holds open (for writing or reading, buffered or
/// not) says so, instead of MDBX's "Resource temporarily unavailable" or "Busy"; the first
/// handle goes on working.
#[test]
fn a_second_open_in_one_process_says_the_database_is_open_here() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    let root = build(dir.path(), 4, &random_writes(&mut rng, 20), &[]);
    let buffered = StoreOptions {
        buffer: Some(BufferOptions::default()),
        ..opts(4)
    };
    let seconds = || {
        [
            StateStore::open(dir.path(), &opts(4)),
            StateStore::open(dir.path(), &buffered),
            StateStore::open_read_only(dir.path()),
        ]
    };
    for n in 0..3 {
        let first = match n {
            0 => StateStore::open_read_only(dir.path()),
            1 => StateStore::open(dir.path(), &opts(4)),
            _ => StateStore::open(dir.path(), &buffered),
        }
        .unwrap();
        for second in seconds() {
            let err = second.unwrap_err();
            assert!(matches!(err, StoreError::OpenInProcess(_)), "{err:?}");
            assert!(
                err.to_string().contains("already open in this process"),
                "{err}"
            );
        }
        assert_eq!(first.reader().unwrap().root().unwrap(), root);
    }
}
