//! The trie prefetcher's warm set, and the store as the trie's `NodeStore`.

use crate::*;

impl StateStore {
    pub(crate) fn warm(&self) -> std::sync::MutexGuard<'_, WarmSet> {
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
    /// Returns the blobs and bytes preloaded; [`StoreError::Moved`] when another writer has
    /// committed since this handle's meta ([`StateStore::reader_at_meta`]).
    pub fn warm_trie_paths(
        &self,
        stems: &[bintrie_keys::Stem],
        workers: usize,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<ReadStats, StoreError> {
        self.warm_trie_paths_with(stems, 0, workers, stop, None)
    }

    /// [`StateStore::warm_trie_paths`] for the blobs at paths of at least `below` bits (0: all;
    /// a trie that keeps the levels above loaded passes its resident depth), also handing each
    /// of them to `each(key, blob)` as soon as a worker has read it, once per key across all
    /// workers, so that a trie can decode and hash it elsewhere
    /// (`bintrie_trie::Trie::decode_ahead`) while the rest are still being read. The walks
    /// still read the blobs above `below` (each names the next), but neither keep nor hand
    /// them on. `each` is called from the workers, so it must be quick (hand the blob on). What
    /// `each` does cannot fail the warm-up.
    pub fn warm_trie_paths_with(
        &self,
        stems: &[bintrie_keys::Stem],
        below: usize,
        workers: usize,
        stop: &std::sync::atomic::AtomicBool,
        each: Option<bintrie_trie::BlobSink<'_>>,
    ) -> Result<ReadStats, StoreError> {
        if stems.is_empty() {
            return Ok(ReadStats::default());
        }
        use std::sync::atomic::{AtomicUsize, Ordering};
        // Workers take a few neighbouring stems at a time from a shared cursor, so all stay
        // busy (reads in flight) until the list is done.
        const BATCH: usize = 8;
        let workers = workers.clamp(1, stems.len().div_ceil(BATCH));
        let next = AtomicUsize::new(0);
        // The keys handed on, across the workers (the upper groups lie on every path).
        let handed = std::sync::Mutex::new(std::collections::HashSet::new());
        type Blobs = Vec<(Vec<u8>, Vec<u8>)>;
        let parts: Vec<Result<Blobs, StoreError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let (next, handed) = (&next, &handed);
                    s.spawn(move || {
                        // The snapshot must be the tree this handle builds on.
                        let reader = self.reader_at_meta()?;
                        let mut seen = std::collections::HashSet::new();
                        let mut out = Vec::new();
                        loop {
                            let start = next.fetch_add(BATCH, Ordering::Relaxed);
                            if start >= stems.len() || stop.load(Ordering::Relaxed) {
                                break;
                            }
                            for stem in stems.iter().skip(start).take(BATCH) {
                                reader.walk(stem, |key, blob| {
                                    let path = bintrie_node::Path::from_key(key).ok();
                                    // The trie holds what lies above `below`.
                                    if path.is_some_and(|p| p.len() < below) {
                                        return;
                                    }
                                    if seen.insert(key.to_vec()) {
                                        if let Some(each) = each
                                            && let Some(path) = path
                                            && handed
                                                .lock()
                                                .unwrap_or_else(|e| e.into_inner())
                                                .insert(key.to_vec())
                                        {
                                            each(&path.to_key(), blob);
                                        }
                                        out.push((key.to_vec(), blob.to_vec()));
                                    }
                                })?;
                            }
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
        let nodes = txn.open_table(Some(T_NODES)).map_err(map_err)?;
        crate::reader::get_bounded(&txn, &nodes, T_NODES, key.as_bytes())
    }

    /// A blob that does not fit the tree this handle builds on is another writer's, not
    /// damage, when the database has moved on since this handle's meta: say so (`Conflict`).
    fn explain_mismatch(&self) -> Option<StoreError> {
        let txn = self.inner.db.begin_ro_txn().ok()?;
        let meta = txn.open_table(Some(T_META)).ok()?;
        self.check_base(read_meta(&txn, &meta).ok()?).err()
    }

    /// Writes the commit as the next block (meta block + 1), without code.
    fn apply(&mut self, commit: &CommitSet) -> Result<(), StoreError> {
        let next = self.meta.block + 1;
        self.write_block(commit, next, &[])
    }
}
