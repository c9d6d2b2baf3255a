//! Two versions of the code compared from their study results (`bintrie compare`).
//!
//! One `bintrie bench` invocation measures a handful of blocks, and on this kind of machine the
//! same binary's blocks move together from one invocation to the next (the drive's phase, the
//! host), so blocks of one invocation are not independent samples. [`compare_sides`] therefore
//! reports, beside the pooled medians and the Mann-Whitney p-value over every kept block (which
//! treats the blocks as independent and overstates), the p-value over one median per
//! invocation, and, for invocations run in alternating rounds (before 1, after 1, before 2, ...),
//! in how many rounds the after side was lower, with the sign test's p-value: the claims this
//! supports rest on invocations, not on blocks.

use serde::Serialize;

use crate::model::{ConfigKey, Metric, Results, RunRow};
use crate::stats::{kept_by_key, mann_whitney_p, median, values};
use std::collections::BTreeMap;

/// One configuration and metric measured on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AbRow {
    /// The configuration (every field of the study's key).
    pub key: ConfigKey,
    /// The metric.
    pub metric: Metric,
    /// Median over the kept blocks of every before invocation that measured the configuration.
    pub before_median: f64,
    /// The same over the after invocations.
    pub after_median: f64,
    /// `(after - before) / before x 100`; `None` when the before median is 0.
    pub change_pct: Option<f64>,
    /// Kept blocks pooled on each side: (before, after).
    pub blocks: (usize, usize),
    /// Invocations that measured the configuration on each side: (before, after).
    pub invocations: (usize, usize),
    /// Two-sided Mann-Whitney p over the pooled blocks ([`mann_whitney_p`]): overstates when
    /// invocations differ, since a block is not independent of its invocation's others.
    pub p_blocks: Option<f64>,
    /// Two-sided Mann-Whitney p over one median per invocation (`None` with fewer than two
    /// invocations on a side).
    pub p_invocations: Option<f64>,
    /// Rounds: the invocations paired by their position in the two lists (the i-th before
    /// with the i-th after), counting only positions where both measured the configuration.
    /// `None` when no position pairs.
    pub rounds: Option<Rounds>,
    /// Two-sided sign test p over the rounds whose medians differ ([`sign_test_p`] of the
    /// lower ones among them); `None` without such rounds.
    pub p_rounds: Option<f64>,
}

/// How the paired invocations ([`AbRow::rounds`]) came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rounds {
    /// Rounds in which the after median was lower.
    pub lower: usize,
    /// Rounds in which it was higher (the rest were equal).
    pub higher: usize,
    /// Rounds paired.
    pub paired: usize,
}

/// Exact two-sided sign test: the probability, with `n` fair coin flips, of a count at least as
/// far from `n / 2` as `k` (capped at 1, and 1 when within 1e-12 of it: the CDF's
/// floating-point noise printed one round against none as 0.9999999999999991). `None` when
/// `n` is 0 or `k > n`.
pub fn sign_test_p(k: usize, n: usize) -> Option<f64> {
    if n == 0 || k > n {
        return None;
    }
    use statrs::distribution::{Binomial, DiscreteCDF};
    let tail = k.min(n - k);
    let coin = Binomial::new(0.5, n as u64).ok()?;
    let p = (2.0 * coin.cdf(tail as u64)).min(1.0);
    Some(if 1.0 - p < 1e-12 { 1.0 } else { p })
}

/// Compares `after` with `before` (each a list of `results.json` contents, one per
/// invocation, in the order they ran) on every configuration that both sides measured (kept
/// blocks), for each of `metrics` that both sides have. Rows are sorted by configuration,
/// then in the order of `metrics`. A configuration measured on one side only is left out.
pub fn compare_sides(before: &[Results], after: &[Results], metrics: &[Metric]) -> Vec<AbRow> {
    // Each invocation's kept rows by configuration, grouped once (looking them up per
    // configuration and metric in every row was quadratic in a file's rows).
    fn grouped(side: &[Results]) -> Vec<BTreeMap<ConfigKey, Vec<&RunRow>>> {
        side.iter().map(|r| kept_by_key(&r.runs)).collect()
    }
    let (gb, ga) = (grouped(before), grouped(after));
    let keys =
        |side: &[BTreeMap<ConfigKey, Vec<&RunRow>>]| -> std::collections::BTreeSet<ConfigKey> {
            side.iter().flat_map(|by| by.keys().copied()).collect()
        };
    let (kb, ka) = (keys(&gb), keys(&ga));
    let mut out = Vec::new();
    for key in kb.intersection(&ka) {
        for &metric in metrics {
            // Per invocation: its kept blocks (empty when it did not measure the key).
            let per = |side: &[BTreeMap<ConfigKey, Vec<&RunRow>>]| -> Vec<Vec<f64>> {
                side.iter()
                    .map(|by| {
                        by.get(key)
                            .map_or_else(Vec::new, |rows| values(rows, metric))
                    })
                    .collect()
            };
            let (pb, pa) = (per(&gb), per(&ga));
            let pooled = |p: &[Vec<f64>]| -> Vec<f64> { p.iter().flatten().copied().collect() };
            let (vb, va) = (pooled(&pb), pooled(&pa));
            let (Some(mb), Some(ma)) = (median(&vb), median(&va)) else {
                continue;
            };
            // Each invocation's median, by position (`None`: it did not measure the key).
            let medians =
                |p: &[Vec<f64>]| -> Vec<Option<f64>> { p.iter().map(|v| median(v)).collect() };
            let (mb_each, ma_each) = (medians(&pb), medians(&pa));
            let (ib, ia): (Vec<f64>, Vec<f64>) = (
                mb_each.iter().flatten().copied().collect(),
                ma_each.iter().flatten().copied().collect(),
            );
            let paired: Vec<(f64, f64)> = mb_each
                .iter()
                .zip(&ma_each)
                .filter_map(|(b, a)| Some(((*b)?, (*a)?)))
                .collect();
            let rounds = (!paired.is_empty()).then(|| Rounds {
                lower: paired.iter().filter(|(b, a)| a < b).count(),
                higher: paired.iter().filter(|(b, a)| a > b).count(),
                paired: paired.len(),
            });
            out.push(AbRow {
                key: *key,
                metric,
                before_median: mb,
                after_median: ma,
                change_pct: (mb != 0.0).then(|| (ma - mb) / mb * 100.0),
                blocks: (vb.len(), va.len()),
                invocations: (ib.len(), ia.len()),
                p_blocks: mann_whitney_p(&vb, &va),
                p_invocations: mann_whitney_p(&ib, &ia),
                rounds,
                p_rounds: rounds.and_then(|r| sign_test_p(r.lower, r.lower + r.higher)),
            });
        }
    }
    out
}

/// The settings outside the configuration key on which the invocations differ (within a side
/// or between the sides), each as `name: before {values}, after {values}`: a change they show
/// may be these settings', not the code's. Covers the study's settings that shape a block
/// (durability, blocks per run, write buffer, holders, seed, mixed share, prefetch workers,
/// gas limits, witnesses, the log's kept levels, warm branches), whether an invocation stopped
/// part-way, and the machine (CPU model and count, memory, kernel; not the drive's measured
/// figures, which differ in every run). Empty when all agree.
pub fn settings_differences(before: &[Results], after: &[Results]) -> Vec<String> {
    type Setting = (&'static str, fn(&Results) -> String);
    const SETTINGS: [Setting; 17] = [
        ("incomplete (stopped part-way)", |r| {
            (if r.incomplete.is_some() { "yes" } else { "no" }).to_string()
        }),
        ("durability", |r| r.config.durability.name().to_string()),
        ("blocks_per_run", |r| r.config.blocks_per_run.to_string()),
        ("buffer_blocks", |r| r.config.buffer_blocks.to_string()),
        ("holders", |r| r.config.holders.to_string()),
        ("seed", |r| r.config.seed.to_string()),
        ("mixed_read_pct", |r| r.config.mixed_read_pct.to_string()),
        ("prefetch_workers", |r| {
            r.config.prefetch_workers.to_string()
        }),
        ("block_gas_limit", |r| r.config.block_gas_limit.to_string()),
        ("tx_gas_limit", |r| r.config.tx_gas_limit.to_string()),
        ("witness", |r| r.config.witness.to_string()),
        ("log_pinned_mib", |r| r.config.log_pinned_mib.to_string()),
        ("warm_branches", |r| r.config.warm_branches.to_string()),
        ("machine.cpus", |r| r.machine.cpus.to_string()),
        ("machine.memory_bytes", |r| {
            r.machine
                .memory_bytes
                .map_or_else(|| "unknown".into(), |m| m.to_string())
        }),
        ("machine.kernel", |r| {
            r.machine.kernel.clone().unwrap_or_else(|| "unknown".into())
        }),
        ("machine.cpu_model", |r| {
            r.machine
                .cpu_model
                .clone()
                .unwrap_or_else(|| "unknown".into())
        }),
    ];
    let seen = |side: &[Results], f: fn(&Results) -> String| {
        side.iter()
            .map(f)
            .collect::<std::collections::BTreeSet<String>>()
    };
    SETTINGS
        .iter()
        .filter_map(|(name, f)| {
            let (b, a) = (seen(before, *f), seen(after, *f));
            (b.len() > 1 || a.len() > 1 || b != a).then(|| {
                let list = |v: &std::collections::BTreeSet<String>| {
                    v.iter().cloned().collect::<Vec<_>>().join(", ")
                };
                format!("{name}: before {}, after {}", list(&b), list(&a))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Layout, ReadPath, RunRow, Workload};

    fn key(group_depth: u8) -> ConfigKey {
        ConfigKey {
            stems: 1_000,
            page_size: 4096,
            group_depth,
            workload: Workload::Erc20Approve,
            read_path: ReadPath::Flat,
            prefetch: true,
            layout: Layout::Log,
        }
    }

    /// One invocation's results with a kept block per value of `commits` at `key` (and a
    /// dropped warm-up block that must not count).
    fn invocation(key: ConfigKey, commits: &[f64]) -> Results {
        let mut results = crate::report::tests::sample_results();
        let template = results.runs[0].clone();
        let row = |run: u32, kept: bool, commit: f64| RunRow {
            key,
            run,
            kept,
            commit_ms: commit,
            ..template.clone()
        };
        results.runs = std::iter::once(row(0, false, 1e6))
            .chain(commits.iter().map(|&c| row(1, true, c)))
            .collect();
        results
    }

    #[test]
    fn the_sign_test_matches_the_binomial_tails() {
        // 6 of 6: 2 / 64.
        assert!((sign_test_p(6, 6).unwrap() - 2.0 / 64.0).abs() < 1e-12);
        assert!((sign_test_p(0, 6).unwrap() - 2.0 / 64.0).abs() < 1e-12);
        // 5 of 6: 2 x 7 / 64.
        assert!((sign_test_p(5, 6).unwrap() - 14.0 / 64.0).abs() < 1e-12);
        assert_eq!(sign_test_p(3, 6), Some(1.0));
        // One round against none is as likely as not: exactly 1.
        assert_eq!(sign_test_p(0, 1), Some(1.0));
        assert_eq!(sign_test_p(1, 1), Some(1.0));
        // A tiny p stays above 0 (42 rounds all one way: 2 / 2^42).
        assert!(sign_test_p(0, 42).unwrap() > 0.0);
        // Many rounds stay finite: 60 of 100 is about 0.057.
        let p = sign_test_p(60, 100).unwrap();
        assert!((p - 0.0569).abs() < 1e-3, "{p}");
        assert!(sign_test_p(5000, 10000).unwrap() <= 1.0);
        assert_eq!(sign_test_p(1, 0), None);
        assert_eq!(sign_test_p(7, 6), None);
    }

    #[test]
    fn pooled_blocks_can_look_significant_where_invocations_do_not() {
        // Each side's invocations sit at different levels: within an invocation the blocks
        // are tight, so pooling 8 blocks per invocation makes a level shift look significant
        // that the two medians per side cannot support.
        let blocks = |level: f64| -> Vec<f64> { (0..8).map(|i| level + i as f64 * 0.01).collect() };
        let before = [
            invocation(key(5), &blocks(4.0)),
            invocation(key(5), &blocks(3.0)),
        ];
        let after = [
            invocation(key(5), &blocks(3.5)),
            invocation(key(5), &blocks(2.5)),
        ];
        let rows = compare_sides(&before, &after, &[Metric::CommitMs]);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.blocks, r.invocations), ((16, 16), (2, 2)));
        assert!(r.p_blocks.unwrap() < 0.05, "{r:?}");
        assert!(r.p_invocations.unwrap() >= 0.1, "{r:?}");
        assert_eq!(
            r.rounds,
            Some(Rounds {
                lower: 2,
                higher: 0,
                paired: 2
            })
        );
        assert!(r.after_median < r.before_median);
        assert!(r.change_pct.unwrap() < 0.0);
        // The dropped warm-up (1e6) never enters a median.
        assert!(r.before_median < 10.0);
    }

    #[test]
    fn rounds_pair_invocations_by_position_and_skip_one_sided_configurations() {
        let before = [
            invocation(key(5), &[4.0, 4.1]),
            invocation(key(4), &[9.0, 9.1]),
        ];
        let after = [invocation(key(5), &[3.0, 3.1])];
        // Only GD-5 is on both sides; GD-4 (before only) is left out.
        let rows = compare_sides(&before, &after, &[Metric::CommitMs, Metric::TotalMs]);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.key == key(5)));
        // Position 0 pairs (both measured GD-5); position 1 has no after invocation.
        assert_eq!(
            rows[0].rounds,
            Some(Rounds {
                lower: 1,
                higher: 0,
                paired: 1
            })
        );
        assert_eq!(rows[0].invocations, (1, 1));
        assert_eq!(rows[0].p_invocations, None);
        // The second before invocation did not measure GD-5, and the after side's first did:
        // GD-5 in the second before position has nothing to pair with.
        let before = [
            invocation(key(4), &[9.0, 9.1]),
            invocation(key(5), &[4.0, 4.1]),
        ];
        let rows = compare_sides(&before, &after, &[Metric::CommitMs]);
        assert_eq!(rows[0].rounds, None);
        assert_eq!(rows[0].p_rounds, None);
        // Equal medians are neither lower nor higher, and carry no sign.
        let rows = compare_sides(&after, &after, &[Metric::CommitMs]);
        assert_eq!(
            rows[0].rounds,
            Some(Rounds {
                lower: 0,
                higher: 0,
                paired: 1
            })
        );
        assert_eq!(rows[0].p_rounds, None);
        assert_eq!(rows[0].change_pct, Some(0.0));
        // Six rounds, one tied: the sign test counts the five that differ.
        let six = |level: f64| -> Vec<Results> {
            (0..6)
                .map(|i| invocation(key(5), &[level + f64::from(i), level + f64::from(i)]))
                .collect()
        };
        let (before, mut after) = (six(10.0), six(9.0));
        after[0] = invocation(key(5), &[10.0, 10.0]);
        let rows = compare_sides(&before, &after, &[Metric::CommitMs]);
        assert_eq!(
            rows[0].rounds,
            Some(Rounds {
                lower: 5,
                higher: 0,
                paired: 6
            })
        );
        assert_eq!(rows[0].p_rounds, sign_test_p(5, 5));
    }

    /// Settings outside the key that differ between or within the sides are named; equal
    /// ones are not.
    #[test]
    fn differing_settings_are_named() {
        let k = key(5);
        let a = invocation(k, &[1.0, 2.0]);
        let one = std::slice::from_ref(&a);
        assert!(settings_differences(one, one).is_empty());
        let mut b = a.clone();
        b.config.seed += 1;
        b.machine.cpus += 2;
        let d = settings_differences(one, std::slice::from_ref(&b));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("seed: before ") && d[1].starts_with("machine.cpus: "));
        // Within one side too.
        let d = settings_differences(&[a.clone(), b], std::slice::from_ref(&a));
        assert_eq!(d.len(), 2, "{d:?}");
        // An invocation stopped part-way is named.
        let mut stopped = a.clone();
        stopped.incomplete = Some("interrupted".into());
        let d = settings_differences(one, std::slice::from_ref(&stopped));
        assert_eq!(
            d,
            ["incomplete (stopped part-way): before no, after yes"],
            "{d:?}"
        );
    }

    #[test]
    fn an_absent_optional_metric_gives_no_row() {
        let before = [invocation(key(5), &[4.0, 4.1])];
        let rows = compare_sides(&before, &before, &[Metric::WitnessKeys]);
        assert!(rows.is_empty(), "{rows:?}");
    }
}
