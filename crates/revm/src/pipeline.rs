//! One block through the state: the pipeline every caller goes through (`bintrie exec`, the
//! study, other tools).
//!
//! ```text
//!             ┌─ trie prefetch: preload the root-to-stem paths of `write_stems` ─────┐ (thread)
//! run_block ──┤                                                                      ├─ wait ─ trie update ─ commit
//!             └─ state prefetch (`prefetch`, N threads) ─ execute(&mut BlockDb) ─────┘
//! ```
//!
//! The trie prefetch runs beside the state prefetch and the execution; the trie update needs
//! exactly the blobs it preloads, so it waits for it (the wait counts as trie update). While it
//! waits, the block's thread decodes and hashes the blobs the prefetch hands on as they arrive
//! ([`TriePrefetcher::decode_ahead`]), so the update finds them decoded. If the execution fails
//! the trie prefetch is stopped and nothing is committed.

use crate::StateError;
use crate::Witnesses;
use crate::{BlockChanges, BlockDb, BlockDbOptions, PrefetchList, ReadStats, StateBackend};
use alloy_primitives::B256;
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::PathKey;
use bintrie_trie::{BlobSink, CommitStats, NodeStore, Trie, TrieStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What committing one block cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommitReport {
    /// The new root.
    pub root: B256,
    /// Applying the writes to the trie and rehashing, which serializes the changed blobs in
    /// the same walk.
    pub trie_update: Duration,
    /// Writing the block: the store's write of the serialized blobs (the MDBX transaction, the
    /// log's append; in memory, the maps).
    pub commit: Duration,
    /// Blobs and bytes written.
    pub stats: CommitStats,
    /// Trie work (nodes loaded, hashes) during the update and commit.
    pub trie: TrieStats,
}

/// The default prefetch threads of [`PipelineOptions`], the study and the CLI: the reads are
/// blocking page faults, so the drive's queue holds one request per thread, and a drive needs
/// 16-64 in flight (measured at 16M stems on 2 cores: state read 163-238 ms with 8 threads,
/// 116-172 ms with 32, and no better with 64 or 128, where the threads' own overhead grows).
pub const DEFAULT_PREFETCH_WORKERS: usize = 32;

/// How [`BlockState::run_block`] reads and prefetches. Build it with [`Default`] and the
/// `with_*` methods.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PipelineOptions {
    /// The block database: cache on or off, read path.
    pub db: BlockDbOptions,
    /// Threads of the state prefetch and of the trie prefetch (each its own read transaction).
    pub workers: usize,
    /// Build the block's witness (both encodings) from the pre-state, between the execution
    /// and the commit; its time is not part of the stage timings.
    pub witness: bool,
    /// Stream the state prefetch into execution ([`BlockDb::prefetch_streaming`]): execution
    /// starts at once and waits only for a listed key still in flight, instead of after every
    /// listed key is read. Off by default: the study measures the state read as a stage of its
    /// own (read everything, then execute). Only backends with a batch path stream (the log
    /// layout); others prefetch first either way.
    pub stream: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            db: BlockDbOptions::default(),
            workers: DEFAULT_PREFETCH_WORKERS,
            witness: false,
            stream: false,
        }
    }
}

impl PipelineOptions {
    /// With these block-database options.
    pub fn with_db(mut self, db: BlockDbOptions) -> Self {
        self.db = db;
        self
    }

    /// Building the block's witness, or not.
    pub fn with_witness(mut self, witness: bool) -> Self {
        self.witness = witness;
        self
    }

    /// With `workers` prefetch threads (at least 1).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Streaming the state prefetch into execution ([`PipelineOptions::stream`]), or not.
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }
}

/// What is known about a block before it executes: what to read ahead and what it will write.
#[derive(Clone, Debug, Default)]
pub struct BlockPlan {
    /// The block's number: the committed block becomes this one.
    pub number: u64,
    /// Accounts and slots to read before executing (`None`: no state prefetch).
    pub prefetch: Option<PrefetchList>,
    /// Stems the block is expected to write: the trie prefetch preloads their paths. Empty:
    /// no trie prefetch. Extra stems cost reads only; missing ones are loaded on demand.
    pub write_stems: Vec<Stem>,
    /// The hashes BLOCKHASH may ask for.
    pub block_hashes: Vec<(u64, B256)>,
}

/// Wall time of each stage of one block.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimings {
    /// Reading state, as far as execution waited for it ([`ReadStats::read_time`]): the state
    /// prefetch (streamed: the waits for keys still in flight) plus the reads execution made
    /// on a miss.
    pub state_read: Duration,
    /// The state prefetch's own wall time (streamed: beside execution, not part of
    /// `state_read`).
    pub prefetch: Duration,
    /// Executing, without the time spent waiting for reads.
    pub execution: Duration,
    /// The trie prefetch's own run time (it overlaps the stages above).
    pub trie_prefetch: Duration,
    /// The trie update, including the wait for the trie prefetch to finish, the parallel
    /// load of the paths of written stems the plan did not name, and the rehash (which
    /// serializes the changed blobs).
    pub trie_update: Duration,
    /// Of which the wait for the trie prefetch.
    pub trie_prefetch_wait: Duration,
    /// Writing the block: the store's write of the serialized blobs.
    pub commit: Duration,
    /// The whole block, first read to commit.
    pub total: Duration,
}

/// How many keys a block wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Tree keys written.
    pub keys: usize,
    /// Accounts whose header leaves were written.
    pub accounts: usize,
    /// Storage slots written.
    pub slots: usize,
}

/// One block run through the pipeline and committed.
#[derive(Clone, Debug)]
pub struct BlockRun<T> {
    /// What the execution returned.
    pub output: T,
    /// State reads (store reads, cache hits, misses, prefetch).
    pub reads: ReadStats,
    /// Keys written.
    pub writes: WriteCounts,
    /// Stage timings.
    pub timings: StageTimings,
    /// The commit: the new root, blobs written, trie work.
    pub commit: CommitReport,
    /// The block's witness, when [`PipelineOptions::witness`] asked for it.
    pub witness: Option<Witnesses>,
}

/// Why a block did not go through: the execution's own error, or the state's.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError<E: std::error::Error + 'static> {
    /// The execution failed; nothing was committed.
    #[error(transparent)]
    Execute(E),
    /// Reading, prefetching, updating or committing the state failed; nothing was committed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// A job that preloads the tree nodes on the root-to-stem paths of some stems, so a following
/// trie update finds them in memory: the pipeline's trie prefetch. Every [`Trie`] over a
/// [`WarmTriePaths`] store is one (the states over MDBX and the log hand out their own trie).
pub trait TriePrefetcher: Sync {
    /// Preloads the paths of `stems` with `workers` threads, handing each blob on the paths
    /// below the levels the trie keeps loaded ([`Trie::keep_resident`]) to `each(key, blob)`
    /// as it arrives, for [`TriePrefetcher::decode_ahead`] on another
    /// thread; returns early (successfully) when `stop` is set. `each` is called from the
    /// threads keeping the reads in flight, so it must be quick. Errors are the store's.
    fn preload(
        &self,
        stems: &[Stem],
        workers: usize,
        stop: &AtomicBool,
        each: BlobSink<'_>,
    ) -> Result<(), StateError>;

    /// Decodes and hashes `blob`, handed on by [`TriePrefetcher::preload`], ahead of the trie
    /// update that will load it (which then only compares hashes).
    fn decode_ahead(&self, key: &PathKey, blob: &[u8]);
}

/// A store that can preload the blobs on root-to-stem paths into memory, ahead of a trie
/// update (`warm_trie_paths_with` of the MDBX store and of the log), handing each to `each`
/// when given.
pub trait WarmTriePaths: NodeStore {
    /// Preloads the paths of `stems` with `workers` threads, handing each blob read at a path
    /// of at least `below` bits to `each` (quickly: it is called from the threads keeping the
    /// reads in flight); returns early (successfully) when `stop` is set. `below` is the depth
    /// above which the trie keeps its nodes loaded ([`Trie::keep_resident`]; 0: none): the
    /// log looks nothing up above it; the MDBX store walks from the root, so it reads those
    /// blobs, but neither keeps nor hands them on.
    fn warm_trie_paths_with(
        &self,
        stems: &[Stem],
        below: usize,
        workers: usize,
        stop: &AtomicBool,
        each: Option<BlobSink<'_>>,
    ) -> Result<(), StateError>;
}

/// `WarmTriePaths` for a store whose inherent `warm_trie_paths_with` has the same arguments
/// (its statistics are dropped, its error converted).
macro_rules! warm_trie_paths_of {
    ($feature:literal, $store:ty) => {
        #[cfg(feature = $feature)]
        impl WarmTriePaths for $store {
            fn warm_trie_paths_with(
                &self,
                stems: &[Stem],
                below: usize,
                workers: usize,
                stop: &AtomicBool,
                each: Option<BlobSink<'_>>,
            ) -> Result<(), StateError> {
                <$store>::warm_trie_paths_with(self, stems, below, workers, stop, each)?;
                Ok(())
            }
        }
    };
}
warm_trie_paths_of!("mdbx", bintrie_store::StateStore);
warm_trie_paths_of!("logstore", bintrie_logstore::LogStore);

/// A trie's prefetch: its store preloads the paths below the levels the trie keeps loaded,
/// and the blobs it hands on are decoded and hashed into the trie ([`Trie::decode_ahead`])
/// while the rest are still being read, so the update that follows only compares hashes
/// where it would have decoded and hashed.
impl<S: WarmTriePaths> TriePrefetcher for Trie<S> {
    fn preload(
        &self,
        stems: &[Stem],
        workers: usize,
        stop: &AtomicBool,
        each: BlobSink<'_>,
    ) -> Result<(), StateError> {
        let below = self.resident_depth().unwrap_or(0);
        self.store()
            .warm_trie_paths_with(stems, below, workers, stop, Some(each))
    }

    fn decode_ahead(&self, key: &PathKey, blob: &[u8]) {
        Trie::decode_ahead(self, key, blob);
    }
}

/// A committed binary-trie state that blocks run on: [`MemoryState`](crate::MemoryState),
/// [`StatelessState`](crate::StatelessState) (a block witness), `BinTrieState` (MDBX, feature
/// `mdbx`) or `LogState` (the log, feature `logstore`). [`BlockState::run_block`] is the block
/// pipeline over any of them.
pub trait BlockState {
    /// The backend of this state's block databases (it may borrow the state).
    type Backend<'a>: StateBackend
    where
        Self: 'a;

    /// The root after the last commit.
    fn root(&self) -> B256;

    /// The last committed block number.
    fn block(&self) -> u64;

    /// A revm database for the next block, over a snapshot of the last committed one.
    fn block_db(&self, options: BlockDbOptions) -> Result<BlockDb<Self::Backend<'_>>, StateError>;

    /// The trie prefetch, if this state has one (a state whose nodes are all in memory has
    /// nothing to preload).
    fn trie_prefetcher(&self) -> Option<&dyn TriePrefetcher>;

    /// Applies `changes` (one sorted batch; for equal keys the later write wins), rehashes and
    /// commits them as block `block`. On an error nothing is committed, and the state's
    /// in-memory tree is back at the last committed root (the failed block's changes never
    /// reach a later block). `block` may repeat the last committed block (a pre-state imported
    /// in parts) but not go below it: [`StateError::BlockOrder`], before anything is applied,
    /// on every backend. The sort, the trie update and the rehash run on rayon's global
    /// thread pool.
    fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError>;

    /// The root the state would have after `changes`, without committing them.
    fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError>;

    /// The witness of block `block`, about to be committed on this state (so built from the
    /// last committed one): both encodings for the tree keys the block read or wrote
    /// (`keys`, sorted) and the bytecode of `codes` (any order; the witness holds each once,
    /// sorted by hash: see [`crate::BlockWitness`]). Reads what
    /// the walks need; changes nothing.
    fn witness(
        &self,
        block: u64,
        keys: &[TreeKey],
        codes: &[B256],
    ) -> Result<Witnesses, StateError>;

    /// Runs one block: trie prefetch beside state prefetch and `execute` over the block's
    /// database, then the trie update and the commit as block `plan.number` (see the module
    /// docs for the picture). `execute` runs revm (or alloy-evm) over `&mut BlockDb` and
    /// returns whatever it wants kept, or an error to reject the block; the block's writes are
    /// taken from the database with geth's semantics ([`BlockDb::into_changes`]). On any error
    /// nothing is committed and the state stays at the block before.
    fn run_block<T, E: std::error::Error + 'static>(
        &mut self,
        plan: &BlockPlan,
        options: &PipelineOptions,
        execute: impl FnOnce(&mut BlockDb<Self::Backend<'_>>) -> Result<T, E>,
    ) -> Result<BlockRun<T>, PipelineError<E>>
    where
        Self: Sized,
    {
        // Before any work: the commit would refuse it after execution.
        StateError::check_order(plan.number, self.block())?;
        let t_total = Instant::now();
        let mut write_stems = plan.write_stems.clone();
        write_stems.sort_unstable();
        write_stems.dedup();
        let stop = AtomicBool::new(false);
        let this = &*self;
        let prefetcher = this.trie_prefetcher().filter(|_| !write_stems.is_empty());
        let (executed, trie_prefetch, wait) = preload_decoding(
            prefetcher,
            &write_stems,
            options.workers,
            &stop,
            || execute_stage(this, plan, options, execute),
            // A failed block uses nothing the preload reads.
            |executed| executed.is_ok(),
        );
        let (output, reads, exec_wall, changes, touched) = executed?;
        let trie_prefetch = trie_prefetch?;
        let witness = if options.witness {
            let (mut keys, codes) = touched;
            keys.extend(changes.writes.iter().map(|(k, _)| *k));
            keys.sort_unstable();
            keys.dedup();
            Some(self.witness(plan.number, &keys, &codes)?)
        } else {
            None
        };
        // The stems the block wrote that the plan did not name: their paths are loaded now, in
        // parallel, instead of one by one inside the trie update.
        let t_load = Instant::now();
        if let Some(prefetcher) = self.trie_prefetcher() {
            let mut missing: Vec<Stem> = changes
                .writes
                .iter()
                .map(|(k, _)| k.stem)
                .filter(|s| write_stems.binary_search(s).is_err())
                .collect();
            missing.sort_unstable();
            missing.dedup();
            if !missing.is_empty() {
                let (_, loaded, _) = preload_decoding(
                    Some(prefetcher),
                    &missing,
                    options.workers,
                    &AtomicBool::new(false),
                    || (),
                    |()| true,
                );
                loaded?;
            }
        }
        let load = t_load.elapsed();
        let writes = WriteCounts {
            keys: changes.writes.len(),
            accounts: changes.accounts_written,
            slots: changes.slots_written,
        };
        let commit = self.commit_block(changes, plan.number)?;
        let timings = StageTimings {
            state_read: reads.read_time(),
            prefetch: reads.prefetch_time,
            execution: exec_wall.saturating_sub(reads.miss_time + reads.prefetch_wait),
            trie_prefetch,
            trie_update: wait + load + commit.trie_update,
            trie_prefetch_wait: wait,
            commit: commit.commit,
            total: t_total
                .elapsed()
                .saturating_sub(witness.as_ref().map_or(Duration::ZERO, |w| w.build_time)),
        };
        Ok(BlockRun {
            output,
            reads,
            writes,
            timings,
            commit,
            witness,
        })
    }
}

/// Runs `prefetcher`'s `preload(stems)` on a thread of its own while this thread runs
/// `meanwhile`; then, if `go_on` says so, this thread decodes the blobs the preload hands on
/// ([`TriePrefetcher::decode_ahead`]) as they arrive, until the preload returns (else it sets
/// `stop`). Returns what `meanwhile` returned, the preload's own run time (or its error) and
/// the time from the end of `meanwhile` to the preload's end (the wait, decoding included).
/// Without a prefetcher it only runs `meanwhile`.
fn preload_decoding<R>(
    prefetcher: Option<&dyn TriePrefetcher>,
    stems: &[Stem],
    workers: usize,
    stop: &AtomicBool,
    meanwhile: impl FnOnce() -> R,
    go_on: impl FnOnce(&R) -> bool,
) -> (R, Result<Duration, StateError>, Duration) {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let (blobs, arriving) = std::sync::mpsc::channel::<(PathKey, Vec<u8>)>();
        let warm = prefetcher.map(|prefetcher| {
            s.spawn(move || {
                let t = Instant::now();
                let hand_on = |key: &PathKey, blob: &[u8]| {
                    // Nobody listens once the block failed.
                    let _ = blobs.send((*key, blob.to_vec()));
                };
                prefetcher
                    .preload(stems, workers, stop, &hand_on)
                    .map(|()| t.elapsed())
            })
        });
        let done = meanwhile();
        let t_wait = Instant::now();
        // Blobs decoded before the channel first ran dry (the backlog `meanwhile` left), when
        // that was, the blobs decoded in all and the time spent decoding them: the debug line
        // below tells whether the wait is the reads or the decoding.
        let (mut backlog, mut decoded, mut t_backlog) = (0usize, 0usize, t_wait);
        let mut decoding = Duration::ZERO;
        if !go_on(&done) {
            stop.store(true, Ordering::Relaxed);
        } else if let Some(prefetcher) = prefetcher {
            // While the reads finish, this thread (idle otherwise) decodes what arrived; the
            // channel closes when the preload returns. Each decoding is timed only for the
            // debug line (two clock reads a blob, ~1,200 blobs a block, on the wait's thread).
            let timed = tracing::enabled!(tracing::Level::DEBUG);
            let mut decode = |(key, blob): (PathKey, Vec<u8>)| {
                let t = timed.then(Instant::now);
                prefetcher.decode_ahead(&key, &blob);
                if let Some(t) = t {
                    decoding += t.elapsed();
                }
            };
            backlog = arriving.try_iter().map(&mut decode).count();
            t_backlog = Instant::now();
            decoded = backlog + arriving.into_iter().map(&mut decode).count();
        }
        let preloaded = match warm {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(StateError::Backend("the trie prefetch panicked".into()))),
            None => Ok(Duration::ZERO),
        };
        let wait = t_wait.elapsed();
        if let Ok(reads) = &preloaded {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            tracing::debug!(
                meanwhile_ms = ms(t_wait - t0),
                preload_ms = ms(*reads),
                backlog_ms = ms(t_backlog - t_wait),
                wait_ms = ms(wait),
                decoding_ms = ms(decoding),
                backlog,
                decoded,
                "trie prefetch joined"
            );
        }
        (done, preloaded, wait)
    })
}

/// What execution read: tree keys and code hashes ([`BlockDb::touched`]).
type Touched = (Vec<TreeKey>, Vec<B256>);

/// The state prefetch and the execution over one block database; returns the output, the
/// read counters, the execution's wall time, the block's writes and what it read.
#[allow(clippy::type_complexity)]
fn execute_stage<'s, S: BlockState, T, E: std::error::Error + 'static>(
    state: &'s S,
    plan: &BlockPlan,
    options: &PipelineOptions,
    execute: impl FnOnce(&mut BlockDb<S::Backend<'s>>) -> Result<T, E>,
) -> Result<(T, ReadStats, Duration, BlockChanges, Touched), PipelineError<E>> {
    let mut db = state
        .block_db(options.db.with_record_touched(options.witness))?
        .with_block_hashes(plan.block_hashes.iter().copied());
    let timed = |db: &mut BlockDb<S::Backend<'s>>| {
        let t = Instant::now();
        let output = execute(db);
        (output, t.elapsed())
    };
    let (output, exec_wall) = match &plan.prefetch {
        Some(list) if options.stream => db.prefetch_streaming(list, options.workers, timed)?,
        list => {
            if let Some(list) = list {
                db.prefetch(list, options.workers)?;
            }
            timed(&mut db)
        }
    };
    let output = output.map_err(PipelineError::Execute)?;
    let reads = db.stats();
    // Empty unless the witness asked for the reads to be recorded.
    let touched = db.touched();
    let changes = db.into_changes()?;
    Ok((output, reads, exec_wall, changes, touched))
}

/// Shared by the states' tests (each needs its store's feature).
#[cfg(all(test, any(feature = "mdbx", feature = "logstore")))]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Asserts the decode-ahead contract of a state's trie prefetch. Three blocks of accounts
    /// are committed on `state` (and on a memory state), then `cold` drops what its trie
    /// loaded; the next block's writes are known. `preload` over the stems they write
    /// hands blobs on, each of which `decode_ahead` keeps; the update of the state's `trie`
    /// then takes every node it loads from what was decoded ahead and reaches the memory
    /// state's root. With `resident` > 0 the trie first keeps the levels above it loaded
    /// ([`Trie::keep_resident`]): nothing above them is handed on.
    pub(crate) fn assert_decoded_ahead<St: BlockState, S: WarmTriePaths>(
        mut state: St,
        cold: impl FnOnce(St) -> St,
        trie: impl FnOnce(&mut St) -> &mut Trie<S>,
        resident: usize,
    ) where
        S::Error: std::fmt::Debug,
    {
        use alloy_primitives::{Address, U256};
        use bintrie_keys::AccountState;
        let mut mem = crate::MemoryState::new(5).unwrap();
        let all: Vec<(Address, AccountState)> = (1..=60u8)
            .map(|i| {
                let mut a = AccountState {
                    nonce: u64::from(i),
                    balance: U256::from(i),
                    ..Default::default()
                };
                a.storage.push((U256::from(i), U256::from(7)));
                (Address::repeat_byte(i), a)
            })
            .collect();
        for (block, chunk) in all.chunks(20).enumerate() {
            let changes = BlockChanges::from_accounts(chunk.iter().map(|(a, s)| (a, s))).unwrap();
            state
                .commit_block(changes.clone(), block as u64 + 1)
                .unwrap();
            mem.commit_block(changes, block as u64 + 1).unwrap();
        }
        let mut state = cold(state);
        let next: Vec<(Address, AccountState)> = all
            .iter()
            .step_by(3)
            .map(|(a, s)| {
                let mut s = s.clone();
                s.nonce += 1;
                (*a, s)
            })
            .collect();
        let changes = BlockChanges::from_accounts(next.iter().map(|(a, s)| (a, s))).unwrap();
        let want = mem.root_with(&changes).unwrap();
        let trie = trie(&mut state);
        if resident > 0 {
            trie.keep_resident(resident).unwrap();
            trie.load_resident().unwrap();
            trie.reset_stats();
        }
        let mut stems: Vec<Stem> = changes.writes.iter().map(|(k, _)| k.stem).collect();
        stems.sort_unstable();
        stems.dedup();
        let handed = Mutex::new(Vec::new());
        {
            let prefetcher: &dyn TriePrefetcher = &*trie;
            prefetcher
                .preload(&stems, 4, &AtomicBool::new(false), &|key, blob| {
                    handed.lock().unwrap().push(key.bit_len());
                    prefetcher.decode_ahead(key, blob);
                })
                .unwrap();
        }
        let handed = handed.into_inner().unwrap();
        assert!(
            handed.iter().all(|&bits| bits >= resident),
            "a blob above the resident depth {resident} handed on: {handed:?}"
        );
        let handed = handed.len();
        assert_eq!(
            trie.decoded_ahead(),
            handed,
            "each blob handed on once, and kept"
        );
        assert!(handed > 10, "{handed} blobs handed on");
        trie.update(changes.writes.clone()).unwrap();
        let loaded = trie.stats().nodes_loaded as usize;
        assert!(loaded > 0);
        assert_eq!(
            handed - trie.decoded_ahead(),
            loaded,
            "every load decoded ahead"
        );
        assert_eq!(B256::from(trie.root()), want);
    }
}
