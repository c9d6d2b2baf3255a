//! The crate's error type.

/// Why an account, leaf or value cannot be encoded or decoded.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// A balance does not fit in the 16 bytes of the BASIC_DATA leaf (it is `>= 2^128`).
    /// Never silently truncated.
    #[error("balance does not fit in 128 bits (BASIC_DATA holds at most 2^128 - 1)")]
    BalanceTooLarge,
    /// A code size does not fit in the 3 bytes of the BASIC_DATA leaf (it is `>= 2^24`).
    #[error("code size {len} does not fit in 24 bits (BASIC_DATA holds at most 16777215 bytes)")]
    CodeTooLarge {
        /// The offending code size in bytes.
        len: usize,
    },
    /// A BASIC_DATA leaf whose reserved bytes 1..=4 are not all zero.
    #[error("BASIC_DATA leaf has non-zero reserved bytes 1..=4")]
    NonZeroReserved,
}
