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
//! [`StateStore`] is the trie's [`NodeStore`]: [`StateStore::write_block`] writes a commit's
//! blobs, removed paths, flat stems, code and the new meta in ONE write transaction, so a crash
//! at any instant leaves the previous block intact. [`Reader`] is one read transaction (a
//! consistent snapshot) with the two read paths, the trie walk and the flat table, counted.

#![forbid(unsafe_code)]

mod evict;
mod reader;
mod verify;

pub use evict::evict_page_cache;
pub use reader::{ReadPath, ReadStats, Reader};
pub use verify::VerifyReport;

use bintrie_node::{Hash32, PathKey, STEM_TAG, ZERO_HASH};
use bintrie_trie::{CommitSet, NodeStore};
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

/// How hard a commit pushes data to the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync on every commit: a committed block survives a power loss.
    #[default]
    Durable,
    /// No fsync (MDBX `SAFE_NOSYNC`): a committed block survives a process crash, and an OS crash
    /// rolls back to some earlier committed block, never to a torn one. For benchmarks.
    Relaxed,
}

/// How to open or create a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Group depth: required to match an existing database; used to create a new one
    /// (default [`DEFAULT_GROUP_DEPTH`]).
    pub group_depth: Option<u8>,
    /// Page size of a new database, a power of two in 4096..=65536 (default: MDBX's, the OS page).
    pub page_size: Option<usize>,
    /// Commit durability.
    pub durability: Durability,
    /// Largest the data file may grow, bytes (default 1 TiB). A commit that does not fit fails
    /// with [`StoreError::MapFull`] and leaves the database at its last block.
    pub max_size: Option<usize>,
    /// Growth step of the data file, bytes (default MDBX's).
    pub growth_step: Option<usize>,
    /// Create the database if it does not exist (default true). Ignored with `read_only`.
    pub create: bool,
    /// Open read-only (default false): nothing is ever created, formatted or written, the file
    /// may be on a read-only mount or owned by another user, and the store coexists with a
    /// writer of any durability. [`StateStore::write_block`] and [`StateStore::bulk_load`]
    /// fail with [`StoreError::ReadOnly`].
    pub read_only: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            group_depth: None,
            page_size: None,
            durability: Durability::Durable,
            max_size: None,
            growth_step: None,
            create: true,
            read_only: false,
        }
    }
}

/// The committed state's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Root of the last committed block (zero for an empty tree).
    pub root: Hash32,
    /// Number of the last committed block (0 before any).
    pub block: u64,
    /// Group depth the nodes are stored at.
    pub group_depth: u8,
    /// Format version.
    pub format: u32,
    /// MDBX page size in bytes.
    pub page_size: u32,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// MDBX reported an error.
    #[error("mdbx: {0}")]
    Mdbx(libmdbx::Error),
    /// The commit did not fit the configured maximum size; the database is still at its last
    /// committed block.
    #[error(
        "the database is full (its maximum size is reached); the last committed block is intact: \
         reopen with a larger max size"
    )]
    MapFull,
    /// The filesystem holding the database has no space left; the commit was not written and
    /// the database is still at its last committed block.
    #[error("no space left on the disk holding the database; the last committed block is intact")]
    DiskFull,
    /// The database was created with another group depth.
    #[error("the database stores group depth {stored}, {requested} was asked for")]
    GroupDepthMismatch {
        /// Group depth in the database.
        stored: u8,
        /// Group depth asked for.
        requested: u8,
    },
    /// The database has another format version.
    #[error("unsupported database format {0} (this build reads format {FORMAT_VERSION})")]
    Format(u32),
    /// No database at the path and `create` was false (or the store was opened read-only).
    #[error("no bintrie database at {0}")]
    NotFound(PathBuf),
    /// A file exists at the path but is not a bintrie database (not MDBX, truncated, or an
    /// MDBX file without this project's tables). Nothing was written to it.
    #[error(
        "{path} is not a bintrie database ({reason}); refusing to use it, and nothing was written"
    )]
    NotADatabase {
        /// The data file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// Another writer committed since this store read its meta: committing would build on a
    /// state that is no longer the database's. Nothing was written.
    #[error(
        "the database changed under this writer: it is at block {stored_block} (root {stored_root}), \
         this writer built on block {expected_block} (root {expected_root}); is another process \
         writing to it? Nothing was written"
    )]
    Conflict {
        /// The block the database holds now.
        stored_block: u64,
        /// Its root, hex.
        stored_root: String,
        /// The block this writer started from.
        expected_block: u64,
        /// Its root, hex.
        expected_root: String,
    },
    /// A write was attempted through a store opened read-only.
    #[error("the database was opened read-only")]
    ReadOnly,
    /// A metadata record or a stored value is malformed.
    #[error("corrupt database: {0}")]
    Corrupt(String),
    /// Invalid options.
    #[error("invalid option: {0}")]
    Options(String),
    /// Filesystem error.
    #[error("{0}")]
    Io(std::io::Error),
}

impl From<libmdbx::Error> for StoreError {
    fn from(e: libmdbx::Error) -> Self {
        map_err(e)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            StoreError::DiskFull
        } else {
            StoreError::Io(e)
        }
    }
}

/// `0x`-prefixed lower-case hex, for messages and output.
pub(crate) use alloy_primitives::hex::encode_prefixed as hex;

pub(crate) fn map_err(e: libmdbx::Error) -> StoreError {
    match e {
        libmdbx::Error::MapFull => StoreError::MapFull,
        libmdbx::Error::Other(code) if code == libc::ENOSPC => StoreError::DiskFull,
        libmdbx::Error::IoError(io) if io.raw_os_error() == Some(libc::ENOSPC) => {
            StoreError::DiskFull
        }
        other => StoreError::Mdbx(other),
    }
}

/// How MDBX writes: through file I/O, not the memory map. With a writable map, every page a
/// commit allocates is faulted in from disk before it is overwritten (a random read per dirty
/// page on a cold database).
pub(crate) type MapKind = NoWriteMap;

type RwTxn<'db> = libmdbx::Transaction<'db, libmdbx::RW, MapKind>;

/// The tables, opened in one write transaction.
struct Tables<'txn> {
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

fn u64_be(bytes: &[u8], what: &str) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("meta {what}: {} bytes", bytes.len())))?;
    Ok(u64::from_be_bytes(arr))
}

/// Reads the meta records in `txn`: `Ok(None)` when the database has none yet (a new one).
fn read_meta<K: libmdbx::TransactionKind>(
    txn: &libmdbx::Transaction<'_, K, MapKind>,
    mt: &libmdbx::Table<'_>,
) -> Result<Option<Meta>, StoreError> {
    let Some(g) = txn.get::<Vec<u8>>(mt, M_GROUP_DEPTH).map_err(map_err)? else {
        return Ok(None);
    };
    let get = |k: &[u8]| -> Result<Vec<u8>, StoreError> {
        txn.get::<Vec<u8>>(mt, k).map_err(map_err)?.ok_or_else(|| {
            StoreError::Corrupt(format!("meta {} missing", String::from_utf8_lossy(k)))
        })
    };
    let format = u64_be(&get(M_FORMAT)?, "format")?;
    if format != u64::from(FORMAT_VERSION) {
        return Err(StoreError::Format(
            u32::try_from(format).unwrap_or(u32::MAX),
        ));
    }
    let g = match g.as_slice() {
        [g] if (1..=8).contains(g) => *g,
        other => {
            return Err(StoreError::Corrupt(format!(
                "meta group depth {other:02x?} is not one byte in 1..8"
            )));
        }
    };
    let root: Hash32 = get(M_ROOT)?
        .try_into()
        .map_err(|_| StoreError::Corrupt("meta root is not 32 bytes".into()))?;
    let page_size = u64_be(&get(M_PAGE_SIZE)?, "page size")?;
    Ok(Some(Meta {
        root,
        block: u64_be(&get(M_BLOCK)?, "block")?,
        group_depth: g,
        format: FORMAT_VERSION,
        page_size: u32::try_from(page_size)
            .map_err(|_| StoreError::Corrupt(format!("meta page size {page_size}")))?,
    }))
}

/// An advisory lock (`flock`) on a database directory, held while a store is opened, so that
/// one process creating a database and another opening it never see a half-made file. Best
/// effort: where the filesystem has no `flock` (some network filesystems), opens go unlocked.
struct DirLock(#[allow(dead_code)] Option<std::fs::File>);

impl DirLock {
    /// Waits for the exclusive lock (a writer's open).
    fn exclusive(dir: &FsPath) -> Self {
        Self::take(dir, std::fs::File::lock)
    }

    /// Waits for a shared lock (a reader's open).
    fn shared(dir: &FsPath) -> Self {
        Self::take(dir, std::fs::File::lock_shared)
    }

    fn take(dir: &FsPath, lock: fn(&std::fs::File) -> std::io::Result<()>) -> Self {
        match std::fs::File::open(dir).and_then(|f| lock(&f).map(|()| f)) {
            Ok(f) => DirLock(Some(f)),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "opening without a directory lock");
                DirLock(None)
            }
        }
    }
}

/// Opens the environment read-only (`MDBX_RDONLY`, accepting the mode of a running writer) and
/// reads its meta: `None` for a valid MDBX environment that has no table yet (a database
/// being created). Never creates, formats or writes the data file.
fn open_read_only(dir: &FsPath) -> Result<(Database<MapKind>, Option<Meta>), StoreError> {
    let data = dir.join("mdbx.dat");
    let not_db = |reason: String| StoreError::NotADatabase {
        path: data.clone(),
        reason,
    };
    let db = Database::<MapKind>::open_with_options(
        dir,
        DatabaseOptions {
            max_tables: Some(8),
            max_readers: Some(256),
            no_rdahead: true,
            accede: true,
            mode: Mode::ReadOnly,
            ..Default::default()
        },
    )
    .map_err(|e| match e {
        libmdbx::Error::Invalid
        | libmdbx::Error::Corrupted
        | libmdbx::Error::NoData
        | libmdbx::Error::PageNotFound
        | libmdbx::Error::VersionMismatch
        | libmdbx::Error::WannaRecovery
        | libmdbx::Error::Problem
        | libmdbx::Error::Panic => not_db(format!("MDBX cannot open it: {e}")),
        libmdbx::Error::Other(code) if code == libc::ENODATA || code == libc::EINVAL => {
            not_db(format!("MDBX cannot open it: {e}"))
        }
        // Readers register in MDBX's reader table, in the lock file beside the data.
        libmdbx::Error::Access | libmdbx::Error::PermissionDenied => {
            StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "permission denied: reading {} needs read access to mdbx.dat and write \
                     access to mdbx.lck (MDBX's table of readers)",
                    dir.display()
                ),
            ))
        }
        other => map_err(other),
    })?;
    let meta = {
        let txn = db.begin_ro_txn().map_err(map_err)?;
        let mut missing = Vec::new();
        for t in [T_NODES, T_STEMS, T_CODE, T_META] {
            match txn.open_table(Some(t)) {
                Ok(_) => {}
                Err(libmdbx::Error::NotFound) => missing.push(t),
                Err(e) => return Err(map_err(e)),
            }
        }
        if missing.len() == 4 {
            // A valid MDBX environment without any table: one whose creation has not
            // committed its first transaction yet (another process is creating it, or one
            // was killed doing so). It holds no data.
            None
        } else if let Some(t) = missing.first() {
            return Err(not_db(format!("no `{t}` table")));
        } else {
            let mt = txn.open_table(Some(T_META)).map_err(map_err)?;
            Some(read_meta(&txn, &mt)?.ok_or_else(|| not_db("its meta table is empty".into()))?)
        }
    };
    Ok((db, meta))
}

impl StateStore {
    /// Opens the database in directory `dir`.
    ///
    /// - `options.read_only`: the database must exist ([`StoreError::NotFound`]); nothing is
    ///   created or written, see [`StoreOptions::read_only`].
    /// - otherwise a missing database is created (unless `options.create` is false); an
    ///   existing data file is first opened read-only and must be a bintrie database of this
    ///   format, else [`StoreError::NotADatabase`] and nothing is written (MDBX would otherwise
    ///   format a short file over). An existing database keeps its group depth: asking for
    ///   another is [`StoreError::GroupDepthMismatch`].
    pub fn open(dir: impl AsRef<FsPath>, options: &StoreOptions) -> Result<Self, StoreError> {
        let dir = dir.as_ref().to_path_buf();
        let data = dir.join("mdbx.dat");
        let exists = match std::fs::symlink_metadata(&data) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e.into()),
        };
        if let Some(g) = options.group_depth
            && !(1..=8).contains(&g)
        {
            return Err(StoreError::Options(format!("group depth {g} outside 1..8")));
        }
        if !exists && (options.read_only || !options.create) {
            return Err(StoreError::NotFound(dir));
        }
        let check_depth = |meta: &Meta| match options.group_depth {
            Some(req) if req != meta.group_depth => Err(StoreError::GroupDepthMismatch {
                stored: meta.group_depth,
                requested: req,
            }),
            _ => Ok(()),
        };
        if options.read_only {
            let _open_lock = DirLock::shared(&dir);
            let (db, meta) = open_read_only(&dir)?;
            let meta = meta.ok_or_else(|| StoreError::NotADatabase {
                path: data.clone(),
                reason: "an MDBX environment without tables: a database still being created".into(),
            })?;
            check_depth(&meta)?;
            return Ok(StateStore {
                inner: Arc::new(Inner {
                    db,
                    dir,
                    read_only: true,
                    warm: Default::default(),
                }),
                meta,
            });
        }
        // Opening for writing may create and format the data file. Two processes doing that
        // at once would each see the other's half-made file and call it "not a database";
        // opens are serialised by a lock on the directory, held until the tables exist.
        std::fs::create_dir_all(&dir)?;
        let _open_lock = DirLock::exclusive(&dir);
        let exists = exists || data.exists();
        if exists {
            // Validate before MDBX opens it for writing: never format over a file that is not
            // a database of this format.
            if let (_, Some(meta)) = open_read_only(&dir)? {
                check_depth(&meta)?;
            }
        }
        let page_size = match options.page_size {
            None => None,
            Some(p) if p.is_power_of_two() && (4096..=65536).contains(&p) => Some(PageSize::Set(p)),
            Some(p) => {
                return Err(StoreError::Options(format!(
                    "page size {p}: a power of two from 4096 to 65536"
                )));
            }
        };
        let open = |sync_mode: SyncMode| {
            Database::<MapKind>::open_with_options(
                &dir,
                DatabaseOptions {
                    max_tables: Some(8),
                    max_readers: Some(256),
                    page_size: page_size.clone(),
                    no_rdahead: true,
                    mode: Mode::ReadWrite(ReadWriteOptions {
                        sync_mode,
                        min_size: None,
                        max_size: Some(options.max_size.unwrap_or(1 << 40) as isize),
                        growth_step: options.growth_step.map(|g| g as isize),
                        shrink_threshold: None,
                    }),
                    ..Default::default()
                },
            )
        };
        let db = match options.durability {
            Durability::Durable => open(SyncMode::Durable),
            // The first process to open an environment sets its durability for all who join,
            // and a reader that got there first holds it durable: a relaxed writer then joins
            // durable (never weaker than asked) rather than fail.
            Durability::Relaxed => match open(SyncMode::SafeNoSync) {
                Err(libmdbx::Error::Incompatible) => {
                    let db = open(SyncMode::Durable);
                    if db.is_ok() {
                        tracing::warn!(
                            "another process holds the database open in durable mode: this \
                             writer's commits are durable too"
                        );
                    }
                    db
                }
                other => other,
            },
        }
        .map_err(|e| match e {
            libmdbx::Error::Incompatible => StoreError::Options(
                "another process has the database open for writing with another durability \
                 (durable vs relaxed); use the same, or wait for it to finish"
                    .into(),
            ),
            other => map_err(other),
        })?;
        let inner = Arc::new(Inner {
            db,
            dir,
            read_only: false,
            warm: Default::default(),
        });
        let meta = {
            let txn = inner.db.begin_rw_txn().map_err(map_err)?;
            for t in [T_NODES, T_STEMS, T_CODE, T_META] {
                txn.create_table(Some(t), TableFlags::default())
                    .map_err(map_err)?;
            }
            let mt = txn.open_table(Some(T_META)).map_err(map_err)?;
            let meta = match read_meta(&txn, &mt)? {
                Some(meta) => {
                    check_depth(&meta)?;
                    meta
                }
                None => {
                    let page = inner.db.stat().map_err(map_err)?.page_size();
                    let meta = Meta {
                        root: ZERO_HASH,
                        block: 0,
                        group_depth: options.group_depth.unwrap_or(DEFAULT_GROUP_DEPTH),
                        format: FORMAT_VERSION,
                        page_size: page,
                    };
                    put_meta(&txn, &mt, &meta)?;
                    meta
                }
            };
            txn.commit().map_err(map_err)?;
            meta
        };
        Ok(StateStore { inner, meta })
    }

    /// Opens an existing database read-only: `open` with [`StoreOptions::read_only`].
    pub fn open_read_only(dir: impl AsRef<FsPath>) -> Result<Self, StoreError> {
        Self::open(
            dir,
            &StoreOptions {
                read_only: true,
                ..Default::default()
            },
        )
    }

    /// True when this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

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

    /// Writes one block in one transaction: the commit's blobs and removals, the flat stem table
    /// for every stem blob in it, `code` (hash -> bytecode), and the meta (root, `block`). Either
    /// all of it becomes visible or none.
    pub fn write_block(
        &mut self,
        commit: &CommitSet,
        block: u64,
        code: &[(Hash32, Vec<u8>)],
    ) -> Result<(), StoreError> {
        self.block_txn(commit.root, block, |txn, t| {
            for key in commit.removed() {
                txn.del(&t.nodes, key.as_bytes(), None).map_err(map_err)?;
            }
            for (key, blob) in commit.nodes() {
                txn.put(&t.nodes, key.as_bytes(), blob, WriteFlags::UPSERT)
                    .map_err(map_err)?;
                if blob.first() == Some(&STEM_TAG) && blob.len() >= 32 {
                    txn.put(&t.stems, &blob[1..32], &blob[32..], WriteFlags::UPSERT)
                        .map_err(map_err)?;
                }
            }
            for (hash, bytecode) in code {
                txn.put(&t.code, hash, bytecode, WriteFlags::UPSERT)
                    .map_err(map_err)?;
            }
            Ok(())
        })
    }

    /// One write transaction for block `block` with root `root`: `body` writes the tables, then
    /// the meta is updated and the transaction committed. On any error nothing is written.
    fn block_txn(
        &mut self,
        root: Hash32,
        block: u64,
        body: impl FnOnce(&RwTxn<'_>, &Tables<'_>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if self.inner.read_only {
            return Err(StoreError::ReadOnly);
        }
        let txn = self.inner.db.begin_rw_txn().map_err(map_err)?;
        let tables = Tables {
            nodes: txn.open_table(Some(T_NODES)).map_err(map_err)?,
            stems: txn.open_table(Some(T_STEMS)).map_err(map_err)?,
            code: txn.open_table(Some(T_CODE)).map_err(map_err)?,
            meta: txn.open_table(Some(T_META)).map_err(map_err)?,
        };
        // One writer at a time: MDBX serialises write transactions, and this one must build on
        // the block this store last saw. Another process (or another handle) that committed
        // since makes this commit a lost update, so it is refused.
        let stored = read_meta(&txn, &tables.meta)?;
        let stored_at = stored
            .as_ref()
            .map_or((0, ZERO_HASH), |m| (m.block, m.root));
        if stored_at != (self.meta.block, self.meta.root) {
            return Err(self.conflict(stored));
        }
        let t = std::time::Instant::now();
        body(&txn, &tables).map_err(|e| self.disk_full_or(e))?;
        let body_time = t.elapsed();
        let meta = Meta {
            root,
            block,
            ..self.meta
        };
        put_meta(&txn, &tables.meta, &meta)?;
        let t = std::time::Instant::now();
        txn.commit().map_err(|e| self.disk_full_or(map_err(e)))?;
        tracing::debug!(block, ?body_time, commit_time = ?t.elapsed(), "block transaction");
        self.meta = meta;
        // Preloaded blobs belong to the previous block's tree.
        self.warm().blobs.clear();
        Ok(())
    }

    /// The error for a database found at `stored` (its meta; `None`: empty) when this handle
    /// builds on `self.meta`.
    fn conflict(&self, stored: Option<Meta>) -> StoreError {
        let (stored_block, stored_root) = stored.map_or((0, ZERO_HASH), |m| (m.block, m.root));
        StoreError::Conflict {
            stored_block,
            stored_root: hex(stored_root),
            expected_block: self.meta.block,
            expected_root: hex(self.meta.root),
        }
    }

    /// MDBX reports a write that failed for lack of space as an I/O error (EIO): when the
    /// filesystem holding the database has less than 1 MiB left, say so instead.
    fn disk_full_or(&self, e: StoreError) -> StoreError {
        let io_error = match &e {
            StoreError::Mdbx(libmdbx::Error::Io) => true,
            StoreError::Mdbx(libmdbx::Error::Other(code)) => *code == libc::EIO,
            StoreError::Mdbx(libmdbx::Error::IoError(io)) | StoreError::Io(io) => {
                io.raw_os_error() == Some(libc::EIO)
            }
            _ => false,
        };
        if io_error && free_bytes(&self.inner.dir).is_some_and(|free| free < 1 << 20) {
            StoreError::DiskFull
        } else {
            e
        }
    }

    fn warm(&self) -> std::sync::MutexGuard<'_, WarmSet> {
        // The map holds plain bytes; a panic while it was locked cannot leave it inconsistent.
        self.inner
            .warm
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Blobs preloaded by [`StateStore::warm_trie_paths`] that no trie load has taken yet.
    pub fn warm_blobs(&self) -> usize {
        self.warm().blobs.len()
    }

    /// Preloads, with `workers` threads each in its own read transaction, every group and stem
    /// blob on the root-to-stem paths of `stems`, so that a trie update touching them (through
    /// [`NodeStore::get_node`]) finds them in memory instead of on disk: a trie prefetcher, meant
    /// to run while the EVM executes. Workers stop early once `stop` is set (what they loaded is
    /// kept). Safe to call concurrently with readers; the blobs are dropped at the next commit.
    /// Returns the blobs and bytes preloaded.
    pub fn warm_trie_paths(
        &self,
        stems: &[bintrie_keys::Stem],
        workers: usize,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<ReadStats, StoreError> {
        if stems.is_empty() {
            return Ok(ReadStats::default());
        }
        let workers = workers.clamp(1, stems.len());
        let chunk = stems.len().div_ceil(workers);
        type Blobs = Vec<(Vec<u8>, Vec<u8>)>;
        let parts: Vec<Result<Blobs, StoreError>> = std::thread::scope(|s| {
            let handles: Vec<_> = stems
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        let reader = self.reader()?;
                        // The snapshot must be the tree this handle builds on.
                        let root = reader.root()?;
                        if root != self.meta.root {
                            return Err(StoreError::Conflict {
                                stored_block: reader.block()?,
                                stored_root: hex(root),
                                expected_block: self.meta.block,
                                expected_root: hex(self.meta.root),
                            });
                        }
                        let mut seen = std::collections::HashSet::new();
                        let mut out = Vec::new();
                        for stem in part {
                            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                                break;
                            }
                            reader.walk(stem, |key, blob| {
                                if seen.insert(key.to_vec()) {
                                    out.push((key.to_vec(), blob.to_vec()));
                                }
                            })?;
                        }
                        Ok(out)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(StoreError::Corrupt("warm-up worker panicked".into()))
                    })
                })
                .collect()
        });
        let mut stats = ReadStats::default();
        let mut warm = self.warm();
        if warm.root != self.meta.root {
            warm.blobs.clear();
            warm.root = self.meta.root;
        }
        for part in parts {
            for (key, blob) in part? {
                if let std::collections::hash_map::Entry::Vacant(e) = warm.blobs.entry(key) {
                    stats.lookups += 1;
                    stats.bytes += blob.len() as u64;
                    e.insert(blob);
                }
            }
        }
        Ok(stats)
    }

    /// Writes a whole tree into an empty database with sorted appends (MDBX `APPEND`), as block
    /// `block`. `commit` must hold every blob of the tree (the first commit of a fresh trie);
    /// use it through [`bintrie_trie::Trie::commit_with`].
    pub fn bulk_load(
        &mut self,
        commit: &CommitSet,
        block: u64,
        code: &[(Hash32, Vec<u8>)],
    ) -> Result<(), StoreError> {
        if self.meta.root != ZERO_HASH || self.meta.block != 0 {
            return Err(StoreError::Options(
                "bulk load needs an empty database".into(),
            ));
        }
        let mut nodes_sorted: Vec<(&PathKey, &[u8])> = commit.nodes().collect();
        nodes_sorted.sort_unstable_by_key(|e| *e.0);
        let mut flat: Vec<(&[u8], &[u8])> = nodes_sorted
            .iter()
            .filter(|(_, b)| b.first() == Some(&STEM_TAG) && b.len() >= 32)
            .map(|(_, b)| (&b[1..32], &b[32..]))
            .collect();
        flat.sort_unstable_by_key(|e| e.0);
        let mut code: Vec<_> = code.iter().collect();
        code.sort_unstable_by_key(|c| c.0);
        code.dedup_by_key(|c| c.0);
        self.block_txn(commit.root, block, |txn, t| {
            // Cursor appends: sorted keys go straight to the last leaf page, no tree descent.
            let mut cursor = txn.cursor(&t.nodes).map_err(map_err)?;
            for (key, blob) in nodes_sorted {
                cursor
                    .put(key.as_bytes(), blob, WriteFlags::APPEND)
                    .map_err(map_err)?;
            }
            let mut cursor = txn.cursor(&t.stems).map_err(map_err)?;
            for (stem, rest) in flat {
                cursor
                    .put(stem, rest, WriteFlags::APPEND)
                    .map_err(map_err)?;
            }
            for (hash, bytecode) in code {
                txn.put(&t.code, hash, bytecode, WriteFlags::APPEND)
                    .map_err(map_err)?;
            }
            Ok(())
        })
    }

    /// Calls `f(key, blob)` for every stored node in key order, in one read transaction.
    pub fn for_each_node(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        let txn = self.inner.db.begin_ro_txn().map_err(map_err)?;
        let nodes = txn.open_table(Some(T_NODES)).map_err(map_err)?;
        let mut cursor = txn.cursor(&nodes).map_err(map_err)?;
        for item in cursor.iter_start::<std::borrow::Cow<'_, [u8]>, std::borrow::Cow<'_, [u8]>>() {
            let (k, v) = item.map_err(map_err)?;
            f(&k, &v);
        }
        Ok(())
    }

    /// Number of entries in (nodes, stems, code), in one snapshot.
    pub fn counts(&self) -> Result<(u64, u64, u64), StoreError> {
        self.reader()?.counts()
    }

    /// Size of the data file in bytes.
    pub fn file_size(&self) -> Result<u64, StoreError> {
        Ok(std::fs::metadata(self.inner.dir.join("mdbx.dat"))?.len())
    }
}

/// Bytes available to an unprivileged writer on the filesystem holding `dir`.
fn free_bytes(dir: &FsPath) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

fn put_meta(
    txn: &libmdbx::Transaction<'_, libmdbx::RW, MapKind>,
    mt: &libmdbx::Table<'_>,
    meta: &Meta,
) -> Result<(), StoreError> {
    let f = WriteFlags::UPSERT;
    txn.put(mt, M_ROOT, meta.root, f).map_err(map_err)?;
    txn.put(mt, M_BLOCK, meta.block.to_be_bytes(), f)
        .map_err(map_err)?;
    txn.put(mt, M_GROUP_DEPTH, [meta.group_depth], f)
        .map_err(map_err)?;
    txn.put(mt, M_FORMAT, (meta.format as u64).to_be_bytes(), f)
        .map_err(map_err)?;
    txn.put(mt, M_PAGE_SIZE, (meta.page_size as u64).to_be_bytes(), f)
        .map_err(map_err)?;
    Ok(())
}

impl NodeStore for StateStore {
    type Error = StoreError;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, StoreError> {
        {
            let mut warm = self.warm();
            // Blobs read at another root are never served: they may be stale.
            if warm.root == self.meta.root
                && let Some(blob) = warm.blobs.remove(key.as_bytes())
            {
                return Ok(Some(blob));
            }
        }
        let txn = self.inner.db.begin_ro_txn().map_err(map_err)?;
        // The blob must come from the tree this handle builds on. If another process has
        // committed since, the trie would find a blob that does not hash to what its parent
        // holds and call it corruption; say what it is instead.
        let meta = txn.open_table(Some(T_META)).map_err(map_err)?;
        let root = txn.get::<Vec<u8>>(&meta, M_ROOT).map_err(map_err)?;
        if root.as_deref().unwrap_or(&ZERO_HASH) != self.meta.root {
            return Err(self.conflict(read_meta(&txn, &meta)?));
        }
        let nodes = txn.open_table(Some(T_NODES)).map_err(map_err)?;
        txn.get(&nodes, key.as_bytes()).map_err(map_err)
    }

    /// Writes the commit as the next block (meta block + 1), without code.
    fn apply(&mut self, commit: &CommitSet) -> Result<(), StoreError> {
        let next = self.meta.block + 1;
        self.write_block(commit, next, &[])
    }
}
