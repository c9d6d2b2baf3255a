//! The write buffer: blocks committed to MDBX without an fsync, each journaled, and synced
//! many blocks at a time.
//!
//! ```text
//!  write_block ─ journal append (+ fdatasync when durable) ─ MDBX txn (no fsync)
//!  every N blocks or B bytes ─ flush: MDBX fsync (mdbx_env_sync), then the journal emptied
//! ```
//!
//! Why this shape (measured in docs/study/writes.md): a durable MDBX commit of one block
//! writes ~3,500 scattered 4 KB pages and waits for all of them (an fsync of random pages,
//! 100-160 ms at study scale); the journal append is one sequential write and one fdatasync.
//! Holding the blocks in memory and writing them to MDBX in one later transaction was tried
//! first: its flush must fault back every leaf page the blocks touch (on a node whose state
//! is larger than memory, or in the study, which evicts the cache before every block), which
//! cost more than it saved. Writing each block into MDBX while its pages are hot and
//! deferring only the sync keeps the reads where they are cheapest.
//!
//! Invariants:
//! - the journal holds, in order, every block committed since MDBX's last sync (each record
//!   naming the block it builds on), and perhaps older ones before them;
//! - a record is appended before its block's MDBX transaction; if the transaction fails the
//!   record is cut off again, so the journal never holds a block that was not committed;
//! - after a process crash MDBX holds every committed block (its unsynced commits are in the
//!   page cache); after a power loss MDBX rolls back to its last sync, never to a torn state,
//!   and the next writer's open replays the journal's blocks after it.

use crate::*;
use std::io::{Read, Seek, SeekFrom, Write};

/// When the write buffer is flushed to MDBX. A block is flushed with the buffer once the buffer
/// holds `max_blocks` blocks or `max_bytes` bytes of blobs, whichever comes first; the flush
/// runs at the start of the next commit (timed in that block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferOptions {
    /// Blocks held before a flush (at least 1).
    pub max_blocks: u64,
    /// Bytes of blobs, flat stems and code held before a flush.
    pub max_bytes: usize,
}

impl Default for BufferOptions {
    /// 8 blocks or 256 MiB (geth's dirty-node buffer is 64-256 MB; reth persists every ~7
    /// blocks).
    fn default() -> Self {
        BufferOptions {
            max_blocks: 8,
            max_bytes: 256 << 20,
        }
    }
}

/// What a buffered writer has committed since its last sync.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pending {
    /// MDBX's meta at the last sync (what a power loss rolls back to before the replay).
    pub(crate) synced: Option<Meta>,
    /// Blocks committed since.
    pub(crate) blocks: u64,
    /// Bytes of blobs and code committed since.
    pub(crate) bytes: usize,
}

/// One committed block as the journal holds it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    /// The block and root it builds on.
    pub(crate) base: (u64, Hash32),
    /// The block's meta.
    pub(crate) meta: Meta,
    pub(crate) removed: Vec<PathKey>,
    pub(crate) nodes: Vec<(PathKey, Vec<u8>)>,
    pub(crate) code: Vec<(Hash32, Vec<u8>)>,
}

const MAGIC: [u8; 4] = *b"BTJ1";
const HEADER: usize = 12;
/// A journal larger than this is refused before it is read (a buffer flushes long before).
const MAX_JOURNAL: u64 = 1 << 34;
/// The journal file, beside `mdbx.dat`.
pub(crate) const JOURNAL: &str = "journal";

impl Record {
    /// The record as [`encode`] writes it (for tests: commits encode from their parts).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        encode(
            self.base,
            self.meta,
            &self.removed,
            self.nodes.iter().map(|(k, b)| (k, &b[..])),
            &self.code,
            0,
        )
    }

    /// Decodes the payload of a record whose checksum matched; `meta` supplies the fields the
    /// journal does not repeat (group depth, format, page size).
    fn decode(p: &[u8], meta: Meta) -> Option<Record> {
        let mut r = Cursor(p);
        let base = (r.u64()?, r.hash()?);
        let block = r.u64()?;
        let root = r.hash()?;
        let removed = (0..r.u32()?)
            .map(|_| valid_key(r.bytes8()?))
            .collect::<Option<Vec<_>>>()?;
        let nodes = (0..r.u32()?)
            .map(|_| {
                let key = valid_key(r.bytes8()?)?;
                let len = r.u32()? as usize;
                Some((key, r.take(len)?.to_vec()))
            })
            .collect::<Option<Vec<_>>>()?;
        let code = (0..r.u32()?)
            .map(|_| {
                let hash = r.hash()?;
                let len = r.u32()? as usize;
                Some((hash, r.take(len)?.to_vec()))
            })
            .collect::<Option<Vec<_>>>()?;
        r.0.is_empty().then_some(Record {
            base,
            meta: Meta {
                block,
                root,
                ..meta
            },
            removed,
            nodes,
            code,
        })
    }
}

/// A node key as [`bintrie_node::Path::to_key`] writes it, or `None`.
fn valid_key(b: &[u8]) -> Option<PathKey> {
    bintrie_node::Path::from_key(b).ok().map(|p| p.to_key())
}

/// One block's journal record, encoded straight from its parts (no [`Record`] copy of the
/// blobs): header (magic, payload length u32 LE, CRC-32 of the payload), then the payload.
/// `blob_bytes` sizes the buffer (the blobs' total; 0 if unknown).
pub(crate) fn encode<'a>(
    base: (u64, Hash32),
    meta: Meta,
    removed: &[PathKey],
    nodes: impl ExactSizeIterator<Item = (&'a PathKey, &'a [u8])>,
    code: &[(Hash32, Vec<u8>)],
    blob_bytes: usize,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(HEADER + 128 + blob_bytes + nodes.len() * 40);
    p.extend_from_slice(&MAGIC);
    p.extend_from_slice(&[0; 8]); // length and CRC, filled in below
    p.extend_from_slice(&base.0.to_le_bytes());
    p.extend_from_slice(&base.1);
    p.extend_from_slice(&meta.block.to_le_bytes());
    p.extend_from_slice(&meta.root);
    p.extend_from_slice(&(removed.len() as u32).to_le_bytes());
    for key in removed {
        put_bytes8(&mut p, key.as_bytes());
    }
    p.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    for (key, blob) in nodes {
        put_bytes8(&mut p, key.as_bytes());
        p.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        p.extend_from_slice(blob);
    }
    p.extend_from_slice(&(code.len() as u32).to_le_bytes());
    for (hash, bytecode) in code {
        p.extend_from_slice(hash);
        p.extend_from_slice(&(bytecode.len() as u32).to_le_bytes());
        p.extend_from_slice(bytecode);
    }
    let len = (p.len() - HEADER) as u32;
    let crc = crc32fast::hash(&p[HEADER..]);
    p[4..8].copy_from_slice(&len.to_le_bytes());
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

fn put_bytes8(p: &mut Vec<u8>, b: &[u8]) {
    p.push(b.len() as u8);
    p.extend_from_slice(b);
}

/// Reads little-endian fields off a slice; `None` past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn hash(&mut self) -> Option<Hash32> {
        self.take(32)?.try_into().ok()
    }
    fn bytes8(&mut self) -> Option<&'a [u8]> {
        let n = *self.take(1)?.first()? as usize;
        self.take(n)
    }
}

/// The records of a journal that chain from `flushed`, in order. Records before the chain (a
/// journal not yet emptied after its flush) are skipped; a torn last record (a commit that
/// never returned) is ignored; a damaged record with more after it, or a record that breaks
/// the chain, is [`StoreError::Corrupt`].
pub(crate) fn replay(bytes: &[u8], flushed: Meta) -> Result<Vec<Record>, StoreError> {
    let mut at = 0usize;
    let mut out: Vec<Record> = Vec::new();
    let mut tip = (flushed.block, flushed.root);
    let corrupt = |at: usize, what: &str| {
        StoreError::Corrupt(format!(
            "the write journal is damaged at byte {at} ({what}); the blocks after the last \
             flush cannot be recovered: move the `{JOURNAL}` file away to open the database at \
             block {} (its last flush)",
            flushed.block
        ))
    };
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < HEADER {
            tracing::warn!(
                at,
                "the write journal ends in a torn record (a commit that never returned): ignored"
            );
            break;
        }
        if rest[..4] != MAGIC {
            return Err(corrupt(at, "no record header"));
        }
        let len = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes"));
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            tracing::warn!(
                at,
                "the write journal ends in a torn record (a commit that never returned): ignored"
            );
            break;
        };
        let last = HEADER + len == rest.len();
        if crc32fast::hash(payload) != crc {
            if last {
                tracing::warn!(
                    at,
                    "the write journal's last record does not check (a commit that never returned): ignored"
                );
                break;
            }
            return Err(corrupt(at, "checksum mismatch"));
        }
        let rec =
            Record::decode(payload, flushed).ok_or_else(|| corrupt(at, "malformed record"))?;
        at += HEADER + len;
        if rec.base == tip {
            tip = (rec.meta.block, rec.meta.root);
            out.push(rec);
        } else if !out.is_empty() {
            return Err(corrupt(
                at,
                "a record that does not build on the one before",
            ));
        }
        // Else: a record from before the last flush (the journal was not emptied yet).
    }
    Ok(out)
}

/// Refuses a journal at `path` of `size` bytes larger than any buffer writes, before it is
/// read into memory.
fn check_size(path: &FsPath, size: u64) -> Result<(), StoreError> {
    if size > MAX_JOURNAL {
        return Err(StoreError::Corrupt(format!(
            "the write journal {} holds {size} bytes, more than any buffer writes \
             ({MAX_JOURNAL}): not a journal of this database; move it away",
            path.display()
        )));
    }
    Ok(())
}

/// `e`, naming the file it happened on (a full disk stays a full disk).
fn with_path(e: std::io::Error, path: &FsPath) -> StoreError {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        return StoreError::DiskFull;
    }
    StoreError::Io(std::io::Error::new(
        e.kind(),
        format!("the write journal {}: {e}", path.display()),
    ))
}

/// The open journal of a writer, locked against other buffered writers.
#[derive(Debug)]
pub(crate) struct Journal {
    file: std::fs::File,
    len: u64,
    sync: bool,
    /// Set when a failed append could not be taken back: later appends would be unreachable.
    broken: bool,
}

impl Journal {
    /// Opens (creating) the journal in `dir` and locks it: exclusively for a buffered writer,
    /// shared for an unbuffered one, so that a buffered writer never shares a database with
    /// another writer. Returns it with its current contents.
    pub(crate) fn open(
        dir: &FsPath,
        exclusive: bool,
        sync: bool,
    ) -> Result<(Journal, Vec<u8>), StoreError> {
        let path = dir.join(JOURNAL);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| with_path(e, &path))?;
        let locked = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match locked {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked(dir.to_path_buf()));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::debug!(error = %e, "journal opened without a lock");
            }
        }
        let size = file.metadata().map_err(|e| with_path(e, &path))?.len();
        check_size(&path, size)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| with_path(e, &path))?;
        Ok((
            Journal {
                file,
                len: bytes.len() as u64,
                sync,
                broken: false,
            },
            bytes,
        ))
    }

    /// Appends one record (fdatasync'd when the journal syncs). On an error the journal is cut
    /// back to its previous length, as if the append never happened.
    pub(crate) fn append(&mut self, record: &[u8]) -> Result<(), StoreError> {
        if self.broken {
            return Err(StoreError::Corrupt(
                "the write journal could not be repaired after a failed append; reopen the \
                 database"
                    .into(),
            ));
        }
        let written = (|| {
            self.file.seek(SeekFrom::Start(self.len))?;
            self.file.write_all(record)?;
            if self.sync {
                self.file.sync_data()?;
            }
            Ok::<(), std::io::Error>(())
        })();
        match written {
            Ok(()) => {
                self.len += record.len() as u64;
                Ok(())
            }
            Err(e) => {
                if self.file.set_len(self.len).is_err() {
                    self.broken = true;
                }
                Err(e.into())
            }
        }
    }

    /// Takes back the last append (its block's transaction failed): the journal is cut back to
    /// `len`, its length before. If even that fails, later appends are refused.
    pub(crate) fn cut(&mut self, len: u64) {
        match self.file.set_len(len) {
            Ok(()) => self.len = len,
            Err(e) => {
                tracing::error!(error = %e, "the write journal could not be cut back");
                self.broken = true;
            }
        }
    }

    /// Bytes in the journal.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Empties the journal after a flush.
    pub(crate) fn clear(&mut self) -> Result<(), StoreError> {
        self.file.set_len(0)?;
        self.len = 0;
        self.broken = false;
        Ok(())
    }
}

/// The blocks past `flushed` (MDBX's last sync) that the journal of `dir` holds, read as a
/// writer's open replays them ([`replay`]): empty without a journal; the damage for which a
/// writer would refuse it ([`StoreError::Corrupt`]) otherwise, a journal larger than any
/// buffer writes (never read into memory) or unreadable included.
pub(crate) fn blocks_past(dir: &FsPath, flushed: Meta) -> Result<Vec<u64>, StoreError> {
    let path = dir.join(JOURNAL);
    let size = match std::fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(with_path(e, &path)),
    };
    check_size(&path, size)?;
    let bytes = std::fs::read(&path).map_err(|e| with_path(e, &path))?;
    Ok(replay(&bytes, flushed)?
        .iter()
        .map(|r| r.meta.block)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(block: u64, root: u8) -> Meta {
        Meta {
            root: [root; 32],
            block,
            group_depth: 5,
            format: FORMAT_VERSION,
            page_size: 4096,
        }
    }

    fn record(base: Meta, next: Meta, n: u8) -> Record {
        let key = bintrie_node::Path::from_stem_prefix(&[n; 31], 8).to_key();
        Record {
            base: (base.block, base.root),
            meta: next,
            removed: vec![bintrie_node::Path::from_stem_prefix(&[n; 31], 3).to_key()],
            nodes: vec![(key, vec![n; 70])],
            code: vec![([n; 32], vec![1, 2, 3])],
        }
    }

    fn journal(records: &[Record]) -> Vec<u8> {
        records.iter().flat_map(Record::encode).collect()
    }

    #[test]
    fn records_round_trip_and_chain_from_the_flushed_block() {
        let (m0, m1, m2, m3) = (meta(0, 0), meta(1, 1), meta(2, 2), meta(3, 3));
        let recs = [record(m0, m1, 1), record(m1, m2, 2), record(m2, m3, 3)];
        let bytes = journal(&recs);
        assert_eq!(replay(&bytes, m0).unwrap(), recs);
        // Flushed at block 2 but the journal not yet emptied: only block 3 replays.
        assert_eq!(replay(&bytes, m2).unwrap(), recs[2..]);
        // Flushed at block 3: nothing.
        assert!(replay(&bytes, m3).unwrap().is_empty());
        // A journal from another history: nothing chains.
        assert!(replay(&bytes, meta(1, 9)).unwrap().is_empty());
    }

    #[test]
    fn a_torn_tail_is_ignored_and_damage_before_it_is_an_error() {
        let (m0, m1, m2) = (meta(0, 0), meta(1, 1), meta(2, 2));
        let recs = [record(m0, m1, 1), record(m1, m2, 2)];
        let bytes = journal(&recs);
        for cut in [
            bytes.len() - 1,
            bytes.len() - 50,
            recs[0].encode().len() + 5,
        ] {
            assert_eq!(
                replay(&bytes[..cut], m0).unwrap(),
                recs[..1],
                "cut at {cut}"
            );
        }
        // A flipped byte in the last record: a commit that never returned.
        let mut last = bytes.clone();
        *last.last_mut().unwrap() ^= 1;
        assert_eq!(replay(&last, m0).unwrap(), recs[..1]);
        // A flipped byte in the first record with another after it: damage, refused.
        let mut first = bytes.clone();
        first[HEADER + 3] ^= 1;
        let err = replay(&first, m0).unwrap_err().to_string();
        assert!(err.contains("journal is damaged"), "{err}");
        // A broken chain after a good start.
        let bad = journal(&[record(m0, m1, 1), record(m2, meta(3, 3), 3)]);
        assert!(replay(&bad, m0).is_err());
    }
}
