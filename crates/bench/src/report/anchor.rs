//! The anchor: the public go-ethereum group-depth study's figures (STUDY.md), printed beside ours.
//!
//! Part 1 ran geth's binary trie at group depths 1..=8 on ~400 M state entries (Pebble, 4 KB
//! blocks, cold cache, 100 M gas blocks, medians of 9 kept runs). Part 2 measured GD-5 on bare
//! metal. Values are copied from STUDY.md's "Headline medians" table and per-slot figures.

/// One group depth's medians from part 1 (milliseconds per block; Mgas/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnchorRow {
    /// Group depth.
    pub group_depth: u8,
    /// erc20_balanceof: state read ms.
    pub read_state_read_ms: f64,
    /// erc20_balanceof: total ms.
    pub read_total_ms: f64,
    /// erc20_balanceof: Mgas/s.
    pub read_mgas_s: f64,
    /// erc20_approve: state read ms.
    pub write_read_ms: f64,
    /// erc20_approve: trie update ms.
    pub write_trie_update_ms: f64,
    /// erc20_approve: commit ms.
    pub write_commit_ms: f64,
    /// erc20_approve: total ms.
    pub write_total_ms: f64,
    /// erc20_approve: Mgas/s.
    pub write_mgas_s: f64,
    /// mixed: total ms.
    pub mixed_total_ms: f64,
    /// mixed: Mgas/s.
    pub mixed_mgas_s: f64,
}

const fn row(gd: u8, read: [f64; 3], write: [f64; 5], mixed: [f64; 2]) -> AnchorRow {
    AnchorRow {
        group_depth: gd,
        read_state_read_ms: read[0],
        read_total_ms: read[1],
        read_mgas_s: read[2],
        write_read_ms: write[0],
        write_trie_update_ms: write[1],
        write_commit_ms: write[2],
        write_total_ms: write[3],
        write_mgas_s: write[4],
        mixed_total_ms: mixed[0],
        mixed_mgas_s: mixed[1],
    }
}

/// Part 1's headline medians for group depths 1..=8, in order.
pub const ANCHOR: [AnchorRow; 8] = [
    row(
        1,
        [5878.0, 6284.0, 2.65],
        [812.0, 691.0, 77.0, 1645.0, 2.67],
        [5363.0, 2.18],
    ),
    row(
        2,
        [3840.0, 4231.0, 3.95],
        [483.0, 393.0, 61.0, 993.0, 4.42],
        [3518.0, 3.35],
    ),
    row(
        3,
        [2866.0, 3213.0, 5.20],
        [349.0, 287.0, 44.0, 732.0, 5.95],
        [2375.0, 4.90],
    ),
    row(
        4,
        [2677.0, 3067.0, 5.46],
        [313.0, 254.0, 53.0, 678.0, 6.47],
        [2302.0, 5.13],
    ),
    row(
        5,
        [2370.0, 2733.0, 6.11],
        [271.0, 242.0, 57.0, 629.0, 6.94],
        [1910.0, 6.09],
    ),
    row(
        6,
        [2248.0, 2623.0, 6.39],
        [272.0, 283.0, 76.0, 679.0, 6.41],
        [1851.0, 6.27],
    ),
    row(
        7,
        [2339.0, 2693.0, 6.04],
        [264.0, 328.0, 103.0, 745.0, 5.81],
        [1529.0, 5.87],
    ),
    row(
        8,
        [2598.0, 2977.0, 5.59],
        [313.0, 433.0, 158.0, 982.0, 4.47],
        [2145.0, 5.43],
    ),
];

/// Cold SLOADs per erc20_balanceof block in part 1 (the divisor of its per-slot read figure).
pub const COLD_READS_PER_READ_BLOCK: f64 = 6141.0;

/// Written slots per erc20_approve block in part 1 (the divisor of its per-slot write figure).
pub const WRITTEN_SLOTS_PER_WRITE_BLOCK: f64 = 681.0;

/// Part 2's headline: milliseconds per cold storage-slot read at GD-5.
pub const MS_PER_COLD_READ: f64 = 0.405;

/// Part 2's headline: milliseconds per written slot (GD-5); the low end of the anchor's range.
pub const MS_PER_WRITTEN_SLOT_LOW: f64 = 0.569;

/// Part 1's GD-5 erc20_approve total over its 681 written slots (~0.92 ms); the high end of the
/// anchor's per-written-slot range.
pub const MS_PER_WRITTEN_SLOT_HIGH: f64 = 629.0 / WRITTEN_SLOTS_PER_WRITE_BLOCK;

/// State entries in the anchor's databases (~400 M).
pub const STATE_ENTRIES: f64 = 400e6;

/// Part 1's row for `group_depth`, if it is in 1..=8.
pub fn at(group_depth: u8) -> Option<&'static AnchorRow> {
    ANCHOR.iter().find(|r| r.group_depth == group_depth)
}

impl AnchorRow {
    /// Part 1's state read per cold slot at this group depth: state read / 6,141.
    pub fn ms_per_cold_read(&self) -> f64 {
        self.read_state_read_ms / COLD_READS_PER_READ_BLOCK
    }

    /// Part 1's block time per written slot at this group depth: approve total / 681.
    pub fn ms_per_written_slot(&self) -> f64 {
        self.write_total_ms / WRITTEN_SLOTS_PER_WRITE_BLOCK
    }
}
