//! [`LogState`]: the trie over the appending layout ([`bintrie_logstore::LogStore`]), block by
//! block, and its read side ([`LogBackend`], [`LogSnapshot`]).

use crate::commit::update_and_commit;
use crate::{
    BlockChanges, BlockDb, BlockDbOptions, BlockState, CommitReport, SnapshotIo, StateBackend,
    StateError, StateSnapshot, StemsBatch, TriePrefetcher,
};
use alloy_primitives::{B256, Bytes};
use bintrie_keys::Stem;
use bintrie_logstore::{LogError, LogOptions, LogStore};
use bintrie_node::{Hash32, MAX_DEPTH, StemValues};
use bintrie_trie::{Trie, TrieError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

impl From<LogError> for StateError {
    fn from(e: LogError) -> Self {
        StateError::Backend(Box::new(e))
    }
}

impl From<TrieError<LogError>> for StateError {
    fn from(e: TrieError<LogError>) -> Self {
        StateError::Backend(Box::new(e))
    }
}

/// The log as a [`StateBackend`]: every snapshot reads the block that was last committed when
/// the backend was made.
#[derive(Clone, Copy, Debug)]
pub struct LogBackend<'s> {
    store: &'s LogStore,
    root: Hash32,
}

impl<'s> LogBackend<'s> {
    /// Reads from `store` at its last committed block.
    pub fn new(store: &'s LogStore) -> Self {
        LogBackend {
            store,
            root: store.meta().root,
        }
    }
}

impl<'s> StateBackend for LogBackend<'s> {
    type Snapshot = LogSnapshot<'s>;

    fn snapshot(&self) -> Result<LogSnapshot<'s>, StateError> {
        Ok(LogSnapshot {
            store: self.store,
            root: self.root,
            lookups: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }
}

/// Reads of one block of the log. The log has one version (the last commit): once another
/// block is committed, every read through this snapshot is an error naming it, never an answer
/// from a different block. Reads run concurrently (no lock held across a read).
#[derive(Debug)]
pub struct LogSnapshot<'s> {
    store: &'s LogStore,
    root: Hash32,
    lookups: AtomicU64,
    bytes: AtomicU64,
}

impl LogSnapshot<'_> {
    fn count(&self, bytes: usize) {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl StateSnapshot for LogSnapshot<'_> {
    fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
        let v = self.store.get_stem(stem, Some(&self.root))?;
        self.count(v.as_ref().map_or(0, |v| 32 + 32 * v.len()));
        Ok(v)
    }

    fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError> {
        let c = self.store.get_code(&hash.0, Some(&self.root))?;
        self.count(c.as_ref().map_or(0, Vec::len));
        Ok(c.map(Bytes::from))
    }

    fn stems_batch(
        &self,
        stems: &[Stem],
        code_of: &mut dyn FnMut(usize, Option<&StemValues>) -> Option<B256>,
    ) -> Option<Result<StemsBatch, StateError>> {
        let read = self.store.get_stems_then_code(
            stems,
            Some(&self.root),
            |i, v| code_of(i, v).map(|h| h.0),
            |h, raw| {
                self.count(raw.len());
                crate::decode_code(&B256::from(*h), Bytes::from(raw))
            },
        );
        match read {
            Ok(None) => None,
            Ok(Some((values, codes))) => {
                for v in &values {
                    self.count(v.as_ref().map_or(0, |v| 32 + 32 * v.len()));
                }
                Some(Ok(StemsBatch {
                    values,
                    codes: codes.into_iter().map(|(h, c)| (B256::from(h), c)).collect(),
                }))
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    fn has_batch_path(&self) -> bool {
        self.store.batch_reads()
    }

    fn io(&self) -> SnapshotIo {
        SnapshotIo {
            lookups: self.lookups.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The binary-trie state over the appending layout: a [`Trie`] over a [`LogStore`], committed
/// one block at a time (one appended write and, when durable, one `fdatasync` per block).
#[derive(Debug)]
pub struct LogState {
    trie: Trie<LogStore>,
}

impl LogState {
    /// Opens (or creates) the log in `dir`; the trie starts at the stored root.
    pub fn open(dir: impl AsRef<Path>, options: &LogOptions) -> Result<Self, StateError> {
        Self::from_store(LogStore::open(dir, options)?)
    }

    /// The state over an open log. When the log keeps the tree's upper levels in memory
    /// ([`LogOptions::pinned_bytes`], down to [`LogStore::pinned_depth`]), the trie keeps the
    /// same levels loaded, decoded and hashed ([`Trie::keep_resident`]: every group rooted at
    /// or above that depth), loads them now, and [`LogState::drop_trie`] drops only what lies
    /// below; so a block neither reads nor re-hashes the top of the tree. With batch reads
    /// ([`LogStore::batch_reads`]) it also starts the streamed prefetch's reading thread
    /// ([`crate::BlockDb::prefetch_streaming`]), which warms up meanwhile.
    pub fn from_store(store: LogStore) -> Result<Self, StateError> {
        // A streamed prefetch's reading thread warms up while the state loads, off any block.
        if store.batch_reads() {
            crate::stream::reading_thread();
        }
        let meta = store.meta();
        let pinned = store.pinned_depth();
        let mut trie = Trie::open(store, meta.group_depth, meta.root)?;
        if let Some(p) = pinned {
            let depth = (p + usize::from(meta.group_depth)).min(MAX_DEPTH);
            trie.keep_resident(depth)?;
            let t = std::time::Instant::now();
            let blobs = trie.load_resident()?;
            tracing::info!(
                depth,
                blobs,
                ms = t.elapsed().as_secs_f64() * 1e3,
                "upper levels of the tree loaded into the trie"
            );
            trie.reset_stats();
        }
        Ok(LogState { trie })
    }

    /// The log.
    pub fn store(&self) -> &LogStore {
        self.trie.store()
    }

    /// The log, giving up the trie (its in-memory nodes are dropped).
    pub fn into_store(self) -> LogStore {
        self.trie.into_store()
    }

    /// The same state with an empty trie (the nodes it loaded dropped, its counters reset):
    /// what a cold block starts from. The log's index stays: it is this layout's directory,
    /// held in memory. With the upper levels kept ([`LogState::from_store`]) only what lies
    /// below them is dropped ([`Trie::trim`]; uncommitted changes, which a fresh trie would
    /// not have either, are discarded); after a failed commit the trie has dropped the upper
    /// levels too, and they are loaded again here (from the device: the log dropped its kept
    /// blobs with the failed commit). Errors only when that load fails; the state is then
    /// lost with `self`, as with any error of [`LogState::from_store`].
    pub fn drop_trie(mut self) -> Result<Self, StateError> {
        if self.trie.resident_depth().is_none() {
            return Self::from_store(self.into_store());
        }
        if self.trie.trim().is_err() {
            self.trie.discard();
        }
        if !self.trie.is_loaded() {
            self.trie.load_resident()?;
        }
        self.trie.reset_stats();
        Ok(self)
    }

    /// Applies a block's writes as one sorted batch, rehashes, and appends the blobs, code and
    /// a commit record as block `block` (not below the last committed block:
    /// [`StateError::BlockOrder`]). On an error nothing is committed and the trie drops the
    /// block's changes (it restarts from the log's root).
    pub fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        StateError::check_order(block, self.store().meta().block)?;
        let code: Vec<([u8; 32], Vec<u8>)> =
            changes.code.into_iter().map(|(h, c)| (h.0, c)).collect();
        let done = update_and_commit(&mut self.trie, changes.writes, |store, set| {
            store.write_block(set, block, &code)
        })?;
        Ok(CommitReport {
            root: B256::from(done.stats.root),
            trie_update: done.trie_update,
            commit: done.commit,
            stats: done.stats,
            trie: self.trie.stats(),
        })
    }
}

impl BlockState for LogState {
    type Backend<'a> = LogBackend<'a>;

    fn root(&self) -> B256 {
        B256::from(self.store().meta().root)
    }

    fn block(&self) -> u64 {
        self.store().meta().block
    }

    fn block_db(&self, options: BlockDbOptions) -> Result<BlockDb<LogBackend<'_>>, StateError> {
        BlockDb::over(LogBackend::new(self.store()), options)
    }

    fn trie_prefetcher(&self) -> Option<&dyn TriePrefetcher> {
        Some(&self.trie)
    }

    fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        LogState::commit_block(self, changes, block)
    }

    /// On a throw-away trie over the same log: nothing written, this state's trie untouched.
    fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        let store = self.store().clone();
        let meta = store.meta();
        let mut trie: Trie<LogStore> = Trie::open(store, meta.group_depth, meta.root)?;
        trie.update(changes.writes.clone())?;
        Ok(B256::from(trie.root()))
    }

    fn witness(
        &self,
        block: u64,
        keys: &[bintrie_keys::TreeKey],
        codes: &[B256],
    ) -> Result<crate::Witnesses, StateError> {
        let store = self.store().clone();
        let meta = store.meta();
        let mut trie: Trie<LogStore> = Trie::open(store.clone(), meta.group_depth, meta.root)?;
        let code = |h: &B256| -> Result<Option<Bytes>, StateError> {
            Ok(store.get_code(&h.0, Some(&meta.root))?.map(Into::into))
        };
        crate::witness::build_witnesses(&mut trie, block, keys, codes, code, StateError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryState;
    use alloy_primitives::{Address, U256};
    use bintrie_keys::AccountState;
    use revm::Database;

    fn accounts(n: u8) -> Vec<(Address, AccountState)> {
        (1..=n)
            .map(|i| {
                let mut a = AccountState {
                    nonce: u64::from(i),
                    balance: U256::from(1000u64 * u64::from(i)),
                    ..Default::default()
                };
                if i % 3 == 0 {
                    a.code = vec![0x60, i, 0x00];
                    a.storage.push((U256::from(i), U256::from(7)));
                }
                (Address::repeat_byte(i), a)
            })
            .collect()
    }

    #[test]
    fn blocks_on_the_log_reach_the_memory_state_root_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let mut mem = MemoryState::new(5).unwrap();
        let all = accounts(40);
        for (block, chunk) in all.chunks(10).enumerate() {
            let changes = BlockChanges::from_accounts(chunk.iter().map(|(a, s)| (a, s))).unwrap();
            let a = log.commit_block(changes.clone(), block as u64 + 1).unwrap();
            let b = BlockState::commit_block(&mut mem, changes, block as u64 + 1).unwrap();
            assert_eq!(a.root, b.root, "block {}", block + 1);
        }
        drop(log);
        let log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        assert_eq!(BlockState::root(&log), BlockState::root(&mem));
        let mut db = log.block_db(BlockDbOptions::default()).unwrap();
        for (address, state) in &all {
            let info = db.basic(*address).unwrap().unwrap();
            assert_eq!((info.nonce, info.balance), (state.nonce, state.balance));
            if !state.code.is_empty() {
                let code = db.code_by_hash(info.code_hash).unwrap();
                assert_eq!(code.original_bytes().as_ref(), &state.code[..]);
            }
        }
        assert!(db.basic(Address::repeat_byte(0xee)).unwrap().is_none());
    }

    /// With the tree's upper levels kept (`pinned_bytes`), the trie keeps them loaded across
    /// `drop_trie`: every block loads fewer blobs than the same block on a log that keeps
    /// nothing, and both reach the memory state's root.
    #[test]
    fn with_the_upper_levels_kept_blocks_load_only_what_lies_below() {
        let all = accounts(200);
        let changes = |chunk: &[(Address, AccountState)]| {
            BlockChanges::from_accounts(chunk.iter().map(|(a, s)| (a, s))).unwrap()
        };
        let (kept_dir, cold_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut mem = MemoryState::new(5).unwrap();
        for dir in [&kept_dir, &cold_dir] {
            let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
            log.commit_block(changes(&all[..150]), 1).unwrap();
        }
        BlockState::commit_block(&mut mem, changes(&all[..150]), 1).unwrap();
        let options = LogOptions {
            pinned_bytes: 4096,
            ..LogOptions::default()
        };
        let mut kept = LogState::open(kept_dir.path(), &options).unwrap();
        let mut cold = LogState::open(cold_dir.path(), &LogOptions::default()).unwrap();
        let pinned = kept
            .store()
            .pinned_depth()
            .expect("the root group fits 4 KiB");
        assert_eq!(kept.trie.resident_depth(), Some(pinned + 5));
        assert_eq!(cold.trie.resident_depth(), None);
        for (i, chunk) in all[150..].chunks(10).enumerate() {
            let block = i as u64 + 2;
            // New accounts and new values for old ones, so the paths of both are updated.
            let mut writes = chunk.to_vec();
            writes.extend(all[i * 7..i * 7 + 3].iter().map(|(a, s)| {
                let mut s = s.clone();
                s.nonce += 100;
                (*a, s)
            }));
            let a = kept.commit_block(changes(&writes), block).unwrap();
            let b = cold.commit_block(changes(&writes), block).unwrap();
            let m = BlockState::commit_block(&mut mem, changes(&writes), block).unwrap();
            assert_eq!((a.root, b.root), (m.root, m.root), "block {block}");
            assert!(
                a.trie.nodes_loaded < b.trie.nodes_loaded,
                "block {block}: {} loads with the top kept, {} without",
                a.trie.nodes_loaded,
                b.trie.nodes_loaded
            );
            kept = kept.drop_trie().unwrap();
            cold = cold.drop_trie().unwrap();
        }
        // An old block number is refused before anything is applied: the upper levels stay.
        let last = 2 + all[150..].chunks(10).len() as u64;
        let err = kept.commit_block(changes(&all[..3]), 0).unwrap_err();
        assert!(
            matches!(err, StateError::BlockOrder { block: 0, .. }),
            "{err}"
        );
        assert!(kept.trie.is_loaded());
        // A commit that fails in the log (the same old block number, past that check) drops
        // the upper levels with the block's changes; the next `drop_trie` loads them again,
        // and the next block is as before.
        let err = crate::commit::update_and_commit(
            &mut kept.trie,
            changes(&all[..3]).writes,
            |store, set| store.write_block(set, 0, &[]),
        )
        .err()
        .expect("below the last block");
        assert!(err.to_string().contains("block 0"), "{err}");
        assert!(!kept.trie.is_loaded());
        kept = kept.drop_trie().unwrap();
        assert!(kept.trie.is_loaded());
        let writes: Vec<_> = all[20..24]
            .iter()
            .map(|(a, s)| {
                let mut s = s.clone();
                s.balance += U256::from(1);
                (*a, s)
            })
            .collect();
        let a = kept.commit_block(changes(&writes), last).unwrap();
        let b = cold.commit_block(changes(&writes), last).unwrap();
        let m = BlockState::commit_block(&mut mem, changes(&writes), last).unwrap();
        assert_eq!((a.root, b.root), (m.root, m.root));
        assert!(a.trie.nodes_loaded < b.trie.nodes_loaded);
    }

    /// The trie prefetch hands every blob on the written stems' paths, from the recent
    /// blocks' set and from the device, to the state's trie ahead of its update: the update
    /// takes every node it loads from there, and reaches the memory state's root.
    #[test]
    fn the_trie_prefetch_decodes_ahead_every_blob_the_update_loads() {
        // Without and with the top level kept loaded (nothing above it is looked up).
        for resident in [0, 5] {
            let dir = tempfile::tempdir().unwrap();
            let log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
            // Cold: the trie as reopened; the last block's blobs are in the recent set.
            crate::pipeline::tests::assert_decoded_ahead(
                log,
                |log| log.drop_trie().unwrap(),
                |log| &mut log.trie,
                resident,
            );
        }
    }

    /// A block whose commit fails leaves nothing behind, in the log nor in the state's trie:
    /// the next block commits the root of the blocks that did commit, not one that also
    /// holds the failed block's writes.
    #[test]
    fn a_failed_commit_leaves_nothing_for_the_next_block() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let mut mem = MemoryState::new(5).unwrap();
        let all = accounts(30);
        let changes = |r: std::ops::Range<usize>| {
            BlockChanges::from_accounts(all[r].iter().map(|(a, s)| (a, s))).unwrap()
        };
        log.commit_block(changes(0..10), 1).unwrap();
        BlockState::commit_block(&mut mem, changes(0..10), 1).unwrap();
        // Block 0 after block 1, past the state's own check: the log refuses it once the trie
        // has applied it.
        let err = crate::commit::update_and_commit(
            &mut log.trie,
            changes(10..20).writes,
            |store, set| store.write_block(set, 0, &[]),
        )
        .err()
        .expect("below the last block");
        assert!(err.to_string().contains("block 0"), "{err}");
        assert_eq!(BlockState::root(&log), BlockState::root(&mem));
        let a = log.commit_block(changes(20..30), 2).unwrap();
        let b = BlockState::commit_block(&mut mem, changes(20..30), 2).unwrap();
        assert_eq!(a.root, b.root, "the failed block's writes reached block 2");
        drop(log);
        let log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        assert_eq!(BlockState::root(&log), b.root);
    }

    #[test]
    fn a_prefetch_reads_each_stem_and_each_code_once_as_the_memory_state_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let mut mem = MemoryState::new(5).unwrap();
        let mut all = accounts(30);
        // Two more accounts sharing one code: it is read once.
        for i in [200u8, 201] {
            let mut a = AccountState {
                nonce: 1,
                ..Default::default()
            };
            a.code = vec![0x60, 0xee, 0x00];
            all.push((Address::repeat_byte(i), a));
        }
        let changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes.clone(), 1).unwrap();
        BlockState::commit_block(&mut mem, changes, 1).unwrap();
        let mut list = crate::PrefetchList::new();
        for (address, _) in &all {
            list.account(*address);
        }
        list.account(Address::repeat_byte(0xee)); // absent
        let mut on_log = log.block_db(BlockDbOptions::default()).unwrap();
        let mut on_mem = mem.block_db(BlockDbOptions::default()).unwrap();
        // 33 stems listed; the memory state also reads the codes of accounts 3, 6, .., 30
        // and the shared one by hash, the log's batch rebuilds them from the chunks on their
        // header stems (these codes are short: no chunk stem of their own).
        assert_eq!(on_log.prefetch(&list, 4).unwrap(), 33);
        assert_eq!(on_mem.prefetch(&list, 4).unwrap(), 33 + 10 + 1);
        fn served_from_the_prefetch<B: StateBackend>(
            db: &mut BlockDb<B>,
            all: &[(Address, AccountState)],
        ) {
            let before = db.stats().store_reads;
            for (address, state) in all {
                let info = db.basic(*address).unwrap().unwrap();
                if !state.code.is_empty() {
                    let code = db.code_by_hash(info.code_hash).unwrap();
                    assert_eq!(code.original_bytes().as_ref(), &state.code[..]);
                }
            }
            assert_eq!(db.stats().store_reads, before, "all came from the prefetch");
            assert_eq!(db.stats().read_amplification(), 1.0);
        }
        served_from_the_prefetch(&mut on_log, &all);
        served_from_the_prefetch(&mut on_mem, &all);
    }

    /// Code `len` bytes long whose bytes vary with `seed`.
    fn code_of_len(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// One contract per length, at addresses `first`, `first + 1`, ..., each with its own code.
    fn contracts(lens: &[usize], first: u8) -> Vec<(Address, AccountState)> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let a = AccountState {
                    nonce: 1,
                    code: code_of_len(len, i as u8),
                    ..Default::default()
                };
                (Address::repeat_byte(first + i as u8), a)
            })
            .collect()
    }

    /// The log's batch rebuilds code from the chunk stems it lists beside each header stem,
    /// up to the longest code three chunk stems hold (27,776 bytes); longer code is read by
    /// hash. Each present chunk stem is one read, and nothing is read again on demand.
    #[test]
    fn the_batch_rebuilds_code_from_its_chunk_stems_up_to_three_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        // (code length, chunk stems it has): 128 chunks sit on the header stem, 256 per
        // chunk stem after it.
        let cases = [
            (100, 0),
            (3_968, 0),
            (3_969, 1),
            (11_904, 1),
            (11_905, 2),
            (24_576, 3),
            (27_776, 3),
            (27_777, 4),
        ];
        let lens: Vec<usize> = cases.iter().map(|&(len, _)| len).collect();
        let all = contracts(&lens, 0x40);
        let changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes, 1).unwrap();
        let mut list = crate::PrefetchList::new();
        for (address, _) in &all {
            list.account(*address);
        }
        let mut db = log.block_db(BlockDbOptions::default()).unwrap();
        let reads = db.prefetch(&list, 4).unwrap();
        // The header stems, the chunk stems listed (at most 3 each) that exist, and the one
        // code past 27,776 bytes, by hash.
        let chunk_stems: u64 = cases.iter().map(|&(_, n)| n.min(3)).sum();
        assert_eq!(reads, cases.len() as u64 + chunk_stems + 1);
        let before = db.stats().store_reads;
        for (address, state) in &all {
            let info = db.basic(*address).unwrap().unwrap();
            let code = db.code_by_hash(info.code_hash).unwrap();
            assert_eq!(code.original_bytes().as_ref(), &state.code[..]);
        }
        assert_eq!(db.stats().store_reads, before, "all came from the prefetch");
        assert_eq!(db.stats().read_amplification(), 1.0);
    }

    /// What execution reads in [`streamed_and_first_agree`]: every account with its code and
    /// slots (an absent account among them), then one slot the list does not name.
    type Seen = Vec<(Option<revm::state::AccountInfo>, Option<Vec<u8>>, Vec<U256>)>;

    /// Executes `read` over a block database of `log` after a prefetch of `list`, read first
    /// and streamed; both must see the same values, read the same keys the same number of
    /// times, and serve every listed key from the prefetch. Returns what the streamed run saw
    /// and its counters.
    fn streamed_and_first_agree(
        log: &LogState,
        list: &crate::PrefetchList,
        read: impl Fn(&mut BlockDb<LogBackend<'_>>) -> Seen,
    ) -> (Seen, crate::ReadStats) {
        let mut first = log.block_db(BlockDbOptions::default()).unwrap();
        first.prefetch(list, 4).unwrap();
        let want = read(&mut first);
        let mut streamed = log.block_db(BlockDbOptions::default()).unwrap();
        let got = streamed.prefetch_streaming(list, 4, &read).unwrap();
        assert_eq!(got, want);
        let (a, b) = (first.stats(), streamed.stats());
        assert!(b.streamed && !a.streamed);
        assert_eq!(
            (a.store_reads, a.prefetch_reads, a.unique_keys, a.misses),
            (b.store_reads, b.prefetch_reads, b.unique_keys, b.misses)
        );
        assert_eq!(a.prefetch_wait, std::time::Duration::ZERO);
        // Streamed, reads held execution up only while it waited (the prefetch's own run is
        // beside it); read first, for the whole prefetch.
        assert_eq!(b.read_time(), b.prefetch_wait + b.miss_time);
        assert_eq!(a.read_time(), a.prefetch_time + a.miss_time);
        (got, b)
    }

    /// A prefetch streamed from the reading thread itself reads first instead (its reader
    /// would queue behind execution, which waits for it), and still serves execution.
    #[test]
    fn a_prefetch_streamed_from_the_reading_thread_reads_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let all = contracts(&[100], 0x40);
        let changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes, 1).unwrap();
        let mut list = crate::PrefetchList::new();
        list.account(all[0].0);
        let thread = crate::stream::reading_thread().unwrap();
        let (code, stats) = thread.install(|| {
            let mut db = log.block_db(BlockDbOptions::default()).unwrap();
            let code = db
                .prefetch_streaming(&list, 2, |db| {
                    let hash = db.basic(all[0].0).unwrap().unwrap().code_hash;
                    db.code_by_hash(hash).unwrap().original_bytes()
                })
                .unwrap();
            (code, db.stats())
        });
        assert_eq!(&code[..], &all[0].1.code[..]);
        assert!(!stats.streamed && stats.prefetch_reads > 0, "{stats:?}");
        assert_eq!(stats.misses, 0);
    }

    /// Streamed into execution, the log's prefetch serves execution what the prefetch read
    /// first serves: headers, code rebuilt from chunk stems or read by hash, slots, absent
    /// keys; the same reads, each key once, nothing listed read again on demand.
    #[test]
    fn a_streamed_prefetch_serves_what_the_prefetch_read_first_serves() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let mut all = contracts(&[0, 100, 5_000, 24_576, 30_000], 0x20);
        for (i, (_, a)) in all.iter_mut().enumerate() {
            a.storage = (0..3u64)
                .map(|k| (U256::from(k * 1_000 + i as u64), U256::from(k + 1)))
                .collect();
        }
        // Two accounts sharing one code: it is read once.
        all.push((Address::repeat_byte(0x30), all[2].1.clone()));
        let changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes, 1).unwrap();
        let mut list = crate::PrefetchList::new();
        for (address, state) in &all {
            list.account(*address);
            for (k, _) in &state.storage {
                list.slot(*address, *k);
            }
            list.slot(*address, U256::from(77)); // absent
        }
        list.slot(Address::repeat_byte(0xee), U256::from(77)); // absent, as its slot
        let unlisted = all[1].0;
        let read = |db: &mut BlockDb<LogBackend<'_>>| -> Seen {
            let mut seen = Vec::new();
            let absent = (Address::repeat_byte(0xee), AccountState::default());
            for (address, state) in all.iter().chain([&absent]) {
                let info = db.basic(*address).unwrap();
                let code = info.as_ref().map(|i| {
                    db.code_by_hash(i.code_hash)
                        .unwrap()
                        .original_bytes()
                        .to_vec()
                });
                let mut slots: Vec<U256> = state
                    .storage
                    .iter()
                    .map(|(k, _)| db.storage(*address, *k).unwrap())
                    .collect();
                slots.push(db.storage(*address, U256::from(77)).unwrap());
                seen.push((info, code, slots));
            }
            // Not listed (a stem of its own, past the header stem's 64 slots): on demand.
            let slot = db.storage(unlisted, U256::from(5_000)).unwrap();
            seen.push((None, None, vec![slot]));
            seen
        };
        let (seen, stats) = streamed_and_first_agree(&log, &list, read);
        for ((_, state), (info, code, slots)) in all.iter().zip(&seen) {
            assert!(info.is_some());
            assert_eq!(code.as_deref(), Some(&state.code[..]));
            let want: Vec<U256> = state.storage.iter().map(|(_, v)| *v).collect();
            assert_eq!(slots[..3], want[..]);
            assert_eq!(slots[3], U256::ZERO);
        }
        assert_eq!(
            seen[all.len()],
            (None, None, vec![U256::ZERO]),
            "the absent account"
        );
        assert_eq!(stats.misses, 1, "only the unlisted slot");
        assert_eq!(stats.read_amplification(), 1.0);
    }

    /// Code read in the log's batch is checked as a lookup checks it. Chunks that do not
    /// rebuild their code hash's bytes are not served: the code is read by hash instead;
    /// bytes read by hash that do not hash to their key are reported (`CorruptCode`), never
    /// served or taken as absent. The same holds with the prefetch streamed into execution.
    #[test]
    fn a_prefetched_code_that_fails_its_hash_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        // 0: stored code flipped, chunks right; 1: a chunk flipped, stored code right;
        // 2: both flipped; 3: too long for the chunk stems, stored code flipped; 4: intact.
        let lens = [200, 5_000, 5_000, 30_000, 30_000];
        let all = contracts(&lens, 0x70);
        let mut changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        for i in [0, 2, 3] {
            let hash = alloy_primitives::keccak256(&all[i].1.code);
            let stored = changes.code.iter_mut().find(|(h, _)| *h == hash).unwrap();
            stored.1[1] ^= 0x01;
        }
        for i in [1, 2] {
            // Chunk 150: on the first chunk stem.
            let key = bintrie_keys::code_chunk_key(&all[i].0, 150);
            let chunk = changes.writes.iter_mut().find(|(k, _)| *k == key).unwrap();
            chunk.1[5] ^= 0x01;
        }
        log.commit_block(changes, 1).unwrap();
        let mut list = crate::PrefetchList::new();
        for (address, _) in &all {
            list.account(*address);
        }
        let check = |db: &mut BlockDb<LogBackend<'_>>, streamed: bool| {
            let before = db.stats().store_reads;
            for i in [0, 1, 4] {
                let info = db.basic(all[i].0).unwrap().unwrap();
                let code = db.code_by_hash(info.code_hash).unwrap();
                assert_eq!(code.original_bytes().as_ref(), &all[i].1.code[..], "{i}");
            }
            // Streamed, the counters are added when the prefetch ends.
            if !streamed {
                assert_eq!(
                    db.stats().store_reads,
                    before,
                    "the good code came from the prefetch"
                );
            }
            for i in [2, 3] {
                let info = db.basic(all[i].0).unwrap().unwrap();
                let err = db.code_by_hash(info.code_hash).unwrap_err();
                assert!(matches!(err, StateError::CorruptCode { .. }), "{i}: {err}");
            }
            db.stats().misses
        };
        let mut db = log.block_db(BlockDbOptions::default()).unwrap();
        db.prefetch(&list, 4).unwrap();
        assert_eq!(check(&mut db, false), 0, "no good code read on demand");
        // Streamed, execution may check the rebuilt code of 1 itself before the batch's
        // checker does; when its chunks fail, it reads the code by hash on demand (a miss)
        // instead of the batch.
        let mut db = log.block_db(BlockDbOptions::default()).unwrap();
        let misses = db
            .prefetch_streaming(&list, 4, |db| check(db, true))
            .unwrap();
        assert!(misses <= 1, "{misses} read on demand, streamed");
    }

    /// Flips the byte after each occurrence of `stem` in the files of `dir`: in the log, the
    /// one record that holds the stem (its stem blob), whose checksum then fails.
    fn flip_after(dir: &Path, stem: &Stem) {
        let mut flipped = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            let at: Vec<usize> = bytes
                .windows(stem.len())
                .enumerate()
                .filter(|(_, w)| *w == stem.as_slice())
                .map(|(i, _)| i + stem.len())
                .collect();
            for i in &at {
                bytes[*i] ^= 0x01;
            }
            if !at.is_empty() {
                std::fs::write(&path, &bytes).unwrap();
                flipped += at.len();
            }
        }
        assert!(flipped > 0, "the stem is in the log");
    }

    /// A trie prefetch that fails fails the block with the prefetch's own error and commits
    /// nothing, though the update would not need the blob (here a flipped byte in the stem
    /// blob of an account the plan names but the block does not write: only the prefetch
    /// reads it); the next block, whose plan leaves that stem out, commits.
    #[test]
    fn a_failed_trie_prefetch_fails_the_block_and_commits_nothing() {
        use crate::{BlockPlan, PipelineError, PipelineOptions};
        use revm::DatabaseCommit;
        let dir = tempfile::tempdir().unwrap();
        // No recent blocks kept in memory: the prefetch reads the log's files.
        let options = LogOptions {
            recent_blocks: 0,
            ..LogOptions::default()
        };
        let mut log = LogState::open(dir.path(), &options).unwrap();
        let all = accounts(8);
        let changes = BlockChanges::from_accounts(all.iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(changes, 1).unwrap();
        let (damaged, written) = (all[0].0, all[1].0);
        let stem = |a: &Address| bintrie_keys::basic_data_key(a).stem;
        flip_after(dir.path(), &stem(&damaged));
        let (root, block) = (log.root(), log.block());
        let plan = |write_stems: Vec<Stem>| BlockPlan {
            number: 2,
            prefetch: None,
            write_stems,
            block_hashes: Vec::new(),
        };
        let bump = |db: &mut BlockDb<LogBackend<'_>>| -> Result<(), StateError> {
            let info = db.basic(written)?.expect("funded");
            // As revm commits: the account as loaded, then changed.
            let mut account = revm::state::Account::from(info);
            account.info.nonce += 1;
            account.mark_touch();
            db.commit([(written, account)].into_iter().collect());
            Ok(())
        };
        let options = PipelineOptions::default();
        let err = log
            .run_block(&plan(vec![stem(&damaged), stem(&written)]), &options, bump)
            .unwrap_err();
        assert!(
            matches!(err, PipelineError::State(_)) && err.to_string().contains("checksum"),
            "{err}"
        );
        assert_eq!(
            (log.root(), log.block()),
            (root, block),
            "nothing committed"
        );
        let ran = log
            .run_block(&plan(vec![stem(&written)]), &options, bump)
            .unwrap();
        assert_eq!((log.block(), log.root()), (2, ran.commit.root));
        assert_ne!(ran.commit.root, root);
    }

    #[test]
    fn a_snapshot_refuses_to_read_after_a_later_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogState::open(dir.path(), &LogOptions::default()).unwrap();
        let all = accounts(4);
        let first = BlockChanges::from_accounts(all[..2].iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(first, 1).unwrap();
        let store = log.store().clone();
        let snapshot = LogBackend::new(&store).snapshot().unwrap();
        let stem = bintrie_keys::basic_data_key(&all[0].0).stem;
        assert!(snapshot.stem(&stem).unwrap().is_some());
        let second = BlockChanges::from_accounts(all[2..].iter().map(|(a, s)| (a, s))).unwrap();
        log.commit_block(second, 2).unwrap();
        let err = snapshot.stem(&stem).unwrap_err();
        assert!(
            err.to_string().contains("another handle committed"),
            "{err}"
        );
    }
}
