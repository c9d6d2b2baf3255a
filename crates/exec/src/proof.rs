//! The JSON form of a single-key proof (`bintrie prove`, `bintrie verify-proof`), for other
//! implementations to produce and check.
//!
//! ```text
//! {"root": "0x…32 bytes", "key": "0x…32 bytes",
//!  "value": "0x…32 bytes" | null,      // null: the key is absent
//!  "siblings": ["0x…", …],             // sibling hashes along the path, root level first
//!  "stem": "0x…31 bytes" | null,       // the stem where the walk ends; null: an empty subtree
//!  "stem_siblings": ["0x…" × 8],       // iff stem == key[:31]: leaf level first
//!  "subtree_root": "0x…",              // iff stem is another stem (an absence proof)
//!  "other_stem_leaf": {                // iff stem is another stem: one of its present leaves
//!      "index": 0..=255, "value": "0x…32 bytes", "siblings": ["0x…" × 8]}}
//! ```
//!
//! `other_stem_leaf` is this project's addition to SPEC §7's format: a reader of that format
//! computes the root without it, but a subtree root alone lets an internal node pose as a
//! stem ([`Proof`] says why), so [`Proof::verify`] refuses an absence proof without it.
//!
//! [`Proof::verify`] states how a proof is checked.

use crate::kv::parse_hex_array;
use alloy_primitives::hex::encode_prefixed as hex0x;
use anyhow::{Context, Result, bail};
use bintrie_keys::TreeKey;
use bintrie_node::Hash32;
use bintrie_trie::{Proof, StemLeaf};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A [`Proof`] and the root it claims, as JSON (hex strings 0x-prefixed). `value` and `stem`
/// are `null` when absent; `stem_siblings`, `subtree_root` and `other_stem_leaf` are omitted
/// when absent. Unknown fields are refused. Deserialized from a byte slice, the strings borrow from it (no copy).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a proof: an object with root, key, value, siblings and stem"
)]
pub struct ProofJson<'a> {
    /// The root the proof was made against.
    #[serde(borrow)]
    pub root: Cow<'a, str>,
    /// The 32-byte tree key proven.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// The key's value; `None` (null) when the key is absent.
    #[serde(borrow)]
    pub value: Option<Cow<'a, str>>,
    /// Sibling hashes along the path, root level first.
    #[serde(borrow)]
    pub siblings: Vec<Cow<'a, str>>,
    /// The stem where the walk ends; `None` (null) for an empty subtree.
    #[serde(borrow)]
    pub stem: Option<Cow<'a, str>>,
    /// The 8 sibling hashes inside the key's 256-leaf subtree, leaf level first (iff `stem` is
    /// the key's stem).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub stem_siblings: Option<Vec<Cow<'a, str>>>,
    /// The subtree root of another stem on the key's path (an absence proof).
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub subtree_root: Option<Cow<'a, str>>,
    /// One present leaf of that other stem, which must fold to `subtree_root`.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub other_stem_leaf: Option<StemLeafJson<'a>>,
}

/// A [`StemLeaf`] as JSON: `index` a number, the rest hex strings 0x-prefixed. Unknown fields
/// are refused.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "other_stem_leaf: an object with index, value and siblings"
)]
pub struct StemLeafJson<'a> {
    /// The leaf's sub-index, 0..=255.
    #[serde(deserialize_with = "leaf_index")]
    pub index: u8,
    /// Its 32-byte value.
    #[serde(borrow)]
    pub value: Cow<'a, str>,
    /// The 8 sibling hashes inside the stem's subtree, leaf level first.
    #[serde(borrow)]
    pub siblings: Vec<Cow<'a, str>>,
}

/// Deserializes `other_stem_leaf.index`, naming the field and its range in every error (serde's
/// own says only "expected u8").
fn leaf_index<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u8, D::Error> {
    struct Index;
    impl serde::de::Visitor<'_> for Index {
        type Value = u8;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("other_stem_leaf.index: a leaf's sub-index, an integer in 0..=255")
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<u8, E> {
            u8::try_from(n).map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(n), &self))
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<u8, E> {
            u8::try_from(n).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(n), &self))
        }
    }
    d.deserialize_u64(Index)
}

impl ProofJson<'static> {
    /// The JSON form of `proof`, made against `root`.
    pub fn new(root: &Hash32, proof: &Proof) -> Self {
        let h = |b: &[u8]| Cow::Owned(hex0x(b));
        ProofJson {
            root: h(root),
            key: h(&proof.key.to_bytes()),
            value: proof.value.as_ref().map(|v| h(v)),
            siblings: proof.siblings.iter().map(|s| h(s)).collect(),
            stem: proof.stem.as_ref().map(|s| h(s)),
            stem_siblings: proof
                .stem_siblings
                .map(|s| s.iter().map(|x| h(x)).collect()),
            subtree_root: proof.subtree_root.as_ref().map(|s| h(s)),
            other_stem_leaf: proof.other_stem_leaf.as_ref().map(|l| StemLeafJson {
                index: l.index,
                value: h(&l.value),
                siblings: l.siblings.iter().map(|x| h(x)).collect(),
            }),
        }
    }
}

impl ProofJson<'_> {
    /// The root and the proof this JSON holds. Errors name the field that is not hex of the
    /// right length, a `stem_siblings` that is not 8 entries, or a path longer than
    /// [`MAX_DEPTH`](bintrie_node::MAX_DEPTH). Parsing does not verify: see [`Proof::verify`].
    pub fn parse(&self) -> Result<(Hash32, Proof)> {
        let b32 = |s: &str, what: &str| parse_hex_array::<32>(s).with_context(|| what.to_string());
        // The field is named only on an error: formatting it for every entry cost a tenth of
        // `verify-proof`'s time.
        let list = |v: &[Cow<'_, str>], what: &str| -> Result<Vec<Hash32>> {
            v.iter()
                .enumerate()
                .map(|(i, s)| parse_hex_array::<32>(s).with_context(|| format!("{what}[{i}]")))
                .collect()
        };
        if self.siblings.len() > bintrie_node::MAX_DEPTH {
            bail!(
                "siblings: {} entries, a path has at most {} levels",
                self.siblings.len(),
                bintrie_node::MAX_DEPTH
            );
        }
        // The count before the digits (a long list's digits are not parsed), then straight
        // into the array.
        let eight = |v: &[Cow<'_, str>], what: &str| -> Result<[Hash32; 8]> {
            if v.len() != 8 {
                bail!("{what}: {} entries, expected 8", v.len());
            }
            let mut out = [bintrie_node::ZERO_HASH; 8];
            for (i, (slot, s)) in out.iter_mut().zip(v).enumerate() {
                *slot = parse_hex_array::<32>(s).with_context(|| format!("{what}[{i}]"))?;
            }
            Ok(out)
        };
        let stem_siblings = self
            .stem_siblings
            .as_deref()
            .map(|v| eight(v, "stem_siblings"))
            .transpose()?;
        let other_stem_leaf = self
            .other_stem_leaf
            .as_ref()
            .map(|l| -> Result<StemLeaf> {
                Ok(StemLeaf {
                    index: l.index,
                    value: b32(&l.value, "other_stem_leaf.value")?,
                    siblings: eight(&l.siblings, "other_stem_leaf.siblings")?,
                })
            })
            .transpose()?;
        let proof = Proof {
            key: TreeKey::from_bytes(b32(&self.key, "key")?),
            value: self.value.as_deref().map(|v| b32(v, "value")).transpose()?,
            siblings: list(&self.siblings, "siblings")?,
            stem: self
                .stem
                .as_deref()
                .map(|s| parse_hex_array::<31>(s).context("stem"))
                .transpose()?,
            stem_siblings,
            subtree_root: self
                .subtree_root
                .as_deref()
                .map(|s| b32(s, "subtree_root"))
                .transpose()?,
            other_stem_leaf,
        };
        Ok((b32(&self.root, "root")?, proof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bintrie_node::Sha256Hasher;
    use bintrie_trie::{MemoryStore, Trie};

    fn proof_of(present: bool) -> (Hash32, Proof) {
        let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::default(), 5).unwrap();
        for i in 0..50u8 {
            let mut k = [i.wrapping_mul(37); 32];
            k[31] = i;
            trie.insert(TreeKey::from_bytes(k), [i + 1; 32]).unwrap();
        }
        let root = trie.root();
        let mut key = [37u8 * 3; 32];
        key[31] = if present { 3 } else { 200 };
        let proof = trie.prove(&TreeKey::from_bytes(key)).unwrap();
        (root, proof)
    }

    #[test]
    fn json_round_trips_and_verifies() {
        for present in [true, false] {
            let (root, proof) = proof_of(present);
            let json = ProofJson::new(&root, &proof);
            let text = serde_json::to_string(&json).unwrap();
            let back: ProofJson = serde_json::from_str(&text).unwrap();
            assert_eq!(back, json);
            let (r, p) = back.parse().unwrap();
            assert_eq!(r, root);
            assert_eq!(p, proof);
            let value = p.verify::<Sha256Hasher>(&root).unwrap();
            assert_eq!(value.is_some(), present);
            // `value` and `stem` are always written; optional parts only when present.
            assert!(text.contains("\"value\":") && text.contains("\"stem\":"));
        }
    }

    /// An absence proof that ends at another stem carries one of its leaves through JSON, and
    /// without it (as SPEC §7's format alone has it) it does not verify.
    #[test]
    fn another_stems_leaf_round_trips_and_is_required() {
        let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::default(), 5).unwrap();
        for i in 0..50u8 {
            trie.insert(TreeKey::from_bytes([i.wrapping_mul(37); 32]), [i + 1; 32])
                .unwrap();
        }
        let root = trie.root();
        let proof = (0..=255u8)
            .map(|b| trie.prove(&TreeKey::from_bytes([b ^ 0x01; 32])).unwrap())
            .find(|p| p.other_stem_leaf.is_some())
            .expect("a key whose walk ends at another stem");
        let text = serde_json::to_string(&ProofJson::new(&root, &proof)).unwrap();
        assert!(text.contains("\"other_stem_leaf\":{\"index\":"), "{text}");
        let back: ProofJson = serde_json::from_str(&text).unwrap();
        let (r, p) = back.parse().unwrap();
        assert_eq!((r, &p), (root, &proof));
        assert_eq!(p.verify::<Sha256Hasher>(&root), Ok(None));
        let mut bare = back.clone();
        bare.other_stem_leaf = None;
        let err = bare.parse().unwrap().1.verify::<Sha256Hasher>(&root);
        assert!(format!("{err:?}").contains("other_stem_leaf"), "{err:?}");
        let mut short = back;
        short.other_stem_leaf.as_mut().unwrap().siblings.pop();
        let err = format!("{:#}", short.parse().unwrap_err());
        assert!(err.contains("other_stem_leaf.siblings: 7 entries"), "{err}");
    }

    /// A malformed proof's message names the field and what it must be, never a Rust type.
    #[test]
    fn malformed_json_is_worded_by_its_fields() {
        let base = r#""root":"0x00","key":"0x00","value":null,"siblings":[],"stem":null"#;
        for (text, says) in [
            (
                "5".to_string(),
                "expected a proof: an object with root, key",
            ),
            (
                format!(r#"{{{base},"other_stem_leaf":5}}"#),
                "expected other_stem_leaf: an object with index, value and siblings",
            ),
            (
                format!(r#"{{{base},"other_stem_leaf":{{"index":300}}}}"#),
                "integer `300`, expected other_stem_leaf.index: a leaf's sub-index",
            ),
            (
                format!(r#"{{{base},"other_stem_leaf":{{"index":-1}}}}"#),
                "integer `-1`, expected other_stem_leaf.index",
            ),
            (
                format!(r#"{{{base},"other_stem_leaf":{{"index":"7"}}}}"#),
                "expected other_stem_leaf.index",
            ),
        ] {
            let err = serde_json::from_str::<ProofJson>(&text)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(!err.contains("Json"), "{text}: {err}");
        }
        let ok =
            format!(r#"{{{base},"other_stem_leaf":{{"index":255,"value":"0x00","siblings":[]}}}}"#);
        let leaf = serde_json::from_str::<ProofJson>(&ok)
            .unwrap()
            .other_stem_leaf;
        assert_eq!(leaf.map(|l| l.index), Some(255));
    }

    #[test]
    fn bad_fields_are_named() {
        let (root, proof) = proof_of(true);
        let good = ProofJson::new(&root, &proof);
        let mut j = good.clone();
        j.siblings[0] = "0x12".into();
        assert!(format!("{:#}", j.parse().unwrap_err()).starts_with("siblings[0]"));
        let mut j = good.clone();
        j.stem_siblings.as_mut().unwrap().pop();
        assert!(format!("{:#}", j.parse().unwrap_err()).contains("7 entries, expected 8"));
        // The count is checked before any entry is parsed.
        let mut j = good.clone();
        j.stem_siblings = Some(vec!["0xzz".into(); 100_000]);
        assert!(format!("{:#}", j.parse().unwrap_err()).contains("100000 entries, expected 8"));
        let mut j = good.clone();
        j.siblings = vec![j.siblings[0].clone(); bintrie_node::MAX_DEPTH + 1];
        assert!(format!("{:#}", j.parse().unwrap_err()).contains("at most"));
        let mut j = good;
        j.stem = Some("0xzz".into());
        assert!(format!("{:#}", j.parse().unwrap_err()).starts_with("stem"));
        let extra = r#"{"root":"0x","key":"0x","value":null,"siblings":[],"stem":null,"x":1}"#;
        assert!(serde_json::from_str::<ProofJson>(extra).is_err());
    }
}
