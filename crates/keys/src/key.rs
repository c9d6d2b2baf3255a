//! Stems and tree keys (SPEC §1).

use alloy_primitives::{Address, U256};
use sha2::{Digest, Sha256};

use crate::{
    BASIC_DATA_LEAF_KEY, CODE_HASH_LEAF_KEY, CODE_OFFSET, HEADER_STORAGE_OFFSET, STEM_LEN, Stem,
};

/// `MAIN_STORAGE_OFFSET / 256 = 2^248 / 2^8 = 2^240`: tree_index of main-storage slot 0.
const MAIN_STORAGE_TREE_INDEX_OFFSET: U256 = U256::from_limbs([0, 0, 0, 1 << 48]);

/// A 32-byte tree key split into its stem and sub-index.
///
/// The byte form is `stem(31) ‖ sub_index(1)`; the derived ordering is the byte order of that
/// form (stem first, then sub-index).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct TreeKey {
    /// The first 31 bytes of the key: selects the stem node.
    pub stem: Stem,
    /// The last byte of the key: selects one of the 256 leaves of the stem node.
    pub sub_index: u8,
}

impl TreeKey {
    /// Builds a key from its stem and sub-index.
    pub fn new(stem: Stem, sub_index: u8) -> Self {
        Self { stem, sub_index }
    }

    /// Splits a 32-byte key: bytes `0..31` are the stem, byte 31 the sub-index.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        let mut stem = [0u8; STEM_LEN];
        stem.copy_from_slice(&bytes[..STEM_LEN]);
        Self {
            stem,
            sub_index: bytes[STEM_LEN],
        }
    }

    /// The 32-byte key `stem ‖ sub_index`; inverse of [`TreeKey::from_bytes`].
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..STEM_LEN].copy_from_slice(&self.stem);
        out[STEM_LEN] = self.sub_index;
        out
    }
}

/// The stem of `address` at `tree_index`:
/// `SHA256(0x00*12 ‖ address(20) ‖ tree_index as 32-byte big-endian)[..31]`.
///
/// The hash input is exactly 64 bytes. Every `tree_index` is valid.
pub fn get_stem(address: &Address, tree_index: &U256) -> Stem {
    let mut preimage = [0u8; 64];
    preimage[12..32].copy_from_slice(address.as_slice());
    preimage[32..].copy_from_slice(&tree_index.to_be_bytes::<32>());
    let digest = Sha256::digest(preimage);
    let mut stem = [0u8; STEM_LEN];
    stem.copy_from_slice(&digest[..STEM_LEN]);
    stem
}

/// The key `get_stem(address, tree_index) ‖ sub_index`.
pub fn tree_key(address: &Address, tree_index: &U256, sub_index: u8) -> TreeKey {
    TreeKey::new(get_stem(address, tree_index), sub_index)
}

/// Key of the account's BASIC_DATA leaf: tree_index 0, sub-index [`BASIC_DATA_LEAF_KEY`].
pub fn basic_data_key(address: &Address) -> TreeKey {
    tree_key(address, &U256::ZERO, BASIC_DATA_LEAF_KEY)
}

/// Key of the account's CODE_HASH leaf: tree_index 0, sub-index [`CODE_HASH_LEAF_KEY`].
pub fn code_hash_key(address: &Address) -> TreeKey {
    tree_key(address, &U256::ZERO, CODE_HASH_LEAF_KEY)
}

/// Key of storage slot `slot` of `address`.
///
/// - `slot < 64`: the account header stem (tree_index 0), sub-index `64 + slot`.
/// - otherwise: `tree_index = 2^240 + (slot >> 8)`, sub-index `slot & 0xff`, so 256 consecutive
///   slots (aligned to 256) share one stem. This is position `2^248 + slot`; for a slot whose
///   top byte is 0xff that position passes 2^256 and the tree_index gets a leading 0x01 byte.
///   The tree_index never overflows (`2^240 + (2^256 - 1) / 256 < 2^256`), so every slot is valid.
pub fn storage_slot_key(address: &Address, slot: &U256) -> TreeKey {
    if *slot < U256::from(CODE_OFFSET - HEADER_STORAGE_OFFSET) {
        // slot < 64, so the sum is < 128 and fits a sub-index.
        let sub = HEADER_STORAGE_OFFSET as u8 + slot.byte(0);
        return tree_key(address, &U256::ZERO, sub);
    }
    // Cannot wrap: (slot >> 8) < 2^248, and 2^240 + 2^248 < 2^256.
    let tree_index = MAIN_STORAGE_TREE_INDEX_OFFSET.wrapping_add(*slot >> 8);
    tree_key(address, &tree_index, slot.byte(0))
}

/// Key of code chunk `chunk_index` of `address`: position `pos = 128 + chunk_index`,
/// tree_index `pos / 256`, sub-index `pos % 256`. Chunks `0..128` share the header stem.
///
/// Every `u64` is valid (the position is computed without overflow).
pub fn code_chunk_key(address: &Address, chunk_index: u64) -> TreeKey {
    let pos = u128::from(chunk_index) + u128::from(CODE_OFFSET);
    let tree_index = U256::from(pos >> 8);
    tree_key(address, &tree_index, (pos & 0xff) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;
    use proptest::prelude::*;

    const A: Address = address!("0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");

    #[test]
    fn tree_key_bytes_round_trip() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8 * 7 + 1;
        }
        let k = TreeKey::from_bytes(bytes);
        assert_eq!(k.sub_index, bytes[31]);
        assert_eq!(&k.stem[..], &bytes[..31]);
        assert_eq!(k.to_bytes(), bytes);
        assert_eq!(TreeKey::new(k.stem, k.sub_index), k);
    }

    #[test]
    fn ordering_is_byte_order() {
        let a = TreeKey::new([0u8; 31], 255);
        let mut s = [0u8; 31];
        s[30] = 1;
        let b = TreeKey::new(s, 0);
        assert!(a < b);
        assert!(a.to_bytes() < b.to_bytes());
    }

    #[test]
    fn header_keys_share_the_header_stem() {
        let stem = get_stem(&A, &U256::ZERO);
        assert_eq!(basic_data_key(&A), TreeKey::new(stem, 0));
        assert_eq!(code_hash_key(&A), TreeKey::new(stem, 1));
        assert_eq!(storage_slot_key(&A, &U256::ZERO), TreeKey::new(stem, 64));
        assert_eq!(
            storage_slot_key(&A, &U256::from(63)),
            TreeKey::new(stem, 127)
        );
        assert_eq!(code_chunk_key(&A, 0), TreeKey::new(stem, 128));
        assert_eq!(code_chunk_key(&A, 127), TreeKey::new(stem, 255));
    }

    #[test]
    fn known_header_stem() {
        // From key_preimage_examples: SHA256(0x00*12 ‖ 0xaa*20 ‖ 0x00*32).
        let stem = get_stem(&A, &U256::ZERO);
        assert_eq!(
            alloy_primitives::hex::encode(stem),
            "81baa729f6a9111802cac8c0e546df7366d7e975f09155c4bef3ba9b2519a0"
        );
    }

    #[test]
    fn main_storage_offset_is_2_pow_240() {
        assert_eq!(MAIN_STORAGE_TREE_INDEX_OFFSET, U256::from(1) << 240usize);
    }

    #[test]
    fn main_storage_layout() {
        let s = U256::from(64);
        let k = storage_slot_key(&A, &s);
        assert_eq!(k, tree_key(&A, &(U256::from(1) << 240usize), 64));
        let s = U256::from(1000);
        assert_eq!(
            storage_slot_key(&A, &s),
            tree_key(&A, &((U256::from(1) << 240usize) + U256::from(3)), 232)
        );
    }

    #[test]
    fn overflow_slots_do_not_panic() {
        let max = U256::MAX;
        let k = storage_slot_key(&A, &max);
        let expected_index =
            (U256::from(1) << 248usize) + (U256::from(1) << 240usize) - U256::from(1);
        assert_eq!(expected_index.to_be_bytes::<32>()[0], 0x01);
        assert_eq!(k, tree_key(&A, &expected_index, 0xff));
        // 0xff00..00 >> 8 = 0xff << 240; plus 2^240 = 0x100 << 240 = 2^248 (leading 0x01 byte).
        let top = U256::from(0xffu8) << 248usize;
        assert_eq!(
            storage_slot_key(&A, &top),
            tree_key(&A, &(U256::from(1) << 248usize), 0)
        );
    }

    #[test]
    fn code_chunk_layout() {
        assert_eq!(code_chunk_key(&A, 128), tree_key(&A, &U256::from(1), 0));
        assert_eq!(code_chunk_key(&A, 383), tree_key(&A, &U256::from(1), 255));
        assert_eq!(code_chunk_key(&A, 384), tree_key(&A, &U256::from(2), 0));
        let big = u128::from(u64::MAX) + 128;
        assert_eq!(
            code_chunk_key(&A, u64::MAX),
            tree_key(&A, &U256::from(big >> 8), (big & 0xff) as u8)
        );
    }

    fn slot_strategy() -> impl Strategy<Value = U256> {
        prop_oneof![
            any::<[u8; 32]>().prop_map(U256::from_be_bytes),
            // Top byte 0xff: tree_index gets a leading 0x01 byte.
            any::<[u8; 32]>().prop_map(|mut b| {
                b[0] = 0xff;
                U256::from_be_bytes(b)
            }),
            (0u64..1024).prop_map(U256::from),
        ]
    }

    proptest! {
        #[test]
        fn storage_slot_layout(slot in slot_strategy(), other_sub: u8, addr: [u8; 20]) {
            let addr = Address::from(addr);
            let k = storage_slot_key(&addr, &slot);
            if slot < U256::from(64) {
                prop_assert_eq!(k.stem, get_stem(&addr, &U256::ZERO));
                prop_assert_eq!(u64::from(k.sub_index), 64 + slot.as_limbs()[0]);
                return Ok(());
            }
            prop_assert_eq!(k.sub_index, slot.byte(0));
            let tree_index = (U256::from(1) << 240usize) + (slot >> 8usize);
            prop_assert_eq!(k.stem, get_stem(&addr, &tree_index));
            if slot.byte(31) == 0xff {
                prop_assert_eq!(tree_index.byte(31), 0x01);
            }
            // Every slot of the same aligned group of 256 (and >= 64) shares the stem.
            let sibling = (slot & !U256::from(0xff)) | U256::from(other_sub);
            if sibling >= U256::from(64) {
                prop_assert_eq!(storage_slot_key(&addr, &sibling), TreeKey::new(k.stem, other_sub));
            }
            // The neighbouring group does not.
            let next_group = slot.wrapping_add(U256::from(256));
            if next_group > slot {
                prop_assert_ne!(storage_slot_key(&addr, &next_group).stem, k.stem);
            }
        }

        #[test]
        fn consecutive_main_slots_share_a_stem(group in 1u64..u64::MAX, addr: [u8; 20]) {
            let addr = Address::from(addr);
            let base = U256::from(group) << 8usize;
            let stem = storage_slot_key(&addr, &base).stem;
            for sub in 0..=255u8 {
                let k = storage_slot_key(&addr, &(base + U256::from(sub)));
                prop_assert_eq!(k, TreeKey::new(stem, sub));
            }
        }

        #[test]
        fn code_chunk_layout_random(chunk: u64, addr: [u8; 20]) {
            let addr = Address::from(addr);
            let pos = u128::from(chunk) + 128;
            let k = code_chunk_key(&addr, chunk);
            prop_assert_eq!(k, tree_key(&addr, &U256::from(pos / 256), (pos % 256) as u8));
        }

        #[test]
        fn tree_key_from_to_bytes(bytes: [u8; 32]) {
            prop_assert_eq!(TreeKey::from_bytes(bytes).to_bytes(), bytes);
        }
    }
}
