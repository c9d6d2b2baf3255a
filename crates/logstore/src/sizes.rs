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
//! The file is only a hint: written (to a temporary file, then renamed) by every writable
//! open after its scan, never synced, and ignored when it is missing, unreadable, from
//! another version, or names more entries than the log could hold (a record is at least
//! [`HEADER`] bytes). A table it made too large (a state that shrank, a file from elsewhere)
//! is cut back to its entries after the scan, so the hint can cost a moment of memory, never
//! more than that.

use crate::record::HEADER;
use crate::{INDEX_ROOM, Index};
use std::path::Path;

/// The file in a log's directory that holds the index's table sizes
/// ([`crate::INDEX_SIZES_FILE`]).
pub(crate) const SIZES_FILE: &str = "index-sizes";

/// The most bytes [`SIZES_FILE`] may hold (it holds about 100).
const MAX_FILE: u64 = 1024;

/// The first line of [`SIZES_FILE`].
const VERSION_LINE: &str = "bintrie log index sizes 1";

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

    fn to_text(self) -> String {
        let mut text = format!("{VERSION_LINE}\n");
        for (name, n) in NAMES.iter().zip(self.0) {
            text.push_str(&format!("{name} {n}\n"));
        }
        text
    }

    /// Parses [`Sizes::to_text`]'s output; `None` for anything else.
    fn parse(text: &str) -> Option<Sizes> {
        let mut lines = text.lines();
        if lines.next()? != VERSION_LINE {
            return None;
        }
        let mut sizes = [0usize; 5];
        for (name, size) in NAMES.iter().zip(&mut sizes) {
            let (key, value) = lines.next()?.split_once(' ')?;
            if key != *name || value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *size = value.parse().ok()?;
        }
        lines.next().is_none().then_some(Sizes(sizes))
    }
}

/// The sizes in `dir`'s [`SIZES_FILE`], when it holds sizes that a log of `log_bytes` bytes
/// could have (together at most one entry per [`HEADER`] bytes); `None` otherwise.
pub(crate) fn read(dir: &Path, log_bytes: u64) -> Option<Sizes> {
    use std::io::Read as _;
    // The file is a few lines: reading at most MAX_FILE bytes, a larger one (it is not ours)
    // is refused without being read whole.
    let mut text = Vec::new();
    std::fs::File::open(dir.join(SIZES_FILE))
        .ok()?
        .take(MAX_FILE + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_FILE {
        return None;
    }
    let sizes = Sizes::parse(std::str::from_utf8(&text).ok()?)?;
    let total = sizes
        .0
        .iter()
        .try_fold(0u64, |t, &n| t.checked_add(n as u64))?;
    let most = log_bytes / HEADER as u64;
    if total > most {
        tracing::debug!(dir = %dir.display(), total, most, "index sizes beyond what the log can hold: ignored");
        return None;
    }
    Some(sizes)
}

/// Writes `sizes` into `dir`'s [`SIZES_FILE`] (a temporary file renamed over it, not synced:
/// a torn file is ignored at the next open). A failure is logged, not returned: the hint only
/// saves time.
pub(crate) fn write(dir: &Path, sizes: Sizes) {
    let tmp = dir.join(format!("{SIZES_FILE}.tmp"));
    let written = std::fs::write(&tmp, sizes.to_text())
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
        assert_eq!(Sizes::parse(&sizes.to_text()), Some(sizes));
        for bad in [
            "",
            "bintrie log index sizes 2\nupper 1\nlower 1\nlong 1\nstems 1\ncode 1\n",
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
    fn sizes_beyond_what_the_log_can_hold_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), Sizes([1, 10, 0, 10, 0]));
        assert_eq!(read(dir.path(), 210), Some(Sizes([1, 10, 0, 10, 0])));
        assert_eq!(read(dir.path(), 209), None, "21 entries need 210 bytes");
        write(dir.path(), Sizes([usize::MAX, usize::MAX, 1, 1, 1]));
        assert_eq!(read(dir.path(), u64::MAX), None, "the total overflows");
        assert_eq!(read(&dir.path().join("missing"), 1 << 40), None);
        // A file far larger than sizes ever are is refused without being read whole.
        let mut big = Sizes([1, 1, 1, 1, 1]).to_text();
        big.push_str(&"\n".repeat(MAX_FILE as usize));
        std::fs::write(dir.path().join(SIZES_FILE), big).unwrap();
        assert_eq!(read(dir.path(), 1 << 40), None);
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
