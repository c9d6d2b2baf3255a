//! EIP-7864 key derivation for the `bintrie` state backend.
//!
//! This crate maps Ethereum account state (accounts, storage slots, code) onto the 32-byte keys
//! and values of the EIP-7864 unified binary tree, byte-for-byte as go-ethereum's
//! `trie/bintrie` does (SHA-256 stems). See `SPEC.md` sections 1, 2 and 4.
//!
//! - Stems and tree keys: [`get_stem`], [`tree_key`], [`basic_data_key`], [`code_hash_key`],
//!   [`storage_slot_key`], [`code_chunk_key`], [`TreeKey`].
//! - The packed BASIC_DATA leaf: [`BasicData`].
//! - Code chunking: [`chunkify_code`], and back: [`code_from_chunks`].
//! - All tree writes of one account: [`account_entries`] of an [`AccountState`].
//!
//! No function in this crate panics on any input; invalid input is reported as a [`KeyError`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod basic_data;
mod code;
mod embedding;
mod error;
mod key;

pub use alloy_primitives::{Address, B256, U256};

pub use basic_data::BasicData;
pub use code::{CHUNK_BODY_LEN, chunkify_code, code_from_chunks};
pub use embedding::{AccountState, account_entries};
pub use error::KeyError;
pub use key::{
    TreeKey, basic_data_key, code_chunk_key, code_hash_key, get_stem, storage_slot_key, tree_key,
};

/// Length in bytes of a stem: the first 31 bytes of a tree key.
pub const STEM_LEN: usize = 31;

/// A stem: the 31-byte prefix shared by the 256 leaves of one stem node.
pub type Stem = [u8; STEM_LEN];

/// Sub-index of the BASIC_DATA leaf (version, code size, nonce, balance) in the account header
/// stem (tree_index 0).
pub const BASIC_DATA_LEAF_KEY: u8 = 0;

/// Sub-index of the CODE_HASH leaf (keccak256 of the code) in the account header stem
/// (tree_index 0).
pub const CODE_HASH_LEAF_KEY: u8 = 1;

/// Position of storage slot 0 in the account header stem: slots `0..64` live at sub-indices
/// `64..128` of tree_index 0.
pub const HEADER_STORAGE_OFFSET: u64 = 64;

/// Position of code chunk 0: chunk `i` lives at position `128 + i`
/// (tree_index `pos / 256`, sub-index `pos % 256`).
pub const CODE_OFFSET: u64 = 128;

/// Number of leaves under one stem (sub-indices `0..=255`).
pub const STEM_SUBTREE_WIDTH: u64 = 256;

/// keccak256 of empty code (`0xc5d2…a470`): the CODE_HASH leaf value of an account without code.
pub const EMPTY_CODE_HASH: B256 = alloy_primitives::KECCAK256_EMPTY;

// Compile-time checks of the layout: header storage, then code, inside one 256-leaf stem.
const _: () = {
    assert!(HEADER_STORAGE_OFFSET < CODE_OFFSET);
    assert!(CODE_OFFSET < STEM_SUBTREE_WIDTH);
    assert!(STEM_SUBTREE_WIDTH == 1 << 8);
    assert!(STEM_LEN + 1 == 32);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_code_hash_is_keccak_of_nothing() {
        assert_eq!(EMPTY_CODE_HASH, alloy_primitives::keccak256([]));
        assert_eq!(
            EMPTY_CODE_HASH.to_string(),
            "0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
        );
    }
}
