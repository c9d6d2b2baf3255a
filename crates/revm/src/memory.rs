//! [`MemoryState`]: the binary-trie state in memory, no MDBX: flat stems and code in maps, and
//! a [`Trie`] over a [`MemoryStore`] for the root, all updated by the same [`BlockChanges`].

use crate::{
    BlockChanges, BlockDb, BlockDbOptions, BlockState, CommitReport, StateBackend, StateError,
    StateSnapshot, TrieDb, TriePrefetcher,
};
use alloy_primitives::{Address, B256, Bytes};
use bintrie_keys::{AccountState, Stem, TreeKey};
use bintrie_node::{PathKey, StemValues};
use bintrie_trie::{CommitSet, MemoryStore, NodeStore, Trie, TrieError, sort_dedup_last};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// An immutable snapshot of a [`MemoryState`]: shares its maps (cheap to clone, `'static`,
/// `Send + Sync`), unaffected by later commits. It is its own [`StateBackend`]: every snapshot
/// it opens is a clone of itself.
#[derive(Clone, Debug, Default)]
pub struct MemorySnapshot {
    stems: Arc<HashMap<Stem, StemValues>>,
    code: Arc<HashMap<B256, Bytes>>,
}

impl MemorySnapshot {
    /// Number of stems in the state.
    pub fn stem_count(&self) -> usize {
        self.stems.len()
    }
}

impl StateSnapshot for MemorySnapshot {
    fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
        Ok(self.stems.get(stem).cloned())
    }

    fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError> {
        Ok(self.code.get(hash).cloned())
    }
}

impl StateBackend for MemorySnapshot {
    type Snapshot = MemorySnapshot;

    fn snapshot(&self) -> Result<MemorySnapshot, StateError> {
        Ok(self.clone())
    }
}

/// The binary-trie state in memory: for tests, simulation and tools that do not want a
/// database. Flat stems and code are kept in maps (what revm reads, through
/// [`MemoryState::trie_db`] or [`MemoryState::block_db`]); the tree is a [`Trie`] over a
/// [`MemoryStore`] (what the root is computed from). [`MemoryState::commit_block`] updates both
/// with the same writes, so they always agree.
///
/// Snapshots share the maps; a commit while a snapshot is alive copies them once
/// (copy-on-write), so the snapshot keeps seeing the state it was opened at.
#[derive(Debug)]
pub struct MemoryState {
    flat: MemorySnapshot,
    trie: Trie<MemoryStore>,
    root: B256,
    block: u64,
}

impl MemoryState {
    /// An empty state (root zero, block 0) whose tree groups `group_depth` (1..=8) levels per
    /// stored blob (the root does not depend on it; 8 keeps the fewest nodes). Another depth is
    /// an error.
    pub fn new(group_depth: u8) -> Result<Self, StateError> {
        Ok(MemoryState {
            flat: MemorySnapshot::default(),
            trie: Trie::new(MemoryStore::new(), group_depth).map_err(backend)?,
            root: B256::ZERO,
            block: 0,
        })
    }

    /// The root after the last commit.
    pub fn root(&self) -> B256 {
        self.root
    }

    /// The last committed block number.
    pub fn block(&self) -> u64 {
        self.block
    }

    /// A snapshot of the last committed block.
    pub fn snapshot(&self) -> MemorySnapshot {
        self.flat.clone()
    }

    /// revm's `DatabaseRef` over a snapshot of the last committed block (`'static`,
    /// `Send + Sync`: put it behind an `Arc`, in `CacheDB` or in revm's `State`).
    pub fn trie_db(&self) -> TrieDb<MemorySnapshot> {
        TrieDb::from_snapshot(self.snapshot())
    }

    /// A block database over a snapshot of the last committed block; commit its
    /// [`BlockDb::into_changes`] with [`MemoryState::commit_block`].
    pub fn block_db(&self, options: BlockDbOptions) -> Result<BlockDb<MemorySnapshot>, StateError> {
        BlockDb::over(self.snapshot(), options)
    }

    /// Writes whole accounts (a genesis or a pre-state, [`BlockChanges::from_accounts`]) as
    /// block `block`.
    pub fn import_accounts<'a>(
        &mut self,
        accounts: impl IntoIterator<Item = (&'a Address, &'a AccountState)>,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        self.commit_block(BlockChanges::from_accounts(accounts)?, block)
    }

    /// Applies `changes` (one sorted batch; for equal keys the later write wins) to the tree and
    /// the flat maps, commits the tree into its store, and makes this block `block`. An error
    /// (a node the tree cannot load: never for a state built by these methods;
    /// [`StateError::BlockOrder`] for a block below the last) leaves the flat maps and the root
    /// as they were.
    pub fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        StateError::check_order(block, self.block)?;
        self.trie.reset_stats();
        let t = Instant::now();
        let mut batch = changes.writes;
        sort_dedup_last(&mut batch);
        self.trie.apply_sorted(&batch).map_err(backend)?;
        // The rehash serializes the changed blobs in the same walk: timed with the update.
        let set = self.trie.prepare_commit();
        let root = set.root;
        let trie_update = t.elapsed();
        let t = Instant::now();
        let stats = self
            .trie
            .commit_prepared(set, |store, set| store.apply(set))
            .map_err(backend)?;
        let stems = Arc::make_mut(&mut self.flat.stems);
        for (key, value) in &batch {
            stems
                .entry(key.stem)
                .or_default()
                .set(key.sub_index, *value);
        }
        let code = Arc::make_mut(&mut self.flat.code);
        for (hash, bytes) in changes.code {
            code.insert(hash, Bytes::from(bytes));
        }
        self.root = B256::from(root);
        self.block = block;
        Ok(CommitReport {
            root: self.root,
            trie_update,
            commit: t.elapsed(),
            stats,
            trie: self.trie.stats(),
        })
    }

    /// The root the state would have after `changes`, without committing them (for block
    /// building and simulation): a throw-away tree over the committed nodes takes the writes.
    pub fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        let mut trie: Trie<Committed<'_>> = Trie::open(
            Committed(self.trie.store()),
            self.trie.group_depth(),
            self.root.0,
        )
        .map_err(backend)?;
        trie.update(changes.writes.clone()).map_err(backend)?;
        Ok(B256::from(trie.root()))
    }

    /// The value at `key` in the flat state (what revm would read).
    pub fn get(&self, key: &TreeKey) -> Option<[u8; 32]> {
        self.flat
            .stems
            .get(&key.stem)
            .and_then(|v| v.get(key.sub_index).copied())
    }
}

impl StateBackend for MemoryState {
    type Snapshot = MemorySnapshot;

    fn snapshot(&self) -> Result<MemorySnapshot, StateError> {
        Ok(self.flat.clone())
    }
}

impl BlockState for MemoryState {
    type Backend<'a> = MemorySnapshot;

    fn root(&self) -> B256 {
        self.root
    }

    fn block(&self) -> u64 {
        self.block
    }

    fn block_db(&self, options: BlockDbOptions) -> Result<BlockDb<MemorySnapshot>, StateError> {
        MemoryState::block_db(self, options)
    }

    /// Every node is in memory: nothing to preload.
    fn trie_prefetcher(&self) -> Option<&dyn TriePrefetcher> {
        None
    }

    fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        MemoryState::commit_block(self, changes, block)
    }

    fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        MemoryState::root_with(self, changes)
    }

    /// Built on a throw-away trie over the committed nodes: this state is not changed.
    fn witness(
        &self,
        block: u64,
        keys: &[TreeKey],
        codes: &[B256],
    ) -> Result<crate::Witnesses, StateError> {
        let mut trie: Trie<Committed<'_>> = Trie::open(
            Committed(self.trie.store()),
            self.trie.group_depth(),
            self.root.0,
        )
        .map_err(backend)?;
        let code = |h: &B256| Ok(self.flat.code.get(h).cloned());
        crate::witness::build_witnesses(&mut trie, block, keys, codes, code, backend)
    }
}

fn backend<E: std::error::Error + Send + Sync + 'static>(e: TrieError<E>) -> StateError {
    StateError::Backend(Box::new(e))
}

/// The committed nodes of a [`MemoryState`], read-only: the store of a throw-away tree.
struct Committed<'a>(&'a MemoryStore);

/// A throw-away tree is never committed.
#[derive(Debug, thiserror::Error)]
#[error("a simulated tree is never committed")]
struct NotCommitted;

impl NodeStore for Committed<'_> {
    type Error = NotCommitted;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, NotCommitted> {
        self.0.get_node(key).map_err(|e| match e {})
    }

    fn apply(&mut self, _: &CommitSet) -> Result<(), NotCommitted> {
        Err(NotCommitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;
    use revm::database_interface::DatabaseRef;

    fn accounts() -> Vec<(Address, AccountState)> {
        (1u8..=20)
            .map(|i| {
                let code = if i % 5 == 0 {
                    vec![0x60, i, 0x00]
                } else {
                    Vec::new()
                };
                (
                    Address::repeat_byte(i),
                    AccountState {
                        balance: U256::from(i),
                        nonce: u64::from(i),
                        code,
                        storage: vec![(U256::from(i), U256::from(1)), (U256::ZERO, U256::ZERO)],
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_bad_group_depth_is_an_error() {
        assert!(matches!(MemoryState::new(0), Err(StateError::Backend(_))));
        assert!(matches!(MemoryState::new(9), Err(StateError::Backend(_))));
    }

    /// The root depends on the contents only; the flat maps answer what was written, and the
    /// root of no changes is the committed root.
    #[test]
    fn root_is_independent_of_the_group_depth_and_reads_come_back() {
        let accounts = accounts();
        let mut roots = Vec::new();
        for g in [1, 4, 8] {
            let mut state = MemoryState::new(g).unwrap();
            let root = state
                .import_accounts(accounts.iter().map(|(a, s)| (a, s)), 3)
                .unwrap()
                .root;
            assert_eq!((state.root(), state.block()), (root, 3));
            assert_eq!(state.root_with(&BlockChanges::default()).unwrap(), root);
            roots.push(root);
            let db = state.trie_db();
            for (a, s) in &accounts {
                let info = db.basic_ref(*a).unwrap().unwrap();
                assert_eq!((info.balance, info.nonce), (s.balance, s.nonce));
                let code = db.code_by_hash_ref(info.code_hash).unwrap();
                assert_eq!(code.original_bytes().as_ref(), s.code.as_slice());
                assert_eq!(db.storage_ref(*a, s.storage[0].0).unwrap(), U256::from(1));
            }
        }
        assert_ne!(roots[0], B256::ZERO);
        assert!(roots.iter().all(|r| *r == roots[0]), "{roots:?}");
    }
}
