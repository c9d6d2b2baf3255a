//! The EIP-7864 binary-trie state as a revm database.
//!
//! - [`TrieDb`]: revm's `DatabaseRef` straight over a store snapshot (works inside revm's
//!   `CacheDB`, `State` and `WrapDatabaseRef`).
//! - [`BlockDb`]: one block's `Database + DatabaseCommit`: a per-block cache (each stem and code
//!   read from the store at most once), the block's writes as an overlay, parallel prefetch
//!   ([`PrefetchList`]), counters ([`ReadStats`]), and [`BlockDb::into_changes`], the block's tree
//!   writes with geth's semantics.
//! - [`BinTrieState`]: the trie over the MDBX store; [`BinTrieState::commit_block`] applies a
//!   block's writes in one sorted batch and commits them in one transaction.
//! - [`BinTrieState::run_block`]: the block pipeline (trie prefetch beside state prefetch and
//!   execution, then trie update and commit, with [`StageTimings`]) that `bintrie exec`, the
//!   study and other tools go through.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bintrie_revm::{BinTrieState, BlockPlan, PipelineOptions, PrefetchList};
//! let mut state = BinTrieState::open("state-db", &Default::default())?;
//! let mut list = PrefetchList::new();
//! list.system_contracts();
//! let plan = BlockPlan {
//!     number: state.block() + 1,
//!     prefetch: Some(list),
//!     ..Default::default()
//! };
//! let run = state.run_block(&plan, &PipelineOptions::default(), |db| {
//!     // ... run revm over `db` (a `&mut BlockDb`: `Database + DatabaseCommit`) ...
//!     Ok::<_, std::convert::Infallible>(())
//! })?;
//! println!("root {} in {:?}", run.commit.root, run.timings.total);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod block;
mod db;
mod error;
mod pipeline;
mod prefetch;
mod state;

pub use block::{BlockChanges, BlockDb, BlockDbOptions, ReadStats};
pub use db::{StoredAccount, TrieDb, decode_account};
pub use error::StateError;
pub use pipeline::{
    BlockPlan, BlockRun, PipelineError, PipelineOptions, StageTimings, WriteCounts,
};
pub use prefetch::{
    BEACON_ROOTS_ADDRESS, CONSOLIDATION_REQUEST_ADDRESS, HISTORY_STORAGE_ADDRESS, PrefetchList,
    WITHDRAWAL_REQUEST_ADDRESS,
};
pub use state::{BinTrieState, CommitReport};
