//! Lookups over a [`Results`]: which workloads, combinations and group depths were measured, and
//! their medians, CV% and comparisons.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    Comparison, ComparisonKind, ConfigKey, Layout, Metric, MetricSummary, ReadPath, Results,
    Summary, Workload,
};
use crate::stats;

/// Everything of a [`ConfigKey`] but the workload and the group depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Combo {
    /// State size, random stems.
    pub stems: u64,
    /// MDBX page size.
    pub page_size: u32,
    /// Read path.
    pub read_path: ReadPath,
    /// Prefetch on or off.
    pub prefetch: bool,
    /// The on-disk layout.
    pub layout: Layout,
}

impl Combo {
    /// The combination of `key`.
    pub(super) fn of(key: &ConfigKey) -> Combo {
        Combo {
            stems: key.stems,
            page_size: key.page_size,
            read_path: key.read_path,
            prefetch: key.prefetch,
            layout: key.layout,
        }
    }

    /// The configuration of this combination for `workload` at `group_depth`.
    pub(super) fn key(self, workload: Workload, group_depth: u8) -> ConfigKey {
        ConfigKey {
            stems: self.stems,
            page_size: self.page_size,
            group_depth,
            workload,
            read_path: self.read_path,
            prefetch: self.prefetch,
            layout: self.layout,
        }
    }

    /// `flat + prefetch` or `trie, no prefetch`, with `, 4 KB pages` when `with_page` and
    /// `, 16M stems` when `with_stems`.
    pub(super) fn label_with(self, with_page: bool, with_stems: bool) -> String {
        let mut s = self.label(with_page);
        if with_stems {
            s.push_str(&format!(", {} stems", super::format::stems(self.stems)));
        }
        s
    }

    /// `flat + prefetch` or `trie, no prefetch`, with `, 4 KB pages` when `with_page`, and
    /// `, log layout` for the log (`, log layout (copied from 4 KB pages)` with the page).
    pub(super) fn label(self, with_page: bool) -> String {
        let mut s = format!(
            "{}{}",
            self.read_path.name(),
            if self.prefetch {
                " + prefetch"
            } else {
                ", no prefetch"
            }
        );
        // The log has no pages: its rows carry the page size of the MDBX database it was
        // copied from, which tells them apart when the study has several.
        match (self.layout, with_page) {
            (Layout::Log, true) => s.push_str(&format!(
                ", log layout (copied from {} pages)",
                super::format::page(self.page_size)
            )),
            (Layout::Log, false) => s.push_str(", log layout"),
            (Layout::Mdbx, true) => {
                s.push_str(&format!(", {} pages", super::format::page(self.page_size)))
            }
            (Layout::Mdbx, false) => {}
        }
        s
    }
}

/// Indexed access to one [`Results`].
pub(super) struct View<'a> {
    /// The results viewed.
    pub results: &'a Results,
    summaries: BTreeMap<ConfigKey, &'a Summary>,
}

impl<'a> View<'a> {
    /// Indexes `results.summaries` by configuration.
    pub(super) fn new(results: &'a Results) -> View<'a> {
        let summaries = results.summaries.iter().map(|s| (s.key, s)).collect();
        View { results, summaries }
    }

    /// Workloads with at least one summary, in [`Workload::ALL`] order.
    pub(super) fn workloads(&self) -> Vec<Workload> {
        let present: BTreeSet<Workload> = self.summaries.keys().map(|k| k.workload).collect();
        Workload::ALL
            .into_iter()
            .filter(|w| present.contains(w))
            .collect()
    }

    /// Combinations measured for `workload`, sorted (page size, trie before flat, prefetch off
    /// before on).
    pub(super) fn combos(&self, workload: Workload) -> Vec<Combo> {
        let set: BTreeSet<Combo> = self
            .summaries
            .keys()
            .filter(|k| k.workload == workload)
            .map(Combo::of)
            .collect();
        set.into_iter().collect()
    }

    /// Group depths measured for `workload` in `combo`, ascending.
    pub(super) fn group_depths(&self, workload: Workload, combo: Combo) -> Vec<u8> {
        self.summaries
            .keys()
            .filter(|k| k.workload == workload && Combo::of(k) == combo)
            .map(|k| k.group_depth)
            .collect::<BTreeSet<u8>>()
            .into_iter()
            .collect()
    }

    /// The distinct values of `field` over the summaries, ascending.
    fn distinct<T: Ord>(&self, field: impl Fn(&ConfigKey) -> T) -> Vec<T> {
        let set: BTreeSet<T> = self.summaries.keys().map(field).collect();
        set.into_iter().collect()
    }

    /// Page sizes with at least one summary, ascending.
    pub(super) fn page_sizes(&self) -> Vec<u32> {
        self.distinct(|k| k.page_size)
    }

    /// True when more than one page size was measured (labels then name the page size).
    pub(super) fn multi_page(&self) -> bool {
        self.page_sizes().len() > 1
    }

    /// State sizes with at least one summary, ascending.
    pub(super) fn state_sizes(&self) -> Vec<u64> {
        self.distinct(|k| k.stems)
    }

    /// True when more than one state size was measured (labels then name the size).
    pub(super) fn multi_size(&self) -> bool {
        self.state_sizes().len() > 1
    }

    /// `combo`'s label in this study: its read path and prefetch setting, with the page size
    /// when several were measured and the state size when several were.
    pub(super) fn label(&self, combo: Combo) -> String {
        combo.label_with(self.multi_page(), self.multi_size())
    }

    /// The summary of `metric` for `key`, if measured.
    pub(super) fn metric(&self, key: &ConfigKey, metric: Metric) -> Option<&'a MetricSummary> {
        self.summaries.get(key)?.metrics.get(&metric)
    }

    /// The median of `metric` for `key`, if measured.
    pub(super) fn summary(&self, key: &ConfigKey) -> Option<&'a Summary> {
        self.summaries.get(key).copied()
    }

    /// The study's configuration.
    pub(super) fn config(&self) -> &'a crate::model::StudyConfig {
        &self.results.config
    }

    /// The median of `metric` over the kept runs of `key`.
    pub(super) fn median(&self, key: &ConfigKey, metric: Metric) -> Option<f64> {
        self.metric(key, metric).map(|m| m.median)
    }

    /// The comparison of `metric` for `key` (as group depth b) of `kind`, if computed.
    pub(super) fn comparison(
        &self,
        key: &ConfigKey,
        kind: ComparisonKind,
        metric: Metric,
    ) -> Option<&'a Comparison> {
        self.results
            .comparisons
            .iter()
            .find(|c| c.key == *key && c.kind == kind && c.metric == metric)
    }

    /// The kept runs' values of `metric` for `key`.
    pub(super) fn samples(&self, key: &ConfigKey, metric: Metric) -> Vec<f64> {
        stats::kept_samples(&self.results.runs, key, metric)
    }

    /// What the device needs for the pages `key`'s blocks read, ms: the median
    /// [`Metric::DeviceReads`] x the measured per-read time at QD16 (`machine.disk`); `None`
    /// without a disk measurement or device reads.
    pub(super) fn device_floor_ms(&self, key: &ConfigKey) -> Option<f64> {
        let disk = self.results.machine.disk.as_ref()?;
        let reads = self.median(key, Metric::DeviceReads).filter(|&r| r > 0.0)?;
        Some(reads * disk.read_qd16_us / 1e3)
    }

    /// [`View::device_floor_ms`] over the median state read: 1.0 means the pages arrived at
    /// the drive's QD16 rate. (Write workloads also count the trie prefetch's and the commit's
    /// pages, which overlap the state read: their figure can exceed 1.)
    pub(super) fn device_efficiency(&self, key: &ConfigKey) -> Option<f64> {
        let read = self.median(key, Metric::StateReadMs).filter(|&r| r > 0.0)?;
        Some(self.device_floor_ms(key)? / read)
    }

    /// What the device and one core need at least for `key`'s trie update and commit, ms: the
    /// median hash calls x the median hash cost probed beside the blocks (the run's one probe in
    /// older results), plus the median bytes written at the drive's sequential write
    /// bandwidth, plus one `fdatasync`; `None` without a disk measurement or writes.
    pub(super) fn write_floor_ms(&self, key: &ConfigKey) -> Option<f64> {
        let disk = self.results.machine.disk.as_ref()?;
        let bytes = self
            .median(key, Metric::BytesWritten)
            .filter(|&b| b > 0.0)?;
        let hash_ms = self.hashing_ms(key).unwrap_or(0.0);
        Some(hash_ms + bytes / (disk.seq_write_mb_s * 1e3) + disk.fsync_us / 1e3)
    }

    /// Median trie update + commit over [`View::write_floor_ms`] (issue 13's "within 2x").
    pub(super) fn write_floor_ratio(&self, key: &ConfigKey) -> Option<f64> {
        let spent = self.median(key, Metric::TrieUpdateMs)? + self.median(key, Metric::CommitMs)?;
        Some(spent / self.write_floor_ms(key)?)
    }

    /// The trie update's own work: median trie update - median wait for the trie prefetch's
    /// reads (at least 0). `None` without `trie_wait_ms` (older results).
    pub(super) fn trie_own_work_ms(&self, key: &ConfigKey) -> Option<f64> {
        let wait = self.median(key, Metric::TrieWaitMs)?;
        Some((self.median(key, Metric::TrieUpdateMs)? - wait).max(0.0))
    }

    /// The median hash calls x the median hash cost probed beside the blocks (the run's one
    /// probe in older results), ms: the hashing the hash floor divides by. `None` without
    /// hashes.
    pub(super) fn hashing_ms(&self, key: &ConfigKey) -> Option<f64> {
        let hashes = self.median(key, Metric::Hashes).filter(|&h| h > 0.0)?;
        let hash_ns = self
            .median(key, Metric::Hash64Ns)
            .unwrap_or(self.results.machine.hash64_ns);
        (hash_ns > 0.0).then(|| hashes * hash_ns / 1e6)
    }

    /// The trie prefetch's pages per second over the drive's most 4 KB reads per second
    /// (`machine.disk.max_read_iops`, at its saturation depth): the median
    /// [`Metric::DeviceReads`] over the median [`Metric::TrieWarmMs`]. 1.0 means the prefetch
    /// read as fast as the drive can serve reads at any depth. Meaningful for write workloads,
    /// whose device reads are mostly the trie prefetch's (the state prefetch's and the
    /// commit's pages count too, so it errs high); `None` without a disk measurement, device
    /// reads or a prefetch time.
    pub(super) fn trie_prefetch_efficiency(&self, key: &ConfigKey) -> Option<f64> {
        let disk = self.results.machine.disk.as_ref()?;
        let pages = self.median(key, Metric::DeviceReads).filter(|&r| r > 0.0)?;
        let warm_ms = self.median(key, Metric::TrieWarmMs).filter(|&w| w > 0.0)?;
        (disk.max_read_iops > 0.0).then(|| pages / (warm_ms / 1e3) / disk.max_read_iops)
    }

    /// [`View::write_floor_ratio`] without the update's wait for the trie prefetch's reads
    /// ([`View::trie_own_work_ms`] + median commit, over the floor): the part of the block's
    /// write work the floor's terms describe, the cold reads left out. `None` without
    /// `trie_wait_ms` (older results).
    pub(super) fn write_floor_ratio_after_reads(&self, key: &ConfigKey) -> Option<f64> {
        let spent = self.trie_own_work_ms(key)? + self.median(key, Metric::CommitMs)?;
        Some(spent / self.write_floor_ms(key)?)
    }

    /// The device floor per cold slot read, ms: [`View::device_floor_ms`] over the median slots
    /// read.
    pub(super) fn device_ms_per_cold_read(&self, key: &ConfigKey) -> Option<f64> {
        let slots = self.median(key, Metric::SlotsRead).filter(|&s| s > 0.0)?;
        Some(self.device_floor_ms(key)? / slots)
    }

    /// For each group depth of `workload`: (state size, median of `metric`) at every state size
    /// measured in the combination [`View::preferred_combo`] names (its state size aside);
    /// only group depths measured at two sizes or more.
    pub(super) fn by_state_size(
        &self,
        workload: Workload,
        metric: Metric,
    ) -> Vec<(u8, Vec<(u64, f64)>)> {
        let Some(c) = self.preferred_combo(workload) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for gd in self.group_depths(workload, c) {
            let points: Vec<(u64, f64)> = self
                .state_sizes()
                .into_iter()
                .filter_map(|stems| {
                    let key = Combo { stems, ..c }.key(workload, gd);
                    Some((stems, self.median(&key, metric)?))
                })
                .collect();
            if points.len() >= 2 {
                out.push((gd, points));
            }
        }
        out
    }

    /// The combination the breakdown chart and the per-slot findings use for `workload`: at
    /// the largest state size measured, flat + prefetch (smallest page size having it), else
    /// the first measured there.
    pub(super) fn preferred_combo(&self, workload: Workload) -> Option<Combo> {
        let combos = self.combos(workload);
        let largest = combos.iter().map(|c| c.stems).max()?;
        let at_largest: Vec<Combo> = combos.into_iter().filter(|c| c.stems == largest).collect();
        at_largest
            .iter()
            .copied()
            .find(|c| c.read_path == ReadPath::Flat && c.prefetch)
            .or_else(|| at_largest.first().copied())
    }
}

/// Which setting a pair of combinations differs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vary {
    /// Trie against flat, prefetch equal (off preferred).
    ReadPath,
    /// Prefetch off against on, read path equal (flat preferred).
    Prefetch,
}

impl View<'_> {
    /// Two measured combinations of `workload` that differ only in `vary`, as (baseline,
    /// variant): (trie, flat) or (prefetch off, prefetch on). The smallest page size that has a
    /// pair wins; then prefetch off (for read paths) or the flat path (for prefetch).
    pub(super) fn pair(&self, workload: Workload, vary: Vary) -> Option<(Combo, Combo)> {
        let combos = self.combos(workload);
        let has = |c: &Combo| combos.contains(c);
        let sizes = self.state_sizes();
        // The largest state first (the study's own size), then the smallest page size.
        for (stems, page_size) in sizes
            .iter()
            .rev()
            .flat_map(|&n| self.page_sizes().into_iter().map(move |p| (n, p)))
        {
            let candidates: Vec<(Combo, Combo)> = match vary {
                Vary::ReadPath => [false, true]
                    .into_iter()
                    .map(|prefetch| {
                        let c = |read_path| Combo {
                            stems,
                            page_size,
                            read_path,
                            prefetch,
                            layout: Layout::Mdbx,
                        };
                        (c(ReadPath::TrieWalk), c(ReadPath::Flat))
                    })
                    .collect(),
                Vary::Prefetch => [ReadPath::Flat, ReadPath::TrieWalk]
                    .into_iter()
                    .map(|read_path| {
                        let c = |prefetch| Combo {
                            stems,
                            page_size,
                            read_path,
                            prefetch,
                            layout: Layout::Mdbx,
                        };
                        (c(false), c(true))
                    })
                    .collect(),
            };
            if let Some(p) = candidates.into_iter().find(|(a, b)| has(a) && has(b)) {
                return Some(p);
            }
        }
        None
    }
}
