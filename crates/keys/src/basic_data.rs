//! The BASIC_DATA leaf (SPEC §2).

use alloy_primitives::U256;

use crate::KeyError;

/// Largest code size BASIC_DATA can hold plus one: code sizes must be `< 2^24`.
const CODE_SIZE_LIMIT: u32 = 1 << 24;

/// The fields packed into an account's BASIC_DATA leaf.
///
/// Layout of the 32-byte leaf (all fields big-endian): byte 0 version, bytes 1..=4 reserved
/// (zero), bytes 5..=7 code size, bytes 8..=15 nonce, bytes 16..=31 balance.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct BasicData {
    /// Leaf format version (0 in this EIP revision; stored as given).
    pub version: u8,
    /// Code size in bytes; must be `< 2^24` to encode.
    pub code_size: u32,
    /// Account nonce.
    pub nonce: u64,
    /// Account balance in wei; must be `< 2^128` to encode.
    pub balance: U256,
}

impl BasicData {
    /// Packs the fields into the 32-byte leaf value.
    ///
    /// Errors: [`KeyError::BalanceTooLarge`] if `balance >= 2^128`,
    /// [`KeyError::CodeTooLarge`] if `code_size >= 2^24`. Nothing is ever truncated.
    pub fn encode(&self) -> Result<[u8; 32], KeyError> {
        if self.code_size >= CODE_SIZE_LIMIT {
            return Err(KeyError::CodeTooLarge {
                len: self.code_size as usize,
            });
        }
        if self.balance.bit_len() > 128 {
            return Err(KeyError::BalanceTooLarge);
        }
        let mut leaf = [0u8; 32];
        leaf[0] = self.version;
        leaf[5..8].copy_from_slice(&self.code_size.to_be_bytes()[1..]);
        leaf[8..16].copy_from_slice(&self.nonce.to_be_bytes());
        leaf[16..].copy_from_slice(&self.balance.to_be_bytes::<32>()[16..]);
        Ok(leaf)
    }

    /// Unpacks version, code size, nonce and balance from a leaf value.
    ///
    /// Errors: [`KeyError::NonZeroReserved`] if any of the reserved bytes 1..=4 is non-zero.
    /// Any version byte is accepted and returned as is. For every leaf accepted,
    /// `decode(leaf)?.encode() == Ok(leaf)`.
    pub fn decode(leaf: &[u8; 32]) -> Result<Self, KeyError> {
        if leaf[1..5].iter().any(|&b| b != 0) {
            return Err(KeyError::NonZeroReserved);
        }
        let code_size = u32::from_be_bytes([0, leaf[5], leaf[6], leaf[7]]);
        let mut nonce = [0u8; 8];
        nonce.copy_from_slice(&leaf[8..16]);
        let mut balance = [0u8; 32];
        balance[16..].copy_from_slice(&leaf[16..]);
        Ok(Self {
            version: leaf[0],
            code_size,
            nonce: u64::from_be_bytes(nonce),
            balance: U256::from_be_bytes(balance),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_fields_at_their_offsets() {
        let bd = BasicData {
            version: 0,
            code_size: 0x112233,
            nonce: 0x5566778899aabbcc,
            balance: U256::from(0x0123456789abcdef0123456789abcdefu128),
        };
        let leaf = bd.encode().unwrap();
        assert_eq!(
            alloy_primitives::hex::encode(leaf),
            "00000000001122335566778899aabbcc0123456789abcdef0123456789abcdef"
        );
        assert_eq!(BasicData::decode(&leaf), Ok(bd));
    }

    #[test]
    fn default_is_all_zero() {
        assert_eq!(BasicData::default().encode(), Ok([0u8; 32]));
        assert_eq!(BasicData::decode(&[0u8; 32]), Ok(BasicData::default()));
    }

    #[test]
    fn limits() {
        let max = BasicData {
            version: 0,
            code_size: (1 << 24) - 1,
            nonce: u64::MAX,
            balance: U256::from(u128::MAX),
        };
        assert!(max.encode().is_ok());
        let too_big_code = BasicData {
            code_size: 1 << 24,
            ..max
        };
        assert_eq!(
            too_big_code.encode(),
            Err(KeyError::CodeTooLarge { len: 1 << 24 })
        );
        let too_rich = BasicData {
            balance: U256::from(1) << 128usize,
            ..max
        };
        assert_eq!(too_rich.encode(), Err(KeyError::BalanceTooLarge));
        let too_rich = BasicData {
            balance: U256::MAX,
            ..max
        };
        assert_eq!(too_rich.encode(), Err(KeyError::BalanceTooLarge));
    }

    #[test]
    fn version_is_kept() {
        let bd = BasicData {
            version: 7,
            ..BasicData::default()
        };
        let leaf = bd.encode().unwrap();
        assert_eq!(leaf[0], 7);
        assert_eq!(BasicData::decode(&leaf), Ok(bd));
    }

    #[test]
    fn reserved_bytes_are_checked() {
        for i in 1..5 {
            let mut leaf = [0u8; 32];
            leaf[i] = 1;
            assert_eq!(BasicData::decode(&leaf), Err(KeyError::NonZeroReserved));
        }
    }

    proptest! {
        #[test]
        fn round_trip(
            version: u8,
            code_size in 0u32..(1 << 24),
            nonce: u64,
            balance: u128,
        ) {
            let bd = BasicData { version, code_size, nonce, balance: U256::from(balance) };
            let leaf = bd.encode().unwrap();
            prop_assert_eq!(&leaf[1..5], &[0u8; 4]);
            prop_assert_eq!(BasicData::decode(&leaf), Ok(bd));
        }

        #[test]
        fn decode_encode_round_trip(mut leaf: [u8; 32]) {
            leaf[1..5].fill(0);
            let bd = BasicData::decode(&leaf).unwrap();
            prop_assert_eq!(bd.encode(), Ok(leaf));
        }

        #[test]
        fn balance_of_129_bits_or_more_errors(
            high in any::<u128>().prop_filter("non-zero", |h| *h != 0),
            low: u128,
            code_size in 0u32..(1 << 24),
        ) {
            let balance = (U256::from(high) << 128usize) | U256::from(low);
            let bd = BasicData { balance, code_size, ..BasicData::default() };
            prop_assert_eq!(bd.encode(), Err(KeyError::BalanceTooLarge));
        }

        #[test]
        fn code_size_of_25_bits_or_more_errors(code_size in (1u32 << 24)..) {
            let bd = BasicData { code_size, ..BasicData::default() };
            prop_assert_eq!(bd.encode(), Err(KeyError::CodeTooLarge { len: code_size as usize }));
        }
    }
}
