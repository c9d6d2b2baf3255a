//! Bit paths from the root and their on-disk keys.

use crate::CodecError;
use bintrie_keys::{STEM_LEN, Stem};

/// The deepest a node can sit: a stem's full 248 bits.
pub const MAX_DEPTH: usize = STEM_LEN * 8;

/// A path from the root: `len` bits, most significant bit first; 0 = left, 1 = right.
///
/// Invariant: `len <= 248` and every bit at position `>= len` is zero, so two equal paths are
/// equal as values.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Path {
    bits: [u8; STEM_LEN],
    len: u8,
}

impl Path {
    /// The root's path (no bits).
    pub const ROOT: Path = Path {
        bits: [0; STEM_LEN],
        len: 0,
    };

    /// The first `len` bits of `stem`. `len` is clamped to 248.
    pub fn from_stem_prefix(stem: &Stem, len: usize) -> Path {
        let len = len.min(MAX_DEPTH);
        let mut bits = [0u8; STEM_LEN];
        let full = len / 8;
        bits[..full].copy_from_slice(&stem[..full]);
        let rem = len % 8;
        if rem != 0 {
            bits[full] = stem[full] & (0xffu8 << (8 - rem));
        }
        Path {
            bits,
            len: len as u8,
        }
    }

    /// Number of bits.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for the root's path.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bit `i` (0 = most significant). `i` must be below `len()`; otherwise returns 0.
    #[inline]
    pub fn bit(&self, i: usize) -> u8 {
        if i >= self.len() {
            return 0;
        }
        (self.bits[i / 8] >> (7 - (i % 8))) & 1
    }

    /// This path extended by one bit. Returns `None` at the maximum depth.
    #[inline]
    pub fn child(&self, bit: u8) -> Option<Path> {
        let len = self.len();
        if len >= MAX_DEPTH {
            return None;
        }
        let mut p = *self;
        if bit & 1 == 1 {
            p.bits[len / 8] |= 1 << (7 - (len % 8));
        }
        p.len += 1;
        Some(p)
    }

    /// The packed bits (the first `ceil(len/8)` bytes are meaningful).
    pub fn bits(&self) -> &[u8; STEM_LEN] {
        &self.bits
    }

    /// The on-disk key (SPEC §5): the bits packed MSB-first into `ceil(len/8)` bytes followed by
    /// one byte holding the bit length. The root's key is the empty key.
    pub fn to_key(&self) -> PathKey {
        let mut key = PathKey {
            bytes: [0u8; STEM_LEN + 1],
            len: 0,
        };
        if self.len == 0 {
            return key;
        }
        let n = self.len().div_ceil(8);
        key.bytes[..n].copy_from_slice(&self.bits[..n]);
        key.bytes[n] = self.len;
        key.len = (n + 1) as u8;
        key
    }

    /// Parses an on-disk key back into a path; rejects keys that [`Path::to_key`] never produces
    /// (wrong length for the bit count, set bits past the length, a length over 248).
    pub fn from_key(key: &[u8]) -> Result<Path, CodecError> {
        if key.is_empty() {
            return Ok(Path::ROOT);
        }
        let (len_byte, packed) = key.split_last().expect("non-empty");
        let len = *len_byte as usize;
        if len == 0 || len > MAX_DEPTH || packed.len() != len.div_ceil(8) {
            return Err(CodecError::BadPathKey);
        }
        let mut bits = [0u8; STEM_LEN];
        bits[..packed.len()].copy_from_slice(packed);
        let rem = len % 8;
        if rem != 0 && bits[len / 8] & (0xffu8 >> rem) != 0 {
            return Err(CodecError::BadPathKey);
        }
        Ok(Path {
            bits,
            len: len as u8,
        })
    }

    /// True when `stem` starts with this path.
    pub fn is_prefix_of(&self, stem: &Stem) -> bool {
        Path::from_stem_prefix(stem, self.len()) == *self
    }
}

/// The path as its bits, most significant first (`0110…`), or `root` for the empty path: for
/// messages that name where in the tree something is.
impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.len == 0 {
            return f.write_str("root");
        }
        for i in 0..self.len as usize {
            let bit = (self.bits[i / 8] >> (7 - i % 8)) & 1;
            f.write_str(if bit == 1 { "1" } else { "0" })?;
        }
        Ok(())
    }
}

/// An on-disk node key: at most 32 bytes, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct PathKey {
    bytes: [u8; STEM_LEN + 1],
    len: u8,
}

/// Hashes the key's bytes only ([`PathKey::as_bytes`], as a `[u8]` hashes), not the unused
/// tail of its array: most keys are a few bytes (a path of 24 bits is 4), which a hasher
/// takes on its short path. Equal keys have equal bytes, so equal hashes.
impl std::hash::Hash for PathKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PathKey {
    /// The number of bits of the path this key encodes (0 for the root): the key's last byte,
    /// as [`Path::to_key`] writes it.
    #[inline]
    pub fn bit_len(&self) -> usize {
        self.as_bytes().last().map_or(0, |&b| usize::from(b))
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The longest key [`PathKey::to_word`] packs into one word: 7 bytes, every path of at
    /// most 48 bits.
    pub const WORD_BYTES: usize = 7;

    /// The key as one word when it has at most [`PathKey::WORD_BYTES`] bytes: its byte count
    /// in the top byte and its bytes below it, in order, zeros after; `None` for a longer key.
    /// Distinct keys give distinct words (the count tells `[1, 2]` from `[1, 2, 0]`), and
    /// [`PathKey::from_word`] gives the key back. For tables keyed by paths: a word hashes
    /// and compares in one step where the key's array is 34 bytes.
    #[inline]
    pub fn to_word(&self) -> Option<u64> {
        // Every constructor leaves the bytes past `len` zero, so the first eight bytes are
        // the key's bytes and zeros.
        (usize::from(self.len) <= Self::WORD_BYTES).then(|| {
            let head = u64::from_be_bytes(self.bytes[..8].try_into().expect("8 of 33 bytes"));
            (u64::from(self.len) << 56) | (head >> 8)
        })
    }

    /// The key [`PathKey::to_word`] packed into `word`; `None` for a word it never gives (a
    /// byte count over [`PathKey::WORD_BYTES`], or bytes set past the count).
    pub fn from_word(word: u64) -> Option<PathKey> {
        let bytes = word.to_be_bytes();
        let len = usize::from(bytes[0]);
        let key = PathKey::from_bytes(bytes[1..].get(..len)?)?;
        (key.to_word() == Some(word)).then_some(key)
    }

    /// The key holding exactly `bytes` (at most 32), without checking that some path encodes
    /// to it: equal to [`Path::to_key`]'s result for the same bytes, so it finds that key in a
    /// map. `None` when `bytes` is longer than any key. Use [`Path::from_key`] to validate.
    pub fn from_bytes(bytes: &[u8]) -> Option<PathKey> {
        let mut key = PathKey {
            bytes: [0u8; STEM_LEN + 1],
            len: u8::try_from(bytes.len()).ok()?,
        };
        key.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(key)
    }
}

impl AsRef<[u8]> for PathKey {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Stack a recursive walk keeps free below each level: more than the largest frame of any
/// walk over the tree between two calls of [`deeper`] (5.4 KB measured, in a debug build).
const RED_ZONE: usize = 128 * 1024;
/// Size of each fresh stack segment [`deeper`] moves to.
const SEGMENT: usize = 1024 * 1024;

/// Runs `f`, one level deeper of a recursive walk over the tree, on the current stack if at
/// least 128 KB of it is free and on a fresh 1 MB heap-allocated segment otherwise (the
/// `stacker` crate). Every walk whose depth follows the tree's (up to [`MAX_DEPTH`] levels)
/// calls itself through this, so no walk can overflow the stack of the thread it runs on,
/// whatever that stack's size (a test thread's 2 MB, a rayon worker running other tasks
/// nested in a join, a caller's small thread) and however deep a damaged store or a crafted
/// witness makes the tree. Costs a thread-local read and a compare when the stack suffices.
#[inline]
pub fn deeper<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_path_displays_as_its_bits() {
        assert_eq!(Path::ROOT.to_string(), "root");
        let mut stem = [0u8; 31];
        stem[0] = 0b1010_0000;
        stem[1] = 0b1000_0000;
        assert_eq!(Path::from_stem_prefix(&stem, 9).to_string(), "101000001");
        assert_eq!(Path::from_stem_prefix(&stem, 248).to_string().len(), 248);
    }

    #[test]
    fn a_key_hashes_as_its_bytes_do() {
        use std::hash::BuildHasher as _;
        let state = std::collections::hash_map::RandomState::new();
        let mut stem = [0u8; 31];
        stem[0] = 0b1010_0000;
        for len in [0, 1, 9, 24, 248] {
            let key = Path::from_stem_prefix(&stem, len).to_key();
            let again = PathKey::from_bytes(key.as_bytes()).unwrap();
            assert_eq!(key, again);
            assert_eq!(state.hash_one(key), state.hash_one(again));
            assert_eq!(state.hash_one(key), state.hash_one(key.as_bytes()));
        }
        // Keys that differ only in their length hash apart (the length is hashed too).
        let short = PathKey::from_bytes(&[1, 2]).unwrap();
        let long = PathKey::from_bytes(&[1, 2, 0]).unwrap();
        assert_ne!(state.hash_one(short), state.hash_one(long));
    }

    /// A key packed into a word comes back as the same key, and keys that differ only by trailing
    /// zeros or their length (`[1, 2]`, `[1, 2, 0]`) get different words.
    #[test]
    fn a_short_key_is_one_word_that_gives_the_key_back() {
        let keys: Vec<PathKey> = [&[][..], &[0], &[0, 0], &[1, 2], &[1, 2, 0], &[0xff; 7]]
            .iter()
            .map(|b| PathKey::from_bytes(b).unwrap())
            .collect();
        let words: Vec<u64> = keys.iter().map(|k| k.to_word().unwrap()).collect();
        for (key, &word) in keys.iter().zip(&words) {
            assert_eq!(PathKey::from_word(word).unwrap(), *key);
        }
        let distinct: std::collections::HashSet<u64> = words.iter().copied().collect();
        assert_eq!(distinct.len(), words.len(), "{words:x?}");
        assert_eq!(PathKey::from_bytes(&[0; 8]).unwrap().to_word(), None);
    }

    proptest! {
        /// A key of at most 7 bytes is one word holding its count and bytes, which gives the
        /// key back; a longer key has no word; a word the packing never gives has no key.
        #[test]
        fn a_short_key_is_a_word_that_gives_it_back(
            bytes in proptest::collection::vec(0u8..3, 0..=10),
            other in proptest::collection::vec(0u8..3, 0..=10),
            junk in any::<u64>(),
        ) {
            let key = PathKey::from_bytes(&bytes).unwrap();
            let word = key.to_word();
            prop_assert_eq!(word.is_some(), bytes.len() <= PathKey::WORD_BYTES);
            if let Some(word) = word {
                let mut expected = [0u8; 8];
                expected[0] = bytes.len() as u8;
                expected[1..=bytes.len()].copy_from_slice(&bytes);
                prop_assert_eq!(word, u64::from_be_bytes(expected));
                prop_assert_eq!(PathKey::from_word(word), Some(key));
                let other = PathKey::from_bytes(&other).unwrap();
                if let Some(w) = other.to_word() {
                    prop_assert_eq!(w == word, other == key);
                }
            }
            if let Some(k) = PathKey::from_word(junk) {
                prop_assert_eq!(k.to_word(), Some(junk));
            }
        }
    }

    #[test]
    fn root_key_is_empty() {
        assert!(Path::ROOT.to_key().as_bytes().is_empty());
        assert_eq!(Path::from_key(&[]).unwrap(), Path::ROOT);
    }

    #[test]
    fn key_layout() {
        let p = Path::ROOT
            .child(1)
            .unwrap()
            .child(0)
            .unwrap()
            .child(1)
            .unwrap();
        assert_eq!(p.to_key().as_bytes(), &[0b1010_0000, 3]);
        let mut stem = [0u8; 31];
        stem[0] = 0xab;
        stem[1] = 0xcd;
        let p = Path::from_stem_prefix(&stem, 12);
        assert_eq!(p.to_key().as_bytes(), &[0xab, 0xc0, 12]);
    }

    #[test]
    fn rejects_bad_keys() {
        assert!(Path::from_key(&[0]).is_err()); // length 0 with the length byte present
        assert!(Path::from_key(&[0xff, 3]).is_err()); // bits past the length
        assert!(Path::from_key(&[0xff, 0xff, 3]).is_err()); // too many bytes
        assert!(Path::from_key(&[0xff, 249]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]
        #[test]
        fn key_round_trip(stem in proptest::array::uniform31(any::<u8>()), len in 0usize..=248) {
            let p = Path::from_stem_prefix(&stem, len);
            prop_assert_eq!(p.len(), len);
            prop_assert!(p.is_prefix_of(&stem));
            for i in 0..len {
                prop_assert_eq!(p.bit(i), (stem[i / 8] >> (7 - i % 8)) & 1);
            }
            prop_assert_eq!(Path::from_key(p.to_key().as_bytes()).unwrap(), p);
            prop_assert_eq!(p.to_key().bit_len(), len);
            if len < 248 {
                let bit = (stem[len / 8] >> (7 - len % 8)) & 1;
                prop_assert_eq!(p.child(bit).unwrap(), Path::from_stem_prefix(&stem, len + 1));
            }
        }

        #[test]
        fn from_key_never_panics(key in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Path::from_key(&key) {
                let k = p.to_key();
                prop_assert_eq!(k.as_bytes(), &key[..]);
            }
        }
    }
}
