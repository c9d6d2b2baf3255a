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
//! exactly the blobs it preloads, so it waits for it (the wait counts as trie update). If the
//! execution fails the trie prefetch is stopped and nothing is committed.

use crate::{BinTrieState, BlockDb, BlockDbOptions, CommitReport, PrefetchList, ReadStats};
use crate::{BlockChanges, MdbxBackend, StateError};
use alloy_primitives::B256;
use bintrie_keys::Stem;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How [`BinTrieState::run_block`] reads and prefetches. Build it with [`Default`] and the
/// `with_*` methods.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PipelineOptions {
    /// The block database: cache on or off, read path.
    pub db: BlockDbOptions,
    /// Threads of the state prefetch and of the trie prefetch (each its own read transaction).
    pub workers: usize,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            db: BlockDbOptions::default(),
            workers: 8,
        }
    }
}

impl PipelineOptions {
    /// With these block-database options.
    pub fn with_db(mut self, db: BlockDbOptions) -> Self {
        self.db = db;
        self
    }

    /// With `workers` prefetch threads (at least 1).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
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
    /// Reading state: the state prefetch plus the reads execution made on a miss.
    pub state_read: Duration,
    /// Of which the state prefetch.
    pub prefetch: Duration,
    /// Executing, without the time spent reading on a miss.
    pub execution: Duration,
    /// The trie prefetch's own run time (it overlaps the stages above).
    pub trie_prefetch: Duration,
    /// The trie update, including the wait for the trie prefetch to finish.
    pub trie_update: Duration,
    /// Of which the wait for the trie prefetch.
    pub trie_prefetch_wait: Duration,
    /// Writing the block: serializing the nodes and the MDBX transaction.
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

impl BinTrieState {
    /// Runs one block: trie prefetch beside state prefetch and `execute` over the block's
    /// database, then the trie update and the commit as block `plan.number` (see the module
    /// docs for the picture). `execute` runs revm (or alloy-evm) over `&mut BlockDb` and
    /// returns whatever it wants kept; the block's writes are taken from the database with
    /// geth's semantics ([`BlockDb::into_changes`]). On any error nothing is committed.
    pub fn run_block<T, E: std::error::Error + 'static>(
        &mut self,
        plan: &BlockPlan,
        options: &PipelineOptions,
        execute: impl FnOnce(&mut BlockDb<MdbxBackend<'_>>) -> Result<T, E>,
    ) -> Result<BlockRun<T>, PipelineError<E>> {
        let t_total = Instant::now();
        let mut write_stems = plan.write_stems.clone();
        write_stems.sort_unstable();
        write_stems.dedup();
        let stop = AtomicBool::new(false);
        let store = self.store();
        let (executed, trie_prefetch, wait) = std::thread::scope(|s| {
            let warm = (!write_stems.is_empty()).then(|| {
                s.spawn(|| {
                    let t = Instant::now();
                    store
                        .warm_trie_paths(&write_stems, options.workers, &stop)
                        .map(|_| t.elapsed())
                })
            });
            let executed = self.execute_stage(plan, options, execute);
            if executed.is_err() {
                // Nothing will use the preload.
                stop.store(true, Ordering::Relaxed);
            }
            let t_wait = Instant::now();
            let trie_prefetch = match warm {
                Some(h) => h.join().unwrap_or_else(|_| {
                    Err(bintrie_store::StoreError::Corrupt(
                        "the trie prefetch panicked".into(),
                    ))
                }),
                None => Ok(Duration::ZERO),
            };
            (executed, trie_prefetch, t_wait.elapsed())
        });
        let (output, reads, exec_wall, changes) = executed?;
        let trie_prefetch = trie_prefetch.map_err(StateError::from)?;
        let writes = WriteCounts {
            keys: changes.writes.len(),
            accounts: changes.accounts_written,
            slots: changes.slots_written,
        };
        let commit = self.commit_block(changes, plan.number)?;
        let timings = StageTimings {
            state_read: reads.prefetch_time + reads.miss_time,
            prefetch: reads.prefetch_time,
            execution: exec_wall.saturating_sub(reads.miss_time),
            trie_prefetch,
            trie_update: wait + commit.trie_update,
            trie_prefetch_wait: wait,
            commit: commit.commit,
            total: t_total.elapsed(),
        };
        Ok(BlockRun {
            output,
            reads,
            writes,
            timings,
            commit,
        })
    }

    /// The state prefetch and the execution over one block database; returns the output, the
    /// read counters, the execution's wall time and the block's writes.
    fn execute_stage<T, E: std::error::Error + 'static>(
        &self,
        plan: &BlockPlan,
        options: &PipelineOptions,
        execute: impl FnOnce(&mut BlockDb<MdbxBackend<'_>>) -> Result<T, E>,
    ) -> Result<(T, ReadStats, Duration, BlockChanges), PipelineError<E>> {
        let mut db = self
            .block_db(options.db)?
            .with_block_hashes(plan.block_hashes.iter().copied());
        if let Some(list) = &plan.prefetch {
            db.prefetch(list, options.workers)?;
        }
        let t = Instant::now();
        let output = execute(&mut db).map_err(PipelineError::Execute)?;
        let exec_wall = t.elapsed();
        let reads = db.stats();
        let changes = db.into_changes()?;
        Ok((output, reads, exec_wall, changes))
    }
}
