//! The EIP-7864 binary-trie state as a revm database, over any backend.
//!
//! What the adapter reads is one trait pair ([`StateBackend`] opens [`StateSnapshot`]s: flat
//! stem reads and code by hash from one consistent snapshot), implemented for the MDBX store
//! (`MdbxBackend`, feature `mdbx`, on by default), the log layout (`LogBackend`, feature
//! `logstore`), a block witness ([`StatelessBackend`]) and memory ([`MemoryState`],
//! [`MemorySnapshot`]; no database: neither libmdbx nor libclang is needed).
//!
//! - [`TrieDb`]: revm's `DatabaseRef` straight over one snapshot. `Send + Sync`, and `'static`
//!   over [`MemorySnapshot`]; it works inside revm's `CacheDB`, `State` and `WrapDatabaseRef`.
//!   [`TrieDb::bundle_changes`] turns the `BundleState` of a revm `State` (bundle tracking)
//!   into tree writes.
//! - [`BlockDb`]: one block's `Database + DatabaseCommit` over a backend: a per-block cache
//!   (each stem and code read at most once), the block's writes as an overlay, parallel
//!   prefetch ([`PrefetchList`], one snapshot per worker; on a backend with a batch path
//!   optionally streamed into execution, [`BlockDb::prefetch_streaming`]), counters
//!   ([`ReadStats`]), and
//!   [`BlockDb::into_changes`], the block's tree writes with geth's semantics.
//! - [`BlockChanges`]: tree writes with geth's semantics (SPEC §4), from either path; commit them
//!   ([`MemoryState::commit_block`], `BinTrieState::commit_block`) or take the root they would
//!   give without committing ([`MemoryState::root_with`], `BinTrieState::root_with`).
//! - [`BlockState::run_block`]: the block pipeline (trie prefetch beside state prefetch and
//!   execution, then trie update and commit, with [`StageTimings`]) over any [`BlockState`]
//!   ([`MemoryState`], `BinTrieState`, `LogState`, [`StatelessState`]); `bintrie exec`, `bintrie blockchain-test`, the
//!   study and other tools go through it.
//! - With `mdbx`: `BinTrieState`, the trie over the MDBX store (`commit_block` applies a block's
//!   writes in one sorted batch and commits them in one transaction; the trie prefetch reads
//!   the paths the block will write in parallel).
//!
//! Examples: `examples/in_memory.rs` (no default features: accounts, one transaction, the
//! root), `examples/revm_state.rs` (revm's `State` with bundle tracking over [`TrieDb`], then
//! the bundle's root) and `examples/transfer.rs` (MDBX).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use alloy_primitives::{U256, address};
//! use bintrie_keys::AccountState;
//! use bintrie_revm::MemoryState;
//! use revm::database_interface::DatabaseRef;
//!
//! let alice = address!("0x1000000000000000000000000000000000000001");
//! let mut state = MemoryState::new(8)?;
//! let funded = AccountState { balance: U256::from(5), ..Default::default() };
//! let root = state.import_accounts([(&alice, &funded)], 0)?.root;
//! assert_ne!(root, alloy_primitives::B256::ZERO);
//! let db = state.trie_db(); // revm's DatabaseRef: wrap it in CacheDB or State
//! assert_eq!(db.basic_ref(alice)?.map(|a| a.balance), Some(U256::from(5)));
//! # Ok(()) }
//! ```
//!
#![cfg_attr(
    feature = "mdbx",
    doc = r#"
Over MDBX, every block goes through the pipeline:

```no_run
# fn main() -> Result<(), Box<dyn std::error::Error>> {
use bintrie_revm::{BinTrieState, BlockPlan, BlockState, PipelineOptions, PrefetchList};
let mut state = BinTrieState::open("state-db", &Default::default())?;
let mut list = PrefetchList::new();
list.system_contracts();
let plan = BlockPlan {
    number: state.block() + 1,
    prefetch: Some(list),
    ..Default::default()
};
let run = state.run_block(&plan, &PipelineOptions::default(), |db| {
    // ... run revm over `db` (a `&mut BlockDb`: `Database + DatabaseCommit`) ...
    Ok::<_, std::convert::Infallible>(())
})?;
println!("root {} in {:?}", run.commit.root, run.timings.total);
# Ok(()) }
```
"#
)]
#![forbid(unsafe_code)]

mod backend;
mod block;
mod changes;
mod chunks;
#[cfg(any(feature = "mdbx", feature = "logstore"))]
mod commit;
mod db;
mod error;
#[cfg(feature = "logstore")]
mod logstate;
mod memory;
mod pipeline;
mod prefetch;
#[cfg(feature = "mdbx")]
mod state;
mod stream;
mod witness;

#[cfg(feature = "mdbx")]
pub use backend::{MdbxBackend, MdbxSnapshot};
pub use backend::{SnapshotIo, StateBackend, StateSnapshot, StemsBatch};
pub use block::{BlockDb, BlockDbOptions, ReadStats};
pub use changes::BlockChanges;
pub use db::{StoredAccount, TrieDb, decode_account, decode_code};
pub use error::StateError;
#[cfg(feature = "logstore")]
pub use logstate::{LogBackend, LogSnapshot, LogState};
pub use memory::{MemorySnapshot, MemoryState};
pub use pipeline::{
    BlockPlan, BlockRun, BlockState, CommitReport, DEFAULT_PREFETCH_WORKERS, PipelineError,
    PipelineOptions, StageTimings, TriePrefetcher, WarmTriePaths, WriteCounts,
};
pub use prefetch::{
    BEACON_ROOTS_ADDRESS, CONSOLIDATION_REQUEST_ADDRESS, HISTORY_STORAGE_ADDRESS, ListedStem,
    PrefetchList, WITHDRAWAL_REQUEST_ADDRESS,
};
#[cfg(feature = "mdbx")]
pub use state::BinTrieState;
pub use witness::{
    BlockWitness, StatelessBackend, StatelessState, WitnessBytes, WitnessEncoding, WitnessNodes,
    Witnesses,
};
