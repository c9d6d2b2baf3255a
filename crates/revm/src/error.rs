//! The adapter's error type.

use alloy_primitives::{Address, B256};
#[cfg(feature = "mdbx")]
use bintrie_store::StoreError;
#[cfg(feature = "mdbx")]
use bintrie_trie::TrieError;
use revm::database_interface::DBErrorMarker;

/// Why a state operation failed. Non-exhaustive: the MDBX variants exist only with the `mdbx`
/// feature.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The MDBX store failed.
    #[cfg(feature = "mdbx")]
    #[error("store: {0}")]
    Store(StoreError),
    /// The trie over the MDBX store failed (a missing or corrupt node, a store error while
    /// loading).
    #[cfg(feature = "mdbx")]
    #[error("trie: {0}")]
    Trie(TrieError<StoreError>),
    /// Another backend failed (the log layout's store or trie, the in-memory state's trie, a
    /// backend implemented outside this crate) or a pipeline thread panicked: its own error,
    /// boxed.
    #[error("backend: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A block witness does not prove what was asked (the path it is missing), is malformed,
    /// or does not hash to its pre-state root.
    #[error("{0}")]
    Witness(bintrie_trie::WitnessError),
    /// A stored account leaf does not decode.
    #[error("corrupt account {address}: {reason}")]
    CorruptAccount {
        /// The account.
        address: Address,
        /// What is wrong.
        reason: String,
    },
    /// Stored code does not hash to its code hash, or does not decode as bytecode.
    #[error("corrupt code {hash}: {reason}")]
    CorruptCode {
        /// The code hash it is stored under.
        hash: B256,
        /// What is wrong.
        reason: String,
    },
    /// An account's code hash has no entry in the code table.
    #[error("code {0} is not in the code table")]
    MissingCode(B256),
    /// A stateless run's account names a code hash the witness holds no code for: the witness
    /// lacks it, or carries it changed (its codes are found by their keccak-256).
    #[error(
        "code {0} is not in the witness (its codes are found by their keccak-256: the witness \
         lacks this code, or holds it changed)"
    )]
    CodeNotInWitness(B256),
    /// BLOCKHASH asked for a block whose hash the caller did not supply.
    #[error("no hash supplied for block {0}")]
    MissingBlockHash(u64),
    /// A commit as a block below the state's last committed one: every backend keeps block
    /// numbers from going back (one may repeat). Nothing was applied.
    #[error("block {block} is below the last committed block {last}")]
    BlockOrder {
        /// The block asked for.
        block: u64,
        /// The state's last committed block.
        last: u64,
    },
    /// An account cannot be encoded (e.g. a balance over 16 bytes).
    #[error("account {address}: {reason}")]
    Encode {
        /// The account.
        address: Address,
        /// Why. Not named `source`: thiserror would make it the error's source, and an error
        /// chain would then print the reason twice.
        reason: bintrie_keys::KeyError,
    },
}

impl DBErrorMarker for StateError {}

impl StateError {
    /// [`StateError::BlockOrder`] when `block` is below `last`, the state's last committed
    /// block: the check every backend's `commit_block` makes before anything else.
    pub(crate) fn check_order(block: u64, last: u64) -> Result<(), StateError> {
        if block < last {
            return Err(StateError::BlockOrder { block, last });
        }
        Ok(())
    }

    /// True when the snapshot does not hold what was asked, as opposed to failing to read it:
    /// a stateless state's witness lacks the stem ([`bintrie_trie::WitnessError::Incomplete`])
    /// or the code ([`StateError::CodeNotInWitness`]). A read execution makes fails with it;
    /// a prefetch, whose list is a guess, leaves that key to be read on demand instead.
    pub fn is_not_held(&self) -> bool {
        matches!(
            self,
            StateError::CodeNotInWitness(_)
                | StateError::Witness(
                    bintrie_trie::WitnessError::Incomplete { .. }
                        | bintrie_trie::WitnessError::IncompleteLeaf { .. }
                )
        )
    }
}

// By hand rather than `#[from]`: the message already includes the inner error, and a
// `#[source]` would print it twice in an error chain.
#[cfg(feature = "mdbx")]
impl From<StoreError> for StateError {
    fn from(e: StoreError) -> Self {
        StateError::Store(e)
    }
}

#[cfg(feature = "mdbx")]
impl From<TrieError<StoreError>> for StateError {
    fn from(e: TrieError<StoreError>) -> Self {
        StateError::Trie(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error chain (`{:#}`, what the CLI prints) says an account's encoding fault once: the
    /// fault is in the message, so it must not also be the error's source.
    #[test]
    fn an_encoding_fault_is_said_once() {
        let e = StateError::Encode {
            address: Address::repeat_byte(0x45),
            reason: bintrie_keys::KeyError::BalanceTooLarge,
        };
        assert!(std::error::Error::source(&e).is_none());
        let said = e.to_string();
        assert_eq!(
            said.matches("does not fit in 128 bits").count(),
            1,
            "{said}"
        );
        assert!(said.contains("0x4545"), "{said}");
    }
}
