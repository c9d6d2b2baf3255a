//! What the adapter reads: [`StateSnapshot`] (flat stem reads and code by hash from one
//! consistent snapshot) and [`StateBackend`] (opens snapshots, one per reader thread).
//!
//! Implementations: the MDBX store ([`MdbxBackend`] / [`MdbxSnapshot`], feature `mdbx`), the
//! appending log (`LogBackend` / `LogSnapshot`, feature `logstore`), the in-memory state ([`crate::MemoryState`] /
//! [`crate::MemorySnapshot`]) and a block witness ([`crate::StatelessBackend`]).

use crate::StateError;
use alloy_primitives::{B256, Bytes};
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::StemValues;
use revm::bytecode::Bytecode;
use std::sync::Arc;

/// Lookups and bytes a snapshot's storage served (zero for a backend that does not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotIo {
    /// Storage lookups (MDBX gets for the MDBX store).
    pub lookups: u64,
    /// Bytes those lookups returned.
    pub bytes: u64,
}

/// What [`StateSnapshot::stems_batch`] read.
#[derive(Debug, Default)]
pub struct StemsBatch {
    /// The values of each stem asked for, in order (`None`: absent).
    pub values: Vec<Option<StemValues>>,
    /// Every code hash `code_of` named, once, with the code stored under it (`None`: none)
    /// as [`crate::decode_code`] checks and decodes it: decoding as the reads arrive keeps
    /// that work beside the reads still in flight.
    pub codes: Vec<(B256, Option<Result<Bytecode, StateError>>)>,
}

/// One consistent view of the state: every read answers from the same committed block, whatever
/// is committed meanwhile.
///
/// Contract: `stem` returns the stem's present values exactly as the tree holds them (`None`
/// when the stem is absent; a present zero value is present); `code` returns the bytes stored
/// under a code hash, unchecked (the adapter checks that they hash to it). Errors are I/O or
/// corruption, never "absent"; a snapshot that holds only part of the state (a witness) says
/// "not held" with an error for which [`StateError::is_not_held`] is true, and a prefetch
/// then leaves that key to be read on demand. `Send + Sync`, so a [`crate::TrieDb`] over it
/// can be shared.
pub trait StateSnapshot: Send + Sync {
    /// The values of `stem`, or `None` when the tree has no such stem.
    fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError>;

    /// The bytecode stored under `hash`, or `None` when there is none.
    fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError>;

    /// `Ok` when this snapshot can answer for `key`'s leaf. A full state always can (the
    /// default); a stateless snapshot over a witness only for the leaves the witness proves,
    /// and says which part is missing otherwise. [`crate::BlockDb`] asks before every account
    /// and storage read, so a value a witness does not prove is never taken for absent.
    fn check_leaf(&self, _key: &TreeKey) -> Result<(), StateError> {
        Ok(())
    }

    /// The values of many stems at once, in order, and the code they lead to, when this
    /// snapshot has a faster path for a batch than one [`StateSnapshot::stem`] and
    /// [`StateSnapshot::code`] call each (the log layout keeps every read in flight from one
    /// io_uring). As each present stem arrives, `code_of(i, Some(values))` names the code hash
    /// to read for `stems[i]`, if any; each hash named is read once, its read overlapping the
    /// stems still in flight. Each absent stem is reported as `code_of(i, None)` as soon as it
    /// is known to be absent (what that call returns is ignored). The values come back one per
    /// stem asked for, in order: another count is refused as [`StateError::Backend`], and a
    /// `code_of` index past the stems is ignored. `None` (the default): no
    /// batch path; the caller reads them one by one, from several threads. A snapshot that
    /// has one says so in [`StateSnapshot::has_batch_path`]: [`crate::BlockDb`] asks that
    /// first.
    fn stems_batch(
        &self,
        _stems: &[Stem],
        _code_of: &mut dyn FnMut(usize, Option<&StemValues>) -> Option<B256>,
    ) -> Option<Result<StemsBatch, StateError>> {
        None
    }

    /// True when [`StateSnapshot::stems_batch`] is expected to read (it may still return
    /// `None`, for example where the kernel refuses an io_uring). [`crate::BlockDb`] uses the
    /// batch path only then, and can then stream a prefetch into execution
    /// ([`crate::BlockDb::prefetch_streaming`]). Default: false.
    fn has_batch_path(&self) -> bool {
        false
    }

    /// The lookups and bytes this snapshot has read so far (default: not counted, zero).
    fn io(&self) -> SnapshotIo {
        SnapshotIo::default()
    }
}

/// A source of [`StateSnapshot`]s: the state as of the last committed block.
///
/// Contract: every snapshot opened between two commits sees the same state; a backend whose
/// store another writer has moved past refuses a new snapshot rather than open one of the newer
/// block (MDBX: [`bintrie_store::StoreError::Moved`]; the log's snapshots fail their reads). The parallel
/// prefetch of [`crate::BlockDb`] opens one snapshot per worker thread, hence `Sync`.
pub trait StateBackend: Sync {
    /// The snapshot type.
    type Snapshot: StateSnapshot;

    /// Opens a snapshot of the last committed block.
    fn snapshot(&self) -> Result<Self::Snapshot, StateError>;
}

impl<B: StateBackend + ?Sized> StateBackend for &B {
    type Snapshot = B::Snapshot;

    fn snapshot(&self) -> Result<Self::Snapshot, StateError> {
        (**self).snapshot()
    }
}

impl<B: StateBackend + Send + ?Sized> StateBackend for Arc<B> {
    type Snapshot = B::Snapshot;

    fn snapshot(&self) -> Result<Self::Snapshot, StateError> {
        (**self).snapshot()
    }
}

#[cfg(feature = "mdbx")]
pub use mdbx::{MdbxBackend, MdbxSnapshot};

#[cfg(feature = "mdbx")]
mod mdbx {
    use super::{SnapshotIo, StateBackend, StateSnapshot};
    use crate::StateError;
    use alloy_primitives::{B256, Bytes};
    use bintrie_keys::Stem;
    use bintrie_node::StemValues;
    use bintrie_store::{ReadPath, Reader, StateStore};
    use std::sync::{Mutex, MutexGuard};

    /// The MDBX store as a [`StateBackend`]: snapshots are MDBX read transactions that find
    /// stems by `read_path`, each of the block the store handle holds (its meta). Once another
    /// writer has committed past it, a new snapshot is an error
    /// ([`bintrie_store::StoreError::Moved`]), never a read of the newer block: one block's
    /// prefetch workers (each with its own snapshot) and its own reads see one state.
    #[derive(Clone, Copy, Debug)]
    pub struct MdbxBackend<'s> {
        store: &'s StateStore,
        read_path: ReadPath,
    }

    impl<'s> MdbxBackend<'s> {
        /// Reads from `store`, finding stems by `read_path`.
        pub fn new(store: &'s StateStore, read_path: ReadPath) -> Self {
            MdbxBackend { store, read_path }
        }

        /// The store.
        pub fn store(&self) -> &'s StateStore {
            self.store
        }

        /// How stems are found.
        pub fn read_path(&self) -> ReadPath {
            self.read_path
        }
    }

    impl<'s> StateBackend for MdbxBackend<'s> {
        type Snapshot = MdbxSnapshot<'s>;

        fn snapshot(&self) -> Result<MdbxSnapshot<'s>, StateError> {
            MdbxSnapshot::new(self.store, self.read_path)
        }
    }

    /// One MDBX read transaction ([`Reader`]) and a read path, as a [`StateSnapshot`]. The
    /// reader sits behind a mutex so the snapshot is `Sync`: concurrent reads through one
    /// snapshot take turns (give each thread its own for parallel reads).
    pub struct MdbxSnapshot<'s> {
        reader: Mutex<Reader<'s>>,
        read_path: ReadPath,
    }

    impl std::fmt::Debug for MdbxSnapshot<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("MdbxSnapshot")
                .field("read_path", &self.read_path)
                .field("io", &self.io())
                .finish_non_exhaustive()
        }
    }

    impl<'s> MdbxSnapshot<'s> {
        /// A new read transaction of `store` at the block the handle holds
        /// ([`StateStore::reader_at_meta`]: an error if the database has moved on since),
        /// finding stems by `read_path`.
        pub fn new(store: &'s StateStore, read_path: ReadPath) -> Result<Self, StateError> {
            Ok(MdbxSnapshot {
                reader: Mutex::new(store.reader_at_meta()?),
                read_path,
            })
        }

        /// How stems are found.
        pub fn read_path(&self) -> ReadPath {
            self.read_path
        }

        /// The read transaction's own counters.
        pub fn store_stats(&self) -> bintrie_store::ReadStats {
            self.reader().stats()
        }

        fn reader(&self) -> MutexGuard<'_, Reader<'s>> {
            // A panic while holding the lock cannot leave a read transaction inconsistent.
            self.reader.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl StateSnapshot for MdbxSnapshot<'_> {
        fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
            Ok(self.reader().get_stem(stem, self.read_path)?)
        }

        fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError> {
            Ok(self.reader().get_code(&hash.0)?.map(Bytes::from))
        }

        fn io(&self) -> SnapshotIo {
            let s = self.store_stats();
            SnapshotIo {
                lookups: s.lookups,
                bytes: s.bytes,
            }
        }
    }
}
