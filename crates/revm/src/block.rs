//! [`BlockDb`]: one block's view of the state: a read cache in front of the store, the block's
//! writes as an overlay, parallel prefetch, and the tree writes the block produces.

use crate::db::{StoredAccount, TrieDb, decode_account, slot_value};
use crate::{PrefetchList, StateError};
use alloy_primitives::{Address, B256, U256};
use bintrie_keys::{
    BasicData, EMPTY_CODE_HASH, Stem, TreeKey, basic_data_key, chunkify_code, code_chunk_key,
    code_hash_key, storage_slot_key,
};
use bintrie_node::StemValues;
use bintrie_store::{ReadPath, StateStore};
use revm::bytecode::Bytecode;
use revm::database_interface::{Database, DatabaseCommit, DatabaseRef};
use revm::state::{Account, AccountInfo, AccountStatus};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How a [`BlockDb`] reads.
#[derive(Clone, Copy, Debug)]
pub struct BlockDbOptions {
    /// Keep every stem and code read for the rest of the block (the CacheDB pattern). Without
    /// it every access goes to the store (for measuring read amplification).
    pub cache: bool,
    /// How stems are found in the store.
    pub read_path: ReadPath,
}

impl Default for BlockDbOptions {
    fn default() -> Self {
        BlockDbOptions {
            cache: true,
            read_path: ReadPath::Flat,
        }
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
    /// Wall time of prefetch.
    pub prefetch_time: Duration,
    /// Storage slots revm asked for that the block had not written (revm asks once per slot
    /// per transaction), whether the cache or the store answered.
    pub slot_reads: u64,
    /// MDBX lookups behind those reads (node and stem blobs on the trie-walk path, one per
    /// stem on the flat path, plus code), prefetch workers included.
    pub lookups: u64,
    /// Bytes those lookups returned.
    pub bytes: u64,
}

impl ReadStats {
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

/// The tree writes of one block, ready for [`crate::BinTrieState::commit_block`].
#[derive(Clone, Debug, Default)]
pub struct BlockChanges {
    /// Tree writes (SPEC §4), one per key.
    pub writes: Vec<(TreeKey, [u8; 32])>,
    /// New bytecode by hash.
    pub code: Vec<(B256, Vec<u8>)>,
    /// Accounts whose header leaves are written.
    pub accounts_written: usize,
    /// Storage slots written.
    pub slots_written: usize,
}

/// One block's state: revm `Database + DatabaseCommit` over a store snapshot.
///
/// Reads go: the block's own writes, then the cache (when enabled), then the store (counted and
/// timed). `commit` (called by revm after each transaction) records changes with the value at
/// block start, so [`BlockDb::into_changes`] can apply geth's semantics (SPEC §4).
pub struct BlockDb<'s> {
    store: &'s StateStore,
    db: TrieDb<'s>,
    options: BlockDbOptions,
    stems: HashMap<Stem, Option<StemValues>>,
    codes: HashMap<B256, Bytecode>,
    seen_stems: HashSet<Stem>,
    seen_codes: HashSet<B256>,
    code_sizes: HashMap<Address, u32>,
    accounts: HashMap<Address, AccountChange>,
    storage: HashMap<(Address, U256), SlotChange>,
    new_code: HashMap<B256, Bytecode>,
    stats: ReadStats,
    commit_error: Option<StateError>,
}

impl std::fmt::Debug for BlockDb<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDb")
            .field("options", &self.options)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'s> BlockDb<'s> {
    /// A block view over a new snapshot of `store`.
    pub fn new(store: &'s StateStore, options: BlockDbOptions) -> Result<Self, StateError> {
        Ok(BlockDb {
            store,
            db: TrieDb::new(store, options.read_path)?,
            options,
            stems: HashMap::new(),
            codes: HashMap::new(),
            seen_stems: HashSet::new(),
            seen_codes: HashSet::new(),
            code_sizes: HashMap::new(),
            accounts: HashMap::new(),
            storage: HashMap::new(),
            new_code: HashMap::new(),
            stats: ReadStats::default(),
            commit_error: None,
        })
    }

    /// Supplies the hashes BLOCKHASH may ask for.
    pub fn with_block_hashes(mut self, hashes: impl IntoIterator<Item = (u64, B256)>) -> Self {
        self.db = self.db.with_block_hashes(hashes);
        self
    }

    /// The read counters so far.
    pub fn stats(&self) -> ReadStats {
        let own = self.db.store_stats();
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
        if let Some(c) = self.new_code.get(hash).or_else(|| self.codes.get(hash)) {
            self.stats.cache_hits += 1;
            return Ok(c.clone());
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

    fn stored_account(&mut self, address: &Address) -> Result<Option<StoredAccount>, StateError> {
        let acct = self.with_stem(&basic_data_key(address).stem, |v| {
            decode_account(address, v)
        })??;
        if let Some(a) = &acct {
            self.code_sizes.insert(*address, a.code_size);
        }
        Ok(acct)
    }

    /// Reads the stems (and then the code) of `list` with `workers` threads in parallel, each
    /// with its own read transaction, and fills the cache. Keys are grouped by stem, sorted and
    /// deduplicated; stems already cached are skipped. Without the cache this only warms the
    /// OS page cache. Returns the number of store reads made. A failed commit inside revm (a
    /// store error while recording changes) is reported by [`BlockDb::into_changes`].
    pub fn prefetch(&mut self, list: &PrefetchList, workers: usize) -> Result<u64, StateError> {
        let start = Instant::now();
        // Already sorted and deduplicated; filtering keeps the order.
        let (stems, is_header): (Vec<Stem>, Vec<bool>) = list
            .stems()
            .into_iter()
            .inspect(|_| self.stats.prefetch_stems += 1)
            .filter(|(s, _)| !self.stems.contains_key(s))
            .unzip();
        let (read, io) = parallel_read(self.store, &stems, workers, |r, s| {
            r.get_stem(s, self.options.read_path)
        })?;
        let mut reads = read.len() as u64;
        // Second round: the code of the prefetched accounts (header stems only).
        let mut hashes = Vec::new();
        for ((stem, values), header) in stems.iter().zip(&read).zip(is_header) {
            if header
                && let Some(v) = values
                && let Some(h) = v.get(bintrie_keys::CODE_HASH_LEAF_KEY)
            {
                let h = B256::from(*h);
                if h != EMPTY_CODE_HASH && h != B256::ZERO && !self.codes.contains_key(&h) {
                    hashes.push(h);
                }
            }
            self.seen_stems.insert(*stem);
        }
        hashes.sort_unstable();
        hashes.dedup();
        let (codes, code_io) =
            parallel_read(self.store, &hashes, workers, |r, h| r.get_code(&h.0))?;
        reads += codes.len() as u64;
        self.stats.lookups += io.lookups + code_io.lookups;
        self.stats.bytes += io.bytes + code_io.bytes;
        if self.options.cache {
            self.stems.extend(stems.into_iter().zip(read));
            // Code missing from the table is not cached: an execution that needs it reads it
            // on demand and gets `MissingCode` there.
            // Code that fails its hash or does not decode is not cached either: the read on
            // demand reports it as `CorruptCode`.
            for (h, c) in hashes.iter().zip(codes) {
                if let Some(Ok(code)) = c.map(|raw| crate::db::decode_code(h, raw)) {
                    self.codes.insert(*h, code);
                }
            }
        }
        self.seen_codes.extend(hashes);
        self.stats.store_reads += reads;
        self.stats.prefetch_reads += reads;
        self.stats.prefetch_time += start.elapsed();
        Ok(reads)
    }

    /// The block's tree writes with geth's semantics (SPEC §4): an account whose balance,
    /// nonce or code changed writes BASIC_DATA and CODE_HASH; new code writes all its chunks; a
    /// deleted account zeroes BASIC_DATA and CODE_HASH only; a slot writes its value when it
    /// differs from the block-start value (a cleared slot writes a present zero leaf; zero over
    /// zero writes nothing).
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
                    let basic = BasicData {
                        version: 0,
                        code_size: ch.code_size,
                        nonce: info.nonce,
                        balance: info.balance,
                    }
                    .encode()
                    .map_err(|source| StateError::Encode {
                        address: *address,
                        source,
                    })?;
                    out.writes.push((basic_data_key(address), basic));
                    out.writes.push((code_hash_key(address), info.code_hash.0));
                    out.accounts_written += 1;
                    if ch.code_changed
                        && let Some(code) = self.new_code.get(&info.code_hash)
                    {
                        let bytes = code.original_bytes();
                        for (i, chunk) in chunkify_code(&bytes).into_iter().enumerate() {
                            out.writes.push((code_chunk_key(address, i as u64), chunk));
                        }
                        out.code.push((info.code_hash, bytes.to_vec()));
                    }
                }
                (Some(_), None) => {
                    out.writes.push((basic_data_key(address), [0; 32]));
                    out.writes.push((code_hash_key(address), [0; 32]));
                    out.accounts_written += 1;
                }
                (None, None) => {}
            }
        }
        for ((address, slot), s) in &self.storage {
            if s.current != s.original {
                out.writes
                    .push((storage_slot_key(address, slot), s.current.to_be_bytes()));
                out.slots_written += 1;
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
        let ch = self.accounts.get_mut(&address).expect("inserted above");
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

/// Reads `items` with `workers` threads, each with its own read transaction, in contiguous
/// chunks of the sorted list; results come back in input order.
fn parallel_read<T: Sync, R: Send>(
    store: &StateStore,
    items: &[T],
    workers: usize,
    read: impl Fn(&bintrie_store::Reader<'_>, &T) -> Result<R, bintrie_store::StoreError> + Sync,
) -> Result<(Vec<R>, bintrie_store::ReadStats), StateError> {
    let mut io = bintrie_store::ReadStats::default();
    if items.is_empty() {
        return Ok((Vec::new(), io));
    }
    let workers = workers.clamp(1, items.len());
    let chunk = items.len().div_ceil(workers);
    type Part<R> = Result<(Vec<R>, bintrie_store::ReadStats), StateError>;
    let results: Vec<Part<R>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                let read = &read;
                s.spawn(move || -> Part<R> {
                    let reader = store.reader()?;
                    let out = part
                        .iter()
                        .map(|x| read(&reader, x).map_err(StateError::from))
                        .collect::<Result<Vec<R>, StateError>>()?;
                    Ok((out, reader.stats()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| panic!("prefetch worker panicked"))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for r in results {
        let (part, stats) = r?;
        out.extend(part);
        io.lookups += stats.lookups;
        io.bytes += stats.bytes;
    }
    Ok((out, io))
}

impl Database for BlockDb<'_> {
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
        self.with_stem(&key.stem, |v| slot_value(v, key.sub_index))
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, StateError> {
        self.db.block_hash_ref(number)
    }
}

impl DatabaseCommit for BlockDb<'_> {
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
