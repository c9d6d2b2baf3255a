//! The report's "Witness size" section: per workload and group depth, the block witness in
//! both encodings (the multiproof, and the stored blobs geth's witness is made of), per block
//! and per key touched, beside the published MPT figures.

use super::charts::{Chart, ChartKind};
use super::doc::{Block, NONE, Table};
use super::format::{bytes, count, num};
use super::view::{Combo, View};
use crate::model::{Metric, Workload};

/// An average MPT execution witness today, bytes per block (STUDY.md).
pub(super) const MPT_BLOCK_WITNESS: f64 = 17e6;
/// One MPT branch in a 2^32-leaf tree, bytes (the comparison point).
pub(super) const MPT_BRANCH: f64 = 3.8e3;

/// The combination whose witness sizes are shown for `workload`: witnesses do not depend on
/// the read path or prefetch, so the preferred one when it has them, else the first that does.
pub(super) fn witness_combo(view: &View, workload: Workload) -> Option<Combo> {
    let has = |c: &Combo| {
        view.group_depths(workload, *c).into_iter().any(|gd| {
            view.median(&c.key(workload, gd), Metric::WitnessKeys)
                .is_some()
        })
    };
    view.preferred_combo(workload)
        .filter(has)
        .or_else(|| view.combos(workload).into_iter().find(has))
}

/// Per group depth of `workload` in `combo`: (GD, keys, multiproof bytes, blob bytes), medians.
pub(super) fn witness_rows(
    view: &View,
    workload: Workload,
    combo: Combo,
) -> Vec<(u8, f64, f64, f64)> {
    view.group_depths(workload, combo)
        .into_iter()
        .filter_map(|gd| {
            let key = combo.key(workload, gd);
            Some((
                gd,
                view.median(&key, Metric::WitnessKeys)?,
                view.median(&key, Metric::WitnessMultiproofBytes)?,
                view.median(&key, Metric::WitnessBlobsBytes)?,
            ))
        })
        .collect()
}

/// The section's blocks (nothing when no witness was measured).
pub(super) fn witness_blocks(view: &View, charts: &[Chart]) -> Vec<Block> {
    let mut out = Vec::new();
    for w in view.workloads() {
        let Some(combo) = witness_combo(view, w) else {
            continue;
        };
        let rows = witness_rows(view, w, combo);
        if rows.is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push(Block::Heading(2, "Witness size".to_string()));
            out.push(Block::Para(
                "Each measured block's witness, built from its pre-state outside the timed \
                 stages: the tree keys it reads or writes (an account is two keys, a slot one), \
                 as a **multiproof** (the tree pruned to those keys, sibling hashes only, shared \
                 siblings once, only the touched leaves of each stem) and as **stored blobs** \
                 (every group and stem blob its walks cross: what geth's witness is). Both \
                 include the bytecode the block runs. Medians over the kept runs."
                    .to_string(),
            ));
        }
        out.push(Block::Heading(
            3,
            format!("{}: {}", w.name(), view.label(combo)),
        ));
        let mut t = Table::new([
            "GD",
            "keys",
            "multiproof",
            "blobs",
            "multiproof B/key",
            "blobs B/key",
            "blobs / multiproof",
        ]);
        for &(gd, keys, multi, blobs) in &rows {
            let per = |b: f64| {
                if keys > 0.0 {
                    num(b / keys)
                } else {
                    NONE.to_string()
                }
            };
            t.rows.push(vec![
                gd.to_string(),
                count(keys.round() as u64),
                bytes(multi.round() as u64),
                bytes(blobs.round() as u64),
                per(multi),
                per(blobs),
                if multi > 0.0 {
                    format!("{:.2}x", blobs / multi)
                } else {
                    NONE.to_string()
                },
            ]);
        }
        out.push(Block::Table(t));
        for chart in charts
            .iter()
            .filter(|c| c.kind == ChartKind::Witness && c.workload == Some(w))
        {
            out.push(Block::Image {
                src: chart.file.clone(),
                alt: chart.title.clone(),
            });
        }
        out.push(Block::Para(sentence(&rows)));
    }
    out
}

/// What the sizes say against the MPT and across group depths.
fn sentence(rows: &[(u8, f64, f64, f64)]) -> String {
    let per_key = |i: usize, b: f64| b / rows[i].1.max(1.0);
    let (lo, hi) = rows
        .iter()
        .enumerate()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), (i, r)| {
            (lo.min(per_key(i, r.3)), hi.max(per_key(i, r.3)))
        });
    let multi = rows.iter().map(|r| r.2).sum::<f64>() / rows.len() as f64;
    let multi_key = rows
        .iter()
        .enumerate()
        .map(|(i, r)| per_key(i, r.2))
        .sum::<f64>()
        / rows.len() as f64;
    let smallest = rows
        .iter()
        .min_by(|a, b| a.3.total_cmp(&b.3))
        .map_or(0, |r| r.0);
    let largest = rows
        .iter()
        .max_by(|a, b| a.3.total_cmp(&b.3))
        .map_or(0, |r| r.0);
    format!(
        "The multiproof does not depend on the group depth ({} per block, {} B per key, code \
         included); the stored blobs cost {}-{} B per key by group depth, smallest at \
         GD-{smallest} and largest at GD-{largest}: what a stateless client pays for receiving \
         geth's witness instead. Against the MPT: one MPT branch in a 2^32-leaf tree is about 3.8 KB ({}x the \
         multiproof's bytes per key here), and an average MPT execution witness is about 17 MB \
         per block ({}x this block's multiproof).",
        bytes(multi.round() as u64),
        num(multi_key),
        num(lo),
        num(hi),
        num(MPT_BRANCH / multi_key.max(1.0)),
        num(MPT_BLOCK_WITNESS / multi.max(1.0)),
    )
}
