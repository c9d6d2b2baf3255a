//! Single-key proofs: the sibling hashes from the root to where a key's walk ends, enough to
//! recompute the root with the key's value — or its absence.

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{Hash32, MAX_DEPTH, TreeHasher, ZERO_HASH, fold_pair, stem_node_hash};

/// A proof of one tree key's value, or of its absence, against a root.
///
/// The walk from the root follows the key's stem bits and ends at an empty subtree
/// (`stem: None`), at the key's own stem (`stem_siblings` prove the value inside its 256-leaf
/// subtree), or at another stem on the key's path (`subtree_root` lets the verifier hash that
/// stem: the key is absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The key proven.
    pub key: TreeKey,
    /// Its value; `None`: absent.
    pub value: Option<[u8; 32]>,
    /// Sibling hashes along the path, root level first; as many as the depth where the walk
    /// ends.
    pub siblings: Vec<Hash32>,
    /// The stem where the walk ends; `None`: an empty subtree.
    pub stem: Option<Stem>,
    /// Present iff `stem` is the key's stem: the siblings inside its 256-leaf subtree, leaf
    /// level first.
    pub stem_siblings: Option<[Hash32; 8]>,
    /// Present iff `stem` is another stem: that stem's subtree root.
    pub subtree_root: Option<Hash32>,
}

/// Why a proof does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProofError {
    /// The proof's parts do not fit together (the message says which); no root was computed.
    #[error("malformed proof: {0}")]
    Malformed(String),
    /// The proof is well formed but hashes to another root.
    #[error("the proof hashes to {} but the root is {}", hex(.computed), hex(.root))]
    RootMismatch {
        /// What the proof hashes to.
        computed: Hash32,
        /// The root it was checked against.
        root: Hash32,
    },
}

fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn bit(stem: &Stem, i: usize) -> u8 {
    (stem[i / 8] >> (7 - i % 8)) & 1
}

impl Proof {
    /// The root this proof hashes to, after checking that its parts fit together: at most 248
    /// siblings; a value only with the key's own stem; `stem_siblings` exactly with the key's
    /// stem, `subtree_root` exactly with another stem, and that stem on the key's path.
    pub fn computed_root<H: TreeHasher>(&self) -> Result<Hash32, ProofError> {
        let bad = |m: &str| Err(ProofError::Malformed(m.to_string()));
        let depth = self.siblings.len();
        if depth > MAX_DEPTH {
            return bad(&format!(
                "{depth} siblings: a path has at most {MAX_DEPTH} levels"
            ));
        }
        let key_stem = &self.key.stem;
        let mut node = match (&self.stem, &self.stem_siblings, &self.subtree_root) {
            (None, None, None) => {
                if self.value.is_some() {
                    return bad("a value in an empty subtree");
                }
                ZERO_HASH
            }
            (Some(stem), Some(siblings), None) if stem == key_stem => {
                let mut leaf = self.value.as_ref().map_or(ZERO_HASH, H::hash32);
                let index = self.key.sub_index;
                for (level, sibling) in siblings.iter().enumerate() {
                    leaf = if (index >> level) & 1 == 0 {
                        fold_pair::<H>(&leaf, sibling)
                    } else {
                        fold_pair::<H>(sibling, &leaf)
                    };
                }
                stem_node_hash::<H>(stem, &leaf)
            }
            (Some(stem), None, Some(subtree_root)) if stem != key_stem => {
                if self.value.is_some() {
                    return bad("a value, but the walk ends at another stem");
                }
                if (0..depth).any(|i| bit(stem, i) != bit(key_stem, i)) {
                    return bad("the stem where the walk ends is not on the key's path");
                }
                stem_node_hash::<H>(stem, subtree_root)
            }
            (None, _, _) => return bad("stem siblings or a subtree root without a stem"),
            (Some(stem), _, _) if stem == key_stem => {
                return bad("the key's own stem needs its 8 stem siblings and no subtree root");
            }
            (Some(_), _, _) => {
                return bad("another stem needs its subtree root and no stem siblings");
            }
        };
        for (d, sibling) in self.siblings.iter().enumerate().rev() {
            node = if bit(key_stem, d) == 0 {
                H::hash_pair(&node, sibling)
            } else {
                H::hash_pair(sibling, &node)
            };
        }
        Ok(node)
    }

    /// Checks the proof against `root`: the key's value (`None`: proven absent), or why not.
    pub fn verify<H: TreeHasher>(&self, root: &Hash32) -> Result<Option<[u8; 32]>, ProofError> {
        let computed = self.computed_root::<H>()?;
        if computed != *root {
            return Err(ProofError::RootMismatch {
                computed,
                root: *root,
            });
        }
        Ok(self.value)
    }
}
