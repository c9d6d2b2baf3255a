use super::*;
use bintrie_keys::TreeKey;
use bintrie_trie::MemoryStore;

pub(crate) type Trie<S> = bintrie_trie::Trie<S, bintrie_node::Sha256Hasher>;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub(crate) fn random_writes(rng: &mut StdRng, n: usize) -> Vec<(TreeKey, [u8; 32])> {
    (0..n)
        .map(|_| {
            let mut stem = [0u8; 31];
            rng.fill(&mut stem[..]);
            // Some stems share long prefixes: splits push stems down and vacate paths.
            if rng.random_bool(0.2) {
                stem[..18].fill(0xaa);
            }
            (TreeKey::new(stem, rng.random()), rng.random())
        })
        .collect()
}

/// What another process does to a log directory, in a test.
type DirAction = Box<dyn FnOnce(&FsPath)>;

std::thread_local! {
    /// What [`after_listing`] runs once, on this thread: a test's stand-in for another process
    /// acting between an open's listing of the segments and its reading of them.
    static AFTER_LISTING: std::cell::RefCell<Option<DirAction>> = std::cell::RefCell::new(None);
}

/// Makes a FIFO at `path` by the call, not the `mkfifo` command: a child process would hold
/// every other test's writer lock open between its fork and its exec.
pub(crate) fn make_fifo(path: &FsPath) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap_or_else(|e| panic!("making a FIFO at {}: {e}", path.display()));
}

/// Called by an open right after it lists the segments of `dir`.
pub(crate) fn after_listing(dir: &FsPath) {
    if let Some(f) = AFTER_LISTING.with(|h| h.borrow_mut().take()) {
        f(dir);
    }
}

std::thread_local! {
    /// Directory syncs on this thread that fail, from now on ([`fail_dir_syncs`]).
    static DIR_SYNC_FAILS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a directory sync on this thread is to fail (a test planted it).
pub(crate) fn dir_sync_fails() -> bool {
    DIR_SYNC_FAILS.with(std::cell::Cell::get)
}

/// Makes every directory sync on this thread fail (`true`) or work again (`false`).
pub(crate) fn fail_dir_syncs(fail: bool) {
    DIR_SYNC_FAILS.with(|f| f.set(fail));
}

std::thread_local! {
    /// What [`after_torn_scan`] runs once, on this thread: a test's stand-in for a writer
    /// appending to a segment between a scan's reading of it and its look past a torn end.
    static AFTER_TORN_SCAN: std::cell::RefCell<Option<DirAction>> = std::cell::RefCell::new(None);
}

/// Called by a scan that found the end of the segment at `path` torn, before it looks for a
/// commit record past the tear.
pub(crate) fn after_torn_scan(path: &FsPath) {
    if let Some(f) = AFTER_TORN_SCAN.with(|h| h.borrow_mut().take()) {
        f(path);
    }
}

/// Runs `f` (given the segment's path) in the next scan on this thread that finds a torn end.
pub(crate) fn on_next_torn_scan(f: impl FnOnce(&FsPath) + 'static) {
    AFTER_TORN_SCAN.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

std::thread_local! {
    /// The free space a compaction on this thread sees instead of the filesystem's.
    static PLANTED_ROOM: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The free space planted for this thread ([`plant_room`]): the next of the planted figures,
/// the last one from then on.
pub(crate) fn planted_room() -> Option<u64> {
    PLANTED_ROOM.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() > 1 {
            Some(r.remove(0))
        } else {
            r.first().copied()
        }
    })
}

/// Makes compactions on this thread see these free bytes, one figure per look (the last one
/// from then on; none: the filesystem's).
pub(crate) fn plant_room(rooms: &[u64]) {
    PLANTED_ROOM.with(|r| *r.borrow_mut() = rooms.to_vec());
}

/// Runs `f` in the next open on this thread, between its listing and its reading.
pub(crate) fn on_next_listing(f: impl FnOnce(&FsPath) + 'static) {
    AFTER_LISTING.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

pub(crate) fn opts(g: u8) -> LogOptions {
    LogOptions {
        group_depth: Some(g),
        ..Default::default()
    }
}

/// Commits `writes` as block `block` through a trie over the log.
pub(crate) fn commit(
    trie: &mut Trie<LogStore>,
    writes: Vec<(TreeKey, [u8; 32])>,
    block: u64,
) -> Hash32 {
    trie.update(writes).unwrap();
    let root = trie.root();
    trie.commit_with(|s, set| s.write_block(set, block, &[]))
        .unwrap();
    root
}

/// Commits what `trie` holds uncommitted as block `block`; returns the keys it wrote.
fn commit_listing(trie: &mut Trie<LogStore>, block: u64) -> Vec<PathKey> {
    let mut keys = Vec::new();
    trie.commit_with(|s, set| {
        keys = set.nodes().map(|(k, _)| *k).collect();
        s.write_block(set, block, &[])
    })
    .unwrap();
    keys
}

#[test]
fn blocks_reopen_at_the_root_a_memory_trie_computes_at_every_group_depth() {
    for g in 1..=8u8 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(u64::from(g));
        let mut reference = Trie::new(MemoryStore::new(), g).unwrap();
        let mut trie = Trie::new(LogStore::open(dir.path(), &opts(g)).unwrap(), g).unwrap();
        let mut all = Vec::new();
        for block in 1..=5u64 {
            let w = random_writes(&mut rng, 300);
            reference.update(w.clone()).unwrap();
            all.extend(w.clone());
            assert_eq!(
                commit(&mut trie, w, block),
                reference.root(),
                "g={g} block {block}"
            );
        }
        drop(trie);
        let store = LogStore::open(dir.path(), &opts(g)).unwrap();
        assert_eq!(store.meta().block, 5);
        assert_eq!(store.meta().root, reference.root());
        // Every stem reads back its last values through the flat index.
        let mut last = std::collections::HashMap::new();
        for (k, v) in &all {
            last.insert((k.stem, k.sub_index), *v);
        }
        for ((stem, suffix), v) in &last {
            let values = store.get_stem(stem, None).unwrap().unwrap();
            assert_eq!(values.get(*suffix), Some(v));
        }
        let mut absent = [0x55u8; 31];
        absent[0] = 0x01;
        assert!(store.get_stem(&absent, None).unwrap().is_none());
        // And the tree verifies from the log.
        let mut trie = Trie::open(store, g, reference.root()).unwrap();
        assert_eq!(trie.verify().unwrap(), reference.root());
    }
}

#[test]
fn segment_bytes_counts_the_segments_an_open_scans_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(segment_bytes(&dir.path().join("missing")).unwrap(), 0);
    let mut rng = StdRng::seed_from_u64(11);
    let mut trie = Trie::new(
        LogStore::open(
            dir.path(),
            &LogOptions {
                segment_bytes: 64 << 10,
                ..opts(5)
            },
        )
        .unwrap(),
        5,
    )
    .unwrap();
    for block in 1..=4 {
        commit(&mut trie, random_writes(&mut rng, 300), block);
    }
    drop(trie);
    // Files that are not segments are not counted.
    std::fs::write(dir.path().join("log.1"), [0u8; 100]).unwrap();
    std::fs::write(dir.path().join("notes"), [0u8; 100]).unwrap();
    let segments = scan::segment_files(dir.path()).unwrap();
    assert!(segments.len() > 1, "the blocks did not roll over a segment");
    let sizes: u64 = segments
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(segment_bytes(dir.path()).unwrap(), sizes);
    let store = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(segment_bytes(dir.path()).unwrap(), store.info().log_bytes);
}

/// A log of blocks 1 and 2 (500 random writes each, from `seed`) at group depth 5 whose writer
/// has closed, with its index-sizes file as the writer's open left it (`at_open`, put back:
/// a crash closes nothing, and a running writer has not closed yet).
struct TwoBlocks {
    dir: tempfile::TempDir,
    /// `log.000001`, the only segment.
    seg: std::path::PathBuf,
    /// Where block 1 ends in it.
    after1: u64,
    /// Its bytes.
    full: Vec<u8>,
    /// The index-sizes file and its bytes at the writer's open.
    hint: std::path::PathBuf,
    at_open: Vec<u8>,
    /// Block 2's writes.
    w2: Vec<(TreeKey, [u8; 32])>,
    r1: Hash32,
    r2: Hash32,
}

fn two_blocks(seed: u64) -> TwoBlocks {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    let hint = dir.path().join(crate::INDEX_SIZES_FILE);
    let at_open = std::fs::read(&hint).unwrap();
    let r1 = commit(&mut trie, random_writes(&mut rng, 500), 1);
    let seg = dir.path().join("log.000001");
    let after1 = std::fs::metadata(&seg).unwrap().len();
    let w2 = random_writes(&mut rng, 500);
    let r2 = commit(&mut trie, w2.clone(), 2);
    drop(trie);
    std::fs::write(&hint, &at_open).unwrap();
    let full = std::fs::read(&seg).unwrap();
    TwoBlocks {
        dir,
        seg,
        after1,
        full,
        hint,
        at_open,
        w2,
        r1,
        r2,
    }
}

#[test]
fn a_torn_last_block_is_cut_back_and_the_block_can_be_written_again() {
    let t = two_blocks(7);
    let (after1, len) = (t.after1, t.full.len() as u64);
    for cut in [after1 + 1, after1 + 4096, (after1 + len) / 2, len - 1] {
        std::fs::write(&t.seg, &t.full[..cut as usize]).unwrap();
        std::fs::write(&t.hint, &t.at_open).unwrap();
        let store = LogStore::open(t.dir.path(), &opts(5)).unwrap();
        assert_eq!(
            (store.meta().block, store.meta().root),
            (1, t.r1),
            "cut at {cut}"
        );
        assert_eq!(std::fs::metadata(&t.seg).unwrap().len(), after1, "cut back");
        let mut trie = Trie::open(store, 5, t.r1).unwrap();
        assert_eq!(commit(&mut trie, t.w2.clone(), 2), t.r2);
        drop(trie);
        std::fs::write(&t.seg, &t.full).unwrap();
    }
}

/// A reader beside a writer reads the last segment while the writer appends to it: the scan
/// ends inside the block in flight, and the writer has written its commit record by the time
/// the scan looks past the tear. That block is not damage: the reader opens at the block
/// before (it used to refuse the log as corrupt, "yet a committed block follows"), and the
/// next open sees the block. Damage followed by a commit the scan read is still refused.
#[test]
fn a_reader_scanning_a_block_in_flight_opens_at_the_block_before() {
    let TwoBlocks {
        dir,
        seg,
        after1,
        full,
        r1,
        r2,
        ..
    } = two_blocks(8);
    for cut in [
        after1 + 1,
        (after1 + full.len() as u64) / 2,
        full.len() as u64 - 1,
    ] {
        std::fs::write(&seg, &full[..cut as usize]).unwrap();
        let (seg2, full2) = (seg.clone(), full.clone());
        on_next_torn_scan(move |path| {
            assert_eq!(path, seg2.as_path());
            std::fs::write(&seg2, &full2).unwrap(); // the writer finishes block 2
        });
        let store =
            LogStore::open_read_only(dir.path()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(
            (store.meta().block, store.meta().root),
            (1, r1),
            "cut at {cut}"
        );
        drop(store);
        let store = LogStore::open_read_only(dir.path()).unwrap();
        assert_eq!(
            (store.meta().block, store.meta().root),
            (2, r2),
            "cut at {cut}"
        );
    }
    // A flipped byte inside block 2 is damage with a commit after it, refused by a reader and
    // by a writer (which would otherwise cut block 2 off), though the commit lies beyond the
    // bytes the scan had read when it met the damage (its reads are 64 KiB in tests).
    let flip_at = after1 as usize + 64;
    assert!(
        full.len() - flip_at > 2 * (64 << 10),
        "block 2 spans several reads"
    );
    let mut flipped = full.clone();
    flipped[flip_at] ^= 0x40;
    std::fs::write(&seg, &flipped).unwrap();
    for opened in [
        LogStore::open_read_only(dir.path()),
        LogStore::open(dir.path(), &opts(5)),
    ] {
        match opened {
            Err(LogError::Corrupt(why)) => {
                assert!(why.contains("yet a committed block follows"), "{why}")
            }
            other => panic!("{:?}", other.map(|s| s.meta())),
        }
        assert_eq!(std::fs::read(&seg).unwrap(), flipped, "nothing cut");
    }
}

/// A crash tears only a block never synced, and the index-sizes file names only synced
/// blocks: a log cut below the block its writer closed at (here emptied, or cut inside a
/// block it had closed with) lost blocks that were on the device, and every open refuses it
/// by name, where it used to open the older state as though a crash had torn the tail.
/// Removing the file accepts the older state.
#[test]
fn a_log_cut_below_the_block_it_was_closed_at_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(17);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    let r1 = commit(&mut trie, random_writes(&mut rng, 300), 1);
    let seg = dir.path().join("log.000001");
    let after1 = std::fs::metadata(&seg).unwrap().len();
    commit(&mut trie, random_writes(&mut rng, 300), 2);
    commit(&mut trie, random_writes(&mut rng, 300), 3);
    drop(trie);
    let full = std::fs::read(&seg).unwrap();
    for cut in [0, after1, after1 + 100] {
        std::fs::write(&seg, &full[..cut as usize]).unwrap();
        for read_only in [true, false] {
            let opened = if read_only {
                LogStore::open_read_only(dir.path())
            } else {
                LogStore::open(dir.path(), &opts(5))
            };
            match opened {
                Err(LogError::Corrupt(why)) => assert!(
                    why.contains("yet it held block 3") && why.contains("index-sizes"),
                    "cut at {cut}: {why}"
                ),
                other => panic!(
                    "cut at {cut}, read-only {read_only}: {:?}",
                    other.map(|s| s.meta())
                ),
            }
            // Refused before the writer's cut of what looks like a torn tail: the bytes stay
            // for whoever restores the log.
            assert_eq!(std::fs::metadata(&seg).unwrap().len(), cut, "cut at {cut}");
        }
    }
    // Every segment gone: a writable open refuses before it makes a new, empty log, and a
    // reader refuses it as lost blocks too (it said "no log here"), as does `holds_log`'s
    // caller: the directory still holds a log, one that lost its segments.
    std::fs::remove_file(&seg).unwrap();
    assert!(crate::holds_log(dir.path()).unwrap());
    for opened in [
        LogStore::open(dir.path(), &opts(5)),
        LogStore::open_read_only(dir.path()),
    ] {
        match opened {
            Err(LogError::Corrupt(why)) => assert!(why.contains("ends at block 0"), "{why}"),
            other => panic!("{:?}", other.map(|s| s.meta())),
        }
    }
    assert!(!seg.exists(), "a new segment was made");
    // The index-sizes of a log that held no block, its segment gone: no state there.
    let empty = tempfile::tempdir().unwrap();
    drop(LogStore::open(empty.path(), &opts(5)).unwrap());
    std::fs::remove_file(empty.path().join("log.000001")).unwrap();
    assert!(empty.path().join(crate::INDEX_SIZES_FILE).exists());
    assert!(!crate::holds_log(empty.path()).unwrap());
    // A FIFO in the file's place is not opened (the open would block every command asking
    // whether the directory holds a log): no log there, and an open of one does not hang.
    std::fs::remove_file(empty.path().join(crate::INDEX_SIZES_FILE)).unwrap();
    make_fifo(&empty.path().join(crate::INDEX_SIZES_FILE));
    assert!(!crate::holds_log(empty.path()).unwrap());
    assert!(matches!(
        LogStore::open_read_only(empty.path()),
        Err(LogError::NotFound(_))
    ));
    std::fs::write(&seg, &full[..after1 as usize]).unwrap();
    std::fs::remove_file(dir.path().join(crate::INDEX_SIZES_FILE)).unwrap();
    let store = LogStore::open(dir.path(), &opts(5)).unwrap();
    assert_eq!((store.meta().block, store.meta().root), (1, r1));
    drop(store);
    // The open and the close wrote the file again: the log is trusted at block 1 from here.
    assert!(LogStore::open_read_only(dir.path()).is_ok());
}

/// A log whose creation was cut short (its first segment empty, or holding no whole commit
/// record): a writer without `create` (`bintrie compact`) refuses it rather than commit an
/// empty state at a group depth nobody chose; a writer with `create` finishes making it at the
/// depth it asks for.
#[test]
fn a_writer_without_create_refuses_a_log_whose_creation_was_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    drop(LogStore::open(dir.path(), &opts(3)).unwrap());
    let seg = dir.path().join("log.000001");
    let whole = std::fs::read(&seg).unwrap();
    let keep = LogOptions {
        create: false,
        ..opts(3)
    };
    for cut in [0, 40.min(whole.len() - 1)] {
        std::fs::write(&seg, &whole[..cut]).unwrap();
        std::fs::remove_file(dir.path().join(crate::INDEX_SIZES_FILE)).ok();
        assert!(matches!(
            LogStore::open(
                dir.path(),
                &LogOptions {
                    group_depth: None,
                    ..keep.clone()
                }
            ),
            Err(LogError::Uncommitted(_))
        ));
        assert!(!LogStore::open_read_only(dir.path()).unwrap().found_commit());
    }
    let made = LogStore::open(dir.path(), &opts(3)).unwrap();
    assert_eq!((made.meta().group_depth, made.meta().block), (3, 0));
    assert!(made.found_commit());
}

#[test]
fn a_flipped_byte_in_a_committed_block_is_refused_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(8);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(4)).unwrap(), 4).unwrap();
    commit(&mut trie, random_writes(&mut rng, 200), 1);
    commit(&mut trie, random_writes(&mut rng, 200), 2);
    drop(trie);
    let seg = dir.path().join("log.000001");
    let good = std::fs::read(&seg).unwrap();
    for at in [200usize, good.len() / 3, good.len() / 2] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&seg, &bad).unwrap();
        let err = LogStore::open(dir.path(), &opts(4)).unwrap_err();
        assert!(matches!(err, LogError::Corrupt(_)), "flip at {at}: {err}");
        assert!(err.to_string().contains("committed block follows"), "{err}");
    }
    // A flip in the data a read returns is caught by the read, too.
    std::fs::write(&seg, &good).unwrap();
    let store = LogStore::open(
        dir.path(),
        &LogOptions {
            read_only: true,
            ..opts(4)
        },
    )
    .unwrap();
    let (key, loc) = {
        let index = store.index();
        index.nodes.iter().next().unwrap()
    };
    let mut bad = good.clone();
    bad[loc.off() as usize + HEADER + key.as_bytes().len()] ^= 1;
    std::fs::write(&seg, &bad).unwrap();
    let err = store.get_node(&key).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn one_writer_at_a_time_and_handles_that_fell_behind_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), &opts(5)).unwrap();
    let err = LogStore::open(dir.path(), &opts(5)).unwrap_err();
    assert!(matches!(err, LogError::Locked(_)), "{err}");
    // Readers open beside the writer.
    LogStore::open(
        dir.path(),
        &LogOptions {
            read_only: true,
            ..opts(5)
        },
    )
    .unwrap();
    let err = LogStore::open(dir.path(), &opts(6)).unwrap_err();
    assert!(matches!(err, LogError::Locked(_)), "{err}");

    let mut rng = StdRng::seed_from_u64(9);
    let stale = store.clone();
    let mut trie = Trie::new(store, 5).unwrap();
    commit(&mut trie, random_writes(&mut rng, 50), 1);
    let mut other = Trie::new(stale, 5).unwrap();
    other.update(random_writes(&mut rng, 50)).unwrap();
    let err = other
        .commit_with(|s, set| s.write_block(set, 2, &[]))
        .unwrap_err();
    assert!(
        err.to_string().contains("another handle committed"),
        "{err}"
    );
    drop((trie, other));
    let err = LogStore::open(dir.path(), &opts(6)).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::GroupDepth {
                stored: 5,
                asked: 6
            }
        ),
        "{err}"
    );
}

#[test]
fn the_trie_prefetch_loads_every_blob_an_update_needs() {
    // Through the ring (the index walked as reads are in flight) and blocking threads.
    for io_uring in [true, false] {
        the_trie_prefetch_loads_every_blob_an_update_needs_with(io_uring);
    }
}

fn the_trie_prefetch_loads_every_blob_an_update_needs_with(io_uring: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(10);
    // Nothing kept in memory from the commit: every blob comes from the prefetch.
    let options = LogOptions {
        recent_blocks: 0,
        io_uring,
        ..opts(5)
    };
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 5).unwrap();
    let root = commit(&mut trie, random_writes(&mut rng, 3000), 1);
    let store = trie.into_store();
    let mut reference = Trie::open(store.clone(), 5, root).unwrap();
    let w = {
        // New stems and updates of existing ones.
        let mut w = random_writes(&mut rng, 100);
        w.extend(random_writes(&mut StdRng::seed_from_u64(10), 100));
        w
    };
    reference.update(w.clone()).unwrap();
    let stems: Vec<Stem> = w.iter().map(|(k, _)| k.stem).collect();
    store
        .warm_trie_paths(&stems, 4, &AtomicBool::new(false))
        .unwrap();
    let before = store.reads();
    let mut trie = Trie::open(store.clone(), 5, root).unwrap();
    trie.update(w).unwrap();
    assert_eq!(trie.root(), reference.root());
    assert_eq!(
        store.reads(),
        before,
        "io_uring {io_uring}: the update read from disk after the prefetch"
    );
}

/// A GD-5 log that keeps no recent blocks in memory (every blob comes from the device), with
/// `n` random writes committed as block 1: its directory, the store and the root.
fn committed_without_recent(rng: &mut StdRng, n: usize) -> (tempfile::TempDir, LogStore, Hash32) {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        recent_blocks: 0,
        ..opts(5)
    };
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 5).unwrap();
    let root = commit(&mut trie, random_writes(rng, n), 1);
    (dir, trie.into_store(), root)
}

#[test]
fn a_commit_while_the_trie_prefetch_walks_the_index_ends_it_with_a_conflict() {
    let mut rng = StdRng::seed_from_u64(12);
    let (_dir, store, root) = committed_without_recent(&mut rng, 3000);
    // Another handle commits as soon as the first blob arrives: the stems the ring has not
    // located yet would be found in the new block's index, so the prefetch must refuse.
    let other = std::sync::Mutex::new(Some(Trie::open(store.clone(), 5, root).unwrap()));
    let each = |_: &PathKey, _: &[u8]| {
        if let Some(mut t) = other.lock().unwrap().take() {
            commit(&mut t, random_writes(&mut StdRng::seed_from_u64(99), 10), 2);
        }
    };
    // Far more blobs than the ring keeps in flight, so stems are still unlocated then.
    let stems: Vec<Stem> = random_writes(&mut rng, 400)
        .iter()
        .map(|(k, _)| k.stem)
        .collect();
    let err = store
        .warm_trie_paths_with(&stems, 0, 4, &AtomicBool::new(false), Some(&each))
        .unwrap_err();
    assert!(
        err.to_string().contains("another handle committed"),
        "{err}"
    );
    assert!(
        other.lock().unwrap().is_none(),
        "the other handle never committed"
    );
    assert_eq!(store.warm_blobs(), 0, "a refused prefetch kept blobs");
}

/// The keys `warm_trie_paths_with` hands on for `stems` at `below`, from a cleared warm set.
fn handed_on(store: &LogStore, stems: &[Stem], below: usize) -> Vec<PathKey> {
    store.clear_warm();
    let keys = std::sync::Mutex::new(Vec::new());
    let each = |key: &PathKey, _: &[u8]| keys.lock().unwrap().push(*key);
    store
        .warm_trie_paths_with(stems, below, 4, &AtomicBool::new(false), Some(&each))
        .unwrap();
    let mut keys = keys.into_inner().unwrap();
    keys.sort_unstable();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a blob was handed on twice");
    keys
}

#[test]
fn the_trie_prefetch_below_a_depth_reads_exactly_the_deeper_blobs_of_the_paths() {
    for g in 1..=8u8 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(40 + u64::from(g));
        let options = LogOptions {
            recent_blocks: 0,
            ..opts(g)
        };
        let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), g).unwrap();
        // Random stems and stems sharing 144 bits: paths end at every depth down to ~150.
        commit(&mut trie, random_writes(&mut rng, 3000), 1);
        let store = trie.into_store();
        let mut stems: Vec<Stem> = random_writes(&mut rng, 200)
            .iter()
            .map(|(k, _)| k.stem)
            .collect();
        stems.extend(
            random_writes(&mut StdRng::seed_from_u64(40 + u64::from(g)), 200)
                .iter()
                .map(|(k, _)| k.stem),
        );
        let all = handed_on(&store, &stems, 0);
        // Each stem listed twice: every blob is still read and handed on once.
        let reads = store.reads().reads;
        assert_eq!(
            handed_on(&store, &[stems.clone(), stems.clone()].concat(), 0),
            all
        );
        assert_eq!(
            store.reads().reads - reads,
            all.len() as u64,
            "g={g}: twice-listed"
        );
        // Nothing listed: nothing read.
        assert!(handed_on(&store, &[], 0).is_empty());
        assert_eq!(
            store.reads().reads - reads,
            all.len() as u64,
            "g={g}: empty list"
        );
        let deepest = all.iter().map(PathKey::bit_len).max().unwrap();
        assert!(deepest > 140, "g={g}: paths reach {deepest} bits only");
        let g = usize::from(g);
        for below in [
            g,
            2 * g,
            3 * g,
            7,
            20,
            144,
            deepest,
            248,
            249,
            1000,
            usize::MAX,
        ] {
            let want: Vec<PathKey> = all
                .iter()
                .filter(|k| k.bit_len() >= below)
                .copied()
                .collect();
            let reads = store.reads().reads;
            assert_eq!(
                handed_on(&store, &stems, below),
                want,
                "g={g} below={below}"
            );
            assert_eq!(
                store.reads().reads - reads,
                want.len() as u64,
                "g={g} below={below}: read more than the blobs below"
            );
        }
    }
}

/// A writable open leaves the index's table sizes beside the log, and the next open sizes its
/// tables from them; with the file wrong (garbage, sizes far too large or too small, another
/// version) or gone, an open rebuilds the same index, and a table the file made too large is
/// cut back to its entries. A read-only open writes nothing.
#[test]
fn the_index_sizes_size_the_next_open_and_a_wrong_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    for block in 1..=3 {
        commit(&mut trie, random_writes(&mut rng, 1000), block);
    }
    drop(trie);
    let sizes_file = dir.path().join(crate::sizes::SIZES_FILE);
    std::fs::remove_file(&sizes_file).unwrap();
    let ro = LogStore::open_read_only(dir.path()).unwrap();
    assert!(!sizes_file.exists(), "a read-only open writes no sizes");
    let expected = index_snapshot(&ro);
    let sizes = crate::sizes::Sizes::of(&ro.index());
    drop(ro);

    let store = LogStore::open(dir.path(), &opts(5)).unwrap();
    let log_bytes = store.info().log_bytes;
    assert_eq!(crate::sizes::read(dir.path(), log_bytes).sizes, Some(sizes));
    assert_eq!(index_snapshot(&store), expected);
    drop(store);
    let sized = LogStore::open_read_only(dir.path()).unwrap();
    assert_eq!(index_snapshot(&sized), expected, "sized from the file");
    drop(sized);

    let (nodes, stems) = (expected.0.len(), expected.1.len());
    for text in [
        "not sizes at all".to_string(),
        format!(
            "bintrie log index sizes 1\nupper 0\nlower {}\nlong 0\nstems 0\ncode 0\n",
            log_bytes / 20
        ),
        "bintrie log index sizes 1\nupper 0\nlower 0\nlong 0\nstems 0\ncode 0\n".to_string(),
        "bintrie log index sizes 9\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\n".to_string(),
    ] {
        std::fs::write(&sizes_file, &text).unwrap();
        let store = LogStore::open_read_only(dir.path()).unwrap();
        assert_eq!(index_snapshot(&store), expected, "{text:?}");
        let index = store.index();
        assert!(
            index.nodes.lower.capacity() <= 2 * nodes + INDEX_ROOM
                && index.stems.capacity() <= 2 * stems + INDEX_ROOM,
            "{text:?}: room for {} paths and {} stems",
            index.nodes.lower.capacity(),
            index.stems.capacity()
        );
    }
    std::fs::remove_file(&sizes_file).unwrap();
    assert_eq!(
        index_snapshot(&LogStore::open_read_only(dir.path()).unwrap()),
        expected
    );
}

#[test]
fn a_writable_open_leaves_room_in_the_index_for_an_eighth_more_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(12);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    commit(&mut trie, random_writes(&mut rng, 3000), 1);
    drop(trie);
    let store = LogStore::open(dir.path(), &opts(5)).unwrap();
    let index = store.index();
    for (name, len, capacity) in [
        (
            "upper paths",
            index.nodes.upper.len(),
            index.nodes.upper.capacity(),
        ),
        (
            "lower paths",
            index.nodes.lower.len(),
            index.nodes.lower.capacity(),
        ),
        (
            "long paths",
            index.nodes.long.len(),
            index.nodes.long.capacity(),
        ),
        ("stems", index.stems.len(), index.stems.capacity()),
        ("code", index.code.len(), index.code.capacity()),
    ] {
        assert!(
            capacity - len >= len / 8 + INDEX_ROOM,
            "{name}: {len} entries, room for {capacity}"
        );
    }
    assert!(index.nodes.len() > 3000);
}

#[test]
fn a_bulk_load_opens_as_the_tree_it_was_given_and_an_unfinished_one_is_refused() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut mem = Trie::new(MemoryStore::new(), 6).unwrap();
    mem.update(random_writes(&mut rng, 2000)).unwrap();
    let root = mem.root();
    let mut blobs = Vec::new();
    mem.commit_with(|_, set| {
        blobs = set.nodes().map(|(k, b)| (*k, b.to_vec())).collect();
        Ok(())
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path(), &opts(6)).unwrap();
    let mut load = store.bulk_load().unwrap();
    for (k, b) in &blobs {
        load.node(k.as_bytes(), b).unwrap();
    }
    load.code(&[3; 32], b"\x60\x00").unwrap();
    load.finish(root, 1).unwrap();
    // The load leaves the index's sizes for the first open.
    let (sizes, log_bytes) = (
        crate::sizes::Sizes::of(&store.index()),
        store.info().log_bytes,
    );
    assert!(sizes.entries() > blobs.len());
    drop(store);
    let hint = crate::sizes::read(dir.path(), log_bytes);
    assert_eq!((hint.sizes, hint.block), (Some(sizes), Some(1)));
    let mut store = LogStore::open(dir.path(), &opts(6)).unwrap();
    assert_eq!(
        store.get_code(&[3; 32], None).unwrap().unwrap(),
        b"\x60\x00"
    );
    assert!(
        store.bulk_load().is_err(),
        "a second bulk load into a full log"
    );
    let mut trie = Trie::open(store, 6, root).unwrap();
    assert_eq!(trie.verify().unwrap(), root);

    // A load cut before its last commit record.
    let dir = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(dir.path(), &opts(6)).unwrap();
    let mut load = store.bulk_load().unwrap();
    for (k, b) in &blobs {
        load.node(k.as_bytes(), b).unwrap();
    }
    load.checkpoint(ZERO_HASH, 0, true).unwrap();
    drop(load);
    drop(store);
    let err = LogStore::open(dir.path(), &opts(6)).unwrap_err();
    assert!(matches!(err, LogError::Building), "{err}");
}

#[test]
fn segments_roll_over_and_reopen_whole() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 20_000,
        compact_garbage: None,
        ..opts(3)
    };
    let mut rng = StdRng::seed_from_u64(12);
    let mut reference = Trie::new(MemoryStore::new(), 3).unwrap();
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 3).unwrap();
    for block in 1..=10 {
        let w = random_writes(&mut rng, 100);
        reference.update(w.clone()).unwrap();
        commit(&mut trie, w, block);
    }
    assert!(trie.store().info().segments > 3);
    let info = trie.store().info();
    assert!(info.garbage_bytes() > 0 && info.live_bytes > 0, "{info:?}");
    drop(trie);
    let store = LogStore::open(dir.path(), &options).unwrap();
    assert_eq!(store.meta().root, reference.root());
    assert_eq!(store.info().live_bytes, info.live_bytes);
    let mut trie = Trie::open(store, 3, reference.root()).unwrap();
    assert_eq!(trie.verify().unwrap(), reference.root());
    // A middle segment removed is refused.
    std::fs::remove_file(dir.path().join("log.000002")).unwrap();
    drop(trie);
    let err = LogStore::open(dir.path(), &options).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

/// A segment that is no regular file (a device that never ends, a FIFO whose open would wait
/// for a writer, a directory) is refused by readers and writers alike, at once, and the log's
/// files are left as they were.
#[test]
fn a_segment_that_is_no_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 20_000,
        compact_garbage: None,
        ..opts(3)
    };
    let mut rng = StdRng::seed_from_u64(13);
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 3).unwrap();
    for block in 1..=6 {
        commit(&mut trie, random_writes(&mut rng, 100), block);
    }
    drop(trie);
    let segments = crate::segment_files(dir.path()).unwrap();
    assert!(segments.len() > 2);
    let middle = dir.path().join("log.000002");
    let kept = std::fs::read(&middle).unwrap();
    let last = segments.last().unwrap().1.clone();
    let last_len = std::fs::metadata(&last).unwrap().len();
    for what in ["a link to /dev/zero", "a FIFO", "a directory"] {
        std::fs::remove_file(&middle).unwrap();
        match what {
            "a link to /dev/zero" => std::os::unix::fs::symlink("/dev/zero", &middle).unwrap(),
            "a FIFO" => make_fifo(&middle),
            _ => std::fs::create_dir(&middle).unwrap(),
        }
        for read_only in [true, false] {
            let err = if read_only {
                LogStore::open_read_only(dir.path())
                    .map(|_| ())
                    .unwrap_err()
            } else {
                LogStore::open(dir.path(), &options)
                    .map(|_| ())
                    .unwrap_err()
            };
            assert!(
                matches!(&err, LogError::Corrupt(m) if m.contains("not a regular file")),
                "{what}: {err}"
            );
        }
        assert_eq!(std::fs::metadata(&last).unwrap().len(), last_len, "{what}");
        if std::fs::symlink_metadata(&middle).unwrap().is_dir() {
            std::fs::remove_dir(&middle).unwrap();
        } else {
            std::fs::remove_file(&middle).unwrap();
        }
        std::fs::write(&middle, &kept).unwrap();
    }
    LogStore::open(dir.path(), &options).unwrap();
}

/// A log cut back to an end it reported opens as the state of that block, whole (its
/// index exactly the one it had then, every blob verifying against the root) however many
/// blocks and segments came after, and takes new blocks from there; a cut it cannot make
/// (a segment or offset the log does not have) changes nothing; an open writer keeps it
/// from cutting at all.
#[test]
fn a_log_rewound_to_a_reported_end_is_that_block_again() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 20_000,
        compact_garbage: None,
        ..opts(4)
    };
    let mut rng = StdRng::seed_from_u64(31);
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 4).unwrap();
    // Blocks 1-3, and a new block 4 after the cut: what the log must hold in the end.
    let mut reference = Trie::new(MemoryStore::new(), 4).unwrap();
    for block in 1..=3 {
        let w = random_writes(&mut rng, 100);
        reference.update(w.clone()).unwrap();
        commit(&mut trie, w, block);
    }
    let end = trie.store().end().unwrap();
    assert_eq!(end.meta.block, 3);
    assert_eq!(end.meta.root, trie.root());
    let at_3 = index_snapshot(trie.store());
    for block in 4..=9 {
        commit(&mut trie, random_writes(&mut rng, 100), block);
    }
    assert!(
        trie.store().info().segments > end.segment as usize + 1,
        "the later blocks roll over to new segments"
    );
    // Not under an open writer.
    let err = rewind(dir.path(), &end).unwrap_err();
    assert!(matches!(err, LogError::Locked(_)), "{err}");
    drop(trie);
    // Cuts it cannot make change nothing.
    let files = || scan::segment_files(dir.path()).unwrap();
    let before: Vec<u64> = files()
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .collect();
    for bad in [
        LogEnd { segment: 99, ..end },
        LogEnd {
            offset: u64::MAX,
            ..end
        },
    ] {
        let err = rewind(dir.path(), &bad).unwrap_err();
        assert!(matches!(err, LogError::Corrupt(_)), "{err}");
        let after: Vec<u64> = files()
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(after, before);
    }
    rewind(dir.path(), &end).unwrap();
    assert_eq!(files().len(), end.segment as usize);
    let store = LogStore::open(dir.path(), &options).unwrap();
    assert_eq!(store.stored_meta(), end.meta);
    assert_eq!(index_snapshot(&store), at_3);
    assert_eq!(store.end(), Some(end));
    let mut trie = Trie::open(store, 4, end.meta.root).unwrap();
    assert_eq!(trie.verify().unwrap(), end.meta.root);
    // And it goes on from there: a new block 4 on top of block 3.
    let w = random_writes(&mut rng, 50);
    reference.update(w.clone()).unwrap();
    let root = commit(&mut trie, w, 4);
    assert_eq!(root, reference.root());
    drop(trie);
    let store = LogStore::open(dir.path(), &options).unwrap();
    assert_eq!(store.stored_meta().block, 4);
    assert_eq!(store.stored_meta().root, root);
    let mut trie = Trie::open(store, 4, root).unwrap();
    assert_eq!(trie.verify().unwrap(), root);
}

/// Every entry of the index, sorted, with its byte counts and meta.
pub(crate) type IndexSnapshot = (
    Vec<(PathKey, Loc)>,
    Vec<(Stem, Loc)>,
    Vec<([u8; 32], Loc)>,
    (u64, u64, Option<Meta>),
);

/// The entries of an index table, sorted by key.
fn sorted<'a, K: Ord + Copy + 'a>(
    entries: impl Iterator<Item = (&'a K, &'a Loc)>,
) -> Vec<(K, Loc)> {
    sorted_owned(entries.map(|(k, l)| (*k, *l)))
}

/// [`sorted`] for entries given by value (the node table rebuilds its keys).
fn sorted_owned<K: Ord + Copy>(entries: impl Iterator<Item = (K, Loc)>) -> Vec<(K, Loc)> {
    let mut v: Vec<(K, Loc)> = entries.collect();
    v.sort_unstable_by_key(|e| e.0);
    v
}

pub(crate) fn index_snapshot(store: &LogStore) -> IndexSnapshot {
    let index = store.index();
    (
        sorted_owned(index.nodes.iter()),
        sorted(index.stems.iter()),
        sorted(index.code.iter()),
        (index.log_bytes, index.live_bytes, index.meta),
    )
}

/// The index's node table keeps the paths of at most `UPPER_BITS` bits in its small table and
/// the rest in the large one, and answers for both alike: every path from the root to depth
/// 248 is found after its insert, replaced in place, gone after its remove, and counted once.
#[test]
fn the_node_table_keeps_the_top_paths_apart_and_finds_every_path() {
    let stem = [0xa5u8; 31];
    let key = |d: usize| Path::from_stem_prefix(&stem, d).to_key();
    let loc = |d: usize| Loc::new(1, d as u64 * 100, 10 + d).unwrap();
    let mut nodes = NodeMap::default();
    for d in 0..=MAX_DEPTH {
        assert_eq!(nodes.insert(key(d), loc(d)), None, "depth {d}");
    }
    assert_eq!(nodes.len(), MAX_DEPTH + 1);
    assert_eq!(
        nodes.upper.len(),
        UPPER_BITS + 1,
        "paths of 0..={UPPER_BITS} bits"
    );
    assert!(
        nodes
            .upper
            .keys()
            .all(|&w| PathKey::from_word(w).unwrap().bit_len() <= UPPER_BITS)
    );
    assert!(
        nodes
            .lower
            .keys()
            .all(|&w| PathKey::from_word(w).unwrap().bit_len() > UPPER_BITS)
    );
    // A key of at most 7 bytes (a path of at most 48 bits) is one word; the rest keep theirs.
    assert_eq!(nodes.lower.len(), 48 - UPPER_BITS, "paths of 17..=48 bits");
    assert_eq!(nodes.long.len(), MAX_DEPTH - 48, "paths of 49..=248 bits");
    assert!(nodes.long.keys().all(|k| k.bit_len() > 48));
    assert_eq!(nodes.iter().count(), MAX_DEPTH + 1);
    for d in 0..=MAX_DEPTH {
        assert_eq!(nodes.get(&key(d)), Some(&loc(d)), "depth {d}");
        assert_eq!(nodes.insert(key(d), loc(d + 1)), Some(loc(d)), "depth {d}");
    }
    assert_eq!(nodes.len(), MAX_DEPTH + 1, "replaced in place");
    let removed = [0, UPPER_BITS, UPPER_BITS + 1, 48, 49, MAX_DEPTH];
    for d in removed {
        assert_eq!(nodes.remove(&key(d)), Some(loc(d + 1)), "depth {d}");
        assert_eq!(nodes.get(&key(d)), None, "depth {d}");
        assert_eq!(nodes.remove(&key(d)), None, "depth {d}");
    }
    assert_eq!(nodes.len(), MAX_DEPTH + 1 - removed.len());
    assert!(!nodes.is_empty());
}

proptest::proptest! {
    /// The node table answers every get, insert and remove as a plain map of the keys does,
    /// for keys on both sides of the word's limit (7 bytes) and of [`UPPER_BITS`], many of them
    /// prefixes of one another or equal but for trailing zeros.
    #[test]
    fn the_node_table_answers_as_a_map_of_its_keys(
        ops in proptest::collection::vec(
            (proptest::collection::vec(0u8..3, 0..=10), 0u8..3, 1u64..1000),
            1..300,
        )
    ) {
        let mut nodes = NodeMap::default();
        let mut model: HashMap<PathKey, Loc> = HashMap::new();
        for (bytes, op, n) in ops {
            let key = PathKey::from_bytes(&bytes).unwrap();
            let loc = Loc::new(1, n, 10).unwrap();
            match op {
                0 => proptest::prop_assert_eq!(nodes.insert(key, loc), model.insert(key, loc)),
                1 => proptest::prop_assert_eq!(nodes.remove(&key), model.remove(&key)),
                _ => proptest::prop_assert_eq!(nodes.get(&key), model.get(&key)),
            }
            proptest::prop_assert_eq!(nodes.len(), model.len());
        }
        let mut entries: Vec<(PathKey, Loc)> = nodes.iter().collect();
        entries.sort_unstable_by_key(|e| e.0);
        let mut expected: Vec<(PathKey, Loc)> = model.into_iter().collect();
        expected.sort_unstable_by_key(|e| e.0);
        proptest::prop_assert_eq!(entries, expected);
    }
}

/// A batch large enough for the stem table to be updated on its own thread leaves the index
/// exactly as the same changes applied in small (one-thread) batches do, and undoing it puts
/// every entry back.
#[test]
fn a_large_batch_applied_on_two_threads_matches_small_batches_and_undoes() {
    fn changes(seed: u64) -> Vec<Change> {
        let mut rng = StdRng::seed_from_u64(seed);
        let stem = |i: u16| {
            let mut s = [0u8; 31];
            s[..2].copy_from_slice(&i.to_be_bytes());
            s
        };
        (0..3 * PARALLEL_APPLY as u64)
            .map(|i| {
                let key = Path::from_stem_prefix(
                    &stem(rng.random_range(0..600)),
                    rng.random_range(0..40),
                )
                .to_key();
                let loc = Loc::new(1, i * 64, rng.random_range(1..600)).unwrap();
                match rng.random_range(0..10) {
                    0..=1 => Change::Remove(key),
                    2 => Change::Code([rng.random_range(0..50u8); 32], loc, 32),
                    3..=5 => Change::Node(key, loc, 40, Some(stem(rng.random_range(0..600)))),
                    _ => Change::Node(key, loc, 40, None),
                }
            })
            .collect()
    }
    let snapshot = |ix: &Index| {
        (
            sorted_owned(ix.nodes.iter()),
            sorted(ix.stems.iter()),
            sorted(ix.code.iter()),
            ix.live_bytes,
        )
    };
    let mut whole = Index::default();
    let mut small = Index::default();
    whole.apply(changes(1));
    for chunk in changes(1).chunks(PARALLEL_APPLY / 4) {
        small.apply_inner(
            chunk
                .iter()
                .map(|c| match *c {
                    Change::Node(k, l, n, s) => Change::Node(k, l, n, s),
                    Change::Remove(k) => Change::Remove(k),
                    Change::Code(h, l, n) => Change::Code(h, l, n),
                })
                .collect(),
            None,
        );
    }
    assert_eq!(snapshot(&whole), snapshot(&small));
    assert!(!whole.stems.is_empty() && !whole.code.is_empty());
    let before = snapshot(&whole);
    let undo = whole.apply_undoable(changes(2));
    assert_ne!(snapshot(&whole), before, "the changes were applied");
    whole.undo(undo);
    assert_eq!(snapshot(&whole), before);
}

#[test]
fn an_undone_apply_puts_every_index_entry_back() {
    let key = |b: u8| PathKey::from_bytes(&[b, 8]).unwrap();
    let loc = |off: u64, len: usize| Loc::new(1, off, len).unwrap();
    let mut index = Index::default();
    index.apply(vec![
        Change::Node(key(1), loc(0, 100), 100, Some([1; 31])),
        Change::Node(key(2), loc(100, 50), 50, None),
        Change::Node(key(3), loc(150, 70), 70, Some([3; 31])),
        Change::Code([9; 32], loc(220, 30), 30),
    ]);
    let snapshot = |ix: &Index| {
        (
            sorted_owned(ix.nodes.iter()),
            sorted(ix.stems.iter()),
            sorted(ix.code.iter()),
            ix.live_bytes,
        )
    };
    let before = snapshot(&index);
    // Every kind of change: a key replaced, one new, one removed, one removed that was not
    // there, one changed twice, a stem moved, code new and code already stored.
    let undo = index.apply_undoable(vec![
        Change::Node(key(1), loc(300, 10), 10, Some([1; 31])),
        Change::Node(key(4), loc(310, 20), 20, Some([4; 31])),
        Change::Remove(key(2)),
        Change::Remove(key(5)),
        Change::Node(key(4), loc(330, 25), 25, Some([4; 31])),
        Change::Remove(key(3)),
        Change::Node(key(6), loc(355, 70), 70, Some([3; 31])),
        Change::Code([9; 32], loc(425, 30), 30),
        Change::Code([8; 32], loc(455, 40), 40),
    ]);
    assert_ne!(snapshot(&index), before, "the changes were applied");
    index.undo(undo);
    assert_eq!(snapshot(&index), before);
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    // /dev/full: every write fails with ENOSPC, as on a full disk.
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(13);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    let r1 = commit(&mut trie, random_writes(&mut rng, 100), 1);
    let mut store = trie.into_store();
    let real = {
        let mut guard = store.inner.writer.lock().unwrap();
        let w = guard.as_mut().unwrap();
        std::mem::replace(&mut w.file, full)
    };
    let mut trie = Trie::open(store.clone(), 5, r1).unwrap();
    trie.update(random_writes(&mut rng, 100)).unwrap();
    let before = index_snapshot(&store);
    let err = trie
        .commit_with(|s, set| s.write_block(set, 2, &[]))
        .unwrap_err();
    assert!(err.to_string().contains("No space"), "{err}");
    assert_eq!(
        store.stored_meta().root,
        r1,
        "the failed block is not visible"
    );
    // The index took the block's changes beside the write: every entry is back.
    assert!(
        index_snapshot(&store) == before,
        "the index is as before the block"
    );
    // Nor are its blobs in the recent blocks' set (it held block 1's before).
    {
        let recent = store.recent();
        assert_eq!(recent.root, None);
        assert!(recent.blobs.is_empty());
    }
    store.inner.writer.lock().unwrap().as_mut().unwrap().file = real;
    drop(trie);
    let _ = &mut store;
    drop(store);
    assert_eq!(
        LogStore::open(dir.path(), &opts(5)).unwrap().meta().root,
        r1
    );
}

#[test]
fn batched_and_blocking_reads_return_the_same_checked_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(14);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    commit(&mut trie, random_writes(&mut rng, 2000), 1);
    let store = trie.into_store();
    let wanted: Vec<(PathKey, Loc)> = {
        let index = store.index();
        index.nodes.iter().collect()
    };
    let stop = AtomicBool::new(false);
    let mut a = store.read_nodes(&wanted, 4).unwrap();
    let mut b = store.read_nodes_blocking(&wanted, 4, &stop, None).unwrap();
    a.sort();
    b.sort();
    assert_eq!(a.len(), wanted.len());
    assert_eq!(a, b);
    for (key, blob) in &a {
        assert_eq!(Some(blob), store.get_node(key).unwrap().as_ref());
    }
    // Handing each blob on as it arrives reads the same, and hands on exactly what it
    // returns, each blob once (the ring's hand-on is the trie prefetch's, tested with it).
    let seen = Mutex::new(Vec::new());
    let each = |k: &PathKey, b: &[u8]| seen.lock().unwrap().push((*k, b.to_vec()));
    let mut c = store
        .read_nodes_blocking(&wanted, 4, &stop, Some(&each))
        .unwrap();
    c.sort();
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(c, a);
    assert_eq!(seen, a);
    // A damaged record fails the batch, naming it.
    let seg = dir.path().join("log.000001");
    let mut bytes = std::fs::read(&seg).unwrap();
    let (_, loc) = wanted[wanted.len() / 2];
    bytes[loc.off() as usize + HEADER + 1] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let err = store.read_nodes(&wanted, 4).unwrap_err();
    assert!(err.to_string().contains(&loc.off().to_string()), "{err}");
    let err = store
        .read_nodes_blocking(&wanted, 4, &stop, Some(&|_: &PathKey, _: &[u8]| {}))
        .unwrap_err();
    assert!(err.to_string().contains(&loc.off().to_string()), "{err}");
}

#[test]
fn the_durable_block_follows_the_durability() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(15);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    commit(&mut trie, random_writes(&mut rng, 50), 1);
    assert_eq!(trie.store().durable_block(), Some(1));
    drop(trie);
    let relaxed = LogOptions {
        durability: Durability::Relaxed,
        ..opts(5)
    };
    let store = LogStore::open(dir.path(), &relaxed).unwrap();
    let root = store.meta().root;
    let mut trie = Trie::open(store, 5, root).unwrap();
    commit(&mut trie, random_writes(&mut rng, 50), 2);
    commit(&mut trie, random_writes(&mut rng, 50), 3);
    assert_eq!(
        trie.store().durable_block(),
        Some(1),
        "relaxed: not synced yet"
    );
    trie.store().sync().unwrap();
    assert_eq!(trie.store().durable_block(), Some(3));
    let reader = LogStore::open(
        dir.path(),
        &LogOptions {
            read_only: true,
            ..opts(5)
        },
    )
    .unwrap();
    assert_eq!(reader.durable_block(), None);
    assert_eq!(reader.meta().block, 3);
}

#[test]
fn many_small_blocks_reopen_whole() {
    // Blocks of every size put commit records at every offset in a page, so some need padding
    // (which belongs to the block's checked body).
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(16);
    let mut reference = Trie::new(MemoryStore::new(), 2).unwrap();
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(2)).unwrap(), 2).unwrap();
    for block in 1..=300 {
        let n = rng.random_range(1..12);
        let w = random_writes(&mut rng, n);
        reference.update(w.clone()).unwrap();
        commit(&mut trie, w, block);
    }
    drop(trie);
    let store = LogStore::open(dir.path(), &opts(2)).unwrap();
    assert_eq!(
        (store.meta().block, store.meta().root),
        (300, reference.root())
    );
}

#[test]
fn a_batch_of_stems_reads_what_one_by_one_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(17);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    let w = random_writes(&mut rng, 1500);
    commit(&mut trie, w.clone(), 1);
    let store = trie.into_store();
    let mut stems: Vec<Stem> = w.iter().map(|(k, _)| k.stem).collect();
    stems.extend(random_writes(&mut rng, 300).iter().map(|(k, _)| k.stem)); // absent
    let batch = store
        .get_stems(&stems, None)
        .unwrap()
        .expect("io_uring on this machine");
    for (stem, got) in stems.iter().zip(&batch) {
        assert_eq!(got, &store.get_stem(stem, None).unwrap());
    }
    assert_eq!(batch.iter().filter(|v| v.is_none()).count(), 300);
    // Nothing asked, or only absent stems: nothing read, every answer absent.
    assert_eq!(store.get_stems(&[], None).unwrap(), Some(Vec::new()));
    assert_eq!(
        store.get_stems(&stems[1500..], None).unwrap(),
        Some(vec![None; 300])
    );
    // The 1,500 stems were written in one block, so many share a page: fewer reads than
    // stems, each present stem in exactly one read, the absent ones in none, and the reads in
    // the order of their first stems.
    let locs: Vec<Option<Loc>> = {
        let index = store.index();
        stems.iter().map(|s| index.stems.get(s).copied()).collect()
    };
    let reads = stem_spans(&locs).expect("short records");
    let mut listed: Vec<usize> = reads
        .iter()
        .flat_map(|s| s.records.iter().map(|r| r.0))
        .collect();
    assert!(
        reads.len() < 1500 / 2,
        "{} reads for 1,500 stems",
        reads.len()
    );
    listed.sort_unstable();
    assert_eq!(listed, (0..1500).collect::<Vec<_>>());
    let firsts: Vec<usize> = reads
        .iter()
        .map(|s| s.records.iter().map(|r| r.0).min().unwrap())
        .collect();
    assert!(firsts.is_sorted(), "reads not in the caller's order");
    for span in &reads {
        for &(_, loc, len) in &span.records {
            assert!(span.off <= loc.off() && loc.off() + len as u64 <= span.end);
        }
    }
    // A snapshot's root that moved on is refused; io_uring off gives no batch.
    assert!(store.get_stems(&stems, Some(&[7; 32])).is_err());
    let off = LogStore::open(
        dir.path(),
        &LogOptions {
            read_only: true,
            io_uring: false,
            ..opts(5)
        },
    )
    .unwrap();
    assert!(off.get_stems(&stems, None).unwrap().is_none());
}

#[test]
fn code_named_by_the_stems_joins_their_batch_once_per_hash() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(19);
    let mut trie = Trie::new(LogStore::open(dir.path(), &opts(5)).unwrap(), 5).unwrap();
    let w = random_writes(&mut rng, 400);
    trie.update(w.clone()).unwrap();
    // Hash 0 and 1: short code; 2: longer than the index's 16-bit length (read after the
    // ring); 3: not stored.
    let big: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
    let code = vec![
        ([0; 32], vec![0x60, 0x00]),
        ([1; 32], vec![0x5b; 300]),
        ([2; 32], big),
    ];
    trie.commit_with(|s, set| s.write_block(set, 1, &code))
        .unwrap();
    let store = trie.into_store();
    let mut stems: Vec<Stem> = w.iter().map(|(k, _)| k.stem).collect();
    stems.extend(random_writes(&mut rng, 50).iter().map(|(k, _)| k.stem)); // absent
    let mut asked = Vec::new();
    let (values, codes) = store
        .get_stems_then_code(
            &stems,
            None,
            |i, v| {
                asked.push((i, v.is_some()));
                Some([(i % 4) as u8; 32])
            },
            |_, bytes| bytes,
        )
        .unwrap()
        .expect("io_uring on this machine");
    for (stem, got) in stems.iter().zip(&values) {
        assert_eq!(got, &store.get_stem(stem, None).unwrap());
    }
    // Told once of every stem: each absent one before any present one, whose codes alone are
    // read.
    let absent_first = asked.iter().take_while(|(_, present)| !present).count();
    assert!(asked[absent_first..].iter().all(|(_, present)| *present));
    asked.sort_unstable();
    let told: Vec<(usize, bool)> = (0..stems.len()).map(|i| (i, values[i].is_some())).collect();
    assert_eq!(asked, told);
    assert!(told.iter().any(|(_, p)| !p) && told.iter().any(|(_, p)| *p));
    // Each hash once, with what one-by-one reads give.
    let mut hashes: Vec<[u8; 32]> = codes.iter().map(|(h, _)| *h).collect();
    hashes.sort_unstable();
    assert_eq!(hashes, vec![[0; 32], [1; 32], [2; 32], [3; 32]]);
    for (hash, bytes) in &codes {
        assert_eq!(bytes, &store.get_code(hash, None).unwrap(), "{}", hash[0]);
    }
    assert!(
        codes
            .iter()
            .any(|(h, b)| h[0] == 2 && b.as_ref().unwrap().len() == 70_000)
    );
    assert!(codes.iter().any(|(h, b)| h[0] == 3 && b.is_none()));
    // Nothing named: no code read.
    let (_, none) = store
        .get_stems_then_code(&stems, None, |_, _| None, |_, bytes| bytes)
        .unwrap()
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn the_recent_blocks_blobs_are_loaded_from_memory_and_match_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(23);
    let options = LogOptions {
        recent_blocks: 3,
        ..opts(4)
    };
    let mut store = LogStore::open(dir.path(), &options).unwrap();
    let mut mem = Trie::new(MemoryStore::new(), 4).unwrap();
    let mut root = ZERO_HASH;
    let mut written: Vec<Vec<PathKey>> = Vec::new();
    for block in 1..=20u64 {
        // A fresh trie every block, as the study's cold blocks have: its loads come from the
        // recent blocks when they can.
        let mut trie = Trie::open(store, 4, root).unwrap();
        let w = random_writes(&mut rng, 150);
        trie.update(w.clone()).unwrap();
        mem.update(w).unwrap();
        let keys = commit_listing(&mut trie, block);
        root = trie.root();
        assert_eq!(root, mem.root(), "block {block}");
        written.push(keys);
        store = trie.into_store();
    }
    assert!(store.reads().recent > 0, "no load came from memory");
    // The last block's blobs come from memory; a blob only the block 4 before wrote, from
    // the device.
    let before = store.reads();
    for key in &written[19] {
        assert!(NodeStore::get_node(&store, key).unwrap().is_some());
    }
    let after = store.reads();
    assert_eq!(after.reads, before.reads, "read from the device");
    assert_eq!(after.recent - before.recent, written[19].len() as u64);
    let newer: std::collections::HashSet<PathKey> =
        written[16..].iter().flatten().copied().collect();
    let old = written[15]
        .iter()
        .find(|k| !newer.contains(k) && store.index().nodes.contains_key(k))
        .expect("a blob no later block rewrote");
    NodeStore::get_node(&store, old).unwrap().unwrap();
    assert_eq!(store.reads().reads, after.reads + 1);
    // The device holds what memory held: a fresh open verifies the same root.
    drop(store);
    let store = LogStore::open(dir.path(), &options).unwrap();
    assert_eq!(Trie::open(store, 4, root).unwrap().verify().unwrap(), root);
}

#[test]
fn a_file_that_is_not_a_log_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("log.000001");
    let junk: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    // Long, and as short as a creation cut short but not one (a writer used to cut such a file
    // to nothing and start a log there): refused by readers and writers, left as it was.
    for content in [&junk[..], &junk[..20], b"my notes\n"] {
        std::fs::write(&seg, content).unwrap();
        for read_only in [false, true] {
            let err = LogStore::open(
                dir.path(),
                &LogOptions {
                    read_only,
                    ..opts(5)
                },
            )
            .unwrap_err();
            assert!(err.to_string().contains("not a state log"), "{err}");
        }
        assert_eq!(std::fs::read(&seg).unwrap(), content, "left as it was");
    }
}

/// Segments are numbered from 1: a `log.000000`, alone (empty) or beside a log's segments, is
/// refused as damage by readers and writers (it used to panic every command), and nothing in
/// the directory is changed.
#[test]
fn a_segment_numbered_zero_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("log.000000");
    std::fs::write(&zero, b"").unwrap();
    let open = |read_only| {
        LogStore::open(
            dir.path(),
            &LogOptions {
                read_only,
                ..opts(5)
            },
        )
    };
    for read_only in [false, true] {
        let err = open(read_only).unwrap_err().to_string();
        assert!(
            err.contains("log.000000") && err.contains("numbered from"),
            "{err}"
        );
    }
    assert!(
        !dir.path().join("log.000001").exists(),
        "no log made beside it"
    );
    std::fs::remove_file(&zero).unwrap();
    let mut trie = Trie::new(open(false).unwrap(), 5).unwrap();
    commit(
        &mut trie,
        random_writes(&mut StdRng::seed_from_u64(3), 50),
        1,
    );
    drop(trie);
    let segment = std::fs::read(dir.path().join("log.000001")).unwrap();
    std::fs::write(&zero, b"junk").unwrap();
    for read_only in [false, true] {
        let err = open(read_only).unwrap_err().to_string();
        assert!(err.contains("log.000000"), "{err}");
    }
    assert_eq!(
        std::fs::read(dir.path().join("log.000001")).unwrap(),
        segment
    );
    assert_eq!(std::fs::read(&zero).unwrap(), b"junk");
}

/// A log's creation is the empty state's commit record (`record::creation`), and a creation
/// cut short anywhere, or with bytes a crash left unwritten (zeros), starts the log afresh at
/// block 0, at any group depth.
#[test]
fn a_creation_cut_short_starts_afresh() {
    for g in [1u8, 5, 8] {
        let dir = tempfile::tempdir().unwrap();
        drop(LogStore::open(dir.path(), &opts(g)).unwrap());
        let seg = dir.path().join("log.000001");
        let whole = std::fs::read(&seg).unwrap();
        assert_eq!(whole, crate::record::creation(g), "g {g}");
        for cut in [0, 1, 9, 10, 40, whole.len() - 1] {
            let mut torn = whole[..cut].to_vec();
            if cut > 12 {
                torn[4..12].fill(0);
            }
            std::fs::write(&seg, &torn).unwrap();
            let store = LogStore::open(dir.path(), &opts(g)).unwrap();
            assert_eq!((store.meta().block, store.meta().root), (0, ZERO_HASH));
            drop(store);
            assert_eq!(std::fs::read(&seg).unwrap(), whole, "g {g}, cut {cut}");
        }
    }
}

#[test]
fn a_segment_that_cannot_be_started_does_not_fail_the_committed_block() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 20_000,
        compact_garbage: None,
        ..opts(4)
    };
    let mut rng = StdRng::seed_from_u64(18);
    let mut reference = Trie::new(MemoryStore::new(), 4).unwrap();
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 4).unwrap();
    // Something else sits where the next segment goes.
    std::fs::write(dir.path().join("log.000002"), [0xee; 100]).unwrap();
    for block in 1..=6 {
        let w = random_writes(&mut rng, 100);
        reference.update(w.clone()).unwrap();
        assert_eq!(
            commit(&mut trie, w, block),
            reference.root(),
            "block {block}"
        );
    }
    assert_eq!(
        trie.store().info().segments,
        1,
        "the roll failed, the segment grew"
    );
    assert!(
        std::fs::metadata(dir.path().join("log.000001"))
            .unwrap()
            .len()
            > 20_000
    );
    assert_eq!(trie.store().meta().block, 6);
}

/// The trie prefetch's grouping of records into reads (`spans`): records on the same or the
/// next page of one segment share a read, a page holding none of them is never read, a read
/// stays within `MAX_SPAN`, every record is in exactly one read, and one too long for the
/// index's length field is set apart; each record is cut back out of its read's bytes, and a
/// read that came back short is an error.
#[test]
fn records_on_the_same_or_neighbouring_pages_share_one_read() {
    let key = |i: u8| PathKey::from_bytes(&[i, 8]).unwrap();
    let rec = |i: u8, seg: u32, off: u64, len: usize| (key(i), Loc::new(seg, off, len).unwrap());
    let page = record::PAGE;
    let spans_of = |records: Vec<(PathKey, Loc)>| -> Vec<(usize, u64, u64, Vec<PathKey>)> {
        let (spans, long) = spans(records);
        assert!(long.is_empty());
        spans
            .into_iter()
            .map(|s| {
                let seg = s.records[0].1.seg();
                assert!(
                    s.records
                        .iter()
                        .all(|r| r.1.seg() == seg && r.1.len() == Some(r.2))
                );
                (seg, s.off, s.end, s.records.iter().map(|r| r.0).collect())
            })
            .collect()
    };
    // Given out of order: two records on page 0, one on page 1 (a neighbour), one on page 3
    // (a page between them holds nothing asked for), one in another segment at the same place.
    let got = spans_of(vec![
        rec(3, 1, 3 * page + 10, 100),
        rec(1, 1, 500, 200),
        rec(0, 1, 0, 300),
        rec(2, 1, page + 7, 50),
        rec(4, 2, 500, 200),
    ]);
    assert_eq!(
        got,
        vec![
            (1, 0, page + 57, vec![key(0), key(1), key(2)]),
            (1, 3 * page + 10, 3 * page + 110, vec![key(3)]),
            (2, 500, 700, vec![key(4)]),
        ]
    );
    // A run of neighbouring pages is cut where a read would pass MAX_SPAN.
    let run: Vec<_> = (0..10u8)
        .map(|i| rec(i, 1, u64::from(i) * page, 4000))
        .collect();
    let got = spans_of(run);
    assert!(
        got.iter().all(|(_, off, end, _)| end - off <= MAX_SPAN),
        "{got:?}"
    );
    assert_eq!(got.iter().map(|s| s.3.len()).sum::<usize>(), 10);
    assert_eq!(got.len(), 3, "{got:?}");
    // A record ending inside the span does not shorten it.
    let got = spans_of(vec![rec(0, 1, 0, 3000), rec(1, 1, 100, 50)]);
    assert_eq!(got, vec![(1, 0, 3000, vec![key(0), key(1)])]);
    let (none, long) = spans::<PathKey>(Vec::new());
    assert!(none.is_empty() && long.is_empty());
    // A record too long for the index's length field is returned apart, not spanned.
    let (spanned, long) = spans(vec![rec(0, 1, 0, 300), rec(1, 1, 400, 70_000)]);
    assert_eq!(spanned.len(), 1);
    assert_eq!(long, vec![rec(1, 1, 400, 70_000)]);
    // Each record is cut out of its read's bytes; a read that came back short is an error.
    let (spanned, _) = spans(vec![rec(0, 1, 100, 50), rec(1, 1, 200, 30)]);
    let span = &spanned[0];
    let bytes: Vec<u8> = (0..130u8).collect();
    let (_, loc, len) = span.records[1];
    assert_eq!(span.record(&bytes, loc, len).unwrap(), &bytes[100..130]);
    let err = span.record(&bytes[..120], loc, len).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

/// A record read in one request with its neighbours is still checked on its own: a flipped
/// byte in a stem blob that shares its page with a group on its path fails the prefetch with
/// the checksum error.
#[test]
fn a_flipped_byte_in_a_record_read_with_its_neighbours_is_refused() {
    let (dir, store, _) = committed_without_recent(&mut StdRng::seed_from_u64(12), 2000);
    // A stem whose blob shares its page with a group on its own path: the prefetch of that
    // stem reads both in one span, and the stem blob sits past the span's start.
    let (stem, key, loc) = {
        let index = store.index();
        let nodes: Vec<(PathKey, Loc)> = index.nodes.iter().collect();
        let page = |l: &Loc| l.off() / record::PAGE;
        index
            .stems
            .iter()
            .find_map(|(stem, at)| {
                let on_path = nodes.iter().any(|(k, l)| {
                    l.off() < at.off()
                        && page(l) == page(at)
                        && bintrie_node::Path::from_key(k.as_bytes())
                            .is_ok_and(|p| p.len() >= 4 && p.is_prefix_of(stem))
                });
                let key = nodes.iter().find(|(_, l)| l == at)?.0;
                on_path.then_some((*stem, key, *at))
            })
            .expect("a stem blob beside a group of its path")
    };
    let seg = dir.path().join(segment_name(1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[loc.off() as usize + HEADER + key.as_bytes().len()] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    evict_page_cache(dir.path()).unwrap();
    let err = store
        .warm_trie_paths(&[stem], 4, &AtomicBool::new(false))
        .unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// The state batch reads a stem's record with its neighbours, and still checks each on its
/// own: a flipped byte in a record past the first of a multi-record read fails the batch with
/// the checksum error (never a panic, never the stem reported absent), even when the read's
/// earlier records already named code to read.
#[test]
fn a_flipped_byte_in_a_stem_read_with_its_neighbours_fails_the_state_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(41);
    let options = LogOptions {
        recent_blocks: 0,
        ..opts(5)
    };
    let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 5).unwrap();
    let w = random_writes(&mut rng, 1500);
    trie.update(w.clone()).unwrap();
    let code: Vec<([u8; 32], Vec<u8>)> = (0..8u8).map(|i| ([i; 32], vec![0x5b; 40])).collect();
    trie.commit_with(|s, set| s.write_block(set, 1, &code))
        .unwrap();
    let store = trie.into_store();
    let stems: Vec<Stem> = w.iter().map(|(k, _)| k.stem).collect();
    let locs: Vec<Option<Loc>> = {
        let index = store.index();
        stems.iter().map(|s| index.stems.get(s).copied()).collect()
    };
    // A read of several records: the last one's value flipped.
    let span = stem_spans(&locs)
        .unwrap()
        .into_iter()
        .find(|s| s.records.len() >= 3)
        .expect("1,500 stems of one block share pages");
    let (_, loc, _) = *span.records.last().unwrap();
    let key_len = {
        let index = store.index();
        index
            .nodes
            .iter()
            .find(|(_, l)| *l == loc)
            .unwrap()
            .0
            .as_bytes()
            .len()
    };
    let seg = dir.path().join(segment_name(1));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[loc.off() as usize + HEADER + key_len] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    evict_page_cache(dir.path()).unwrap();
    // Each stem names its own stored code, so the read's first records queue code reads.
    let err = store
        .get_stems_then_code(
            &stems,
            None,
            |i, v| v.map(|_| [(i % 8) as u8; 32]),
            |_, bytes| bytes,
        )
        .unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// A segment cut short under an open log (damage from outside the process): every read that
/// reaches past the new end fails with an error naming the segment, on each read path (the
/// trie prefetch's ring, the state batch's ring, their blocking fallback, a single read),
/// never a panic, a hang or a wrong blob; what lies before the cut still reads.
#[test]
fn a_segment_cut_under_an_open_log_is_an_error_on_every_read_path() {
    for io_uring in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(31);
        let options = LogOptions {
            recent_blocks: 0,
            io_uring,
            ..opts(5)
        };
        let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 5).unwrap();
        let w = random_writes(&mut rng, 2000);
        commit(&mut trie, w.clone(), 1);
        let store = trie.into_store();
        let stems: Vec<Stem> = w.iter().map(|(k, _)| k.stem).collect();
        let before: Vec<Option<StemValues>> = stems
            .iter()
            .map(|s| store.get_stem(s, None).unwrap())
            .collect();
        let seg = dir.path().join(segment_name(1));
        let len = std::fs::metadata(&seg).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let named = |e: LogError| {
            let msg = e.to_string();
            assert!(msg.contains("log.000001"), "io_uring {io_uring}: {msg}");
        };
        named(
            store
                .warm_trie_paths(&stems, 4, &AtomicBool::new(false))
                .unwrap_err(),
        );
        match store.get_stems(&stems, None) {
            // Without io_uring the state batch is the caller's (one read each).
            Ok(None) => assert!(!io_uring),
            Ok(Some(_)) => panic!("io_uring {io_uring}: a batch read past the cut"),
            Err(e) => named(e),
        }
        // Each stem alone: those before the cut read as before, the others fail.
        let (mut ok, mut failed) = (0, 0);
        for (stem, was) in stems.iter().zip(&before) {
            match store.get_stem(stem, None) {
                Ok(v) => {
                    assert_eq!(&v, was);
                    ok += 1;
                }
                Err(e) => {
                    named(e);
                    failed += 1;
                }
            }
        }
        assert!(
            ok > 0 && failed > 0,
            "io_uring {io_uring}: {ok} read, {failed} failed"
        );
    }
}

#[test]
fn the_upper_levels_stay_in_memory_and_follow_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(31);
    let g = 4u8;
    let plain = LogOptions {
        recent_blocks: 0,
        ..opts(g)
    };
    let mut mem = Trie::new(MemoryStore::new(), g).unwrap();
    let mut trie = Trie::new(LogStore::open(dir.path(), &plain).unwrap(), g).unwrap();
    for block in 1..=6u64 {
        let w = random_writes(&mut rng, 500);
        mem.update(w.clone()).unwrap();
        commit(&mut trie, w, block);
    }
    let root = trie.root();
    drop(trie);
    let budget = 40_000u64;
    let options = LogOptions {
        pinned_bytes: budget,
        ..plain
    };
    let mut store = LogStore::open(dir.path(), &options).unwrap();
    let depth = store.pinned_depth().expect("the root's group fits 40 kB");
    assert_eq!(depth % usize::from(g), 0);
    let bytes_to = |store: &LogStore, d: usize| -> u64 {
        let index = store.index();
        index
            .nodes
            .iter()
            .filter(|(k, _)| k.bit_len() <= d)
            .map(|(_, l)| l.len().unwrap() as u64)
            .sum()
    };
    assert!(bytes_to(&store, depth) <= budget);
    assert!(
        bytes_to(&store, depth + usize::from(g)) > budget,
        "a deeper level would have fit"
    );
    let pinned = store
        .index()
        .nodes
        .keys()
        .filter(|k| k.bit_len() <= depth)
        .count() as u64;
    assert_eq!(
        store.reads().reads,
        pinned,
        "the open read each kept blob once"
    );
    // Every blob down to the depth is served from memory and is the one on the device; the
    // levels below are read.
    let served_from_memory = |store: &LogStore| {
        let keys: Vec<PathKey> = store.index().nodes.keys().collect();
        let (mut upper, mut lower) = (0, 0);
        for key in keys {
            let before = store.reads().reads;
            let blob = NodeStore::get_node(store, &key).unwrap().unwrap();
            let read = store.reads().reads - before;
            if key.bit_len() <= depth {
                assert_eq!(read, 0, "{key:?} was read from the device");
                assert_eq!(Some(blob), LogStore::get_node(store, &key).unwrap());
                upper += 1;
            } else {
                assert_eq!(read, 1);
                lower += 1;
            }
        }
        assert!(upper > 1 && lower > 0, "{upper} pinned, {lower} not");
    };
    served_from_memory(&store);
    // Later blocks, each on a fresh trie (a cold block): what they write down to the depth
    // replaces what was kept, so each block's trie verifies against the pinned blobs.
    let mut root = root;
    for block in 7..=12u64 {
        let mut trie = Trie::open(store, g, root).unwrap();
        let w = random_writes(&mut rng, 300);
        mem.update(w.clone()).unwrap();
        root = commit(&mut trie, w, block);
        assert_eq!(root, mem.root(), "block {block}");
        trie.unload().unwrap();
        assert_eq!(trie.verify().unwrap(), root, "block {block}");
        store = trie.into_store();
        served_from_memory(&store);
    }
    // A fresh open reads the same set again.
    drop(store);
    let store = LogStore::open(dir.path(), &options).unwrap();
    assert!(store.pinned_depth().is_some());
    served_from_memory(&store);
    assert_eq!(Trie::open(store, g, root).unwrap().verify().unwrap(), root);
    // A budget that holds everything keeps every path, the deepest stems included.
    let all = LogStore::open(
        dir.path(),
        &LogOptions {
            pinned_bytes: u64::MAX,
            ..plain
        },
    )
    .unwrap();
    assert_eq!(all.pinned_depth(), Some(248));
    let keys: Vec<PathKey> = all.index().nodes.keys().collect();
    let before = all.reads().reads;
    for key in &keys {
        NodeStore::get_node(&all, key).unwrap().unwrap();
    }
    assert_eq!(all.reads().reads, before, "every blob was in memory");
}

#[test]
fn the_kept_levels_stay_in_memory_beside_the_recent_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(37);
    let g = 4u8;
    let keep = 2usize;
    let plain = LogOptions {
        recent_blocks: 0,
        ..opts(g)
    };
    let mut trie = Trie::new(LogStore::open(dir.path(), &plain).unwrap(), g).unwrap();
    for block in 1..=4u64 {
        commit(&mut trie, random_writes(&mut rng, 500), block);
    }
    let mut root = trie.root();
    drop(trie);
    let options = LogOptions {
        recent_blocks: keep,
        pinned_bytes: 40_000,
        ..plain
    };
    let mut store = LogStore::open(dir.path(), &options).unwrap();
    let depth = store.pinned_depth().expect("the root's group fits 40 kB");
    // Each later block on a fresh trie; what each wrote, by block.
    let mut written: Vec<Vec<PathKey>> = Vec::new();
    for block in 5..=10u64 {
        let mut trie = Trie::open(store, g, root).unwrap();
        // Few writes: some kept blobs are rewritten only by the older blocks.
        trie.update(random_writes(&mut rng, 6)).unwrap();
        let keys = commit_listing(&mut trie, block);
        root = trie.root();
        written.push(keys);
        store = trie.into_store();
    }
    // Down to the kept depth every blob is in memory, whichever block wrote it (forgetting a
    // block never drops one); below it, only what the last `keep` blocks wrote.
    let recent: std::collections::HashSet<PathKey> = written[written.len() - keep..]
        .iter()
        .flatten()
        .copied()
        .collect();
    let older_kept = written[..written.len() - keep]
        .iter()
        .flatten()
        .filter(|k| k.bit_len() <= depth && !recent.contains(k))
        .count();
    assert!(older_kept > 0, "no kept blob only an older block wrote");
    let keys: Vec<PathKey> = store.index().nodes.keys().collect();
    let (mut from_memory, mut from_device) = (0, 0);
    for key in &keys {
        let before = store.reads().reads;
        NodeStore::get_node(&store, key).unwrap().unwrap();
        let read = store.reads().reads - before;
        let in_memory = key.bit_len() <= depth || recent.contains(key);
        assert_eq!(read, u64::from(!in_memory), "{key:?}");
        from_memory += u64::from(in_memory);
        from_device += read;
    }
    assert!(from_memory > 0 && from_device > 0);
    assert_eq!(Trie::open(store, g, root).unwrap().verify().unwrap(), root);
}

/// A location keeps segment, offset and length apart up to their largest values, and refuses
/// what does not fit; a segment size the locations cannot address is refused at open.
#[test]
fn locations_hold_the_largest_segment_and_offset_and_sizes_beyond_are_refused() {
    for (seg, off, len) in [
        (1u32, 0u64, 10usize),
        (Loc::MAX_SEG, Loc::MAX_OFF, u16::MAX as usize),
        (Loc::MAX_SEG, 1, 1),
        (4096, 1 << 31, 4096),
    ] {
        let loc = Loc::new(seg, off, len).unwrap();
        assert_eq!(
            (loc.seg(), loc.off(), loc.len()),
            (seg as usize, off, Some(len))
        );
    }
    assert_eq!(Loc::new(3, 8, 70_000).unwrap().len(), None);
    assert!(Loc::new(Loc::MAX_SEG + 1, 0, 1).is_none());
    assert!(Loc::new(1, Loc::MAX_OFF + 1, 1).is_none());
    // A segment may pass its size by a block: the largest size leaves room for that.
    const { assert!(2 * MAX_SEGMENT_BYTES <= Loc::MAX_OFF + 1) };
    for bad in [0, MAX_SEGMENT_BYTES + 1] {
        let dir = tempfile::tempdir().unwrap();
        let options = LogOptions {
            segment_bytes: bad,
            ..opts(5)
        };
        let err = LogStore::open(dir.path(), &options).unwrap_err();
        assert!(matches!(err, LogError::Invalid(_)), "{bad}: {err}");
    }
}

/// What opening a new log leaves is removed after a failed import (the index-sizes file had
/// kept it: a hostile-user pass found the directory left on a full disk), and nothing is left
/// beside it; a log with a block, a log a writer has open (its first block may be on the
/// way: the directory was removed under it), or anything else in the directory, stays.
#[test]
fn remove_if_empty_removes_only_an_empty_log_no_writer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh");
    drop(LogStore::open(&fresh, &LogOptions::default()).unwrap());
    assert!(fresh.join(INDEX_SIZES_FILE).exists());
    assert!(
        remove_if_empty(&fresh) && !fresh.exists(),
        "the empty log was left"
    );

    let other = dir.path().join("other");
    drop(LogStore::open(&other, &LogOptions::default()).unwrap());
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    assert!(!remove_if_empty(&other) && other.join("notes.txt").exists());

    let used = dir.path().join("used");
    let store = LogStore::open(&used, &LogOptions::default()).unwrap();
    assert!(!remove_if_empty(&used), "removed under its writer");
    let mut trie: Trie<LogStore> = Trie::new(store, 5).unwrap();
    trie.insert(TreeKey::from_bytes([7; 32]), [1; 32]).unwrap();
    let root = trie.commit().unwrap().root;
    drop(trie);
    assert!(!remove_if_empty(&used), "a log with nodes was removed");
    assert_eq!(LogStore::open_read_only(&used).unwrap().meta().root, root);

    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// `remove_made` (a stopped command's cleanup) removes a log with blocks that no writer holds,
/// and keeps one a writer holds or one beside other files.
#[test]
fn remove_made_removes_a_log_with_blocks_only_when_no_writer_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let used = dir.path().join("used");
    let store = LogStore::open(&used, &LogOptions::default()).unwrap();
    let mut trie: Trie<LogStore> = Trie::new(store, 5).unwrap();
    trie.insert(TreeKey::from_bytes([7; 32]), [1; 32]).unwrap();
    trie.commit().unwrap();
    assert!(!remove_made(&used), "removed under its writer");
    drop(trie);
    std::fs::write(used.join("notes.txt"), b"mine").unwrap();
    assert!(!remove_made(&used) && used.join("notes.txt").exists());
    std::fs::remove_file(used.join("notes.txt")).unwrap();
    assert!(
        remove_made(&used) && !used.exists(),
        "the stopped run's log was left"
    );
}

/// A writer never makes a log beside an MDBX database (the MDBX store refuses the other way
/// round): refused, nothing made there; with segments already beside it, the log opens as
/// before.
#[test]
fn a_log_is_never_made_beside_an_mdbx_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mdbx.dat"), b"").unwrap();
    let err = LogStore::open(dir.path(), &LogOptions::default()).unwrap_err();
    assert!(matches!(err, LogError::OtherLayout(_)), "{err}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["mdbx.dat"], "something was made beside it");
    std::fs::write(dir.path().join("log.000001"), b"").unwrap();
    drop(LogStore::open(dir.path(), &LogOptions::default()).unwrap());
}

/// `found_commit`: a read-only open of a log whose creation was cut short (an empty segment)
/// found none and reads as the empty state; a writer's open writes the empty state's commit,
/// after which a reader finds it.
#[test]
fn a_reader_tells_a_log_with_no_commit_from_an_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("log.000001"), b"").unwrap();
    let reader = LogStore::open_read_only(dir.path()).unwrap();
    assert!(!reader.found_commit());
    assert_eq!((reader.meta().block, reader.meta().root), (0, ZERO_HASH));
    drop(reader);
    let writer = LogStore::open(dir.path(), &opts(5)).unwrap();
    assert!(writer.found_commit());
    drop(writer);
    assert!(LogStore::open_read_only(dir.path()).unwrap().found_commit());
}
