//! An appending state layout for the EIP-7864 binary trie (issue 13's "layout that appends").
//!
//! The MDBX store keeps every blob in a copy-on-write B-tree keyed by path or stem: a block's
//! few thousand random keys rewrite a few thousand random pages (about 14x the blob bytes, see
//! docs/study/writes.md). Here every block's blobs are **appended** to a log of segment files
//! (`log.000001`, ...) and found through an **in-memory index** (path key → record, stem → its
//! stem blob's record, code hash → record), which the open rebuilds by scanning the log:
//!
//! - a block's commit is one sequential write ending in a commit record, and one `fdatasync`
//!   with [`Durability::Durable`];
//! - a read is one positioned read of one record (records of at most a page never straddle a
//!   4 KB page; the files are opened without read-ahead), with no B-tree pages above it; an
//!   absent stem costs no read at all;
//! - the trie prefetch finds every blob on a stem's path in the index at once, so a walk's reads
//!   are issued together instead of one after the other.
//!
//! What it costs: the index lives in memory (about 104 bytes per stem, see [`LogInfo`]), the open
//! scans the whole log, and superseded records stay in the log (garbage, reported by
//! [`LogInfo::garbage_bytes`]) until [`LogStore::compact`] drops the segments that are mostly
//! garbage, copying what is live in them to the log's end first.
//!
//! Crash safety: records carry a CRC-32; a commit record closes each block with the count and
//! CRC of the block's own bytes. The open applies a block only when its commit record checks
//! out; a torn last block (kill -9 or a power loss mid-write) is cut off, while damage followed
//! by a later valid commit (a flipped byte in a committed block) is refused as corruption, never
//! skipped. Every read re-checks its record's CRC and key.

// One module reads through io_uring (`uring`), which needs `unsafe` for its buffers.
#![deny(unsafe_code)]

mod background;
mod compact;
mod readahead;
mod record;
mod scan;
mod sizes;

pub use compact::Compaction;
mod uring;

use bintrie_keys::Stem;
use bintrie_node::{Hash32, MAX_DEPTH, Path, PathKey, StemValues, ZERO_HASH};
use bintrie_trie::{BlobSink, CommitSet, NodeStore};
use record::{CommitRecord, HEADER, Kind, Parsed};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The hash map of every in-memory table here: foldhash, keyed by hashes and paths.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Map<K> = FastMap<K, Loc>;
/// Node blobs with their path keys.
type Blobs = Vec<(PathKey, Vec<u8>)>;
type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Stems the trie prefetch locates at a time between reads submitted
/// ([`LogStore::warm_paths_ring`]).
const LOCATE_STEMS: usize = 16;

/// The longest read the trie prefetch and the state batch make to fetch several records at
/// once ([`spans`]).
const MAX_SPAN: u64 = 4 * record::PAGE;

/// Records to fetch with one read: `[off, end)` of the segment of every record listed, each
/// with its key (a path, or the caller's index of a stem) and its length.
#[derive(Debug)]
struct Span<K = PathKey> {
    off: u64,
    end: u64,
    records: Vec<(K, Loc, usize)>,
}

impl<K> Span<K> {
    /// The bytes of the record at `loc` (`len` long) out of `buf`, what this span's read
    /// returned: a completed read returns them all, and one that still falls short is an
    /// `UnexpectedEof` error, not a panic.
    fn record<'b>(&self, buf: &'b [u8], loc: Loc, len: usize) -> std::io::Result<&'b [u8]> {
        let at = loc.off().checked_sub(self.off).map(|at| at as usize);
        at.and_then(|at| buf.get(at..at.checked_add(len)?))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "a read shorter than its records",
                )
            })
    }
}

/// Groups `records` into reads: sorted by place in the log, a record joins the read before it
/// when it is in the same segment, starts no later than the page after the read's last page
/// (so the read covers no page that holds none of its records), and the read stays within
/// [`MAX_SPAN`] bytes. Two records on one page, or a group and a stem written beside it, are
/// then one request instead of two: the same pages from the device, but one submission and
/// one completion for the ring's thread instead of two. Every record ends in exactly one
/// span, in log order, except those too long for the index's length field, returned apart
/// (to be read one by one).
fn spans<K>(mut records: Vec<(K, Loc)>) -> (Vec<Span<K>>, Vec<(K, Loc)>) {
    records.sort_unstable_by_key(|(_, loc)| (loc.seg(), loc.off()));
    let (mut out, mut long): (Vec<Span<K>>, _) = (Vec::new(), Vec::new());
    for (key, loc) in records {
        let Some(len) = loc.len() else {
            long.push((key, loc));
            continue;
        };
        let (off, end) = (loc.off(), loc.off() + len as u64);
        if let Some(last) = out.last_mut()
            && last.records[0].1.seg() == loc.seg()
            && off / record::PAGE <= (last.end - 1) / record::PAGE + 1
            && end.max(last.end) - last.off <= MAX_SPAN
        {
            last.end = last.end.max(end);
            last.records.push((key, loc, len));
            continue;
        }
        out.push(Span {
            off,
            end,
            records: vec![(key, loc, len)],
        });
    }
    (out, long)
}

/// The state batch's reads ([`LogStore::get_stems_then_code`]): the [`spans`] of the stems
/// present (`locs[i]`, keyed by `i`), in the caller's order (the span holding its first stem
/// first, so execution's first stems are submitted first), not the log's. `None` when a
/// record is too long for the index's length field (the caller reads them one by one).
fn stem_spans(locs: &[Option<Loc>]) -> Option<Vec<Span<usize>>> {
    let present: Vec<(usize, Loc)> = locs
        .iter()
        .enumerate()
        .filter_map(|(i, loc)| Some((i, (*loc)?)))
        .collect();
    let (mut out, long) = spans(present);
    if !long.is_empty() {
        return None;
    }
    // A span's records are in log order, so its smallest index may be at any of them.
    out.sort_unstable_by_key(|span| span.records.iter().map(|r| r.0).min());
    Some(out)
}

/// What the trie prefetch's ring spent, for its debug line.
#[derive(Default)]
struct RingCounts {
    /// Locating the records in the index.
    locate: std::time::Duration,
    /// Requests made to the device (a request can fetch several records: [`spans`]).
    requests: u64,
}

/// Group depth of a new log when none is asked for.
pub const DEFAULT_GROUP_DEPTH: u8 = 5;
/// Default size at which the writer starts a new segment file.
pub const DEFAULT_SEGMENT_BYTES: u64 = 1 << 30;
/// The largest [`LogOptions::segment_bytes`]: a segment holds at most 4 GiB (a block may take
/// it past its size before the writer starts the next one).
pub const MAX_SEGMENT_BYTES: u64 = 2 << 30;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A file operation failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        // Not `source`: the message already says it (an error chain would repeat it).
        error: std::io::Error,
    },
    /// The log is damaged: what and where.
    #[error("corrupt log: {0}")]
    Corrupt(String),
    /// Another process holds the directory's writer lock.
    #[error("{}: another process is writing this state (its LOCK is held)", .0.display())]
    Locked(PathBuf),
    /// There is no log in the directory and `create` was not set.
    #[error("{}: no state log here (no log.NNNNNN segment files)", .0.display())]
    NotFound(PathBuf),
    /// A writer's open without [`LogOptions::create`] found no committed block: the log's
    /// creation was cut short. Finishing it would commit an empty state at a group depth
    /// nobody chose; an open with `create` does that. The open has cut a torn tail first, as
    /// every writer's does (those bytes were never a commit).
    #[error(
        "{}: the state log holds no committed block (its creation was cut short)",
        .0.display()
    )]
    Uncommitted(PathBuf),
    /// A segment a compaction dropped is still on disk, and this writer's open, which removes
    /// such segments before it returns, could not: no writer opens until it can be removed
    /// (readers skip it).
    #[error(
        "{}: a compaction dropped this segment, and a writer removes it before it opens, but \
         removing it failed: {error}",
        path.display()
    )]
    DroppedSegment {
        /// The segment.
        path: PathBuf,
        /// Why it could not be removed.
        error: std::io::Error,
    },
    /// A write on a read-only handle.
    #[error("the state log is open read-only")]
    ReadOnly,
    /// A bulk load was still running when the log was last written: the state is incomplete.
    #[error("the state log was being bulk-loaded and never finished: delete it and load again")]
    Building,
    /// The log was written at another group depth.
    #[error("the state log has group depth {stored}, {asked} was asked for")]
    GroupDepth {
        /// Stored.
        stored: u8,
        /// Asked.
        asked: u8,
    },
    /// The state moved since this handle (or snapshot) last saw it: another handle committed.
    #[error(
        "the state is at block {stored_block} (root {stored_root}), this handle expected block \
         {expected_block}: another handle committed"
    )]
    Conflict {
        /// What the log holds now.
        stored_block: u64,
        /// Its root, hex.
        stored_root: String,
        /// What the handle expected.
        expected_block: u64,
    },
    /// A block number below the last committed one.
    #[error("block {block} is below the last committed block {last}")]
    BlockOrder {
        /// Asked.
        block: u64,
        /// Last committed.
        last: u64,
    },
    /// A commit's blobs were written at another group depth than the log's.
    #[error("a commit at group depth {commit} into a log of group depth {log}")]
    CommitDepth {
        /// The commit's.
        commit: u8,
        /// The log's.
        log: u8,
    },
    /// A writer's open would make a log in a directory that holds an MDBX database
    /// (`mdbx.dat`): a state of the other layout. Nothing was made.
    #[error(
        "{}: holds an MDBX database (mdbx.dat): a log is not made beside it, and nothing was \
         written",
        .0.display()
    )]
    OtherLayout(PathBuf),
    /// A bulk load into a log that already holds a state.
    #[error("a bulk load needs an empty state log")]
    NotEmpty,
    /// An earlier write or sync failed, leaving the log's tail unknown: reopen to recover.
    #[error("an earlier write to the state log failed; reopen it to recover")]
    Poisoned,
    /// A value too large for a record.
    #[error("a {0}-byte value does not fit a log record")]
    TooLarge(usize),
    /// An argument outside what the operation accepts: what and why.
    #[error("{0}")]
    Invalid(String),
}

fn io_err(path: &FsPath) -> impl FnOnce(std::io::Error) -> LogError + '_ {
    move |error| LogError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * b.len());
    s.push_str("0x");
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// [`LogError::Conflict`]: the log is at `stored`, a handle expected block `expected_block`.
fn conflict(stored: Meta, expected_block: u64) -> LogError {
    LogError::Conflict {
        stored_block: stored.block,
        stored_root: hex(&stored.root),
        expected_block,
    }
}

/// When a committed block reaches the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` after every block: a power loss keeps every committed block.
    #[default]
    Durable,
    /// No sync per block (only when a segment fills, at [`LogStore::sync`], and at a writer's
    /// open and close): a power loss rolls back to some earlier block boundary, never to a
    /// torn state. A process crash loses nothing committed in either mode (the OS holds the
    /// written bytes).
    Relaxed,
}

/// How to open a log.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// Create the directory and an empty log when missing. Without it a writer also refuses a
    /// log that holds no committed block (one whose creation was cut short:
    /// [`LogError::Uncommitted`]) instead of finishing its creation.
    pub create: bool,
    /// Open without writing (no lock; a torn tail is ignored, not cut).
    pub read_only: bool,
    /// The group depth of a new log; for an existing one, checked when set.
    pub group_depth: Option<u8>,
    /// When blocks reach the device.
    pub durability: Durability,
    /// A new segment is started after a block that takes the current one past this size
    /// (1 to [`MAX_SEGMENT_BYTES`], checked at open).
    pub segment_bytes: u64,
    /// Read prefetch batches from one io_uring with many reads in flight (falling back to
    /// blocking threads where io_uring is unavailable); `false`: always blocking threads.
    pub io_uring: bool,
    /// The node blobs written by the last this many blocks stay in memory, and the tree's
    /// loads and prefetch take them from there instead of the device: a node keeps what it
    /// has just written (the MDBX layout's write buffer does the same). The upper groups,
    /// rewritten by almost every block, are then never read back. Memory: about this many
    /// blocks' bytes (1.6 MB each for a 641-slot block at 16M stems). 0: none.
    pub recent_blocks: usize,
    /// Memory for the tree's upper levels, in bytes: at open, the deepest group level whose
    /// blobs fit this budget together with every blob above it is chosen, and all those blobs
    /// are read into memory (one batch); from then on every blob written at that depth or
    /// above stays in memory beside the recent blocks' blobs, and the tree's loads and
    /// prefetch take them from there. A block then reads from the device only the levels
    /// below (at 16M stems and group depth 5, 64 MiB holds the groups down to depth 15,
    /// about 37 MB, one of the two device reads a newly written stem needs). A commit that
    /// fails drops the set (the next open reads it again). 0: none.
    pub pinned_bytes: u64,
    /// The largest share of the log's bytes that may be garbage: once a block leaves more,
    /// the sealed segment with the most garbage (at least this share of it) is compacted a
    /// slice per block ([`LogOptions::compact_slice_bytes`] of it read back after each
    /// block's write, on a thread of its own or inside the write:
    /// [`LogOptions::compact_background`]), then the next, until the log is under the share
    /// again. A log more than a tenth over the share has its segment finished in one step
    /// (the step of one block), so the log holds
    /// at most about `1 / (1 - share - 0.1)` times its live bytes (about `1 / (1 - share)`
    /// while the slices keep up), plus the segment being written, whose garbage waits until
    /// it is sealed. A
    /// failed step does not fail the committed block (it is logged). `None`: only
    /// [`LogStore::compact`] and [`LogStore::compact_to`] compact. Checked at open (0..=1).
    pub compact_garbage: Option<f64>,
    /// Whether the automatic compaction ([`LogOptions::compact_garbage`]) runs on a thread
    /// of its own (one per writer handle) instead of inside each block's write: a block's
    /// write asks for its step and returns, and the thread runs it under the writer's lock,
    /// so a block waits only for a step already under way when it commits (a node, with
    /// seconds between blocks, never does). The steps keep the blocks' pace (one per block),
    /// so the log's bound is the same. The thread is joined when the last handle drops;
    /// [`LogStore::wait_for_compaction`] waits for the steps asked so far.
    pub compact_background: bool,
    /// Bytes of a segment the automatic compaction reads back per block (see
    /// [`LogOptions::compact_garbage`]; about 5 ms per MB at 16M stems here). At least 1.
    pub compact_slice_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            create: true,
            read_only: false,
            group_depth: None,
            durability: Durability::Durable,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            io_uring: true,
            recent_blocks: DEFAULT_RECENT_BLOCKS,
            pinned_bytes: 0,
            compact_garbage: Some(DEFAULT_COMPACT_GARBAGE),
            compact_background: true,
            compact_slice_bytes: DEFAULT_COMPACT_SLICE_BYTES,
        }
    }
}

/// [`LogOptions::compact_garbage`] by default: a sealed segment is compacted once half of it
/// is superseded.
pub const DEFAULT_COMPACT_GARBAGE: f64 = 0.5;

/// [`LogOptions::compact_slice_bytes`] by default: twice what an approve block at 16M stems
/// asks of the compaction (about 2 MB dropped per block), about 20 ms of work in a block.
pub const DEFAULT_COMPACT_SLICE_BYTES: u64 = 4 << 20;

/// [`LogOptions::recent_blocks`] by default: as many blocks as the study's MDBX write buffer.
pub const DEFAULT_RECENT_BLOCKS: usize = 8;

/// The last committed block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The tree's root.
    pub root: Hash32,
    /// The block number.
    pub block: u64,
    /// The group depth of the stored groups.
    pub group_depth: u8,
}

/// Where a record is: segment (16 bits), offset (32 bits), length (16 bits, 0 = longer: read
/// the header first). Held in memory only (the index is rebuilt at every open), so the split
/// can change: segment numbers grow for good (a compaction's copies go to new segments and a
/// number is never reused), and 65,535 of [`MAX_SEGMENT_BYTES`] outlast any run here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc(u64);

impl Loc {
    const MAX_SEG: u32 = (1 << 16) - 1;
    const MAX_OFF: u64 = (1 << 32) - 1;

    fn new(seg: u32, off: u64, len: usize) -> Option<Loc> {
        if seg > Self::MAX_SEG || off > Self::MAX_OFF {
            return None;
        }
        let len = if len <= u16::MAX as usize {
            len as u64
        } else {
            0
        };
        Some(Loc((u64::from(seg) << 48) | (off << 16) | len))
    }
    fn seg(self) -> usize {
        (self.0 >> 48) as usize
    }
    fn off(self) -> u64 {
        (self.0 >> 16) & Self::MAX_OFF
    }
    /// The record's length, when it fits the 16 bits.
    fn len(self) -> Option<usize> {
        match self.0 & 0xffff {
            0 => None,
            n => Some(n as usize),
        }
    }
}

/// The file beside a log's segments in which a writer's open and close and a finished bulk
/// load leave the index's table sizes, so the next open can size its tables before its scan,
/// and the block the log then held on the device. The sizes are a hint, ignored when missing
/// or wrong; the block is a check: an open whose log ends at an earlier block is refused
/// ([`LogError::Corrupt`]). A copy of a log may take the file along with the segments (it
/// names their block) or leave it; a file from another log must not be put beside them.
pub const INDEX_SIZES_FILE: &str = sizes::SIZES_FILE;

/// Paths of at most this many bits go to [`NodeMap`]'s small table: at most 2^17 of them at
/// any group depth (about 34,000 at GD-5), a few MB.
const UPPER_BITS: usize = 16;

/// The index's table of node paths, in three: the paths of at most [`UPPER_BITS`] bits (the
/// top of the tree, which nearly every block rewrites and every trie prefetch looks up), the
/// other keys of at most [`PathKey::WORD_BYTES`] bytes (every path of at most 48 bits: all but a
/// handful at any state this machine holds), and the longer keys. In one table of tens of
/// millions of entries, every access to a top path missed the CPU's caches like any other; in
/// a table of their own they stay cached. The first two tables key a path by one word
/// ([`PathKey::to_word`]) instead of its 34-byte [`PathKey`]: 17 bytes a bucket instead of 49, a
/// third of the memory, and a hash of one word.
#[derive(Default)]
struct NodeMap {
    upper: Map<u64>,
    lower: Map<u64>,
    long: Map<PathKey>,
}

/// The key of a word of [`NodeMap`]'s word tables (one [`PathKey::to_word`] gave).
fn key_of_word(word: u64) -> PathKey {
    PathKey::from_word(word).expect("a word to_word gave")
}

impl NodeMap {
    /// The word table of a short key of `bits` bits.
    fn words(&self, bits: usize) -> &Map<u64> {
        if bits <= UPPER_BITS {
            &self.upper
        } else {
            &self.lower
        }
    }

    fn words_mut(&mut self, bits: usize) -> &mut Map<u64> {
        if bits <= UPPER_BITS {
            &mut self.upper
        } else {
            &mut self.lower
        }
    }

    fn get(&self, key: &PathKey) -> Option<&Loc> {
        match key.to_word() {
            Some(word) => self.words(key.bit_len()).get(&word),
            None => self.long.get(key),
        }
    }

    fn insert(&mut self, key: PathKey, loc: Loc) -> Option<Loc> {
        match key.to_word() {
            Some(word) => self.words_mut(key.bit_len()).insert(word, loc),
            None => self.long.insert(key, loc),
        }
    }

    fn remove(&mut self, key: &PathKey) -> Option<Loc> {
        match key.to_word() {
            Some(word) => self.words_mut(key.bit_len()).remove(&word),
            None => self.long.remove(key),
        }
    }

    fn len(&self) -> usize {
        self.upper.len() + self.lower.len() + self.long.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the three tables' buckets, at `entry(key bytes, capacity)` a table.
    fn bytes(&self, entry: impl Fn(usize, usize) -> u64) -> u64 {
        entry(8, self.upper.capacity())
            + entry(8, self.lower.capacity())
            + entry(std::mem::size_of::<PathKey>(), self.long.capacity())
    }

    /// Every entry, its key rebuilt.
    fn iter(&self) -> impl Iterator<Item = (PathKey, Loc)> + '_ {
        let words = |(&word, &loc): (&u64, &Loc)| (key_of_word(word), loc);
        self.upper
            .iter()
            .map(words)
            .chain(self.lower.iter().map(words))
            .chain(self.long.iter().map(|(&key, &loc)| (key, loc)))
    }

    fn values(&self) -> impl Iterator<Item = &Loc> {
        self.upper
            .values()
            .chain(self.lower.values())
            .chain(self.long.values())
    }

    #[cfg(test)]
    fn keys(&self) -> impl Iterator<Item = PathKey> + '_ {
        self.iter().map(|(key, _)| key)
    }

    #[cfg(test)]
    fn contains_key(&self, key: &PathKey) -> bool {
        self.get(key).is_some()
    }

    /// Room for `room(n)` more entries in each table of `n` entries.
    fn try_reserve(
        &mut self,
        room: impl Fn(usize) -> usize,
    ) -> Result<(), std::collections::TryReserveError> {
        self.upper.try_reserve(room(self.upper.len()))?;
        self.lower.try_reserve(room(self.lower.len()))?;
        self.long.try_reserve(room(self.long.len()))
    }
}

/// The in-memory index: every live record of the last committed block.
#[derive(Default)]
struct Index {
    nodes: NodeMap,
    stems: Map<Stem>,
    code: Map<[u8; 32]>,
    meta: Option<Meta>,
    /// Bytes of all segments up to the last commit.
    log_bytes: u64,
    /// Bytes of the records the index points at (nodes and code).
    live_bytes: u64,
    /// [`Index::live_bytes`] by segment number (the garbage a compaction of each would drop).
    seg_live: Vec<u64>,
    /// Live records (nodes and code) by segment number: exact, so that a compaction knows how
    /// many it must find in a segment before it drops it.
    seg_records: Vec<u64>,
    /// Segments a compaction removed, as the log's drop records name them: the only segments
    /// that may be missing from the directory.
    dropped: std::collections::BTreeSet<u32>,
}

/// A change a block makes to the index, applied only once its commit record is in.
#[derive(Debug)]
enum Change {
    Node(PathKey, Loc, usize, Option<Stem>),
    Remove(PathKey),
    Code([u8; 32], Loc, usize),
}

/// What [`Index::apply_undoable`] replaced: enough to put the index back as it was.
#[derive(Default)]
struct Undo {
    /// Each node key changed, with the location it had (`None`: absent), in change order.
    nodes: Vec<(PathKey, Option<Loc>)>,
    /// Each stem changed, with the location it had, in change order.
    stems: Vec<(Stem, Option<Loc>)>,
    /// Each code hash changed, with the location it had, in change order.
    code: Vec<([u8; 32], Option<Loc>)>,
    live_bytes: u64,
    seg_live: Vec<u64>,
    seg_records: Vec<u64>,
}

/// Room [`Index::reserve_room`] makes in each table beyond an eighth of its entries.
const INDEX_ROOM: usize = 1 << 10;

impl Index {
    /// Makes room in each table for an eighth more entries than it holds (plus
    /// [`INDEX_ROOM`]), at open: a hash table that fills up grows by moving every entry into a
    /// table twice its size (or rehashes in place once removals have used its room up), inside
    /// the commit of the block that filled it: 0.9-1.5 s for a table of 14.7M entries in
    /// `examples/index_growth.rs` (system allocator), 1.4 ms at worst with the room reserved.
    /// After this the blocks can add an eighth of the index (about 1,600 approve blocks at 16M
    /// stems) before a table grows inside one of them; the open pays instead, and only when
    /// the table was that full. Where the memory is not there, the open goes on without the
    /// room (a warning says so): a table then grows when it fills, as before.
    fn reserve_room(&mut self) {
        let room = |n: usize| n / 8 + INDEX_ROOM;
        let reserved = [
            self.nodes.try_reserve(room),
            self.stems.try_reserve(room(self.stems.len())),
            self.code.try_reserve(room(self.code.len())),
        ];
        if let Some(Err(e)) = reserved.into_iter().find(Result::is_err) {
            tracing::warn!(error = %e, "no memory for the index's room to grow; a table will grow inside the commit that fills it");
        }
    }

    /// The share of the log's bytes that is superseded (0 for an empty log).
    fn garbage_share(&self) -> f64 {
        self.log_bytes.saturating_sub(self.live_bytes) as f64 / self.log_bytes.max(1) as f64
    }

    fn apply(&mut self, changes: Vec<Change>) {
        self.apply_inner(changes, None);
    }

    /// [`Index::apply`], also returning what it replaced, for [`Index::undo`].
    fn apply_undoable(&mut self, changes: Vec<Change>) -> Undo {
        let mut undo = Undo {
            nodes: Vec::with_capacity(changes.len()),
            live_bytes: self.live_bytes,
            seg_live: self.seg_live.clone(),
            seg_records: self.seg_records.clone(),
            ..Undo::default()
        };
        self.apply_inner(changes, Some(&mut undo));
        undo
    }

    /// Puts the index back as it was before the [`Index::apply_undoable`] that made `undo`
    /// (changes are undone last first, so a key changed twice gets its first value back).
    fn undo(&mut self, undo: Undo) {
        for (key, old) in undo.nodes.into_iter().rev() {
            match old {
                Some(loc) => self.nodes.insert(key, loc),
                None => self.nodes.remove(&key),
            };
        }
        for (stem, old) in undo.stems.into_iter().rev() {
            match old {
                Some(loc) => self.stems.insert(stem, loc),
                None => self.stems.remove(&stem),
            };
        }
        for (hash, old) in undo.code.into_iter().rev() {
            match old {
                Some(loc) => self.code.insert(hash, loc),
                None => self.code.remove(&hash),
            };
        }
        self.live_bytes = undo.live_bytes;
        self.seg_live = undo.seg_live;
        self.seg_records = undo.seg_records;
    }

    /// Applies `changes`: the path and code tables on this thread and, for a batch of at
    /// least [`PARALLEL_APPLY`] changes, the stem table on another (the tables are apart, and
    /// each misses the CPU's caches on nearly every access, so two cores halve the wait).
    fn apply_inner(&mut self, changes: Vec<Change>, undo: Option<&mut Undo>) {
        let Index {
            nodes,
            stems,
            code,
            live_bytes,
            seg_live,
            seg_records,
            ..
        } = self;
        let (undo_nodes, undo_stems, undo_code) = match undo {
            Some(u) => (Some(&mut u.nodes), Some(&mut u.stems), Some(&mut u.code)),
            None => (None, None, None),
        };
        let changes = &changes;
        let live = Live {
            total: live_bytes,
            by_segment: seg_live,
            records: seg_records,
        };
        let paths = move || apply_paths(nodes, code, live, changes, undo_nodes, undo_code);
        let stem_entries = move || apply_stems(stems, changes, undo_stems);
        if changes.len() >= PARALLEL_APPLY {
            std::thread::scope(|s| {
                let other = s.spawn(stem_entries);
                paths();
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            });
        } else {
            paths();
            stem_entries();
        }
    }
}

/// Batches of at least this many index changes update the stem table on a thread of its own
/// ([`Index::apply_inner`]); an approve block makes about 4,900.
const PARALLEL_APPLY: usize = 1024;

/// The live bytes [`apply_paths`] keeps: in all and by segment.
struct Live<'a> {
    total: &'a mut u64,
    by_segment: &'a mut Vec<u64>,
    records: &'a mut Vec<u64>,
}

impl Live<'_> {
    /// A record at `loc`, `len` bytes, is now live.
    fn add(&mut self, loc: Loc, len: usize) {
        *self.total += len as u64;
        if self.by_segment.len() <= loc.seg() {
            self.by_segment.resize(loc.seg() + 1, 0);
            self.records.resize(loc.seg() + 1, 0);
        }
        self.by_segment[loc.seg()] += len as u64;
        self.records[loc.seg()] += 1;
    }

    /// The record at `loc` is superseded (its length from the index: a record longer than
    /// the length field counts as [`u16::MAX`] bytes, so these sums are estimates).
    fn free(&mut self, loc: Loc) {
        let len = loc.len().unwrap_or(u16::MAX as usize) as u64;
        *self.total = self.total.saturating_sub(len);
        if let Some(b) = self.by_segment.get_mut(loc.seg()) {
            *b = b.saturating_sub(len);
        }
        if let Some(r) = self.records.get_mut(loc.seg()) {
            *r = r.saturating_sub(1);
        }
    }
}

/// The path and code tables' part of [`Index::apply_inner`], with the live bytes.
fn apply_paths(
    nodes: &mut NodeMap,
    code: &mut Map<[u8; 32]>,
    mut live: Live<'_>,
    changes: &[Change],
    mut undo_nodes: Option<&mut Vec<(PathKey, Option<Loc>)>>,
    mut undo_code: Option<&mut Vec<([u8; 32], Option<Loc>)>>,
) {
    for c in changes {
        match *c {
            Change::Node(key, loc, len, _) => {
                let old = nodes.insert(key, loc);
                if let Some(old) = old {
                    live.free(old);
                }
                live.add(loc, len);
                if let Some(u) = undo_nodes.as_deref_mut() {
                    u.push((key, old));
                }
            }
            Change::Remove(key) => {
                let old = nodes.remove(&key);
                if let Some(old) = old {
                    live.free(old);
                }
                if let Some(u) = undo_nodes.as_deref_mut() {
                    u.push((key, old));
                }
            }
            Change::Code(hash, loc, len) => {
                // The same code again (a compaction's copy): the new record replaces the old.
                let old = code.insert(hash, loc);
                if let Some(old) = old {
                    live.free(old);
                }
                live.add(loc, len);
                if let Some(u) = undo_code.as_deref_mut() {
                    u.push((hash, old));
                }
            }
        }
    }
}

/// The stem table's part of [`Index::apply_inner`]: each stem blob written points its stem at
/// the new record.
fn apply_stems(
    stems: &mut Map<Stem>,
    changes: &[Change],
    mut undo: Option<&mut Vec<(Stem, Option<Loc>)>>,
) {
    for c in changes {
        if let Change::Node(_, loc, _, Some(stem)) = *c {
            let old = stems.insert(stem, loc);
            if let Some(u) = undo.as_deref_mut() {
                u.push((stem, old));
            }
        }
    }
}

/// Blocking readers for [`LogStore::load_pinned`] where io_uring is unavailable.
const PIN_READ_WORKERS: usize = 32;

/// The deepest group level `d` (a multiple of `g`, or the deepest path when every blob fits)
/// such that the blobs at paths of at most `d` bits take at most `budget` bytes together, from
/// the index's record lengths; `None` when not even the root's fits.
fn pin_depth(index: &Index, g: u8, budget: u64) -> Option<usize> {
    let mut by_depth = [0u64; 249];
    for (key, loc) in index.nodes.iter() {
        let len = loc.len().unwrap_or(u16::MAX as usize) as u64;
        if let Some(b) = by_depth.get_mut(key.bit_len()) {
            *b += len;
        }
    }
    let g = usize::from(g.max(1));
    let mut total = 0u64;
    let mut best = None;
    for (d, bytes) in by_depth.iter().enumerate() {
        total += bytes;
        if total > budget {
            break;
        }
        if d % g == 0 || d == by_depth.len() - 1 {
            best = Some(d);
        }
    }
    best
}

/// The stem a node blob holds, when it is a stem blob.
fn stem_of_blob(blob: &[u8]) -> Option<Stem> {
    bintrie_node::split_stem_blob(blob).map(|(stem, _)| stem.try_into().expect("31 bytes"))
}

/// The writer's end of the log.
struct Writer {
    seg: u32,
    file: File,
    pos: u64,
    poisoned: bool,
    /// A sync (or a write beside one) failed at some point: Linux reports a writeback error
    /// once, so a later sync that succeeds does not prove the earlier pages reached the
    /// device, and the close then names no block in the index-sizes file.
    sync_failed: bool,
    /// The last block known to be on the device (synced).
    synced_block: u64,
    /// Compaction stopped until a reopen: a segment a compaction dropped could not be removed
    /// (one that came later could drop a newer segment while it, older, stays; the open
    /// removes it), or a segment's records disagreed with the index (damage the open reports).
    halted: bool,
    /// The automatic compaction under way, a slice per block ([`LogOptions::compact_garbage`]).
    cursor: Option<compact::Cursor>,
    /// The last automatic compaction that was due did not start for lack of free space (said
    /// once, until one starts).
    short_of_room: bool,
}

impl Writer {
    /// `fdatasync` of the segment being written; a failure is remembered in `sync_failed`.
    fn sync(&mut self) -> std::io::Result<()> {
        let synced = self.file.sync_data();
        self.sync_failed |= synced.is_err();
        synced
    }
}

/// Blobs preloaded by [`LogStore::warm_trie_paths`], valid for one root.
#[derive(Default)]
struct WarmSet {
    root: Hash32,
    blobs: FastMap<PathKey, Vec<u8>>,
}

/// The node blobs of the last [`LogOptions::recent_blocks`] blocks, and the kept upper levels
/// ([`LogOptions::pinned_bytes`], sequence number [`PINNED`]), as of the commit that made
/// `root`.
#[derive(Default)]
struct Recent {
    /// The root they are the blobs of; `None` while a commit updates them (nobody may use
    /// them then).
    root: Option<Hash32>,
    /// Each key's latest blob and the block (sequence number) that wrote it.
    blobs: FastMap<PathKey, (u64, SharedBlob)>,
    /// The keys each kept block wrote, oldest first.
    blocks: std::collections::VecDeque<(u64, Vec<PathKey>)>,
    next: u64,
}

/// The sequence number of a blob kept for its depth ([`LogOptions::pinned_bytes`]): no block
/// has it, so forgetting a block never drops it.
const PINNED: u64 = u64::MAX;

impl SharedBlob {
    /// A blob in an allocation of its own (so that keeping it does not keep a block's buffer
    /// alive). Node records are far below 4 GiB.
    fn alone(blob: Vec<u8>) -> SharedBlob {
        let end = u32::try_from(blob.len()).expect("a node blob is below 4 GiB");
        SharedBlob {
            buf: Arc::new(blob),
            start: 0,
            end,
        }
    }
}

/// A blob inside one block's buffer: all the blobs a block wrote are copied into one
/// allocation (one copy and one free per block, instead of one per blob: staging thousands of
/// small allocations, and freeing them from another thread, took longer than the block's
/// write and sync).
#[derive(Clone, Debug)]
struct SharedBlob {
    buf: Arc<Vec<u8>>,
    start: u32,
    end: u32,
}

impl std::ops::Deref for SharedBlob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start as usize..self.end as usize]
    }
}

impl Recent {
    /// Adds a block's blobs and removals and forgets the blocks beyond `keep`, leaving the
    /// set unusable until [`Recent::commit`] names its root (or [`Recent::abandon`] clears
    /// it when the block fails).
    /// A blob at a path of at most `pin` bits is kept for good ([`LogOptions::pinned_bytes`]):
    /// it goes in alone, as [`PINNED`], at once, and is not listed with the block's keys, so
    /// forgetting the block never looks it up nor copies it (up to a third of a block's blobs).
    fn stage(&mut self, set: &CommitSet, keep: usize, pin: Option<usize>) {
        self.root = None;
        let seq = self.next;
        self.next += 1;
        for key in set.removed() {
            self.blobs.remove(key);
        }
        let pinned = |key: &PathKey| pin.is_some_and(|d| key.bit_len() <= d);
        // A set past 4 GiB (never a block) is not kept, rather than cut: checked before
        // anything is copied.
        if u32::try_from(set.bytes()).is_err() {
            self.abandon();
            return;
        }
        // The block's buffer holds only the blobs that leave with it (it stays allocated, at
        // its capacity, as long as one of them is kept).
        let shared = || set.nodes().filter(|(key, _)| !pinned(key));
        let mut buf = Vec::with_capacity(shared().map(|(_, blob)| blob.len()).sum());
        for (_, blob) in shared() {
            buf.extend_from_slice(blob);
        }
        let buf = Arc::new(buf);
        let mut keys = Vec::with_capacity(set.len());
        let mut start = 0u32;
        for (key, blob) in set.nodes() {
            if pinned(key) {
                self.blobs
                    .insert(*key, (PINNED, SharedBlob::alone(blob.to_vec())));
                continue;
            }
            // Within the u32 checked above: these blobs are at most `set.bytes()` in all.
            let end = start + blob.len() as u32;
            let blob = SharedBlob {
                buf: Arc::clone(&buf),
                start,
                end,
            };
            self.blobs.insert(*key, (seq, blob));
            keys.push(*key);
            start = end;
        }
        self.blocks.push_back((seq, keys));
        while self.blocks.len() > keep {
            let (old, keys) = self.blocks.pop_front().expect("longer than keep");
            for key in keys {
                if let Entry::Occupied(e) = self.blobs.entry(key)
                    && e.get().0 == old
                {
                    e.remove();
                }
            }
        }
    }

    /// Keeps `blobs` (read at open, the tree at `root`) for good, each in its own allocation
    /// (freed when a commit replaces it).
    fn pin(&mut self, root: Hash32, blobs: Vec<(PathKey, Vec<u8>)>) {
        for (key, blob) in blobs {
            self.blobs.insert(key, (PINNED, SharedBlob::alone(blob)));
        }
        self.root = Some(root);
    }

    /// The staged block committed with `root`: the set is the blobs of that root.
    fn commit(&mut self, root: Hash32) {
        self.root = Some(root);
    }

    /// The staged block failed: what it staged must never be served, so nothing is kept.
    fn abandon(&mut self) {
        *self = Recent {
            next: self.next,
            ..Recent::default()
        };
    }
}

struct Inner {
    dir: PathBuf,
    options: LogOptions,
    index: RwLock<Index>,
    /// Read handles of the segments by number - 1; `None` where a compaction removed one.
    segments: RwLock<Vec<Option<Arc<File>>>>,
    /// The handles of the segments the last compaction removed, by number, kept open until
    /// the next one (the file's space is freed when its last handle closes). A read that
    /// found a record's place before that compaction and looks its segment up after it is
    /// served from here (the bytes at a place never change); one that outlived two
    /// compactions fails ([`LogError::Corrupt`], "no segment").
    retired: Mutex<Vec<(u32, Arc<File>)>>,
    writer: Mutex<Option<Writer>>,
    warm: Mutex<WarmSet>,
    recent: Mutex<Recent>,
    recent_hits: AtomicU64,
    /// The depth down to which blobs stay in memory ([`LogOptions::pinned_bytes`]).
    pin_depth: Option<usize>,
    /// Segments an interrupted compaction had dropped that were still in the directory at
    /// this open (by number): removed by it when writing, left to the next writer otherwise.
    interrupted_drops: Vec<u32>,
    /// Whether this open's scan found a whole commit record ([`LogStore::found_commit`]).
    found_commit: bool,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    /// The directory's writer lock, held while this handle lives (writers only).
    _lock: Option<File>,
}

/// A writer's close: its last block synced, then the index's sizes and that block left for
/// the next open ([`sizes`]). Nothing is written by a poisoned writer, by one any of whose
/// syncs ever failed (a later one succeeding proves nothing: see `Writer::sync_failed`), or
/// when this sync fails; the next open then checks the block of the file before. (After a
/// failed write that was cut back, the block named is the last one committed before it.)
impl Drop for Inner {
    fn drop(&mut self) {
        let writer = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        let Some(w) = writer.as_mut().filter(|w| !w.poisoned && !w.sync_failed) else {
            return;
        };
        if let Err(e) = w.sync() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "the log's last segment could not be synced at close");
            return;
        }
        let index = self.index.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(meta) = index.meta {
            sizes::write(&self.dir, sizes::Sizes::of(index), meta.block);
        }
    }
}

impl Inner {
    /// The state of the last commit (what [`LogStore::stored_meta`] reports).
    fn stored_meta(&self) -> Meta {
        self.index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .meta
            .expect("set at open")
    }
}

/// An open state log. Cloning is cheap (shared index and files).
///
/// Contract: one process writes at a time (the directory's `LOCK`, taken with `flock`); within
/// it, the handle that commits must have seen the last commit (another handle's commit makes
/// this one's next write a [`LogError::Conflict`]). Reads answer from the last committed block.
#[derive(Clone)]
pub struct LogStore {
    /// The compaction thread ([`LogOptions::compact_background`]), joined when the last
    /// handle drops. Declared before `inner` so that it is dropped (joined) first: the thread
    /// holds the log only during a step, and once it is joined, dropping `inner` frees the
    /// directory's lock.
    compactor: Option<Arc<background::Compactor>>,
    inner: Arc<Inner>,
    meta: Meta,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.inner.dir)
            .field("meta", &self.meta)
            .finish()
    }
}

/// Sizes of an open log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogInfo {
    /// Segment files.
    pub segments: usize,
    /// Bytes of the log up to the last commit.
    pub log_bytes: u64,
    /// Bytes of the records the index points at.
    pub live_bytes: u64,
    /// Stored node blobs (groups and stems).
    pub nodes: u64,
    /// Stems.
    pub stems: u64,
    /// Code entries.
    pub code: u64,
    /// Memory the index's tables hold (capacity x entry size, an estimate of the heap).
    pub index_bytes: u64,
}

impl LogInfo {
    /// Bytes of superseded records a compaction would drop.
    pub fn garbage_bytes(&self) -> u64 {
        self.log_bytes.saturating_sub(self.live_bytes)
    }
}

/// Reads a [`LogStore`] served, for the study's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogReads {
    /// Records read (a read of several neighbouring records counts each).
    pub reads: u64,
    /// Bytes they returned.
    pub bytes: u64,
    /// Tree blobs taken from the recent blocks' blobs in memory instead of read
    /// ([`LogOptions::recent_blocks`]).
    pub recent: u64,
}

/// The file name of segment `seg` in a log's directory: `log.NNNNNN`.
pub fn segment_name(seg: u32) -> String {
    format!("log.{seg:06}")
}

/// Opens `path` for writing, creating it when missing and keeping what it holds.
fn open_or_create(path: &FsPath) -> Result<File, LogError> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io_err(path))
}

/// Cuts the file at `path` to `len` bytes and syncs it.
pub(crate) fn cut_file(path: &FsPath, len: u64) -> Result<(), LogError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    file.set_len(len)
        .and_then(|()| file.sync_all())
        .map_err(io_err(path))
}

/// Takes the directory's writer lock (`LOCK`, with `flock`): the file handle holds it.
fn writer_lock(dir: &FsPath) -> Result<File, LogError> {
    let path = dir.join(LOCK_FILE);
    let file = open_or_create(&path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(LogError::Locked(dir.to_path_buf())),
        Err(e) => Err(io_err(&path)(e.into())),
    }
}

/// Where a log ends: just past its last commit record, and the state that commit made
/// ([`LogStore::end`]; what [`rewind`] cuts back to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEnd {
    /// The segment holding the last commit record (`log.NNNNNN`, numbered from 1).
    pub segment: u32,
    /// The offset just past that record in the segment.
    pub offset: u64,
    /// The root, block and group depth of that commit.
    pub meta: Meta,
}

/// Cuts the log in `dir` back to `to`, an end [`LogStore::end`] reported earlier: the segments
/// after `to.segment` are deleted (the last first, so that a crash part-way leaves a log
/// whose segments still follow each other) and `to.segment` is truncated at `to.offset`, both
/// synced; the [`INDEX_SIZES_FILE`] goes before them (its block would otherwise make the next
/// open refuse the cut as lost blocks). Every block committed after `to` is lost: this is for
/// scratch copies (the study runs each invocation's blocks from the same copied state), never
/// for a state anyone relies on. Takes the writer lock ([`LogError::Locked`] while a writer
/// has the log open). Errors ([`LogError::Corrupt`]) without changing anything when
/// `to.segment` is missing or shorter than `to.offset`, or when a compaction
/// ([`LogStore::compact`]) after `to` removed segments, or when the segment it would cut has
/// another hard link (it is shared with another log, [`LogStore::seal`]). It does not check
/// that `to` is a commit's end in this log: the caller opens the log afterwards and compares
/// [`LogStore::stored_meta`] with `to.meta` (a cut inside a block is a torn tail, which the
/// open cuts back to the block before, so the state is then an earlier one, never a damaged
/// one).
pub fn rewind(dir: &FsPath, to: &LogEnd) -> Result<(), LogError> {
    let _lock = writer_lock(dir)?;
    let files = scan::segment_files(dir).map_err(io_err(dir))?;
    let Some((_, path)) = files.iter().find(|(n, _)| *n == to.segment) else {
        return Err(LogError::Corrupt(format!(
            "{}: no segment {} to rewind to",
            dir.display(),
            segment_name(to.segment)
        )));
    };
    let len = std::fs::metadata(path).map_err(io_err(path))?.len();
    if len < to.offset {
        return Err(LogError::Corrupt(format!(
            "{} holds {len} bytes, fewer than the {} to rewind to",
            path.display(),
            to.offset
        )));
    }
    // A segment another log shares (a hard link, [`LogStore::seal`]) must not be cut: the cut
    // would change that log too. Refused, nothing changed.
    if len > to.offset {
        let links =
            std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(path).map_err(io_err(path))?);
        if links > 1 {
            return Err(LogError::Corrupt(format!(
                "{} is shared with another log (a hard link): rewinding would cut it there too",
                path.display()
            )));
        }
    }
    // A compaction after `to` removed segments the blocks before it need: cutting its drop
    // record away would leave a log with missing segments. Refused, nothing changed.
    for (n, later) in files.iter().filter(|(n, _)| *n >= to.segment) {
        let file = File::open(later).map_err(io_err(later))?;
        let end = file.metadata().map_err(io_err(later))?.len();
        let from = if *n == to.segment { to.offset } else { 0 };
        let mut compacted = false;
        let scanned = scan::for_each_record(&file, later, from, end, |_, rec| {
            compacted |= rec.kind == Kind::Drop;
            Ok(())
        });
        match scanned {
            // Damage (a torn tail) ends what could be committed there.
            Ok(()) | Err(LogError::Corrupt(_)) => {}
            Err(e) => return Err(e),
        }
        if compacted {
            return Err(LogError::Corrupt(format!(
                "{}: a compaction after the end to rewind to removed segments; the log cannot go back there",
                dir.display()
            )));
        }
    }
    // The block the index-sizes file names is about to be cut away on purpose: the file goes
    // first (synced), so that no open takes the cut for lost blocks.
    let hint = dir.join(sizes::SIZES_FILE);
    match std::fs::remove_file(&hint) {
        Ok(()) => sync_dir(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&hint)(e)),
    }
    for (n, later) in files.iter().rev() {
        if *n > to.segment {
            std::fs::remove_file(later).map_err(io_err(later))?;
        }
    }
    cut_file(path, to.offset)?;
    sync_dir(dir)
}

/// Whether `dir` holds a state log: at least one segment file (`log.NNNNNN`; after a
/// compaction the first ones may be gone), or an index-sizes file naming a block past 0 (a
/// log that lost every segment, which every open refuses as such; one naming block 0, or
/// unreadable, holds no state). A missing directory holds none; one that cannot be listed (no
/// permission, a file, an I/O error) is the error, not "none".
pub fn holds_log(dir: &FsPath) -> std::io::Result<bool> {
    Ok(!scan::segment_files(dir)?.is_empty()
        || sizes::read_unbounded(dir).block.is_some_and(|b| b > 0))
}

/// Removes `dir` when it holds nothing worth keeping: nothing at all, or only a log's files
/// ([`is_log_file_name`]) for a log with no block and no node. For a command that made `dir`
/// and failed before committing: it leaves nothing behind. Returns whether it was removed.
///
/// A writer that has the log open keeps it: the check and the removal hold the writer's lock
/// (a writer's open takes it first); the directory is renamed aside before it is removed, so
/// a writer that comes to it after the check finds no directory, never one emptied under it.
pub fn remove_if_empty(dir: &FsPath) -> bool {
    remove_own(dir, false)
}

/// Removes `dir`, a log directory a command made and was stopped in (by the user) before its
/// work was done, whatever blocks it holds: as [`remove_if_empty`] (nothing but a log's files,
/// and not while a writer has it open: the writer's lock), without the check for committed
/// blocks. Returns whether it was removed.
pub fn remove_made(dir: &FsPath) -> bool {
    remove_own(dir, true)
}

/// [`remove_if_empty`], or with `any_blocks` [`remove_made`].
fn remove_own(dir: &FsPath, any_blocks: bool) -> bool {
    let removed = bintrie_trie::remove_store_dir_if(
        dir,
        |e| is_log_file_name(&e.file_name()),
        || writer_lock(dir).ok(),
        || {
            any_blocks
                || LogStore::open_read_only(dir)
                    .is_ok_and(|l| l.meta().block == 0 && l.info().nodes == 0)
        },
    );
    removed.unwrap_or_else(|e| {
        tracing::warn!(dir = %dir.display(), error = %e, "an empty log could not be removed");
        !dir.exists()
    })
}

/// Whether `name` is the name of a file a log directory holds: a segment (`log.NNNNNN`), the
/// writer's `LOCK`, the [`INDEX_SIZES_FILE`] or the temporary it is written through.
pub fn is_log_file_name(name: &std::ffi::OsStr) -> bool {
    scan::segment_number(name).is_some()
        || name == LOCK_FILE
        || name == sizes::SIZES_FILE
        || name == sizes::TMP_FILE
}

/// The writer's lock file in a log directory.
const LOCK_FILE: &str = "LOCK";

/// The segment files of the log in `dir` (`log.NNNNNN`), by number, each with its path; empty
/// when there are none, as in a missing directory. A directory that cannot be listed is the
/// error.
pub fn segment_files(dir: &FsPath) -> std::io::Result<Vec<(u32, PathBuf)>> {
    scan::segment_files(dir)
}

/// The bytes of the segment files in `dir`: what an open scans (0 when there are none, as in
/// a missing directory). Lets a caller say how long an open will take before it starts.
pub fn segment_bytes(dir: &FsPath) -> std::io::Result<u64> {
    files_bytes(&scan::segment_files(dir)?)
}

/// The bytes of `files` together.
fn files_bytes(files: &[(u32, PathBuf)]) -> std::io::Result<u64> {
    files.iter().try_fold(0, |total, (_, path)| {
        Ok(total + std::fs::metadata(path)?.len())
    })
}

/// Asks the kernel to drop the cached pages of every segment in `dir` (`posix_fadvise`
/// `DONTNEED`; dirty pages must be synced first to go). Returns the bytes of the segments.
pub fn evict_page_cache(dir: &FsPath) -> std::io::Result<u64> {
    let mut total = 0;
    for (_, path) in scan::segment_files(dir)? {
        let file = File::open(&path)?;
        total += file.metadata()?.len();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)?;
    }
    Ok(total)
}

/// Opens a segment for positioned reads without read-ahead (a random read reads its own pages
/// only).
fn open_for_reads(path: &FsPath) -> Result<File, LogError> {
    let file = File::open(path).map_err(io_err(path))?;
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random)
        .map_err(|e| io_err(path)(e.into()))?;
    Ok(file)
}

fn sync_dir(dir: &FsPath) -> Result<(), LogError> {
    #[cfg(test)]
    if tests::dir_sync_fails() {
        return Err(io_err(dir)(std::io::Error::other(
            "a failure planted by a test",
        )));
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

impl LogStore {
    /// Opens the log in `dir` for reading only, with the default options otherwise: no
    /// writer lock (a writer may be at work beside it), a torn tail ignored rather than cut.
    pub fn open_read_only(dir: impl AsRef<FsPath>) -> Result<LogStore, LogError> {
        LogStore::open(
            dir,
            &LogOptions {
                read_only: true,
                ..Default::default()
            },
        )
    }

    /// Opens (or, with `create`, creates) the log in `dir`: takes the writer lock (unless
    /// read-only), scans every segment and rebuilds the index at the last whole block. A torn
    /// last block is cut off (logged); any other damage is [`LogError::Corrupt`].
    ///
    /// A read-only open lists the segments and then reads them; a compaction in another process
    /// may remove one in between (after copying what is live in it to the log's end). The open
    /// then lists them again, a few times, rather than fail on the file that went away.
    pub fn open(dir: impl AsRef<FsPath>, options: &LogOptions) -> Result<LogStore, LogError> {
        const ATTEMPTS: usize = 5;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match LogStore::open_once(dir.as_ref(), options, attempt == 1) {
                Err(LogError::Io { path, error })
                    if options.read_only
                        && attempt < ATTEMPTS
                        && error.kind() == std::io::ErrorKind::NotFound
                        && scan::is_segment_name(&path) =>
                {
                    tracing::debug!(segment = %path.display(), attempt, "a listed segment went away (a compaction beside this reader?): listing again");
                }
                other => return other,
            }
        }
    }

    /// One attempt of [`LogStore::open`]; `first` for the first (which warns of an index-sizes
    /// file it cannot use; the others do not repeat it).
    fn open_once(dir: &FsPath, options: &LogOptions, first: bool) -> Result<LogStore, LogError> {
        let dir = dir.to_path_buf();
        if let Some(g) = options.group_depth
            && !(1..=8).contains(&g)
        {
            return Err(LogError::Corrupt(format!(
                "group depth {g} is outside 1..8"
            )));
        }
        if let Some(share) = options.compact_garbage {
            compact::check_share(share)?;
        }
        if options.compact_slice_bytes == 0 {
            return Err(LogError::Invalid(
                "a compaction slice of 0 bytes: it must be at least 1".into(),
            ));
        }
        if !(1..=MAX_SEGMENT_BYTES).contains(&options.segment_bytes) {
            return Err(LogError::Invalid(format!(
                "a segment of {} bytes: it must be 1 to {MAX_SEGMENT_BYTES}",
                options.segment_bytes
            )));
        }
        let writing = !options.read_only;
        if writing && options.create {
            // `create_dir_all` on a file says only "File exists".
            if std::fs::metadata(&dir).is_ok_and(|m| !m.is_dir()) {
                return Err(io_err(&dir)(std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    "a file, not a directory: a log is a directory of segments",
                )));
            }
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            // A log is never made beside an MDBX database (`mdbx.dat`): refused before its
            // writer's lock file is made there. (The MDBX store refuses the other way round.)
            if dir.join("mdbx.dat").exists()
                && scan::segment_files(&dir).map_err(io_err(&dir))?.is_empty()
            {
                return Err(LogError::OtherLayout(dir));
            }
        }
        let lock = if writing {
            Some(writer_lock(&dir)?)
        } else {
            None
        };
        // The hint is read before the segments are listed: a writer that moves on meanwhile
        // names a later block in it only once that block is synced in segments listed after.
        let hint = sizes::read_unbounded(&dir);
        if hint.unreadable && first {
            tracing::warn!(
                file = %dir.join(INDEX_SIZES_FILE).display(),
                "not an index-sizes file this project can read (damaged, cut short, from \
                 elsewhere, or not readable): ignored, so this open cannot check that the log \
                 still holds the block it last synced; a writer's open or close writes it again"
            );
        }
        let held = hint.block.unwrap_or(0);
        let mut files = scan::segment_files(&dir).map_err(io_err(&dir))?;
        #[cfg(test)]
        tests::after_listing(&dir);
        if files.is_empty() {
            // Every segment of a log that held blocks is gone: refused (by a writer, before a
            // new one is made).
            if held > 0 {
                return Err(sizes::lost_blocks(&dir, 0, held));
            }
            if !(writing && options.create) {
                return Err(LogError::NotFound(dir));
            }
            let path = dir.join(segment_name(1));
            File::create(&path).map_err(io_err(&path))?;
            sync_dir(&dir)?;
            files.push((1, path));
        }
        // The segments' bytes bound the sizes the hint may name; when a file's size cannot be
        // read its sizes are not used (the scan reports the file), its block still is. The
        // scan refuses a log that ends before that block, before it cuts anything.
        let hint = hint.bounded(&dir, files_bytes(&files).unwrap_or(0));
        let scanned = scan::scan(&files, writing, hint.sizes, held, &dir)?;
        let mut index = scanned.index;
        if hint.sizes.is_some() {
            index.trim_oversized();
        }
        // Written once the writer below has synced what the scan found.
        let found_sizes = sizes::Sizes::of(&index);
        if writing {
            index.reserve_room();
        }
        let fresh = index.meta.is_none();
        if fresh && writing && !options.create {
            return Err(LogError::Uncommitted(dir));
        }
        let meta = match index.meta {
            Some(m) => {
                if let Some(g) = options.group_depth
                    && g != m.group_depth
                {
                    return Err(LogError::GroupDepth {
                        stored: m.group_depth,
                        asked: g,
                    });
                }
                m
            }
            None => Meta {
                root: ZERO_HASH,
                block: 0,
                group_depth: options.group_depth.unwrap_or(DEFAULT_GROUP_DEPTH),
            },
        };
        index.meta = Some(meta);
        let pin_depth = (!fresh && options.pinned_bytes > 0)
            .then(|| pin_depth(&index, meta.group_depth, options.pinned_bytes))
            .flatten();
        // Segments a compaction removed in the log but not yet from the directory (a crash
        // between the two): a writer removes them now, the oldest first, as the compaction
        // does; a reader leaves them to the next writer. Either way they are not part of the
        // log (nothing in the index points into them): not opened, not counted.
        let mut interrupted_drops = Vec::new();
        let leftover: Vec<(u32, PathBuf)> = files
            .iter()
            .filter(|(n, _)| index.dropped.contains(n))
            .cloned()
            .collect();
        for (n, path) in &leftover {
            interrupted_drops.push(*n);
            let len = std::fs::metadata(path).map_err(io_err(path))?.len();
            if writing {
                std::fs::remove_file(path).map_err(|error| LogError::DroppedSegment {
                    path: path.clone(),
                    error,
                })?;
                sync_dir(&dir)?;
                tracing::info!(segment = %path.display(), "removed a segment an interrupted compaction had dropped");
            }
            index.log_bytes = index.log_bytes.saturating_sub(len);
            if let Some(b) = index.seg_live.get_mut(*n as usize) {
                *b = 0;
            }
        }
        files.retain(|(n, _)| !index.dropped.contains(n));
        // Read handles by segment number - 1, `None` where a compaction removed one.
        let last = files.last().map_or(0, |(n, _)| *n as usize);
        let mut segments: Vec<Option<Arc<File>>> = vec![None; last];
        for (n, path) in &files {
            segments[*n as usize - 1] = Some(Arc::new(open_for_reads(path)?));
        }
        let writer = if writing {
            let (seg, path) = files.last().expect("at least one segment");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
            // What the scan found may be unsynced (a relaxed writer was killed): sync it, so
            // every block this handle reports is on the device.
            file.sync_data().map_err(io_err(path))?;
            sizes::write(&dir, found_sizes, meta.block);
            Some(Writer {
                seg: *seg,
                file,
                pos: scanned.end,
                poisoned: false,
                sync_failed: false,
                synced_block: meta.block,
                halted: false,
                cursor: None,
                short_of_room: false,
            })
        } else {
            None
        };
        let mut store = LogStore {
            compactor: None,
            inner: Arc::new(Inner {
                dir,
                options: options.clone(),
                index: RwLock::new(index),
                segments: RwLock::new(segments),
                retired: Mutex::new(Vec::new()),
                writer: Mutex::new(writer),
                warm: Mutex::new(WarmSet::default()),
                recent: Mutex::new(Recent::default()),
                recent_hits: AtomicU64::new(0),
                pin_depth,
                interrupted_drops,
                found_commit: !fresh || writing,
                reads: AtomicU64::new(0),
                read_bytes: AtomicU64::new(0),
                _lock: lock,
            }),
            meta,
        };
        if writing
            && options.compact_background
            && let Some(share) = options.compact_garbage
        {
            let compactor = background::Compactor::start(Arc::downgrade(&store.inner), share)
                .map_err(io_err(&store.inner.dir))?;
            store.compactor = Some(Arc::new(compactor));
        }
        if fresh && writing {
            // The empty state's commit record fixes the group depth for later opens.
            let mut s = store.clone();
            s.write_block(&CommitSet::default(), 0, &[])?;
            return Ok(s);
        }
        if let Some(depth) = pin_depth {
            store.load_pinned(depth)?;
        }
        Ok(store)
    }

    /// Reads every blob at a path of at most `depth` bits into the recent blocks' set, kept
    /// for good ([`LogOptions::pinned_bytes`]).
    fn load_pinned(&self, depth: usize) -> Result<(), LogError> {
        let t = std::time::Instant::now();
        let mut wanted: Vec<(PathKey, Loc)> = self
            .index()
            .nodes
            .iter()
            .filter(|(k, _)| k.bit_len() <= depth)
            .collect();
        // In log order: neighbours on the device go together.
        wanted.sort_unstable_by_key(|(_, loc)| (loc.seg(), loc.off()));
        let blobs = self.read_nodes(&wanted, PIN_READ_WORKERS)?;
        if blobs.len() != wanted.len() {
            return Err(LogError::Corrupt(format!(
                "reading the upper levels returned {} of {} blobs",
                blobs.len(),
                wanted.len()
            )));
        }
        let bytes: usize = blobs.iter().map(|(_, b)| b.len()).sum();
        tracing::info!(
            depth,
            blobs = blobs.len(),
            bytes,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "upper levels of the tree read into memory"
        );
        self.recent().pin(self.meta.root, blobs);
        Ok(())
    }

    /// The depth down to which blobs stay in memory ([`LogOptions::pinned_bytes`]), `None`
    /// when nothing does.
    pub fn pinned_depth(&self) -> Option<usize> {
        self.inner.pin_depth
    }

    /// The last committed block as this handle knows it.
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// True when batches ([`LogStore::get_stems`], [`LogStore::get_stems_then_code`]) are
    /// read through io_uring ([`LogOptions::io_uring`]); they may still fall back (`Ok(None)`)
    /// where the kernel refuses a ring.
    pub fn batch_reads(&self) -> bool {
        self.inner.options.io_uring
    }

    /// The directory.
    pub fn dir(&self) -> &FsPath {
        &self.inner.dir
    }

    /// The durability this handle commits with.
    pub fn durability(&self) -> Durability {
        self.inner.options.durability
    }

    /// The segments (by number, oldest first) that a compaction interrupted by a crash had
    /// dropped and that were still in the directory at this handle's open: a writer's open
    /// removed them, finishing that compaction; a read-only one leaves them to the next writer.
    /// Either way they are no longer part of the log (neither read nor counted in
    /// [`LogStore::info`]).
    pub fn interrupted_drops(&self) -> &[u32] {
        &self.inner.interrupted_drops
    }

    /// Whether this handle's open found a whole commit record in the log. Every log a writer
    /// creates holds one from its creation on (the empty state's), so a read-only open that
    /// found none met a log whose creation was cut short or is under way (a first segment that
    /// cannot be one is refused by the open as not a state log): it reads as the empty state at
    /// block 0, which no writer committed. A writer's open of such a log writes that record
    /// (and returns true).
    pub fn found_commit(&self) -> bool {
        self.inner.found_commit
    }

    /// Sizes of the log and its index.
    pub fn info(&self) -> LogInfo {
        let segments = self.segments().iter().flatten().count();
        let index = self.index();
        let entry = |k: usize, cap: usize| ((k + std::mem::size_of::<Loc>() + 1) * cap) as u64;
        LogInfo {
            segments,
            log_bytes: index.log_bytes,
            live_bytes: index.live_bytes,
            nodes: index.nodes.len() as u64,
            stems: index.stems.len() as u64,
            code: index.code.len() as u64,
            index_bytes: index.nodes.bytes(entry)
                + entry(std::mem::size_of::<Stem>(), index.stems.capacity())
                + entry(32, index.code.capacity()),
        }
    }

    /// Positioned reads served so far by every handle on this log.
    pub fn reads(&self) -> LogReads {
        LogReads {
            reads: self.inner.reads.load(Ordering::Relaxed),
            bytes: self.inner.read_bytes.load(Ordering::Relaxed),
            recent: self.inner.recent_hits.load(Ordering::Relaxed),
        }
    }

    fn index(&self) -> RwLockReadGuard<'_, Index> {
        self.inner.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn index_mut(&self) -> RwLockWriteGuard<'_, Index> {
        self.inner.index.write().unwrap_or_else(|e| e.into_inner())
    }

    fn segments(&self) -> RwLockReadGuard<'_, Vec<Option<Arc<File>>>> {
        self.inner
            .segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn warm(&self) -> MutexGuard<'_, WarmSet> {
        self.inner.warm.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.inner.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The blob a recent block wrote at `key`, if this handle is at the recent blocks' root.
    fn recent_blob(&self, key: &PathKey) -> Option<Vec<u8>> {
        let recent = self.recent();
        if recent.root != Some(self.meta.root) {
            return None;
        }
        let blob = recent.blobs.get(key).map(|(_, b)| b.to_vec());
        if blob.is_some() {
            self.inner.recent_hits.fetch_add(1, Ordering::Relaxed);
        }
        blob
    }

    /// The meta the log holds now (any handle's last commit).
    pub fn stored_meta(&self) -> Meta {
        self.inner.stored_meta()
    }

    fn conflict(&self, stored: Meta) -> LogError {
        conflict(stored, self.meta.block)
    }

    /// The segment file a location points into: a present segment, or one the last
    /// compaction removed ([`Inner::retired`]), for a read that found the place before it.
    fn segment(&self, loc: Loc) -> Result<Arc<File>, LogError> {
        // The segments' lock is held while `retired` is looked at: a compaction moves a
        // handle from one to the other under it.
        let segments = self.segments();
        segments
            .get(loc.seg().wrapping_sub(1))
            .cloned()
            .flatten()
            .or_else(|| {
                let retired = self.inner.retired.lock().unwrap_or_else(|e| e.into_inner());
                retired
                    .iter()
                    .find(|(n, _)| *n as usize == loc.seg())
                    .map(|(_, f)| Arc::clone(f))
            })
            .ok_or_else(|| {
                LogError::Corrupt(format!(
                    "no segment {} (a read that outlived two compactions?)",
                    loc.seg()
                ))
            })
    }

    /// The path of the segment that holds `loc` (for errors).
    fn segment_path(&self, loc: Loc) -> PathBuf {
        self.inner.dir.join(segment_name(loc.seg() as u32))
    }

    /// The node blob under `key` from a positioned read of its record at `loc`: the read's
    /// error (naming the segment), or the record checked ([`LogStore::check`]).
    fn checked_node(
        &self,
        key: &PathKey,
        loc: Loc,
        read: std::io::Result<impl AsRef<[u8]>>,
    ) -> Result<Vec<u8>, LogError> {
        let buf = read.map_err(|e| io_err(&self.segment_path(loc))(e))?;
        self.check(buf.as_ref(), loc, Kind::Node, Some(key.as_bytes()))
    }

    /// Reads the record at `loc`, checks its CRC, kind and key, and returns its value.
    /// `key` `None`: any key (the caller checks the value).
    fn read(&self, loc: Loc, kind: Kind, key: Option<&[u8]>) -> Result<Vec<u8>, LogError> {
        let file = self.segment(loc)?;
        let path = || self.segment_path(loc);
        let len = match loc.len() {
            Some(n) => n,
            None => {
                let mut h = [0u8; HEADER];
                file.read_exact_at(&mut h, loc.off())
                    .map_err(|e| io_err(&path())(e))?;
                HEADER
                    + h[5] as usize
                    + u32::from_le_bytes(h[6..10].try_into().expect("4 bytes")) as usize
            }
        };
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, loc.off())
            .map_err(|e| io_err(&path())(e))?;
        self.check(&buf, loc, kind, key)
    }

    /// Checks a record read from `loc` (its CRC, length, kind and key) and returns its value.
    fn check(
        &self,
        buf: &[u8],
        loc: Loc,
        kind: Kind,
        key: Option<&[u8]>,
    ) -> Result<Vec<u8>, LogError> {
        let len = buf.len();
        self.inner.reads.fetch_add(1, Ordering::Relaxed);
        self.inner
            .read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let bad = |why: &str| {
            LogError::Corrupt(format!(
                "record at {}:{} for key {}: {why}",
                segment_name(loc.seg() as u32),
                loc.off(),
                key.map_or_else(|| "(any)".into(), hex)
            ))
        };
        match record::parse(buf, loc.off()) {
            Parsed::Record(r, n) if n == len => {
                if r.kind != kind || key.is_some_and(|k| k != r.key) {
                    return Err(bad("holds another key"));
                }
                // The value's one copy out of the read's buffer.
                Ok(buf[HEADER + r.key.len()..].to_vec())
            }
            Parsed::Bad(why) => Err(bad(why)),
            _ => Err(bad("length differs from the index's")),
        }
    }

    /// Reads the node records `wanted` (path key, location) and returns (key, blob) pairs:
    /// from one io_uring keeping many reads in flight, or, where io_uring is unavailable, from
    /// `workers` threads of blocking reads.
    fn read_nodes(
        &self,
        wanted: &[(PathKey, Loc)],
        workers: usize,
    ) -> Result<Vec<(PathKey, Vec<u8>)>, LogError> {
        let no_stop = AtomicBool::new(false);
        if !self.inner.options.io_uring {
            return self.read_nodes_blocking(wanted, workers, &no_stop, None);
        }
        let (known, unknown): (Vec<_>, Vec<_>) =
            wanted.iter().partition(|(_, loc)| loc.len().is_some());
        let requests = known
            .iter()
            .map(|(_, loc)| {
                Ok(uring::Request {
                    file: self.segment(*loc)?,
                    offset: loc.off(),
                    len: loc.len().expect("partitioned"),
                })
            })
            .collect::<Result<Vec<_>, LogError>>()?;
        let Ok(results) = uring::read_all(requests, &no_stop) else {
            return self.read_nodes_blocking(wanted, workers, &no_stop, None);
        };
        let mut out = Vec::with_capacity(wanted.len());
        for (i, res) in results.into_iter().enumerate() {
            let (key, loc) = known[i];
            // Nothing stops this ring: every request was submitted and has its result.
            let res = res.unwrap_or_else(|| {
                Err(std::io::Error::other(
                    "the ring returned without reading it",
                ))
            });
            out.push((key, self.checked_node(&key, loc, res)?));
        }
        for (key, loc) in unknown {
            out.push((key, self.read(loc, Kind::Node, Some(key.as_bytes()))?));
        }
        Ok(out)
    }

    /// [`LogStore::read_nodes`] with `workers` threads of blocking reads (each calls `each`
    /// on what it read).
    fn read_nodes_blocking(
        &self,
        wanted: &[(PathKey, Loc)],
        workers: usize,
        stop: &AtomicBool,
        each: Option<BlobSink<'_>>,
    ) -> Result<Vec<(PathKey, Vec<u8>)>, LogError> {
        const BATCH: usize = 8;
        let workers = workers.clamp(1, wanted.len().div_ceil(BATCH).max(1));
        let next = AtomicUsize::new(0);
        let parts: Vec<Result<Blobs, LogError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let next = &next;
                    s.spawn(move || {
                        let mut out = Vec::new();
                        loop {
                            let start = next.fetch_add(BATCH, Ordering::Relaxed);
                            if start >= wanted.len() || stop.load(Ordering::Relaxed) {
                                return Ok(out);
                            }
                            for (key, loc) in wanted.iter().skip(start).take(BATCH) {
                                let bytes = self.read(*loc, Kind::Node, Some(key.as_bytes()))?;
                                if let Some(each) = each {
                                    each(key, &bytes);
                                }
                                out.push((*key, bytes));
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(LogError::Corrupt("warm-up worker panicked".into()))
                    })
                })
                .collect()
        });
        let mut out = Vec::with_capacity(wanted.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }

    /// The blob stored at `key` in the last committed block.
    pub fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, LogError> {
        let loc = self.index().nodes.get(key).copied();
        loc.map(|loc| self.read(loc, Kind::Node, Some(key.as_bytes())))
            .transpose()
    }

    /// The values of `stem` (one read of its stem blob; an absent stem reads nothing), or
    /// `None`. When `at` is given, the log must still be at that root, or the answer is
    /// [`LogError::Conflict`] (a snapshot's reads never mix two blocks).
    pub fn get_stem(
        &self,
        stem: &Stem,
        at: Option<&Hash32>,
    ) -> Result<Option<StemValues>, LogError> {
        let loc = {
            let index = self.index();
            self.check_at(&index, at)?;
            let Some(loc) = index.stems.get(stem).copied() else {
                return Ok(None);
            };
            loc
        };
        // The record is keyed by the stem's path: the stem inside the blob is what is checked.
        let blob = self.read(loc, Kind::Node, None)?;
        Self::stem_values(stem, &blob).map(Some)
    }

    /// The bytecode stored under `hash`, unchecked, or `None`; `at` as in
    /// [`LogStore::get_stem`].
    pub fn get_code(
        &self,
        hash: &[u8; 32],
        at: Option<&Hash32>,
    ) -> Result<Option<Vec<u8>>, LogError> {
        let loc = {
            let index = self.index();
            self.check_at(&index, at)?;
            index.code.get(hash).copied()
        };
        loc.map(|loc| self.read(loc, Kind::Code, Some(hash)))
            .transpose()
    }

    /// The values of many stems at once, in order (`None`: absent), read through one io_uring
    /// with up to 256 reads in flight (records on the same or neighbouring pages in one read
    /// of at most 16 KiB); `at` as in [`LogStore::get_stem`]. `Ok(None)` when io_uring is off
    /// or unavailable, or a record's length is not in the index: the caller reads them one by
    /// one.
    pub fn get_stems(
        &self,
        stems: &[Stem],
        at: Option<&Hash32>,
    ) -> Result<Option<Vec<Option<StemValues>>>, LogError> {
        Ok(self
            .get_stems_then_code(stems, at, |_, _| None, |_, bytes| bytes)?
            .map(|(values, _)| values))
    }

    /// [`LogStore::get_stems`], and the code the stems lead to, in the same ring: as each
    /// stem arrives, `code_of(i, Some(values))` names the code hash to read for `stems[i]` (an
    /// account's CODE_HASH, unless the caller has it already), and that read joins the ring
    /// while the other stems are still in flight. Each absent stem is reported as
    /// `code_of(i, None)` before any read is submitted (the index knows it is absent; what
    /// that call returns is ignored), so a caller streaming the stems onward never waits on
    /// one. Each hash is read once per call, checked as
    /// [`LogStore::get_code`] checks it, and handed to `on_code(hash, bytes)` as it arrives
    /// (work there overlaps the reads still in flight). Returns the stems' values and, for
    /// every hash named, what `on_code` made of its bytes (`None`: no code stored under it).
    #[allow(clippy::type_complexity)]
    pub fn get_stems_then_code<T>(
        &self,
        stems: &[Stem],
        at: Option<&Hash32>,
        mut code_of: impl FnMut(usize, Option<&StemValues>) -> Option<[u8; 32]>,
        mut on_code: impl FnMut(&[u8; 32], Vec<u8>) -> T,
    ) -> Result<Option<(Vec<Option<StemValues>>, Vec<([u8; 32], Option<T>)>)>, LogError> {
        if !self.inner.options.io_uring {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        let (locs, spans) = {
            let index = self.index();
            self.check_at(&index, at)?;
            let locs: Vec<Option<Loc>> =
                stems.iter().map(|s| index.stems.get(s).copied()).collect();
            let Some(spans) = stem_spans(&locs) else {
                return Ok(None);
            };
            (locs, spans)
        };
        let requests = spans
            .iter()
            .map(|span| {
                Ok(uring::Request {
                    file: self.segment(span.records[0].1)?,
                    offset: span.off,
                    len: (span.end - span.off) as usize,
                })
            })
            .collect::<Result<Vec<_>, LogError>>()?;
        let span_reads = requests.len();
        for (i, _) in locs.iter().enumerate().filter(|(_, l)| l.is_none()) {
            code_of(i, None);
        }
        let mut values: Vec<Option<StemValues>> = vec![None; stems.len()];
        // Every hash named, with where its code is (`None`: not stored) and what `on_code`
        // made of it once read.
        let mut codes: Vec<([u8; 32], Option<Loc>, Option<T>)> = Vec::new();
        let mut named: std::collections::HashSet<[u8; 32]> = std::collections::HashSet::new();
        // Follow-up reads are numbered after the stems' reads, in the order they were queued:
        // the entry of `codes` each one reads. A code not stored, or too long for the index's
        // length field (read after the ring), takes no slot.
        let mut queued: Vec<usize> = Vec::new();
        let mut failed: Option<LogError> = None;
        // What the completions cost the ring's thread, and the bytes they brought (the trace).
        let (mut callback_time, mut bytes_read) = (std::time::Duration::ZERO, 0usize);
        let ring = {
            // A stem's record whole: checked, decoded, and the code it names queued.
            type Codes<T> = Vec<([u8; 32], Option<Loc>, Option<T>)>;
            let mut on_stem = |i: usize,
                               record: &[u8],
                               codes: &mut Codes<T>,
                               queued: &mut Vec<usize>|
             -> Result<Option<uring::Request>, LogError> {
                let loc = locs[i].expect("requested");
                let blob = self.check(record, loc, Kind::Node, None)?;
                let v = Self::stem_values(&stems[i], &blob)?;
                let hash = code_of(i, Some(&v)).filter(|h| named.insert(*h));
                values[i] = Some(v);
                let Some(hash) = hash else {
                    return Ok(None);
                };
                let loc = self.index().code.get(&hash).copied();
                codes.push((hash, loc, None));
                let Some((loc, len)) = loc.and_then(|l| Some((l, l.len()?))) else {
                    return Ok(None);
                };
                let file = self.segment(loc)?;
                queued.push(codes.len() - 1);
                Ok(Some(uring::Request {
                    file,
                    offset: loc.off(),
                    len,
                }))
            };
            // A failed read or check ends the batch: nothing more is submitted.
            let stop = AtomicBool::new(false);
            uring::read_chained(requests, &stop, |r, buf| {
                let mut next = Vec::new();
                if failed.is_some() {
                    return next;
                }
                let t = std::time::Instant::now();
                bytes_read += buf.len();
                // The code reads queued before this read (a failure part-way through a span
                // takes back those its earlier records queued, with their requests).
                let q0 = queued.len();
                let result = if r < span_reads {
                    // Each record out of the read's bytes (a completed read is whole).
                    let span = &spans[r];
                    span.records.iter().try_for_each(|&(i, loc, len)| {
                        let record = span
                            .record(buf, loc, len)
                            .map_err(io_err(&self.segment_path(loc)))?;
                        on_stem(i, record, &mut codes, &mut queued).map(|code| next.extend(code))
                    })
                } else {
                    let (hash, loc, _) = codes[queued[r - span_reads]];
                    let loc = loc.expect("queued codes are stored");
                    self.check(buf, loc, Kind::Code, Some(&hash)).map(|bytes| {
                        codes[queued[r - span_reads]].2 = Some(on_code(&hash, bytes));
                    })
                };
                callback_time += t.elapsed();
                if let Err(e) = result {
                    failed = Some(e);
                    stop.store(true, Ordering::Relaxed);
                    next.clear();
                    queued.truncate(q0);
                }
                next
            })
        };
        let ring_ms = t0.elapsed().as_secs_f64() * 1e3;
        let Ok(results) = ring else {
            return Ok(None);
        };
        if let Some(e) = failed {
            return Err(e);
        }
        let mut results = results.into_iter();
        // Nothing stopped the ring (only a failure does), so every read was submitted and has
        // completed, and each one that completed whole has filled its stems: what is left is
        // a failed read (or a slot the ring left unread, which would otherwise leave its stems
        // reported absent).
        for (span, res) in spans.iter().zip(results.by_ref().take(span_reads)) {
            let err = match res {
                Some(Ok(_)) => continue,
                Some(Err(e)) => e,
                None => std::io::Error::other("the ring returned without reading it"),
            };
            return Err(io_err(&self.segment_path(span.records[0].1))(err));
        }
        for (c, res) in queued.into_iter().zip(results) {
            if let Some(Err(e)) = res {
                let loc = codes[c].1.expect("queued codes are stored");
                return Err(io_err(&self.segment_path(loc))(e));
            }
        }
        // Codes not read in the ring (too long for the index's length field): read here.
        let codes = codes
            .into_iter()
            .map(|(hash, loc, made)| {
                let made = match (made, loc) {
                    (Some(m), _) => Some(m),
                    (None, Some(loc)) => {
                        Some(on_code(&hash, self.read(loc, Kind::Code, Some(&hash))?))
                    }
                    (None, None) => None,
                };
                Ok((hash, made))
            })
            .collect::<Result<Vec<_>, LogError>>()?;
        tracing::debug!(
            stems = stems.len(),
            stem_reads = values.iter().flatten().count(),
            requests = span_reads,
            codes = codes.len(),
            ring_ms,
            callbacks_ms = callback_time.as_secs_f64() * 1e3,
            bytes_read,
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "batch read"
        );
        Ok(Some((values, codes)))
    }

    /// Decodes the stem blob indexed for `stem`, which must hold that stem.
    fn stem_values(stem: &Stem, blob: &[u8]) -> Result<StemValues, LogError> {
        let (found, values) = StemValues::decode_blob(blob)
            .map_err(|e| LogError::Corrupt(format!("stem blob of {}: {e}", hex(stem))))?;
        if &found != stem {
            return Err(LogError::Corrupt(format!(
                "the blob indexed for stem {} holds stem {}",
                hex(stem),
                hex(&found)
            )));
        }
        Ok(values)
    }

    fn check_at(&self, index: &Index, at: Option<&Hash32>) -> Result<(), LogError> {
        let stored = index.meta.expect("set at open");
        match at {
            Some(root) if *root != stored.root => Err(self.conflict(stored)),
            _ => Ok(()),
        }
    }

    /// The stored blobs on the root-to-stem path of `stem`, found in the index alone: the
    /// groups at depths 0, g, 2g, ... while they exist, then the stem blob that ends the path
    /// (this stem's, or the one a new stem would split from), if any.
    fn path_locs(
        index: &Index,
        stem: &Stem,
        g: usize,
        below: usize,
        out: &mut Vec<(PathKey, Loc)>,
    ) {
        let own = index.stems.get(stem).copied();
        // Nothing lies deeper than MAX_DEPTH: a larger `below` asks for nothing.
        let below = below.min(MAX_DEPTH + 1);
        // The first group boundary at or below `below`: where the path goes on is read from
        // the index there, so nothing above `below` is looked up. No node there means the path
        // ends above it (or in a stem between `below` and it, found below).
        let mut d = below.div_ceil(g) * g;
        loop {
            let found = if d <= MAX_DEPTH {
                let key = Path::from_stem_prefix(stem, d).to_key();
                index.nodes.get(&key).map(|&loc| (key, loc))
            } else {
                None
            };
            match found {
                Some((key, loc)) => {
                    out.push((key, loc));
                    if own == Some(loc) || d + g > MAX_DEPTH {
                        return;
                    }
                    d += g;
                }
                None => {
                    // A stem that ends the path above this boundary (and not above `below`).
                    let from = (d.saturating_sub(g) + 1).max(below);
                    for e in (from..d.min(MAX_DEPTH + 1)).rev() {
                        let key = Path::from_stem_prefix(stem, e).to_key();
                        if let Some(&loc) = index.nodes.get(&key) {
                            out.push((key, loc));
                            return;
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Preloads every blob on the root-to-stem paths of `stems`, so a trie update touching
    /// them finds them in memory: the index names them without reading anything, so up to
    /// 256 reads (the io_uring's depth) are in flight together (`workers` blocking threads where
    /// io_uring is unavailable). Stops early once `stop` is set (what was read is kept); the
    /// blobs are dropped at the next commit. Returns the reads and bytes.
    pub fn warm_trie_paths(
        &self,
        stems: &[Stem],
        workers: usize,
        stop: &AtomicBool,
    ) -> Result<LogReads, LogError> {
        self.warm_trie_paths_with(stems, 0, workers, stop, None)
    }

    /// [`LogStore::warm_trie_paths`] for the blobs at paths of at least `below` bits only (0:
    /// all; a trie that keeps the levels above loaded passes its resident depth: nothing
    /// above it is looked up, read or handed on), also handing each blob on the paths to
    /// `each(key, blob)` once (a ring that fails part-way is read again with blocking threads,
    /// which hand on everything again): those the recent blocks' set holds as their stems are located,
    /// each blob read, checked, as soon as it arrives, so that a trie can decode and hash them
    /// (`bintrie_trie::Trie::decode_ahead`) elsewhere while the rest are still in flight.
    /// Blobs already in the warm set are not handed on. `each` is called from the thread
    /// keeping the reads in flight (from the reading threads when io_uring is off), so it
    /// must be quick: hand the blob on, do not decode it there. What `each` does cannot fail
    /// the warm-up. If another handle commits while the stems are being located, the
    /// prefetch ends with [`LogError::Conflict`] and keeps nothing.
    pub fn warm_trie_paths_with(
        &self,
        stems: &[Stem],
        below: usize,
        workers: usize,
        stop: &AtomicBool,
        each: Option<BlobSink<'_>>,
    ) -> Result<LogReads, LogError> {
        let root = self.meta.root;
        let t0 = std::time::Instant::now();
        let g = {
            let index = self.index();
            let stored = index.meta.expect("set at open");
            if stored.root != root {
                return Err(self.conflict(stored));
            }
            usize::from(stored.group_depth)
        };
        let mut stats = LogReads::default();
        if stems.is_empty() {
            return Ok(stats);
        }
        let mut counts = RingCounts::default();
        let ring = if self.inner.options.io_uring {
            self.warm_paths_ring(stems, (g, below, root), stop, each, &mut stats, &mut counts)?
        } else {
            None
        };
        let blobs = match ring {
            Some(blobs) => blobs,
            None => {
                // No ring (or it failed): locate everything, then read it with blocking
                // threads, in log order (neighbours on the device go together).
                stats = LogReads::default();
                let t = std::time::Instant::now();
                let mut seen = FastSet::default();
                let mut wanted =
                    self.locate_paths(stems, (g, below, root), &mut seen, each, &mut stats)?;
                wanted.sort_unstable_by_key(|(_, loc)| (loc.seg(), loc.off()));
                counts.locate = t.elapsed();
                counts.requests = wanted.len() as u64;
                self.read_nodes_blocking(&wanted, workers, stop, each)?
            }
        };
        tracing::debug!(
            stems = stems.len(),
            in_memory = stats.recent,
            reads = blobs.len(),
            requests = counts.requests,
            locate_ms = counts.locate.as_secs_f64() * 1e3,
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "trie paths warmed"
        );
        let mut warm = self.warm();
        if warm.root != root {
            warm.blobs.clear();
            warm.root = root;
        }
        for (key, blob) in blobs {
            stats.reads += 1;
            stats.bytes += blob.len() as u64;
            warm.blobs.insert(key, blob);
        }
        Ok(stats)
    }

    /// The blobs on the paths of `stems` that are to be read, for
    /// [`LogStore::warm_trie_paths_with`] (`at`: group depth, `below`, the root the paths must
    /// be of): found in the index (which must still be at that root), each key not in `seen`
    /// yet (and added to it), not in the warm set, and not in the recent blocks' set (those are
    /// handed to `each` here and counted in `stats.recent`).
    fn locate_paths(
        &self,
        stems: &[Stem],
        (g, below, root): (usize, usize, Hash32),
        seen: &mut FastSet<PathKey>,
        each: Option<BlobSink<'_>>,
        stats: &mut LogReads,
    ) -> Result<Vec<(PathKey, Loc)>, LogError> {
        let mut wanted = Vec::new();
        {
            let index = self.index();
            let stored = index.meta.expect("set at open");
            if stored.root != root {
                return Err(self.conflict(stored));
            }
            for stem in stems {
                Self::path_locs(&index, stem, g, below, &mut wanted);
            }
        }
        wanted.retain(|(k, _)| seen.insert(*k));
        {
            let warm = self.warm();
            if warm.root == root {
                wanted.retain(|(k, _)| !warm.blobs.contains_key(k));
            }
        }
        let mut in_memory = Vec::new();
        {
            let recent = self.recent();
            if recent.root == Some(root) {
                let before = wanted.len();
                wanted.retain(|(k, _)| match recent.blobs.get(k) {
                    Some((_, blob)) => {
                        if each.is_some() {
                            in_memory.push((*k, blob.clone()));
                        }
                        false
                    }
                    None => true,
                });
                stats.recent += (before - wanted.len()) as u64;
            }
        }
        if let Some(each) = each {
            for (key, blob) in &in_memory {
                each(key, blob);
            }
        }
        Ok(wanted)
    }

    /// [`LogStore::warm_trie_paths_with`]'s reads through one io_uring, the index walked
    /// [`LOCATE_STEMS`] stems at a time as the ring has room, so the first reads are on the
    /// device while the later stems are still being located (locating 645 stems took 1.2-1.4 ms
    /// at 16M stems, a sixth of the reads' time, all of it before the first read). Each chunk's
    /// records are read in [`spans`]: one request for the records on the same or neighbouring
    /// pages (`timing` counts them). Returns the blobs read, checked, each handed to
    /// `each` as it arrives; `None` when the ring cannot be made or fails (the caller reads
    /// everything again, blocking).
    fn warm_paths_ring(
        &self,
        stems: &[Stem],
        at: (usize, usize, Hash32),
        stop: &AtomicBool,
        each: Option<BlobSink<'_>>,
        stats: &mut LogReads,
        timing: &mut RingCounts,
    ) -> Result<Option<Blobs>, LogError> {
        let failed: std::cell::RefCell<Option<LogError>> = std::cell::RefCell::new(None);
        let mut out = Vec::new();
        let mut seen = FastSet::default();
        let mut ready: std::collections::VecDeque<Span> = Default::default();
        let mut unknown = Vec::new();
        let mut chunks = stems.chunks(LOCATE_STEMS);
        let ring = uring::read_fed(
            stop,
            || loop {
                if failed.borrow().is_some() {
                    return None;
                }
                if let Some(span) = ready.pop_front() {
                    match self.segment(span.records[0].1) {
                        Ok(file) => {
                            let request = uring::Request {
                                file,
                                offset: span.off,
                                len: (span.end - span.off) as usize,
                            };
                            timing.requests += 1;
                            return Some((request, span));
                        }
                        Err(e) => {
                            *failed.borrow_mut() = Some(e);
                            return None;
                        }
                    }
                }
                let chunk = chunks.next()?;
                let t = std::time::Instant::now();
                match self.locate_paths(chunk, at, &mut seen, each, stats) {
                    Ok(found) => {
                        let (found, long) = spans(found);
                        ready.extend(found);
                        // Too long for the index's length field: read after the ring.
                        unknown.extend(long);
                    }
                    Err(e) => {
                        *failed.borrow_mut() = Some(e);
                        return None;
                    }
                }
                timing.locate += t.elapsed();
            },
            |span: Span, res| {
                if failed.borrow().is_some() {
                    return None;
                }
                let buf = match res {
                    Ok(buf) => buf,
                    Err(e) => {
                        *failed.borrow_mut() =
                            Some(io_err(&self.segment_path(span.records[0].1))(e));
                        return None;
                    }
                };
                for &(key, loc, len) in &span.records {
                    match self.checked_node(&key, loc, span.record(&buf, loc, len)) {
                        Ok(bytes) => {
                            if let Some(each) = each {
                                each(&key, &bytes);
                            }
                            out.push((key, bytes));
                        }
                        Err(e) => {
                            *failed.borrow_mut() = Some(e);
                            break;
                        }
                    }
                }
                None
            },
        );
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        if ring.is_err() {
            return Ok(None);
        }
        if stop.load(Ordering::Relaxed) {
            // Stopped: what was read is kept, the rest is loaded on demand.
            return Ok(Some(out));
        }
        for (key, loc) in unknown {
            let bytes = self.read(loc, Kind::Node, Some(key.as_bytes()))?;
            if let Some(each) = each {
                each(&key, &bytes);
            }
            out.push((key, bytes));
        }
        Ok(Some(out))
    }

    /// Checks the index against itself: every stem entry must point at a node record that
    /// the path index also points at (a stem blob that is in the tree). Returns the number of
    /// stems checked; a stem pointing elsewhere is [`LogError::Corrupt`]. With a trie's
    /// `verify` (every reachable blob re-hashed; as many blobs loaded as the index holds) it
    /// checks the whole log.
    pub fn check_index(&self) -> Result<u64, LogError> {
        let index = self.index();
        let nodes: std::collections::HashSet<u64> = index.nodes.values().map(|l| l.0).collect();
        for (stem, loc) in &index.stems {
            if !nodes.contains(&loc.0) {
                return Err(LogError::Corrupt(format!(
                    "stem {} points at a record no path holds",
                    hex(stem)
                )));
            }
        }
        Ok(index.stems.len() as u64)
    }

    /// Calls `f(hash, bytecode)` for every code entry (in no particular order), each read and
    /// checked as [`LogStore::get_code`] reads it.
    pub fn for_each_code(&self, mut f: impl FnMut(&[u8; 32], &[u8])) -> Result<(), LogError> {
        let entries: Vec<([u8; 32], Loc)> =
            self.index().code.iter().map(|(h, l)| (*h, *l)).collect();
        for (hash, loc) in entries {
            let code = self.read(loc, Kind::Code, Some(&hash))?;
            f(&hash, &code);
        }
        Ok(())
    }

    /// Drops the blobs [`LogStore::warm_trie_paths`] preloaded (a commit does it too).
    pub fn clear_warm(&self) {
        std::mem::take(&mut self.warm().blobs);
    }

    /// Blobs preloaded by [`LogStore::warm_trie_paths`] that no load has taken yet.
    pub fn warm_blobs(&self) -> usize {
        self.warm().blobs.len()
    }

    /// Appends block `block`: the commit's blobs and removed paths, the code not yet stored,
    /// and a commit record, in one write, then `fdatasync` ([`Durability::Durable`]); only then
    /// does the index (and every reader) see it. The index takes the changes while the write
    /// waits for the device, under its write lock: readers of this store wait for the write,
    /// then see the new block. On any error nothing is visible (the index is put back) and
    /// the log is cut back to the previous block. `set.root` is the new root.
    pub fn write_block(
        &mut self,
        set: &CommitSet,
        block: u64,
        code: &[([u8; 32], Vec<u8>)],
    ) -> Result<(), LogError> {
        let t0 = std::time::Instant::now();
        let (mut guard, stored) = Self::lock_writer(&self.inner, &self.meta)?;
        let w = guard.as_mut().expect("checked by lock_writer");
        if block < stored.block {
            return Err(LogError::BlockOrder {
                block,
                last: stored.block,
            });
        }
        let empty = set.is_empty();
        if !empty && set.group_depth != stored.group_depth {
            return Err(LogError::CommitDepth {
                commit: set.group_depth,
                log: stored.group_depth,
            });
        }
        let mut buf = Vec::with_capacity(set.bytes() + set.len() * 48 + 256);
        let mut changes = Vec::with_capacity(set.len() + set.removed().len() + code.len());
        let seg = w.seg;
        let base = w.pos;
        let loc = |at: usize, len: usize| {
            Loc::new(seg, base + at as u64, len).ok_or_else(|| {
                LogError::Corrupt(format!("segment {seg} past the addressable size"))
            })
        };
        for (key, blob) in set.nodes() {
            if blob.len() > record::MAX_VALUE {
                return Err(LogError::TooLarge(blob.len()));
            }
            let (at, len) = record::push(&mut buf, base, Kind::Node, key.as_bytes(), blob);
            changes.push(Change::Node(*key, loc(at, len)?, len, stem_of_blob(blob)));
        }
        for key in set.removed() {
            record::push(&mut buf, base, Kind::Remove, key.as_bytes(), &[]);
            changes.push(Change::Remove(*key));
        }
        {
            let index = self.index();
            for (hash, bytes) in code {
                if index.code.contains_key(hash) {
                    continue;
                }
                if bytes.len() > record::MAX_VALUE {
                    return Err(LogError::TooLarge(bytes.len()));
                }
                let (at, len) = record::push(&mut buf, base, Kind::Code, hash, bytes);
                changes.push(Change::Code(*hash, loc(at, len)?, len));
            }
        }
        let meta = Meta {
            root: if empty && set.root == ZERO_HASH {
                stored.root
            } else {
                set.root
            },
            block,
            group_depth: stored.group_depth,
        };
        let records =
            u32::try_from(changes.len()).map_err(|_| LogError::TooLarge(changes.len()))?;
        // The padding before the commit record (if it would straddle a page) is part of the
        // block's body, as the scan sees it.
        record::pad_for_commit(&mut buf, base);
        let commit = CommitRecord {
            block,
            root: meta.root,
            group_depth: meta.group_depth,
            records,
            body_crc: crc32fast::hash(&buf),
            body_start: base,
            building: false,
        };
        record::push(&mut buf, base, Kind::Commit, &[], &commit.encode());
        let t1 = std::time::Instant::now();
        // While the write and its sync wait for the device, two other threads work: the
        // recent blocks' set takes this block's blobs, and the index takes its changes under
        // its write lock, so no reader sees them before the block is committed; if the write
        // fails, the index is put back before the lock is released.
        let keep = self.inner.options.recent_blocks;
        let pin = self.inner.pin_depth;
        let recent_on = keep > 0 || pin.is_some();
        let this = &*self;
        let mut index = self.index_mut();
        let ix: &mut Index = &mut index;
        let (appended, undo, (write_time, index_time, stage_time)) = std::thread::scope(|s| {
            let staged = recent_on.then(|| {
                s.spawn(move || {
                    let t = std::time::Instant::now();
                    this.recent().stage(set, keep, pin);
                    t.elapsed()
                })
            });
            let applied = s.spawn(move || {
                let t = std::time::Instant::now();
                (ix.apply_undoable(changes), t.elapsed())
            });
            let t = std::time::Instant::now();
            let appended = this.append(w, &buf, Some(block));
            let write = t.elapsed();
            let (undo, index) = applied
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            let stage = match staged.map(|h| h.join()) {
                Some(Ok(d)) => d,
                Some(Err(_)) => {
                    this.recent().abandon();
                    std::time::Duration::ZERO
                }
                None => std::time::Duration::ZERO,
            };
            (appended, undo, (write, index, stage))
        });
        if let Err(e) = appended {
            index.undo(undo);
            drop(index);
            if recent_on {
                self.recent().abandon();
            }
            return Err(e);
        }
        let t2 = std::time::Instant::now();
        index.meta = Some(meta);
        index.log_bytes += buf.len() as u64;
        drop(index);
        self.meta = meta;
        std::mem::take(&mut self.warm().blobs);
        if recent_on {
            self.recent().commit(meta.root);
        }
        // The block is committed: a failure to start the next segment must not report it as
        // failed. The current segment grows past its size, and the next commit tries again.
        if let Err(e) = self.maybe_roll(w) {
            tracing::warn!(error = %e, "starting a new log segment failed; the current one grows");
        }
        let t3 = std::time::Instant::now();
        if let Some(share) = self.inner.options.compact_garbage {
            match &self.compactor {
                // Off the block: the thread takes the writer's lock once this write lets go.
                Some(compactor) => {
                    drop(guard);
                    compactor.ask();
                }
                None => {
                    if let Err(e) = self.compact_step(w, share) {
                        tracing::warn!(error = %e, "compacting the log failed; the block is committed");
                    }
                }
            }
        }
        tracing::debug!(
            block,
            bytes = buf.len(),
            records,
            encode_ms = (t1 - t0).as_secs_f64() * 1e3,
            write_sync_index_ms = (t2 - t1).as_secs_f64() * 1e3,
            write_sync_ms = write_time.as_secs_f64() * 1e3,
            index_ms = index_time.as_secs_f64() * 1e3,
            stage_ms = stage_time.as_secs_f64() * 1e3,
            after_ms = (t3 - t2).as_secs_f64() * 1e3,
            compact_ms = t3.elapsed().as_secs_f64() * 1e3,
            "block appended"
        );
        Ok(())
    }

    /// The writer, locked, after the checks every write makes: a writable handle
    /// ([`LogError::ReadOnly`]), no failed write left it unusable ([`LogError::Poisoned`]), and
    /// this handle at the stored state ([`LogError::Conflict`]). The guard holds a writer; the
    /// meta is the stored one.
    /// (An associated function of the shared state, so that the guard borrows only that, not
    /// the handle, whose meta the caller then updates.)
    fn lock_writer<'a>(
        inner: &'a Inner,
        expected: &Meta,
    ) -> Result<(MutexGuard<'a, Option<Writer>>, Meta), LogError> {
        let guard = inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            None => return Err(LogError::ReadOnly),
            Some(w) if w.poisoned => return Err(LogError::Poisoned),
            Some(_) => {}
        }
        let stored = inner.stored_meta();
        if stored != *expected {
            return Err(conflict(stored, expected.block));
        }
        Ok((guard, stored))
    }

    /// Writes `buf` at the writer's position. With `synced` (the block that counts as synced
    /// once it is) it syncs as the durability says; without (a compaction's copies, which
    /// change no state: a crash that loses them loses nothing, and the next block's sync or
    /// the compaction's own before it removes a file covers them) it does not sync. On failure
    /// cuts the file back (or poisons the writer when even that fails).
    fn append(&self, w: &mut Writer, buf: &[u8], synced: Option<u64>) -> Result<(), LogError> {
        // The block this write makes synced, when it syncs.
        let synced = synced.filter(|_| self.inner.options.durability == Durability::Durable);
        let res = w.file.write_all_at(buf, w.pos).and_then(|()| match synced {
            Some(_) => w.file.sync_data(),
            None => Ok(()),
        });
        if let Err(e) = res {
            w.sync_failed = true;
            if w.file
                .set_len(w.pos)
                .and_then(|()| w.file.sync_data())
                .is_err()
            {
                w.poisoned = true;
            }
            return Err(io_err(&self.inner.dir.join(segment_name(w.seg)))(e));
        }
        w.pos += buf.len() as u64;
        if let Some(block) = synced {
            w.synced_block = block;
        }
        Ok(())
    }

    /// Starts a new segment once the current one passed its size ([`LogStore::roll`]).
    fn maybe_roll(&self, w: &mut Writer) -> Result<(), LogError> {
        if w.pos < self.inner.options.segment_bytes {
            return Ok(());
        }
        self.roll(w)
    }

    /// Ends the segment being written, if it holds anything: it is synced and later blocks go
    /// to a new, empty segment. From then on no writer of this log writes to the earlier
    /// segments: blocks append to the last segment only, a torn tail is cut from the last
    /// segment only, and a compaction copies records out of a segment and then removes the
    /// file, never changing one in place. So a copy of the log may share the earlier segments
    /// (hard links) and copy only the last one; a writer of either leaves the other whole. The
    /// one exception is [`rewind`] to an end before the seal, which would cut the segment
    /// holding that end: it refuses to cut a segment with another hard link.
    /// Takes the writer's lock: errors as a block's write does ([`LogError::ReadOnly`] on a
    /// read-only handle, [`LogError::Poisoned`] after a failed write, [`LogError::Conflict`]
    /// when another handle wrote since this one's state), as a segment roll does
    /// ([`LogError::Corrupt`]: the most segments the log can address, or a next segment that
    /// exists and is not empty), and as a sync or a file creation does.
    pub fn seal(&mut self) -> Result<(), LogError> {
        let (mut guard, _) = Self::lock_writer(&self.inner, &self.meta)?;
        let w = guard.as_mut().expect("checked by lock_writer");
        if w.pos == 0 {
            return Ok(());
        }
        self.roll(w)
    }

    /// Starts a new segment (the old one is synced first, so only the last segment can ever
    /// have a torn tail).
    fn roll(&self, w: &mut Writer) -> Result<(), LogError> {
        if w.seg >= Loc::MAX_SEG {
            return Err(LogError::Corrupt(
                "the log has the most segments it can address".into(),
            ));
        }
        let dir = &self.inner.dir;
        let old = dir.join(segment_name(w.seg));
        w.sync().map_err(io_err(&old))?;
        w.synced_block = self.stored_meta().block;
        let seg = w.seg + 1;
        let path = dir.join(segment_name(seg));
        // An empty file left by an earlier attempt that failed after creating it is reused.
        let file = open_or_create(&path)?;
        if file.metadata().map_err(io_err(&path))?.len() != 0 {
            return Err(LogError::Corrupt(format!(
                "{} exists and is not empty",
                path.display()
            )));
        }
        sync_dir(dir)?;
        let reader = Arc::new(open_for_reads(&path)?);
        self.inner
            .segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Some(reader));
        *w = Writer {
            seg,
            file,
            pos: 0,
            poisoned: false,
            // A failed sync of an earlier segment is not forgotten by moving on.
            sync_failed: w.sync_failed,
            synced_block: self.meta.block,
            halted: w.halted,
            cursor: w.cursor.take(),
            short_of_room: w.short_of_room,
        };
        Ok(())
    }

    /// Returns once the automatic compaction ([`LogOptions::compact_garbage`]) has run the
    /// step of every block committed so far; at once when it runs inside the blocks' writes
    /// ([`LogOptions::compact_background`] off) or not at all. For tests and measurements that
    /// need the log as the blocks left it.
    pub fn wait_for_compaction(&self) {
        if let Some(compactor) = &self.compactor {
            compactor.wait();
        }
    }

    /// A handle on `inner` at its stored state, without the compaction thread (for that
    /// thread's own steps).
    fn internal(inner: Arc<Inner>) -> LogStore {
        let meta = inner.stored_meta();
        LogStore {
            compactor: None,
            inner,
            meta,
        }
    }

    /// Syncs the log's last segment to the device (for [`Durability::Relaxed`]; a no-op cost
    /// otherwise).
    pub fn sync(&self) -> Result<(), LogError> {
        let mut guard = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = guard.as_mut() {
            let path = self.inner.dir.join(segment_name(w.seg));
            w.sync().map_err(io_err(&path))?;
            w.synced_block = self.stored_meta().block;
        }
        Ok(())
    }

    /// The block a power loss cannot take back: every committed block with
    /// [`Durability::Durable`], the last synced one with [`Durability::Relaxed`] (a segment
    /// roll, [`LogStore::sync`], or the open); `None` for a read-only handle (the writer's
    /// durability is unknown to it). A process crash loses no committed block in either mode.
    pub fn durable_block(&self) -> Option<u64> {
        let guard = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|w| w.synced_block)
    }

    /// Where the log ends now, for [`rewind`]: the writer's position (just past the last
    /// commit record) and the state it committed. `None` for a read-only handle (a writer may
    /// be ahead of its view) and after a failed write left the writer unusable.
    pub fn end(&self) -> Option<LogEnd> {
        let guard = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let w = guard.as_ref().filter(|w| !w.poisoned)?;
        Some(LogEnd {
            segment: w.seg,
            offset: w.pos,
            meta: self.stored_meta(),
        })
    }

    /// A bulk load into an empty log: push every node blob and code entry, then
    /// [`BulkLoad::finish`] with the root and block. Checkpoints every 64 MiB keep the open's
    /// memory bounded; until `finish` the log opens as [`LogError::Building`].
    pub fn bulk_load(&mut self) -> Result<BulkLoad<'_>, LogError> {
        let m = self.stored_meta();
        if m.root != ZERO_HASH || m.block != 0 || !self.index().nodes.is_empty() {
            return Err(LogError::NotEmpty);
        }
        let mut load = BulkLoad {
            store: self,
            buf: Vec::with_capacity(BulkLoad::CHECKPOINT + (1 << 20)),
            changes: Vec::new(),
            at: (0, 0),
        };
        load.at = load.writer_pos()?;
        Ok(load)
    }
}

/// A bulk load in progress ([`LogStore::bulk_load`]).
pub struct BulkLoad<'s> {
    store: &'s mut LogStore,
    buf: Vec<u8>,
    changes: Vec<Change>,
    /// Where `buf` will be written (segment, offset): moves only at a checkpoint.
    at: (u32, u64),
}

impl BulkLoad<'_> {
    const CHECKPOINT: usize = 64 << 20;

    fn writer_pos(&self) -> Result<(u32, u64), LogError> {
        let guard = self
            .store
            .inner
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let w = guard.as_ref().ok_or(LogError::ReadOnly)?;
        Ok((w.seg, w.pos))
    }

    fn push(&mut self, kind: Kind, key: &[u8], value: &[u8]) -> Result<(), LogError> {
        if value.len() > record::MAX_VALUE {
            return Err(LogError::TooLarge(value.len()));
        }
        let (seg, base) = self.at;
        let (at, len) = record::push(&mut self.buf, base, kind, key, value);
        let loc = Loc::new(seg, base + at as u64, len)
            .ok_or_else(|| LogError::Corrupt("bulk load past the addressable size".into()))?;
        self.changes.push(match kind {
            Kind::Node => Change::Node(
                PathKey::from_bytes(key)
                    .ok_or_else(|| LogError::Corrupt("long path key".into()))?,
                loc,
                len,
                stem_of_blob(value),
            ),
            _ => Change::Code(key.try_into().expect("32-byte hash"), loc, len),
        });
        if self.buf.len() >= Self::CHECKPOINT {
            self.checkpoint(ZERO_HASH, 0, true)?;
        }
        Ok(())
    }

    /// Adds a node blob at its path key (as stored: SPEC §5).
    pub fn node(&mut self, key: &[u8], blob: &[u8]) -> Result<(), LogError> {
        self.push(Kind::Node, key, blob)
    }

    /// Adds bytecode under its hash.
    pub fn code(&mut self, hash: &[u8; 32], code: &[u8]) -> Result<(), LogError> {
        self.push(Kind::Code, hash, code)
    }

    fn checkpoint(&mut self, root: Hash32, block: u64, building: bool) -> Result<(), LogError> {
        let store = &*self.store;
        let mut guard = store.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        let w = guard.as_mut().ok_or(LogError::ReadOnly)?;
        let g = store.meta.group_depth;
        record::pad_for_commit(&mut self.buf, w.pos);
        let commit = CommitRecord {
            block,
            root,
            group_depth: g,
            records: u32::try_from(self.changes.len()).map_err(|_| LogError::TooLarge(0))?,
            body_crc: crc32fast::hash(&self.buf),
            body_start: w.pos,
            building,
        };
        record::push(&mut self.buf, w.pos, Kind::Commit, &[], &commit.encode());
        let synced = if building { w.synced_block } else { block };
        store.append(w, &self.buf, Some(synced))?;
        let mut index = store.index_mut();
        index.apply(std::mem::take(&mut self.changes));
        index.log_bytes += self.buf.len() as u64;
        if !building {
            index.meta = Some(Meta {
                root,
                block,
                group_depth: g,
            });
        }
        drop(index);
        self.buf.clear();
        store.maybe_roll(w)?;
        self.at = (w.seg, w.pos);
        Ok(())
    }

    /// Ends the load as block `block` with root `root` (not checked here: verify the tree
    /// through a trie over the store) and syncs it; leaves the index's sizes for the next
    /// open (the `index-sizes` file).
    pub fn finish(mut self, root: Hash32, block: u64) -> Result<Meta, LogError> {
        self.checkpoint(root, block, false)?;
        self.store.sync()?;
        sizes::write(
            &self.store.inner.dir,
            sizes::Sizes::of(&self.store.index()),
            block,
        );
        self.store.meta = self.store.stored_meta();
        Ok(self.store.meta)
    }
}

impl NodeStore for LogStore {
    type Error = LogError;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, LogError> {
        {
            let mut warm = self.warm();
            if warm.root == self.meta.root
                && let Some(blob) = warm.blobs.remove(key)
            {
                return Ok(Some(blob));
            }
        }
        if let Some(blob) = self.recent_blob(key) {
            return Ok(Some(blob));
        }
        LogStore::get_node(self, key)
    }

    fn apply(&mut self, commit: &CommitSet) -> Result<(), LogError> {
        let block = self.meta.block;
        self.write_block(commit, block, &[])
    }

    fn explain_mismatch(&self) -> Option<LogError> {
        let stored = self.stored_meta();
        (stored != self.meta).then(|| self.conflict(stored))
    }
}

#[cfg(test)]
mod tests;
