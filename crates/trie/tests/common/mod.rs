//! Test helpers: an independent reference merkleization written straight from SPEC §3.
#![allow(dead_code)]

use bintrie_keys::{Stem, TreeKey};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub type Entries = BTreeMap<[u8; 32], [u8; 32]>;

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn stem_hash(stem: &Stem, values: &BTreeMap<u8, [u8; 32]>) -> [u8; 32] {
    let mut level: Vec<[u8; 32]> = (0..=255u8)
        .map(|i| values.get(&i).map_or([0; 32], |v| sha(v)))
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| {
                if p[0] == [0; 32] && p[1] == [0; 32] {
                    [0; 32]
                } else {
                    sha(&[p[0], p[1]].concat())
                }
            })
            .collect();
    }
    let mut pre = stem.to_vec();
    pre.push(0);
    pre.extend_from_slice(&level[0]);
    sha(&pre)
}

fn bit(stem: &Stem, d: usize) -> u8 {
    (stem[d / 8] >> (7 - d % 8)) & 1
}

fn node(stems: &[(Stem, BTreeMap<u8, [u8; 32]>)], depth: usize) -> [u8; 32] {
    match stems.len() {
        0 => [0; 32],
        1 => stem_hash(&stems[0].0, &stems[0].1),
        _ => {
            let split = stems.partition_point(|(s, _)| bit(s, depth) == 0);
            let l = node(&stems[..split], depth + 1);
            let r = node(&stems[split..], depth + 1);
            sha(&[l, r].concat())
        }
    }
}

/// The root of a set of entries, by plain recursion over the sorted stems.
pub fn reference_root(entries: &Entries) -> [u8; 32] {
    let mut by_stem: BTreeMap<Stem, BTreeMap<u8, [u8; 32]>> = BTreeMap::new();
    for (k, v) in entries {
        let key = TreeKey::from_bytes(*k);
        by_stem
            .entry(key.stem)
            .or_default()
            .insert(key.sub_index, *v);
    }
    let stems: Vec<_> = by_stem.into_iter().collect();
    node(&stems, 0)
}

pub fn h32(s: &str) -> [u8; 32] {
    let s = s.trim_start_matches("0x");
    let bytes = hex::decode(format!("{s:0>64}")).expect("hex");
    bytes.try_into().expect("32 bytes")
}
