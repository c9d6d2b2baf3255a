//! Writing blocks: one MDBX write transaction per block, refused when another writer
//! committed since (no lost update), and the bulk load of a first commit.

use crate::*;

impl StateStore {
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
    pub(crate) fn conflict(&self, stored: Option<Meta>) -> StoreError {
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
}

/// Bytes available to an unprivileged writer on the filesystem holding `dir`.
fn free_bytes(dir: &FsPath) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}
