//! The "Findings" section: statements computed from the data, worded by what the data shows.

use super::anchor;
use super::doc::Block;
use super::format::{count, num, p_is, pct, share, times};
use super::view::{Combo, Vary, View};
use crate::model::{Metric, ReadPath, Workload};
use crate::stats;

/// Significance level of the findings' tests.
pub(super) const ALPHA: f64 = 0.05;

/// One group depth's median of a metric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Ranked {
    /// Group depth.
    pub gd: u8,
    /// Median.
    pub value: f64,
}

/// The measured group depths of `workload` in `combo` ranked by the median of `metric`, best
/// first (highest when `higher_is_better`, else lowest; ties to the lower group depth).
pub(super) fn rank(
    view: &View,
    workload: Workload,
    combo: Combo,
    metric: Metric,
    higher_is_better: bool,
) -> Vec<Ranked> {
    let mut v: Vec<Ranked> = view
        .group_depths(workload, combo)
        .into_iter()
        .filter_map(|gd| {
            let value = view.median(&combo.key(workload, gd), metric)?;
            Some(Ranked { gd, value })
        })
        .collect();
    v.sort_by(|a, b| {
        let ord = a.value.total_cmp(&b.value);
        let ord = if higher_is_better { ord.reverse() } else { ord };
        ord.then(a.gd.cmp(&b.gd))
    });
    v
}

/// Mann-Whitney p-value of `metric` between two group depths of `workload` in `combo`.
fn p_between(
    view: &View,
    workload: Workload,
    combo: Combo,
    metric: Metric,
    a: u8,
    b: u8,
) -> Option<f64> {
    stats::mann_whitney_p(
        &view.samples(&combo.key(workload, a), metric),
        &view.samples(&combo.key(workload, b), metric),
    )
}

/// "significant (p = ...)" / "not significant ..." / "not testable ..." for best against
/// runner-up.
fn verdict(p: Option<f64>, best: u8, runner_up: u8) -> String {
    match p {
        Some(p) if p < ALPHA => format!(
            "the difference is significant (Mann-Whitney {})",
            p_is(Some(p))
        ),
        Some(p) => format!(
            "the difference is not significant ({} ≥ {ALPHA}): GD-{best} and GD-{runner_up} cannot be told apart with these runs",
            p_is(Some(p))
        ),
        None => "significance not testable (fewer than 2 kept runs on a side, or identical values)"
            .to_string(),
    }
}

/// The best group depth by the median of `metric`, the runner-up and the p-value between them.
struct Best {
    best: Ranked,
    runner_up: Option<(Ranked, Option<f64>)>,
}

fn best_of(
    view: &View,
    workload: Workload,
    combo: Combo,
    metric: Metric,
    higher_is_better: bool,
) -> Option<Best> {
    let ranked = rank(view, workload, combo, metric, higher_is_better);
    let best = *ranked.first()?;
    let runner_up = ranked.get(1).map(|&second| {
        let p = p_between(view, workload, combo, metric, best.gd, second.gd);
        (second, p)
    });
    Some(Best { best, runner_up })
}

/// `+24.6%` change from `from` to `to`, or empty when `from` is 0.
fn change(from: f64, to: f64) -> String {
    if from != 0.0 {
        format!(", {}", pct((to - from) / from * 100.0))
    } else {
        String::new()
    }
}

/// The sentence naming the best group depth by `metric`.
fn best_sentence(b: &Best, what: &str, unit: &str) -> String {
    let best = b.best;
    let Some((second, p)) = b.runner_up else {
        return format!(
            "Only GD-{} was measured ({} {unit} {what}): no group-depth comparison.",
            best.gd,
            num(best.value)
        );
    };
    format!(
        "Best by {what}: **GD-{}** ({} {unit}); runner-up GD-{} ({} {unit}{}); {}.",
        best.gd,
        num(best.value),
        second.gd,
        num(second.value),
        change(best.value, second.value),
        verdict(p, best.gd, second.gd)
    )
}

/// The short sentence for a second metric that agrees on the best group depth.
fn agreeing_sentence(b: &Best, what: &str, unit: &str) -> String {
    match b.runner_up {
        None => String::new(),
        Some((second, p)) => format!(
            "The same group depth has the best {what} ({} {unit}; GD-{}: {} {unit}{}, {}).",
            num(b.best.value),
            second.gd,
            num(second.value),
            change(b.best.value, second.value),
            p_is(p)
        ),
    }
}

/// The share of state read in block time at the best group depth and across group depths.
fn share_sentence(view: &View, workload: Workload, combo: Combo, best_gd: u8) -> Option<String> {
    let share_at = |gd: u8| {
        let key = combo.key(workload, gd);
        let total = view.median(&key, Metric::TotalMs)?;
        let read = view.median(&key, Metric::StateReadMs)?;
        (total > 0.0).then_some(read / total)
    };
    let at_best = share_at(best_gd)?;
    let all: Vec<f64> = view
        .group_depths(workload, combo)
        .into_iter()
        .filter_map(share_at)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = if all.len() > 1 {
        format!(
            " ({}–{} across the measured group depths)",
            share(lo),
            share(hi)
        )
    } else {
        String::new()
    };
    Some(format!(
        "State read is {} of block time at GD-{best_gd}{range}.",
        share(at_best)
    ))
}

/// "N× better" / "N× worse" for an anchor figure against ours (both costs: lower is better).
fn versus(anchor: f64, ours: f64) -> String {
    let r = anchor / ours;
    if r >= 1.0 {
        format!("**{} better**", times(r))
    } else {
        format!("**{} worse**", times(1.0 / r))
    }
}

/// Like [`versus`] against an anchor range `low..=high`.
fn versus_range(low: f64, high: f64, ours: f64) -> String {
    let (lo, hi) = (low / ours, high / ours);
    if lo >= 1.0 {
        format!("**{}–{} better**", times(lo), times(hi))
    } else if hi <= 1.0 {
        format!("**{}–{} worse**", times(1.0 / hi), times(1.0 / lo))
    } else {
        format!(
            "between **{} worse** and **{} better**",
            times(1.0 / lo),
            times(hi)
        )
    }
}

/// Describes the ratios `values` (baseline / variant, > 1 meaning the variant is faster).
fn ratio_range(ratios: &[f64], faster: &str, slower: &str) -> String {
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = |a: f64, b: f64| {
        if (a - b).abs() < 0.05 * a.max(b) {
            times(a)
        } else {
            format!("{}–{}", times(a), times(b))
        }
    };
    if lo >= 1.0 {
        format!("{} {faster}", span(lo, hi))
    } else if hi <= 1.0 {
        format!("{} {slower}", span(1.0 / hi, 1.0 / lo))
    } else {
        format!(
            "between {} {slower} and {} {faster} (by group depth)",
            times(1.0 / lo),
            times(hi)
        )
    }
}

/// State read of a pair of combinations compared group depth by group depth.
fn pair_sentence(view: &View, workload: Workload, vary: Vary) -> Option<String> {
    let (a, b) = view.pair(workload, vary)?;
    let gds: Vec<u8> = view
        .group_depths(workload, a)
        .into_iter()
        .filter(|gd| view.group_depths(workload, b).contains(gd))
        .collect();
    let mut ratios = Vec::new();
    let mut significant = 0;
    let mut tested = 0;
    for &gd in &gds {
        let (ka, kb) = (a.key(workload, gd), b.key(workload, gd));
        let (Some(ma), Some(mb)) = (
            view.median(&ka, Metric::StateReadMs),
            view.median(&kb, Metric::StateReadMs),
        ) else {
            continue;
        };
        if ma <= 0.0 || mb <= 0.0 {
            continue;
        }
        ratios.push(ma / mb);
        if let Some(p) = stats::mann_whitney_p(
            &view.samples(&ka, Metric::StateReadMs),
            &view.samples(&kb, Metric::StateReadMs),
        ) {
            tested += 1;
            if p < ALPHA {
                significant += 1;
            }
        }
    }
    if ratios.is_empty() {
        return None;
    }
    let (subject, setting) = match vary {
        Vary::ReadPath => (
            "the flat path reads state",
            format!(
                "compared with the trie path (prefetch {})",
                if a.prefetch { "on" } else { "off" }
            ),
        ),
        Vary::Prefetch => (
            "prefetching makes state reads",
            format!("compared with no prefetch ({} path)", a.read_path.name()),
        ),
    };
    let gd_span = match (gds.first(), gds.last()) {
        (Some(f), Some(l)) if f != l => format!(" over GD-{f}..GD-{l}"),
        (Some(f), _) => format!(" at GD-{f}"),
        _ => String::new(),
    };
    let tests = if tested > 0 {
        format!(
            "; the difference is significant (p < {ALPHA}) at {significant} of {tested} group depths tested"
        )
    } else {
        "; not testable (too few kept runs)".to_string()
    };
    // Prefetch turns one read in flight into many: the drive's QD1 / QD16 time per read is
    // what a perfect prefetch would gain.
    let device = match (vary, view.results.machine.disk.as_ref()) {
        (Vary::Prefetch, Some(d)) => {
            let best = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!(
                "; the drive's own QD1/QD16 ratio is {}, so the prefetch captures at best {:.0}% \
                 of it",
                times(d.queue_gain()),
                100.0 * best / d.queue_gain()
            )
        }
        _ => String::new(),
    };
    Some(format!(
        "**{}**: {subject} {} {setting}{gd_span}{tests}{device}.",
        workload.name(),
        ratio_range(&ratios, "faster", "slower"),
    ))
}

/// The per-slot comparison with the anchor for the flat + prefetch combination.
fn anchor_sentences(view: &View) -> Vec<String> {
    let mut out = Vec::new();
    let flat_prefetch = |w: Workload| {
        view.combos(w)
            .into_iter()
            .find(|c| c.read_path == ReadPath::Flat && c.prefetch)
    };
    if let Some(c) = flat_prefetch(Workload::Erc20Balanceof) {
        let w = Workload::Erc20Balanceof;
        if let Some(best) = rank(view, w, c, Metric::MgasS, true).first() {
            let mut gds = vec![best.gd];
            if best.gd != 5 && view.group_depths(w, c).contains(&5) {
                gds.push(5);
            }
            for gd in gds {
                let Some(ours) = view.median(&c.key(w, gd), Metric::MsPerColdRead) else {
                    continue;
                };
                if ours <= 0.0 {
                    continue;
                }
                let what = if gd == best.gd {
                    format!("at its best group depth GD-{gd}")
                } else {
                    format!("at GD-{gd} (the anchor's choice)")
                };
                let mut s = format!(
                    "**erc20_balanceof** (flat + prefetch), {what}: {} ms of state read per cold read against the anchor's {} ms (geth GD-5, part 2): {}",
                    num(ours),
                    num(anchor::MS_PER_COLD_READ),
                    versus(anchor::MS_PER_COLD_READ, ours),
                );
                if let Some(a) = anchor::at(gd) {
                    s.push_str(&format!(
                        "; against part 1 at GD-{gd} ({} ms = state read / 6,141): {}",
                        num(a.ms_per_cold_read()),
                        versus(a.ms_per_cold_read(), ours)
                    ));
                }
                s.push('.');
                out.push(s);
            }
        }
    }
    if let Some(c) = flat_prefetch(Workload::Erc20Approve) {
        let w = Workload::Erc20Approve;
        if let Some(best) = rank(view, w, c, Metric::MgasS, true).first()
            && let Some(ours) = view.median(&c.key(w, best.gd), Metric::MsPerWrittenSlot)
            && ours > 0.0
        {
            out.push(format!(
                "**erc20_approve** (flat + prefetch), at its best group depth GD-{}: {} ms of block time per written slot against the anchor's {}–{} ms (part 2; part 1 GD-5 total / 681): {}.",
                best.gd,
                num(ours),
                num(anchor::MS_PER_WRITTEN_SLOT_LOW),
                num(anchor::MS_PER_WRITTEN_SLOT_HIGH),
                versus_range(
                    anchor::MS_PER_WRITTEN_SLOT_LOW,
                    anchor::MS_PER_WRITTEN_SLOT_HIGH,
                    ours
                ),
            ));
        }
        let config = view.config();
        if config.blocks_per_run > 1 || config.buffer_blocks > 0 {
            for gd in view.group_depths(w, c) {
                let Some(s) = view.summary(&c.key(w, gd)) else {
                    continue;
                };
                let (Some(amortized), Some(with_wb), Some(worst)) = (
                    s.amortized_ms_per_written_slot,
                    s.amortized_with_writeback_ms_per_written_slot,
                    s.worst_total_ms,
                ) else {
                    continue;
                };
                out.push(format!(
                    "**erc20_approve** (flat + prefetch) at GD-{gd}, amortized over runs of {} blocks with a write buffer of {} blocks (flushes included): {} ms per written slot against the anchor's {} ms: {}; {} ms with the device's deferred page writes added; worst block {} ms.",
                    config.blocks_per_run,
                    config.buffer_blocks,
                    num(amortized),
                    num(anchor::MS_PER_WRITTEN_SLOT_LOW),
                    versus(anchor::MS_PER_WRITTEN_SLOT_LOW, amortized),
                    num(with_wb),
                    num(worst),
                ));
            }
        }
    }
    out
}

/// Below this share of the drive's saturated read rate, the trie prefetch's reads are said
/// to leave room; at or above it, to run at the drive's limit (issue 16's device-efficiency
/// bar).
const AT_THE_DRIVE: f64 = 0.8;

/// For each write workload's prefetching combinations and group depths: how fast the trie
/// prefetch read against the drive's limit, how long the update then waited for it, and how
/// much of the hash floor that wait is (the rest is the update's own work), so a reader sees
/// which part of the write floors the device sets.
fn write_device_sentences(view: &View) -> Vec<String> {
    let Some(disk) = view.results.machine.disk.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for w in view.workloads().into_iter().filter(|w| w.writes()) {
        for c in view.combos(w).into_iter().filter(|c| c.prefetch) {
            for gd in view.group_depths(w, c) {
                let key = c.key(w, gd);
                let med = |m: Metric| view.median(&key, m);
                let (Some(pages), Some(warm), Some(wait), Some(update), Some(eff), Some(hash_ms)) = (
                    med(Metric::DeviceReads),
                    med(Metric::TrieWarmMs),
                    med(Metric::TrieWaitMs),
                    med(Metric::TrieUpdateMs),
                    view.trie_prefetch_efficiency(&key),
                    view.hashing_ms(&key),
                ) else {
                    continue;
                };
                let before = med(Metric::StateReadMs).unwrap_or(0.0)
                    + med(Metric::ExecutionMs).unwrap_or(0.0);
                let own = (update - wait).max(0.0);
                let limit = if eff >= AT_THE_DRIVE {
                    "at the drive's limit: only fewer reads (more of the tree kept in memory) or a faster drive shortens the wait"
                } else {
                    "below the drive's limit: part of the wait is not the drive's"
                };
                let mut s = format!(
                    "**{}** ({}) at GD-{gd}: the trie prefetch read {} pages in {} ms (the block's device reads, nearly all of them its), beside the state read and execution ({} ms): {} the drive's most ({} reads of 4 KB per second, at QD{}), {limit}. The update then waited {} ms for it, {} the block's {} ms of hashing; its own work, {} ms, is {} (the hash floor is their sum)",
                    w.name(),
                    view.label(c),
                    num(pages),
                    num(warm),
                    num(before),
                    times_fine(eff),
                    count(disk.max_read_iops.round() as u64),
                    disk.saturation_depth,
                    num(wait),
                    times_fine(wait / hash_ms),
                    num(hash_ms),
                    num(own),
                    times_fine(own / hash_ms),
                );
                if let (Some(all), Some(after)) = (
                    view.write_floor_ratio(&key),
                    view.write_floor_ratio_after_reads(&key),
                ) {
                    s.push_str(&format!(
                        "; the write floor is {}, {} without the wait",
                        times_fine(all),
                        times_fine(after)
                    ));
                }
                s.push('.');
                out.push(s);
            }
        }
    }
    out
}

/// A ratio with two decimals (`1.04×`), for comparisons with a bar near 1 or 2.
fn times_fine(x: f64) -> String {
    format!("{x:.2}×")
}

/// Which (page size, group depth) is fastest for each workload, by median total block time,
/// within each read path / prefetch setting and state size measured at several page sizes;
/// the best is tested against the best of every other page size (Mann-Whitney, kept runs),
/// and the device reads per block say why.
fn page_size_sentences(view: &View) -> Vec<String> {
    let mut out = Vec::new();
    if !view.multi_page() {
        return out;
    }
    for w in view.workloads() {
        // Combinations without the page size.
        let families: std::collections::BTreeSet<Combo> = view
            .combos(w)
            .into_iter()
            .map(|c| Combo { page_size: 0, ..c })
            .collect();
        for family in families {
            // Per page size: its best group depth by median total.
            let mut bests: Vec<(u32, Ranked)> = Vec::new();
            for page_size in view.page_sizes() {
                let c = Combo {
                    page_size,
                    ..family
                };
                if let Some(best) = rank(view, w, c, Metric::TotalMs, false).first() {
                    bests.push((page_size, *best));
                }
            }
            if bests.len() < 2 {
                continue;
            }
            bests.sort_by(|a, b| a.1.value.total_cmp(&b.1.value));
            let (win_page, win) = bests[0];
            let win_key = Combo {
                page_size: win_page,
                ..family
            }
            .key(w, win.gd);
            let others: Vec<String> = bests[1..]
                .iter()
                .map(|&(page, r)| {
                    let key = Combo {
                        page_size: page,
                        ..family
                    }
                    .key(w, r.gd);
                    let p = stats::mann_whitney_p(
                        &view.samples(&win_key, Metric::TotalMs),
                        &view.samples(&key, Metric::TotalMs),
                    );
                    let reads = view
                        .median(&key, Metric::DeviceReads)
                        .map_or(String::new(), |d| format!(", {} device reads", num(d)));
                    format!(
                        "{} pages at GD-{} {} ms ({}, {}{reads})",
                        super::format::page(page),
                        r.gd,
                        num(r.value),
                        pct((r.value - win.value) / win.value * 100.0),
                        p_is(p)
                    )
                })
                .collect();
            // The page size's main effect: every group depth measured at both page sizes,
            // kept runs pooled, against the smallest page size.
            let pages = view.page_sizes();
            let small = Combo {
                page_size: pages[0],
                ..family
            };
            let pooled: Vec<String> = pages[1..]
                .iter()
                .filter_map(|&page| {
                    let c = Combo {
                        page_size: page,
                        ..family
                    };
                    let gds: Vec<u8> = view
                        .group_depths(w, c)
                        .into_iter()
                        .filter(|g| view.group_depths(w, small).contains(g))
                        .collect();
                    let take = |c: Combo| -> Vec<f64> {
                        gds.iter()
                            .flat_map(|&g| view.samples(&c.key(w, g), Metric::TotalMs))
                            .collect()
                    };
                    let (a, b) = (take(small), take(c));
                    let (ma, mb) = (stats::median(&a)?, stats::median(&b)?);
                    let p = p_is(stats::mann_whitney_p(&a, &b));
                    Some(format!(
                        "{} pages {} ({p}, {} blocks a side)",
                        super::format::page(page),
                        pct((mb - ma) / ma * 100.0),
                        a.len().min(b.len())
                    ))
                })
                .collect();
            let pooled = if pooled.is_empty() {
                String::new()
            } else {
                format!(
                    " All group depths pooled, against {} pages (median total of every kept block): {}.",
                    super::format::page(pages[0]),
                    pooled.join("; ")
                )
            };
            let reads = view
                .median(&win_key, Metric::DeviceReads)
                .map_or(String::new(), |d| format!(", {} device reads", num(d)));
            out.push(format!(
                "**{}** ({}): fastest with {} pages at GD-{}, {} ms median total{reads}; the best of each other page size: {}.{pooled}",
                w.name(),
                Combo {
                    page_size: win_page,
                    ..family
                }
                .label_with(false, view.multi_size()),
                super::format::page(win_page),
                win.gd,
                num(win.value),
                others.join("; ")
            ));
        }
    }
    out
}

/// The anchor's state: about 400 million entries (STUDY.md).
const ANCHOR_STEMS: f64 = 4e8;
/// Mainnet's state in EIP-7864 stems, an assumption: about 0.3 billion accounts (one header
/// stem each) and 1.2 billion storage slots, nearly all mapping slots at random keys (one stem
/// each).
const MAINNET_STEMS: f64 = 1.5e9;

/// Least-squares line through `points` (x, y): (intercept, slope); `None` with fewer than two
/// distinct x.
fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    Some((my - slope * mx, slope))
}

/// Per-slot cost against state size, fitted log-linearly (a B-tree's depth, and so the pages a
/// cold lookup reads, grows with the log of its size) and extrapolated to the anchor's state
/// and to mainnet's.
fn state_size_sentences(view: &View) -> Vec<String> {
    let mut out = Vec::new();
    if !view.multi_size() {
        return out;
    }
    let fmt = super::format::stems;
    for (w, metric, what) in [
        (
            Workload::Erc20Balanceof,
            Metric::MsPerColdRead,
            "ms of state read per cold slot",
        ),
        (
            Workload::Erc20Approve,
            Metric::MsPerWrittenSlot,
            "ms of block time per written slot",
        ),
    ] {
        let Some(c) = view.preferred_combo(w) else {
            continue;
        };
        for (gd, points) in view.by_state_size(w, metric) {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .map(|&(n, v)| ((n as f64).log2(), v))
                .collect();
            let Some((a, b)) = fit_line(&xy) else {
                continue;
            };
            let at = |stems: f64| a + b * stems.log2();
            let (first, last) = (points[0], points[points.len() - 1]);
            let pages = |stems: u64| {
                let key = super::view::Combo { stems, ..c }.key(w, gd);
                let reads = view.median(&key, Metric::DeviceReads)?;
                let slots = view.median(&key, Metric::SlotsRead).filter(|&s| s > 0.0)?;
                Some(reads / slots)
            };
            let pages_note = match (pages(first.0), pages(last.0)) {
                (Some(p0), Some(p1)) if w.reads() => {
                    format!("; device reads per slot {} → {}", num(p0), num(p1))
                }
                _ => String::new(),
            };
            let measured = format!(
                "**{}** ({}), GD-{gd}: {} {what} at {} stems, {} at {} ({} per doubling of the state{pages_note}).",
                w.name(),
                c.label(view.multi_page()),
                num(first.1),
                fmt(first.0),
                num(last.1),
                fmt(last.0),
                if b >= 0.0 {
                    format!("+{}", num(b))
                } else {
                    num(b)
                },
            );
            if b <= 0.0 {
                out.push(format!(
                    "{measured} The cost does not grow with the state here (noise, or caches the \
                     sizes fit in): nothing to extrapolate."
                ));
                continue;
            }
            out.push(format!(
                "{measured} Extrapolated along that line: {} ms at the anchor's ~{} entries and {} ms at mainnet's ~{} stems.",
                num(at(ANCHOR_STEMS)),
                fmt(ANCHOR_STEMS as u64),
                num(at(MAINNET_STEMS)),
                fmt(MAINNET_STEMS as u64),
            ));
        }
    }
    if !out.is_empty() {
        out.push(
            "The extrapolations assume: mainnet holds about 1.5 billion stems (about 0.3 billion \
             accounts and 1.2 billion storage slots, nearly all at random keys: an estimate, not \
             a measurement); the cost grows with the log of the state (the B-tree's depth); the \
             block starts with nothing cached (a real node keeps the upper B-tree levels in \
             memory, which this protocol does not); the drive is this one; and the line holds \
             beyond the sizes measured."
                .to_string(),
        );
    }
    out
}

/// The findings section's blocks (without its heading).
pub(super) fn findings(view: &View) -> Vec<Block> {
    let mut blocks = Vec::new();
    for w in view.workloads() {
        let mut items = Vec::new();
        for c in view.combos(w) {
            let mut sentences = Vec::new();
            let by_mgas = best_of(view, w, c, Metric::MgasS, true);
            let by_total = best_of(view, w, c, Metric::TotalMs, false);
            const MGAS: (&str, &str) = ("median Mgas/s", "Mgas/s");
            const TOTAL: (&str, &str) = ("median total block time", "ms");
            match (&by_mgas, &by_total) {
                (Some(m), Some(t)) if m.best.gd == t.best.gd => {
                    sentences.push(best_sentence(m, MGAS.0, MGAS.1));
                    sentences.push(agreeing_sentence(t, TOTAL.0, TOTAL.1));
                }
                _ => {
                    if let Some(m) = &by_mgas {
                        sentences.push(best_sentence(m, MGAS.0, MGAS.1));
                    }
                    if let Some(t) = &by_total {
                        sentences.push(best_sentence(t, TOTAL.0, TOTAL.1));
                    }
                }
            }
            sentences.retain(|s| !s.is_empty());
            let best_gd = by_mgas.as_ref().or(by_total.as_ref()).map(|b| b.best.gd);
            if let Some(gd) = best_gd
                && let Some(s) = share_sentence(view, w, c, gd)
            {
                sentences.push(s);
            }
            if !sentences.is_empty() {
                items.push(format!("**{}**: {}", view.label(c), sentences.join(" ")));
            }
        }
        if !items.is_empty() {
            blocks.push(Block::Heading(3, w.name().to_string()));
            blocks.push(Block::List(items));
        }
    }
    for (vary, title) in [
        (Vary::ReadPath, "Read path: trie vs flat (state read)"),
        (Vary::Prefetch, "Prefetch: off vs on (state read)"),
    ] {
        let items: Vec<String> = view
            .workloads()
            .into_iter()
            .filter_map(|w| pair_sentence(view, w, vary))
            .collect();
        if !items.is_empty() {
            blocks.push(Block::Heading(3, title.to_string()));
            blocks.push(Block::List(items));
        }
    }
    let page_items = page_size_sentences(view);
    if !page_items.is_empty() {
        blocks.push(Block::Heading(3, "Page size".to_string()));
        blocks.push(Block::List(page_items));
    }
    let size_items = state_size_sentences(view);
    if !size_items.is_empty() {
        blocks.push(Block::Heading(3, "State size".to_string()));
        blocks.push(Block::List(size_items));
    }
    let device_items = write_device_sentences(view);
    if !device_items.is_empty() {
        blocks.push(Block::Heading(
            3,
            "The write path against the drive".to_string(),
        ));
        blocks.push(Block::List(device_items));
    }
    let anchor_items = anchor_sentences(view);
    if !anchor_items.is_empty() {
        blocks.push(Block::Heading(
            3,
            "Per-slot cost against the anchor (flat + prefetch)".to_string(),
        ));
        blocks.push(Block::List(anchor_items));
    }
    if blocks.is_empty() {
        blocks.push(Block::Para(
            "No kept runs: nothing to conclude.".to_string(),
        ));
    }
    blocks
}
