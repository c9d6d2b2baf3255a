//! [`BinTrieState`]: the trie over the MDBX store, block by block.

use crate::commit::update_and_commit;
use crate::{BlockChanges, BlockDb, BlockDbOptions, BlockState, CommitReport, MdbxBackend};
use crate::{StateError, TriePrefetcher};
use alloy_primitives::{Address, B256};
use bintrie_keys::AccountState;
use bintrie_store::{StateStore, StoreOptions};
use bintrie_trie::Trie;
use std::path::Path;

/// The binary-trie state: a [`Trie`] over a [`StateStore`], committed one block at a time.
///
/// Use: [`BinTrieState::block_db`] for a block's revm database, execute, then
/// [`BinTrieState::commit_block`] with [`BlockDb::into_changes`].
#[derive(Debug)]
pub struct BinTrieState {
    trie: Trie<StateStore>,
}

impl BinTrieState {
    /// Opens (or creates) the database in `dir`; the trie starts at the stored root.
    pub fn open(dir: impl AsRef<Path>, options: &StoreOptions) -> Result<Self, StateError> {
        Self::from_store(StateStore::open(dir, options)?)
    }

    /// The state over an open store.
    pub fn from_store(store: StateStore) -> Result<Self, StateError> {
        let meta = store.meta();
        Ok(BinTrieState {
            trie: Trie::open(store, meta.group_depth, meta.root)?,
        })
    }

    /// The store.
    pub fn store(&self) -> &StateStore {
        self.trie.store()
    }

    /// The trie's store, giving up the trie (its in-memory nodes are dropped).
    pub fn into_store(self) -> StateStore {
        self.trie.into_store()
    }

    /// Writes the store's write buffer to MDBX ([`StateStore::flush`]): call it before handing
    /// the database to another program. Nothing to do without a buffer.
    pub fn flush(&mut self) -> Result<(), StateError> {
        Ok(self.trie.store_mut().flush()?)
    }

    /// Closes the database, calls `between` (to evict it from the page cache, say), and opens
    /// it again with empty caches and a fresh trie, keeping the store's write buffer
    /// ([`StateStore::reopen`]). On an error (from `between` or the open) this state is gone:
    /// what it committed is in the database (its buffered blocks in the journal, replayed by
    /// the next writer), which [`BinTrieState::open`] opens again.
    pub fn reopen(
        self,
        between: impl FnOnce(&Path) -> std::io::Result<()>,
    ) -> Result<Self, StateError> {
        Self::from_store(self.into_store().reopen(between)?)
    }

    /// The root of the last committed block.
    pub fn root(&self) -> B256 {
        B256::from(self.store().meta().root)
    }

    /// The last committed block number.
    pub fn block(&self) -> u64 {
        self.store().meta().block
    }

    /// A revm database for the next block, over a snapshot of the last committed one.
    pub fn block_db(
        &self,
        options: BlockDbOptions,
    ) -> Result<BlockDb<MdbxBackend<'_>>, StateError> {
        BlockDb::new(self.trie.store(), options)
    }

    /// The root the state would have after `changes` on top of the last committed block,
    /// without committing them (for block building and simulation). A throw-away tree over the
    /// same store, opened at the committed root, takes the writes (loading and verifying the
    /// nodes on their paths) and is dropped: nothing is written, and the state's own tree is
    /// untouched.
    pub fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        let store = self.store().clone();
        let meta = store.meta();
        let mut trie: Trie<StateStore> = Trie::open(store, meta.group_depth, meta.root)?;
        trie.update(changes.writes.clone())?;
        Ok(B256::from(trie.root()))
    }

    /// Applies a block's writes as one sorted batch, rehashes, and commits nodes, flat stems,
    /// code and meta in one MDBX transaction as block `block` (not below the last committed
    /// block: [`StateError::BlockOrder`]). On an error nothing is committed and the trie drops
    /// the block's changes (it restarts from the stored root).
    pub fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        let code = changes.code.into_iter().map(|(h, c)| (h.0, c)).collect();
        self.apply(changes.writes, code, block)
    }

    /// Writes raw tree entries (and code by hash) as block `block`, timed like a block. For
    /// synthetic state (random stems) that no account list describes; an empty database is
    /// written with sorted appends (MDBX `APPEND`). Later writes to the same key win.
    pub fn import_entries(
        &mut self,
        writes: Vec<(bintrie_keys::TreeKey, [u8; 32])>,
        code: Vec<(B256, Vec<u8>)>,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        let code = code.into_iter().map(|(h, c)| (h.0, c)).collect();
        self.apply(writes, code, block)
    }

    /// Update, rehash and commit, timed. An empty database takes the bulk-load path.
    fn apply(
        &mut self,
        writes: Vec<(bintrie_keys::TreeKey, [u8; 32])>,
        code: Vec<([u8; 32], Vec<u8>)>,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        let meta = self.store().meta();
        StateError::check_order(block, meta.block)?;
        let empty = meta.block == 0 && meta.root == [0; 32];
        let done = update_and_commit(&mut self.trie, writes, |store, set| {
            if empty {
                store.bulk_load(set, block, &code)
            } else {
                store.write_block(set, block, &code)
            }
        })?;
        Ok(CommitReport {
            root: B256::from(done.stats.root),
            trie_update: done.trie_update,
            commit: done.commit,
            stats: done.stats,
            trie: self.trie.stats(),
        })
    }

    /// Writes whole accounts (a genesis or a pre-state) as block `block`: every account's header,
    /// code chunks and non-zero storage (SPEC §4, [`BlockChanges::from_accounts`]), and its
    /// code in the code table. An empty database is written with sorted appends (MDBX
    /// `APPEND`).
    pub fn import_accounts<'a>(
        &mut self,
        accounts: impl IntoIterator<Item = (&'a Address, &'a AccountState)>,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        self.commit_block(BlockChanges::from_accounts(accounts)?, block)
    }
}

impl BlockState for BinTrieState {
    /// Built on a throw-away trie at the committed root, so this state's own trie (and the
    /// trie update that follows) is not changed; the reads warm the page cache.
    fn witness(
        &self,
        block: u64,
        keys: &[bintrie_keys::TreeKey],
        codes: &[B256],
    ) -> Result<crate::Witnesses, StateError> {
        let store = self.trie.store().clone();
        let meta = store.meta();
        let mut trie: Trie<StateStore> = Trie::open(store.clone(), meta.group_depth, meta.root)?;
        let reader = store.reader()?;
        let code = |h: &B256| -> Result<Option<alloy_primitives::Bytes>, StateError> {
            Ok(reader.get_code(&h.0)?.map(Into::into))
        };
        crate::witness::build_witnesses(&mut trie, block, keys, codes, code, StateError::Trie)
    }

    type Backend<'a> = MdbxBackend<'a>;

    fn root(&self) -> B256 {
        BinTrieState::root(self)
    }

    fn block(&self) -> u64 {
        BinTrieState::block(self)
    }

    fn block_db(&self, options: BlockDbOptions) -> Result<BlockDb<MdbxBackend<'_>>, StateError> {
        BinTrieState::block_db(self, options)
    }

    fn trie_prefetcher(&self) -> Option<&dyn TriePrefetcher> {
        Some(&self.trie)
    }

    fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        BinTrieState::commit_block(self, changes, block)
    }

    fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        BinTrieState::root_with(self, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MDBX's trie prefetch hands the blobs on the written stems' paths to the state's trie
    /// ahead of its update, as the log's does: every node the update loads was decoded ahead.
    #[test]
    fn the_trie_prefetch_decodes_ahead_every_blob_the_update_loads() {
        // Without and with the top level kept loaded (its walk reads it, but does not hand it
        // on).
        for resident in [0, 5] {
            let dir = tempfile::tempdir().unwrap();
            let state = BinTrieState::open(dir.path(), &StoreOptions::default()).unwrap();
            // Cold: the trie as reopened.
            crate::pipeline::tests::assert_decoded_ahead(
                state,
                |s| BinTrieState::from_store(s.into_store()).unwrap(),
                |s| &mut s.trie,
                resident,
            );
        }
    }
}
