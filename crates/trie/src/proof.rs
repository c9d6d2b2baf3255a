//! Single-key proofs: the sibling hashes from the root to where a key's walk ends, enough to
//! recompute the root with the key's value — or its absence.

use crate::hex;
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{Hash32, MAX_DEPTH, TreeHasher, ZERO_HASH, fold_pair, stem_node_hash};

/// A proof of one tree key's value, or of its absence, against a root.
///
/// The walk from the root follows the key's stem bits and ends at an empty subtree
/// (`stem: None`), at the key's own stem (`stem_siblings` prove the value inside its 256-leaf
/// subtree), or at another stem on the key's path (`subtree_root` lets the verifier hash that
/// stem, and `other_stem_leaf` opens one of its present leaves: the key is absent).
///
/// EIP-7864's two 64-byte preimages carry no domain tag, and a proof must not let one node
/// pass for the other:
/// - An internal node whose left child's hash ends in 0x00 also hashes as a stem node (stem =
///   the first 31 bytes of that hash, subtree root = the right child's hash). With a subtree
///   root alone, such a node on a key's path would "prove" the key absent: hence the opening.
///   A real stem always holds a present value, whose leaf is the hash of 32 bytes; under a
///   forged one, 8 levels below a hash whose preimage is 64 bytes, no such leaf can be found
///   without a SHA-256 collision.
/// - A stem node also hashes as an internal node whose left child is `stem ‖ 0x00` and whose
///   right child is its subtree root: a walk of one of that stem's keys that "turns right"
///   there would go on into the stem's values and end in one of their empty halves, "proving"
///   a present key absent. [`Proof::computed_root`] refuses any level whose left child hashes
///   as the key's own stem node's left half; an honest proof meets that only for a stem of 31
///   zero bytes (which no account or storage key has), whose absence cannot be proven by an
///   empty subtree at a left turn.
///
/// Above the depth of the node a key's walk really ends at, a proof cannot differ from the
/// real path without a collision; at that node, these two checks leave only the honest ends.
///
/// All of this assumes that no stem in the tree was chosen to equal the first 31 bytes of a
/// hash (EIP-7864 derives account and storage stems from SHA-256: matching a given one costs
/// about 2^248 hashes, a birthday search over both sides about 2^124). A stem chosen so makes its node hash as one more fold over that hash, and
/// with raw tree keys a proof can then be forged for any answer in about 2^(10 + depth)
/// hashes, consistent down to a present leaf: no check here can tell it from an honest one
/// (`chosen_stems_let_a_forged_proof_verify` in the crate's tests, README, "A gap in the
/// tree's hash").
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
    /// Present iff `stem` is another stem: one of its present leaves, which must fold to
    /// `subtree_root`.
    pub other_stem_leaf: Option<StemLeaf>,
}

/// One present leaf of a stem and the siblings that fold it to the stem's subtree root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StemLeaf {
    /// Its sub-index (the last byte of its tree key).
    pub index: u8,
    /// Its value (present: it hashes to `H(value)`).
    pub value: [u8; 32],
    /// The sibling hashes inside the stem's 256-leaf subtree, leaf level first.
    pub siblings: [Hash32; 8],
}

impl StemLeaf {
    /// The subtree root this leaf and its siblings fold to (SPEC §3).
    pub fn subtree_root<H: TreeHasher>(&self) -> Hash32 {
        fold_leaf::<H>(H::hash32(&self.value), self.index, &self.siblings)
    }
}

/// Whether an internal node with this left child also hashes as the node of `stem` (its
/// preimage would be `stem ‖ 0x00 ‖ right`): a walk of one of `stem`'s keys through it may be
/// walking through that stem's own node, read as an internal one, and must not be believed.
/// An honest tree meets this only when `stem` is 31 zero bytes and the left child is empty
/// (no account or storage key has that stem: it is a prefix of a SHA-256 output).
pub(crate) fn poses_as_own_stem(stem: &Stem, left: &Hash32) -> bool {
    left[31] == 0 && left[..31] == stem[..]
}

/// Whether a left child with hash `left`, under the node at `depth` on `stem`'s path, could be
/// the first half of a stem node's preimage there (`S ‖ 0x00` for a stem S whose first `depth`
/// bits are that path): the node may then be S's node read as an internal one, and a new stem
/// written below it would land among S's values. An honest tree meets this with a chance of
/// about 2^-(8 + depth) per node; a witness opens such a left child one level
/// ([`crate::PartialTree`]'s writes refuse one that is only a hash).
pub(crate) fn could_be_stem_half(left: &Hash32, stem: &Stem, depth: usize) -> bool {
    let (whole, rest) = (depth / 8, depth % 8);
    left[31] == 0
        && left[..whole] == stem[..whole]
        && (rest == 0 || (left[whole] ^ stem[whole]) >> (8 - rest) == 0)
}

/// Folds a leaf hash at `index` with its 8 siblings, leaf level first, to a subtree root.
fn fold_leaf<H: TreeHasher>(mut leaf: Hash32, index: u8, siblings: &[Hash32; 8]) -> Hash32 {
    for (level, sibling) in siblings.iter().enumerate() {
        leaf = if (index >> level) & 1 == 0 {
            fold_pair::<H>(&leaf, sibling)
        } else {
            fold_pair::<H>(sibling, &leaf)
        };
    }
    leaf
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

fn bit(stem: &Stem, i: usize) -> u8 {
    (stem[i / 8] >> (7 - i % 8)) & 1
}

impl Proof {
    /// The root this proof hashes to, after checking that its parts fit together: at most 248
    /// siblings; a value only with the key's own stem; `stem_siblings` exactly with the key's
    /// stem; `subtree_root` and `other_stem_leaf` exactly with another stem, that stem on the
    /// key's path, and its leaf folding to its subtree root.
    pub fn computed_root<H: TreeHasher>(&self) -> Result<Hash32, ProofError> {
        let bad = |m: &str| Err(ProofError::Malformed(m.to_string()));
        let depth = self.siblings.len();
        if depth > MAX_DEPTH {
            return bad(&format!(
                "{depth} siblings: a path has at most {MAX_DEPTH} levels"
            ));
        }
        let key_stem = &self.key.stem;
        let other = (&self.subtree_root, &self.other_stem_leaf);
        let mut node = match (&self.stem, &self.stem_siblings, other) {
            (None, None, (None, None)) => {
                if self.value.is_some() {
                    return bad("a value in an empty subtree");
                }
                ZERO_HASH
            }
            (Some(stem), Some(siblings), (None, None)) if stem == key_stem => {
                let leaf = self.value.as_ref().map_or(ZERO_HASH, H::hash32);
                stem_node_hash::<H>(stem, &fold_leaf::<H>(leaf, self.key.sub_index, siblings))
            }
            (Some(stem), None, (Some(subtree_root), opened)) if stem != key_stem => {
                if self.value.is_some() {
                    return bad("a value, but the walk ends at another stem");
                }
                if (0..depth).any(|i| bit(stem, i) != bit(key_stem, i)) {
                    return bad("the stem where the walk ends is not on the key's path");
                }
                let Some(opened) = opened else {
                    return bad(
                        "the walk ends at another stem, but none of its present leaves is \
                         opened (other_stem_leaf): a subtree root alone cannot tell a stem \
                         from an internal node posing as one",
                    );
                };
                if opened.subtree_root::<H>() != *subtree_root {
                    return bad("the other stem's opened leaf does not fold to its subtree root");
                }
                stem_node_hash::<H>(stem, subtree_root)
            }
            (None, _, _) => {
                return bad("stem siblings, a subtree root or a stem leaf without a stem");
            }
            (Some(stem), _, _) if stem == key_stem => {
                return bad(
                    "the key's own stem needs its 8 stem siblings and no subtree root or other \
                     stem's leaf",
                );
            }
            (Some(_), _, _) => {
                return bad(
                    "another stem needs its subtree root and one opened leaf, and no stem \
                     siblings",
                );
            }
        };
        for (d, sibling) in self.siblings.iter().enumerate().rev() {
            let (left, right) = if bit(key_stem, d) == 0 {
                (&node, sibling)
            } else {
                (sibling, &node)
            };
            if poses_as_own_stem(key_stem, left) {
                if *left == ZERO_HASH {
                    // Only the stem of 31 zero bytes, beside an empty left subtree: an honest
                    // tree's shape, which no proof can tell from the stem's own node.
                    return bad(
                        "the key's stem is 31 zero bytes and its walk passes an internal node \
                         whose left subtree is empty, which hashes alike as that stem's own \
                         node (its preimage is the stem, 0x00 and the right child): no proof \
                         can tell the two apart, so this key's absence or value cannot be \
                         proven against this root (no account or storage key has this stem)",
                    );
                }
                return bad(
                    "the walk passes through what hashes alike as the key's own stem node (a \
                     left child equal to the stem and 0x00): such a proof cannot show the key \
                     absent or another value",
                );
            }
            node = H::hash_pair(left, right);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-wise prefix test agrees with reading the bits one by one, at every depth.
    #[test]
    fn could_be_stem_half_compares_the_path_bits() {
        let stem: Stem = std::array::from_fn(|i| (i as u8).wrapping_mul(73) ^ 0x5a);
        for flip in 0..248 {
            let mut left = [0u8; 32];
            left[..31].copy_from_slice(&stem);
            left[flip / 8] ^= 0x80 >> (flip % 8);
            let mut half: Stem = [0; 31];
            half.copy_from_slice(&left[..31]);
            for depth in 0..=248 {
                let bitwise = (0..depth).all(|i| bit(&half, i) == bit(&stem, i));
                assert_eq!(
                    could_be_stem_half(&left, &stem, depth),
                    bitwise,
                    "{flip} {depth}"
                );
                assert_eq!(bitwise, depth <= flip);
            }
            left[31] = 1;
            assert!(!could_be_stem_half(&left, &stem, 0));
        }
    }
}
