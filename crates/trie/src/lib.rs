//! The EIP-7864 binary trie engine.
//!
//! [`Trie`] is generic over where its nodes live ([`NodeStore`]: fetch a blob by path, apply a
//! commit) and over the hash function ([`bintrie_node::TreeHasher`], SHA-256 by default).
//! [`MemoryStore`] keeps nodes in a hash map.
//!
//! ```
//! use bintrie_trie::{MemoryStore, Trie};
//! use bintrie_keys::TreeKey;
//!
//! let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::new(), 5).unwrap();
//! trie.insert(TreeKey::from_bytes([1; 32]), [2; 32]).unwrap();
//! let root = trie.root();
//! trie.commit().unwrap();
//!
//! // Reopen from the store: same root, values load lazily.
//! let mut again: Trie<MemoryStore> = Trie::open(trie.into_store(), 5, root).unwrap();
//! assert_eq!(again.get(&TreeKey::from_bytes([1; 32])).unwrap(), Some([2; 32]));
//! assert_eq!(again.root(), root);
//! ```

#![forbid(unsafe_code)]

mod build;
mod commit;
mod proof;
mod store;
mod trie;
mod witness;

pub use build::{BuildError, SortedBuild};
pub use commit::CommitSet;
pub use proof::{Proof, ProofError, StemLeaf};
pub use store::{BlobSink, MemoryStore, NodeStore, remove_store_dir_if};
pub use trie::{CommitStats, Trie, TrieStats, sort_dedup_last};
pub use witness::{PartialTree, WitnessBlobs, WitnessError, WitnessSize};

use bintrie_node::{Hash32, Path};

/// Lower-case hex of bytes, for error messages (one for the whole crate).
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Why a trie operation failed. `E` is the store's error type.
#[derive(Debug, thiserror::Error)]
pub enum TrieError<E: std::error::Error + 'static> {
    /// The store failed.
    #[error("store: {0}")]
    Store(E),
    /// A node the tree refers to is not in the store.
    #[error("node missing from the store at path {path}")]
    MissingNode {
        /// Where it should be.
        path: Path,
    },
    /// A stored blob is malformed or does not fit where it is (including a group blob that
    /// would expand into internal nodes at depth 248 or below, where only stems can sit).
    #[error("corrupt node at path {path}: {reason}")]
    Corrupt {
        /// Where it is.
        path: Path,
        /// What is wrong.
        reason: String,
    },
    /// A stored group was written at another group depth than the trie's.
    #[error("stored group depth {stored}, the trie was opened with {expected}")]
    GroupDepthMismatch {
        /// Group depth in the blob.
        stored: u8,
        /// Group depth of this trie.
        expected: u8,
    },
    /// Group depth outside 1..=8.
    #[error("group depth {0} outside 1..8")]
    BadGroupDepth(u8),
    /// [`Trie::keep_resident`] was given a depth past 248, or one where a node could be
    /// neither a group root nor a stem.
    #[error(
        "resident depth {depth}: must be 248, or below 248 and a multiple of the group depth {group_depth}"
    )]
    BadResidentDepth {
        /// The depth asked for.
        depth: usize,
        /// The trie's group depth.
        group_depth: u8,
    },
    /// `apply_sorted` was given a batch that is not strictly sorted by key.
    #[error("batch is not sorted by key without duplicates")]
    UnsortedBatch,
    /// The operation would lose uncommitted changes.
    #[error("the trie has uncommitted changes")]
    Uncommitted,
    /// A path longer than 248 bits (only a corrupt store can cause it).
    #[error("path deeper than 248 bits")]
    TooDeep,
    /// [`Trie::prove`] of the one key no proof can show: its stem is 31 zero bytes (no account
    /// or storage key has it) and its walk ends in an empty subtree below the root, so the
    /// node above that subtree hashes alike as the stem's own node and
    /// [`crate::Proof::verify`] would refuse any proof of it.
    #[error(
        "no proof of key 0x{} can be verified: its stem is 31 zero bytes and its walk ends in \
         an empty left subtree, whose parent hashes alike as that stem's own node (no account or \
         storage key has this stem)",
        hex(&.0.to_bytes())
    )]
    Unprovable(bintrie_keys::TreeKey),
    /// A node does not hash to what its parent holds for it: a blob loaded from the store
    /// (checked on every load, against the hash in its parent group or the root hash given to
    /// [`Trie::open`]), or a node [`Trie::verify`] recomputed. The blob is not used: the failed
    /// operation changes nothing (blobs verified before it may stay loaded).
    #[error(
        "node at path {path} hashes to {} but its parent holds {}",
        hex(.computed),
        hex(.claimed)
    )]
    HashMismatch {
        /// Where the node sits.
        path: Path,
        /// The hash its parent (or the caller) holds for it.
        claimed: Hash32,
        /// The hash of what the store holds there.
        computed: Hash32,
    },
}
