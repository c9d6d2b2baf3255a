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

/// Reads the meta records in `txn`: `Ok(None)` when the database has none yet (a new one).
pub(crate) fn read_meta<K: libmdbx::TransactionKind>(
    txn: &libmdbx::Transaction<'_, K, MapKind>,
    mt: &libmdbx::Table<'_>,
) -> Result<Option<Meta>, StoreError> {
    let Some(g) = txn.get::<Vec<u8>>(mt, M_GROUP_DEPTH).map_err(map_err)? else {
        return Ok(None);
    };
    let get = |k: &[u8]| -> Result<Vec<u8>, StoreError> {
        txn.get::<Vec<u8>>(mt, k).map_err(map_err)?.ok_or_else(|| {
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
    Ok(Some(Meta {
        root,
        block: u64_be(&get(M_BLOCK)?, "block")?,
        group_depth: g,
        format: FORMAT_VERSION,
        page_size: u32::try_from(page_size)
            .map_err(|_| StoreError::Corrupt(format!("meta page size {page_size}")))?,
    }))
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
    Ok(())
}
