//! Read transactions: the two read paths, counted.

use crate::MapKind;
use crate::{StateStore, StoreError, T_CODE, T_META, T_NODES, T_STEMS, map_err};
use bintrie_keys::Stem;
use bintrie_node::{GroupBlob, NodeBlob, Path, StemValues};
use libmdbx::{RO, Table, Transaction};
use std::cell::Cell;

/// Which way a stem is found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadPath {
    /// From the root through the group blobs to the stem blob: one lookup per group crossed plus
    /// one for the stem (what geth measured; depends on the group depth).
    TrieWalk,
    /// One lookup in the flat stem table.
    #[default]
    Flat,
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
        let txn = store.inner.db.begin_ro_txn().map_err(map_err)?;
        let open = |name| -> Result<Table<'db>, StoreError> {
            let t = txn.open_table(Some(name)).map_err(map_err)?;
            // SAFETY: a `Table` is a DBI number plus a lifetime marker tying it to the
            // transaction borrow. The reader keeps `txn` alive for as long as it holds the
            // tables and only ever uses them with that transaction, so widening the marker to
            // the environment's lifetime (to store both in one struct) is sound.
            Ok(unsafe { std::mem::transmute::<Table<'_>, Table<'db>>(t) })
        };
        let (nodes, stems, code, meta_t) =
            (open(T_NODES)?, open(T_STEMS)?, open(T_CODE)?, open(T_META)?);
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

    fn get(&self, table: &Table<'db>, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let v: Option<Vec<u8>> = self.txn.get(table, key).map_err(map_err)?;
        self.lookups.set(self.lookups.get() + 1);
        if let Some(v) = &v {
            self.bytes.set(self.bytes.get() + v.len() as u64);
        }
        Ok(v)
    }

    /// The counters so far.
    pub fn stats(&self) -> ReadStats {
        ReadStats {
            lookups: self.lookups.get(),
            bytes: self.bytes.get(),
        }
    }

    /// The root this snapshot holds.
    pub fn root(&self) -> Result<[u8; 32], StoreError> {
        let v: Option<[u8; 32]> = self.txn.get(&self.meta_t, b"root").map_err(map_err)?;
        v.ok_or_else(|| StoreError::Corrupt("meta root missing".into()))
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

    /// One lookup in the flat stem table.
    pub fn get_stem_flat(&self, stem: &Stem) -> Result<Option<StemValues>, StoreError> {
        let Some(rest) = self.get(&self.stems, stem)? else {
            return Ok(None);
        };
        let values = StemValues::decode_values(&rest)
            .map_err(|e| StoreError::Corrupt(format!("flat stem: {e}")))?;
        Ok(Some(values))
    }

    /// From the root through the group blobs to the stem.
    pub fn get_stem_walk(&self, stem: &Stem) -> Result<Option<StemValues>, StoreError> {
        self.walk(stem, |_, _| {})
    }

    /// [`Reader::get_stem_walk`], showing `visit` every blob read on the way (path key, blob).
    pub(crate) fn walk(
        &self,
        stem: &Stem,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<Option<StemValues>, StoreError> {
        let g = self.group_depth as usize;
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
            match NodeBlob::decode(&blob)
                .map_err(|e| StoreError::Corrupt(format!("node at depth {depth}: {e}")))?
            {
                NodeBlob::Stem(s, values) => return Ok((s == *stem).then_some(values)),
                NodeBlob::Group(GroupBlob { entries, .. }) => {
                    // The stem's g-bit index inside this group (bits past 248 are zero).
                    let mut idx = 0usize;
                    for i in 0..g {
                        let d = depth + i;
                        let bit = if d < 248 {
                            (stem[d / 8] >> (7 - d % 8)) & 1
                        } else {
                            0
                        };
                        idx = (idx << 1) | bit as usize;
                    }
                    let hit = entries.iter().find(|e| {
                        let start = e.index as usize;
                        idx >= start && idx < start + (1usize << (g - e.depth as usize))
                    });
                    match hit {
                        None => return Ok(None),
                        Some(e) => depth += e.depth as usize,
                    }
                }
            }
        }
    }
}
