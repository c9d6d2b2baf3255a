//! How a store is opened: durability, sizes, page size, read-only.

/// How hard a commit pushes data to the disk. Named `durable`, `flush` and `relaxed` on command
/// lines and in results files (features `clap` and `serde`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Durability {
    /// Every committed block survives a power loss: fsync on every commit (with a write buffer,
    /// an fdatasync of the journal; the flush to MDBX is synced too).
    #[default]
    Durable,
    /// Sync on flush: a committed block survives a process crash; a power loss rolls back to
    /// the last flush, never to a torn state. Without a write buffer every block is a flush
    /// (the same as `durable`).
    Flush,
    /// No fsync (MDBX `SAFE_NOSYNC`): a committed block survives a process crash, and an OS crash
    /// rolls back to some earlier committed block, never to a torn one. For benchmarks.
    Relaxed,
}

impl Durability {
    /// The name used on command lines and in results files: `durable`, `flush` or `relaxed`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Durable => "durable",
            Durability::Flush => "flush",
            Durability::Relaxed => "relaxed",
        }
    }
}

/// How to open or create a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Group depth: required to match an existing database; used to create a new one
    /// (default [`DEFAULT_GROUP_DEPTH`](crate::DEFAULT_GROUP_DEPTH)).
    pub group_depth: Option<u8>,
    /// Page size of a new database, a power of two in 4096..=65536 (default: MDBX's, the OS page);
    /// given for an existing database, it must be that database's (refused otherwise).
    pub page_size: Option<usize>,
    /// Commit durability.
    pub durability: Durability,
    /// Journal every block (one append and fdatasync) and commit it to MDBX without an fsync,
    /// syncing MDBX once the buffer's blocks or bytes are reached (`None`, the default: every
    /// block is an MDBX transaction synced as `durability` says). A buffered writer excludes
    /// every other writer of the database ([`StoreError::Locked`](crate::StoreError::Locked)).
    pub buffer: Option<crate::BufferOptions>,
    /// Largest the data file may grow, bytes (default 1 TiB). A commit that does not fit fails
    /// with [`StoreError::MapFull`](crate::StoreError::MapFull) and leaves the database at its last block.
    pub max_size: Option<usize>,
    /// Growth step of the data file, bytes (default MDBX's).
    pub growth_step: Option<usize>,
    /// Create the database if it does not exist (default true). Ignored with `read_only`.
    pub create: bool,
    /// Open read-only (default false): nothing is ever created, formatted or written, the file
    /// may be on a read-only mount or owned by another user, and the store coexists with a
    /// writer of any durability. [`StateStore::write_block`](crate::StateStore::write_block) and [`StateStore::bulk_load`](crate::StateStore::bulk_load)
    /// fail with [`StoreError::ReadOnly`](crate::StoreError::ReadOnly).
    pub read_only: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            group_depth: None,
            page_size: None,
            durability: Durability::Durable,
            buffer: None,
            max_size: None,
            growth_step: None,
            create: true,
            read_only: false,
        }
    }
}
