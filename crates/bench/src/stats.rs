//! Medians, CV% and Mann-Whitney U tests over the kept runs.
//!
//! Everything here works on the kept runs only (`RunRow::kept`); dropped runs (the warm-up) never
//! enter a median, a CV% or a test. Non-finite metric values (a NaN from a division by zero, say)
//! are ignored as if the metric were absent, so every number produced is finite and survives a
//! JSON round trip.

use std::collections::BTreeMap;

use statrs::stats_tests::Alternative;
use statrs::stats_tests::mannwhitneyu::{MannWhitneyUMethod, mannwhitneyu};

use crate::model::{
    Comparison, ComparisonKind, ConfigKey, Metric, MetricSummary, Results, RunRow, Summary,
};

/// The median of `values`: the middle value of an odd-sized set, the mean of the two middle
/// values of an even-sized one; `None` for an empty set. Non-finite values are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// The coefficient of variation in percent: sample standard deviation (n - 1 denominator) over
/// the absolute mean, times 100. 0 when there are fewer than 2 values or the mean is 0.
/// Non-finite values are ignored.
pub fn cv_pct(values: &[f64]) -> f64 {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let cv = var.sqrt() / mean.abs() * 100.0;
    if cv.is_finite() { cv } else { 0.0 }
}

/// Largest `n1 + n2` for which the exact null distribution of U is enumerated.
const EXACT_MAX_TOTAL: usize = 50;

/// Two-sided Mann-Whitney U p-value of samples `a` and `b` (non-finite values ignored).
///
/// `None` when either side has fewer than 2 values, when every value of both sides is identical
/// (the test carries no information: the rank variance is 0), or when the test fails.
///
/// Method (as scipy's `method="auto"`): without ties, and with the smaller sample at most 8
/// values, the exact p-value; otherwise the normal approximation with tie correction and
/// continuity correction (statrs). The exact p-value is computed here because statrs 0.19.1's
/// exact method returns the complement of the tail probability when `a` is not longer than `b`
/// (e.g. p = 1 for `[1,2,3,4]` against `[5,6,7,8]`, where the right answer is 2/70).
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let first = a[0];
    if a.iter().chain(&b).all(|&x| x == first) {
        return None;
    }
    let (u1, p_asymptotic) = mannwhitneyu(
        &a,
        &b,
        MannWhitneyUMethod::AsymptoticInclContinuityCorrection,
        Alternative::TwoSided,
    )
    .ok()?;
    let mut all: Vec<f64> = a.iter().chain(&b).copied().collect();
    all.sort_by(f64::total_cmp);
    let ties = all.windows(2).any(|w| w[0] == w[1]);
    let (n1, n2) = (a.len(), b.len());
    let p = if !ties && n1.min(n2) <= 8 && n1 + n2 <= EXACT_MAX_TOTAL {
        let u = u1.max((n1 * n2) as f64 - u1);
        exact_two_sided_p(u.round() as usize, n1, n2)
    } else {
        p_asymptotic
    };
    p.is_finite().then_some(p.clamp(0.0, 1.0))
}

/// Exact two-sided p-value `2 * P(U >= u)` (capped at 1) under the null hypothesis, for samples
/// of `n1` and `n2` distinct values; `u` is the larger of the two U statistics.
fn exact_two_sided_p(u: usize, n1: usize, n2: usize) -> f64 {
    // counts[i][j][v]: arrangements of i values of one sample and j of the other with U = v.
    // The largest value comes from the first sample (beating all j others: U grows by j) or
    // from the second (U unchanged).
    let mut counts: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n2 + 1]; n1 + 1];
    for i in 0..=n1 {
        for j in 0..=n2 {
            let mut dist = vec![0.0; i * j + 1];
            if i == 0 || j == 0 {
                dist[0] = 1.0;
            } else {
                for (v, slot) in dist.iter_mut().enumerate() {
                    let from_first = if v >= j {
                        counts[i - 1][j].get(v - j).copied().unwrap_or(0.0)
                    } else {
                        0.0
                    };
                    let from_second = counts[i][j - 1].get(v).copied().unwrap_or(0.0);
                    *slot = from_first + from_second;
                }
            }
            counts[i][j] = dist;
        }
    }
    let dist = &counts[n1][n2];
    let total: f64 = dist.iter().sum();
    let tail: f64 = dist.iter().skip(u).sum();
    (2.0 * tail / total).min(1.0)
}

/// The finite values of metric `metric` over the kept runs of configuration `key`.
pub fn kept_samples(rows: &[RunRow], key: &ConfigKey, metric: Metric) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.kept && r.key == *key)
        .filter_map(|r| r.metric(metric))
        .filter(|x| x.is_finite())
        .collect()
}

/// Kept rows grouped by configuration, in key order.
pub(crate) fn kept_by_key(rows: &[RunRow]) -> BTreeMap<ConfigKey, Vec<&RunRow>> {
    let mut groups: BTreeMap<ConfigKey, Vec<&RunRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.kept) {
        groups.entry(r.key).or_default().push(r);
    }
    groups
}

/// The finite values of `metric` in `rows`.
pub(crate) fn values(rows: &[&RunRow], metric: Metric) -> Vec<f64> {
    rows.iter()
        .filter_map(|r| r.metric(metric))
        .filter(|x| x.is_finite())
        .collect()
}

/// One [`Summary`] per configuration that has at least one kept run, sorted by [`ConfigKey`].
///
/// For every metric of [`Metric::ALL`] that at least one kept run has (with a finite value), the
/// summary holds the median, the CV% ([`cv_pct`]) and the number of kept runs that had it.
/// Dropped runs (`kept == false`) are ignored entirely.
pub fn summarize(rows: &[RunRow]) -> Vec<Summary> {
    kept_by_key(rows)
        .into_iter()
        .map(|(key, group)| {
            let metrics = Metric::ALL
                .into_iter()
                .filter_map(|m| {
                    let v = values(&group, m);
                    let med = median(&v)?;
                    Some((
                        m,
                        MetricSummary {
                            median: med,
                            cv_pct: cv_pct(&v),
                            n: v.len(),
                        },
                    ))
                })
                .collect();
            let written: u64 = group.iter().map(|r| r.slots_written).sum();
            let total: f64 = group.iter().map(|r| r.total_ms).sum();
            let writeback: f64 = group.iter().map(|r| r.writeback_ms).sum();
            Summary {
                key,
                metrics,
                amortized_ms_per_written_slot: (written > 0).then(|| total / written as f64),
                amortized_with_writeback_ms_per_written_slot: (written > 0)
                    .then(|| (total + writeback) / written as f64),
                worst_total_ms: group.iter().map(|r| r.total_ms).reduce(f64::max),
            }
        })
        .collect()
}

/// Mann-Whitney U comparisons between group depths, everything else in the key equal.
///
/// For every configuration with group depth `g > 1` (over kept runs) and every metric of
/// `metrics`, in this order: against `g - 1` ([`ComparisonKind::Adjacent`]) when that configuration
/// was measured, then against group depth 1 ([`ComparisonKind::VsGd1`]) when that was measured (for
/// `g = 2` both compare against GD-1). `pct_diff` is `(median_b - median_a) / median_a x 100`
/// (0 when both medians are 0); a comparison is left out when either side lacks the metric or
/// the baseline median is 0 while the other is not (no finite percentage). `p_value` is
/// [`mann_whitney_p`]. Output is sorted by key, then kind, then the order of `metrics`.
pub fn compare(rows: &[RunRow], metrics: &[Metric]) -> Vec<Comparison> {
    let groups = kept_by_key(rows);
    let mut out = Vec::new();
    for (key, group_b) in &groups {
        let g = key.group_depth;
        if g <= 1 {
            continue;
        }
        for (kind, base) in [
            (ComparisonKind::Adjacent, g - 1),
            (ComparisonKind::VsGd1, 1),
        ] {
            let key_a = ConfigKey {
                group_depth: base,
                ..*key
            };
            let Some(group_a) = groups.get(&key_a) else {
                continue;
            };
            for &metric in metrics {
                let (va, vb) = (values(group_a, metric), values(group_b, metric));
                let (Some(ma), Some(mb)) = (median(&va), median(&vb)) else {
                    continue;
                };
                let pct_diff = if ma == 0.0 {
                    if mb != 0.0 {
                        continue;
                    }
                    0.0
                } else {
                    (mb - ma) / ma * 100.0
                };
                out.push(Comparison {
                    key: *key,
                    group_depth_a: base,
                    group_depth_b: g,
                    kind,
                    metric,
                    pct_diff,
                    p_value: mann_whitney_p(&va, &vb),
                });
            }
        }
    }
    out
}

/// Recomputes `results.summaries` ([`summarize`]) and `results.comparisons` ([`compare`] over
/// every metric of [`Metric::ALL`]) from `results.runs`, replacing what they held.
pub fn analyze(results: &mut Results) {
    results.summaries = summarize(&results.runs);
    results.comparisons = compare(&results.runs, &Metric::ALL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ReadPath, Workload};

    fn key(gd: u8) -> ConfigKey {
        ConfigKey {
            stems: 1_000,
            page_size: 4096,
            group_depth: gd,
            workload: Workload::Erc20Balanceof,
            read_path: ReadPath::Flat,
            prefetch: true,
            layout: Default::default(),
        }
    }

    fn row(key: ConfigKey, run: u32, kept: bool, total_ms: f64) -> RunRow {
        RunRow {
            key,
            run,
            kept,
            gas: 1_000_000,
            total_ms,
            state_read_ms: total_ms / 2.0,
            execution_ms: 1.0,
            trie_update_ms: 0.0,
            commit_ms: 0.0,
            writeback_ms: 0.0,
            block_in_run: 0,
            mgas_s: 1_000.0 / total_ms,
            store_reads: 10,
            bytes_read: 100,
            nodes_loaded: 0,
            hashes: 0,
            bytes_written: 0,
            device_reads: None,
            cpu_ms: None,
            minor_faults: None,
            steal_ms: None,
            cold_reads: 10,
            slots_written: 0,
            slots_read: 0,
            trie_warm_ms: 0.0,
            trie_wait_ms: None,
            ms_per_cold_read: Some(total_ms / 20.0),
            ms_per_written_slot: None,
            hash_floor: None,
            hash64_ns: None,
            witness_keys: None,
            witness_multiproof_bytes: None,
            witness_blobs_bytes: None,
        }
    }

    #[test]
    fn medians_of_odd_and_even_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn cv_of_a_known_set() {
        // mean 5, sample variance 32/7, sd 2.138..., CV 42.76...%
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let expected = (32.0f64 / 7.0).sqrt() / 5.0 * 100.0;
        assert!((cv_pct(&v) - expected).abs() < 1e-9);
        assert_eq!(cv_pct(&[3.0]), 0.0);
        assert_eq!(cv_pct(&[0.0, 0.0, 0.0]), 0.0);
        assert_eq!(cv_pct(&[-1.0, 1.0]), 0.0);
    }

    #[test]
    fn dropped_runs_are_excluded() {
        let rows = vec![
            row(key(1), 0, false, 1_000.0),
            row(key(1), 1, true, 10.0),
            row(key(1), 2, true, 20.0),
            row(key(1), 3, true, 30.0),
        ];
        let s = summarize(&rows);
        assert_eq!(s.len(), 1);
        let total = &s[0].metrics[&Metric::TotalMs];
        assert_eq!(total.median, 20.0);
        assert_eq!(total.n, 3);
        assert!((total.cv_pct - 50.0).abs() < 1e-9);
        // Absent optional metrics are absent from the summary.
        assert!(s[0].metrics.contains_key(&Metric::MsPerColdRead));
        assert!(!s[0].metrics.contains_key(&Metric::HashFloor));
        // A configuration with only dropped runs gets no summary.
        let only_dropped = vec![row(key(2), 0, false, 5.0)];
        assert!(summarize(&only_dropped).is_empty());
    }

    #[test]
    fn summaries_are_sorted_by_key() {
        let rows = vec![
            row(key(3), 1, true, 1.0),
            row(key(1), 1, true, 1.0),
            row(key(2), 1, true, 1.0),
        ];
        let gds: Vec<u8> = summarize(&rows).iter().map(|s| s.key.group_depth).collect();
        assert_eq!(gds, vec![1, 2, 3]);
    }

    #[test]
    fn p_value_small_for_separated_samples() {
        let a: Vec<f64> = (1..=9).map(f64::from).collect();
        let b: Vec<f64> = (11..=19).map(f64::from).collect();
        let p = mann_whitney_p(&a, &b).unwrap();
        assert!(p < 0.001, "p = {p}");
        assert_eq!(mann_whitney_p(&b, &a), Some(p));
    }

    #[test]
    fn exact_p_value_for_small_separated_samples() {
        // 4 vs 4, fully separated: 2 of C(8,4) = 70 arrangements are as extreme.
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]).unwrap();
        assert!((p - 2.0 / 70.0).abs() < 1e-12, "p = {p}");
        // 5 vs 4 (scipy: 0.015873015873015872).
        let p = mann_whitney_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0]).unwrap();
        assert!((p - 2.0 / 126.0).abs() < 1e-12, "p = {p}");
        // Interleaved: U = 6 of 16; scipy exact two-sided gives 0.6857142857142857.
        let p = mann_whitney_p(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]).unwrap();
        assert!((p - 0.685_714_285_714_285_7).abs() < 1e-12, "p = {p}");
    }

    #[test]
    fn p_value_large_for_identical_distributions() {
        let a: Vec<f64> = (1..=9).map(f64::from).collect();
        let mut b = a.clone();
        b.reverse();
        let p = mann_whitney_p(&a, &b).unwrap();
        assert!(p > 0.9, "p = {p}");
    }

    #[test]
    fn p_value_none_when_undefined() {
        assert_eq!(mann_whitney_p(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(mann_whitney_p(&[1.0, 2.0], &[]), None);
        assert_eq!(mann_whitney_p(&[5.0, 5.0, 5.0], &[5.0, 5.0]), None);
    }

    #[test]
    fn comparison_pairs_the_right_group_depths() {
        let mut rows = Vec::new();
        for gd in 1..=3u8 {
            rows.push(row(key(gd), 0, false, 1.0));
            for run in 1..=9 {
                rows.push(row(
                    key(gd),
                    run,
                    true,
                    f64::from(gd) * 100.0 + f64::from(run),
                ));
            }
        }
        // A different read path must never be paired with the flat rows.
        let trie = ConfigKey {
            read_path: ReadPath::TrieWalk,
            ..key(2)
        };
        rows.push(row(trie, 1, true, 5.0));
        let c = compare(&rows, &[Metric::TotalMs, Metric::HashFloor]);
        let got: Vec<(u8, u8, ComparisonKind, ReadPath)> = c
            .iter()
            .map(|c| (c.group_depth_a, c.group_depth_b, c.kind, c.key.read_path))
            .collect();
        use ComparisonKind::{Adjacent, VsGd1};
        assert_eq!(
            got,
            vec![
                (1, 2, Adjacent, ReadPath::Flat),
                (1, 2, VsGd1, ReadPath::Flat),
                (2, 3, Adjacent, ReadPath::Flat),
                (1, 3, VsGd1, ReadPath::Flat),
            ]
        );
        assert!(c.iter().all(|c| c.metric == Metric::TotalMs));
        let c23 = &c[2];
        assert_eq!(c23.key.group_depth, 3);
        // medians 205 -> 305
        assert!((c23.pct_diff - (305.0 - 205.0) / 205.0 * 100.0).abs() < 1e-9);
        assert!(c23.p_value.unwrap() < 0.001);
        let c13 = &c[3];
        assert!((c13.pct_diff - 200.0 / 105.0 * 100.0).abs() < 1e-9);
    }

    #[test]
    fn single_group_depth_has_no_comparisons() {
        let rows = vec![row(key(5), 1, true, 1.0), row(key(5), 2, true, 2.0)];
        assert!(compare(&rows, &[Metric::TotalMs]).is_empty());
    }
}
