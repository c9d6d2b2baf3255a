//! [`BlockDb`]: one block's view of the state: a read cache in front of the store, the block's
//! writes as an overlay, parallel prefetch, and the tree writes the block produces.

use crate::db::{StoredAccount, TrieDb, decode_account, slot_value};
use crate::stream::{Arrivals, Claims, Streamed, code_to_read};
use crate::{BlockChanges, PrefetchList, SnapshotIo, StateBackend, StateError, StateSnapshot};
use alloy_primitives::map::{HashMap, HashSet};
use alloy_primitives::{Address, B256, U256};
use bintrie_keys::{EMPTY_CODE_HASH, Stem, TreeKey, basic_data_key, storage_slot_key};
use bintrie_node::StemValues;
use revm::bytecode::Bytecode;
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef};
use revm::state::{Account, AccountInfo, AccountStatus};
use std::time::{Duration, Instant};

/// How a [`BlockDb`] reads. Build it with [`Default`] (cache on, flat read path) and the
/// `with_*` methods.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct BlockDbOptions {
    /// Keep every stem and code read for the rest of the block (the CacheDB pattern). Without
    /// it every access goes to the store (for measuring read amplification).
    pub cache: bool,
    /// How stems are found in the MDBX store (used by [`BlockDb::new`] and the pipeline; other
    /// backends ignore it).
    #[cfg(feature = "mdbx")]
    pub read_path: bintrie_store::ReadPath,
    /// Record the tree keys and code hashes execution reads ([`BlockDb::touched`]: what a
    /// block witness must prove). Off by default: it is a set insert on every read.
    pub record_touched: bool,
}

impl Default for BlockDbOptions {
    fn default() -> Self {
        BlockDbOptions {
            cache: true,
            #[cfg(feature = "mdbx")]
            read_path: bintrie_store::ReadPath::Flat,
            record_touched: false,
        }
    }
}

impl BlockDbOptions {
    /// With the per-block cache on or off.
    pub fn with_cache(mut self, cache: bool) -> Self {
        self.cache = cache;
        self
    }

    /// Recording what execution reads ([`BlockDbOptions::record_touched`]), or not.
    pub fn with_record_touched(mut self, record: bool) -> Self {
        self.record_touched = record;
        self
    }

    /// Finding stems in the MDBX store by `read_path`.
    #[cfg(feature = "mdbx")]
    pub fn with_read_path(mut self, read_path: bintrie_store::ReadPath) -> Self {
        self.read_path = read_path;
        self
    }
}

/// Read counters of one block.
///
/// A *key* here is a stem (the unit the store returns: an account's header, or 256 storage
/// slots) or a code hash. Read amplification = store reads / unique keys: exactly 1.00 when
/// every key is read once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadStats {
    /// Stem and code reads that went to the store (prefetch included).
    pub store_reads: u64,
    /// Distinct stems and code hashes read.
    pub unique_keys: u64,
    /// Reads answered by the cache or the block's own writes.
    pub cache_hits: u64,
    /// Reads during execution that missed the cache and went to the store.
    pub misses: u64,
    /// Time spent in those misses.
    pub miss_time: Duration,
    /// Store reads made by prefetch.
    pub prefetch_reads: u64,
    /// Distinct stems prefetch was asked for (listed accounts and slots grouped by stem).
    pub prefetch_stems: u64,
    /// Wall time of prefetch (streamed: the prefetch's own run, beside execution).
    pub prefetch_time: Duration,
    /// The prefetch was streamed into execution ([`BlockDb::prefetch_streaming`]):
    /// `prefetch_time` overlapped execution, and execution waited `prefetch_wait` for it.
    pub streamed: bool,
    /// Time execution waited for a streamed prefetch to hand on a key in flight (zero when the
    /// prefetch read everything before execution).
    pub prefetch_wait: Duration,
    /// Storage slots revm asked for that the block had not written (revm asks once per slot
    /// per transaction), whether the cache or the store answered.
    pub slot_reads: u64,
    /// Storage lookups behind those reads (for MDBX: node and stem blobs on the trie-walk path,
    /// one per stem on the flat path, plus code), prefetch workers included; zero for a backend
    /// that does not count them.
    pub lookups: u64,
    /// Bytes those lookups returned.
    pub bytes: u64,
}

impl ReadStats {
    /// The time reads held execution up: the prefetch when it ran before execution, or the
    /// waits for it when it was streamed, plus the misses.
    pub fn read_time(&self) -> Duration {
        let prefetch = if self.streamed {
            self.prefetch_wait
        } else {
            self.prefetch_time
        };
        prefetch + self.miss_time
    }

    /// Store reads per unique key (0 when nothing was read).
    pub fn read_amplification(&self) -> f64 {
        if self.unique_keys == 0 {
            0.0
        } else {
            self.store_reads as f64 / self.unique_keys as f64
        }
    }
}

#[derive(Clone, Debug)]
struct AccountChange {
    /// At block start (None: did not exist).
    original: Option<AccountInfo>,
    /// Now (None: does not exist / deleted).
    current: Option<AccountInfo>,
    code_size: u32,
    code_changed: bool,
    /// Storage reads as zero for slots this block did not write (self-destructed or created).
    storage_wiped: bool,
}

#[derive(Clone, Copy, Debug)]
struct SlotChange {
    original: U256,
    current: U256,
}

/// One block's state: revm `Database + DatabaseCommit` over a snapshot of a [`StateBackend`]
/// (the MDBX store through `MdbxBackend`, the log through `LogBackend`, the in-memory
/// [`crate::MemorySnapshot`], or a block witness through [`crate::StatelessBackend`]).
///
/// Reads go: the block's own writes, then the cache (when enabled), then the snapshot (counted
/// and timed). `commit` (called by revm after each transaction) records changes with the value
/// at block start, so [`BlockDb::into_changes`] can apply geth's semantics (SPEC §4).
pub struct BlockDb<B: StateBackend> {
    backend: B,
    db: TrieDb<B::Snapshot>,
    options: BlockDbOptions,
    stems: HashMap<Stem, Option<StemValues>>,
    codes: HashMap<B256, Bytecode>,
    seen_stems: HashSet<Stem>,
    seen_codes: HashSet<B256>,
    code_sizes: HashMap<Address, u32>,
    accounts: HashMap<Address, AccountChange>,
    storage: HashMap<(Address, U256), SlotChange>,
    new_code: HashMap<B256, Bytecode>,
    /// Tree keys and code hashes execution read (prefetch not counted): the block's witness.
    touched_keys: HashSet<TreeKey>,
    touched_codes: HashSet<B256>,
    stats: ReadStats,
    commit_error: Option<StateError>,
    /// A prefetch being streamed into execution: misses are taken from it first.
    stream: Option<std::sync::Arc<Streamed>>,
}

impl<B: StateBackend> std::fmt::Debug for BlockDb<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDb")
            .field("options", &self.options)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "mdbx")]
impl<'s> BlockDb<crate::MdbxBackend<'s>> {
    /// A block view over a new read transaction of the MDBX `store` at the block the handle
    /// holds, finding stems by `options.read_path`. The prefetch workers' transactions are at
    /// the same block: once another writer has committed past it, opening one is an error
    /// ([`bintrie_store::StoreError::Moved`]), never a read of the newer block.
    pub fn new(
        store: &'s bintrie_store::StateStore,
        options: BlockDbOptions,
    ) -> Result<Self, StateError> {
        Self::over(crate::MdbxBackend::new(store, options.read_path), options)
    }
}

impl<B: StateBackend> BlockDb<B> {
    /// A block view over a new snapshot of `backend` (the prefetch workers open their own).
    pub fn over(backend: B, options: BlockDbOptions) -> Result<Self, StateError> {
        Ok(BlockDb {
            db: TrieDb::from_snapshot(backend.snapshot()?),
            backend,
            options,
            stems: HashMap::default(),
            codes: HashMap::default(),
            seen_stems: HashSet::default(),
            seen_codes: HashSet::default(),
            code_sizes: HashMap::default(),
            accounts: HashMap::default(),
            storage: HashMap::default(),
            new_code: HashMap::default(),
            touched_keys: HashSet::default(),
            touched_codes: HashSet::default(),
            stats: ReadStats::default(),
            commit_error: None,
            stream: None,
        })
    }

    /// Supplies the hashes BLOCKHASH may ask for.
    pub fn with_block_hashes(mut self, hashes: impl IntoIterator<Item = (u64, B256)>) -> Self {
        self.db = self.db.with_block_hashes(hashes);
        self
    }

    /// The read counters so far.
    pub fn stats(&self) -> ReadStats {
        let own = self.db.io();
        ReadStats {
            unique_keys: (self.seen_stems.len() + self.seen_codes.len()) as u64,
            lookups: self.stats.lookups + own.lookups,
            bytes: self.stats.bytes + own.bytes,
            ..self.stats
        }
    }

    /// Runs `f` on the values of `stem`: from the cache, or read from the store (counted,
    /// timed, and cached when the cache is on). No copy of the stem is made on a hit.
    fn with_stem<R>(
        &mut self,
        stem: &Stem,
        f: impl FnOnce(Option<&StemValues>) -> R,
    ) -> Result<R, StateError> {
        if let Some(v) = self.stems.get(stem) {
            self.stats.cache_hits += 1;
            return Ok(f(v.as_ref()));
        }
        if let Some(stream) = &self.stream {
            let t = Instant::now();
            let taken = stream.take_stem(stem);
            self.stats.prefetch_wait += t.elapsed();
            if let Some(v) = taken {
                self.stats.cache_hits += 1;
                let out = f(v.as_ref());
                self.stems.insert(*stem, v);
                return Ok(out);
            }
        }
        let t = Instant::now();
        let v = self.db.read_stem(stem)?;
        self.stats.miss_time += t.elapsed();
        self.stats.misses += 1;
        self.stats.store_reads += 1;
        self.seen_stems.insert(*stem);
        let out = f(v.as_ref());
        if self.options.cache {
            self.stems.insert(*stem, v);
        }
        Ok(out)
    }

    fn code(&mut self, hash: &B256) -> Result<Bytecode, StateError> {
        if *hash == EMPTY_CODE_HASH || *hash == B256::ZERO {
            return Ok(Bytecode::default());
        }
        if let Some(c) = self.new_code.get(hash) {
            self.stats.cache_hits += 1;
            return Ok(c.clone());
        }
        if self.options.record_touched {
            self.touched_codes.insert(*hash);
        }
        if let Some(c) = self.codes.get(hash) {
            self.stats.cache_hits += 1;
            return Ok(c.clone());
        }
        if let Some(stream) = &self.stream {
            let t = Instant::now();
            let taken = stream.take_code(hash);
            self.stats.prefetch_wait += t.elapsed();
            if let Some(c) = taken {
                self.stats.cache_hits += 1;
                self.codes.insert(*hash, c.clone());
                return Ok(c);
            }
        }
        let t = Instant::now();
        let c = self.db.read_code(hash)?;
        self.stats.miss_time += t.elapsed();
        self.stats.misses += 1;
        self.stats.store_reads += 1;
        self.seen_codes.insert(*hash);
        if self.options.cache {
            self.codes.insert(*hash, c.clone());
        }
        Ok(c)
    }

    /// Records that execution read `key`, after checking the snapshot can answer for it.
    fn touch(&mut self, key: TreeKey) -> Result<(), StateError> {
        self.db.snapshot().check_leaf(&key)?;
        if self.options.record_touched {
            self.touched_keys.insert(key);
        }
        Ok(())
    }

    fn stored_account(&mut self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        let basic = basic_data_key(address);
        self.touch(basic)?;
        self.touch(TreeKey {
            sub_index: bintrie_keys::CODE_HASH_LEAF_KEY,
            ..basic
        })?;
        let acct = self.with_stem(&basic.stem, |v| decode_account(address, v))??;
        if let Some(a) = &acct {
            self.code_sizes.insert(*address, a.code_size);
        }
        Ok(acct)
    }

    /// Reads the stems of `list`, and the code of every listed account that has code, with
    /// `workers` threads in parallel (scoped threads, ended when this returns), each with its
    /// own read transaction, and fills the cache.
    /// Keys are grouped by stem, sorted and deduplicated; stems already cached are skipped. A
    /// worker reads an account's code (and checks and decodes it) right after its header stem,
    /// so code reads overlap stem reads; each code hash is read once. A backend with a batch
    /// path ([`StateSnapshot::stems_batch`]) reads every stem in one batch, each account's
    /// code-chunk stems (tree indices 1..=3) listed beside its header stem, and rebuilds the
    /// code from the chunks as they arrive, checked against the code hash; code longer than
    /// three chunk stems hold (27,776 bytes), or whose chunks do not rebuild it, is read by
    /// hash (the batch path checks rebuilt code on one more thread of its own). Present chunk
    /// stems count as reads; rebuilt code does not. Without the cache this
    /// only warms the OS page cache. A stem or code the snapshot does not hold
    /// ([`StateError::is_not_held`], a witness that lacks it) is not cached and not an error:
    /// execution's own read of it fails. Returns the number of store reads made. On an error
    /// nothing is cached and the `BlockDb` stays usable (execution reads on demand). A failed
    /// commit inside revm (a store error while recording changes) is reported by
    /// [`BlockDb::into_changes`].
    pub fn prefetch(&mut self, list: &PrefetchList, workers: usize) -> Result<u64, StateError> {
        let start = Instant::now();
        let listed = self.listed(list, false);
        let claims = Claims::new(self.known_codes());
        // A backend with a batch path (the log layout's io_uring) reads every stem at once,
        // with the code of the accounts rebuilt from their chunk stems (chunks.rs). Nothing
        // listed: no snapshot is opened.
        let batch = if listed.is_empty() {
            None
        } else {
            read_batch(&self.backend.snapshot()?, &listed, &claims)
        };
        let read = match batch {
            Some(read) => read?,
            None => {
                let (read, io) =
                    parallel_read(&self.backend, &listed, workers, |r, (stem, account)| {
                        // A stem the snapshot does not hold (a witness that lacks it: the list
                        // is a guess) is left out, uncached: a read on demand fails with it.
                        let values = match r.stem(stem) {
                            Err(e) if e.is_not_held() => return Ok(None),
                            read => read?,
                        };
                        let mut code: Option<Code> = None;
                        if let Some(h) = values
                            .as_ref()
                            .and_then(|v| code_to_read(account.is_some(), v, &claims))
                        {
                            // Code that fails its hash or does not decode is kept as the
                            // error: the read on demand reports it (`CorruptCode`); missing
                            // code is not cached either (`MissingCode` on demand), nor code
                            // the snapshot does not hold (`CodeNotInWitness` on demand: a
                            // contract coinbase's code is listed, never run, never in the
                            // witness). The batch path keeps it the same way.
                            match r.code(&h) {
                                // Not read, not counted: execution's own read says it.
                                Err(e) if e.is_not_held() => {}
                                read => {
                                    let raw = read?.map(|raw| crate::db::decode_code(&h, raw));
                                    code = Some((h, raw));
                                }
                            }
                        }
                        Ok(Some((values, code)))
                    })?;
                ListedRead {
                    read,
                    io,
                    chunk_stems: Vec::new(),
                    rebuilt: HashSet::default(),
                }
            }
        };
        let reads = self.absorb(listed, read, true);
        tracing::debug!(
            reads,
            ms = start.elapsed().as_secs_f64() * 1e3,
            workers,
            "prefetched"
        );
        self.stats.prefetch_time += start.elapsed();
        Ok(reads)
    }

    /// Runs `run` (execution) over this block with the prefetch of `list` streamed into it:
    /// the stems are read through the backend's batch path, as [`BlockDb::prefetch`] reads
    /// them, on one long-lived reading thread for the process (started on first use, which
    /// warms its heap before its first read), while `run` executes on the caller's thread; a
    /// stem or code execution asks for that the prefetch lists is taken from it as soon as its
    /// read arrives (execution waits only for a key whose read is in flight,
    /// [`ReadStats::prefetch_wait`]); anything else is read on demand. Prefetches streamed
    /// from several threads at once take turns on the reading thread. The same keys are read,
    /// each once, and counted as [`BlockDb::prefetch`] counts them ([`ReadStats::streamed`]
    /// set).
    ///
    /// Without the cache, over a backend with no batch path
    /// ([`StateSnapshot::has_batch_path`]), when the reading thread cannot be started, or
    /// called on the reading thread itself, this is [`BlockDb::prefetch`] then `run`. If the
    /// batch path declines after all (no io_uring from the kernel), execution reads on demand.
    /// A failed prefetch is the error even when `run` succeeded (its reads were then made on
    /// demand); `run`'s own result is returned otherwise, whatever it is.
    pub fn prefetch_streaming<T>(
        &mut self,
        list: &PrefetchList,
        workers: usize,
        run: impl FnOnce(&mut Self) -> T,
    ) -> Result<T, StateError> {
        let snapshot = if self.options.cache {
            Some(self.backend.snapshot()?)
        } else {
            None
        };
        // Never streamed from the reading thread itself: the reader would queue behind `run`,
        // which waits for it.
        let batch = snapshot.filter(|s| s.has_batch_path());
        let thread = batch.as_ref().and_then(|_| crate::stream::reading_thread());
        let (Some(snapshot), Some(thread)) =
            (batch, thread.filter(|t| t.current_thread_index().is_none()))
        else {
            self.prefetch(list, workers)?;
            return Ok(run(self));
        };
        let start = Instant::now();
        // In the order execution is likely to want them: the batch submits them in order.
        let listed = self.listed(list, true);
        if listed.is_empty() {
            // Nothing to read beside execution.
            return Ok(run(self));
        }
        let stream = std::sync::Arc::new(Streamed::new(
            listed.iter().map(|(stem, _)| *stem),
            self.known_codes(),
        ));
        self.stream = Some(std::sync::Arc::clone(&stream));
        self.stats.streamed = true;
        let mut read = None;
        // Returns once the reader has; a panic on the reading thread resumes here after `run`.
        let out = thread.in_place_scope(|scope| {
            let (snapshot, listed, stream, read) = (&snapshot, &listed, &*stream, &mut read);
            scope.spawn(move |_| {
                // However the reads end, execution stops waiting for them.
                let _end = stream.finish_on_drop();
                *read = Some((read_batch(snapshot, listed, stream), start.elapsed()));
            });
            run(self)
        });
        self.stream = None;
        // Unreachable: the scope returns normally only once the reader has set it.
        let Some((read, time)) = read else {
            return Err(StateError::Backend(
                "the streamed prefetch's reader ended without a result".into(),
            ));
        };
        self.stats.prefetch_time += time;
        let reads = match read {
            Some(read) => self.absorb(listed, read?, false),
            None => 0,
        };
        tracing::debug!(
            reads,
            ms = time.as_secs_f64() * 1e3,
            wait_ms = self.stats.prefetch_wait.as_secs_f64() * 1e3,
            "prefetch streamed"
        );
        Ok(out)
    }

    /// The stems of `list` not cached yet, each with its account when it is a header stem,
    /// deduplicated: sorted ([`PrefetchList::stems`]), or `by_account`
    /// ([`PrefetchList::stems_by_account`]); counts them in [`ReadStats::prefetch_stems`].
    fn listed(&mut self, list: &PrefetchList, by_account: bool) -> Vec<(Stem, Option<Address>)> {
        let stems = if by_account {
            list.stems_by_account()
        } else {
            list.stems()
        };
        self.stats.prefetch_stems += stems.len() as u64;
        // Already deduplicated; filtering keeps the order.
        stems
            .into_iter()
            .filter(|l| !self.stems.contains_key(&l.stem))
            .map(|l| (l.stem, l.account))
            .collect()
    }

    /// Code hashes the block has read or cached: a prefetch does not read them again.
    fn known_codes(&self) -> HashSet<B256> {
        self.codes
            .keys()
            .chain(self.seen_codes.iter())
            .copied()
            .collect()
    }

    /// Counts what a prefetch of `listed` read, and caches it when `cache` (and the block's
    /// cache is on). Returns the store reads made.
    fn absorb(
        &mut self,
        listed: Vec<(Stem, Option<Address>)>,
        read: ListedRead,
        cache: bool,
    ) -> u64 {
        let cache = cache && self.options.cache;
        let ListedRead {
            read,
            io,
            chunk_stems,
            rebuilt,
        } = read;
        // Code rebuilt from its chunk stems was not read itself: the stems count.
        let mut reads = chunk_stems.len() as u64;
        self.seen_stems.extend(chunk_stems);
        for ((stem, _), read) in listed.into_iter().zip(read) {
            // Not held: not read, not cached.
            let Some((values, code)) = read else {
                continue;
            };
            reads += 1;
            self.seen_stems.insert(stem);
            if let Some((h, code)) = code {
                if !rebuilt.contains(&h) {
                    reads += 1;
                    self.seen_codes.insert(h);
                }
                if cache && let Some(Ok(code)) = code {
                    self.codes.insert(h, code);
                }
            }
            if cache {
                self.stems.insert(stem, values);
            }
        }
        self.stats.lookups += io.lookups;
        self.stats.bytes += io.bytes;
        self.stats.store_reads += reads;
        self.stats.prefetch_reads += reads;
        reads
    }

    /// The accounts the block changed so far, as revm committed them: each with its state at
    /// block start and now (`None`: absent, or deleted), in no particular order. Code is not
    /// included (`AccountInfo::code` is `None`).
    pub fn account_changes(
        &self,
    ) -> impl Iterator<Item = (Address, Option<&AccountInfo>, Option<&AccountInfo>)> {
        self.accounts
            .iter()
            .map(|(a, ch)| (*a, ch.original.as_ref(), ch.current.as_ref()))
    }

    /// The storage slots the block wrote so far: `(address, slot, value at block start, value
    /// now)`, in no particular order (a slot written back to its start value is included).
    pub fn slot_changes(&self) -> impl Iterator<Item = (Address, U256, U256, U256)> + '_ {
        self.storage
            .iter()
            .map(|((a, k), ch)| (*a, *k, ch.original, ch.current))
    }

    /// What execution read so far (prefetch not counted): the tree keys (an account read is
    /// its BASIC_DATA and CODE_HASH leaves, a storage read its slot's leaf) and the code hashes
    /// of code the block did not deploy itself, each sorted: what a block witness must prove.
    /// Empty unless [`BlockDbOptions::record_touched`] is on.
    pub fn touched(&self) -> (Vec<TreeKey>, Vec<B256>) {
        let mut keys: Vec<TreeKey> = self.touched_keys.iter().copied().collect();
        keys.sort_unstable();
        let mut codes: Vec<B256> = self.touched_codes.iter().copied().collect();
        codes.sort_unstable();
        (keys, codes)
    }

    /// The block's tree writes with geth's semantics (SPEC §4): an account whose balance,
    /// nonce or code changed writes BASIC_DATA and CODE_HASH; new code writes all its chunks; a
    /// deleted account zeroes BASIC_DATA and CODE_HASH only; a slot writes its value when it
    /// differs from the block-start value (a cleared slot writes a present zero leaf; zero over
    /// zero writes nothing). A deleted account's storage leaves stay: before Cancun, an address
    /// self-destructed with storage and created again reads its old slots from the next block
    /// on (within the block, after the self-destruct's transaction, its storage reads as zero).
    pub fn into_changes(self) -> Result<BlockChanges, StateError> {
        if let Some(e) = self.commit_error {
            return Err(e);
        }
        let mut out = BlockChanges::default();
        for (address, ch) in &self.accounts {
            match (&ch.original, &ch.current) {
                (_, Some(info)) => {
                    let same = ch.original.as_ref().is_some_and(|o| {
                        o.balance == info.balance
                            && o.nonce == info.nonce
                            && o.code_hash == info.code_hash
                    });
                    if same && !ch.code_changed {
                        continue;
                    }
                    let new_code = if ch.code_changed {
                        self.new_code.get(&info.code_hash)
                    } else {
                        None
                    };
                    out.write_account(address, info, ch.code_size, new_code)?;
                }
                (Some(_), None) => out.delete_account(address),
                (None, None) => {}
            }
        }
        for ((address, slot), s) in &self.storage {
            if s.current != s.original {
                out.write_slot(address, slot, s.current);
            }
        }
        Ok(out)
    }

    fn commit_account(&mut self, address: Address, account: Account) -> Result<(), StateError> {
        if !account.is_touched() {
            return Ok(());
        }
        if !self.accounts.contains_key(&address) {
            let original = if account.status.contains(AccountStatus::LoadedAsNotExisting) {
                None
            } else {
                Some(account.original_info())
            };
            let code_size = match self.code_sizes.get(&address) {
                Some(s) => *s,
                None if original.is_some() => {
                    self.stored_account(&address)?.map_or(0, |a| a.code_size)
                }
                None => 0,
            };
            self.accounts.insert(
                address,
                AccountChange {
                    current: original.clone(),
                    original,
                    code_size,
                    code_changed: false,
                    storage_wiped: false,
                },
            );
        }
        let Some(ch) = self.accounts.get_mut(&address) else {
            return Ok(()); // inserted above
        };
        if account.is_selfdestructed() || account.is_empty() {
            // SELFDESTRUCT, or an empty account touched after EIP-161: it no longer exists.
            ch.current = None;
            ch.storage_wiped = true;
            ch.code_size = 0;
            self.storage.retain(|(a, _), _| *a != address);
            return Ok(());
        }
        if account.is_created() {
            ch.storage_wiped = true;
            self.storage.retain(|(a, _), _| *a != address);
        }
        let prev_hash = ch.current.as_ref().map(|i| i.code_hash);
        if prev_hash != Some(account.info.code_hash) || account.is_created() {
            if let Some(code) = &account.info.code
                && account.info.code_hash != EMPTY_CODE_HASH
            {
                self.new_code.insert(account.info.code_hash, code.clone());
                ch.code_size = code.original_bytes().len() as u32;
                ch.code_changed = true;
            } else if account.info.code_hash == EMPTY_CODE_HASH {
                ch.code_size = 0;
            }
        }
        let mut info = account.info.clone();
        info.code = None;
        ch.current = Some(info);
        for (slot, s) in account.storage.iter().filter(|(_, s)| s.is_changed()) {
            self.storage
                .entry((address, *slot))
                .or_insert(SlotChange {
                    original: s.original_value,
                    current: s.original_value,
                })
                .current = s.present_value;
        }
        Ok(())
    }
}

/// A code hash read for a header stem, with what its check gave (`None`: not stored).
type Code = (B256, Option<Result<Bytecode, StateError>>);

/// What a prefetch of listed stems read.
struct ListedRead {
    /// Each listed stem's values (in the list's order), with the code read for it; `None`
    /// for a stem the snapshot does not hold ([`StateError::is_not_held`]: nothing cached).
    read: Vec<Option<(Option<StemValues>, Option<Code>)>>,
    io: SnapshotIo,
    /// Code-chunk stems read beside the listed ones (present in the store).
    chunk_stems: Vec<Stem>,
    /// The hashes of the codes rebuilt from chunk stems (not read by hash).
    rebuilt: HashSet<B256>,
}

/// Reads `listed` (not empty: callers skip an empty list) through `snapshot`'s batch path
/// (chunks.rs), handing each stem and code to `arrivals` as it arrives; `None` when the
/// snapshot has no batch path (nothing started).
fn read_batch<S: StateSnapshot>(
    snapshot: &S,
    listed: &[(Stem, Option<Address>)],
    arrivals: &dyn Arrivals,
) -> Option<Result<ListedRead, StateError>> {
    if !snapshot.has_batch_path() {
        return None;
    }
    let batch = match crate::chunks::batch_read(snapshot, listed, arrivals)? {
        Ok(batch) => batch,
        Err(e) => return Some(Err(e)),
    };
    let crate::chunks::BatchRead {
        values,
        mut codes,
        chunk_stems,
        rebuilt,
        timings,
    } = batch;
    tracing::debug!(
        reads_ms = timings.0.as_secs_f64() * 1e3,
        decoded_ms = timings.1.as_secs_f64() * 1e3,
        chunk_stems = chunk_stems.len(),
        rebuilt = rebuilt.len(),
        "batch prefetch"
    );
    let read = listed
        .iter()
        .zip(values)
        .map(|((_, account), v)| {
            let code = account
                .and_then(|_| v.as_ref()?.get(bintrie_keys::CODE_HASH_LEAF_KEY))
                .map(|h| B256::from(*h))
                .and_then(|h| codes.remove(&h).map(|c| (h, c)));
            Some((v, code))
        })
        .collect();
    Some(Ok(ListedRead {
        read,
        io: snapshot.io(),
        chunk_stems,
        rebuilt,
    }))
}

/// Items a prefetch worker takes at a time: small, so every worker stays busy until the list
/// is done (a fixed split left the queue draining while the slowest chunk finished), yet
/// neighbours in the sorted list still share their B-tree pages.
const PREFETCH_BATCH: usize = 8;

/// Reads `items` with `workers` threads, each with its own snapshot of `backend`, taking
/// [`PREFETCH_BATCH`] items of the sorted list at a time from a shared cursor; results come
/// back in input order. The first error stops every worker.
fn parallel_read<B: StateBackend, T: Sync, R: Send>(
    backend: &B,
    items: &[T],
    workers: usize,
    read: impl Fn(&B::Snapshot, &T) -> Result<R, StateError> + Sync,
) -> Result<(Vec<R>, SnapshotIo), StateError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let mut io = SnapshotIo::default();
    if items.is_empty() {
        return Ok((Vec::new(), io));
    }
    let workers = workers.clamp(1, items.len().div_ceil(PREFETCH_BATCH));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    type Part<R> = Result<(Vec<(usize, R)>, SnapshotIo), StateError>;
    let results: Vec<Part<R>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (read, next, failed) = (&read, &next, &failed);
                s.spawn(move || -> Part<R> {
                    let snapshot = backend.snapshot()?;
                    let mut out = Vec::new();
                    loop {
                        let start = next.fetch_add(PREFETCH_BATCH, Ordering::Relaxed);
                        if start >= items.len() || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        for (i, x) in items.iter().enumerate().skip(start).take(PREFETCH_BATCH) {
                            match read(&snapshot, x) {
                                Ok(r) => out.push((i, r)),
                                Err(e) => {
                                    failed.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                            }
                        }
                    }
                    Ok((out, snapshot.io()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for r in results {
        let (part, stats) = r?;
        for (i, value) in part {
            slots[i] = Some(value);
        }
        io.lookups += stats.lookups;
        io.bytes += stats.bytes;
    }
    let out = slots
        .into_iter()
        .map(|v| v.expect("every item is read when no worker failed"))
        .collect();
    Ok((out, io))
}

impl<B: StateBackend> Database for BlockDb<B> {
    type Error = StateError;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, StateError> {
        if let Some(ch) = self.accounts.get(&address) {
            self.stats.cache_hits += 1;
            return Ok(ch.current.clone());
        }
        Ok(self.stored_account(&address)?.map(|a| a.info))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, StateError> {
        self.code(&code_hash)
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, StateError> {
        if let Some(s) = self.storage.get(&(address, index)) {
            self.stats.cache_hits += 1;
            return Ok(s.current);
        }
        if self.accounts.get(&address).is_some_and(|a| a.storage_wiped) {
            self.stats.cache_hits += 1;
            return Ok(U256::ZERO);
        }
        self.stats.slot_reads += 1;
        let key = storage_slot_key(&address, &index);
        self.touch(key)?;
        self.with_stem(&key.stem, |v| slot_value(v, key.sub_index))
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, StateError> {
        self.db.block_hash_ref(number)
    }
}

impl<B: StateBackend> DatabaseCommit for BlockDb<B> {
    fn commit(&mut self, changes: revm::primitives::AddressMap<Account>) {
        for (address, account) in changes {
            // A store read inside commit can only fail on I/O or corruption; revm's commit has
            // no error channel, so the failure is recorded and surfaces in `into_changes`.
            if let Err(e) = self.commit_account(address, account) {
                tracing::error!(%address, error = %e, "commit failed");
                self.commit_error.get_or_insert(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory whose batch path panics as it starts reading.
    struct PanickingBatch<'a>(&'a crate::MemoryState);
    struct PanickingSnapshot(crate::MemorySnapshot);

    impl StateBackend for PanickingBatch<'_> {
        type Snapshot = PanickingSnapshot;
        fn snapshot(&self) -> Result<PanickingSnapshot, StateError> {
            Ok(PanickingSnapshot(StateBackend::snapshot(self.0)?))
        }
    }

    impl StateSnapshot for PanickingSnapshot {
        fn stem(&self, stem: &Stem) -> Result<Option<StemValues>, StateError> {
            self.0.stem(stem)
        }
        fn code(&self, hash: &B256) -> Result<Option<alloy_primitives::Bytes>, StateError> {
            self.0.code(hash)
        }
        fn has_batch_path(&self) -> bool {
            true
        }
        fn stems_batch(
            &self,
            _: &[Stem],
            _: &mut dyn FnMut(usize, Option<&StemValues>) -> Option<B256>,
        ) -> Option<Result<crate::StemsBatch, StateError>> {
            panic!("the batch path panics");
        }
    }

    /// A streamed prefetch whose reader panics ends the stream (execution reads what it
    /// needs on demand instead of waiting for it forever), and its panic reaches the caller
    /// once execution is done; the reading thread streams the next block.
    #[test]
    fn a_streamed_reader_that_panics_ends_the_stream_and_reaches_the_caller() {
        use revm::Database as _;
        let mut state = crate::MemoryState::new(5).unwrap();
        let address = Address::repeat_byte(0x11);
        let account = bintrie_keys::AccountState {
            balance: alloy_primitives::U256::from(7),
            ..Default::default()
        };
        let changes = crate::BlockChanges::from_accounts([(&address, &account)]).unwrap();
        state.commit_block(changes, 1).unwrap();
        let mut list = PrefetchList::new();
        list.account(address);
        for _ in 0..2 {
            let backend = PanickingBatch(&state);
            let mut db = BlockDb::over(backend, BlockDbOptions::default()).unwrap();
            let mut seen = None;
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                db.prefetch_streaming(&list, 2, |db| {
                    seen = db.basic(address).unwrap().map(|a| a.balance);
                })
            }));
            let panic = caught.expect_err("the reader's panic reaches the caller");
            assert_eq!(panic.downcast_ref(), Some(&"the batch path panics"));
            assert_eq!(
                seen,
                Some(alloy_primitives::U256::from(7)),
                "read on demand"
            );
        }
    }

    /// Whatever the worker count, every item is read once and the results come back in input
    /// order; an error on one item is the result, whatever the others did.
    #[test]
    fn parallel_reads_keep_order_and_report_errors() {
        let state = crate::MemoryState::new(4).unwrap();
        let items: Vec<u32> = (0..1_000).collect();
        for workers in [1, 3, 8, 32, 200, 5_000] {
            let seen = std::sync::Mutex::new(Vec::new());
            let (out, _) = parallel_read(&state, &items, workers, |_, x| {
                seen.lock().unwrap().push(*x);
                Ok(u64::from(*x) * 3)
            })
            .unwrap();
            assert_eq!(
                out,
                items.iter().map(|x| u64::from(*x) * 3).collect::<Vec<_>>()
            );
            let mut seen = seen.into_inner().unwrap();
            seen.sort_unstable();
            assert_eq!(seen, items, "{workers} workers");
            let failed = parallel_read(&state, &items, workers, |_, x| {
                if *x == 777 {
                    Err(StateError::MissingCode(B256::ZERO))
                } else {
                    Ok(*x)
                }
            });
            assert!(failed.is_err(), "{workers} workers");
        }
        let (none, _) = parallel_read(&state, &[] as &[u32], 8, |_, x| Ok(*x)).unwrap();
        assert!(none.is_empty());
    }
}
