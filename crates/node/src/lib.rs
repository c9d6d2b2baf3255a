//! EIP-7864 node model and on-disk codec.
//!
//! - [`hash`]: the hash function as a type parameter ([`TreeHasher`]); [`Sha256Hasher`] is the
//!   default, a fixed-size fast path over `sha2`'s raw compression function.
//! - [`stem`]: the 256 values of one stem ([`StemValues`]), their hashing (SPEC §3) and the stem
//!   blob (SPEC §5).
//! - [`group`]: the grouped-internal blob for group depths 1..8 ([`GroupBlob`]).
//! - [`path`]: bit paths from the root and their path keys ([`Path`], [`PathKey`]), and
//!   [`deeper`], through which every recursive walk over the tree takes its next level.
//!
//! Decoders validate everything and return [`CodecError`]; they never panic on any input.

#![forbid(unsafe_code)]

pub mod group;
pub mod hash;
pub mod path;
pub mod stem;

pub use group::{GROUP_TAG, GroupBlob, GroupEntry, MAX_GROUP_DEPTH, MIN_GROUP_DEPTH};
pub use hash::{Hash32, Sha256Hasher, TreeHasher, ZERO_HASH};
pub use path::{MAX_DEPTH, Path, PathKey, deeper};
pub use stem::{STEM_TAG, StemValues, fold_pair, split_stem_blob, stem_node_hash};

/// A stored node blob, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeBlob {
    /// A stem blob: the stem and its present values.
    Stem(bintrie_keys::Stem, StemValues),
    /// A grouped-internal blob.
    Group(GroupBlob),
}

impl NodeBlob {
    /// Decodes a blob of either kind by its tag byte.
    pub fn decode(blob: &[u8]) -> Result<NodeBlob, CodecError> {
        match blob.first() {
            Some(&STEM_TAG) => {
                StemValues::decode_blob(blob).map(|(stem, values)| NodeBlob::Stem(stem, values))
            }
            Some(&GROUP_TAG) => GroupBlob::decode(blob).map(NodeBlob::Group),
            Some(&tag) => Err(CodecError::UnknownTag(tag)),
            None => Err(CodecError::Truncated { len: 0, min: 1 }),
        }
    }
}

/// Why a blob or key was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Shorter than the smallest blob of its kind.
    #[error("blob truncated: {len} bytes, at least {min} needed")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        min: usize,
    },
    /// First byte is neither 0x01 (stem) nor 0x02 (group).
    #[error("unknown node tag 0x{0:02x}")]
    UnknownTag(u8),
    /// Group depth outside 1..8.
    #[error("group depth {0} outside 1..8")]
    BadGroupDepth(u8),
    /// Length disagrees with the bitmap.
    #[error("blob length {got}, the bitmap implies {expected}")]
    BadLength {
        /// Length implied by the bitmap.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// Set bits in the padding of the bitmap or the depth bytes.
    #[error("non-canonical blob: padding bits set")]
    PaddingBits,
    /// A group with an empty bitmap.
    #[error("group blob without entries")]
    NoEntries,
    /// A stem blob with an empty bitmap.
    #[error("stem blob without values")]
    EmptyStem,
    /// An entry deeper than the group.
    #[error("entry depth {depth} exceeds group depth {group_depth}")]
    BadEntryDepth {
        /// The entry's relative depth.
        depth: u8,
        /// The group depth.
        group_depth: u8,
    },
    /// An early stem at a position its depth cannot have.
    #[error("entry at index {index} is not aligned for depth {depth}")]
    MisalignedEntry {
        /// Bitmap position.
        index: u16,
        /// Relative depth.
        depth: u8,
    },
    /// An entry inside the subtree an early stem covers.
    #[error("entry at index {index} overlaps an early stem")]
    OverlappingEntry {
        /// Bitmap position.
        index: u16,
    },
    /// An early stem whose sibling subtree is empty.
    #[error("early stem at index {index} has an empty sibling")]
    LoneStem {
        /// Bitmap position.
        index: u16,
    },
    /// A path key that no path produces.
    #[error("malformed path key")]
    BadPathKey,
}
