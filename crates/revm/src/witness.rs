//! Block witnesses and stateless execution.
//!
//! A [`BlockWitness`] is everything a verifier without the state needs to execute one block and
//! compute its post-state root: the pre-state root, the tree nodes of every key the block reads
//! or writes, and the bytecode it runs. Two encodings of the nodes, built side by side by the
//! pipeline ([`PipelineOptions::with_witness`](crate::PipelineOptions::with_witness)):
//!
//! - [`WitnessEncoding::Multiproof`]: the tree pruned to the block's keys, every other subtree
//!   by its hash, shared siblings once, only the touched leaves of each stem
//!   ([`bintrie_trie::PartialTree`], its encoding in `bintrie_trie`'s witness docs);
//! - [`WitnessEncoding::Blobs`]: the stored blobs the block's walks cross, as the store holds
//!   them (geth's choice): every group blob on the way and whole stem blobs. It depends on the
//!   group depth.
//!
//! [`StatelessState`] runs a block from a witness alone: a [`BlockState`] whose reads are
//! answered by the witness (each proven against the pre-state root before use; a key the witness
//! does not prove is an error naming the missing path) and whose commit applies the writes to
//! the partial tree and computes the post-state root.
//!
//! # File format
//!
//! All integers big-endian.
//!
//! ```text
//! magic        "BTWITNESS" (9 bytes)
//! version      1 (1 byte)
//! encoding     0 = multiproof, 1 = blobs (1 byte)
//! group depth  1..8: the state's (1 byte; the multiproof does not depend on it)
//! block        the block number the witness is for (8 bytes)
//! pre-root     the pre-state root (32 bytes)
//! nodes        length (8 bytes), then
//!                multiproof: the partial tree's pre-order encoding
//!                blobs:      repeated: key length (1 byte), path key, blob length (4 bytes), blob
//! codes        count (4 bytes), then repeated: length (4 bytes), bytecode (each is looked up
//!              by its keccak-256, computed by the reader)
//! ```
//!
//! Trailing bytes, unknown versions or encodings, lengths past the end and path keys that do
//! not decode are refused.

use crate::{
    BlockChanges, BlockDb, BlockDbOptions, BlockState, CommitReport, StateBackend, StateError,
    StateSnapshot, TriePrefetcher,
};
use alloy_primitives::{B256, Bytes, keccak256};
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{PathKey, split_stem_blob};
use bintrie_trie::{NodeStore, PartialTree, Trie, TrieError, WitnessError};
use std::collections::HashMap;
use std::time::Instant;

const MAGIC: &[u8; 9] = b"BTWITNESS";
const VERSION: u8 = 1;
/// Bytes before the node section: magic, version, encoding, group depth, block, pre-root.
const HEADER_LEN: usize = 9 + 1 + 1 + 1 + 8 + 32;
/// The largest node section read: far above any block's (an average mainnet MPT witness is
/// ~17 MB; the study's largest blob witness, GD-8 at 17M stems, 30 MiB). A decoded multiproof
/// takes up to ~40x its bytes in memory, so this also bounds what a hostile file costs.
const MAX_SECTION: u64 = 256 << 20;

/// How a witness holds the tree's nodes (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WitnessEncoding {
    /// The tree pruned to the block's keys: sibling hashes only.
    Multiproof,
    /// The stored group and stem blobs the block's walks cross.
    Blobs,
}

impl WitnessEncoding {
    /// `multiproof` or `blobs`.
    pub fn name(self) -> &'static str {
        match self {
            WitnessEncoding::Multiproof => "multiproof",
            WitnessEncoding::Blobs => "blobs",
        }
    }

    /// The encoding called `name` (as [`WitnessEncoding::name`] spells it).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "multiproof" => Some(WitnessEncoding::Multiproof),
            "blobs" => Some(WitnessEncoding::Blobs),
            _ => None,
        }
    }
}

/// A witness's bytes by part: `nodes + values + code + header = total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WitnessBytes {
    /// Tree structure and hashes (tags, stems, sibling hashes; for blobs: path keys, blob
    /// headers, bitmaps, group hashes) with their length prefixes.
    pub nodes: u64,
    /// Leaf values (32 bytes each).
    pub values: u64,
    /// Bytecode with its length prefixes.
    pub code: u64,
    /// The whole file.
    pub total: u64,
}

/// The tree part of a witness.
#[derive(Clone, Debug)]
pub enum WitnessNodes {
    /// The pruned tree.
    Multiproof(PartialTree),
    /// Stored blobs by path key, in key order.
    Blobs(Vec<(PathKey, Vec<u8>)>),
}

/// Everything a stateless verifier needs for one block (module docs).
#[derive(Clone, Debug)]
pub struct BlockWitness {
    /// The block it is for.
    pub block: u64,
    /// The pre-state root everything is proven against.
    pub pre_root: B256,
    /// The group depth of the state it was cut from (blobs are encoded at it).
    pub group_depth: u8,
    /// The tree part.
    pub nodes: WitnessNodes,
    /// The bytecode the block runs (not deployed by itself), sorted by code hash.
    pub codes: Vec<Bytes>,
}

/// The witness of one block in both encodings, and what building them cost.
#[derive(Clone, Debug)]
pub struct Witnesses {
    /// The multiproof encoding.
    pub multiproof: BlockWitness,
    /// The grouped-blob encoding.
    pub blobs: BlockWitness,
    /// Tree keys the block read or wrote.
    pub keys: usize,
    /// Distinct stems of those keys.
    pub stems: usize,
    /// Wall time to build both (loading what the walks need, hashing, reading blobs).
    pub build_time: std::time::Duration,
}

impl Witnesses {
    /// The witness in `encoding`.
    pub fn get(&self, encoding: WitnessEncoding) -> &BlockWitness {
        match encoding {
            WitnessEncoding::Multiproof => &self.multiproof,
            WitnessEncoding::Blobs => &self.blobs,
        }
    }
}

fn malformed(msg: impl Into<String>) -> StateError {
    StateError::Witness(WitnessError::Malformed(msg.into()))
}

impl BlockWitness {
    /// The bytes every witness file starts with ([`BlockWitness::encode`]).
    pub const MAGIC: &'static [u8; 9] = MAGIC;

    /// Which encoding the nodes are in.
    pub fn encoding(&self) -> WitnessEncoding {
        match self.nodes {
            WitnessNodes::Multiproof(_) => WitnessEncoding::Multiproof,
            WitnessNodes::Blobs(_) => WitnessEncoding::Blobs,
        }
    }

    /// The file's bytes by part (what [`BlockWitness::encode`] writes).
    pub fn bytes(&self) -> WitnessBytes {
        let (nodes, values) = match &self.nodes {
            WitnessNodes::Multiproof(t) => {
                let s = t.size();
                (s.nodes, s.values)
            }
            WitnessNodes::Blobs(blobs) => {
                let mut nodes = 0;
                let mut values = 0;
                for (key, blob) in blobs {
                    // A stem blob's values: 32 bytes per set bit of its bitmap.
                    let v = split_stem_blob(blob)
                        .and_then(|(_, rest)| rest.get(..32))
                        .map_or(0, |bitmap| {
                            32 * bitmap
                                .iter()
                                .map(|b| u64::from(b.count_ones()))
                                .sum::<u64>()
                        })
                        .min(blob.len() as u64);
                    values += v;
                    nodes += 1 + key.as_bytes().len() as u64 + 4 + blob.len() as u64 - v;
                }
                (nodes, values)
            }
        };
        let nodes = nodes + 8;
        let code = 4 + self.codes.iter().map(|c| 4 + c.len() as u64).sum::<u64>();
        WitnessBytes {
            nodes,
            values,
            code,
            total: HEADER_LEN as u64 + nodes + values + code,
        }
    }

    /// The file form (module docs). Blob and code lengths are written as 32 bits (none of a
    /// block's comes near 4 GiB); a `group_depth` outside 1..=8, which no witness this crate
    /// builds has, is written as it is and refused by [`BlockWitness::decode`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(match self.encoding() {
            WitnessEncoding::Multiproof => 0,
            WitnessEncoding::Blobs => 1,
        });
        out.push(self.group_depth);
        out.extend_from_slice(&self.block.to_be_bytes());
        out.extend_from_slice(self.pre_root.as_slice());
        let len_at = out.len();
        out.extend_from_slice(&[0; 8]);
        match &self.nodes {
            WitnessNodes::Multiproof(t) => t.encode(&mut out),
            WitnessNodes::Blobs(blobs) => {
                for (key, blob) in blobs {
                    out.push(key.as_bytes().len() as u8);
                    out.extend_from_slice(key.as_bytes());
                    out.extend_from_slice(&(blob.len() as u32).to_be_bytes());
                    out.extend_from_slice(blob);
                }
            }
        }
        let len = (out.len() - len_at - 8) as u64;
        out[len_at..len_at + 8].copy_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&(self.codes.len() as u32).to_be_bytes());
        for c in &self.codes {
            out.extend_from_slice(&(c.len() as u32).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    /// Reads the file form. Checks the framing (magic, version, encoding, group depth, lengths,
    /// path keys, the multiproof's structure, no trailing bytes), not the hashes: those are
    /// checked against the pre-root when a [`StatelessState`] is built from it.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        let mut r = Cursor { bytes, at: 0 };
        if r.take(MAGIC.len(), "the magic")? != MAGIC {
            return Err(malformed("not a bintrie witness (no BTWITNESS magic)"));
        }
        let version = r.u8("the version")?;
        if version != VERSION {
            return Err(malformed(format!(
                "witness version {version}; this build reads version {VERSION}"
            )));
        }
        let encoding = match r.u8("the encoding")? {
            0 => WitnessEncoding::Multiproof,
            1 => WitnessEncoding::Blobs,
            e => return Err(malformed(format!("unknown encoding {e}"))),
        };
        let group_depth = r.u8("the group depth")?;
        if !(1..=8).contains(&group_depth) {
            return Err(malformed(format!("group depth {group_depth} outside 1..8")));
        }
        let block = u64::from_be_bytes(r.array("the block number")?);
        let pre_root = B256::from(r.array::<32>("the pre-state root")?);
        let len = u64::from_be_bytes(r.array("the node section's length")?);
        if len > MAX_SECTION {
            return Err(malformed(format!("a node section of {len} bytes")));
        }
        let section = r.take(len as usize, "the node section")?;
        let nodes = match encoding {
            WitnessEncoding::Multiproof => {
                WitnessNodes::Multiproof(PartialTree::decode(section).map_err(StateError::Witness)?)
            }
            WitnessEncoding::Blobs => {
                let mut s = Cursor {
                    bytes: section,
                    at: 0,
                };
                let mut blobs = Vec::new();
                while s.at < section.len() {
                    let klen = s.u8("a path key's length")? as usize;
                    let at = s.at;
                    let key =
                        PathKey::from_bytes(s.take(klen, "a path key")?).ok_or_else(|| {
                            malformed(format!("the path key at byte {at} of the nodes is invalid"))
                        })?;
                    let blen = u32::from_be_bytes(s.array("a blob's length")?) as usize;
                    blobs.push((key, s.take(blen, "a blob")?.to_vec()));
                }
                WitnessNodes::Blobs(blobs)
            }
        };
        let count = u32::from_be_bytes(r.array("the code count")?);
        let mut codes = Vec::new();
        for _ in 0..count {
            let clen = u32::from_be_bytes(r.array("a code length")?) as usize;
            codes.push(Bytes::copy_from_slice(r.take(clen, "a bytecode")?));
        }
        if r.at != bytes.len() {
            return Err(malformed(format!(
                "{} trailing bytes after the codes",
                bytes.len() - r.at
            )));
        }
        Ok(BlockWitness {
            block,
            pre_root,
            group_depth,
            nodes,
            codes,
        })
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], StateError> {
        let out = self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end))
            .ok_or_else(|| {
                malformed(format!(
                    "{what} ({n} bytes at byte {}) runs past the end of the witness ({} bytes)",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        self.at += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], StateError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &str) -> Result<u8, StateError> {
        Ok(self.array::<1>(what)?[0])
    }
}

/// Builds both witnesses of a block from a committed `trie` (the pre-state) for the tree keys
/// the block read or wrote and the code it ran (`code` looks bytecode up by hash). The trie
/// errors are mapped by `err`.
pub(crate) fn build_witnesses<S: NodeStore>(
    trie: &mut Trie<S>,
    block: u64,
    keys: &[TreeKey],
    codes: &[B256],
    code: impl Fn(&B256) -> Result<Option<Bytes>, StateError>,
    err: impl Fn(TrieError<S::Error>) -> StateError,
) -> Result<Witnesses, StateError> {
    let t = Instant::now();
    let pre_root = B256::from(trie.root());
    let multiproof = trie.witness(keys).map_err(&err)?;
    let mut stems: Vec<Stem> = keys.iter().map(|k| k.stem).collect();
    stems.sort_unstable();
    stems.dedup();
    let blobs = trie.witness_blobs(&stems).map_err(&err)?;
    // Sorted by hash, each once, in whatever order the caller gave them (BlockWitness::codes).
    let mut hashes = codes.to_vec();
    hashes.sort_unstable();
    hashes.dedup();
    let codes = hashes
        .iter()
        .map(|h| code(h)?.ok_or(StateError::MissingCode(*h)))
        .collect::<Result<Vec<Bytes>, StateError>>()?;
    let group_depth = trie.group_depth();
    let witness = |nodes| BlockWitness {
        block,
        pre_root,
        group_depth,
        nodes,
        codes: codes.clone(),
    };
    Ok(Witnesses {
        multiproof: witness(WitnessNodes::Multiproof(multiproof)),
        blobs: witness(WitnessNodes::Blobs(blobs)),
        keys: keys.len(),
        stems: stems.len(),
        build_time: t.elapsed(),
    })
}

/// A state that is only a block witness: it runs the block the witness was made for, with no
/// database, and computes the post-state root (module docs).
///
/// Built by [`StatelessState::from_witness`], which proves the witness against its pre-state
/// root first: every value execution reads afterwards comes from a tree that hashes to it.
/// Reads of keys the witness does not prove, and writes to them, are errors naming the missing
/// path ([`WitnessError::Incomplete`], [`WitnessError::IncompleteLeaf`]); code is looked up by
/// its keccak-256, so a changed bytecode is simply not found (`CodeNotInWitness`, an
/// incomplete witness as a missing path is, not a state without that code). Everything is in
/// memory, so a plan needs no prefetch list; one that names a key or code the witness does
/// not hold is not an error (the list is a guess: a contract coinbase's code is listed and
/// never run), only a read execution makes of it ([`StateError::is_not_held`]).
#[derive(Debug)]
pub struct StatelessState {
    tree: PartialTree,
    codes: HashMap<B256, Bytes>,
    root: B256,
    block: u64,
}

impl StatelessState {
    /// The state before the witness's block: the witness's tree, checked against its pre-state
    /// root (a multiproof by hashing it; blobs by checking each against its parent as it is
    /// decoded), and its code by hash. A witness that does not hash to its pre-root, or whose
    /// blobs do not fit together, is refused.
    pub fn from_witness(witness: BlockWitness) -> Result<Self, StateError> {
        let root = witness.pre_root;
        let mut tree = match witness.nodes {
            WitnessNodes::Multiproof(t) => t,
            WitnessNodes::Blobs(blobs) => {
                PartialTree::from_blobs(root.0, witness.group_depth, blobs)
                    .map_err(StateError::Witness)?
            }
        };
        tree.verify(&root.0).map_err(StateError::Witness)?;
        let codes = witness
            .codes
            .into_iter()
            .map(|c| (keccak256(&c), c))
            .collect();
        Ok(StatelessState {
            tree,
            codes,
            root,
            block: witness.block.saturating_sub(1),
        })
    }

    /// A backend over this state as it is now (after a commit: the post-state, as far as the
    /// witness reaches), e.g. to read post values back.
    pub fn backend(&self) -> StatelessBackend<'_> {
        StatelessBackend(self)
    }

    fn after(&self, changes: &BlockChanges) -> Result<PartialTree, StateError> {
        let mut tree = self.tree.clone();
        tree.update(&changes.writes).map_err(StateError::Witness)?;
        Ok(tree)
    }
}

/// The backend of a [`StatelessState`]'s block databases.
#[derive(Clone, Copy, Debug)]
pub struct StatelessBackend<'a>(&'a StatelessState);

impl<'a> StateBackend for StatelessBackend<'a> {
    type Snapshot = StatelessBackend<'a>;

    fn snapshot(&self) -> Result<Self::Snapshot, StateError> {
        Ok(*self)
    }
}

impl StateSnapshot for StatelessBackend<'_> {
    fn stem(&self, stem: &Stem) -> Result<Option<bintrie_node::StemValues>, StateError> {
        self.0.tree.stem_values(stem).map_err(StateError::Witness)
    }

    /// A code the witness does not hold is an error naming the witness
    /// ([`StateError::CodeNotInWitness`]): the witness is incomplete (as for a stem it does not
    /// prove), which a missing entry of a store's code table would not say.
    fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateError> {
        match self.0.codes.get(hash) {
            Some(code) => Ok(Some(code.clone())),
            None => Err(StateError::CodeNotInWitness(*hash)),
        }
    }

    fn check_leaf(&self, key: &TreeKey) -> Result<(), StateError> {
        self.0.tree.check_leaf(key).map_err(StateError::Witness)
    }
}

impl BlockState for StatelessState {
    type Backend<'a> = StatelessBackend<'a>;

    fn root(&self) -> B256 {
        self.root
    }

    fn block(&self) -> u64 {
        self.block
    }

    fn block_db(
        &self,
        options: BlockDbOptions,
    ) -> Result<BlockDb<StatelessBackend<'_>>, StateError> {
        BlockDb::over(StatelessBackend(self), options)
    }

    /// Everything is in memory.
    fn trie_prefetcher(&self) -> Option<&dyn TriePrefetcher> {
        None
    }

    /// Applies the writes to the partial tree (atomically: a write the witness does not cover
    /// changes nothing) and computes the post-state root. Nothing is stored.
    fn commit_block(
        &mut self,
        changes: BlockChanges,
        block: u64,
    ) -> Result<CommitReport, StateError> {
        StateError::check_order(block, self.block)?;
        let t = Instant::now();
        self.tree
            .update(&changes.writes)
            .map_err(StateError::Witness)?;
        let root = B256::from(self.tree.root());
        self.root = root;
        self.block = block;
        for (hash, code) in changes.code {
            self.codes.insert(hash, Bytes::from(code));
        }
        Ok(CommitReport {
            root,
            trie_update: t.elapsed(),
            ..Default::default()
        })
    }

    fn root_with(&self, changes: &BlockChanges) -> Result<B256, StateError> {
        Ok(B256::from(self.after(changes)?.root()))
    }

    /// A witness holds only part of a tree: no witness is built from it.
    fn witness(
        &self,
        _block: u64,
        _keys: &[TreeKey],
        _codes: &[B256],
    ) -> Result<Witnesses, StateError> {
        Err(StateError::Witness(WitnessError::Malformed(
            "a stateless state builds no witnesses".into(),
        )))
    }
}
