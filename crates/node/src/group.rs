//! The grouped-internal blob: `g` binary levels stored as one node (SPEC §5).

use crate::{CodecError, Hash32, TreeHasher, ZERO_HASH};

/// Tag byte of a group blob.
pub const GROUP_TAG: u8 = 0x02;
/// Smallest supported group depth.
pub const MIN_GROUP_DEPTH: u8 = 1;
/// Largest supported group depth.
pub const MAX_GROUP_DEPTH: u8 = 8;

/// One present entry of a group.
///
/// `depth` is the entry's depth relative to the group's root, `1..=g`. An entry at depth `g` is a
/// child on the group's bottom layer (a group, a stem, or a deeper node); an entry at `depth < g`
/// is a stem that ends the path early. `index` is the bitmap position: the entry's `depth`-bit
/// relative path shifted left by `g - depth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupEntry {
    /// Bitmap position, `0..2^g`.
    pub index: u16,
    /// Relative depth, `1..=g`.
    pub depth: u8,
    /// The entry's node hash.
    pub hash: Hash32,
}

/// A decoded group blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBlob {
    /// The group depth `g` this blob was written with.
    pub group_depth: u8,
    /// Present entries in bitmap order.
    pub entries: Vec<GroupEntry>,
}

/// Bytes of the bitmap at group depth `g`: one byte when `g <= 3`, else `2^(g-3)`.
#[inline]
pub fn bitmap_len(g: u8) -> usize {
    if g <= 3 { 1 } else { 1 << (g - 3) }
}

/// Exact length of a group blob with `n` entries at group depth `g`.
#[inline]
pub fn group_blob_len(g: u8, n: usize) -> usize {
    2 + bitmap_len(g) + (3 * n).div_ceil(8) + 32 * n
}

impl GroupBlob {
    /// The hash of the group's root (what its parent holds for it), computed from its entries
    /// by hashing the inner nodes up (SPEC §5): an empty side is the zero hash, an entry that
    /// sits above the bottom level covers its whole subtree. Also returns the number of pair
    /// hashes computed. Expects a decoded (hence valid) blob.
    pub fn root_hash<H: TreeHasher>(&self) -> (Hash32, u32) {
        fn sub<H: TreeHasher>(
            entries: &[GroupEntry],
            g: u8,
            rel: u8,
            prefix: u16,
            n: &mut u32,
        ) -> Hash32 {
            if entries.is_empty() {
                return ZERO_HASH;
            }
            let start = prefix << (g - rel);
            if rel == g
                || (entries.len() == 1 && entries[0].depth == rel && entries[0].index == start)
            {
                return entries[0].hash;
            }
            let mid = start + (1u16 << (g - rel)) / 2;
            let split = entries.partition_point(|e| e.index < mid);
            let l = sub::<H>(&entries[..split], g, rel + 1, prefix << 1, n);
            let r = sub::<H>(&entries[split..], g, rel + 1, (prefix << 1) | 1, n);
            *n += 1;
            H::hash_pair(&l, &r)
        }
        let mut n = 0;
        let h = sub::<H>(&self.entries, self.group_depth, 0, 0, &mut n);
        (h, n)
    }

    /// Appends the encoding to `out`.
    ///
    /// Precondition (upheld by the trie engine, checked in debug builds): `1 <= g <= 8`, entries
    /// sorted by `index`, each a valid position for its depth, no two covering the same subtree.
    pub fn encode(group_depth: u8, entries: &[GroupEntry], out: &mut Vec<u8>) {
        let g = group_depth;
        debug_assert!((MIN_GROUP_DEPTH..=MAX_GROUP_DEPTH).contains(&g));
        debug_assert!(entries.windows(2).all(|w| w[0].index < w[1].index));
        let start = out.len();
        out.resize(start + group_blob_len(g, entries.len()), 0);
        let buf = &mut out[start..];
        buf[0] = GROUP_TAG;
        buf[1] = g;
        let bm = bitmap_len(g);
        let depth_off = 2 + bm;
        let hash_off = depth_off + (3 * entries.len()).div_ceil(8);
        for (k, e) in entries.iter().enumerate() {
            debug_assert!(e.depth >= 1 && e.depth <= g);
            let i = e.index as usize;
            buf[2 + i / 8] |= 0x80 >> (i % 8);
            let d = (e.depth - 1) as usize;
            for b in 0..3 {
                if (d >> (2 - b)) & 1 == 1 {
                    let bit = 3 * k + b;
                    buf[depth_off + bit / 8] |= 0x80 >> (bit % 8);
                }
            }
            buf[hash_off + 32 * k..hash_off + 32 * k + 32].copy_from_slice(&e.hash);
        }
    }

    /// Parses and validates a group blob. Rejects, without panicking: a wrong tag, `g` outside
    /// 1..8, a length that does not match the bitmap, set padding bits in the bitmap or depth
    /// bytes, no entries, an entry deeper than `g`, an early stem at a position its depth cannot
    /// have, entries that overlap, and an early stem whose sibling subtree is empty (such a stem
    /// would sit one level higher in a canonical tree).
    pub fn decode(blob: &[u8]) -> Result<GroupBlob, CodecError> {
        if blob.len() < 3 {
            return Err(CodecError::Truncated {
                len: blob.len(),
                min: 3,
            });
        }
        if blob[0] != GROUP_TAG {
            return Err(CodecError::UnknownTag(blob[0]));
        }
        let g = blob[1];
        if !(MIN_GROUP_DEPTH..=MAX_GROUP_DEPTH).contains(&g) {
            return Err(CodecError::BadGroupDepth(g));
        }
        let width = 1usize << g;
        let bm = bitmap_len(g);
        if blob.len() < 2 + bm {
            return Err(CodecError::Truncated {
                len: blob.len(),
                min: 2 + bm,
            });
        }
        let bitmap = &blob[2..2 + bm];
        if width < 8 && bitmap[0] & (0xffu8 >> width) != 0 {
            return Err(CodecError::PaddingBits);
        }
        let n: usize = bitmap.iter().map(|b| b.count_ones() as usize).sum();
        if n == 0 {
            return Err(CodecError::NoEntries);
        }
        let expected = group_blob_len(g, n);
        if blob.len() != expected {
            return Err(CodecError::BadLength {
                expected,
                got: blob.len(),
            });
        }
        let depth_off = 2 + bm;
        let depth_bytes = (3 * n).div_ceil(8);
        let depths = &blob[depth_off..depth_off + depth_bytes];
        let used_bits = 3 * n;
        if !used_bits.is_multiple_of(8)
            && depths[depth_bytes - 1] & (0xffu8 >> (used_bits % 8)) != 0
        {
            return Err(CodecError::PaddingBits);
        }
        let hash_off = depth_off + depth_bytes;
        let mut entries = Vec::with_capacity(n);
        for i in 0..width {
            if bitmap[i / 8] & (0x80 >> (i % 8)) == 0 {
                continue;
            }
            let k = entries.len();
            let mut d = 0u8;
            for b in 0..3 {
                let bit = 3 * k + b;
                d = (d << 1) | ((depths[bit / 8] >> (7 - bit % 8)) & 1);
            }
            let depth = d + 1;
            if depth > g {
                return Err(CodecError::BadEntryDepth {
                    depth,
                    group_depth: g,
                });
            }
            let span = 1usize << (g - depth);
            if !i.is_multiple_of(span) {
                return Err(CodecError::MisalignedEntry {
                    index: i as u16,
                    depth,
                });
            }
            let hash: Hash32 = blob[hash_off + 32 * k..hash_off + 32 * k + 32]
                .try_into()
                .expect("32 bytes");
            entries.push(GroupEntry {
                index: i as u16,
                depth,
                hash,
            });
        }
        // Overlap: an entry of depth r covers [index, index + 2^(g-r)); the next must start after.
        for w in entries.windows(2) {
            let end = w[0].index as usize + (1usize << (g - w[0].depth));
            if (w[1].index as usize) < end {
                return Err(CodecError::OverlappingEntry { index: w[1].index });
            }
        }
        // An early stem needs a non-empty sibling subtree.
        for e in entries.iter().filter(|e| e.depth < g) {
            let span = 1usize << (g - e.depth);
            let sibling = (e.index as usize) ^ span;
            let occupied = entries
                .iter()
                .any(|o| (o.index as usize) >= sibling && (o.index as usize) < sibling + span);
            if !occupied {
                return Err(CodecError::LoneStem { index: e.index });
            }
        }
        Ok(GroupBlob {
            group_depth: g,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn root_hash_hashes_the_inner_nodes_up() {
        use crate::Sha256Hasher as H;
        // g = 2: entries at the bottom level, positions 0 and 3.
        let (a, b) = (entry(0, 2, 1), entry(3, 2, 2));
        let blob = GroupBlob {
            group_depth: 2,
            entries: vec![a, b],
        };
        let left = H::hash_pair(&a.hash, &ZERO_HASH);
        let right = H::hash_pair(&ZERO_HASH, &b.hash);
        assert_eq!(blob.root_hash::<H>(), (H::hash_pair(&left, &right), 3));
        // An entry at relative depth 1 covers its half without further hashing.
        let c = entry(2, 1, 3);
        let blob = GroupBlob {
            group_depth: 2,
            entries: vec![a, c],
        };
        assert_eq!(blob.root_hash::<H>(), (H::hash_pair(&left, &c.hash), 2));
        // Nothing: the zero hash.
        let empty = GroupBlob {
            group_depth: 3,
            entries: vec![],
        };
        assert_eq!(empty.root_hash::<H>(), (ZERO_HASH, 0));
    }

    fn entry(index: u16, depth: u8, byte: u8) -> GroupEntry {
        GroupEntry {
            index,
            depth,
            hash: [byte; 32],
        }
    }

    #[test]
    fn layout_g5() {
        // Three bottom entries and an early stem at relative depth 2, path 11 -> index 0b11000
        // (its sibling subtree, path 10, holds the entry at 0b10000).
        let entries = [
            entry(0, 5, 1),
            entry(1, 5, 2),
            entry(0b10000, 5, 4),
            entry(0b11000, 2, 3),
        ];
        let mut blob = Vec::new();
        GroupBlob::encode(5, &entries, &mut blob);
        assert_eq!(blob.len(), 2 + 4 + 2 + 128);
        assert_eq!(&blob[..2], &[GROUP_TAG, 5]);
        assert_eq!(&blob[2..6], &[0b1100_0000, 0, 0b1000_0000, 0b1000_0000]);
        // depths-1: 4 (100), 4 (100), 4 (100), 1 (001) -> 100100100001 then zero padding
        assert_eq!(&blob[6..8], &[0b1001_0010, 0b0001_0000]);
        assert_eq!(GroupBlob::decode(&blob).unwrap().entries, entries);
    }

    #[test]
    fn full_group_sizes_match_spec() {
        // SPEC §5: a full group is about 1 KB at g=5, 2 KB at g=6, 4.1 KB at g=7, 8.3 KB at g=8.
        assert_eq!(group_blob_len(5, 32), 2 + 4 + 12 + 1024);
        assert_eq!(group_blob_len(8, 256), 2 + 32 + 96 + 8192);
    }

    #[test]
    fn rejects_non_canonical() {
        let mut blob = Vec::new();
        GroupBlob::encode(2, &[entry(0, 2, 1), entry(3, 2, 2)], &mut blob);
        assert!(GroupBlob::decode(&blob).is_ok());
        let mut b = blob.clone();
        b[2] |= 0x01; // bitmap padding past the 4 bits of g=2
        assert_eq!(GroupBlob::decode(&b), Err(CodecError::PaddingBits));
        let mut b = blob.clone();
        b[3] |= 0x01; // depth padding past 6 bits
        assert_eq!(GroupBlob::decode(&b), Err(CodecError::PaddingBits));
        let mut b = blob.clone();
        b[1] = 0;
        assert_eq!(GroupBlob::decode(&b), Err(CodecError::BadGroupDepth(0)));
        b[1] = 9;
        assert_eq!(GroupBlob::decode(&b), Err(CodecError::BadGroupDepth(9)));
        assert!(matches!(
            GroupBlob::decode(&blob[..blob.len() - 1]),
            Err(CodecError::BadLength { .. })
        ));
        let mut b = blob.clone();
        b[3] = 0b1110_0000; // first entry depth 8 > g
        assert!(matches!(
            GroupBlob::decode(&b),
            Err(CodecError::BadEntryDepth { .. })
        ));
        // Early stem at depth 1 on index 1: misaligned.
        let mut b = Vec::new();
        GroupBlob::encode(2, &[entry(0, 2, 1), entry(1, 1, 2)], &mut b);
        assert!(matches!(
            GroupBlob::decode(&b),
            Err(CodecError::MisalignedEntry { .. })
        ));
        // Early stem at index 0 depth 1 covering index 1 too.
        let mut b = Vec::new();
        GroupBlob::encode(2, &[entry(0, 1, 1), entry(1, 2, 2), entry(2, 2, 3)], &mut b);
        assert!(matches!(
            GroupBlob::decode(&b),
            Err(CodecError::OverlappingEntry { .. })
        ));
        // A stem alone on its side with an empty sibling.
        let mut b = Vec::new();
        GroupBlob::encode(2, &[entry(0, 1, 1)], &mut b);
        assert!(matches!(
            GroupBlob::decode(&b),
            Err(CodecError::LoneStem { .. })
        ));
        assert_eq!(
            GroupBlob::decode(&[GROUP_TAG, 3, 0]),
            Err(CodecError::NoEntries)
        );
    }

    fn arb_group() -> impl Strategy<Value = (u8, Vec<GroupEntry>)> {
        (1u8..=8).prop_flat_map(|g| {
            let width = 1usize << g;
            (
                Just(g),
                proptest::collection::btree_set(0..width, 1..=width.min(40)),
                any::<u8>(),
            )
                .prop_map(|(g, set, b)| {
                    let entries = set
                        .into_iter()
                        .map(|i| GroupEntry {
                            index: i as u16,
                            depth: g,
                            hash: [b ^ i as u8; 32],
                        })
                        .collect();
                    (g, entries)
                })
        })
    }

    proptest! {
        // Decoder fuzzing: 20,000 random and 20,000 mutated group blobs per run (and 20,000 round trips).
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn round_trip((g, entries) in arb_group()) {
            let mut blob = Vec::new();
            GroupBlob::encode(g, &entries, &mut blob);
            prop_assert_eq!(blob.len(), group_blob_len(g, entries.len()));
            let back = GroupBlob::decode(&blob).unwrap();
            prop_assert_eq!(back.group_depth, g);
            prop_assert_eq!(back.entries, entries);
        }

        #[test]
        fn decode_never_panics(blob in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(gb) = GroupBlob::decode(&blob) {
                let mut again = Vec::new();
                GroupBlob::encode(gb.group_depth, &gb.entries, &mut again);
                prop_assert_eq!(again, blob);
            }
        }

        #[test]
        fn decode_mutated_never_panics((g, entries) in arb_group(), pos in any::<usize>(), byte in any::<u8>()) {
            let mut blob = Vec::new();
            GroupBlob::encode(g, &entries, &mut blob);
            let p = pos % blob.len();
            blob[p] = byte;
            if let Ok(gb) = GroupBlob::decode(&blob) {
                let mut again = Vec::new();
                GroupBlob::encode(gb.group_depth, &gb.entries, &mut again);
                prop_assert_eq!(again, blob);
            }
        }
    }
}
