//! The store's errors, and how MDBX and I/O errors map to them.

use crate::*;

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
    /// The filesystem holding the database has too little space for MDBX to open it: MDBX
    /// maps its lock file (`mdbx.lck`) into memory, and a page of it that the filesystem cannot
    /// back kills the process (SIGBUS) instead of failing a call. Checked before the open when
    /// the lock file is missing or not wholly allocated; nothing was written.
    #[error(
        "{dir}: only {free} bytes are free on its filesystem, too little to open it (MDBX maps \
         its lock file into memory, and a page the filesystem cannot back would kill the \
         process): free at least 1 MiB and open it again; nothing was written"
    )]
    NoRoomToOpen {
        /// The database directory.
        dir: PathBuf,
        /// The bytes free on its filesystem.
        free: u64,
    },
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
    /// The database was not closed cleanly (a writer with relaxed durability or a write buffer
    /// was killed between syncs): MDBX must roll it back to its last durable commit, which only an open for
    /// writing does. Read-only opens refuse it; the next open for writing recovers it.
    #[error(
        "{0} was not closed cleanly (a writer that commits without an MDBX sync, relaxed or \
         with a write buffer, was killed) and must be synced or rolled back by a writer first: \
         open it for writing once (`bintrie import --db DIR -i /dev/null` does only that, \
         replaying its journal if it has one), then read it; if that open fails too, the file \
         is damaged (a truncated copy, say): restore it or build it again"
    )]
    NeedsRecovery(PathBuf),
    /// A file exists at the path but is not a bintrie database (not MDBX, truncated, or an
    /// MDBX file without this project's tables). Nothing was written to it (MDBX's attempt to
    /// open it may have left its lock file, `mdbx.lck`, beside it: removing that could break
    /// another process's open of the same directory, so it stays).
    #[error(
        "{path} is not a bintrie database ({reason}); refusing to use it, and it was not changed"
    )]
    NotADatabase {
        /// The data file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// A writer's open would create a database in a directory that holds the log layout's
    /// segments (`log.NNNNNN`): a state of the other layout, made before this open or beside
    /// it by another process. Nothing was created.
    #[error(
        "{0} holds a state in the log layout (log.NNNNNN segments): an MDBX database is not \
         made beside it, and nothing was written"
    )]
    OtherLayout(PathBuf),
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
    /// A reader that must read the block this handle holds ([`crate::StateStore::reader_at_meta`])
    /// found the database at another root: another writer committed since the handle read its
    /// meta, and reading on would mix two blocks. Nothing was read.
    #[error(
        "the database moved on under this handle: it is at block {stored_block} (root \
         {stored_root}), this handle reads block {expected_block} (root {expected_root}); is \
         another process writing to it? Open the database again to read its newer block"
    )]
    Moved {
        /// The block the database holds now.
        stored_block: u64,
        /// Its root, hex.
        stored_root: String,
        /// The block this handle holds.
        expected_block: u64,
        /// Its root, hex.
        expected_root: String,
    },
    /// Another writer holds the database, and one of the two buffers its writes (a buffered
    /// writer must be the only writer). Nothing was written.
    #[error(
        "{0} is being written by another writer, and one of the two has a write buffer (as \
         `import` and `import --bulk` have by default), which must be the only writer; wait \
         for it to finish"
    )]
    Locked(PathBuf),
    /// A block written below the last committed one: block numbers never go back (one may
    /// repeat). Nothing was written.
    #[error("block {block} is below the last committed block {last}")]
    BlockOrder {
        /// The block asked for.
        block: u64,
        /// The last committed block.
        last: u64,
    },
    /// The database is already open in this process: MDBX opens one database once per
    /// process (its lock on the files is per process). Clone the open [`crate::StateStore`]
    /// (cheap: the clones share it) instead of opening it again. (MDBX says the same when
    /// another program holds the database exclusively, which this project never does.)
    #[error(
        "{0} is already open in this process (MDBX opens a database once per process), or \
         another program holds it exclusively: use the open handle, or a clone of it, instead \
         of opening it again"
    )]
    OpenInProcess(PathBuf),
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
