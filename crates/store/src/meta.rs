//! The meta table: root, block, group depth, format and page size of the committed state.

use crate::*;

/// The committed state's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Root of the last committed block (zero for an empty tree).
    pub root: Hash32,
    /// Number of the last committed block (0 before any).
    pub block: u64,
    /// Group depth the nodes are stored at.
    pub group_depth: u8,
    /// Format version.
    pub format: u32,
    /// MDBX page size in bytes.
    pub page_size: u32,
}

fn u64_be(bytes: &[u8], what: &str) -> Result<u64, StoreError> {
    let arr: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("meta {what}: {} bytes", bytes.len())))?;
    Ok(u64::from_be_bytes(arr))
}

/// The key of the meta records' check ([`meta_check`]).
const M_CHECK: &[u8] = b"check";

/// The meta records' check: the root it was written with (32 bytes), then a CRC-32 over the
/// records (root, block, group depth, format, page size, in that order). The block number is
/// hashed into nothing else, so a flipped bit in it would otherwise pass every check and the
/// next import would number its blocks from it. The root is kept beside the CRC so that a
/// check left stale by an older bintrie (which writes the records but not the check) is told
/// from damage: its root is another one. Not when an older bintrie committed a block that left
/// the root as it was (a block of no writes): that check is for the same root over other
/// records, which is what damage looks like, and every open of this version refuses the
/// database; only that older bintrie opens it.
fn meta_check(m: &Meta) -> Vec<u8> {
    let mut h = crc32fast::Hasher::new();
    h.update(&m.root);
    h.update(&m.block.to_be_bytes());
    h.update(&[m.group_depth]);
    h.update(&u64::from(m.format).to_be_bytes());
    h.update(&u64::from(m.page_size).to_be_bytes());
    [&m.root[..], &h.finalize().to_be_bytes()].concat()
}

/// Reads the meta records in `txn`: `Ok(None)` when the database has none yet (a new one).
pub(crate) fn read_meta<K: libmdbx::TransactionKind>(
    txn: &libmdbx::Transaction<'_, K, MapKind>,
    mt: &libmdbx::Table<'_>,
) -> Result<Option<Meta>, StoreError> {
    let read = |k: &[u8]| crate::reader::get_bounded(txn, mt, crate::T_META, k);
    let Some(g) = read(M_GROUP_DEPTH)? else {
        return Ok(None);
    };
    let get = |k: &[u8]| -> Result<Vec<u8>, StoreError> {
        read(k)?.ok_or_else(|| {
            StoreError::Corrupt(format!("meta {} missing", String::from_utf8_lossy(k)))
        })
    };
    let format = u64_be(&get(M_FORMAT)?, "format")?;
    if format != u64::from(FORMAT_VERSION) {
        return Err(StoreError::Format(
            u32::try_from(format).unwrap_or(u32::MAX),
        ));
    }
    let g = match g.as_slice() {
        [g] if (1..=8).contains(g) => *g,
        other => {
            return Err(StoreError::Corrupt(format!(
                "meta group depth {other:02x?} is not one byte in 1..8"
            )));
        }
    };
    let root: Hash32 = get(M_ROOT)?
        .try_into()
        .map_err(|_| StoreError::Corrupt("meta root is not 32 bytes".into()))?;
    let page_size = u64_be(&get(M_PAGE_SIZE)?, "page size")?;
    let meta = Meta {
        root,
        block: u64_be(&get(M_BLOCK)?, "block")?,
        group_depth: g,
        format: FORMAT_VERSION,
        page_size: u32::try_from(page_size)
            .map_err(|_| StoreError::Corrupt(format!("meta page size {page_size}")))?,
    };
    // Absent in a database last committed before the check existed; written for another root
    // when an older bintrie committed since. Either way the next commit writes it.
    if let Some(check) = read(M_CHECK)?
        && check.get(..32) == Some(&meta.root[..])
        && check != meta_check(&meta)
    {
        return Err(StoreError::Corrupt(format!(
            "the meta records (block {}, root {}, group depth {}) do not match their checksum: \
             one of them is damaged (or a bintrie from before 2026-12-06 committed a block that \
             left the root as it was)",
            meta.block,
            hex(meta.root),
            meta.group_depth
        )));
    }
    Ok(Some(meta))
}

pub(crate) fn put_meta(
    txn: &libmdbx::Transaction<'_, libmdbx::RW, MapKind>,
    mt: &libmdbx::Table<'_>,
    meta: &Meta,
) -> Result<(), StoreError> {
    let f = WriteFlags::UPSERT;
    txn.put(mt, M_ROOT, meta.root, f).map_err(map_err)?;
    txn.put(mt, M_BLOCK, meta.block.to_be_bytes(), f)
        .map_err(map_err)?;
    txn.put(mt, M_GROUP_DEPTH, [meta.group_depth], f)
        .map_err(map_err)?;
    txn.put(mt, M_FORMAT, (meta.format as u64).to_be_bytes(), f)
        .map_err(map_err)?;
    txn.put(mt, M_PAGE_SIZE, (meta.page_size as u64).to_be_bytes(), f)
        .map_err(map_err)?;
    txn.put(mt, M_CHECK, meta_check(meta), f).map_err(map_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `key` = `value` (or deletes `key`, for `None`) in the meta table of the database
    /// in `dir` behind the store's back, as damage would.
    fn poke(dir: &FsPath, key: &[u8], value: Option<&[u8]>) {
        let db = Database::<MapKind>::open_with_options(
            dir,
            DatabaseOptions {
                max_tables: Some(8),
                mode: Mode::ReadWrite(ReadWriteOptions::default()),
                ..Default::default()
            },
        )
        .unwrap();
        let txn = db.begin_rw_txn().unwrap();
        let mt = txn.open_table(Some(T_META)).unwrap();
        match value {
            Some(v) => txn.put(&mt, key, v, WriteFlags::UPSERT).unwrap(),
            None => txn.del(&mt, key, None).map(drop).unwrap(),
        }
        txn.commit().unwrap();
    }

    /// A block number changed behind the store's back (a flipped bit) is refused by every
    /// open, read-only too; a check left for another root (an older bintrie committed since)
    /// is not damage, and a database from before the checksum (none stored) still opens; the
    /// next commit stores a check.
    #[test]
    fn a_damaged_block_number_is_refused_and_a_database_without_a_checksum_opens() {
        let dir = tempfile::tempdir().unwrap();
        drop(StateStore::open(dir.path(), &StoreOptions::default()).unwrap());
        poke(dir.path(), M_BLOCK, Some(&7u64.to_be_bytes()));
        for err in [
            StateStore::open(dir.path(), &StoreOptions::default()).err(),
            StateStore::open_read_only(dir.path()).err(),
        ] {
            let err = err.expect("the damaged meta was accepted").to_string();
            assert!(
                err.contains("(block 7, root") && err.contains("do not match their checksum"),
                "{err}"
            );
        }
        // As an older bintrie leaves it after committing a block: the records moved on (another
        // root), the check did not. Not damage: it opens.
        poke(dir.path(), M_ROOT, Some(&[9u8; 32]));
        assert_eq!(
            StateStore::open_read_only(dir.path()).unwrap().meta().block,
            7
        );
        poke(dir.path(), M_ROOT, Some(&[0u8; 32]));
        assert!(StateStore::open_read_only(dir.path()).is_err());
        // As a database written before the checksum existed: opens at the block it says.
        poke(dir.path(), M_CHECK, None);
        let store = StateStore::open_read_only(dir.path()).unwrap();
        assert_eq!(store.meta().block, 7);
        drop(store);
        let txn_check = |dir: &FsPath| {
            let store = StateStore::open_read_only(dir).unwrap();
            let txn = store.inner.db.begin_ro_txn().unwrap();
            let mt = txn.open_table(Some(T_META)).unwrap();
            txn.get::<Vec<u8>>(&mt, M_CHECK).unwrap()
        };
        assert_eq!(txn_check(dir.path()), None);
        let mut store = StateStore::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut commit = bintrie_trie::CommitSet::default();
        commit.group_depth = store.meta().group_depth;
        bintrie_trie::NodeStore::apply(&mut store, &commit).unwrap();
        drop(store);
        assert!(txn_check(dir.path()).is_some());
        assert_eq!(
            StateStore::open_read_only(dir.path()).unwrap().meta().block,
            8
        );
    }
}
