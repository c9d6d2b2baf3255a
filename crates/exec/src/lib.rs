//! Executing recorded Ethereum blocks on the EIP-7864 binary-trie state.
//!
//! - [`alloc::alloc_writes`]: a geth genesis alloc as tree writes; [`kv`]: the `KEY VALUE`
//!   line format of tree writes; [`proof::ProofJson`]: a single-key proof as JSON.
//! - [`fixture`]: the block fixtures (zkpi, rpccache, `eth_getBlockByNumber` with a pre-state
//!   file), one module per format, each read into a [`Fixture`]: the block, its pre-state, the
//!   hashes BLOCKHASH may ask for, the keys it touches and (when recorded) its post values.
//! - [`import_pre_state`] writes a fixture's pre-state into an empty state (any
//!   [`BlockState`](bintrie_revm::BlockState)), as one committed batch.
//! - [`execute_block`] runs the block with alloy-evm's Ethereum block executor through the
//!   block pipeline ([`BlockState::run_block`](bintrie_revm::BlockState::run_block): prefetch, execution, trie update, commit).
//! - [`validate`] checks the result against the header and the fixture's post values and
//!   returns typed [`Check`]s with a description of every difference.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bintrie_exec::{ExecOptions, execute_block, fixture, import_pre_state, validate};
//! use bintrie_revm::BinTrieState;
//! use bintrie_store::ReadPath;
//!
//! let fx = fixture::load("22615247-prague.zkpi.json".as_ref(), None)?;
//! let mut state = BinTrieState::open("exec-db", &Default::default())?;
//! import_pre_state(&mut state, &fx)?;
//! let executed = execute_block(&mut state, &fx, &ExecOptions::default())?;
//! let validation = validate(&state, &fx, &executed, ReadPath::Flat)?;
//! println!("root {}, valid: {}", executed.run.commit.root, validation.valid());
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod alloc;
pub mod blockchain_test;
mod chain;
mod execute;
pub mod fixture;
pub mod input;
pub mod json;
pub mod kv;
pub mod proof;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod validate;

pub use chain::ChainSpec;
pub use execute::{
    ExecOptions, Executed, PreStateImport, Prefetch, execute_block, import_pre_state,
    import_pre_state_over, prefetch_list,
};
pub use fixture::Fixture;
pub use validate::{Check, Validation, validate, validate_over};

use bintrie_revm::StateError;

/// Why a block could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The fixture could not be read or is malformed; the message names the file and the field.
    #[error("{0}")]
    Fixture(String),
    /// The block is outside what the executor supports (block 0, a block before the Merge),
    /// or the database is not the one an import expects (not empty, or not the base it was
    /// built on). A fixture of another chain is refused when it is read
    /// ([`ExecError::Fixture`]).
    #[error("{0}")]
    Unsupported(String),
    /// The state failed (store, trie, corrupt data).
    #[error(transparent)]
    State(#[from] StateError),
    /// The block did not execute (an invalid transaction, a failed system call); nothing was
    /// committed.
    #[error("executing block {number}: {reason}")]
    Execution {
        /// The block.
        number: u64,
        /// Why, with the fixture's own inconsistencies when it has any.
        reason: String,
    },
}
