//! The record format of a log segment.
//!
//! ```text
//! record  = crc32 (u32 LE, over kind..value) | kind (u8) | key_len (u8) | value_len (u32 LE)
//!           | key | value
//! ```
//!
//! Kinds: [`Kind::Node`] (path key → group or stem blob), [`Kind::Remove`] (a path key that no
//! longer holds a node), [`Kind::Code`] (code hash → bytecode), [`Kind::Pad`] (zeros, so the
//! next record does not straddle a 4 KB page), [`Kind::Drop`] (the segments a compaction
//! removed: see `LogStore::compact`) and [`Kind::Commit`] (ends a block: see
//! [`CommitRecord`]). When fewer than [`HEADER`] bytes remain before a page boundary, the gap is
//! zeros with no header and a reader skips to the boundary.

/// Bytes of a record header.
pub(crate) const HEADER: usize = 10;
/// The page a record of at most this size never straddles.
pub(crate) const PAGE: u64 = 4096;
/// Tag at the start of a commit record's value.
const COMMIT_MAGIC: &[u8; 8] = b"BTLOGCMT";
/// Bytes of a commit record's value.
pub(crate) const COMMIT_LEN: usize = 8 + 8 + 32 + 1 + 4 + 4 + 8 + 1;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Node = 1,
    Remove = 2,
    Code = 3,
    Pad = 4,
    Commit = 5,
    /// Segment numbers (u32 LE each) a compaction removed: a segment missing from the
    /// directory is damage unless a committed block names it here.
    Drop = 6,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Node,
            2 => Kind::Remove,
            3 => Kind::Code,
            4 => Kind::Pad,
            5 => Kind::Commit,
            6 => Kind::Drop,
            _ => return None,
        })
    }
}

/// The end of a block: its number, root and group depth, and a check over the block's own
/// records (their count, the CRC-32 of their bytes, and the block's first byte in the log), so a
/// block missing a record in the middle (a hole a power loss left) is never applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommitRecord {
    pub(crate) block: u64,
    pub(crate) root: [u8; 32],
    pub(crate) group_depth: u8,
    pub(crate) records: u32,
    pub(crate) body_crc: u32,
    pub(crate) body_start: u64,
    /// Set on the checkpoints of a bulk load: the state is not whole until a commit without it.
    pub(crate) building: bool,
}

impl CommitRecord {
    pub(crate) fn encode(&self) -> [u8; COMMIT_LEN] {
        let mut out = [0u8; COMMIT_LEN];
        out[..8].copy_from_slice(COMMIT_MAGIC);
        out[8..16].copy_from_slice(&self.block.to_le_bytes());
        out[16..48].copy_from_slice(&self.root);
        out[48] = self.group_depth;
        out[49..53].copy_from_slice(&self.records.to_le_bytes());
        out[53..57].copy_from_slice(&self.body_crc.to_le_bytes());
        out[57..65].copy_from_slice(&self.body_start.to_le_bytes());
        out[65] = u8::from(self.building);
        out
    }

    pub(crate) fn decode(v: &[u8]) -> Option<CommitRecord> {
        if v.len() != COMMIT_LEN || &v[..8] != COMMIT_MAGIC || v[65] > 1 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(v[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().expect("8 bytes"));
        Some(CommitRecord {
            block: u64_at(8),
            root: v[16..48].try_into().expect("32 bytes"),
            group_depth: v[48],
            records: u32_at(49),
            body_crc: u32_at(53),
            body_start: u64_at(57),
            building: v[65] == 1,
        })
    }

    /// True when `bytes` (anywhere in a segment) may hold a commit record: its magic.
    pub(crate) fn magic() -> &'static [u8] {
        COMMIT_MAGIC
    }
}

/// The bytes a new log's first segment starts with: the empty state's commit record at
/// group depth `g` (block 0, the zero root, no records; what a writer's creation writes).
pub(crate) fn creation(g: u8) -> Vec<u8> {
    let commit = CommitRecord {
        block: 0,
        root: [0; 32],
        group_depth: g,
        records: 0,
        body_crc: crc32fast::hash(&[]),
        body_start: 0,
        building: false,
    };
    let mut out = Vec::new();
    push(&mut out, 0, Kind::Commit, &[], &commit.encode());
    out
}

/// Whether `bytes`, a segment without a commit record, may be a log's creation cut short: a
/// prefix of [`creation`] at some group depth, where a byte may also be zero (a crash can leave
/// a file's new length with its bytes unwritten). Anything else is not a log's.
pub(crate) fn may_be_torn_creation(bytes: &[u8]) -> bool {
    (bintrie_node::MIN_GROUP_DEPTH..=bintrie_node::MAX_GROUP_DEPTH).any(|g| {
        let whole = creation(g);
        bytes.len() <= whole.len() && bytes.iter().zip(&whole).all(|(b, w)| b == w || *b == 0)
    })
}

/// Appends one record to `out`, which will be written at log offset `base`: first the padding
/// that keeps a record of at most a page from straddling one. Returns the record's offset in
/// `out` and its length.
pub(crate) fn push(
    out: &mut Vec<u8>,
    base: u64,
    kind: Kind,
    key: &[u8],
    value: &[u8],
) -> (usize, usize) {
    debug_assert!(key.len() <= u8::MAX as usize);
    let len = HEADER + key.len() + value.len();
    pad_for(out, base, len);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.push(key.len() as u8);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32fast::hash(&out[at + 4..]);
    out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    (at, len)
}

/// Pads `out` (to be written at `base`) so that a commit record appended next does not
/// straddle a page: call it before computing the block's body CRC, which covers the padding.
pub(crate) fn pad_for_commit(out: &mut Vec<u8>, base: u64) {
    pad_for(out, base, HEADER + COMMIT_LEN);
}

/// Pads `out` (to be written at `base`) so that `len` bytes appended next do not straddle a
/// page, when they fit in one.
fn pad_for(out: &mut Vec<u8>, base: u64, len: usize) {
    let pos = base + out.len() as u64;
    let room = PAGE - pos % PAGE;
    if len as u64 <= room {
        return;
    }
    // A tail too short for a record header is zeros, whatever comes next: the scan skips
    // such a tail as a gap (a record longer than a page starts at the next page).
    if (room as usize) < HEADER {
        out.resize(out.len() + room as usize, 0);
        return;
    }
    if len as u64 > PAGE {
        return;
    }
    let n = room as usize - HEADER;
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(Kind::Pad as u8);
    out.push(0);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.resize(out.len() + n, 0);
    let crc = crc32fast::hash(&out[at + 4..]);
    out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded record.
#[derive(Debug)]
pub(crate) struct Record<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

/// What is at a position of a segment.
#[derive(Debug)]
pub(crate) enum Parsed<'a> {
    /// A whole record with a valid CRC, `len` bytes.
    Record(Record<'a>, usize),
    /// Zeros up to the next page boundary (fewer than a header's bytes): skip `len`.
    Skip(usize),
    /// More bytes are needed than `buf` holds (`need` in all, from the position).
    Short(usize),
    /// Not a record: a bad CRC, an unknown kind, or a bad commit value.
    Bad(&'static str),
}

/// The segment numbers a [`Kind::Drop`] record's value lists.
pub(crate) fn dropped(value: &[u8]) -> impl Iterator<Item = u32> + '_ {
    value
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

/// Parses the record at log offset `pos`, whose bytes start at `buf[0]`.
pub(crate) fn parse(buf: &[u8], pos: u64) -> Parsed<'_> {
    let room = (PAGE - pos % PAGE) as usize;
    if room < HEADER {
        if buf.len() < room {
            return Parsed::Short(room);
        }
        if buf[..room].iter().all(|&b| b == 0) {
            return Parsed::Skip(room);
        }
        // Logs written before the writer zero-filled every such tail may hold a record
        // longer than a page here (and only such a record).
        return match parse_record(buf) {
            Parsed::Record(r, len) if len as u64 > PAGE => Parsed::Record(r, len),
            Parsed::Short(need) => Parsed::Short(need),
            _ => Parsed::Bad("non-zero bytes in a page's tail gap"),
        };
    }
    parse_record(buf)
}

/// Parses the record that starts at `buf[0]`, wherever it is in its page.
fn parse_record(buf: &[u8]) -> Parsed<'_> {
    if buf.len() < HEADER {
        return Parsed::Short(HEADER);
    }
    let crc = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
    let Some(kind) = Kind::from_u8(buf[4]) else {
        return Parsed::Bad("unknown record kind");
    };
    let key_len = buf[5] as usize;
    let value_len = u32::from_le_bytes(buf[6..10].try_into().expect("4 bytes")) as usize;
    let len = HEADER + key_len + value_len;
    if value_len > MAX_VALUE {
        return Parsed::Bad("record longer than any value");
    }
    if buf.len() < len {
        return Parsed::Short(len);
    }
    if crc32fast::hash(&buf[4..len]) != crc {
        return Parsed::Bad("record checksum mismatch");
    }
    let (key, value) = buf[HEADER..len].split_at(key_len);
    if kind == Kind::Commit && CommitRecord::decode(value).is_none() {
        return Parsed::Bad("malformed commit record");
    }
    if kind == Kind::Drop && (!key.is_empty() || value.len() % 4 != 0) {
        return Parsed::Bad("malformed drop record");
    }
    Parsed::Record(Record { kind, key, value }, len)
}

/// The longest value a record may hold (a group blob at g = 8 is about 8.3 KB, code at most
/// tens of KB): longer lengths are damage, not data, and are refused before any allocation.
pub(crate) const MAX_VALUE: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_never_straddle_a_page() {
        let mut out = Vec::new();
        let base = 4000u64;
        let mut at = Vec::new();
        for i in 0..200usize {
            let key = vec![i as u8; i % 33];
            let value = vec![(i * 7) as u8; (i * 37) % 900];
            let (o, len) = push(&mut out, base, Kind::Node, &key, &value);
            let start = base + o as u64;
            assert_eq!(
                start / PAGE,
                (start + len as u64 - 1) / PAGE,
                "record {i} straddles"
            );
            at.push((o, key, value));
        }
        let mut pos = 0usize;
        let mut seen = 0;
        while pos < out.len() {
            match parse(&out[pos..], base + pos as u64) {
                Parsed::Record(r, len) => {
                    if r.kind != Kind::Pad {
                        let (o, key, value) = &at[seen];
                        assert_eq!((*o, r.key, r.value), (pos, &key[..], &value[..]));
                        seen += 1;
                    }
                    pos += len;
                }
                Parsed::Skip(n) => pos += n,
                other => panic!("at {pos}: {other:?}"),
            }
        }
        assert_eq!(seen, 200);
    }

    /// Parses `out` (written at `base`) from its start: the records other than padding.
    fn parse_all(out: &[u8], base: u64) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
        let mut pos = 0usize;
        let mut found = Vec::new();
        while pos < out.len() {
            match parse(&out[pos..], base + pos as u64) {
                Parsed::Record(r, len) => {
                    if r.kind != Kind::Pad {
                        found.push((pos, r.key.to_vec(), r.value.to_vec()));
                    }
                    pos += len;
                }
                Parsed::Skip(n) => pos += n,
                other => panic!("at {pos}: {other:?}"),
            }
        }
        found
    }

    #[test]
    fn a_record_longer_than_a_page_after_a_short_tail_starts_at_the_next_page() {
        // A record that leaves 1..HEADER bytes before the page's end, then one longer than a
        // page (a stem blob of many values, or code).
        for tail in 1..HEADER {
            let mut out = Vec::new();
            let value = vec![1; PAGE as usize - tail - HEADER - 1];
            push(&mut out, 0, Kind::Node, b"k", &value);
            assert_eq!(PAGE as usize - out.len(), tail);
            let big = vec![7u8; 9000];
            let (b, _) = push(&mut out, 0, Kind::Code, &[2; 32], &big);
            assert_eq!(b as u64 % PAGE, 0, "tail {tail}: not zero-filled");
            push(&mut out, 0, Kind::Node, b"after", b"v");
            let found = parse_all(&out, 0);
            assert_eq!(found.len(), 3, "tail {tail}");
            assert_eq!((found[1].0, &found[1].2), (b, &big), "tail {tail}");
        }
    }

    #[test]
    fn a_log_written_before_the_tail_was_zero_filled_still_parses() {
        // The old writer put a record longer than a page right after a record that left
        // fewer bytes than a header before the page's end.
        let base = 0u64;
        let mut out = Vec::new();
        push(
            &mut out,
            base,
            Kind::Node,
            b"k",
            &vec![3; PAGE as usize - HEADER - 1 - 4],
        );
        assert_eq!(PAGE as usize - out.len(), 4);
        let big = vec![9u8; 5000];
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.push(Kind::Code as u8);
        out.push(32);
        out.extend_from_slice(&(big.len() as u32).to_le_bytes());
        out.extend_from_slice(&[5; 32]);
        out.extend_from_slice(&big);
        let crc = crc32fast::hash(&out[at + 4..]);
        out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        let found = parse_all(&out, base);
        assert_eq!(found.len(), 2);
        assert_eq!((found[1].0, &found[1].2), (at, &big));
        // A record of at most a page there is still damage, even with a valid checksum.
        let mut small = Vec::new();
        push(&mut small, 0, Kind::Node, b"x", b"y");
        assert!(matches!(parse(&small, 0), Parsed::Record(..)));
        assert!(matches!(parse(&small, at as u64), Parsed::Bad(_)));
    }

    #[test]
    fn every_flipped_byte_of_a_record_is_refused() {
        let mut out = Vec::new();
        push(&mut out, 0, Kind::Code, &[7; 32], b"some code bytes");
        for i in 0..out.len() {
            for bit in 0..8 {
                let mut bad = out.clone();
                bad[i] ^= 1 << bit;
                match parse(&bad, 0) {
                    Parsed::Record(..) => panic!("flip at byte {i} bit {bit} accepted"),
                    Parsed::Bad(_) | Parsed::Short(_) => {}
                    Parsed::Skip(_) => unreachable!("no gap at offset 0"),
                }
            }
        }
    }

    #[test]
    fn commit_records_round_trip() {
        let c = CommitRecord {
            block: 42,
            root: [9; 32],
            group_depth: 5,
            records: 3,
            body_crc: 0xdead_beef,
            body_start: 1 << 33,
            building: true,
        };
        assert_eq!(CommitRecord::decode(&c.encode()), Some(c));
        assert_eq!(CommitRecord::decode(&c.encode()[1..]), None);
    }
}
