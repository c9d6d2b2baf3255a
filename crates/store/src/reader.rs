//! Read transactions: the two read paths, counted.

use crate::MapKind;
use crate::{StateStore, StoreError, T_CODE, T_META, T_NODES, T_STEMS, map_err};
use bintrie_keys::Stem;
use bintrie_node::{
    GroupBlob, GroupEntry, MAX_DEPTH, NodeBlob, Path, Sha256Hasher, StemValues, ZERO_HASH,
};
use libmdbx::{RO, Table, Transaction};
use std::borrow::Cow;
use std::cell::Cell;

/// The most bytes any value of the nodes or stems table holds: a full group blob at group
/// depth 8 (tag, depth, a 32-byte bitmap, 256 3-bit depth offsets, 256 hashes), larger than a
/// full stem blob (tag, stem, bitmap, 256 values: 8,256) and a flat entry (8,224).
pub(crate) const MAX_BLOB_BYTES: usize = 1 + 1 + 32 + 96 + 256 * 32;

/// The most bytes a code entry may hold here: far above any contract (24 KB on mainnet, 48 KB
/// of init code), a bound on what a damaged length can make a read touch.
pub(crate) const MAX_CODE_BYTES: usize = 16 << 20;

/// The most bytes of any key of the four tables (a path key is at most 33).
const MAX_KEY_BYTES: usize = 64;

/// A value copied out of the map only once its length is at most `MAX` (else a decode error,
/// [`TooLong`], before a byte is read): MDBX hands a value out as its place in the map and its
/// stored length, and a length a flipped byte made huge would make the copy read past the
/// file's end (SIGBUS). Works in read-only and read-write transactions alike.
struct Bounded<const MAX: usize>(Vec<u8>);

/// Why a [`Bounded`] value was refused: its stored length.
#[derive(Debug)]
struct TooLong(usize);

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a stored length of {} bytes", self.0)
    }
}

impl std::error::Error for TooLong {}

impl<const MAX: usize> libmdbx::Decodable<'_> for Bounded<MAX> {
    fn decode(data: &[u8]) -> Result<Self, libmdbx::Error> {
        if data.len() > MAX {
            return Err(libmdbx::Error::DecodeError(Box::new(TooLong(data.len()))));
        }
        Ok(Bounded(data.to_vec()))
    }
}

/// The value at `key` in `table` (named `name`, one of the four), copied out only when its
/// stored length is one the table's entries can have: else [`StoreError::Corrupt`] naming the
/// table and key. Every read of a value out of MDBX goes through here or, borrowing, through
/// [`check_lengths`].
pub(crate) fn get_bounded<K: libmdbx::TransactionKind>(
    txn: &Transaction<'_, K, MapKind>,
    table: &Table<'_>,
    name: &str,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    let got = if most_for(name) == MAX_CODE_BYTES {
        txn.get::<Bounded<MAX_CODE_BYTES>>(table, key)
            .map(|v| v.map(|b| b.0))
    } else {
        txn.get::<Bounded<MAX_BLOB_BYTES>>(table, key)
            .map(|v| v.map(|b| b.0))
    };
    got.map_err(|e| match e {
        libmdbx::Error::DecodeError(e) => match e.downcast_ref::<TooLong>() {
            Some(TooLong(len)) => length_error(name, key.len(), Some(key), *len),
            None => map_err(libmdbx::Error::DecodeError(e)),
        },
        e => map_err(e),
    })
}

/// The most bytes a value of `table` may hold.
fn most_for(table: &str) -> usize {
    if table == T_CODE {
        MAX_CODE_BYTES
    } else {
        MAX_BLOB_BYTES
    }
}

/// Refuses an entry whose stored lengths no entry of `table` can have, before anything reads
/// its bytes: MDBX hands out a value as its place in the memory map and its stored length, so
/// a length a flipped byte made huge would read past the file's end and kill the process
/// (SIGBUS) instead of failing here. The error names the key when `key` is given (its bytes
/// are then safe to read).
pub(crate) fn check_lengths(
    table: &str,
    key_len: usize,
    key: Option<&[u8]>,
    value_len: usize,
) -> Result<(), StoreError> {
    if key_len <= MAX_KEY_BYTES && value_len <= most_for(table) {
        return Ok(());
    }
    Err(length_error(table, key_len, key, value_len))
}

/// [`check_lengths`]'s error for lengths it refuses.
fn length_error(table: &str, key_len: usize, key: Option<&[u8]>, value_len: usize) -> StoreError {
    let most = most_for(table);
    StoreError::Corrupt(format!(
        "table {table}: an entry{} of a {key_len}-byte key (at most {MAX_KEY_BYTES}) and a \
         {value_len}-byte value (at most {most}): its stored lengths are damaged",
        key.filter(|_| key_len <= MAX_KEY_BYTES)
            .map(|k| format!(" at {}", crate::hex(k)))
            .unwrap_or_default()
    ))
}

/// Which way a stem is found. Named `trie` and `flat` on command lines and in results files
/// (features `clap` and `serde`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ReadPath {
    /// From the root through the group blobs to the stem blob: one lookup per group crossed plus
    /// one for the stem (what geth measured; depends on the group depth).
    #[cfg_attr(feature = "serde", serde(rename = "trie"))]
    #[cfg_attr(feature = "clap", value(name = "trie"))]
    TrieWalk,
    /// One lookup in the flat stem table.
    #[default]
    #[cfg_attr(feature = "serde", serde(rename = "flat"))]
    #[cfg_attr(feature = "clap", value(name = "flat"))]
    Flat,
}

impl ReadPath {
    /// Both read paths, trie walk first.
    pub const ALL: [ReadPath; 2] = [ReadPath::TrieWalk, ReadPath::Flat];

    /// The name used on command lines and in results files: `trie` or `flat`.
    pub fn name(self) -> &'static str {
        match self {
            ReadPath::TrieWalk => "trie",
            ReadPath::Flat => "flat",
        }
    }

    /// The read path called `name` (`trie` or `flat`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Counters of one [`Reader`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Store lookups (MDBX gets).
    pub lookups: u64,
    /// Bytes returned by those lookups.
    pub bytes: u64,
}

/// One MDBX read transaction: a consistent snapshot of the last block committed before it
/// began. Not shared between threads: give each worker its own.
pub struct Reader<'db> {
    txn: Transaction<'db, RO, MapKind>,
    nodes: Table<'db>,
    stems: Table<'db>,
    code: Table<'db>,
    meta_t: Table<'db>,
    group_depth: u8,
    lookups: Cell<u64>,
    bytes: Cell<u64>,
}

impl<'db> Reader<'db> {
    pub(crate) fn new(store: &'db StateStore) -> Result<Self, StoreError> {
        // Table handles that live as long as the environment: opened in a short transaction
        // and rebound on its commit (MDBX keeps a DBI open for the environment's lifetime).
        const NAMES: [&str; 4] = [T_NODES, T_STEMS, T_CODE, T_META];
        let (dbis, rebound) = {
            let txn = store.inner.db.begin_ro_txn().map_err(map_err)?;
            let mut dbis = [0; 4];
            for (dbi, name) in dbis.iter_mut().zip(NAMES) {
                let table = txn.open_table(Some(name)).map_err(map_err)?;
                *dbi = table.dbi();
                txn.prime_for_permaopen(table);
            }
            (dbis, txn.commit_and_rebind_open_dbs().map_err(map_err)?.1)
        };
        // The rebound handles come back in no set order: match them by DBI number.
        let mut rebound: Vec<Option<Table<'db>>> = rebound.into_iter().map(Some).collect();
        let mut take = |i: usize| {
            rebound
                .iter_mut()
                .find(|t| t.as_ref().is_some_and(|t| t.dbi() == dbis[i]))
                .and_then(Option::take)
                .ok_or_else(|| StoreError::Corrupt(format!("table {} did not reopen", NAMES[i])))
        };
        let (nodes, stems, code, meta_t) = (take(0)?, take(1)?, take(2)?, take(3)?);
        let txn = store.inner.db.begin_ro_txn().map_err(map_err)?;
        Ok(Reader {
            txn,
            nodes,
            stems,
            code,
            meta_t,
            group_depth: store.meta().group_depth,
            lookups: Cell::new(0),
            bytes: Cell::new(0),
        })
    }

    /// The value at `key`, its length checked before it is copied out of the map
    /// ([`get_bounded`]).
    fn get(&self, table: &Table<'db>, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let v = get_bounded(&self.txn, table, self.name_of(table), key)?;
        self.lookups.set(self.lookups.get() + 1);
        if let Some(v) = &v {
            self.bytes.set(self.bytes.get() + v.len() as u64);
        }
        Ok(v)
    }

    /// The name of `table`, one of this reader's four.
    fn name_of(&self, table: &Table<'db>) -> &'static str {
        let dbi = table.dbi();
        if dbi == self.nodes.dbi() {
            T_NODES
        } else if dbi == self.stems.dbi() {
            T_STEMS
        } else if dbi == self.code.dbi() {
            T_CODE
        } else {
            T_META
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ReadStats {
        ReadStats {
            lookups: self.lookups.get(),
            bytes: self.bytes.get(),
        }
    }

    /// The meta value `key` (`root`, `block`) as `N` bytes; `None` when the database holds
    /// none (nothing was committed to it).
    fn meta_array<const N: usize>(&self, key: &str) -> Result<Option<[u8; N]>, StoreError> {
        get_bounded(&self.txn, &self.meta_t, T_META, key.as_bytes())?
            .map(|v| {
                v.try_into()
                    .map_err(|_| StoreError::Corrupt(format!("meta {key} is not {N} bytes")))
            })
            .transpose()
    }

    /// The root this snapshot holds.
    pub fn root(&self) -> Result<[u8; 32], StoreError> {
        self.meta_array("root")?
            .ok_or_else(|| StoreError::Corrupt("meta root missing".into()))
    }

    /// The block number this snapshot holds.
    pub fn block(&self) -> Result<u64, StoreError> {
        self.meta_array("block")?
            .map(u64::from_be_bytes)
            .ok_or_else(|| StoreError::Corrupt("meta block missing".into()))
    }

    /// The root this snapshot holds, the empty tree's for a database nothing was committed to.
    pub(crate) fn root_or_empty(&self) -> Result<[u8; 32], StoreError> {
        Ok(self.meta_array("root")?.unwrap_or(ZERO_HASH))
    }

    /// The block number this snapshot holds, 0 for a database nothing was committed to.
    pub(crate) fn block_or_zero(&self) -> Result<u64, StoreError> {
        Ok(self.meta_array("block")?.map_or(0, u64::from_be_bytes))
    }

    /// Number of entries in (nodes, stems, code) in this snapshot.
    pub fn counts(&self) -> Result<(u64, u64, u64), StoreError> {
        let n = |t: &Table<'db>| -> Result<u64, StoreError> {
            Ok(self.txn.table_stat(t).map_err(map_err)?.entries() as u64)
        };
        Ok((n(&self.nodes)?, n(&self.stems)?, n(&self.code)?))
    }

    /// The blob at a node path key.
    pub fn get_node(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(&self.nodes, key)
    }

    /// Bytecode by code hash.
    pub fn get_code(&self, hash: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(&self.code, hash)
    }

    /// The values of `stem`, by the chosen read path.
    pub fn get_stem(&self, stem: &Stem, path: ReadPath) -> Result<Option<StemValues>, StoreError> {
        match path {
            ReadPath::Flat => self.get_stem_flat(stem),
            ReadPath::TrieWalk => self.get_stem_walk(stem),
        }
    }

    /// One lookup in the flat stem table. Trusts the table: nothing is checked against the root
    /// (see [`Reader::get_stem_verified`]).
    pub fn get_stem_flat(&self, stem: &Stem) -> Result<Option<StemValues>, StoreError> {
        let Some(rest) = self.get(&self.stems, stem)? else {
            return Ok(None);
        };
        let values = StemValues::decode_values(&rest)
            .map_err(|e| StoreError::Corrupt(format!("flat stem: {e}")))?;
        Ok(Some(values))
    }

    /// From the root through the group blobs to the stem. Checks the blobs' structure, not
    /// their hashes (see [`Reader::get_stem_verified`]).
    pub fn get_stem_walk(&self, stem: &Stem) -> Result<Option<StemValues>, StoreError> {
        self.walk(stem, |_, _| {})
    }

    /// The trie walk, with every blob on the way re-hashed and checked against the hash its
    /// parent holds, from the snapshot's meta root down: the answer (a value, or the absence
    /// of the stem) is exactly what the root commits to, or [`StoreError::Corrupt`] naming the
    /// path of the first blob that does not match. Costs the hashes of each group crossed
    /// (at most `2^g - 1`) and of the stem's values on top of the walk.
    pub fn get_stem_verified(&self, stem: &Stem) -> Result<Option<StemValues>, StoreError> {
        let mut expected = self.root()?;
        if expected == ZERO_HASH {
            return Ok(None);
        }
        let g = self.group_depth;
        let mut depth = 0usize;
        let mut must_be_stem = false;
        loop {
            let key = Path::from_stem_prefix(stem, depth).to_key();
            let Some(blob) = self.get(&self.nodes, key.as_bytes())? else {
                return Err(StoreError::Corrupt(format!(
                    "missing node at depth {depth} on the path of stem {}",
                    crate::hex(stem)
                )));
            };
            let corrupt = |reason: String| {
                StoreError::Corrupt(format!(
                    "node at depth {depth} on the path of stem {}: {reason}",
                    crate::hex(stem)
                ))
            };
            match NodeBlob::decode(&blob).map_err(|e| corrupt(e.to_string()))? {
                NodeBlob::Stem(s, values) => {
                    if !Path::from_stem_prefix(stem, depth).is_prefix_of(&s) {
                        return Err(corrupt("the stem does not lie under its path".into()));
                    }
                    let (h, _) = values.stem_hash::<Sha256Hasher>(&s);
                    if h != expected {
                        return Err(corrupt(format!(
                            "the stem hashes to {} but its parent holds {}",
                            crate::hex(h),
                            crate::hex(expected)
                        )));
                    }
                    return Ok((s == *stem).then_some(values));
                }
                NodeBlob::Group(group) => {
                    if must_be_stem {
                        return Err(corrupt("a group where its parent holds a stem".into()));
                    }
                    let (h, _) = group.root_hash::<Sha256Hasher>();
                    if h != expected {
                        return Err(corrupt(format!(
                            "the group hashes to {} but its parent holds {}",
                            crate::hex(h),
                            crate::hex(expected)
                        )));
                    }
                    match self.step(&group, stem, depth, g).map_err(corrupt)? {
                        None => return Ok(None),
                        Some(e) => {
                            expected = e.hash;
                            must_be_stem = e.depth < g;
                            depth += e.depth as usize;
                        }
                    }
                }
            }
        }
    }

    /// The entry of `group` (at tree depth `depth`) on the path of `stem`, if any. Checks what a
    /// corrupt blob could get wrong: the blob's group depth, its position, and that the walk
    /// goes deeper without passing 248 levels (so a walk always ends).
    fn step(
        &self,
        group: &GroupBlob,
        stem: &Stem,
        depth: usize,
        g: u8,
    ) -> Result<Option<GroupEntry>, String> {
        if group.group_depth != g {
            return Err(format!(
                "a group blob of depth {} in a database of group depth {g}",
                group.group_depth
            ));
        }
        if !depth.is_multiple_of(g as usize) || depth >= MAX_DEPTH {
            return Err(format!("a group blob at depth {depth}"));
        }
        let g = g as usize;
        // The stem's g-bit index inside this group (bits past 248 are zero).
        let mut idx = 0usize;
        for i in 0..g {
            let d = depth + i;
            let bit = if d < MAX_DEPTH {
                (stem[d / 8] >> (7 - d % 8)) & 1
            } else {
                0
            };
            idx = (idx << 1) | bit as usize;
        }
        let hit = group.entries.iter().find(|e| {
            let start = e.index as usize;
            let d = e.depth as usize;
            d >= 1 && d <= g && idx >= start && idx < start + (1usize << (g - d))
        });
        match hit {
            Some(e) if depth + e.depth as usize > MAX_DEPTH => {
                Err(format!("an entry below depth {MAX_DEPTH}"))
            }
            Some(e) => Ok(Some(*e)),
            None => Ok(None),
        }
    }

    /// The raw flat-table entry of `stem` (bitmap and values), undecoded.
    pub(crate) fn get_flat_raw(&self, stem: &Stem) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(&self.stems, stem)
    }

    /// Calls `f(key, value)` for every entry of the table named `name`, in key order.
    pub(crate) fn for_each(
        &self,
        name: &str,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let table = match name {
            T_NODES => &self.nodes,
            T_STEMS => &self.stems,
            T_CODE => &self.code,
            _ => &self.meta_t,
        };
        let mut cursor = self.txn.cursor(table).map_err(map_err)?;
        for item in cursor.iter_start::<Cow<'_, [u8]>, Cow<'_, [u8]>>() {
            let (k, v) = item.map_err(map_err)?;
            // Borrowed from the map: checked before `f` reads a byte of them.
            check_lengths(name, k.len(), Some(&k), v.len())?;
            f(&k, &v)?;
        }
        Ok(())
    }

    /// True when a walk from the root along `target`'s bits arrives at exactly `target`: the
    /// blob stored there is part of the tree.
    pub(crate) fn reaches(&self, target: &Path) -> Result<bool, StoreError> {
        let g = self.group_depth as usize;
        let mut depth = 0usize;
        while depth < target.len() {
            let key = Path::from_stem_prefix(target.bits(), depth).to_key();
            let Some(blob) = self.get(&self.nodes, key.as_bytes())? else {
                return Ok(false);
            };
            let Ok(NodeBlob::Group(group)) = NodeBlob::decode(&blob) else {
                return Ok(false);
            };
            let left = target.len() - depth;
            let hit = group.entries.iter().find(|e| {
                let d = e.depth as usize;
                if d == 0 || d > g || d > left {
                    return false;
                }
                let bits = (0..d).fold(0u16, |acc, i| (acc << 1) | target.bit(depth + i) as u16);
                e.index >> (g - d) == bits
            });
            match hit {
                Some(e) => depth += e.depth as usize,
                None => return Ok(false),
            }
        }
        Ok(depth == target.len())
    }

    /// [`Reader::get_stem_walk`], showing `visit` every blob read on the way (path key, blob).
    pub(crate) fn walk(
        &self,
        stem: &Stem,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<Option<StemValues>, StoreError> {
        let g = self.group_depth;
        let mut depth = 0usize;
        loop {
            let key = Path::from_stem_prefix(stem, depth).to_key();
            let Some(blob) = self.get(&self.nodes, key.as_bytes())? else {
                return if depth == 0 {
                    Ok(None) // empty tree
                } else {
                    Err(StoreError::Corrupt(format!(
                        "missing node at depth {depth}"
                    )))
                };
            };
            visit(key.as_bytes(), &blob);
            let corrupt =
                |reason: String| StoreError::Corrupt(format!("node at depth {depth}: {reason}"));
            match NodeBlob::decode(&blob).map_err(|e| corrupt(e.to_string()))? {
                NodeBlob::Stem(s, values) => return Ok((s == *stem).then_some(values)),
                NodeBlob::Group(group) => {
                    match self.step(&group, stem, depth, g).map_err(corrupt)? {
                        None => return Ok(None),
                        // Every step goes at least one level deeper and never past 248: the walk ends.
                        Some(e) => depth += e.depth as usize,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound on a stored blob is the largest one the format makes (a full group at group
    /// depth 8), and a full stem blob is within it: no valid entry is refused.
    #[test]
    fn the_largest_blobs_are_within_the_bound() {
        let entries: Vec<GroupEntry> = (0..256u16)
            .map(|index| GroupEntry {
                index,
                depth: 8,
                hash: [7; 32],
            })
            .collect();
        let mut group = Vec::new();
        GroupBlob::encode(8, &entries, &mut group);
        assert_eq!(group.len(), MAX_BLOB_BYTES);
        let mut values = StemValues::new();
        for i in 0..=255u8 {
            values.set(i, [i; 32]);
        }
        let mut stem = Vec::new();
        values.encode_blob(&[3; 31], &mut stem);
        assert!(stem.len() <= MAX_BLOB_BYTES, "{}", stem.len());
        assert!(check_lengths(T_NODES, 33, None, MAX_BLOB_BYTES).is_ok());
        assert!(check_lengths(T_NODES, 33, None, MAX_BLOB_BYTES + 1).is_err());
        assert!(check_lengths(T_CODE, 32, None, 24_576).is_ok());
        assert!(check_lengths(T_STEMS, 65, None, 64).is_err());
    }
}
