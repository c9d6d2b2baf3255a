//! The write buffer: buffered commits write the same tables as unbuffered ones, the journal
//! brings back the blocks a power loss takes from MDBX (simulated by restoring the data file
//! as it was at the last sync), a failed commit leaves no record behind, and a buffered writer
//! excludes other writers.

use bintrie_keys::TreeKey;
use bintrie_store::{BufferOptions, Durability, ReadPath, StateStore, StoreError, StoreOptions};
use bintrie_trie::Trie;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn opts(buffer: Option<BufferOptions>) -> StoreOptions {
    StoreOptions {
        group_depth: Some(4),
        durability: Durability::Relaxed,
        buffer,
        ..Default::default()
    }
}

fn buffered(max_blocks: u64) -> StoreOptions {
    opts(Some(BufferOptions {
        max_blocks,
        max_bytes: usize::MAX,
    }))
}

fn blocks(n: usize) -> Vec<Vec<(TreeKey, [u8; 32])>> {
    let mut rng = StdRng::seed_from_u64(11);
    let mut stems: Vec<[u8; 31]> = Vec::new();
    (0..n)
        .map(|_| {
            (0..150)
                .map(|_| {
                    // Half the writes go to stems written before (rewrites coalesce).
                    let stem = if !stems.is_empty() && rng.random_bool(0.5) {
                        stems[rng.random_range(0..stems.len())]
                    } else {
                        let s: [u8; 31] = rng.random();
                        stems.push(s);
                        s
                    };
                    (TreeKey::new(stem, rng.random()), rng.random())
                })
                .collect()
        })
        .collect()
}

/// Commits `blocks` through a trie over `store`; returns the store and every root.
fn commit_all(
    store: StateStore,
    blocks: &[Vec<(TreeKey, [u8; 32])>],
) -> (StateStore, Vec<[u8; 32]>) {
    let (g, root) = (store.meta().group_depth, store.meta().root);
    let mut trie: Trie<StateStore> = Trie::open(store, g, root).unwrap();
    let roots = blocks
        .iter()
        .map(|b| {
            trie.update(b.clone()).unwrap();
            trie.commit().unwrap().root
        })
        .collect();
    (trie.into_store(), roots)
}

/// The node table in key order, hashed (a mismatch prints two hashes, not megabytes).
fn tables(store: &StateStore) -> (usize, u32) {
    let (mut n, mut h) = (0, crc32fast::Hasher::new());
    store
        .for_each_node(|k, v| {
            n += 1;
            h.update(&[k.len() as u8]);
            h.update(k);
            h.update(&(v.len() as u32).to_le_bytes());
            h.update(v);
        })
        .unwrap();
    (n, h.finalize())
}

#[test]
fn buffered_blocks_write_the_same_tables_as_direct_commits() {
    let bs = blocks(7);
    let plain = tempfile::tempdir().unwrap();
    let (plain, want_roots) = commit_all(StateStore::open(plain.path(), &opts(None)).unwrap(), &bs);
    let dir = tempfile::tempdir().unwrap();
    let (mut store, roots) = commit_all(StateStore::open(dir.path(), &buffered(3)).unwrap(), &bs);
    assert_eq!(roots, want_roots);
    // Without a buffer every commit is a flush.
    assert_eq!(plain.flushed_block(), 7);
    // 7 blocks, 3 per flush, a full buffer flushed by the next block: 1-3 by block 4, 4-6 by
    // block 7, which is not flushed yet.
    assert_eq!(store.meta().block, 7);
    assert_eq!(store.buffered_blocks(), 1);
    assert_eq!(store.flushed_block(), 6);
    assert_eq!(tables(&store), tables(&plain));
    assert_eq!(store.counts().unwrap(), plain.counts().unwrap());
    let reader = store.reader().unwrap();
    let plain_reader = plain.reader().unwrap();
    for (key, _) in bs.iter().flatten().step_by(5) {
        assert_eq!(
            reader.get_stem_verified(&key.stem).unwrap(),
            plain_reader.get_stem(&key.stem, ReadPath::Flat).unwrap()
        );
    }
    drop((reader, plain_reader));
    store.flush().unwrap();
    assert_eq!((store.buffered_blocks(), store.flushed_block()), (0, 7));
    assert_eq!(
        std::fs::metadata(dir.path().join("journal")).unwrap().len(),
        0,
        "a flush empties the journal"
    );
}

/// Commits blocks 1-3 and flushes, saves the data file (what a power loss leaves of MDBX:
/// its last sync), commits blocks 4-6 (journaled, unsynced), closes, and puts the saved data
/// file back. Returns the directory and the six roots.
fn lose_power_after_block_6() -> (tempfile::TempDir, Vec<[u8; 32]>) {
    let bs = blocks(6);
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut roots) = commit_all(
        StateStore::open(dir.path(), &buffered(100)).unwrap(),
        &bs[..3],
    );
    store.flush().unwrap();
    let data = dir.path().join("mdbx.dat");
    let synced = std::fs::read(&data).unwrap();
    let (store, more) = commit_all(store, &bs[3..]);
    roots.extend(more);
    assert_eq!(store.flushed_block(), 3);
    drop(store);
    std::fs::write(&data, synced).unwrap();
    let _ = std::fs::remove_file(dir.path().join("mdbx.lck"));
    (dir, roots)
}

#[test]
fn the_journal_brings_back_what_a_power_loss_takes_from_mdbx() {
    let (dir, roots) = lose_power_after_block_6();
    // A reader sees MDBX as it is, the last sync, or is told to let a writer recover it.
    match StateStore::open_read_only(dir.path()) {
        Ok(ro) => assert_eq!((ro.meta().block, ro.meta().root), (3, roots[2])),
        Err(StoreError::NeedsRecovery(_)) => {}
        Err(e) => panic!("{e}"),
    }
    // A writer (buffered or not) replays blocks 4-6, and goes on from there.
    let store = StateStore::open(dir.path(), &opts(None)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), (6, roots[5]));
    store.verify(&|_| {}).unwrap();
    let (_, more) = commit_all(store, &blocks(8)[6..]);
    let plain = tempfile::tempdir().unwrap();
    let (_, all) = commit_all(
        StateStore::open(plain.path(), &opts(None)).unwrap(),
        &blocks(8),
    );
    assert_eq!(more, all[6..]);
}

#[test]
fn a_torn_journal_tail_rolls_back_only_the_unfinished_block() {
    let (dir, roots) = lose_power_after_block_6();
    // Block 6's record half-written, as by a power loss inside its append.
    let journal = dir.path().join("journal");
    let len = std::fs::metadata(&journal).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    f.set_len(len - 100).unwrap();
    drop(f);
    let store = StateStore::open(dir.path(), &buffered(100)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), (5, roots[4]));
    store.verify(&|_| {}).unwrap();
}

#[test]
fn a_damaged_journal_is_refused_not_skipped() {
    let (dir, _) = lose_power_after_block_6();
    let journal = dir.path().join("journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[40] ^= 0x10;
    std::fs::write(&journal, bytes).unwrap();
    let err = StateStore::open(dir.path(), &buffered(100)).unwrap_err();
    assert!(err.to_string().contains("journal is damaged"), "{err}");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
}

#[test]
fn a_failed_commit_leaves_no_journal_record() {
    let dir = tempfile::tempdir().unwrap();
    let small = StoreOptions {
        max_size: Some(4 << 20),
        growth_step: Some(1 << 20),
        ..buffered(100)
    };
    let mut store = StateStore::open(dir.path(), &small).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut committed = (0, [0u8; 32]);
    let mut failed = false;
    for _ in 0..200 {
        let (g, root) = (store.meta().group_depth, store.meta().root);
        let mut trie: Trie<StateStore> = Trie::open(store, g, root).unwrap();
        let writes: Vec<_> = (0..400)
            .map(|_| (TreeKey::new(rng.random(), 0), rng.random()))
            .collect();
        trie.update(writes).unwrap();
        let result = trie.commit();
        store = trie.into_store();
        match result {
            Ok(_) => committed = (store.meta().block, store.meta().root),
            Err(e) => {
                assert!(e.to_string().contains("full"), "{e}");
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the map never filled");
    drop(store);
    // A journal that kept the failed block would replay it on this open.
    let store = StateStore::open(dir.path(), &buffered(100)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), committed);
}

/// Run as a child process by `a_buffered_writer_is_the_only_writer`: opens the database
/// named by `BINTRIE_HOLD_DB` (buffered if `BINTRIE_HOLD_BUFFERED`), says so, and holds it
/// until its stdin closes. A plain test run passes straight through.
#[test]
fn hold_a_writer_open() {
    let Ok(dir) = std::env::var("BINTRIE_HOLD_DB") else {
        return;
    };
    let options = match std::env::var("BINTRIE_HOLD_BUFFERED") {
        Ok(_) => buffered(4),
        Err(_) => opts(None),
    };
    let _store = StateStore::open(&dir, &options).unwrap();
    println!("HOLDING");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Another process holding `dir` open for writing, until the returned child is dropped.
struct Holder(
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
);

impl Holder {
    fn start(dir: &std::path::Path, buffered: bool) -> Holder {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "hold_a_writer_open",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BINTRIE_HOLD_DB", dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
        if buffered {
            cmd.env("BINTRIE_HOLD_BUFFERED", "1");
        }
        let mut child = cmd.spawn().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 && !line.contains("HOLDING") {
            line.clear();
        }
        assert!(
            line.contains("HOLDING"),
            "the holder did not open the database"
        );
        Holder(child, out)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        use std::io::Read;
        drop(self.0.stdin.take());
        let _ = self.1.read_to_end(&mut Vec::new());
        let _ = self.0.wait();
    }
}

#[test]
fn a_buffered_writer_is_the_only_writer() {
    let dir = tempfile::tempdir().unwrap();
    drop(StateStore::open(dir.path(), &opts(None)).unwrap());
    {
        let _held = Holder::start(dir.path(), true);
        for other in [buffered(4), opts(None)] {
            let err = StateStore::open(dir.path(), &other).unwrap_err();
            assert!(matches!(err, StoreError::Locked(_)), "{err}");
        }
        // Readers are welcome.
        StateStore::open_read_only(dir.path()).unwrap();
    }
    {
        let _held = Holder::start(dir.path(), false);
        let err = StateStore::open(dir.path(), &buffered(4)).unwrap_err();
        assert!(matches!(err, StoreError::Locked(_)), "{err}");
        // Two unbuffered writers may share it (MDBX serialises them and a stale one is
        // refused at its commit).
        StateStore::open(dir.path(), &opts(None)).unwrap();
    }
    StateStore::open(dir.path(), &buffered(4)).unwrap();
}

#[test]
fn a_reopen_keeps_the_buffer() {
    let bs = blocks(5);
    let dir = tempfile::tempdir().unwrap();
    let (store, roots) = commit_all(StateStore::open(dir.path(), &buffered(100)).unwrap(), &bs);
    let mut called = false;
    let store = store
        .reopen(|_| {
            called = true;
            Ok(())
        })
        .unwrap();
    assert!(called);
    assert_eq!((store.meta().block, store.meta().root), (5, roots[4]));
    assert_eq!(store.buffered_blocks(), 5);
    assert_eq!(store.flushed_block(), 0);
    store.verify(&|_| {}).unwrap();
}
