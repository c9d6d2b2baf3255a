//! The shape of a database: how many groups, stems and code entries it holds, and how deep its
//! stems sit — what `bintrie info` reports.

use crate::{Meta, StateStore, StoreError, T_NODES};
use bintrie_node::{GROUP_TAG, MAX_DEPTH, STEM_TAG};

/// What a database holds, read from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The snapshot's meta (root, block, group depth, format, page size).
    pub meta: Meta,
    /// Entries in the node table (groups and stems).
    pub nodes: u64,
    /// Of those, group blobs.
    pub groups: u64,
    /// Entries in the flat stem table. Equal to [`Shape::stem_depths`]' total in a consistent
    /// database ([`Shape::is_consistent`]).
    pub stems: u64,
    /// Code entries.
    pub code: u64,
    /// Stem blobs in the node table by depth (the path length they are stored at): index `d`
    /// counts the stems at depth `d`, 0..=248.
    pub stem_depths: Vec<u64>,
    /// Size of the data file in bytes.
    pub file_bytes: u64,
}

impl Shape {
    /// Stem blobs in the node table.
    pub fn stem_blobs(&self) -> u64 {
        self.stem_depths.iter().sum()
    }

    /// The shallowest, mean and deepest stem depth (zeros for an empty database).
    pub fn depth_summary(&self) -> (usize, f64, usize) {
        let mut present = self.stem_depths.iter().enumerate().filter(|(_, c)| **c > 0);
        let Some((min, _)) = present.next() else {
            return (0, 0.0, 0);
        };
        let max = present.next_back().map_or(min, |(d, _)| d);
        let sum: u64 = self
            .stem_depths
            .iter()
            .enumerate()
            .map(|(d, c)| d as u64 * c)
            .sum();
        (min, sum as f64 / self.stem_blobs() as f64, max)
    }

    /// True when the flat stem table holds as many stems as the node table has stem blobs (a
    /// cheap check; `StateStore::verify` checks the contents).
    pub fn is_consistent(&self) -> bool {
        self.stems == self.stem_blobs()
    }
}

impl StateStore {
    /// Counts what the database holds, from one snapshot: a full scan of the node table (its
    /// keys and tag bytes).
    pub fn shape(&self) -> Result<Shape, StoreError> {
        let reader = self.reader()?;
        let (nodes, stems, code) = reader.counts()?;
        let mut groups = 0;
        let mut stem_depths = vec![0u64; MAX_DEPTH + 1];
        reader.for_each(T_NODES, |key, blob| {
            match blob.first() {
                Some(&GROUP_TAG) => groups += 1,
                Some(&STEM_TAG) => {
                    // A path key's last byte is its length in bits (SPEC §5).
                    let depth = usize::from(key.last().copied().unwrap_or(0));
                    stem_depths[depth.min(MAX_DEPTH)] += 1;
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(Shape {
            meta: Meta {
                root: reader.root()?,
                block: reader.block()?,
                ..self.meta()
            },
            nodes,
            groups,
            stems,
            code,
            stem_depths,
            file_bytes: self.file_size()?,
        })
    }
}
