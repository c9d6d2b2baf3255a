//! Writing blocks: one MDBX write transaction per block, refused when another writer
//! committed since (no lost update), and the bulk load of a first commit.

use crate::*;

impl StateStore {
    /// Commits one block: the commit's blobs and removals, the flat stem table for every stem
    /// blob in it, `code` (hash -> bytecode), and the meta (root, `block`). Either all of it
    /// becomes visible or none; readers opened after it returns see it. `block` may repeat the
    /// last committed block but not go below it ([`StoreError::BlockOrder`], nothing written).
    ///
    /// Without a write buffer this is one MDBX transaction. With one
    /// ([`StoreOptions::buffer`]) the block is appended to the journal (fdatasync'd when
    /// [`Durability::Durable`]) and added to the buffer; a full buffer is first flushed
    /// ([`StateStore::flush`]), inside this call.
    pub fn write_block(
        &mut self,
        commit: &CommitSet,
        block: u64,
        code: &[(Hash32, Vec<u8>)],
    ) -> Result<(), StoreError> {
        if block < self.meta.block {
            return Err(StoreError::BlockOrder {
                block,
                last: self.meta.block,
            });
        }
        if let Some(options) = self.inner.options.buffer {
            return self.buffer_block(options, commit, block, code);
        }
        self.block_txn(block, |txn, t| {
            put_block(txn, t, commit.removed(), commit.nodes(), code)?;
            Ok(commit.root)
        })
    }

    fn buffer_block(
        &mut self,
        options: BufferOptions,
        commit: &CommitSet,
        block: u64,
        code: &[(Hash32, Vec<u8>)],
    ) -> Result<(), StoreError> {
        if self.inner.read_only {
            return Err(StoreError::ReadOnly);
        }
        let full = {
            let p = self.pending();
            p.blocks >= options.max_blocks || p.bytes >= options.max_bytes
        };
        if full {
            self.flush()?;
        }
        let record = buffer::encode(
            (self.meta.block, self.meta.root),
            Meta {
                root: commit.root,
                block,
                ..self.meta
            },
            commit.removed(),
            commit.nodes(),
            code,
            commit.bytes(),
        );
        // The journal first: a block is in MDBX only once its record is.
        let before = {
            let mut journal = self.journal();
            let journal = journal
                .as_mut()
                .ok_or_else(|| StoreError::Options("this handle has no write journal".into()))?;
            let before = journal.len();
            journal.append(&record).map(|()| before)
        }
        .map_err(|e| self.disk_full_or(e))?;
        let written = self.block_txn(block, |txn, t| {
            put_block(txn, t, commit.removed(), commit.nodes(), code)?;
            Ok(commit.root)
        });
        if let Err(e) = written {
            if let Some(journal) = self.journal().as_mut() {
                journal.cut(before);
            }
            return Err(e);
        }
        let mut p = self.pending();
        p.blocks += 1;
        p.bytes += commit.bytes() + code.iter().map(|(_, c)| c.len()).sum::<usize>();
        Ok(())
    }

    /// Makes every committed block durable in MDBX (an fsync of its data file, unless the
    /// durability is [`Durability::Relaxed`]) and empties the journal. Nothing to do without a
    /// write buffer or when no block was committed since the last flush. On an error nothing is
    /// lost: the journal still holds the blocks. Call it before handing the database to
    /// another program or a backup; an open for writing replays whatever the journal holds past
    /// MDBX's last sync.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending().blocks == 0 {
            return Ok(());
        }
        let t = std::time::Instant::now();
        if self.inner.options.durability != Durability::Relaxed {
            self.inner.db.sync(true).map_err(map_err)?;
        }
        if let Some(journal) = self.journal().as_mut() {
            journal.clear()?;
        }
        let mut p = self.pending();
        tracing::debug!(blocks = p.blocks, bytes = p.bytes, time = ?t.elapsed(), "flushed");
        *p = buffer::Pending {
            synced: Some(self.meta),
            blocks: 0,
            bytes: 0,
        };
        Ok(())
    }

    /// One write transaction for block `block`: `body` writes the tables and returns the new
    /// root, then the meta is updated and the transaction committed. On any error nothing is
    /// written.
    fn block_txn(
        &mut self,
        block: u64,
        body: impl FnOnce(&RwTxn<'_>, &Tables<'_>) -> Result<Hash32, StoreError>,
    ) -> Result<(), StoreError> {
        let base = self.meta;
        self.write_txn(|txn, t| {
            let root = body(txn, t)?;
            Ok(Some(Meta {
                root,
                block,
                ..base
            }))
        })
    }

    /// A write transaction that leaves the meta's block and root alone (a part of a sorted
    /// build); `mark` also puts the in-progress marker.
    fn partial_txn(
        &mut self,
        body: impl FnOnce(&RwTxn<'_>, &Tables<'_>) -> Result<(), StoreError>,
        mark: bool,
    ) -> Result<(), StoreError> {
        self.write_txn(|txn, t| {
            if mark {
                txn.put(&t.meta, M_BUILDING, [1u8], WriteFlags::UPSERT)
                    .map_err(map_err)?;
            }
            body(txn, t)?;
            Ok(None)
        })
    }

    /// One write transaction: refused if this handle is read-only or another writer committed
    /// since this handle's meta (a lost update otherwise); then `body` writes the tables and
    /// returns the new meta, if any, which is written and becomes this handle's. On any error
    /// nothing is written.
    pub(crate) fn write_txn(
        &mut self,
        body: impl FnOnce(&RwTxn<'_>, &Tables<'_>) -> Result<Option<Meta>, StoreError>,
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
        // MDBX serialises write transactions; this one must also build on the block this
        // handle last saw.
        self.check_base(read_meta(&txn, &tables.meta)?)?;
        let t = std::time::Instant::now();
        let meta = body(&txn, &tables).map_err(|e| self.disk_full_or(e))?;
        let body_time = t.elapsed();
        if let Some(meta) = &meta {
            put_meta(&txn, &tables.meta, meta)?;
        }
        let t = std::time::Instant::now();
        txn.commit().map_err(|e| self.disk_full_or(map_err(e)))?;
        tracing::debug!(?body_time, commit_time = ?t.elapsed(), "write transaction");
        if let Some(meta) = meta {
            self.meta = meta;
            // Preloaded blobs belong to the previous block's tree.
            self.warm().blobs.clear();
        }
        Ok(())
    }

    /// `Ok` when the database is at `stored` = this handle's block and root, else the conflict.
    pub(crate) fn check_base(&self, stored: Option<Meta>) -> Result<(), StoreError> {
        let at = stored
            .as_ref()
            .map_or((0, ZERO_HASH), |m| (m.block, m.root));
        if at == (self.meta.block, self.meta.root) {
            Ok(())
        } else {
            Err(self.conflict(stored))
        }
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
            .filter_map(|(_, b)| split_stem_blob(b))
            .collect();
        flat.sort_unstable_by_key(|e| e.0);
        let mut code: Vec<_> = code.iter().collect();
        code.sort_unstable_by_key(|c| c.0);
        code.dedup_by_key(|c| c.0);
        self.block_txn(block, |txn, t| {
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
            append_code(txn, t, code)?;
            Ok(commit.root)
        })
    }

    /// Builds a whole tree into an empty database as block `block`, from its stems in strictly
    /// increasing order, in bounded memory: [`bintrie_trie::SortedBuild`] emits each stem and
    /// group blob as soon as it is final; they are buffered up to `batch_bytes` and each full
    /// buffer is written in its own transaction by a writer thread while this one hashes on
    /// (flat stems and node blobs appended in key order; the few groups that sort before a key
    /// an earlier batch wrote are put by the last transaction), so neither the tree, nor its
    /// blobs, nor MDBX's dirty pages grow with the state. The last transaction writes the
    /// rest, the code and the meta. The tables are the same as
    /// [`StateStore::bulk_load`]'s for the same state.
    ///
    /// While the build spans transactions, the meta carries a marker: a process killed midway
    /// leaves a database that every open refuses ([`StoreError::NotADatabase`], "an
    /// interrupted sorted build"). On an error here (an `Err` from `stems`, stems out of
    /// order, a full disk) what was written is cleared again and the database is left empty.
    /// `progress` is called with the stems placed, now and then. Returns the root.
    pub fn build_sorted(
        &mut self,
        stems: impl IntoIterator<Item = Result<(Stem, StemValues), StoreError>>,
        code: &[(Hash32, Vec<u8>)],
        block: u64,
        batch_bytes: usize,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Hash32, StoreError> {
        if self.meta.root != ZERO_HASH || self.meta.block != 0 {
            return Err(StoreError::Options(
                "a sorted build needs an empty database".into(),
            ));
        }
        let mut code: Vec<_> = code.iter().collect();
        code.sort_unstable_by_key(|c| c.0);
        code.dedup_by_key(|c| c.0);
        let mut build: SortedBuild = SortedBuild::new(self.meta.group_depth)
            .map_err(|e| StoreError::Options(e.to_string()))?;
        // Two threads: this one hashes (the sorted build) while a writer thread writes the
        // batches it hands over (one in flight), so hashing and MDBX overlap. The writer does
        // every transaction, the last one and the clean-up after an error included.
        let (built, written) = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<BuildMsg>(1);
            let this = &mut *self;
            let writer = s.spawn(move || this.write_build(rx, block, code));
            let built = (|| {
                let mut batch = NodeBatch::default();
                let mut pushed = 0u64;
                for item in stems {
                    let (stem, values) = item?;
                    build
                        .push(stem, values, &mut |k, b| batch.push(k, b))
                        .map_err(|e| StoreError::Options(format!("sorted build: {e}")))?;
                    pushed += 1;
                    if batch.bytes() >= batch_bytes {
                        if tx
                            .send(BuildMsg::Batch(std::mem::take(&mut batch)))
                            .is_err()
                        {
                            // The writer failed: its error is the answer.
                            return Ok(None);
                        }
                        progress(pushed);
                    }
                }
                let root = build.finish(&mut |k, b| batch.push(k, b));
                Ok(tx
                    .send(BuildMsg::Last(batch, root))
                    .is_ok()
                    .then_some((root, pushed)))
            })();
            drop(tx);
            let written = writer.join().unwrap_or_else(|_| {
                Err(StoreError::Corrupt(
                    "the build's writer thread panicked".into(),
                ))
            });
            (built, written)
        });
        match (built, written) {
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            (Ok(Some((root, pushed))), Ok(())) => {
                progress(pushed);
                Ok(root)
            }
            (Ok(None), Ok(())) => Err(StoreError::Corrupt(
                "the build's writer stopped without an error".into(),
            )),
        }
    }

    /// The writer thread of [`StateStore::build_sorted`]: each batch in its own transaction
    /// (the first one marks the build as under way), the last with the code and the meta.
    /// Without a last batch (the build failed) or on an error, what earlier transactions wrote
    /// is cleared again.
    fn write_build(
        &mut self,
        rx: std::sync::mpsc::Receiver<BuildMsg>,
        block: u64,
        code: Vec<&(Hash32, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let mut spanned = false;
        let mut done = false;
        let mut code = Some(code);
        let (mut tail, mut late) = (None, Vec::new());
        let result = (|| {
            for msg in rx {
                match msg {
                    BuildMsg::Batch(mut batch) => {
                        self.partial_txn(
                            |txn, t| batch.write(txn, t, &mut tail, &mut late),
                            !spanned,
                        )?;
                        spanned = true;
                    }
                    BuildMsg::Last(mut batch, root) => {
                        let code = code.take().unwrap_or_default();
                        self.block_txn(block, |txn, t| {
                            batch.write(txn, t, &mut tail, &mut late)?;
                            write_late(txn, t, &mut late)?;
                            append_code(txn, t, code)?;
                            txn.del(&t.meta, M_BUILDING, None).map_err(map_err)?;
                            Ok(root)
                        })?;
                        done = true;
                    }
                }
            }
            Ok(())
        })();
        if !done && spanned {
            // Take back what the earlier transactions wrote; if even that fails, the marker
            // keeps the database from being used.
            let _ = self.partial_txn(
                |txn, t| {
                    for table in [&t.nodes, &t.stems, &t.code] {
                        txn.clear_table(table).map_err(map_err)?;
                    }
                    txn.del(&t.meta, M_BUILDING, None).map_err(map_err)?;
                    Ok(())
                },
                false,
            );
        }
        result
    }
}

/// What the hashing side of a sorted build hands its writer.
enum BuildMsg {
    /// A full batch, written in its own transaction.
    Batch(NodeBatch),
    /// The rest and the root: the last transaction.
    Last(NodeBatch, Hash32),
}

/// One block's tables: its removed paths, its blobs (with the flat entry of each stem blob)
/// and its code, put in `txn`. What every block commit writes (unbuffered, buffered, replayed).
pub(crate) fn put_block<'a>(
    txn: &RwTxn<'_>,
    t: &Tables<'_>,
    removed: &[PathKey],
    nodes: impl Iterator<Item = (&'a PathKey, &'a [u8])>,
    code: &[(Hash32, Vec<u8>)],
) -> Result<(), StoreError> {
    for key in removed {
        check_existing(txn, &t.nodes, T_NODES, key.as_bytes())?;
        txn.del(&t.nodes, key.as_bytes(), None).map_err(map_err)?;
    }
    for (key, blob) in nodes {
        check_existing(txn, &t.nodes, T_NODES, key.as_bytes())?;
        txn.put(&t.nodes, key.as_bytes(), blob, WriteFlags::UPSERT)
            .map_err(map_err)?;
        if let Some((stem, flat)) = split_stem_blob(blob) {
            check_existing(txn, &t.stems, T_STEMS, stem)?;
            txn.put(&t.stems, stem, flat, WriteFlags::UPSERT)
                .map_err(map_err)?;
        }
    }
    for (hash, bytecode) in code {
        check_existing(txn, &t.code, T_CODE, hash)?;
        txn.put(&t.code, hash, bytecode, WriteFlags::UPSERT)
            .map_err(map_err)?;
    }
    Ok(())
}

/// Refuses to replace or delete an entry whose stored length no entry of its table can have
/// ([`crate::reader::check_lengths`]): MDBX moves the old value's bytes by that length, and a
/// damaged one crashed the writer (and, its block in the journal, every writer after it). The
/// lookup reads the length only, never the bytes.
fn check_existing(
    txn: &RwTxn<'_>,
    table: &libmdbx::Table<'_>,
    name: &str,
    key: &[u8],
) -> Result<(), StoreError> {
    if let Some(libmdbx::ObjectLength(len)) = txn
        .get::<libmdbx::ObjectLength>(table, key)
        .map_err(map_err)?
    {
        crate::reader::check_lengths(name, key.len(), Some(key), len)?;
    }
    Ok(())
}

/// Code entries (sorted by hash, without duplicates) appended to the code table.
fn append_code(
    txn: &RwTxn<'_>,
    t: &Tables<'_>,
    code: Vec<&(Hash32, Vec<u8>)>,
) -> Result<(), StoreError> {
    for (hash, bytecode) in code {
        txn.put(&t.code, hash, bytecode, WriteFlags::APPEND)
            .map_err(map_err)?;
    }
    Ok(())
}

/// Blobs waiting to be written, in one buffer, in the order the build emitted them.
#[derive(Default)]
struct NodeBatch {
    keys: Vec<(PathKey, std::ops::Range<usize>)>,
    data: Vec<u8>,
}

impl NodeBatch {
    fn push(&mut self, key: PathKey, blob: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(blob);
        self.keys.push((key, start..self.data.len()));
    }

    fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Writes the batch and empties it: stem blobs' flat entries appended (the build emits
    /// stems in stem order), then the blobs in key order, appended (MDBX `APPEND`: no tree
    /// descent, only the last page touched) after `tail`, the largest key written so far. A
    /// blob whose key sorts at or before `tail` (a group completed after descendants that an
    /// earlier batch wrote: a few per batch) goes to `late` instead, for the last transaction.
    fn write(
        &mut self,
        txn: &RwTxn<'_>,
        t: &Tables<'_>,
        tail: &mut Option<PathKey>,
        late: &mut Vec<(PathKey, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let mut flat = txn.cursor(&t.stems).map_err(map_err)?;
        for (_, range) in &self.keys {
            let blob = &self.data[range.clone()];
            if let Some((stem, flat_value)) = split_stem_blob(blob) {
                flat.put(stem, flat_value, WriteFlags::APPEND)
                    .map_err(map_err)?;
            }
        }
        // Stable: a key emitted twice keeps its emission order, so the later blob wins.
        self.keys.sort_by_key(|(k, _)| *k);
        let mut cursor = txn.cursor(&t.nodes).map_err(map_err)?;
        for (key, range) in &self.keys {
            let blob = &self.data[range.clone()];
            if tail.is_some_and(|last| *key <= last) {
                late.push((*key, blob.to_vec()));
                continue;
            }
            cursor
                .put(key.as_bytes(), blob, WriteFlags::APPEND)
                .map_err(map_err)?;
            *tail = Some(*key);
        }
        self.keys.clear();
        self.data.clear();
        Ok(())
    }
}

/// Writes the blobs [`NodeBatch::write`] held back, in key order (MDBX `UPSERT`).
fn write_late(
    txn: &RwTxn<'_>,
    t: &Tables<'_>,
    late: &mut [(PathKey, Vec<u8>)],
) -> Result<(), StoreError> {
    late.sort_by_key(|(k, _)| *k);
    let mut cursor = txn.cursor(&t.nodes).map_err(map_err)?;
    for (key, blob) in late.iter() {
        cursor
            .put(key.as_bytes(), blob, WriteFlags::UPSERT)
            .map_err(map_err)?;
    }
    Ok(())
}

/// Bytes available to an unprivileged writer on the filesystem holding `dir` (`None` when it
/// cannot be asked, e.g. `dir` does not exist).
pub fn free_bytes(dir: &FsPath) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}
