//! The write buffer: buffered blocks read like committed ones, flush to the same tables as
//! unbuffered commits, survive a dropped (killed) writer through the journal, and exclude
//! other writers.

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
fn buffered_blocks_read_and_flush_like_direct_commits() {
    let bs = blocks(7);
    let plain = tempfile::tempdir().unwrap();
    let (plain, want_roots) = commit_all(StateStore::open(plain.path(), &opts(None)).unwrap(), &bs);
    let dir = tempfile::tempdir().unwrap();
    let (mut store, roots) = commit_all(StateStore::open(dir.path(), &buffered(3)).unwrap(), &bs);
    assert_eq!(roots, want_roots);
    // 7 blocks, 3 per flush, a full buffer flushed by the next block: 1-3 by block 4, 4-6 by
    // block 7, which is still buffered.
    assert_eq!(store.meta().block, 7);
    assert_eq!(store.buffered_blocks(), 1);
    assert_eq!(store.flushed_block(), 6);
    // Before the flush every view already holds the buffered blocks.
    assert_eq!(tables(&store), tables(&plain));
    assert_eq!(store.counts().unwrap(), plain.counts().unwrap());
    let reader = store.reader().unwrap();
    assert_eq!(reader.root().unwrap(), *want_roots.last().unwrap());
    assert_eq!(reader.block().unwrap(), 7);
    let plain_reader = plain.reader().unwrap();
    for (key, _) in bs.iter().flatten().step_by(5) {
        for path in ReadPath::ALL {
            assert_eq!(
                reader.get_stem(&key.stem, path).unwrap(),
                plain_reader.get_stem(&key.stem, path).unwrap()
            );
        }
        assert_eq!(
            reader.get_stem_verified(&key.stem).unwrap(),
            plain_reader.get_stem(&key.stem, ReadPath::Flat).unwrap()
        );
    }
    drop((reader, plain_reader));
    let report = store.verify(&|_| {}).unwrap();
    assert_eq!(report.root, *want_roots.last().unwrap());
    // After the flush, MDBX alone holds the same tables.
    store.flush().unwrap();
    assert_eq!(store.buffered_blocks(), 0);
    assert_eq!(store.flushed_block(), 7);
    assert_eq!(tables(&store), tables(&plain));
    assert_eq!(store.counts().unwrap(), plain.counts().unwrap());
}

#[test]
fn a_writer_dropped_before_its_flush_loses_no_committed_block() {
    let bs = blocks(6);
    let dir = tempfile::tempdir().unwrap();
    let (store, roots) = commit_all(StateStore::open(dir.path(), &buffered(100)).unwrap(), &bs);
    assert_eq!(store.flushed_block(), 0);
    // As after kill -9: no flush, the journal holds blocks 1-6.
    drop(store);
    // A reader replays them in memory, writing nothing.
    let ro = StateStore::open_read_only(dir.path()).unwrap();
    assert_eq!((ro.meta().block, ro.meta().root), (6, roots[5]));
    assert_eq!(ro.flushed_block(), 0);
    ro.verify(&|_| {}).unwrap();
    drop(ro);
    // A writer (buffered or not) replays and flushes them, and goes on.
    let store = StateStore::open(dir.path(), &opts(None)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), (6, roots[5]));
    assert_eq!(store.flushed_block(), 6);
    let (store, more) = commit_all(store, &blocks(8)[6..]);
    drop(store);
    let all = {
        let plain = tempfile::tempdir().unwrap();
        commit_all(
            StateStore::open(plain.path(), &opts(None)).unwrap(),
            &blocks(8),
        )
        .1
    };
    assert_eq!(more, all[6..]);
}

#[test]
fn a_torn_journal_tail_rolls_back_only_the_unfinished_block() {
    let bs = blocks(4);
    let dir = tempfile::tempdir().unwrap();
    let (store, roots) = commit_all(StateStore::open(dir.path(), &buffered(100)).unwrap(), &bs);
    drop(store);
    // The last record half-written, as by a crash inside block 4's append.
    let journal = dir.path().join("journal");
    let len = std::fs::metadata(&journal).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    f.set_len(len - 100).unwrap();
    drop(f);
    let store = StateStore::open(dir.path(), &buffered(100)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), (3, roots[2]));
    store.verify(&|_| {}).unwrap();
}

#[test]
fn a_damaged_journal_is_refused_not_skipped() {
    let bs = blocks(4);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = commit_all(StateStore::open(dir.path(), &buffered(100)).unwrap(), &bs);
    drop(store);
    let journal = dir.path().join("journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[40] ^= 0x10;
    std::fs::write(&journal, bytes).unwrap();
    let err = StateStore::open(dir.path(), &buffered(100)).unwrap_err();
    assert!(err.to_string().contains("journal is damaged"), "{err}");
    let err = StateStore::open_read_only(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
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
    store.verify(&|_| {}).unwrap();
}
