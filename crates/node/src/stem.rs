//! The 256 values under one stem: sparse storage, hashing, and the stem blob.

use crate::{CodecError, Hash32, TreeHasher, ZERO_HASH};
use bintrie_keys::{STEM_LEN, Stem};

/// Tag byte of a stem blob.
pub const STEM_TAG: u8 = 0x01;
/// Bytes of a stem blob before its values: tag, stem, 32-byte bitmap.
pub const STEM_HEADER_LEN: usize = 1 + STEM_LEN + 32;

/// The present values of one stem, in sub-index order.
///
/// Invariant: `values.len()` equals the number of set bits of `bitmap`, and `values[k]` is the
/// value of the k-th set sub-index. An all-zero value is *present* (it hashes to SHA256(0^32));
/// absence is only the bitmap bit being clear.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StemValues {
    /// Bit `i` of the 256 is bit `63 - i % 64` of word `i / 64` (MSB-first, as on disk).
    bitmap: [u64; 4],
    values: Vec<[u8; 32]>,
}

impl StemValues {
    /// No value present.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn rank(&self, index: u8) -> (bool, usize) {
        let i = index as usize;
        let word = i / 64;
        let bit = 63 - (i % 64);
        let mut rank: usize = self.bitmap[..word]
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum();
        // Bits above `bit` in this word are the earlier sub-indices.
        rank += (self.bitmap[word].checked_shr(bit as u32 + 1).unwrap_or(0)).count_ones() as usize;
        ((self.bitmap[word] >> bit) & 1 == 1, rank)
    }

    /// The value at `index`, if present.
    #[inline]
    pub fn get(&self, index: u8) -> Option<&[u8; 32]> {
        let (present, rank) = self.rank(index);
        present.then(|| &self.values[rank])
    }

    /// Sets the value at `index` (present from now on). Returns true when this changed anything.
    pub fn set(&mut self, index: u8, value: [u8; 32]) -> bool {
        let (present, rank) = self.rank(index);
        if present {
            if self.values[rank] == value {
                return false;
            }
            self.values[rank] = value;
        } else {
            let i = index as usize;
            self.bitmap[i / 64] |= 1 << (63 - (i % 64));
            self.values.insert(rank, value);
        }
        true
    }

    /// Number of present values.
    #[inline]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when no value is present.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The present `(sub_index, value)` pairs in sub-index order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &[u8; 32])> + '_ {
        self.indices().zip(self.values.iter())
    }

    fn indices(&self) -> impl Iterator<Item = u8> + '_ {
        self.bitmap.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let lead = bits.leading_zeros();
                bits &= !(1u64 << (63 - lead));
                Some((w * 64 + lead as usize) as u8)
            })
        })
    }

    /// The 32-byte on-disk bitmap (bit i MSB-first = value i present).
    pub fn bitmap_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(8).zip(self.bitmap) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }

    /// Root of the 8-level subtree over the 256 leaf hashes (SPEC §3): a present value hashes to
    /// `H(value)`, an absent one is zero, and a pair of two zeros gives zero without a hash call.
    /// Returns the root and the number of hash calls made.
    pub fn subtree_root<H: TreeHasher>(&self) -> (Hash32, u32) {
        let n = self.values.len();
        if n == 0 {
            return (ZERO_HASH, 0);
        }
        let mut small = [(0u16, ZERO_HASH); 8];
        let mut large;
        let level: &mut [(u16, Hash32)] = if n <= small.len() {
            &mut small[..n]
        } else {
            large = vec![(0u16, ZERO_HASH); n];
            &mut large[..]
        };
        for ((slot, idx), v) in level.iter_mut().zip(self.indices()).zip(&self.values) {
            *slot = (idx as u16, H::hash32(v));
        }
        let mut hashes = n as u32;
        let mut len = n;
        for _ in 0..8 {
            let mut out = 0;
            let mut i = 0;
            while i < len {
                let (idx, h) = level[i];
                let parent = idx >> 1;
                let combined = if idx & 1 == 0 && i + 1 < len && level[i + 1].0 == idx + 1 {
                    i += 2;
                    H::hash_pair(&h, &level[i - 1].1)
                } else {
                    i += 1;
                    if idx & 1 == 0 {
                        H::hash_pair(&h, &ZERO_HASH)
                    } else {
                        H::hash_pair(&ZERO_HASH, &h)
                    }
                };
                hashes += 1;
                level[out] = (parent, combined);
                out += 1;
            }
            len = out;
        }
        (level[0].1, hashes)
    }

    /// The sibling hashes on the path from leaf `index` to the subtree root, leaf level first
    /// (SPEC §3: a present value hashes to `H(value)`, an absent one is zero, two zeros give
    /// zero): what a proof of one value carries. Folding the leaf's own hash with them by the
    /// bits of `index`, lowest first, gives [`StemValues::subtree_root`].
    pub fn leaf_siblings<H: TreeHasher>(&self, index: u8) -> [Hash32; 8] {
        let mut level = vec![ZERO_HASH; 256];
        for (i, v) in self.iter() {
            level[usize::from(i)] = H::hash32(v);
        }
        let mut siblings = [ZERO_HASH; 8];
        let mut at = usize::from(index);
        for sibling in &mut siblings {
            *sibling = level[at ^ 1];
            level = level
                .chunks_exact(2)
                .map(|pair| fold_pair::<H>(&pair[0], &pair[1]))
                .collect();
            at >>= 1;
        }
        siblings
    }

    /// The stem node's hash `H(stem ‖ 0x00 ‖ subtree_root)` and the number of hash calls made.
    pub fn stem_hash<H: TreeHasher>(&self, stem: &Stem) -> (Hash32, u32) {
        let (root, n) = self.subtree_root::<H>();
        (stem_node_hash::<H>(stem, &root), n + 1)
    }

    /// Appends the stem blob `[0x01] [stem] [bitmap] [values]` (SPEC §5) to `out`.
    pub fn encode_blob(&self, stem: &Stem, out: &mut Vec<u8>) {
        out.reserve(STEM_HEADER_LEN + 32 * self.values.len());
        out.push(STEM_TAG);
        out.extend_from_slice(stem);
        out.extend_from_slice(&self.bitmap_bytes());
        for v in &self.values {
            out.extend_from_slice(v);
        }
    }

    /// Parses a stem blob. Errors on a wrong tag, a length that does not match the bitmap, or a
    /// stem without any value (the tree never stores one).
    pub fn decode_blob(blob: &[u8]) -> Result<(Stem, StemValues), CodecError> {
        if blob.len() < STEM_HEADER_LEN {
            return Err(CodecError::Truncated {
                len: blob.len(),
                min: STEM_HEADER_LEN,
            });
        }
        if blob[0] != STEM_TAG {
            return Err(CodecError::UnknownTag(blob[0]));
        }
        let stem: Stem = blob[1..1 + STEM_LEN].try_into().expect("length checked");
        let values = Self::decode_values(&blob[1 + STEM_LEN..]).map_err(|e| match e {
            CodecError::BadLength { expected, got } => CodecError::BadLength {
                expected: expected + 1 + STEM_LEN,
                got: got + 1 + STEM_LEN,
            },
            other => other,
        })?;
        Ok((stem, values))
    }

    /// Parses the part of a stem blob after the stem: the 32-byte bitmap and the present values
    /// (what the flat stem table stores). Same checks as [`StemValues::decode_blob`].
    pub fn decode_values(bytes: &[u8]) -> Result<StemValues, CodecError> {
        if bytes.len() < 32 {
            return Err(CodecError::Truncated {
                len: bytes.len(),
                min: 32,
            });
        }
        let mut bitmap = [0u64; 4];
        for (w, chunk) in bitmap.iter_mut().zip(bytes[..32].chunks_exact(8)) {
            *w = u64::from_be_bytes(chunk.try_into().expect("8 bytes"));
        }
        let n: usize = bitmap.iter().map(|w| w.count_ones() as usize).sum();
        if n == 0 {
            return Err(CodecError::EmptyStem);
        }
        let expected = 32 + 32 * n;
        if bytes.len() != expected {
            return Err(CodecError::BadLength {
                expected,
                got: bytes.len(),
            });
        }
        let values = bytes[32..]
            .chunks_exact(32)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        Ok(StemValues { bitmap, values })
    }
}

/// A stem blob's flat-table entry: the stem and the rest of the blob (bitmap and values, what
/// [`StemValues::decode_values`] reads), or `None` when `blob` is not a stem blob (another tag,
/// or shorter than its header). The flat stem table stores exactly these pairs (SPEC §5).
pub fn split_stem_blob(blob: &[u8]) -> Option<(&[u8], &[u8])> {
    match blob {
        [STEM_TAG, rest @ ..] if rest.len() >= STEM_LEN => Some(rest.split_at(STEM_LEN)),
        _ => None,
    }
}

/// One step up the 256-leaf subtree: two zero hashes give zero without a hash call (SPEC §3),
/// anything else is hashed.
pub fn fold_pair<H: TreeHasher>(left: &Hash32, right: &Hash32) -> Hash32 {
    if *left == ZERO_HASH && *right == ZERO_HASH {
        ZERO_HASH
    } else {
        H::hash_pair(left, right)
    }
}

/// The stem node's hash from its stem and subtree root: `H(stem ‖ 0x00 ‖ subtree_root)`.
pub fn stem_node_hash<H: TreeHasher>(stem: &Stem, subtree_root: &Hash32) -> Hash32 {
    let mut buf = [0u8; 64];
    buf[..STEM_LEN].copy_from_slice(stem);
    buf[32..].copy_from_slice(subtree_root);
    H::hash64(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stem_blob_splits_into_its_flat_entry() {
        let mut v = StemValues::new();
        v.set(3, [9; 32]);
        let stem = [7u8; 31];
        let mut blob = Vec::new();
        v.encode_blob(&stem, &mut blob);
        let (s, rest) = split_stem_blob(&blob).unwrap();
        assert_eq!(s, stem);
        assert_eq!(StemValues::decode_values(rest).unwrap(), v);
        assert_eq!(split_stem_blob(&[crate::GROUP_TAG, 0, 0]), None);
        assert_eq!(split_stem_blob(&blob[..31]), None);
        assert_eq!(split_stem_blob(&[]), None);
    }

    #[test]
    fn leaf_siblings_fold_to_the_subtree_root() {
        use crate::Sha256Hasher as H;
        let mut v = StemValues::new();
        for i in [0u8, 1, 7, 128, 200, 255] {
            v.set(i, [i ^ 0x5a; 32]);
        }
        let (root, _) = v.subtree_root::<H>();
        for index in [0u8, 1, 2, 7, 100, 128, 255] {
            let mut node = v.get(index).map_or(ZERO_HASH, H::hash32);
            for (level, sib) in v.leaf_siblings::<H>(index).iter().enumerate() {
                node = if (index >> level) & 1 == 0 {
                    fold_pair::<H>(&node, sib)
                } else {
                    fold_pair::<H>(sib, &node)
                };
            }
            assert_eq!(node, root, "index {index}");
        }
    }
    use crate::Sha256Hasher;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The stem subtree computed densely over all 256 leaves, as SPEC §3 states it.
    fn dense_root(values: &BTreeMap<u8, [u8; 32]>) -> Hash32 {
        let mut level: Vec<Hash32> = (0..=255u8)
            .map(|i| values.get(&i).map_or(ZERO_HASH, Sha256Hasher::hash32))
            .collect();
        while level.len() > 1 {
            level = level
                .chunks(2)
                .map(|p| {
                    if p[0] == ZERO_HASH && p[1] == ZERO_HASH {
                        ZERO_HASH
                    } else {
                        Sha256Hasher::hash_pair(&p[0], &p[1])
                    }
                })
                .collect();
        }
        level[0]
    }

    proptest! {
        #[test]
        fn sparse_matches_dense(entries in proptest::collection::btree_map(any::<u8>(), proptest::array::uniform32(any::<u8>()), 1..40)) {
            let mut sv = StemValues::new();
            for (k, v) in &entries {
                sv.set(*k, *v);
            }
            prop_assert_eq!(sv.len(), entries.len());
            for i in 0..=255u8 {
                prop_assert_eq!(sv.get(i), entries.get(&i));
            }
            let got: Vec<_> = sv.iter().map(|(i, v)| (i, *v)).collect();
            let want: Vec<_> = entries.iter().map(|(i, v)| (*i, *v)).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(sv.subtree_root::<Sha256Hasher>().0, dense_root(&entries));
        }

        #[test]
        fn blob_round_trip(stem in proptest::array::uniform31(any::<u8>()), entries in proptest::collection::btree_map(any::<u8>(), proptest::array::uniform32(any::<u8>()), 1..20)) {
            let mut sv = StemValues::new();
            for (k, v) in &entries {
                sv.set(*k, *v);
            }
            let mut blob = Vec::new();
            sv.encode_blob(&stem, &mut blob);
            prop_assert_eq!(blob.len(), STEM_HEADER_LEN + 32 * entries.len());
            let (s2, v2) = StemValues::decode_blob(&blob).unwrap();
            prop_assert_eq!(s2, stem);
            prop_assert_eq!(v2, sv);
        }

    }

    proptest! {
        // Decoder fuzzing: 20,000 random blobs per run, half of them stem-tagged with a plausible length.
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn decode_never_panics(tagged in any::<bool>(), len in 0usize..3, mut blob in proptest::collection::vec(any::<u8>(), 0..200)) {
            // Bias towards plausible blobs: a stem tag and a length that fits a few values.
            if tagged && !blob.is_empty() {
                blob[0] = STEM_TAG;
                blob.resize(STEM_HEADER_LEN + 32 * len, 0);
            }
            if let Ok((stem, sv)) = StemValues::decode_blob(&blob) {
                let mut again = Vec::new();
                sv.encode_blob(&stem, &mut again);
                prop_assert_eq!(again, blob);
            }
        }
    }

    #[test]
    fn set_reports_change() {
        let mut sv = StemValues::new();
        assert!(sv.set(3, [1; 32]));
        assert!(!sv.set(3, [1; 32]));
        assert!(
            sv.set(3, [0; 32]),
            "a zero value is a change and stays present"
        );
        assert_eq!(sv.get(3), Some(&[0; 32]));
    }

    #[test]
    fn rejects_malformed_blobs() {
        let mut sv = StemValues::new();
        sv.set(0, [7; 32]);
        let mut blob = Vec::new();
        sv.encode_blob(&[9; 31], &mut blob);
        let mut bad = blob.clone();
        bad[0] = 0x02;
        assert!(matches!(
            StemValues::decode_blob(&bad),
            Err(CodecError::UnknownTag(2))
        ));
        assert!(matches!(
            StemValues::decode_blob(&blob[..blob.len() - 1]),
            Err(CodecError::BadLength { .. })
        ));
        let mut extra = blob.clone();
        extra.push(0);
        assert!(StemValues::decode_blob(&extra).is_err());
        let mut empty = blob[..STEM_HEADER_LEN].to_vec();
        empty[STEM_LEN + 1] = 0;
        assert_eq!(StemValues::decode_blob(&empty), Err(CodecError::EmptyStem));
    }
}
