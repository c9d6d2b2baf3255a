//! The "Recommendation" section: which group depth the data supports, per read path and
//! prefetch setting, scored over every measured workload.

use super::doc::Block;
use super::findings::{ALPHA, rank};
use super::format::num;
use super::view::{Combo, View};
use crate::model::{Metric, ReadPath, Workload};
use crate::stats;

/// A group depth's score in one combination: the geometric mean over workloads of its median
/// total block time divided by the best group depth's for that workload (1.0 = best everywhere).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Score {
    /// Group depth.
    pub gd: u8,
    /// Geometric-mean slowdown against each workload's best group depth.
    pub slowdown: f64,
    /// Workloads where this group depth is significantly slower (p < ALPHA) than the best.
    pub significantly_worse: usize,
}

/// Scores of every group depth measured for all `workloads` in `combo`, best first.
pub(super) fn scores(view: &View, combo: Combo, workloads: &[Workload]) -> Vec<Score> {
    let mut gds: Option<Vec<u8>> = None;
    for &w in workloads {
        let here = view.group_depths(w, combo);
        gds = Some(match gds {
            None => here,
            Some(prev) => prev.into_iter().filter(|g| here.contains(g)).collect(),
        });
    }
    let gds = gds.unwrap_or_default();
    let mut out: Vec<Score> = gds
        .iter()
        .filter_map(|&gd| {
            let mut log_sum = 0.0;
            let mut worse = 0;
            for &w in workloads {
                let ranked = rank(view, w, combo, Metric::TotalMs, false);
                let best = ranked.iter().find(|r| gds.contains(&r.gd))?;
                let mine = view.median(&combo.key(w, gd), Metric::TotalMs)?;
                if best.value <= 0.0 || mine <= 0.0 {
                    return None;
                }
                log_sum += (mine / best.value).ln();
                if best.gd != gd
                    && stats::mann_whitney_p(
                        &view.samples(&combo.key(w, gd), Metric::TotalMs),
                        &view.samples(&combo.key(w, best.gd), Metric::TotalMs),
                    )
                    .is_some_and(|p| p < ALPHA)
                {
                    worse += 1;
                }
            }
            Some(Score {
                gd,
                slowdown: (log_sum / workloads.len() as f64).exp(),
                significantly_worse: worse,
            })
        })
        .collect();
    out.sort_by(|a, b| a.slowdown.total_cmp(&b.slowdown).then(a.gd.cmp(&b.gd)));
    out
}

/// A slowdown factor as percent above 1: `3.2%`.
fn above(slowdown: f64) -> String {
    format!("{:.1}%", (slowdown - 1.0) * 100.0)
}

fn best_for(view: &View, combo: Combo, w: Workload) -> Option<u8> {
    rank(view, w, combo, Metric::TotalMs, false)
        .first()
        .map(|r| r.gd)
}

/// The section's blocks (without its heading).
pub(super) fn recommendation(view: &View) -> Vec<Block> {
    let workloads = view.workloads();
    let mut combos: Vec<Combo> = Vec::new();
    for &w in &workloads {
        for c in view.combos(w) {
            if !combos.contains(&c) && workloads.iter().all(|&w2| view.combos(w2).contains(&c)) {
                combos.push(c);
            }
        }
    }
    let mut items = Vec::new();
    let mut preferred: Option<(Combo, Score)> = None;
    for &c in &combos {
        let s = scores(view, c, &workloads);
        let Some(top) = s.first().copied() else {
            continue;
        };
        if s.len() < 2 {
            continue;
        }
        let close: Vec<String> = s[1..]
            .iter()
            .filter(|x| x.slowdown <= top.slowdown * 1.05)
            .map(|x| format!("GD-{}", x.gd))
            .collect();
        let per: Vec<String> = workloads
            .iter()
            .filter_map(|&w| best_for(view, c, w).map(|gd| format!("{} GD-{gd}", w.name())))
            .collect();
        let worst = s.last().expect("two or more");
        items.push(format!(
            "**{}**: GD-{} ({} slower than each workload's best, geometric mean; significantly \
             slower than the best in {} of {} workloads){}; the worst is GD-{} ({}). Best per \
             workload: {}.",
            view.label(c),
            top.gd,
            above(top.slowdown),
            top.significantly_worse,
            workloads.len(),
            if close.is_empty() {
                String::new()
            } else {
                format!("; within 5% of it: {}", close.join(", "))
            },
            worst.gd,
            above(worst.slowdown),
            per.join(", ")
        ));
        let rank_of = |c: Combo| (c.read_path == ReadPath::Flat, c.prefetch, c.stems);
        if preferred.is_none_or(|(p, _)| rank_of(c) > rank_of(p)) {
            preferred = Some((c, top));
        }
    }
    let mut blocks = Vec::new();
    if let Some((c, top)) = preferred {
        let spread = scores(view, c, &workloads)
            .last()
            .map(|w| w.slowdown)
            .unwrap_or(1.0);
        blocks.push(Block::Para(format!(
            "For {}{}, the data supports **GD-{}**: over {} \
             workloads its block time is {} above each workload's best group depth (geometric \
             mean), while the worst group depth costs {}. Ranking by total block time, every \
             measured read path and prefetch setting:",
            view.label(c),
            if c.read_path == ReadPath::Flat && c.prefetch {
                " (the setup this project runs blocks with)"
            } else {
                ""
            },
            top.gd,
            workloads.len(),
            above(top.slowdown),
            above(spread)
        )));
    }
    if !items.is_empty() {
        blocks.push(Block::List(items));
    }
    // The anchor's two answers, on its own read path (trie walk, no prefetch).
    let anchor_combo = combos
        .iter()
        .copied()
        .find(|c| c.read_path == ReadPath::TrieWalk && !c.prefetch);
    if let Some(c) = anchor_combo {
        let r = best_for(view, c, Workload::Erc20Balanceof);
        let w = best_for(view, c, Workload::Erc20Approve);
        if let (Some(r), Some(w)) = (r, w) {
            blocks.push(Block::Para(format!(
                "On the anchor's own read path (trie walk, no prefetch) the read workload is \
                 fastest at GD-{r} and the write workload at GD-{w}; the anchor found GD-6 and \
                 GD-5 (STUDY.md). Medians: erc20_balanceof {} ms at GD-{r}, erc20_approve {} ms \
                 at GD-{w}.",
                num(view
                    .median(&c.key(Workload::Erc20Balanceof, r), Metric::TotalMs)
                    .unwrap_or(0.0)),
                num(view
                    .median(&c.key(Workload::Erc20Approve, w), Metric::TotalMs)
                    .unwrap_or(0.0)),
            )));
        }
    }
    if blocks.is_empty() {
        blocks.push(Block::Para(
            "Fewer than two group depths measured for every workload: no recommendation."
                .to_string(),
        ));
    }
    blocks
}
