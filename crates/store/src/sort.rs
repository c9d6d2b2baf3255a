//! Sorting tree writes of any size in bounded memory ([`ExternalSort`]), and grouping sorted
//! writes into stems ([`stems_of`]) for [`StateStore::build_sorted`](crate::StateStore::build_sorted).

use crate::StoreError;
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::StemValues;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// One write as kept in memory and in a run: key, value, and its position in the input (for
/// equal keys the later write wins).
type Entry = (TreeKey, [u8; 32], u64);

/// Bytes of one entry in a run file: 32 key + 32 value + 8 sequence.
const RECORD: usize = 72;

/// Bytes of memory one buffered entry costs (the tuple and the `Vec`'s slack).
const IN_MEMORY: usize = std::mem::size_of::<Entry>();

/// An external merge sort of tree writes: [`push`](ExternalSort::push) writes in any order
/// (holding at most `budget` bytes of them; each full buffer is sorted and spilled to an
/// unnamed temporary file in `dir`), then [`finish`](ExternalSort::finish) merges the runs
/// into one stream sorted by key, one write per key: the one pushed last. Temporary files
/// vanish when the sorter (or the stream) is dropped, even on a crash.
#[derive(Debug)]
pub struct ExternalSort {
    dir: PathBuf,
    capacity: usize,
    buffer: Vec<Entry>,
    runs: Vec<File>,
    next_seq: u64,
    spilled_bytes: u64,
}

impl ExternalSort {
    /// A sorter spilling into `dir` that holds at most `budget` bytes of writes in memory (at
    /// least 1,024 writes).
    pub fn new(dir: impl AsRef<Path>, budget: usize) -> Self {
        ExternalSort {
            dir: dir.as_ref().to_path_buf(),
            capacity: (budget / IN_MEMORY).max(1024),
            buffer: Vec::new(),
            runs: Vec::new(),
            next_seq: 0,
            spilled_bytes: 0,
        }
    }

    /// Adds one write. Spills a sorted run when the buffer is full; errors are the temporary
    /// file's (a full disk: [`StoreError::DiskFull`]).
    pub fn push(&mut self, key: TreeKey, value: [u8; 32]) -> Result<(), StoreError> {
        if self.buffer.len() == self.buffer.capacity() {
            // Grow in steps of at most 2^20 writes, never past the budget: memory follows the
            // input, and an absurd budget is never allocated up front.
            let room = (self.capacity - self.buffer.len()).min(1 << 20);
            self.buffer.reserve_exact(room);
        }
        self.buffer.push((key, value, self.next_seq));
        self.next_seq += 1;
        if self.buffer.len() >= self.capacity {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes pushed so far.
    pub fn len(&self) -> u64 {
        self.next_seq
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.next_seq == 0
    }

    /// Bytes spilled to temporary files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.spilled_bytes
    }

    /// Sorts the buffer (by key, then input order), keeps the last write per key, and writes it
    /// as a run.
    fn spill(&mut self) -> Result<(), StoreError> {
        sort_last_wins(&mut self.buffer);
        let mut file = tempfile::tempfile_in(&self.dir)?;
        {
            let mut w = BufWriter::with_capacity(1 << 20, &mut file);
            for (k, v, seq) in &self.buffer {
                w.write_all(&k.to_bytes())?;
                w.write_all(v)?;
                w.write_all(&seq.to_le_bytes())?;
            }
            w.flush()?;
        }
        file.rewind()?;
        self.spilled_bytes += (self.buffer.len() * RECORD) as u64;
        self.runs.push(file);
        self.buffer.clear();
        Ok(())
    }

    /// The writes sorted by key, one per key (the last pushed). Runs held in memory when
    /// nothing was spilled.
    pub fn finish(mut self) -> Result<SortedWrites, StoreError> {
        if self.runs.is_empty() {
            sort_last_wins(&mut self.buffer);
            return Ok(SortedWrites {
                inner: Inner::Memory(std::mem::take(&mut self.buffer).into_iter()),
            });
        }
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        let mut readers: Vec<RunReader> = self
            .runs
            .drain(..)
            .map(|f| RunReader(BufReader::with_capacity(1 << 20, f)))
            .collect();
        let mut heap = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some((k, v, seq)) = r.next_entry()? {
                heap.push(Reverse((k, seq, v, i)));
            }
        }
        Ok(SortedWrites {
            inner: Inner::Merge { readers, heap },
        })
    }
}

/// Sorts by key, then input order, and keeps only the last write of each key.
fn sort_last_wins(v: &mut Vec<Entry>) {
    v.sort_unstable_by_key(|e| (e.0, e.2));
    // `dedup_by` keeps the first of equal neighbours: walk from the back instead.
    v.reverse();
    v.dedup_by(|later, earlier| later.0 == earlier.0);
    v.reverse();
}

struct RunReader(BufReader<File>);

impl RunReader {
    fn next_entry(&mut self) -> Result<Option<Entry>, StoreError> {
        let mut rec = [0u8; RECORD];
        match self.0.read_exact(&mut rec) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let key = TreeKey::from_bytes(rec[..32].try_into().unwrap_or([0; 32]));
        let value: [u8; 32] = rec[32..64].try_into().unwrap_or([0; 32]);
        let seq = u64::from_le_bytes(rec[64..].try_into().unwrap_or([0; 8]));
        Ok(Some((key, value, seq)))
    }
}

/// The next write of one run in the merge: (key, seq, value, run), smallest key first, then
/// earliest.
type Head = (TreeKey, u64, [u8; 32], usize);

enum Inner {
    Memory(std::vec::IntoIter<Entry>),
    Merge {
        readers: Vec<RunReader>,
        heap: BinaryHeap<Reverse<Head>>,
    },
}

/// The stream [`ExternalSort::finish`] returns: `(key, value)` in increasing key order, one per
/// key. A read error of a run is yielded once and ends the stream.
pub struct SortedWrites {
    inner: Inner,
}

impl std::fmt::Debug for SortedWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedWrites").finish_non_exhaustive()
    }
}

impl Iterator for SortedWrites {
    type Item = Result<(TreeKey, [u8; 32]), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            Inner::Memory(it) => it.next().map(|(k, v, _)| Ok((k, v))),
            Inner::Merge { readers, heap } => {
                let Reverse((key, _, mut value, run)) = heap.pop()?;
                let mut refill = vec![run];
                // Equal keys from other runs come out in input order: the last one wins.
                while let Some(Reverse((k, _, _, _))) = heap.peek()
                    && *k == key
                {
                    if let Some(Reverse((_, _, v, r))) = heap.pop() {
                        value = v;
                        refill.push(r);
                    }
                }
                for r in refill {
                    match readers[r].next_entry() {
                        Ok(Some((k, v, seq))) => heap.push(Reverse((k, seq, v, r))),
                        Ok(None) => {}
                        Err(e) => {
                            heap.clear();
                            return Some(Err(e));
                        }
                    }
                }
                Some(Ok((key, value)))
            }
        }
    }
}

/// Groups writes sorted by key into stems, in increasing stem order: what
/// [`StateStore::build_sorted`](crate::StateStore::build_sorted) takes. An error is passed on.
pub fn stems_of(
    writes: impl IntoIterator<Item = Result<(TreeKey, [u8; 32]), StoreError>>,
) -> impl Iterator<Item = Result<(Stem, StemValues), StoreError>> {
    let mut writes = writes.into_iter().peekable();
    std::iter::from_fn(move || {
        let (first, value) = match writes.next()? {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e)),
        };
        let mut values = StemValues::new();
        values.set(first.sub_index, value);
        while let Some(Ok((k, _))) = writes.peek()
            && k.stem == first.stem
        {
            if let Some(Ok((k, v))) = writes.next() {
                values.set(k.sub_index, v);
            }
        }
        Some(Ok((first.stem, values)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn key(stem: u8, sub: u8) -> TreeKey {
        TreeKey {
            stem: Stem::from([stem; 31]),
            sub_index: sub,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever the budget (many runs, or none spilled), the stream is the map the writes
        /// leave when applied in order: sorted, one per key, the last write winning.
        #[test]
        fn sorts_and_keeps_the_last_write(
            writes in proptest::collection::vec((0u8..6, 0u8..4, any::<u8>()), 0..3000),
            budget_entries in 1usize..4,
        ) {
            let dir = tempfile::tempdir().unwrap();
            // 1,024 to 3,072 writes per run: up to 3,000 writes give several runs, one, or none
            // spilled.
            let mut sorter = ExternalSort::new(dir.path(), budget_entries * 1024 * IN_MEMORY);
            let mut want = BTreeMap::new();
            for (s, sub, v) in &writes {
                sorter.push(key(*s, *sub), [*v; 32]).unwrap();
                want.insert(key(*s, *sub), [*v; 32]);
            }
            let got: Vec<_> = sorter.finish().unwrap().map(|r| r.unwrap()).collect();
            let want: Vec<_> = want.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn many_runs_merge_with_the_last_write_winning_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter = ExternalSort::new(dir.path(), 0);
        let mut want = BTreeMap::new();
        // 20 runs of 1,024: key i % 5000 is written in several runs.
        for i in 0u32..20_480 {
            let k = key((i % 5000 / 256) as u8, (i % 256) as u8);
            let v = [(i % 251) as u8; 32];
            sorter.push(k, v).unwrap();
            want.insert(k, v);
        }
        assert!(sorter.spilled_bytes() >= 4 * 4096 * RECORD as u64);
        let got: Vec<_> = sorter.finish().unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        // The temporary files are unnamed: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn stems_group_their_values_and_pass_errors_on() {
        let writes = vec![
            Ok((key(1, 0), [1; 32])),
            Ok((key(1, 7), [2; 32])),
            Ok((key(2, 3), [3; 32])),
            Err(StoreError::Corrupt("x".into())),
        ];
        let stems: Vec<_> = stems_of(writes).collect();
        assert_eq!(stems.len(), 3);
        let (s1, v1) = stems[0].as_ref().unwrap();
        assert_eq!((*s1, v1.len()), (Stem::from([1; 31]), 2));
        assert_eq!(stems[1].as_ref().unwrap().1.get(3), Some(&[3; 32]));
        assert!(stems[2].is_err());
    }
}
