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
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bintrie_revm::{BinTrieState, BlockDbOptions, PrefetchList};
//! let mut state = BinTrieState::open("state-db", &Default::default())?;
//! let mut db = state.block_db(BlockDbOptions::default())?;
//! db.prefetch(PrefetchList::new().system_contracts(), 8)?;
//! // ... run revm over `&mut db` ...
//! let changes = db.into_changes()?;
//! let report = state.commit_block(changes, 1)?;
//! println!("root {}", report.root);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod block;
mod db;
mod error;
mod prefetch;
mod state;

pub use block::{BlockChanges, BlockDb, BlockDbOptions, ReadStats};
pub use db::{StoredAccount, TrieDb, decode_account};
pub use error::StateError;
pub use prefetch::{
    BEACON_ROOTS_ADDRESS, CONSOLIDATION_REQUEST_ADDRESS, HISTORY_STORAGE_ADDRESS, PrefetchList,
    WITHDRAWAL_REQUEST_ADDRESS,
};
pub use state::{BinTrieState, CommitReport};
