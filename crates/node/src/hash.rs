//! The hash function of the tree, as a type parameter.
//!
//! The tree hashes only two shapes of input: a 32-byte value (a leaf) and 64 bytes (a pair of
//! child hashes, or `stem ‖ 0x00 ‖ subtree_root`). [`TreeHasher`] exposes exactly those two, so an
//! implementation can use a fixed-size fast path. [`Sha256Hasher`] is the default and the one
//! go-ethereum uses.

use sha2::block_api::compress256;

/// A 32-byte hash.
pub type Hash32 = [u8; 32];

/// The all-zero hash: the hash of an empty subtree and the root of an empty tree.
pub const ZERO_HASH: Hash32 = [0u8; 32];

/// A hash function for the tree.
///
/// Contract: both functions are pure and deterministic. Implementations are zero-sized marker
/// types so the engine is monomorphised per hash function.
pub trait TreeHasher: Send + Sync + 'static {
    /// Hash of a 32-byte input (a present leaf value).
    fn hash32(input: &[u8; 32]) -> Hash32;
    /// Hash of a 64-byte input (two child hashes, or a stem node's preimage).
    fn hash64(input: &[u8; 64]) -> Hash32;

    /// Hash of the concatenation `left ‖ right`.
    #[inline]
    fn hash_pair(left: &Hash32, right: &Hash32) -> Hash32 {
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(left);
        buf[32..].copy_from_slice(right);
        Self::hash64(&buf)
    }
}

/// SHA-256 through the raw compression function with constant padding blocks.
///
/// For a 64-byte input the message is one data block plus a padding block that never changes,
/// and for a 32-byte input the message and its padding fit one block, so no buffering or length
/// bookkeeping is needed. `sha2` selects its SHA-NI kernel at run time where the CPU has it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sha256Hasher;

const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Padding block for a 64-byte message: 0x80, zeros, bit length 512 big-endian.
const PAD_64: [u8; 64] = {
    let mut b = [0u8; 64];
    b[0] = 0x80;
    b[62] = 0x02; // 512 = 0x0200
    b
};

#[inline]
fn state_to_bytes(state: &[u32; 8]) -> Hash32 {
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

impl TreeHasher for Sha256Hasher {
    #[inline]
    fn hash32(input: &[u8; 32]) -> Hash32 {
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(input);
        block[32] = 0x80;
        block[62] = 0x01; // 256 = 0x0100
        let mut state = SHA256_IV;
        compress256(&mut state, &[block]);
        state_to_bytes(&state)
    }

    #[inline]
    fn hash64(input: &[u8; 64]) -> Hash32 {
        let mut state = SHA256_IV;
        compress256(&mut state, &[*input, PAD_64]);
        state_to_bytes(&state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    proptest! {
        #[test]
        fn hash64_matches_digest(input in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform32(any::<u8>())) {
            let mut buf = [0u8; 64];
            buf[..32].copy_from_slice(&input);
            buf[32..].copy_from_slice(&tail);
            let expect: [u8; 32] = Sha256::digest(buf).into();
            prop_assert_eq!(Sha256Hasher::hash64(&buf), expect);
            prop_assert_eq!(Sha256Hasher::hash_pair(&input, &tail), expect);
        }

        #[test]
        fn hash32_matches_digest(input in proptest::array::uniform32(any::<u8>())) {
            let expect: [u8; 32] = Sha256::digest(input).into();
            prop_assert_eq!(Sha256Hasher::hash32(&input), expect);
        }
    }

    #[test]
    fn known_answer() {
        // SHA-256 of 32 zero bytes.
        let h = Sha256Hasher::hash32(&[0u8; 32]);
        assert_eq!(
            h[..4],
            [0x66, 0x68, 0x7a, 0xad],
            "sha256(0^32) starts 66687aad"
        );
    }
}
