//! Compaction: the sealed segments that are mostly superseded records are dropped, their live
//! records copied to the log's end first.
//!
//! A compaction appends the copies as blocks of their own that keep the state's block and
//! root (a reader sees the same state throughout), the last of them naming every segment ever
//! dropped in a [`Kind::Drop`] record; the copies are not synced as they are appended (they
//! change no state, so a crash that loses them loses nothing; the next block's sync covers
//! them), but everything is synced after the last of them, and only then are the files
//! removed, the oldest first, syncing the directory after each. So a crash at any
//! instant leaves a log that opens at the same state: before the last block is on the device
//! the old segments are whole and the copies are either a torn tail (cut) or harmless
//! duplicates; after it, a dropped segment still in the directory is removed by the next
//! writer's open, and one already gone is named by the drop record (the scan refuses any other
//! missing segment).
//!
//! A removal record (a path that no longer holds a node) is copied only while a segment older
//! than its own stays (one that may hold the path's earlier blob); since the dropped files are
//! removed oldest first, a newer dropped segment never disappears while an older one it
//! shadows remains in the directory.

use crate::record::{self, CommitRecord, Kind};
use crate::{
    Change, FastSet, Loc, LogError, LogStore, Writer, io_err, scan, segment_name, stem_of_blob,
    sync_dir,
};
use bintrie_node::PathKey;
use std::collections::BTreeSet;
use std::fs::File;
use std::sync::Arc;

/// The copies a compaction appends are committed in blocks of about this many bytes, so its
/// memory stays bounded whatever the segments' size.
const PIECE_BYTES: usize = 64 << 20;

/// Which sealed segments a compaction takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pick {
    /// Each whose garbage is at least this share of its bytes ([`LogStore::compact`]).
    EachAtLeast(f64),
    /// The ones with the most garbage, while the log's garbage is more than this share of its
    /// bytes ([`LogStore::compact_to`]).
    LogAtMost(f64),
}

/// The free bytes a compaction asks for to copy a segment's `live` record bytes: those, an
/// eighth more for the padding that keeps copied records off page boundaries and the removal
/// records carried along, and a MiB for the pieces' commit records and a new segment's start.
/// A segment with nothing live takes only its drop record.
pub(crate) fn copy_room(live: u64) -> u64 {
    if live == 0 {
        64 << 10
    } else {
        live + live / 8 + (1 << 20)
    }
}

/// The bytes an unprivileged writer may still add to the filesystem holding `dir` (`None` when
/// it cannot be told).
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    #[cfg(test)]
    if let Some(room) = crate::tests::planted_room() {
        return Some(room);
    }
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// [`LogError::Corrupt`] for a segment that is not compacted, and why.
fn not_compacted(path: &std::path::Path, why: String) -> LogError {
    LogError::Corrupt(format!("{}: {why}; not compacted", path.display()))
}

/// Refuses a garbage share outside 0..=1 (NaN included).
pub(crate) fn check_share(min_garbage: f64) -> Result<(), LogError> {
    if (0.0..=1.0).contains(&min_garbage) {
        Ok(())
    } else {
        Err(LogError::Invalid(format!(
            "the garbage share a segment must reach to be compacted is {min_garbage}: it must be within 0..=1"
        )))
    }
}

/// What a compaction ([`LogStore::compact`], [`LogStore::compact_to`]) did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compaction {
    /// The segments removed (their numbers, `log.NNNNNN`), oldest first.
    pub dropped: Vec<u32>,
    /// Their bytes (what the log no longer holds once their files are gone).
    pub dropped_bytes: u64,
    /// Live records (node blobs and code) copied to the log's end.
    pub copied_records: u64,
    /// Bytes of the records copied (padding included).
    pub copied_bytes: u64,
    /// Removal records copied, because an older segment that remains may hold the path.
    pub removals: u64,
    /// Segments whose files could not be removed (the error is logged): the log names them
    /// dropped, and the next writer's open removes them; until then this handle compacts no
    /// more.
    pub left_in_place: Vec<u32>,
    /// Segments that were to be compacted but whose live records did not fit in the
    /// filesystem's free space beside the others' (their copies must be written before any
    /// segment is removed): what a later compaction takes, once these drops freed room.
    pub left_for_room: Vec<u32>,
    /// Why a later round of [`LogStore::compact`] failed, after earlier rounds dropped the
    /// segments above (`None`: no round failed; a first round's failure is the call's error).
    pub stopped: Option<String>,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// The automatic compaction under way ([`LogStore::compact_step`]): its segment, and the
/// offset its reads reached.
pub(crate) struct Cursor {
    pub(crate) seg: u32,
    file: Arc<File>,
    len: u64,
    pos: u64,
}

/// A sealed segment, its bytes and garbage bytes, as a compaction weighs it.
struct Sealed {
    n: u32,
    file: Arc<File>,
    len: u64,
    garbage: u64,
}

impl Sealed {
    /// Its garbage's share of its bytes.
    fn share(&self) -> f64 {
        share(self.garbage, self.len)
    }
}

/// `garbage` over `len` (0 for an empty segment or log).
fn share(garbage: u64, len: u64) -> f64 {
    garbage as f64 / len.max(1) as f64
}

/// A live record a compaction found: what the index holds at its place.
enum Live {
    Node(PathKey),
    Code([u8; 32]),
}

/// The copies being gathered into one block, written at the writer's position when started.
struct Piece {
    seg: u32,
    base: u64,
    buf: Vec<u8>,
    changes: Vec<Change>,
    /// Removal records among the changes.
    removals: u64,
}

impl Piece {
    fn new(w: &Writer) -> Piece {
        Piece {
            seg: w.seg,
            base: w.pos,
            buf: Vec::new(),
            changes: Vec::new(),
            removals: 0,
        }
    }

    /// Appends a record; its place in the log.
    fn push(&mut self, kind: Kind, key: &[u8], value: &[u8]) -> Result<(Loc, usize), LogError> {
        let (at, len) = record::push(&mut self.buf, self.base, kind, key, value);
        let loc = Loc::new(self.seg, self.base + at as u64, len).ok_or_else(|| {
            LogError::Corrupt(format!("segment {} past the addressable size", self.seg))
        })?;
        Ok((loc, len))
    }
}

impl LogStore {
    /// Removes every sealed segment (not the one being written) whose garbage — bytes of
    /// records superseded since, by the index's count — is at least `min_garbage` of its size
    /// (0.0..=1.0; 1.0 drops only segments with nothing live), after copying its live records
    /// to the log's end. The state (root, block) does not change and stays readable
    /// throughout; the copies are synced before any file is removed, whatever the
    /// [`crate::Durability`]. Crash-safe at every instant (see the module's notes).
    ///
    /// Errors: [`LogError::ReadOnly`], [`LogError::Poisoned`], [`LogError::Conflict`] as for
    /// [`LogStore::write_block`]; [`LogError::Invalid`] for a `min_garbage` outside 0..=1;
    /// a damaged record in a segment it reads is [`LogError::Corrupt`] (nothing is removed);
    /// a failed write leaves the log as it was (the copies already committed are harmless
    /// duplicates). A file that cannot be removed is reported in
    /// [`Compaction::left_in_place`], not as an error; this handle then compacts no more
    /// ([`LogError::Invalid`], and the automatic compaction stops) until the log is reopened,
    /// which removes it. A file removed whose directory then fails to sync counts as dropped
    /// (it is gone), and stops the compaction the same way. The automatic compaction also
    /// stops at a segment that disagrees with the index (logged once).
    ///
    /// The copies are written before any segment is removed, so it takes, oldest first, each
    /// of those segments whose live bytes fit in what is left of the filesystem's free space
    /// (with an eighth more and a MiB each), passing over those that do not, and goes on in
    /// rounds, among the same segments, as the drops free room; what still does not fit is
    /// [`Compaction::left_for_room`]. When none fits, the error is [`LogError::Io`] of kind
    /// `StorageFull`, naming the segment that needs the least and how much, and nothing
    /// changes.
    /// A later round's failure is [`Compaction::stopped`]: the earlier drops stand.
    ///
    /// A read that found a record's place before a compaction and looks its segment up after
    /// it reads the removed segment's handle, kept until the next compaction; one that
    /// outlived two compactions fails with [`LogError::Corrupt`] ("no segment").
    pub fn compact(&mut self, min_garbage: f64) -> Result<Compaction, LogError> {
        check_share(min_garbage)?;
        self.compact_with(Pick::EachAtLeast(min_garbage))
    }

    /// Keeps the log's garbage at most `max_garbage` of its bytes (0.0..=1.0, so the log holds
    /// at most about `1 / (1 - max_garbage)` times its live bytes plus the segment being
    /// written): when it is more, compacts the sealed segments with the most garbage first
    /// until it is at most that (copying from the emptiest segments first copies the least
    /// for the bytes it frees), taking none with less than `max_garbage` garbage of its own
    /// (so each frees at least that share of what it reads back; the garbage of the segment
    /// being written waits until it is sealed). The automatic compaction
    /// ([`LogOptions::compact_garbage`]) applies the same bound one slice per block (a
    /// segment at a time, on the background thread when there is one); this does it all at
    /// once.
    /// Errors and guarantees as [`LogStore::compact`]; nothing to do is not an error.
    ///
    /// [`LogOptions::compact_garbage`]: crate::LogOptions::compact_garbage
    pub fn compact_to(&mut self, max_garbage: f64) -> Result<Compaction, LogError> {
        check_share(max_garbage)?;
        self.compact_with(Pick::LogAtMost(max_garbage))
    }

    /// Compacts in rounds while a round drops segments and leaves others for lack of room:
    /// each round's drops free the room the next one's copies take. A later round takes only
    /// segments the first chose; its error ends the rounds without undoing the drops before
    /// it ([`Compaction::stopped`]).
    fn compact_with(&mut self, pick: Pick) -> Result<Compaction, LogError> {
        let (mut guard, _) = Self::lock_writer(&self.inner, &self.meta)?;
        let w = guard.as_mut().expect("checked by lock_writer");
        let mut out = self.compact_locked(w, pick, None)?;
        while !out.left_for_room.is_empty()
            && !out.dropped.is_empty()
            && out.left_in_place.is_empty()
            && !w.halted
        {
            let before: BTreeSet<u32> = out.left_for_room.iter().copied().collect();
            // The dropped files' space comes back only once their last handles close: those
            // the last compaction kept (the next round is a next compaction for them).
            self.inner
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            let mut next = match self.compact_locked(w, pick, Some(&before)) {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(dir = %self.inner.dir.display(), error = %e, dropped = out.dropped.len(), "a compaction round failed after earlier rounds dropped segments");
                    out.stopped = Some(e.to_string());
                    break;
                }
            };
            let progress = !next.dropped.is_empty();
            out.dropped.append(&mut next.dropped);
            out.dropped_bytes += next.dropped_bytes;
            out.copied_records += next.copied_records;
            out.copied_bytes += next.copied_bytes;
            out.removals += next.removals;
            out.left_in_place = next.left_in_place;
            out.left_for_room = next.left_for_room;
            out.seconds += next.seconds;
            if !progress {
                break;
            }
        }
        Ok(out)
    }

    /// A compaction with the writer held and checked (poisoned, conflict), of the sealed
    /// segments `pick` takes (among `only`, when given: a later round's). When no segment
    /// picked fits in the free space, the first round of `compact` fails saying so; a later
    /// round, or `compact_to`, does nothing (`left_for_room`).
    pub(crate) fn compact_locked(
        &self,
        w: &mut Writer,
        pick: Pick,
        only: Option<&BTreeSet<u32>>,
    ) -> Result<Compaction, LogError> {
        let fail_without_room = only.is_none();
        if w.halted {
            return Err(LogError::Invalid(format!(
                "an earlier compaction of {} stopped (a dropped segment could not be removed, or \
                 a segment disagreed with the index): reopen the log before compacting again",
                self.inner.dir.display()
            )));
        }
        let t = std::time::Instant::now();
        let present = self.present_segments();
        // Live records in each victim, which its scan must find.
        let mut expected: std::collections::BTreeMap<u32, u64> = Default::default();
        let mut victims = Vec::new();
        let mut left_for_room = Vec::new();
        let free = free_bytes(&self.inner.dir);
        // The segment left for room that needs the least, and what it needs.
        let mut least_need: Option<(u32, u64)> = None;
        {
            let mut sealed = self.sealed(w, &present)?;
            if let Some(only) = only {
                sealed.retain(|s| only.contains(&s.n));
            }
            let index = self.index();
            match pick {
                Pick::EachAtLeast(min) => {
                    sealed.retain(|s| s.share() >= min);
                }
                Pick::LogAtMost(max) => {
                    let (mut log, live) = (index.log_bytes, index.live_bytes);
                    if share(log.saturating_sub(live), log) <= max {
                        sealed.clear();
                    }
                    // Only segments at least as superseded as the log may be: each frees at
                    // least what it copies (the garbage of the segment being written waits).
                    sealed.retain(|s| s.share() >= max);
                    sealed.sort_by(|a, b| b.share().total_cmp(&a.share()));
                    let mut keep = 0;
                    for s in &sealed {
                        if share(log.saturating_sub(live), log) <= max {
                            break;
                        }
                        // Its live bytes move to the end: the log loses its garbage.
                        log = log.saturating_sub(s.garbage).max(live);
                        keep += 1;
                    }
                    sealed.truncate(keep);
                    sealed.sort_by_key(|s| s.n);
                }
            }
            // The copies are written before any segment is removed: take, oldest first, each
            // whose live bytes fit in what is left of the filesystem's free space, passing
            // over those that do not (they wait for a later round, when drops have freed room).
            let mut room = free;
            for s in sealed {
                let need = copy_room(s.len - s.garbage);
                if room.is_some_and(|r| need > r) {
                    if least_need.is_none_or(|(_, least)| need < least) {
                        least_need = Some((s.n, need));
                    }
                    left_for_room.push(s.n);
                    continue;
                }
                room = room.map(|r| r - need);
                expected.insert(
                    s.n,
                    index.seg_records.get(s.n as usize).copied().unwrap_or(0),
                );
                victims.push((s.n, s.file, s.len));
            }
        }
        if let Some((n, need)) = least_need
            && victims.is_empty()
            && fail_without_room
            && matches!(pick, Pick::EachAtLeast(_))
        {
            return Err(LogError::Io {
                path: self.inner.dir.join(segment_name(n)),
                error: std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "compacting it needs about {} MiB free for the copies of its live \
                         records (written before any segment is removed); {} MiB are free",
                        need.div_ceil(1 << 20),
                        free.unwrap_or(0) >> 20
                    ),
                ),
            });
        }
        let mut out = Compaction {
            left_for_room,
            ..Default::default()
        };
        if victims.is_empty() {
            out.seconds = t.elapsed().as_secs_f64();
            return Ok(out);
        }
        let chosen: BTreeSet<u32> = victims.iter().map(|(n, _, _)| *n).collect();
        // The oldest segment that stays: removals in a newer dropped segment must be kept.
        let first_kept = present
            .iter()
            .map(|(n, _)| *n)
            .find(|n| !chosen.contains(n))
            .expect("the segment being written stays");
        let mut piece = Piece::new(w);
        let mut removals_seen: FastSet<PathKey> = FastSet::default();
        for (n, file, len) in &victims {
            let path = self.inner.dir.join(segment_name(*n));
            // A record is live when the index places its key at its offset; the scan must find
            // as many as the index counts in the segment.
            let mut found = 0u64;
            scan::for_each_record(file, &path, 0, *len, |pos, rec| {
                if self.copy_if_live(*n, pos, rec, first_kept, &mut piece, &mut removals_seen)? {
                    out.copied_records += 1;
                    found += 1;
                }
                self.commit_if_full(w, &mut piece, &mut out)
            })?;
            let want = expected.get(n).copied().unwrap_or(0);
            if found != want {
                return Err(not_compacted(
                    &path,
                    format!("the index places {want} live records in it, its records hold {found}"),
                ));
            }
        }
        let victims: Vec<(u32, u64)> = victims.iter().map(|(n, _, len)| (*n, *len)).collect();
        self.finish_drop(w, piece, &victims, &mut out)?;
        if w.cursor.as_ref().is_some_and(|c| chosen.contains(&c.seg)) {
            w.cursor = None;
        }
        out.seconds = t.elapsed().as_secs_f64();
        tracing::info!(
            dropped = out.dropped.len(),
            dropped_bytes = out.dropped_bytes,
            copied_records = out.copied_records,
            copied_bytes = out.copied_bytes,
            removals = out.removals,
            ms = out.seconds * 1e3,
            "log compacted"
        );
        Ok(out)
    }

    /// The segments in the directory, by number, with their read handles.
    fn present_segments(&self) -> Vec<(u32, Arc<File>)> {
        self.segments()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (i as u32 + 1, Arc::clone(f))))
            .collect()
    }

    /// The sealed segments of `present` (all but the one `w` writes), with their bytes and
    /// garbage bytes (by the index's live bytes).
    fn sealed(&self, w: &Writer, present: &[(u32, Arc<File>)]) -> Result<Vec<Sealed>, LogError> {
        let index = self.index();
        let mut out = Vec::with_capacity(present.len());
        for (n, file) in present.iter().filter(|(n, _)| *n < w.seg) {
            let path = self.inner.dir.join(segment_name(*n));
            let len = file.metadata().map_err(io_err(&path))?.len();
            let live = index.seg_live.get(*n as usize).copied().unwrap_or(0);
            out.push(Sealed {
                n: *n,
                file: Arc::clone(file),
                len,
                garbage: len.saturating_sub(live),
            });
        }
        Ok(out)
    }

    /// Commits the copies gathered so far once they reach [`PIECE_BYTES`], so a compaction's
    /// memory stays bounded; `piece` then starts over at the writer's new position.
    fn commit_if_full(
        &self,
        w: &mut Writer,
        piece: &mut Piece,
        out: &mut Compaction,
    ) -> Result<(), LogError> {
        if piece.buf.len() < PIECE_BYTES {
            return Ok(());
        }
        out.copied_bytes += piece.buf.len() as u64;
        out.removals += piece.removals;
        let full = std::mem::replace(piece, Piece::new(w));
        self.commit_piece(w, full, None)?;
        *piece = Piece::new(w);
        Ok(())
    }

    /// Ends a compaction of `victims` (number, bytes; oldest first) whose live records are all
    /// copied: commits `piece` (the last copies) with the `Drop` record naming every segment
    /// dropped so far and these, syncs, takes them out of the index and the read handles,
    /// and removes their files, the oldest first (a failure leaves them and the later ones,
    /// and stops compaction until a reopen).
    fn finish_drop(
        &self,
        w: &mut Writer,
        piece: Piece,
        victims: &[(u32, u64)],
        out: &mut Compaction,
    ) -> Result<(), LogError> {
        let stored = self.stored_meta();
        let dropped: Vec<u32> = {
            let index = self.index();
            let mut all = index.dropped.clone();
            all.extend(victims.iter().map(|(n, _)| *n));
            all.into_iter().collect()
        };
        out.copied_bytes += piece.buf.len() as u64;
        out.removals += piece.removals;
        self.commit_piece(w, piece, Some(&dropped))?;
        // The copies (unsynced as they were appended) and the `Drop` record are on the device
        // before any file goes.
        let path = self.inner.dir.join(segment_name(w.seg));
        w.file.sync_data().map_err(io_err(&path))?;
        w.synced_block = stored.block;
        {
            let mut index = self.index_mut();
            for (n, len) in victims {
                index.dropped.insert(*n);
                index.log_bytes = index.log_bytes.saturating_sub(*len);
                if let Some(b) = index.seg_live.get_mut(*n as usize) {
                    *b = 0;
                }
            }
        }
        let mut retired = Vec::with_capacity(victims.len());
        {
            let mut segments = self
                .inner
                .segments
                .write()
                .unwrap_or_else(|e| e.into_inner());
            for (n, _) in victims {
                if let Some(f) = segments.get_mut(*n as usize - 1).and_then(Option::take) {
                    retired.push((*n, f));
                }
            }
            // Under the segments' lock (taken first, as a read does): a read that misses a
            // segment here finds it retired, never in neither. The previous compaction's
            // handles close here.
            *self.inner.retired.lock().unwrap_or_else(|e| e.into_inner()) = retired;
        }
        let mut failed = false;
        for (n, len) in victims {
            if failed {
                out.left_in_place.push(*n);
                continue;
            }
            let path = self.inner.dir.join(segment_name(*n));
            match std::fs::remove_file(&path).map_err(io_err(&path)) {
                Ok(()) => {
                    out.dropped.push(*n);
                    out.dropped_bytes += *len;
                    // Removed, though perhaps not durably: after a power loss the file may be
                    // back, and the next writer's open removes it again (the log names it
                    // dropped). Not "left in place"; but this handle compacts no more.
                    if let Err(e) = sync_dir(&self.inner.dir) {
                        tracing::warn!(error = %e, segment = %path.display(), "a compacted segment was removed, but the directory did not sync: the removal may not survive a power loss (the next open removes it then)");
                        failed = true;
                        w.halted = true;
                    }
                }
                Err(e) => {
                    // The later ones stay too: a newer segment must never go before an older
                    // one it may shadow (removals).
                    tracing::warn!(error = %e, "a compacted segment could not be removed: the next open removes it");
                    failed = true;
                    w.halted = true;
                    out.left_in_place.push(*n);
                }
            }
        }
        Ok(())
    }

    /// One block's share of the automatic compaction ([`crate::LogOptions::compact_garbage`]):
    /// when the log is more than `max` garbage and none is under way, starts on the sealed
    /// segment with the most garbage (at least `max` of it) among those whose copies the
    /// filesystem has room for (as [`LogStore::compact`] asks; none: it waits), then reads back the next
    /// [`crate::LogOptions::compact_slice_bytes`] of it (all the rest when the log is more than
    /// a tenth over `max`), copying its live records; at its end, drops it if nothing live is
    /// left in it (the index's count), or refuses to ([`LogError::Corrupt`]).
    pub(crate) fn compact_step(&self, w: &mut Writer, max: f64) -> Result<(), LogError> {
        if w.halted {
            return Ok(());
        }
        let share_now = self.index().garbage_share();
        if w.cursor.is_none() && share_now <= max {
            // Every block comes here: nothing is gathered while nothing is to be done.
            return Ok(());
        }
        let t = std::time::Instant::now();
        let present = self.present_segments();
        if w.cursor.is_none() {
            let mut due: Vec<Sealed> = self
                .sealed(w, &present)?
                .into_iter()
                .filter(|s| s.share() >= max)
                .collect();
            if due.is_empty() {
                return Ok(());
            }
            // Copies come before the drop: one that cannot finish would only take the room the
            // blocks need. The segment with the most garbage among those whose copies fit; none
            // fitting, it waits for room (the blocks go on without).
            let free = free_bytes(&self.inner.dir);
            let need = |s: &Sealed| copy_room(s.len - s.garbage);
            let fits = |s: &Sealed| free.is_none_or(|f| need(s) <= f);
            let most = |a: &Sealed, b: &Sealed| a.share().total_cmp(&b.share());
            let pick = due
                .iter()
                .enumerate()
                .filter(|(_, s)| fits(s))
                .max_by(|a, b| most(a.1, b.1));
            let Some((i, _)) = pick else {
                if !w.short_of_room {
                    let least = due.iter().map(need).min().unwrap_or(0);
                    tracing::warn!(
                        dir = %self.inner.dir.display(),
                        need_mb = least.div_ceil(1 << 20),
                        free_mb = free.unwrap_or(0) >> 20,
                        "the log is due a compaction, but copying the live records of any segment \
                         due needs more than the free space: it waits for room (`bintrie compact` \
                         compacts what fits)"
                    );
                }
                w.short_of_room = true;
                return Ok(());
            };
            let best = due.swap_remove(i);
            w.short_of_room = false;
            w.cursor = Some(Cursor {
                seg: best.n,
                file: best.file,
                len: best.len,
                pos: 0,
            });
        }
        let cursor = w.cursor.as_ref().expect("set above");
        let (n, file, len, from) = (cursor.seg, Arc::clone(&cursor.file), cursor.len, cursor.pos);
        let stop = if share_now > max + 0.1 {
            len
        } else {
            from.saturating_add(self.inner.options.compact_slice_bytes)
        };
        let first_kept = present
            .iter()
            .map(|(m, _)| *m)
            .find(|m| *m != n)
            .expect("the segment being written stays");
        let path = self.inner.dir.join(segment_name(n));
        let mut piece = Piece::new(w);
        let mut seen: FastSet<PathKey> = FastSet::default();
        let mut out = Compaction::default();
        let reached = scan::for_each_record_until(&file, &path, from, stop, len, |pos, rec| {
            if self.copy_if_live(n, pos, rec, first_kept, &mut piece, &mut seen)? {
                out.copied_records += 1;
            }
            self.commit_if_full(w, &mut piece, &mut out)
        });
        let reached = match reached {
            Ok(r) => r,
            Err(e) => {
                w.cursor = None;
                // Damage: reading it again every block would only say so again.
                if matches!(e, LogError::Corrupt(_)) {
                    w.halted = true;
                }
                return Err(e);
            }
        };
        if reached < len {
            if !piece.changes.is_empty() {
                self.commit_piece(w, piece, None)?;
            }
            if let Some(c) = w.cursor.as_mut() {
                c.pos = reached;
            }
            return Ok(());
        }
        // The whole segment read: the copies in, and nothing live may be left in it.
        w.cursor = None;
        if !piece.changes.is_empty() {
            out.copied_bytes += piece.buf.len() as u64;
            out.removals += piece.removals;
            self.commit_piece(w, piece, None)?;
        }
        let left = self
            .index()
            .seg_records
            .get(n as usize)
            .copied()
            .unwrap_or(0);
        if left != 0 {
            w.halted = true;
            return Err(not_compacted(
                &path,
                format!("{left} live records the index places in it were not met in its records"),
            ));
        }
        self.finish_drop(w, Piece::new(w), &[(n, len)], &mut out)?;
        tracing::info!(
            segment = n,
            dropped_bytes = out.dropped_bytes,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "log compacted a segment (its last slice)"
        );
        Ok(())
    }

    /// Copies the record at `pos` of segment `n` into `piece` when it is live (the index
    /// places its key there; returns true), or when it is a removal that a segment older than
    /// `n` (`first_kept`) may still need and the path is still empty (counted in the piece's
    /// removals; once per path).
    fn copy_if_live(
        &self,
        n: u32,
        pos: u64,
        rec: &record::Record<'_>,
        first_kept: u32,
        piece: &mut Piece,
        removals_seen: &mut FastSet<PathKey>,
    ) -> Result<bool, LogError> {
        let path = || self.inner.dir.join(segment_name(n));
        let here = |l: Option<&Loc>| l.is_some_and(|l| l.seg() == n as usize && l.off() == pos);
        let live = match rec.kind {
            Kind::Node => {
                let key = PathKey::from_bytes(rec.key).ok_or_else(|| {
                    not_compacted(&path(), format!("a node key of the wrong size at {pos}"))
                })?;
                here(self.index().nodes.get(&key)).then_some(Live::Node(key))
            }
            Kind::Code => {
                let hash: [u8; 32] = rec.key.try_into().map_err(|_| {
                    not_compacted(&path(), format!("a code key of the wrong size at {pos}"))
                })?;
                here(self.index().code.get(&hash)).then_some(Live::Code(hash))
            }
            Kind::Remove if first_kept < n => {
                let key = PathKey::from_bytes(rec.key).ok_or_else(|| {
                    not_compacted(&path(), format!("a removal key of the wrong size at {pos}"))
                })?;
                if self.index().nodes.get(&key).is_none() && removals_seen.insert(key) {
                    piece.push(Kind::Remove, rec.key, &[])?;
                    piece.changes.push(Change::Remove(key));
                    piece.removals += 1;
                }
                None
            }
            _ => None,
        };
        let Some(live) = live else {
            return Ok(false);
        };
        let (loc, len) = piece.push(rec.kind, rec.key, rec.value)?;
        piece.changes.push(match live {
            Live::Node(k) => Change::Node(k, loc, len, stem_of_blob(rec.value)),
            Live::Code(h) => Change::Code(h, loc, len),
        });
        Ok(true)
    }

    /// Commits `piece` as a block keeping the state's block and root (with the drop record
    /// naming `dropped`, for the last piece), then points the index at its copies.
    fn commit_piece(
        &self,
        w: &mut Writer,
        mut piece: Piece,
        dropped: Option<&[u32]>,
    ) -> Result<(), LogError> {
        let stored = self.stored_meta();
        let mut records = piece.changes.len();
        if let Some(d) = dropped {
            let value: Vec<u8> = d.iter().flat_map(|n| n.to_le_bytes()).collect();
            piece.push(Kind::Drop, &[], &value)?;
            records += 1;
        }
        let records = u32::try_from(records).map_err(|_| LogError::TooLarge(records))?;
        record::pad_for_commit(&mut piece.buf, piece.base);
        let commit = CommitRecord {
            block: stored.block,
            root: stored.root,
            group_depth: stored.group_depth,
            records,
            body_crc: crc32fast::hash(&piece.buf),
            body_start: piece.base,
            building: false,
        };
        record::push(
            &mut piece.buf,
            piece.base,
            Kind::Commit,
            &[],
            &commit.encode(),
        );
        self.append(w, &piece.buf, None)?;
        {
            let mut index = self.index_mut();
            index.apply(piece.changes);
            index.log_bytes += piece.buf.len() as u64;
        }
        if let Err(e) = self.maybe_roll(w) {
            tracing::warn!(error = %e, "starting a new log segment failed; the current one grows");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{Trie, opts, random_writes};
    use crate::{LogEnd, LogOptions, rewind};
    use bintrie_keys::TreeKey;
    use bintrie_node::Hash32;
    use bintrie_trie::MemoryStore;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::path::Path;

    /// Every node blob and code entry the index names, read through the store, by key.
    type Contents = (Vec<(PathKey, Vec<u8>)>, Vec<([u8; 32], Vec<u8>)>);

    fn contents(store: &LogStore) -> Contents {
        let (keys, code): (Vec<PathKey>, Vec<[u8; 32]>) = {
            let index = store.index();
            (
                index.nodes.iter().map(|(k, _)| k).collect(),
                index.code.keys().copied().collect(),
            )
        };
        let mut nodes: Vec<_> = keys
            .into_iter()
            .map(|k| (k, store.get_node(&k).unwrap().unwrap()))
            .collect();
        nodes.sort_unstable_by_key(|e| e.0);
        let mut codes: Vec<_> = code
            .into_iter()
            .map(|h| (h, store.get_code(&h, None).unwrap().unwrap()))
            .collect();
        codes.sort_unstable_by_key(|e| e.0);
        (nodes, codes)
    }

    /// Asserts `a == b`, naming how many entries differ and the first one instead of
    /// printing both.
    fn assert_same(a: &Contents, b: &Contents, what: &str) {
        if a == b {
            return;
        }
        let diff = |x: &[(PathKey, Vec<u8>)], y: &[(PathKey, Vec<u8>)]| {
            x.iter()
                .filter(|e| !y.contains(e))
                .map(|e| e.0)
                .collect::<Vec<_>>()
        };
        let (extra, missing) = (diff(&a.0, &b.0), diff(&b.0, &a.0));
        panic!(
            "{what}: {} node entries only in the first ({:?}...), {} only in the second ({:?}...); code equal: {}",
            extra.len(),
            extra.first(),
            missing.len(),
            missing.first(),
            a.1 == b.1
        );
    }

    fn small_segments(g: u8) -> LogOptions {
        LogOptions {
            segment_bytes: 16_000,
            compact_garbage: None,
            ..opts(g)
        }
    }

    /// Blocks of new stems and new values for earlier ones (so that every block supersedes
    /// blobs of the blocks before), each with a code entry; the memory trie follows.
    fn blocks(
        trie: &mut Trie<LogStore>,
        reference: &mut Trie<MemoryStore>,
        rng: &mut StdRng,
        written: &mut Vec<TreeKey>,
        range: std::ops::RangeInclusive<u64>,
    ) -> Hash32 {
        for block in range {
            let mut w = random_writes(rng, 40);
            for _ in 0..20.min(written.len()) {
                let k = written[rng.random_range(0..written.len())];
                w.push((k, rng.random()));
            }
            written.extend(w.iter().map(|(k, _)| *k));
            reference.update(w.clone()).unwrap();
            trie.update(w).unwrap();
            let code = vec![([block as u8; 32], vec![block as u8; 100 + block as usize])];
            trie.commit_with(|s, set| s.write_block(set, block, &code))
                .unwrap();
            assert_eq!(trie.root(), reference.root(), "block {block}");
        }
        reference.root()
    }

    /// A log in small segments at group depth 3 that does not compact on its own ([`logged`];
    /// [`logged_with`]: other options), after
    /// blocks 1..=n of [`blocks`] from a seed, with the memory trie that followed it.
    struct Logged {
        dir: tempfile::TempDir,
        options: LogOptions,
        trie: Trie<LogStore>,
        reference: Trie<MemoryStore>,
        /// The generator, to go on with more blocks.
        rng: StdRng,
        root: Hash32,
    }

    fn logged(seed: u64, n: u64) -> Logged {
        logged_with(small_segments(3), seed, n)
    }

    /// [`logged`] with other options (group depth 3).
    fn logged_with(options: LogOptions, seed: u64, n: u64) -> Logged {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut reference = Trie::new(MemoryStore::new(), 3).unwrap();
        let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), 3).unwrap();
        let root = blocks(&mut trie, &mut reference, &mut rng, &mut Vec::new(), 1..=n);
        Logged {
            dir,
            options,
            trie,
            reference,
            rng,
            root,
        }
    }

    fn segment_numbers(dir: &Path) -> Vec<u32> {
        scan::segment_files(dir)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    /// A compaction drops the segments that are mostly garbage and nothing else changes: the
    /// same state, every blob and code entry read back alike from the copies, fewer bytes;
    /// blocks go on, the log reopens at the same state with exactly the same entries (no path
    /// a removal had emptied comes back from an older segment), and compacting again (a
    /// segment holding an earlier compaction's drop record among those dropped) keeps all
    /// that. Removals are carried forward while an older segment stays, which these rounds
    /// exercise (checked).
    #[test]
    fn a_compaction_drops_superseded_segments_and_keeps_the_state() {
        for g in [3u8, 5] {
            let dir = tempfile::tempdir().unwrap();
            let options = small_segments(g);
            let mut rng = StdRng::seed_from_u64(40 + u64::from(g));
            let mut reference = Trie::new(MemoryStore::new(), g).unwrap();
            let mut trie = Trie::new(LogStore::open(dir.path(), &options).unwrap(), g).unwrap();
            let mut written = Vec::new();
            let mut block = 0u64;
            let mut removals = 0;
            let mut kept_older = false;
            for min_garbage in [0.9, 0.6, 0.3, 0.6] {
                let root = blocks(
                    &mut trie,
                    &mut reference,
                    &mut rng,
                    &mut written,
                    block + 1..=block + 12,
                );
                block += 12;
                let before = contents(trie.store());
                let info = trie.store().info();
                let meta = trie.store().stored_meta();
                let files = segment_numbers(dir.path());
                let c = trie.store_mut().compact(min_garbage).unwrap();
                assert!(!c.dropped.is_empty(), "g={g} {min_garbage}: {c:?}");
                assert!(c.left_in_place.is_empty());
                removals += c.removals;
                kept_older |= c
                    .dropped
                    .iter()
                    .any(|&n| files.iter().any(|&m| m < n && !c.dropped.contains(&m)));
                let after = segment_numbers(dir.path());
                for n in &c.dropped {
                    assert!(files.contains(n) && !after.contains(n), "{n}");
                }
                assert_eq!(trie.store().stored_meta(), meta);
                assert_same(
                    &contents(trie.store()),
                    &before,
                    &format!("g={g} {min_garbage}"),
                );
                let now = trie.store().info();
                assert!(now.log_bytes < info.log_bytes, "{info:?} -> {now:?}");
                assert!(now.garbage_bytes() < info.garbage_bytes());
                assert_eq!(now.live_bytes, info.live_bytes);
                // Blocks go on over the copies, and the log reopens at the same state.
                let root2 = blocks(
                    &mut trie,
                    &mut reference,
                    &mut rng,
                    &mut written,
                    block + 1..=block + 3,
                );
                block += 3;
                assert_ne!(root2, root);
                let live = contents(trie.store());
                let snapshot = crate::tests::index_snapshot(trie.store());
                drop(trie);
                let store = LogStore::open(dir.path(), &options).unwrap();
                assert_eq!(store.stored_meta().root, root2);
                assert_same(
                    &contents(&store),
                    &live,
                    &format!("g={g} {min_garbage}: reopened"),
                );
                assert_eq!(crate::tests::index_snapshot(&store).0, snapshot.0);
                trie = Trie::open(store, g, root2).unwrap();
                assert_eq!(trie.verify().unwrap(), root2);
            }
            assert!(removals > 0, "g={g}: no removal was carried forward");
            assert!(
                kept_older,
                "g={g}: no compaction kept a segment older than one it dropped"
            );
        }
    }

    /// With [`LogOptions::compact_garbage`], a block that leaves the log more than that share
    /// garbage compacts, inside its write or on the compaction thread: over many blocks that
    /// supersede most of what they find, the log stays within a bound of its live bytes (it
    /// grows without one when nothing compacts), at the same roots, and reopens whole. A share
    /// outside 0..=1 is refused at open.
    #[test]
    fn blocks_compact_as_they_go_and_the_log_stays_bounded() {
        let mut sizes = Vec::new();
        for (share, background) in [(None, false), (Some(0.5), false), (Some(0.5), true)] {
            // Slices of an eighth of a segment: a compaction spans blocks.
            let options = LogOptions {
                compact_garbage: share,
                compact_background: background,
                compact_slice_bytes: 2_000,
                ..small_segments(3)
            };
            let Logged {
                dir,
                options,
                trie,
                root,
                ..
            } = logged_with(options, 9, 60);
            trie.store().wait_for_compaction();
            let info = trie.store().info();
            drop(trie);
            let store = LogStore::open(dir.path(), &options).unwrap();
            assert_eq!(store.stored_meta().root, root);
            assert_eq!(store.info().live_bytes, info.live_bytes);
            let mut trie = Trie::open(store, 3, root).unwrap();
            assert_eq!(trie.verify().unwrap(), root);
            let on_disk: u64 = scan::segment_files(dir.path())
                .unwrap()
                .iter()
                .map(|(_, p)| std::fs::metadata(p).unwrap().len())
                .sum();
            assert_eq!(on_disk, info.log_bytes, "{share:?}");
            sizes.push((info.log_bytes, info.live_bytes));
        }
        let (grown, live) = sizes[0];
        assert!(grown > 4 * live, "{sizes:?}");
        for &(bounded, live2) in &sizes[1..] {
            assert_eq!(live, live2);
            // Slices this small fall behind these blocks (each supersedes about twice a
            // slice), so the bound is the one of a log a tenth over the share: the live bytes
            // / (1 - 0.6), plus the segment being written and the copies of the last step.
            assert!(bounded <= live * 5 / 2 + 3 * 16_000, "{sizes:?}");
        }
        for bad in [-1.0, 2.0, f64::NAN] {
            let dir = tempfile::tempdir().unwrap();
            let options = LogOptions {
                compact_garbage: Some(bad),
                ..small_segments(3)
            };
            let err = LogStore::open(dir.path(), &options).unwrap_err();
            assert!(matches!(err, LogError::Invalid(_)), "{err}");
        }
    }

    /// A read-only open that listed the segments just before a compaction (in another
    /// handle, as another process would) removed some of them lists them again: it opens at
    /// the same state, not at "No such file or directory" as before.
    #[test]
    fn a_reader_opening_beside_a_compaction_lists_the_segments_again() {
        let Logged {
            dir,
            options,
            trie,
            root,
            ..
        } = logged(8, 60);
        drop(trie);
        let before = segment_numbers(dir.path());
        let (compactor, removed) = (options.clone(), std::rc::Rc::new(std::cell::Cell::new(0)));
        let seen = removed.clone();
        crate::tests::on_next_listing(move |dir| {
            let mut store = LogStore::open(dir, &compactor).unwrap();
            let done = store.compact(0.3).unwrap();
            seen.set(done.dropped.len());
        });
        let reader = LogStore::open_read_only(dir.path()).unwrap();
        assert!(removed.get() > 0, "the compaction dropped nothing");
        assert_ne!(segment_numbers(dir.path())[0], before[0]);
        assert_eq!(reader.stored_meta().root, root);
        let mut trie = Trie::open(reader, 3, root).unwrap();
        assert_eq!(trie.verify().unwrap(), root);
    }

    /// A read that found its records' places before a compaction and reads them after it
    /// (as the next block's reads do beside the compaction thread) gets the same blobs
    /// through the removed segments' handles, kept until the next compaction; one that
    /// outlived a second compaction is refused as "no segment", never served wrong bytes.
    #[test]
    fn a_read_that_located_before_a_compaction_reads_after_it() {
        let Logged {
            dir: _dir,
            mut trie,
            reference,
            mut rng,
            ..
        } = logged(9, 60);
        let first = |store: &LogStore| {
            let mut locs: Vec<(PathKey, Loc)> = store
                .index()
                .nodes
                .iter()
                .filter(|(_, loc)| loc.seg() == 1)
                .collect();
            locs.sort_unstable_by_key(|(_, loc)| loc.0);
            locs.truncate(20);
            locs
        };
        let old = first(trie.store());
        assert!(!old.is_empty(), "segment 1 holds no live node");
        let dropped = trie.store_mut().compact(0.0).unwrap().dropped;
        assert!(
            dropped.contains(&1),
            "segment 1 was not dropped: {dropped:?}"
        );
        for (key, loc) in &old {
            assert_ne!(
                trie.store().index().nodes.get(key),
                Some(loc),
                "{key:?} not moved"
            );
            let blob = trie
                .store()
                .read(*loc, Kind::Node, Some(key.as_bytes()))
                .unwrap();
            assert_eq!(Some(blob), trie.store().get_node(key).unwrap(), "{key:?}");
        }
        // A second compaction closes those handles: the stale places are refused.
        let mut reference = reference;
        let mut written = Vec::new();
        blocks(&mut trie, &mut reference, &mut rng, &mut written, 61..=90);
        let again = trie.store_mut().compact(0.0).unwrap().dropped;
        assert!(!again.is_empty(), "the second compaction dropped nothing");
        let err = trie.store().read(old[0].1, Kind::Node, None).unwrap_err();
        assert!(
            matches!(&err, LogError::Corrupt(m) if m.contains("no segment 1")),
            "{err}"
        );
    }

    /// A segment removed whose directory sync then fails is reported dropped, not "left in
    /// place" (its file is gone); the handle compacts no more, and the log reopens whole.
    #[test]
    fn a_removal_whose_directory_sync_fails_counts_as_dropped() {
        let Logged {
            dir,
            options,
            mut trie,
            root,
            ..
        } = logged(8, 60);
        let before = segment_numbers(dir.path());
        crate::tests::fail_dir_syncs(true);
        let done = trie.store_mut().compact(0.3);
        crate::tests::fail_dir_syncs(false);
        let done = done.unwrap();
        assert_eq!(done.dropped.len(), 1, "{done:?}");
        assert!(
            !before.is_empty() && done.dropped[0] == before[0],
            "{done:?}"
        );
        assert!(!dir.path().join(segment_name(done.dropped[0])).exists());
        // The ones after it wait for the next open, as after a failed removal.
        assert!(trie.store_mut().compact(0.3).is_err());
        drop(trie);
        let store = LogStore::open(dir.path(), &options).unwrap();
        assert_eq!(store.stored_meta().root, root);
        let mut trie = Trie::open(store, 3, root).unwrap();
        assert_eq!(trie.verify().unwrap(), root);
    }

    /// A sealed log's segments but the last are never written again ([`LogStore::seal`]): a
    /// copy that shares them (hard links) and copies the last takes blocks and compacts
    /// (dropping shared segments), and every shared file stays byte for byte as it was, so the
    /// original still opens at its own state, whole. Sealing an empty last segment starts no
    /// other; a read-only handle cannot seal; a rewind that would cut a shared segment is
    /// refused.
    #[test]
    fn a_sealed_logs_earlier_segments_survive_a_linked_copys_blocks_and_compaction() {
        let options = LogOptions {
            compact_garbage: Some(0.3),
            compact_slice_bytes: 2_000,
            ..small_segments(3)
        };
        let Logged {
            dir,
            options,
            mut trie,
            mut reference,
            mut rng,
            root,
        } = logged_with(options, 43, 6);
        // The blocks' compaction steps run on their thread: one still under way could drop a
        // segment or roll a new one between the listings below (it did, under load).
        trie.store_mut().wait_for_compaction();
        trie.store_mut().seal().unwrap();
        let sealed = scan::segment_files(dir.path()).unwrap();
        let (last, shared) = sealed.split_last().unwrap();
        assert!(!shared.is_empty());
        assert_eq!(std::fs::metadata(&last.1).unwrap().len(), 0);
        trie.store_mut().seal().unwrap();
        assert_eq!(scan::segment_files(dir.path()).unwrap(), sealed);
        drop(trie);
        let mut reader = LogStore::open_read_only(dir.path()).unwrap();
        assert!(matches!(reader.seal(), Err(LogError::ReadOnly)));
        drop(reader);
        let before: Vec<Vec<u8>> = shared
            .iter()
            .map(|(_, p)| std::fs::read(p).unwrap())
            .collect();
        let copy = tempfile::tempdir().unwrap();
        for (_, p) in shared {
            std::fs::hard_link(p, copy.path().join(p.file_name().unwrap())).unwrap();
        }
        std::fs::copy(&last.1, copy.path().join(last.1.file_name().unwrap())).unwrap();
        let mut linked =
            Trie::open(LogStore::open(copy.path(), &options).unwrap(), 3, root).unwrap();
        let later = blocks(
            &mut linked,
            &mut reference,
            &mut rng,
            &mut Vec::new(),
            7..=40,
        );
        linked.store().wait_for_compaction();
        assert!(
            segment_numbers(copy.path())[0] > 1,
            "the copy's compaction dropped no shared segment"
        );
        assert_eq!(linked.verify().unwrap(), later);
        drop(linked);
        for ((_, p), bytes) in shared.iter().zip(&before) {
            assert!(
                &std::fs::read(p).unwrap() == bytes,
                "{} changed",
                p.display()
            );
        }
        let store = LogStore::open(dir.path(), &options).unwrap();
        assert_eq!(
            (store.stored_meta().root, store.stored_meta().block),
            (root, 6)
        );
        let mut trie = Trie::open(store, 3, root).unwrap();
        assert_eq!(trie.verify().unwrap(), root);
        // Rewinding the original to an end inside a segment another log shares would cut that
        // log's file too: refused, nothing changed.
        let end = trie.store().end().unwrap();
        drop(trie);
        let other = tempfile::tempdir().unwrap();
        std::fs::hard_link(&shared[0].1, other.path().join(segment_name(1))).unwrap();
        let inside = LogEnd {
            segment: shared[0].0,
            offset: 1,
            ..end
        };
        let err = rewind(dir.path(), &inside).unwrap_err();
        assert!(err.to_string().contains("hard link"), "{err}");
        assert!(std::fs::read(&shared[0].1).unwrap() == before[0]);
        assert_eq!(scan::segment_files(dir.path()).unwrap().len(), sealed.len());
    }

    /// With the compaction on its own thread, dropping the last handle waits for the step
    /// under way and frees the directory at once: a log reopened right after each of many
    /// runs of compacting blocks opens (no lock still held by the thread) at the state the
    /// blocks committed, whole.
    #[test]
    fn a_dropped_handle_stops_its_compaction_thread_and_frees_the_log() {
        let options = LogOptions {
            compact_garbage: Some(0.3),
            compact_background: true,
            compact_slice_bytes: 2_000,
            ..small_segments(3)
        };
        let Logged {
            dir,
            options,
            mut trie,
            mut reference,
            mut rng,
            ..
        } = logged_with(options, 41, 0);
        let mut block = 0;
        let mut compacted = false;
        for _ in 0..15 {
            let root = blocks(
                &mut trie,
                &mut reference,
                &mut rng,
                &mut Vec::new(),
                block + 1..=block + 4,
            );
            block += 4;
            compacted |= scan::segment_files(dir.path()).unwrap()[0].0 > 1;
            drop(trie);
            let store = LogStore::open(dir.path(), &options).unwrap();
            assert_eq!(store.stored_meta().root, root);
            trie = Trie::open(store, 3, root).unwrap();
            assert_eq!(trie.verify().unwrap(), root);
        }
        assert!(compacted, "no segment was ever dropped");
    }

    /// A segment whose records disagree with the index (a live record replaced on disk by a
    /// valid record of another path: the CRCs hold, the index's entry is not found) is not
    /// compacted: nothing is dropped, and the index still points where it did.
    #[test]
    fn a_segment_whose_records_disagree_with_the_index_is_not_dropped() {
        let Logged { dir, mut trie, .. } = logged(8, 12);
        let first = segment_numbers(dir.path())[0];
        // A live node record in the first segment, and another path of the same length.
        let (key, loc, other) = {
            let index = trie.store().index();
            let (key, loc) = index
                .nodes
                .iter()
                .find(|(_, l)| l.seg() == first as usize && l.len().is_some())
                .expect("a live record in the first segment");
            let other = index
                .nodes
                .keys()
                .find(|k| *k != key && k.as_bytes().len() == key.as_bytes().len())
                .expect("another path of the same length");
            (key, loc, other)
        };
        let path = dir.path().join(segment_name(first));
        let mut bytes = std::fs::read(&path).unwrap();
        let at = loc.off() as usize;
        let len = loc.len().unwrap();
        let value = bytes[at + record::HEADER + key.as_bytes().len()..at + len].to_vec();
        let mut forged = Vec::new();
        record::push(&mut forged, loc.off(), Kind::Node, other.as_bytes(), &value);
        assert_eq!(forged.len(), len);
        bytes[at..at + len].copy_from_slice(&forged);
        std::fs::write(&path, &bytes).unwrap();
        let files = segment_numbers(dir.path());
        let err = trie.store_mut().compact(0.0).unwrap_err();
        assert!(
            matches!(err, LogError::Corrupt(_)) && err.to_string().contains("not compacted"),
            "{err}"
        );
        assert_eq!(segment_numbers(dir.path()), files);
        assert_eq!(trie.store().index().nodes.get(&key), Some(&loc));
        // The automatic compaction, a slice at a time, stops there for good (until a reopen):
        // no segment dropped, and it does not read the segment again block after block.
        let store = trie.store();
        let mut guard = store.inner.writer.lock().unwrap();
        let w = guard.as_mut().unwrap();
        let mut err = None;
        for _ in 0..10_000 {
            if let Err(e) = store.compact_step(w, 0.0) {
                err = Some(e);
                break;
            }
        }
        let err = err.expect("the damaged segment is met");
        assert!(err.to_string().contains("not compacted"), "{err}");
        assert!(w.halted && w.cursor.is_none());
        assert_eq!(segment_numbers(dir.path()), files);
        // Not halted, a step at share 0 would start on a segment again.
        store.compact_step(w, 0.0).unwrap();
        assert!(w.cursor.is_none());
        drop(guard);
        let err = trie.store_mut().compact(0.0).unwrap_err();
        assert!(matches!(err, LogError::Invalid(_)), "{err}");
    }

    /// The automatic compaction does not start on a segment whose copies the free space
    /// cannot hold (they come before its drop, and would only take the blocks' room): it
    /// waits, and starts once there is room.
    #[test]
    fn the_automatic_compaction_waits_for_room_to_start() {
        let Logged {
            dir, trie, root, ..
        } = logged(10, 60);
        let files = segment_numbers(dir.path());
        let store = trie.store();
        let mut guard = store.inner.writer.lock().unwrap();
        let w = guard.as_mut().unwrap();
        crate::tests::plant_room(&[64 << 10]);
        for _ in 0..3 {
            store.compact_step(w, 0.0).unwrap();
            assert!(w.cursor.is_none() && w.short_of_room);
        }
        assert_eq!(segment_numbers(dir.path()), files);
        crate::tests::plant_room(&[]);
        store.compact_step(w, 0.0).unwrap();
        assert!(!w.short_of_room);
        let mut dropped = false;
        for _ in 0..10_000 {
            store.compact_step(w, 0.0).unwrap();
            if segment_numbers(dir.path()) != files {
                dropped = true;
                break;
            }
        }
        assert!(dropped, "no segment was dropped once there was room");
        drop(guard);
        assert_eq!(trie.store().stored_meta().root, root);
        let mut trie = trie;
        assert_eq!(trie.verify().unwrap(), root);
    }

    /// Short of room for the segment with the most garbage, the automatic compaction starts on
    /// the one with the most garbage among those that fit.
    #[test]
    fn the_automatic_compaction_takes_the_best_segment_that_fits() {
        let Logged { dir, trie, .. } = logged(11, 60);
        let store = trie.store();
        let mut guard = store.inner.writer.lock().unwrap();
        let w = guard.as_mut().unwrap();
        let present = store.present_segments();
        let due = store.sealed(w, &present).unwrap();
        let need = |s: &Sealed| copy_room(s.len - s.garbage);
        let best = due
            .iter()
            .max_by(|a, b| a.share().total_cmp(&b.share()))
            .unwrap();
        // Room for a segment that needs less than the best one, and for no more.
        let room = due
            .iter()
            .map(need)
            .filter(|&n| n < need(best))
            .max()
            .expect("a segment needing less room than the one with the most garbage");
        let expected = due
            .iter()
            .filter(|s| need(s) <= room)
            .max_by(|a, b| a.share().total_cmp(&b.share()))
            .unwrap()
            .n;
        assert_ne!(expected, best.n);
        crate::tests::plant_room(&[room]);
        store.compact_step(w, 0.0).unwrap();
        crate::tests::plant_room(&[]);
        assert!(!w.short_of_room);
        // Under way, or (the log far over the share) compacted whole at once.
        let files = segment_numbers(dir.path());
        match &w.cursor {
            Some(c) => assert_eq!(c.seg, expected),
            None => assert!(
                !files.contains(&expected),
                "{expected} not dropped: {files:?}"
            ),
        }
        assert!(
            files.contains(&best.n),
            "the best one, which does not fit, was taken"
        );
    }

    /// `compact_to` takes the sealed segments with the most garbage first (each dropped one
    /// had at least the garbage share of every sealed one it kept) until the log's garbage is
    /// at most the share, and does nothing while it is below.
    #[test]
    fn compact_to_takes_the_emptiest_segments_first_down_to_the_share() {
        let Logged {
            dir,
            mut trie,
            root,
            ..
        } = logged(21, 30);
        let garbage_share = |store: &LogStore| {
            let i = store.info();
            i.garbage_bytes() as f64 / i.log_bytes as f64
        };
        let before = garbage_share(trie.store());
        let last = *segment_numbers(dir.path()).last().unwrap();
        let shares: Vec<(u32, f64)> = {
            let index = trie.store().index();
            segment_numbers(dir.path())
                .into_iter()
                .filter(|n| *n != last)
                .map(|n| {
                    let len = std::fs::metadata(dir.path().join(segment_name(n)))
                        .unwrap()
                        .len();
                    let live = index.seg_live[n as usize];
                    (n, len.saturating_sub(live) as f64 / len as f64)
                })
                .collect()
        };
        let none = trie.store_mut().compact_to(before + 0.01).unwrap();
        assert!(none.dropped.is_empty(), "{none:?}");
        let max = before * 0.7;
        let c = trie.store_mut().compact_to(max).unwrap();
        assert!(!c.dropped.is_empty());
        let after = garbage_share(trie.store());
        assert!(after <= max + 0.02, "{before} -> {after}, max {max}");
        let share_of = |n: &u32| shares.iter().find(|(m, _)| m == n).unwrap().1;
        let least_dropped = c.dropped.iter().map(share_of).fold(f64::MAX, f64::min);
        let most_kept = shares
            .iter()
            .filter(|(n, _)| !c.dropped.contains(n))
            .map(|(_, s)| *s)
            .fold(0.0, f64::max);
        assert!(
            least_dropped >= most_kept,
            "{shares:?} dropped {:?}",
            c.dropped
        );
        assert_eq!(trie.store().stored_meta().root, root);
        assert_eq!(trie.verify().unwrap(), root);
        for bad in [-0.5, 1.01, f64::NAN] {
            assert!(matches!(
                trie.store_mut().compact_to(bad),
                Err(LogError::Invalid(_))
            ));
        }
    }

    /// A compaction writes its copies before it removes any segment, so it takes only the
    /// segments whose live records fit in the free space (it used to copy until the disk was
    /// full, then fail with nothing freed), passing over an older one that does not fit for a
    /// newer one that does, and goes on in rounds as the drops free room: with room for one
    /// segment's copies at a time it still drops them all. With no room for any, `compact`
    /// fails naming the one that needs the least and how much, and `compact_to` does nothing.
    #[test]
    fn a_compaction_takes_what_fits_in_the_free_space_round_by_round() {
        use crate::tests::plant_room;
        let Logged {
            dir,
            mut trie,
            root,
            ..
        } = logged(23, 30);
        let sealed: Vec<u32> = {
            let mut n = segment_numbers(dir.path());
            n.pop();
            n
        };
        assert!(sealed.len() >= 4, "{sealed:?}");
        let needs: Vec<u64> = {
            let index = trie.store().index();
            sealed
                .iter()
                .map(|n| copy_room(index.seg_live[*n as usize]))
                .collect()
        };
        // The segment needing the least, newer than one needing more (the seeded log has one):
        // with room for it alone, it is the one taken.
        let least = needs.iter().copied().min().unwrap();
        let at = needs.iter().position(|n| *n == least).unwrap();
        assert!(
            at > 0 && needs.iter().filter(|n| **n == least).count() == 1,
            "the fixture no longer has a unique least need after the oldest: {needs:?}"
        );
        // None fits: refused, nothing changed.
        plant_room(&[least - 1]);
        let e = trie.store_mut().compact(0.0).unwrap_err();
        assert!(
            matches!(&e, LogError::Io { error, .. } if error.kind() == std::io::ErrorKind::StorageFull),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "{}: compacting it needs about {} MiB free",
                segment_name(sealed[at]),
                least.div_ceil(1 << 20)
            )) && text.contains("MiB are free"),
            "{text}"
        );
        let c = trie.store_mut().compact_to(0.0).unwrap();
        assert!(
            c.dropped.is_empty() && c.left_for_room.len() == sealed.len(),
            "{c:?}"
        );
        assert_eq!(segment_numbers(dir.path())[..sealed.len()], sealed[..]);
        // Room for that segment's copies only, then for none: the older ones are passed over,
        // it is dropped, the rest are left for lack of room (the drop is reported, not lost in
        // an error).
        plant_room(&[least, 1 << 20]);
        let c = trie.store_mut().compact(0.0).unwrap();
        let rest: Vec<u32> = sealed
            .iter()
            .copied()
            .filter(|n| *n != sealed[at])
            .collect();
        assert_eq!(
            (&c.dropped[..], &c.left_for_room[..]),
            (&[sealed[at]][..], &rest[..])
        );
        assert!(!dir.path().join(segment_name(sealed[at])).exists());
        // Room for about one segment's copies at a time: all dropped, over rounds.
        let most = needs.iter().copied().max().unwrap();
        plant_room(&[most + most / 2]);
        let c = trie.store_mut().compact(0.0).unwrap();
        plant_room(&[]);
        let mut dropped = c.dropped.clone();
        dropped.sort_unstable();
        assert_eq!(dropped, rest, "{c:?}");
        assert!(c.left_for_room.is_empty(), "{c:?}");
        assert!(
            sealed
                .iter()
                .all(|n| !dir.path().join(segment_name(*n)).exists())
        );
        assert_eq!(trie.store().stored_meta().root, root);
        assert_eq!(trie.verify().unwrap(), root);
    }

    /// The automatic compaction spans blocks: a segment is read back a slice per block (its
    /// place kept between them), dropped once read to its end, the roots those blocks commit
    /// stay the memory trie's; a log reopened while one is half done opens at the same state
    /// and whole, and the compaction starts over and finishes.
    #[test]
    fn a_compaction_spread_over_blocks_keeps_its_place_and_survives_a_reopen() {
        let options = LogOptions {
            compact_garbage: Some(0.5),
            // Inside the blocks' writes: the test looks at the writer's place after each.
            compact_background: false,
            compact_slice_bytes: 1_500,
            ..small_segments(3)
        };
        let Logged {
            dir,
            options,
            mut trie,
            mut reference,
            mut rng,
            ..
        } = logged_with(options, 33, 0);
        let mut written = Vec::new();
        let cursor = |t: &Trie<LogStore>| {
            let guard = t.store().inner.writer.lock().unwrap();
            guard
                .as_ref()
                .unwrap()
                .cursor
                .as_ref()
                .map(|c| (c.seg, c.pos))
        };
        let mut block = 0;
        // Blocks until a compaction is half done (blocks check their roots as they go).
        let (seg, pos) = loop {
            block += 1;
            blocks(
                &mut trie,
                &mut reference,
                &mut rng,
                &mut written,
                block..=block,
            );
            if let Some((seg, pos)) = cursor(&trie)
                && pos > 0
            {
                break (seg, pos);
            }
            assert!(block < 200, "no compaction started");
        };
        assert!(dir.path().join(segment_name(seg)).exists());
        // Its place moves on block by block until the segment goes, and each slice reads
        // what it goes through, not the rest of the segment.
        let mut last = pos;
        loop {
            block += 1;
            scan::READ_BYTES.with(|r| r.set(0));
            blocks(
                &mut trie,
                &mut reference,
                &mut rng,
                &mut written,
                block..=block,
            );
            match cursor(&trie) {
                Some((s, p)) if s == seg => {
                    assert!(p > last, "{p} after {last}");
                    let read = scan::READ_BYTES.with(|r| r.get());
                    assert!(
                        read <= p - last + record::HEADER as u64,
                        "a slice from {last} to {p} read {read} bytes"
                    );
                    last = p;
                }
                _ => break,
            }
        }
        assert!(!dir.path().join(segment_name(seg)).exists());
        // Reopened half way through another: the same state, whole.
        let half = loop {
            block += 1;
            blocks(
                &mut trie,
                &mut reference,
                &mut rng,
                &mut written,
                block..=block,
            );
            if cursor(&trie).is_some_and(|(_, p)| p > 0) {
                break cursor(&trie).unwrap().0;
            }
            assert!(block < 400, "no second compaction started");
        };
        let root = trie.root();
        drop(trie);
        let store = LogStore::open(dir.path(), &options).unwrap();
        assert_eq!(store.stored_meta().root, root);
        let mut trie = Trie::open(store, 3, root).unwrap();
        assert_eq!(trie.verify().unwrap(), root);
        for _ in 0..100 {
            if !dir.path().join(segment_name(half)).exists() {
                break;
            }
            block += 1;
            blocks(
                &mut trie,
                &mut reference,
                &mut rng,
                &mut written,
                block..=block,
            );
        }
        assert!(
            !dir.path().join(segment_name(half)).exists(),
            "{half} was never dropped"
        );
        let root = trie.root();
        assert_eq!(trie.verify().unwrap(), root);
    }

    /// Copies every segment file of `from` into `to` (created), except those numbered in
    /// `skip`.
    fn copy_segments(from: &Path, to: &Path, skip: &[u32]) {
        std::fs::create_dir_all(to).unwrap();
        for (n, path) in scan::segment_files(from).unwrap() {
            if !skip.contains(&n) {
                std::fs::copy(&path, to.join(segment_name(n))).unwrap();
            }
        }
    }

    /// A segment a compaction dropped that a writer's open cannot remove refuses the writer,
    /// naming the segment and why (a reader skips it): it is never opened as part of the log.
    /// The removal is made to fail by freezing the log's directory: `chattr +i` (root, on ext4
    /// as on this project's machine), else `chmod 0555` (any other user); where neither
    /// stops a removal, the test says so and checks nothing.
    #[test]
    fn a_dropped_segment_that_cannot_be_removed_refuses_a_writer_by_name() {
        use std::os::unix::fs::PermissionsExt as _;
        let work = tempfile::tempdir().unwrap();
        let (dir, before_dir) = (work.path().join("log"), work.path().join("before"));
        let options = small_segments(4);
        let mut rng = StdRng::seed_from_u64(78);
        let mut reference = Trie::new(MemoryStore::new(), 4).unwrap();
        let mut trie = Trie::new(LogStore::open(&dir, &options).unwrap(), 4).unwrap();
        let root = blocks(&mut trie, &mut reference, &mut rng, &mut Vec::new(), 1..=20);
        copy_segments(&dir, &before_dir, &[]);
        let dropped = trie.store_mut().compact(0.4).unwrap().dropped;
        drop(trie);
        // The first dropped segment back in place, as a crash before its removal leaves it.
        let stuck = dir.join(segment_name(dropped[0]));
        std::fs::copy(before_dir.join(segment_name(dropped[0])), &stuck).unwrap();
        /// Sets or clears the directory's immutable flag (`chattr ±i`, by its ioctl: no child
        /// process, whose moment between fork and exec would hold every other test's writer
        /// lock open); whether that worked.
        fn immutable(dir: &Path, on: bool) -> bool {
            use rustix::fs::{IFlags, ioctl_getflags, ioctl_setflags};
            let Ok(handle) = std::fs::File::open(dir) else {
                return false;
            };
            ioctl_getflags(&handle).is_ok_and(|flags| {
                let flags = if on {
                    flags | IFlags::IMMUTABLE
                } else {
                    flags - IFlags::IMMUTABLE
                };
                ioctl_setflags(&handle, flags).is_ok()
            })
        }
        /// Thaws the directory (both ways; the one not used is a no-op), however the test ends.
        struct Thaw<'a>(&'a Path);
        impl Drop for Thaw<'_> {
            fn drop(&mut self) {
                immutable(self.0, false);
                let _ = std::fs::set_permissions(self.0, std::fs::Permissions::from_mode(0o755));
            }
        }
        let guard = Thaw(&dir);
        if !immutable(&dir, true) {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        // Frozen only if a new name cannot be made there (root passes a mode's checks).
        if std::fs::write(dir.join("probe"), b"").is_ok() {
            eprintln!("skipped: neither `chattr +i` nor `chmod 0555` stops a removal here");
            return;
        }
        let err = LogStore::open(&dir, &options).unwrap_err();
        assert!(
            matches!(&err, LogError::DroppedSegment { path, .. } if *path == stuck),
            "{err}"
        );
        let reader = LogStore::open_read_only(&dir).unwrap();
        assert_eq!(reader.stored_meta().root, root);
        drop((reader, guard));
        let writer = LogStore::open(&dir, &options).unwrap();
        assert_eq!(writer.interrupted_drops(), &[dropped[0]]);
        assert!(!stuck.exists());
    }

    /// A crash at any instant of a compaction leaves a log that opens at the same state with
    /// the same blobs: cut anywhere in what it appended (the old segments then all still
    /// there), or after its last block with any number of the dropped segments not yet
    /// removed (the oldest go first); the next writer removes what is left. A segment missing
    /// that no compaction dropped is refused.
    #[test]
    fn a_compaction_cut_short_at_any_point_opens_at_the_same_state() {
        let work = tempfile::tempdir().unwrap();
        let (dir, before_dir) = (work.path().join("log"), work.path().join("before"));
        let options = small_segments(4);
        let mut rng = StdRng::seed_from_u64(77);
        let mut reference = Trie::new(MemoryStore::new(), 4).unwrap();
        let mut trie = Trie::new(LogStore::open(&dir, &options).unwrap(), 4).unwrap();
        let root = blocks(&mut trie, &mut reference, &mut rng, &mut Vec::new(), 1..=20);
        let expected = contents(trie.store());
        let start = trie.store().end().unwrap();
        copy_segments(&dir, &before_dir, &[]);
        let c = trie.store_mut().compact(0.4).unwrap();
        assert!(c.dropped.len() >= 2, "{c:?}");
        let end = trie.store().end().unwrap();
        assert_eq!(end.meta, start.meta);
        drop(trie);
        // Returns the dropped segments the open removed.
        let check = |image: &Path, what: &str| {
            let store = LogStore::open(image, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(store.stored_meta(), start.meta, "{what}");
            assert_same(&contents(&store), &expected, what);
            let finished = store.interrupted_drops().to_vec();
            let mut trie = Trie::open(store, 4, root).unwrap();
            assert_eq!(trie.verify().unwrap(), root, "{what}");
            finished
        };
        // Cut in what the compaction appended, with every old segment still in place.
        let appended: Vec<u32> = (start.segment..=end.segment).collect();
        let mut cuts = 0;
        for &seg in &appended {
            let full = std::fs::metadata(dir.join(segment_name(seg)))
                .unwrap()
                .len();
            let from = if seg == start.segment {
                start.offset
            } else {
                0
            };
            let step = ((full - from) / 9).max(1);
            let last_byte = (full > from).then(|| full - 1);
            for cut in (from..=full).step_by(step as usize).chain(last_byte) {
                let image = work.path().join(format!("cut-{seg}-{cut}"));
                copy_segments(&before_dir, &image, &[]);
                for &later in appended.iter().filter(|&&s| s <= seg) {
                    std::fs::copy(
                        dir.join(segment_name(later)),
                        image.join(segment_name(later)),
                    )
                    .unwrap();
                }
                crate::cut_file(&image.join(segment_name(seg)), cut).unwrap();
                check(&image, &format!("cut at {seg}:{cut}"));
                std::fs::remove_dir_all(&image).unwrap();
                cuts += 1;
            }
        }
        assert!(cuts >= 10);
        // Whole, with the newest dropped segments still in the directory (removed oldest first).
        for left in 1..=c.dropped.len() {
            let image = work.path().join(format!("left-{left}"));
            copy_segments(&dir, &image, &[]);
            for &n in &c.dropped[c.dropped.len() - left..] {
                std::fs::copy(
                    before_dir.join(segment_name(n)),
                    image.join(segment_name(n)),
                )
                .unwrap();
            }
            let finished = check(&image, &format!("{left} dropped segments left"));
            assert_eq!(finished, c.dropped[c.dropped.len() - left..], "{left} left");
            // The open removed them.
            for &n in &c.dropped {
                assert!(!image.join(segment_name(n)).exists(), "{n} left");
            }
            let finished = check(&image, &format!("{left} dropped segments left, reopened"));
            assert!(finished.is_empty(), "{finished:?}");
        }
        // A segment missing that no compaction dropped is damage.
        let kept = segment_numbers(&dir);
        let image = work.path().join("lost");
        copy_segments(&dir, &image, &[kept[0]]);
        let err = LogStore::open(&image, &options).unwrap_err();
        assert!(
            matches!(err, LogError::Corrupt(_))
                && err.to_string().contains("no compaction dropped it"),
            "{err}"
        );
    }

    /// A compaction refuses what it cannot do and changes nothing then: a read-only handle, a
    /// share outside 0..=1, a handle another commit left behind, a damaged record in a
    /// segment it copies from (every file stays); nothing to drop is not an error; and a log
    /// cannot be rewound past a compaction.
    #[test]
    fn a_compaction_refuses_damage_and_stale_handles_and_blocks_a_rewind_past_it() {
        let Logged {
            dir,
            options,
            mut trie,
            mut reference,
            mut rng,
            ..
        } = logged(5, 10);
        for bad in [-0.1, 1.5, f64::NAN] {
            let err = trie.store_mut().compact(bad).unwrap_err();
            assert!(matches!(err, LogError::Invalid(_)), "{err}");
        }
        let mut ro = LogStore::open_read_only(dir.path()).unwrap();
        assert!(matches!(ro.compact(0.5), Err(LogError::ReadOnly)));
        let mut stale = trie.store().clone();
        blocks(
            &mut trie,
            &mut reference,
            &mut rng,
            &mut Vec::new(),
            11..=11,
        );
        assert!(matches!(stale.compact(0.5), Err(LogError::Conflict { .. })));
        // Only segments with nothing live at 1.0: none here.
        let files = segment_numbers(dir.path());
        let none = trie.store_mut().compact(1.0).unwrap();
        assert!(none.dropped.is_empty(), "{none:?}");
        // A flipped byte in the first segment, under the open handle.
        let first = dir.path().join(segment_name(files[0]));
        let mut bytes = std::fs::read(&first).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        std::fs::write(&first, &bytes).unwrap();
        let err = trie.store_mut().compact(0.0).unwrap_err();
        assert!(matches!(err, LogError::Corrupt(_)), "{err}");
        assert_eq!(segment_numbers(dir.path()), files);
        bytes[at] ^= 0x40;
        std::fs::write(&first, &bytes).unwrap();
        // An end in the segment being written, which the compaction keeps.
        let end = trie.store().end().unwrap();
        let c = trie.store_mut().compact(0.0).unwrap();
        assert!(!c.dropped.contains(&end.segment));
        assert!(!c.dropped.is_empty());
        drop((trie, stale, ro));
        let err = rewind(dir.path(), &end).unwrap_err();
        assert!(
            matches!(err, LogError::Corrupt(_)) && err.to_string().contains("compaction"),
            "{err}"
        );
        let store = LogStore::open(dir.path(), &options).unwrap();
        assert_eq!(store.stored_meta().root, reference.root());
    }
}
