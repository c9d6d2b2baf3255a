//! The index's table sizes, kept beside the log ([`SIZES_FILE`]) so that the next open can
//! size its tables before the scan instead of growing them through it.
//!
//! A table that grows moves every entry into a new table twice its size, and the old one and
//! the new one are both in memory while it does: opening the 16M-stem study log peaked at
//! 3.3 GB for an index of 1.7 GB, the 64M one at 14.7 GB for 6.7 GB (a third of that open's
//! time went to the kernel zeroing the pages of each new table). Sized from the file, the
//! same opens (`bintrie info`) peak at 2.0 and 7.7 GB and take 6.3-9.3 s and 30.5-32.0 s
//! instead of 9.6-10.4 s and 41.8-50.9 s.
//!
//! The sizes are only a hint: written (to a temporary file, then renamed) by every writable
//! open after its scan, by a writer's close and by a finished bulk load, never synced, and
//! ignored when they are missing, unreadable, from another version, or name more entries than
//! the log could hold (a record is at least [`HEADER`] bytes); an open warns of a file that is
//! there but not one of ours. A table they made too large (a
//! state that shrank, a file from elsewhere) is cut back to its entries after the scan, so
//! the hint can cost a moment of memory, never more than that.
//!
//! The file also names the block the log held when it was written (version 2; version 1
//! files name none), and it is written only once that block is synced. A crash can tear only
//! what was written after the last sync, so a log that opens at an earlier block than its
//! file names has lost blocks that were on the device: its segments were cut, emptied or
//! replaced. The open refuses it ([`crate::LogError::Corrupt`]) instead of carrying on from
//! the older state as though it were a torn tail.

use crate::record::HEADER;
use crate::{INDEX_ROOM, Index};
use std::path::Path;

/// The file in a log's directory that holds the index's table sizes
/// ([`crate::INDEX_SIZES_FILE`]).
pub(crate) const SIZES_FILE: &str = "index-sizes";

/// The temporary [`SIZES_FILE`] is written to before it is renamed over it (a crash between
/// the two leaves it).
pub(crate) const TMP_FILE: &str = "index-sizes.tmp";

/// The most bytes [`SIZES_FILE`] may hold (it holds about 100).
const MAX_FILE: u64 = 1024;

/// The first line of [`SIZES_FILE`] as written now: the sizes, then the block.
const VERSION_LINE: &str = "bintrie log index sizes 2";

/// The first line of the files written before the block was added (read, never written).
const VERSION_1_LINE: &str = "bintrie log index sizes 1";

/// The entries of each of the index's tables, in the file's order: the top paths, the other
/// paths of one word, the long paths, the stems, the code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sizes([usize; 5]);

/// The names of [`Sizes`]' fields in the file.
const NAMES: [&str; 5] = ["upper", "lower", "long", "stems", "code"];

impl Sizes {
    /// The sizes of `index`'s tables.
    pub(crate) fn of(index: &Index) -> Sizes {
        Sizes([
            index.nodes.upper.len(),
            index.nodes.lower.len(),
            index.nodes.long.len(),
            index.stems.len(),
            index.code.len(),
        ])
    }

    /// The entries of every table together.
    #[cfg(test)]
    pub(crate) fn entries(self) -> usize {
        self.0.iter().sum()
    }

    /// The file's text: these sizes, and `block` as the block the log held.
    fn to_text(self, block: u64) -> String {
        let mut text = format!("{VERSION_LINE}\n");
        for (name, n) in NAMES.iter().zip(self.0) {
            text.push_str(&format!("{name} {n}\n"));
        }
        text.push_str(&format!("block {block}\n"));
        text
    }

    /// Parses [`Sizes::to_text`]'s output (the block `Some`) or a version 1 file's (the
    /// block `None`); `None` for anything else.
    fn parse(text: &str) -> Option<(Sizes, Option<u64>)> {
        let mut lines = text.lines();
        let with_block = match lines.next()? {
            VERSION_LINE => true,
            VERSION_1_LINE => false,
            _ => return None,
        };
        let mut field = |name: &str| -> Option<u64> {
            let (key, value) = lines.next()?.split_once(' ')?;
            if key != name || value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            value.parse().ok()
        };
        let mut sizes = [0usize; 5];
        for (name, size) in NAMES.iter().zip(&mut sizes) {
            *size = usize::try_from(field(name)?).ok()?;
        }
        let block = if with_block {
            Some(field("block")?)
        } else {
            None
        };
        lines.next().is_none().then_some((Sizes(sizes), block))
    }
}

/// What [`SIZES_FILE`] says, each part `None` where it says nothing usable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hint {
    /// The tables' sizes, when a log of the given bytes could hold them.
    pub(crate) sizes: Option<Sizes>,
    /// The block the log held (synced) when the file was written.
    pub(crate) block: Option<u64>,
    /// The file is there but is not one this project writes (damaged, cut, from elsewhere):
    /// an open says so, since without its block it cannot check for lost blocks.
    pub(crate) unreadable: bool,
}

/// What `dir`'s [`SIZES_FILE`] says: its sizes when a log of `log_bytes` bytes could have
/// them (together at most one entry per [`HEADER`] bytes), and its block. Both `None` when the
/// file is missing, unreadable or not one of ours.
#[cfg(test)]
pub(crate) fn read(dir: &Path, log_bytes: u64) -> Hint {
    read_unbounded(dir).bounded(dir, log_bytes)
}

/// What `dir`'s [`SIZES_FILE`] says, its sizes not yet bounded by the log's bytes (an open
/// reads the file before it lists the segments: see [`crate::LogStore::open`]).
pub(crate) fn read_unbounded(dir: &Path) -> Hint {
    parse_file(dir).map_or_else(
        || Hint {
            unreadable: std::fs::symlink_metadata(dir.join(SIZES_FILE)).is_ok(),
            ..Hint::default()
        },
        |(sizes, block)| Hint {
            sizes: Some(sizes),
            block,
            unreadable: false,
        },
    )
}

impl Hint {
    /// This hint with its sizes dropped unless a log of `log_bytes` bytes could hold them
    /// (together at most one entry per [`HEADER`] bytes; an overflowing total is too many).
    pub(crate) fn bounded(self, dir: &Path, log_bytes: u64) -> Hint {
        let most = log_bytes / HEADER as u64;
        let fits = |sizes: &Sizes| {
            let total = sizes
                .0
                .iter()
                .try_fold(0u64, |t, &n| t.checked_add(n as u64));
            let fits = total.is_some_and(|t| t <= most);
            if !fits {
                tracing::debug!(dir = %dir.display(), ?total, most, "index sizes beyond what the log can hold: ignored");
            }
            fits
        };
        Hint {
            sizes: self.sizes.filter(fits),
            ..self
        }
    }
}

/// The error of an open whose log ends at block `found` though `dir`'s [`SIZES_FILE`] says it
/// held block `held` once synced: blocks that were on the device are gone.
pub(crate) fn lost_blocks(dir: &Path, found: u64, held: u64) -> crate::LogError {
    crate::LogError::Corrupt(format!(
        "{}: the log ends at block {found}, yet it held block {held} on the device when it \
         was last opened or closed ({SIZES_FILE}): its segments were cut, emptied or replaced \
         (a crash tears only a block never reported durable). Nothing was changed. Restore \
         the log from a copy, or remove {SIZES_FILE} to go on from block {found}",
        dir.display(),
    ))
}

/// The parsed [`SIZES_FILE`] of `dir`, if it is one.
fn parse_file(dir: &Path) -> Option<(Sizes, Option<u64>)> {
    use std::io::Read as _;
    // The file is a few lines: reading at most MAX_FILE bytes, a larger one (it is not ours)
    // is refused without being read whole. Only a regular file is opened: a FIFO there would
    // block the open (every command asks whether a directory holds a log, `holds_log`).
    let path = dir.join(SIZES_FILE);
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    std::fs::File::open(&path)
        .ok()?
        .take(MAX_FILE + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_FILE {
        return None;
    }
    Sizes::parse(std::str::from_utf8(&text).ok()?)
}

/// Writes `sizes` and `block` into `dir`'s [`SIZES_FILE`] (a temporary file renamed over it,
/// not synced: a torn file is ignored at the next open, an older one names an older block).
/// Call it only once `block` is synced. A failure is logged, not returned: without the file
/// the next open sizes nothing ahead and checks no block.
pub(crate) fn write(dir: &Path, sizes: Sizes, block: u64) {
    let tmp = dir.join(TMP_FILE);
    let written = std::fs::write(&tmp, sizes.to_text(block))
        .and_then(|()| std::fs::rename(&tmp, dir.join(SIZES_FILE)));
    if let Err(e) = written {
        tracing::debug!(dir = %dir.display(), error = %e, "could not write the index sizes");
        let _ = std::fs::remove_file(&tmp);
    }
}

impl Index {
    /// An empty index whose tables have room for `sizes` (where the memory is there: a table
    /// that cannot have it starts empty and grows, with a warning).
    pub(crate) fn with_sizes(sizes: Sizes) -> Index {
        let mut index = Index::default();
        let [upper, lower, long, stems, code] = sizes.0;
        let reserved = [
            index.nodes.upper.try_reserve(upper),
            index.nodes.lower.try_reserve(lower),
            index.nodes.long.try_reserve(long),
            index.stems.try_reserve(stems),
            index.code.try_reserve(code),
        ];
        if let Some(Err(e)) = reserved.into_iter().find(Result::is_err) {
            tracing::warn!(error = %e, "no memory to size the index's tables before the scan; they grow as it goes");
        }
        index
    }

    /// Cuts back every table with room for more than twice its entries and [`INDEX_ROOM`] (one
    /// a wrong [`SIZES_FILE`] made too large) to its entries.
    pub(crate) fn trim_oversized(&mut self) {
        fn trim<K: std::hash::Hash + Eq, V>(
            table: &mut std::collections::HashMap<K, V, foldhash::fast::RandomState>,
        ) {
            if table.capacity() > 2 * table.len() + INDEX_ROOM {
                table.shrink_to(table.len());
            }
        }
        trim(&mut self.nodes.upper);
        trim(&mut self.nodes.lower);
        trim(&mut self.nodes.long);
        trim(&mut self.stems);
        trim(&mut self.code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_back_as_written_and_anything_else_is_none() {
        let sizes = Sizes([1, 20, 0, 300, 4_000_000_000]);
        assert_eq!(Sizes::parse(&sizes.to_text(7)), Some((sizes, Some(7))));
        // A version 1 file (before the block) still sizes the index, and names no block.
        let v1 = "bintrie log index sizes 1\nupper 1\nlower 2\nlong 3\nstems 4\ncode 5\n";
        assert_eq!(Sizes::parse(v1), Some((Sizes([1, 2, 3, 4, 5]), None)));
        for bad in [
            "",
            "bintrie log index sizes 3\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nblock 1\n",
            "bintrie log index sizes 2\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\n",
            "bintrie log index sizes 2\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nblock -1\n",
            "bintrie log index sizes 2\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nblock 1\nmore 1\n",
            "bintrie log index sizes 2\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nblock 99999999999999999999\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nblock 1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems 1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\nmore 1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems 1\ncode -1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems +1\ncode 1\n",
            "bintrie log index sizes 1\nupper 1\nlower １\nlong 1\nstems 1\ncode 1\n",
            "bintrie log index sizes 1\nlower 1\nupper 1\nlong 1\nstems 1\ncode 1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems 99999999999999999999999\ncode 1\n",
            "bintrie log index sizes 1\nupper 1\nlower 1\nlong 1\nstems \ncode 1\n",
        ] {
            assert_eq!(Sizes::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sizes_beyond_what_the_log_can_hold_are_ignored_and_the_block_kept() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), Sizes([1, 10, 0, 10, 0]), 3);
        let sized = |sizes| Hint {
            sizes,
            block: Some(3),
            unreadable: false,
        };
        assert_eq!(read(dir.path(), 210), sized(Some(Sizes([1, 10, 0, 10, 0]))));
        assert_eq!(
            read(dir.path(), 209),
            sized(None),
            "21 entries need 210 bytes"
        );
        write(dir.path(), Sizes([usize::MAX, usize::MAX, 1, 1, 1]), 3);
        assert_eq!(
            read(dir.path(), u64::MAX),
            sized(None),
            "the total overflows"
        );
        assert_eq!(read(&dir.path().join("missing"), 1 << 40), Hint::default());
        // A file far larger than sizes ever are is refused without being read whole, and
        // said to be unreadable (an open warns), as is any file that is not one of ours.
        let unreadable = Hint {
            unreadable: true,
            ..Hint::default()
        };
        let mut big = Sizes([1, 1, 1, 1, 1]).to_text(3);
        big.push_str(&"\n".repeat(MAX_FILE as usize));
        std::fs::write(dir.path().join(SIZES_FILE), big).unwrap();
        assert_eq!(read(dir.path(), 1 << 40), unreadable);
        std::fs::write(dir.path().join(SIZES_FILE), b"garbage").unwrap();
        assert_eq!(read(dir.path(), 1 << 40), unreadable);
    }

    #[test]
    fn an_oversized_table_is_cut_back_and_a_sized_one_kept() {
        let mut index = Index::with_sizes(Sizes([0, 100_000, 0, 10, 0]));
        for i in 0..10u8 {
            index
                .stems
                .insert([i; 31], crate::Loc::new(1, 0, 1).unwrap());
        }
        let stems = index.stems.capacity();
        assert!(index.nodes.lower.capacity() >= 100_000);
        index.trim_oversized();
        assert!(
            index.nodes.lower.capacity() < 100,
            "{}",
            index.nodes.lower.capacity()
        );
        assert_eq!(
            index.stems.capacity(),
            stems,
            "10 entries in room for about 10"
        );
        assert_eq!(index.stems.len(), 10);
    }
}
