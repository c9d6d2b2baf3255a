//! Property tests of the public decoders: arbitrary and mutated bytes never panic, whatever
//! decodes re-encodes to the same bytes (the formats are canonical), and decode(encode(x)) == x.

use bintrie_keys::Stem;
use bintrie_node::{
    CodecError, GROUP_TAG, GroupBlob, GroupEntry, NodeBlob, Path, STEM_TAG, StemValues,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

/// The bytes an encoder would write for a decoded node blob.
fn encode_node(node: &NodeBlob) -> Vec<u8> {
    let mut out = Vec::new();
    match node {
        NodeBlob::Stem(stem, values) => values.encode_blob(stem, &mut out),
        NodeBlob::Group(g) => GroupBlob::encode(g.group_depth, &g.entries, &mut out),
    }
    out
}

/// A canonical group: the binary subtree of a set of (g+2)-bit paths cut at depth g. A path
/// alone in its subtree above the bottom is an early stem; two or more reaching the bottom are
/// a deeper node there. So early stems always have a non-empty sibling, as the decoder demands.
fn arb_group() -> impl Strategy<Value = (u8, Vec<GroupEntry>)> {
    (1u8..=8).prop_flat_map(|g| {
        let paths = proptest::collection::btree_set(0u32..(1 << (g + 2)), 2..=40);
        (Just(g), paths, any::<u8>()).prop_map(|(g, paths, salt)| {
            fn build(
                g: u8,
                paths: &[u32],
                rel: u8,
                prefix: u16,
                salt: u8,
                out: &mut Vec<GroupEntry>,
            ) {
                if paths.is_empty() {
                    return;
                }
                if rel == g || (rel > 0 && paths.len() == 1) {
                    let mut hash = [salt; 32];
                    hash[..2].copy_from_slice(&prefix.to_be_bytes());
                    hash[2] = rel;
                    out.push(GroupEntry {
                        index: prefix << (g - rel),
                        depth: rel,
                        hash,
                    });
                    return;
                }
                let bit = 1u32 << (g + 2 - rel - 1);
                let split = paths.partition_point(|p| p & bit == 0);
                build(g, &paths[..split], rel + 1, prefix << 1, salt, out);
                build(g, &paths[split..], rel + 1, (prefix << 1) | 1, salt, out);
            }
            let paths: Vec<u32> = paths.into_iter().collect();
            let mut entries = Vec::new();
            build(g, &paths, 0, 0, salt, &mut entries);
            (g, entries)
        })
    })
}

fn arb_values() -> impl Strategy<Value = StemValues> {
    proptest::collection::btree_map(
        any::<u8>(),
        prop_oneof![Just([0u8; 32]), proptest::array::uniform32(any::<u8>())],
        1..24,
    )
    .prop_map(|m| {
        let mut v = StemValues::new();
        for (i, x) in m {
            v.set(i, x);
        }
        v
    })
}

/// A valid blob of either kind.
fn arb_node() -> impl Strategy<Value = NodeBlob> {
    prop_oneof![
        (proptest::array::uniform31(any::<u8>()), arb_values())
            .prop_map(|(s, v)| NodeBlob::Stem(s, v)),
        arb_group().prop_map(|(g, entries)| NodeBlob::Group(GroupBlob {
            group_depth: g,
            entries
        })),
    ]
}

/// Arbitrary bytes, half of them starting with a real tag and sized like a real blob.
fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..4,
        0usize..6,
        1u8..=8,
        proptest::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(|(kind, n, g, mut b)| {
            match kind {
                0 => {
                    b.resize(1 + 31 + 32 + 32 * n, 0);
                    b[0] = STEM_TAG;
                }
                1 => {
                    b.resize(bintrie_node::group::group_blob_len(g, n.max(1)), 0);
                    b[0] = GROUP_TAG;
                    b[1] = g;
                }
                _ => {}
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn node_blob_decode_never_panics(blob in arb_bytes()) {
        if let Ok(node) = NodeBlob::decode(&blob) {
            prop_assert_eq!(encode_node(&node), blob);
        }
    }

    #[test]
    fn node_blob_round_trip(node in arb_node()) {
        let blob = encode_node(&node);
        prop_assert_eq!(NodeBlob::decode(&blob), Ok(node));
    }

    #[test]
    fn node_blob_mutated_never_panics(
        node in arb_node(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut blob = encode_node(&node);
        for (at, byte) in edits {
            let i = at.index(blob.len());
            blob[i] = byte;
        }
        if let Some(c) = cut {
            blob.truncate(c.index(blob.len() + 1));
        }
        if let Ok(back) = NodeBlob::decode(&blob) {
            prop_assert_eq!(encode_node(&back), blob);
        }
    }

    /// Canonical groups with early stems and deeper bottom entries round-trip, and any entry
    /// removed, added or moved either still decodes to exactly what was encoded or is rejected.
    #[test]
    fn group_round_trip_and_edits((g, entries) in arb_group(), which in any::<prop::sample::Index>(), to in any::<u16>(), depth in 1u8..=8) {
        let mut blob = Vec::new();
        GroupBlob::encode(g, &entries, &mut blob);
        let back = GroupBlob::decode(&blob).unwrap();
        prop_assert_eq!(back.group_depth, g);
        prop_assert_eq!(&back.entries, &entries);

        // Move one entry to another position and depth (kept sorted and in range, as `encode`
        // requires); the decoder decides whether the result is canonical.
        let mut edited = entries.clone();
        let i = which.index(edited.len());
        edited[i].index = to % (1 << g);
        edited[i].depth = depth.min(g);
        edited.sort_by_key(|e| e.index);
        edited.dedup_by_key(|e| e.index);
        let mut blob = Vec::new();
        GroupBlob::encode(g, &edited, &mut blob);
        match GroupBlob::decode(&blob) {
            Ok(back) => prop_assert_eq!(back.entries, edited),
            Err(e) => prop_assert!(matches!(
                e,
                CodecError::MisalignedEntry { .. }
                    | CodecError::OverlappingEntry { .. }
                    | CodecError::LoneStem { .. }
            ), "{:?}", e),
        }
    }

    #[test]
    fn group_decode_never_panics(blob in arb_bytes()) {
        if let Ok(group) = GroupBlob::decode(&blob) {
            let mut again = Vec::new();
            GroupBlob::encode(group.group_depth, &group.entries, &mut again);
            prop_assert_eq!(again, blob);
        }
    }

    #[test]
    fn stem_values_round_trip(stem in proptest::array::uniform31(any::<u8>()), values in arb_values()) {
        let mut blob = Vec::new();
        values.encode_blob(&stem, &mut blob);
        let (s, v) = StemValues::decode_blob(&blob).unwrap();
        prop_assert_eq!(s, stem);
        prop_assert_eq!(&v, &values);
        prop_assert_eq!(StemValues::decode_values(&blob[1 + 31..]).unwrap(), values);
    }

    #[test]
    fn decode_values_never_panics(n in 0usize..6, sized in any::<bool>(), mut bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if sized {
            bytes.resize(32 + 32 * n, 0);
        }
        if let Ok(v) = StemValues::decode_values(&bytes) {
            let stem: Stem = [0; 31];
            let mut blob = Vec::new();
            v.encode_blob(&stem, &mut blob);
            prop_assert_eq!(&blob[1 + 31..], &bytes[..]);
            prop_assert_eq!(v.len(), (bytes.len() - 32) / 32);
        }
    }

    #[test]
    fn path_from_key_never_panics(key in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok(p) = Path::from_key(&key) {
            let again = p.to_key();
            prop_assert_eq!(again.as_bytes(), &key[..]);
            prop_assert!(p.len() <= bintrie_node::MAX_DEPTH);
        }
    }

    /// Every path key that `to_key` produces parses back, including the longest ones, and a key
    /// with one byte changed either parses to a path that re-encodes to it or is rejected.
    #[test]
    fn path_key_round_trip(stem in proptest::array::uniform31(any::<u8>()), len in 0usize..=248, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let p = Path::from_stem_prefix(&stem, len);
        let key = p.to_key();
        prop_assert_eq!(Path::from_key(key.as_bytes()), Ok(p));
        prop_assert!(p.is_prefix_of(&stem));
        let mut bad = key.as_bytes().to_vec();
        if !bad.is_empty() {
            let i = at.index(bad.len());
            bad[i] = byte;
            if let Ok(q) = Path::from_key(&bad) {
                let again = q.to_key();
                prop_assert_eq!(again.as_bytes(), &bad[..]);
            }
        }
    }
}

/// The early-stem strategy really produces early stems and deeper bottom entries (so the round
/// trips above cover them).
#[test]
fn arb_group_covers_early_stems() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut depths = BTreeSet::new();
    for _ in 0..200 {
        let (g, entries) = arb_group().new_tree(&mut runner).unwrap().current();
        for e in entries {
            depths.insert(e.depth == g);
        }
    }
    assert_eq!(depths.len(), 2, "both early stems and bottom entries");
}
