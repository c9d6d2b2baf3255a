//! Rebuilding the index at open: every segment read once, front to back.

use crate::readahead::{PIECE, ReadAhead};
use crate::record::{self, CommitRecord, HEADER, Kind, Parsed};
use crate::{Change, Index, Loc, LogError, Meta, io_err, segment_name, stem_of_blob};
use bintrie_node::PathKey;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};

/// The segment files of `dir` (`log.NNNNNN`), by number; empty when the directory is missing.
pub(crate) fn segment_files(dir: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some(n) = segment_number(&entry.file_name()) {
            out.push((n, entry.path()));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The number of a segment file's name (`log.NNNNNN`), `None` for any other name.
pub(crate) fn segment_number(name: &std::ffi::OsStr) -> Option<u32> {
    name.to_str()
        .and_then(|n| n.strip_prefix("log."))
        .filter(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u32>().ok())
}

/// Whether `path` names a segment file (`…/log.NNNNNN`).
pub(crate) fn is_segment_name(path: &Path) -> bool {
    path.file_name().and_then(segment_number).is_some()
}

/// The index at the last whole block, and where the writer continues in the last segment.
pub(crate) struct Scanned {
    pub(crate) index: Index,
    pub(crate) end: u64,
}

/// Committed blocks' changes waiting for the index's tables, beside the one being applied and
/// the one the scan is reading: a bound on the memory they hold (a bulk load's block is up to
/// about 500k changes, about 45 MB).
const APPLY_QUEUE: usize = 2;

/// Scans `files` in order, into an index whose tables start with room for `sizes` when given
/// ([`crate::sizes`]). A torn tail of the last segment is cut off when `writing` (ignored
/// otherwise); damage anywhere else, or followed by a valid commit, is an error. So is a log
/// (of `dir`) that ends before block `held`, the block its index-sizes file says was synced:
/// refused before any cut ([`crate::sizes::lost_blocks`]).
///
/// Segments are numbered from 1; one may be missing only where a committed drop record names
/// it (a compaction removed it), any other gap is an error (a lost file would otherwise drop
/// its records silently).
///
/// Reading, checking and putting the records into the index's tables run side by side: a
/// thread reads the segments ahead ([`ReadAhead`]), this one parses and checks the records,
/// and each committed block's changes go, in order, to a thread that applies them (at most
/// [`APPLY_QUEUE`] blocks waiting). The tables take a block's changes only once its commit
/// record is read, as before.
pub(crate) fn scan(
    files: &[(u32, PathBuf)],
    writing: bool,
    sizes: Option<crate::sizes::Sizes>,
    held: u64,
    dir: &Path,
) -> Result<Scanned, LogError> {
    let tables = sizes.map_or_else(Index::default, Index::with_sizes);
    let (apply, blocks) = sync_channel::<Vec<Change>>(APPLY_QUEUE);
    std::thread::scope(|s| {
        let applier = std::thread::Builder::new()
            .name("log-index".into())
            .spawn_scoped(s, move || {
                let mut tables = tables;
                for changes in blocks {
                    tables.apply(changes);
                }
                tables
            })
            .map_err(|error| LogError::Io {
                path: dir.to_path_buf(),
                error: std::io::Error::new(
                    error.kind(),
                    format!("could not start the thread that rebuilds the index: {error}"),
                ),
            })?;
        // `apply` is dropped when the scan returns, which ends the applier's loop.
        let scanned = scan_files(files, writing, held, dir, apply);
        let mut index = applier
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (found, end) = scanned?;
        index.meta = found.meta;
        index.dropped = found.dropped;
        index.log_bytes = found.log_bytes;
        Ok(Scanned { index, end })
    })
}

/// What the scan keeps itself of the committed blocks it read, beside the changes it hands to
/// the index's tables.
#[derive(Default)]
struct Committed {
    /// The last commit's block, root and group depth ([`Index::meta`]).
    meta: Option<Meta>,
    /// Segments the drop records name ([`Index::dropped`]).
    dropped: BTreeSet<u32>,
    /// Bytes of all segments up to the last commit ([`Index::log_bytes`]).
    log_bytes: u64,
}

/// [`scan`]'s reading: every committed block's changes sent to `apply`, in order.
fn scan_files(
    files: &[(u32, PathBuf)],
    writing: bool,
    held: u64,
    dir: &Path,
    apply: SyncSender<Vec<Change>>,
) -> Result<(Committed, u64), LogError> {
    let check_held = |index: &Committed| {
        let found = index.meta.map_or(0, |m| m.block);
        if found < held {
            Err(crate::sizes::lost_blocks(dir, found, held))
        } else {
            Ok(())
        }
    };
    // Numbered from 1 (read handles are kept by number - 1): a `log.000000` is no segment
    // this code made, and nothing is read or cut before it is refused.
    if let Some((_, path)) = files.iter().find(|(n, _)| *n == 0) {
        return Err(LogError::Corrupt(format!(
            "{} is not a segment of a log: segments are numbered from {}",
            path.display(),
            segment_name(1)
        )));
    }
    // Refused before any is read: a device or FIFO would never end (`/dev/zero`) or block
    // the reading thread in its open, and a directory is no segment either.
    for (_, path) in files {
        let meta = std::fs::metadata(path).map_err(io_err(path))?;
        if !meta.is_file() {
            return Err(LogError::Corrupt(format!(
                "{} is not a regular file, and every segment of a log is one",
                path.display()
            )));
        }
    }
    let mut index = Committed::default();
    let mut building = false;
    let mut end = 0;
    let ahead = ReadAhead::start(files.iter().map(|(_, path)| path.clone()).collect()).map_err(
        |error| LogError::Io {
            path: dir.to_path_buf(),
            error: std::io::Error::new(
                error.kind(),
                format!("could not start the thread that reads the segments: {error}"),
            ),
        },
    )?;
    let mut reader = Reader {
        ahead,
        buf: Vec::with_capacity(2 * PIECE),
    };
    for (i, (n, path)) in files.iter().enumerate() {
        let last = i + 1 == files.len();
        let seg = Segment::scan(*n, path, i, &mut reader, &mut index, &apply, &mut building)?;
        if let Some(damage) = seg.damage {
            // A log this code made holds a commit record from its creation on (the empty
            // state's), so a log without one is either one whose creation was cut short (at
            // most that record's bytes) or not a state log at all: that one is refused, never
            // cut to nothing.
            if index.meta.is_none() && !torn_creation(path)? {
                return Err(LogError::Corrupt(format!(
                    "{} holds {} bytes but no commit record it can read: not a state log, or \
                     one damaged before its first commit (at byte {}: {}); nothing was changed",
                    path.display(),
                    seg.len,
                    damage.at,
                    damage.why
                )));
            }
            #[cfg(test)]
            crate::tests::after_torn_scan(path);
            // A writer beside a read-only open appends to the last segment as it is read: where
            // the scan ran out of bytes, a commit record past what it read is the block it saw
            // in flight, not damage, so only the bytes it read count. Any other damage (and
            // any damage a writer meets: it holds the lock) is checked against the whole file.
            let to = if !writing && damage.at_eof {
                seg.seen
            } else {
                u64::MAX
            };
            let later = later_commit(path, damage.at, to).map_err(io_err(path))?;
            if !last || later.is_some() {
                return Err(LogError::Corrupt(format!(
                    "{} at offset {}: {}{}",
                    path.display(),
                    damage.at,
                    damage.why,
                    later.map_or(String::new(), |m| format!(
                        ", yet a committed block follows at offset {m}"
                    ))
                )));
            }
            // What the cut would leave must hold the synced block, or nothing is cut.
            check_held(&index)?;
            tracing::warn!(
                segment = %path.display(),
                kept = seg.good_end,
                dropped = seg.seen - seg.good_end,
                why = damage.why,
                "{}",
                if writing {
                    "the log's last block is torn (a crash mid-write): cut back to the last \
                     whole block"
                } else {
                    "the log's last block is incomplete (a writer beside this reader is \
                     appending it, or a crash tore it): read up to the last whole block"
                }
            );
            if writing {
                crate::cut_file(path, seg.good_end)?;
            }
        }
        end = seg.good_end;
    }
    let mut next = 1u32;
    for (n, path) in files {
        if let Some(gap) = (next..*n).find(|m| !index.dropped.contains(m)) {
            return Err(LogError::Corrupt(format!(
                "segment {} is missing before {} (no compaction dropped it)",
                segment_name(gap),
                path.display()
            )));
        }
        next = n + 1;
    }
    if let Some((n, path)) = files.last()
        && index.dropped.contains(n)
    {
        return Err(LogError::Corrupt(format!(
            "{} is the last segment, yet a drop record names it",
            path.display()
        )));
    }
    if building {
        return Err(LogError::Building);
    }
    check_held(&index)?;
    Ok((index, end))
}

/// The segments' bytes ([`ReadAhead`]) and the buffer a segment's records are parsed from,
/// both kept from one segment to the next.
struct Reader {
    ahead: ReadAhead,
    buf: Vec<u8>,
}

struct Damage {
    at: u64,
    why: &'static str,
    /// The bytes ran out at the end of the file (a block or record cut short there): all a
    /// writer appending beside a read-only scan can show it. Any other damage is in bytes
    /// that were there to read.
    at_eof: bool,
}

struct Segment {
    len: u64,
    /// The end of the bytes the scan read (past `len` when a writer appended meanwhile).
    seen: u64,
    good_end: u64,
    damage: Option<Damage>,
}

impl Segment {
    fn scan(
        n: u32,
        path: &Path,
        file: usize,
        reader: &mut Reader,
        index: &mut Committed,
        apply: &SyncSender<Vec<Change>>,
        building: &mut bool,
    ) -> Result<Segment, LogError> {
        let len = std::fs::metadata(path).map_err(io_err(path))?.len();
        let Reader { ahead, buf } = reader;
        buf.clear();
        let mut buf_pos = 0u64; // file offset of buf[0]
        let mut i = 0usize; // cursor in buf
        let mut eof = false;
        let mut good_end = 0u64;
        let mut body = crc32fast::Hasher::new();
        let mut count = 0u32;
        let mut pending: Vec<Change> = Vec::new();
        let mut drops: Vec<u32> = Vec::new();
        let damage = loop {
            let pos = buf_pos + i as u64;
            let parsed = record::parse(&buf[i..], pos);
            let (rec, rec_len) = match parsed {
                Parsed::Record(r, l) => (r, l),
                Parsed::Skip(k) => {
                    body.update(&buf[i..i + k]);
                    i += k;
                    continue;
                }
                Parsed::Short(need) => {
                    if eof {
                        if i == buf.len() && count == 0 && pos == good_end {
                            break None;
                        }
                        break Some(Damage {
                            at: pos,
                            why: if i == buf.len() {
                                "a block without its commit record"
                            } else {
                                "a record cut short"
                            },
                            at_eof: true,
                        });
                    }
                    buf.drain(..i);
                    buf_pos += i as u64;
                    i = 0;
                    // At least one piece, and as many as the record needs.
                    loop {
                        if !ahead.append_next(file, buf).map_err(io_err(path))? {
                            eof = true;
                            break;
                        }
                        if buf.len() >= need {
                            break;
                        }
                    }
                    continue;
                }
                Parsed::Bad(why) => {
                    break Some(Damage {
                        at: pos,
                        why,
                        at_eof: false,
                    });
                }
            };
            let key_ok = match rec.kind {
                Kind::Node | Kind::Remove => PathKey::from_bytes(rec.key).is_some(),
                Kind::Code => rec.key.len() == 32,
                Kind::Pad | Kind::Commit | Kind::Drop => rec.key.is_empty(),
            };
            if !key_ok {
                break Some(Damage {
                    at: pos,
                    why: "a record key of the wrong size",
                    at_eof: false,
                });
            }
            let bytes = &buf[i..i + rec_len];
            let Some(loc) = Loc::new(n, pos, rec_len) else {
                break Some(Damage {
                    at: pos,
                    why: "a record past the addressable size",
                    at_eof: false,
                });
            };
            match rec.kind {
                Kind::Commit => {
                    let c = CommitRecord::decode(rec.value).expect("checked by parse");
                    let body_crc = std::mem::take(&mut body).finalize();
                    if c.records != count || c.body_crc != body_crc || c.body_start != good_end {
                        break Some(Damage {
                            at: pos,
                            why: "a commit record that does not match its block",
                            at_eof: false,
                        });
                    }
                    if let Some(m) = index.meta
                        && m.group_depth != c.group_depth
                    {
                        break Some(Damage {
                            at: pos,
                            why: "a commit at another group depth",
                            at_eof: false,
                        });
                    }
                    if !(1..=8).contains(&c.group_depth) {
                        break Some(Damage {
                            at: pos,
                            why: "a commit with a group depth outside 1..8",
                            at_eof: false,
                        });
                    }
                    if apply.send(std::mem::take(&mut pending)).is_err() {
                        // The applier stopped: only a panic does, which `scan` raises again.
                        return Err(LogError::Corrupt(
                            "the thread rebuilding the index stopped".into(),
                        ));
                    }
                    index.dropped.extend(drops.drain(..));
                    index.log_bytes += pos + rec_len as u64 - good_end;
                    *building = c.building;
                    if !c.building {
                        index.meta = Some(Meta {
                            root: c.root,
                            block: c.block,
                            group_depth: c.group_depth,
                        });
                    } else if index.meta.is_none() {
                        index.meta = Some(Meta {
                            root: bintrie_node::ZERO_HASH,
                            block: 0,
                            group_depth: c.group_depth,
                        });
                    }
                    count = 0;
                    good_end = pos + rec_len as u64;
                }
                kind => {
                    body.update(bytes);
                    let key = PathKey::from_bytes(rec.key);
                    match kind {
                        Kind::Node => {
                            count += 1;
                            pending.push(Change::Node(
                                key.expect("checked"),
                                loc,
                                rec_len,
                                stem_of_blob(rec.value),
                            ));
                        }
                        Kind::Remove => {
                            count += 1;
                            pending.push(Change::Remove(key.expect("checked")));
                        }
                        Kind::Code => {
                            count += 1;
                            pending.push(Change::Code(
                                rec.key.try_into().expect("checked"),
                                loc,
                                rec_len,
                            ));
                        }
                        Kind::Drop => {
                            count += 1;
                            drops.extend(record::dropped(rec.value));
                        }
                        Kind::Pad | Kind::Commit => {}
                    }
                }
            }
            i += rec_len;
        };
        Ok(Segment {
            len,
            seen: buf_pos + buf.len() as u64,
            good_end,
            damage,
        })
    }
}

/// The offset of a valid commit record in `[from, to)` of the segment at `path`, if any: tells
/// damage inside committed blocks (refused) from a torn last block (cut).
fn later_commit(path: &Path, from: u64, to: u64) -> std::io::Result<Option<u64>> {
    use std::io::Seek;
    // Read in pieces, so that damage early in a large segment (or a segment grown sparse to
    // many GiB) costs a piece of memory, not the segment's rest. (Small in tests, so that
    // records straddle the pieces.)
    const CHUNK: usize = if cfg!(test) { 1 << 10 } else { 4 << 20 };
    // A commit record's bytes: the magic starts its value, `HEADER` bytes in.
    const WHOLE: usize = HEADER + record::COMMIT_LEN;
    let mut file = std::fs::File::open(path)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut rest = file.take(to.saturating_sub(from));
    let magic = CommitRecord::magic();
    let mut buf = Vec::new();
    let mut base = from; // the offset of buf[0]
    let mut at = 1usize; // where in buf the next magic may start (not at the damage itself)
    loop {
        let got = (&mut rest).take(CHUNK as u64).read_to_end(&mut buf)?;
        let end = got < CHUNK;
        let mut more = false;
        while let Some(k) = buf
            .get(at..)
            .and_then(|r| r.windows(magic.len()).position(|w| w == magic))
        {
            let m = at + k;
            if !end && m - HEADER.min(m) + WHOLE > buf.len() {
                // The record would run past what is read: looked at again with more.
                at = m;
                more = true;
                break;
            }
            if let Some(rec) = m.checked_sub(HEADER)
                && base + rec as u64 > from
                && let Parsed::Record(r, _) = record::parse(&buf[rec..], base + rec as u64)
                && r.kind == Kind::Commit
            {
                return Ok(Some(base + rec as u64));
            }
            at = m + 1;
        }
        if end {
            return Ok(None);
        }
        if !more {
            // No magic starts before the last `magic.len() - 1` bytes.
            at = at.max((buf.len() + 1).saturating_sub(magic.len()));
        }
        let drop = at.saturating_sub(HEADER);
        buf.drain(..drop);
        base += drop as u64;
        at -= drop;
    }
}

/// Calls `f` with the position and record of every record of `file` (the segment at `path`)
/// in `[from, to)`, which must hold whole records (a sealed segment's committed bytes, or what
/// follows a commit record): padding and gaps skipped, commit records included. Damage or a
/// record cut short at `to` is [`LogError::Corrupt`].
pub(crate) fn for_each_record(
    file: &std::fs::File,
    path: &Path,
    from: u64,
    to: u64,
    f: impl FnMut(u64, &record::Record<'_>) -> Result<(), LogError>,
) -> Result<(), LogError> {
    for_each_record_until(file, path, from, to, to, f).map(|_| ())
}

/// Whether the segment at `path`, which holds no commit record, may be a log's creation cut
/// short ([`record::may_be_torn_creation`]; at most a commit record's bytes, so no more than
/// one byte past them is read): only then may a writer cut it and start the log there (a file
/// of someone else's is refused, not overwritten).
fn torn_creation(path: &Path) -> Result<bool, LogError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take((HEADER + record::COMMIT_LEN) as u64 + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(io_err(path))?;
    Ok(record::may_be_torn_creation(&bytes))
}

#[cfg(test)]
thread_local! {
    /// The bytes [`for_each_record_until`] read on this thread (tests count a slice's reads).
    pub(crate) static READ_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// [`for_each_record`] that stops at the first record (or gap) starting at or after `stop`,
/// and returns where it stopped (`to` once it got there): a later call goes on from there.
pub(crate) fn for_each_record_until(
    file: &std::fs::File,
    path: &Path,
    from: u64,
    stop: u64,
    to: u64,
    mut f: impl FnMut(u64, &record::Record<'_>) -> Result<(), LogError>,
) -> Result<u64, LogError> {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 16 << 20;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_pos = from;
    let mut i = 0usize;
    loop {
        let pos = buf_pos + i as u64;
        if pos >= to || pos >= stop {
            return Ok(pos.min(to));
        }
        match record::parse(&buf[i..], pos) {
            Parsed::Record(r, len) => {
                if r.kind != Kind::Pad {
                    f(pos, &r)?;
                }
                i += len;
            }
            Parsed::Skip(k) => i += k,
            Parsed::Short(need) => {
                buf.drain(..i);
                buf_pos += i as u64;
                i = 0;
                let have = buf.len();
                let end = buf_pos + have as u64;
                let avail = to - end;
                // No further than the slice goes (a record that starts before `stop` is read
                // whole), at most a chunk at a time: a slice of a cold segment reads its own
                // bytes, not a chunk's.
                let wanted = (stop.min(to).saturating_sub(end)).min(CHUNK as u64) as usize;
                let more = need.saturating_sub(have).max(wanted) as u64;
                if (have as u64) + avail < need as u64 {
                    return Err(LogError::Corrupt(format!(
                        "{} at offset {pos}: a record cut short",
                        path.display()
                    )));
                }
                let take = more.min(avail) as usize;
                buf.resize(have + take, 0);
                file.read_exact_at(&mut buf[have..], end)
                    .map_err(io_err(path))?;
                #[cfg(test)]
                READ_BYTES.with(|r| r.set(r.get() + take as u64));
            }
            Parsed::Bad(why) => {
                return Err(LogError::Corrupt(format!(
                    "{} at offset {pos}: {why}",
                    path.display()
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogStore;
    use crate::tests::{Trie, commit, opts, random_writes};
    use rand::SeedableRng;

    /// What [`later_commit`] answered when it read the whole rest of the segment at once.
    fn later_commit_read_whole(path: &Path, from: u64, to: u64) -> Option<u64> {
        use std::io::Seek;
        let mut file = std::fs::File::open(path).unwrap();
        file.seek(std::io::SeekFrom::Start(from)).unwrap();
        let mut bytes = Vec::new();
        file.take(to.saturating_sub(from))
            .read_to_end(&mut bytes)
            .unwrap();
        let magic = CommitRecord::magic();
        let mut at = 1;
        while let Some(k) = bytes
            .get(at..)
            .and_then(|rest| rest.windows(magic.len()).position(|w| w == magic))
        {
            let m = at + k;
            if let Some(rec) = m.checked_sub(HEADER)
                && rec >= 1
                && let Parsed::Record(r, _) = record::parse(&bytes[rec..], from + rec as u64)
                && r.kind == Kind::Commit
            {
                return Some(from + rec as u64);
            }
            at = m + 1;
        }
        None
    }

    /// Read in pieces, the search finds the commit record the whole read found, from every
    /// kind of start: just before, on and just after each commit record, and at offsets
    /// across the segment, with and without an end.
    #[test]
    fn a_later_commit_is_found_wherever_the_pieces_fall() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(61);
        let mut trie = Trie::new(LogStore::open(dir.path(), &opts(3)).unwrap(), 3).unwrap();
        for block in 1..=12 {
            commit(&mut trie, random_writes(&mut rng, 40), block);
        }
        drop(trie);
        let path = dir.path().join(segment_name(1));
        let len = std::fs::metadata(&path).unwrap().len();
        let mut commits = Vec::new();
        let mut from = 0;
        while let Some(at) = later_commit_read_whole(&path, from, u64::MAX) {
            commits.push(at);
            from = at;
        }
        assert!(commits.len() >= 12, "{commits:?}");
        let starts = commits
            .iter()
            .flat_map(|&c| c.saturating_sub(HEADER as u64 + 2)..c + 3)
            .chain((0..len).step_by(397));
        for from in starts {
            for to in [u64::MAX, from + 1_500, from + 90] {
                assert_eq!(
                    later_commit(&path, from, to).unwrap(),
                    later_commit_read_whole(&path, from, to),
                    "from {from} to {to}"
                );
            }
        }
    }
}
