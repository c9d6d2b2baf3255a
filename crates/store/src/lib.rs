//! MDBX state store for the EIP-7864 binary trie.
//!
//! One MDBX environment holds four tables:
//!
//! | table   | key                       | value                                         |
//! |---------|---------------------------|-----------------------------------------------|
//! | `nodes` | path key (SPEC §5)        | group blob or stem blob, as the trie commits  |
//! | `stems` | stem (31 bytes)           | the stem's bitmap and present values          |
//! | `code`  | code hash (32 bytes)      | bytecode                                      |
//! | `meta`  | name                      | root, block, group depth, format, page size   |
//!
//! `meta` also holds `check` (the root with a CRC-32) and, while a sorted build is under way,
//! `building`.
//!
//! [`StateStore`] is the trie's [`NodeStore`]: [`StateStore::write_block`] writes a commit's
//! blobs, removed paths, flat stems, code and the new meta in ONE write transaction, so a crash
//! at any instant leaves the previous block intact. [`Reader`] is one read transaction (a
//! consistent snapshot) with the two read paths, the trie walk and the flat table, counted.

#![forbid(unsafe_code)]

mod buffer;
mod error;
mod evict;
mod meta;
mod open;
mod options;
mod preload;
mod reader;
mod shape;
mod sort;
mod verify;
mod write;

/// Whether `name` is the name of a file a database directory holds: MDBX's data and lock
/// files (`mdbx.dat`, `mdbx.lck`) and the write journal.
pub fn is_store_file_name(name: &std::ffi::OsStr) -> bool {
    name == "mdbx.dat" || name == "mdbx.lck" || name == buffer::JOURNAL
}

pub use buffer::BufferOptions;
pub use error::StoreError;
pub(crate) use error::map_err;
pub use evict::{WarmBranches, evict_page_cache, warm_branch_pages};
pub use meta::Meta;
pub(crate) use meta::{put_meta, read_meta};
pub use open::{remove_if_empty, remove_made};
pub use options::{Durability, StoreOptions};
pub use reader::{ReadPath, ReadStats, Reader};
pub use shape::Shape;
pub use sort::{ExternalSort, SortedWrites, stems_of};
pub use verify::VerifyReport;
pub use write::free_bytes;

use bintrie_keys::Stem;
use bintrie_node::{Hash32, PathKey, StemValues, ZERO_HASH, split_stem_blob};
use bintrie_trie::{CommitSet, NodeStore, SortedBuild};
use libmdbx::{
    Database, DatabaseOptions, Mode, NoWriteMap, PageSize, ReadWriteOptions, SyncMode, TableFlags,
    WriteFlags,
};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

/// The on-disk format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Group depth of a new database when none is asked for.
pub const DEFAULT_GROUP_DEPTH: u8 = 5;

pub(crate) const T_NODES: &str = "nodes";
pub(crate) const T_STEMS: &str = "stems";
pub(crate) const T_CODE: &str = "code";
pub(crate) const T_META: &str = "meta";

const M_ROOT: &[u8] = b"root";
const M_BLOCK: &[u8] = b"block";
const M_GROUP_DEPTH: &[u8] = b"group_depth";
const M_FORMAT: &[u8] = b"format";
const M_PAGE_SIZE: &[u8] = b"page_size";
/// Present while a sorted build that spans several transactions is under way: a database
/// holding it is refused on open (its tables are partial).
const M_BUILDING: &[u8] = b"building";

/// `0x`-prefixed lower-case hex, for messages and output.
pub(crate) use alloy_primitives::hex::encode_prefixed as hex;

/// How MDBX writes: through file I/O, not the memory map. With a writable map, every page a
/// commit allocates is faulted in from disk before it is overwritten (a random read per dirty
/// page on a cold database).
pub(crate) type MapKind = NoWriteMap;

pub(crate) type RwTxn<'db> = libmdbx::Transaction<'db, libmdbx::RW, MapKind>;

/// The tables, opened in one write transaction.
pub(crate) struct Tables<'txn> {
    nodes: libmdbx::Table<'txn>,
    stems: libmdbx::Table<'txn>,
    code: libmdbx::Table<'txn>,
    meta: libmdbx::Table<'txn>,
}

pub(crate) struct Inner {
    pub(crate) db: Database<MapKind>,
    pub(crate) dir: PathBuf,
    pub(crate) read_only: bool,
    /// Node blobs preloaded by [`StateStore::warm_trie_paths`], by path key, tagged with the
    /// root of the snapshot they were read from; [`NodeStore::get_node`] takes from here first,
    /// and only while its own root is that one. Cleared by every commit.
    pub(crate) warm: std::sync::Mutex<WarmSet>,
    /// What a buffered writer committed since its last sync.
    pub(crate) pending: std::sync::Mutex<buffer::Pending>,
    /// A writer's journal (locked: exclusive with a write buffer, shared without).
    pub(crate) journal: std::sync::Mutex<Option<buffer::Journal>>,
    /// How this handle was opened.
    pub(crate) options: StoreOptions,
}

/// Preloaded node blobs and the root of the snapshot they were read at.
#[derive(Default)]
pub(crate) struct WarmSet {
    root: Hash32,
    blobs: std::collections::HashMap<Vec<u8>, Vec<u8>>,
}

/// An open state database. Cloning is cheap (shared environment).
///
/// Contract: one process writes at a time (MDBX serialises writers); any number of [`Reader`]s
/// see consistent snapshots while a writer commits.
#[derive(Clone)]
pub struct StateStore {
    pub(crate) inner: Arc<Inner>,
    meta: Meta,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.inner.dir)
            .field("meta", &self.meta)
            .finish()
    }
}

impl StateStore {
    /// The metadata of the last committed block.
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// The database directory.
    pub fn dir(&self) -> &FsPath {
        &self.inner.dir
    }

    /// A read transaction: a consistent snapshot of the last committed block, with counters.
    pub fn reader(&self) -> Result<Reader<'_>, StoreError> {
        Reader::new(self)
    }

    /// A read transaction of the tree this handle holds (the root of [`StateStore::meta`]):
    /// [`StoreError::Moved`] if another writer has committed another root since this handle
    /// read its meta (a reader's handle, or a writer's that another process moved past). The
    /// readers of one block (its prefetch workers each take their own) take their
    /// transactions here, so that none of them answers from a newer block than the others.
    /// Costs one lookup more than [`StateStore::reader`].
    pub fn reader_at_meta(&self) -> Result<Reader<'_>, StoreError> {
        let reader = self.reader()?;
        let root = reader.root_or_empty()?;
        if root == self.meta.root {
            return Ok(reader);
        }
        Err(StoreError::Moved {
            stored_block: reader.block_or_zero()?,
            stored_root: hex(root),
            expected_block: self.meta.block,
            expected_root: hex(self.meta.root),
        })
    }

    /// Calls `f(key, blob)` for every stored node in key order, in one read transaction.
    pub fn for_each_node(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        self.reader()?.for_each(T_NODES, |k, v| {
            f(k, v);
            Ok(())
        })
    }

    /// Calls `f(hash, bytecode)` for every entry of the code table in hash order, in one read
    /// transaction.
    pub fn for_each_code(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        self.reader()?.for_each(T_CODE, |k, v| {
            f(k, v);
            Ok(())
        })
    }

    /// Number of entries in (nodes, stems, code), in one snapshot.
    pub fn counts(&self) -> Result<(u64, u64, u64), StoreError> {
        self.reader()?.counts()
    }

    /// The block a power loss cannot take back: every committed block with
    /// [`Durability::Durable`], the last flushed one with [`Durability::Flush`]; `None` with
    /// [`Durability::Relaxed`] (MDBX syncs only when it must) and for read-only handles (the
    /// writer's durability is unknown to them). A process crash loses no committed block in
    /// any mode.
    pub fn durable_block(&self) -> Option<u64> {
        if self.inner.read_only {
            return None;
        }
        match self.inner.options.durability {
            Durability::Durable => Some(self.meta.block),
            Durability::Flush => Some(self.flushed_block()),
            Durability::Relaxed => None,
        }
    }

    /// The block of the last flush (MDBX's last sync): a power loss rolls MDBX back to it, and
    /// the journal holds the blocks after it.
    /// Without a write buffer every commit is its own flush: the last committed block.
    pub fn flushed_block(&self) -> u64 {
        match self.inner.options.buffer {
            None => self.meta.block,
            Some(_) => self.pending().synced.map_or(0, |m| m.block),
        }
    }

    /// The write journal as a writer opening this database would take it: the blocks past
    /// this handle's block that it holds (replayed by the next writer; empty without a
    /// journal), or the damage for which every writer would refuse the database
    /// ([`StoreError::Corrupt`]). A read-only handle's block is MDBX's last commit: past its
    /// last sync while a buffered writer runs (the journal's blocks up to it are then not
    /// listed), at it after a power loss.
    pub fn check_journal(&self) -> Result<Vec<u64>, StoreError> {
        buffer::blocks_past(&self.inner.dir, self.meta)
    }

    /// Blocks committed since the last flush.
    pub fn buffered_blocks(&self) -> u64 {
        self.pending().blocks
    }

    pub(crate) fn pending(&self) -> std::sync::MutexGuard<'_, buffer::Pending> {
        self.inner
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Size of the data file in bytes.
    pub fn file_size(&self) -> Result<u64, StoreError> {
        Ok(std::fs::metadata(self.inner.dir.join("mdbx.dat"))?.len())
    }
}
