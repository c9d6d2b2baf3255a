//! What a study measures ([`StudyConfig`]), its preset sizes ([`Scale`]) and the group-depth
//! list syntax.

use super::{Durability, Layout, ReadPath, Workload};
use anyhow::{Context as _, ensure};
use serde::{Deserialize, Serialize};

/// Block gas limit of every measured block (STUDY.md): [`StudyConfig::for_scale`]'s.
pub const BLOCK_GAS_LIMIT: u64 = 100_000_000;
/// Gas limit of the one benchmark transaction per block, 2^24 (EIP-7825's cap):
/// [`StudyConfig::for_scale`]'s.
pub const TX_GAS_LIMIT: u64 = 1 << 24;

/// The preset sizes of a study, named `smoke`, `small` and `study` on the command line and in
/// `results.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Scale {
    /// Every workload and group depth on a tiny state, 3 runs: a check that the whole pipeline
    /// works (minutes).
    Smoke,
    /// 1M stems, 10 runs: a quick look at the trends.
    Small,
    /// 16M stems, 10 runs: the study.
    Study,
}

impl Scale {
    /// The scale's name: `smoke`, `small` or `study`.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Small => "small",
            Scale::Study => "study",
        }
    }

    /// Random stems per database.
    pub fn stems(self) -> u64 {
        match self {
            Scale::Smoke => 20_000,
            Scale::Small => 1_000_000,
            Scale::Study => 16_000_000,
        }
    }

    /// ERC-20 holders.
    pub fn holders(self) -> u64 {
        match self {
            Scale::Smoke => 2_000,
            Scale::Small => 100_000,
            Scale::Study => 1_000_000,
        }
    }

    /// Runs per configuration, the dropped first run included.
    pub fn runs(self) -> u32 {
        match self {
            Scale::Smoke => 3,
            Scale::Small | Scale::Study => 10,
        }
    }
}

/// What a study measures and how: the runner's input, recorded as is in `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyConfig {
    /// The preset the sizes started from (`stems`, `holders` and `runs` may override it).
    pub scale: Scale,
    /// Random stems written into each database before the workload contracts (with several
    /// [`StudyConfig::state_sizes`], the largest).
    pub stems: u64,
    /// State sizes measured, in random stems, ascending (empty: just `stems`): one database
    /// per size, page size and group depth. Read it through [`StudyConfig::sizes`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_sizes: Vec<u64>,
    /// ERC-20 holders with a balance (1..=[`MAX_HOLDERS`]).
    pub holders: u64,
    /// Group depths measured, each 1..=8.
    pub group_depths: Vec<u8>,
    /// Workloads measured.
    pub workloads: Vec<Workload>,
    /// Read paths measured.
    pub read_paths: Vec<ReadPath>,
    /// Prefetch settings measured (off is `false`).
    pub prefetch: Vec<bool>,
    /// MDBX page sizes measured (powers of two, 4096..=65536).
    pub page_sizes: Vec<u32>,
    /// Runs per configuration, including the dropped first run (at least 2).
    pub runs: u32,
    /// Block gas limit of every measured block.
    pub block_gas_limit: u64,
    /// Gas limit of the one benchmark transaction per block (at most `block_gas_limit`); the
    /// workload loops are sized to fill 95% of it.
    pub tx_gas_limit: u64,
    /// Percent of the mixed workload's gas spent on the balanceOf loop (1..=99).
    pub mixed_read_pct: u32,
    /// Prefetch worker threads (at least 1).
    pub prefetch_workers: usize,
    /// MDBX durability of every commit: `Durable` (fsync per block), `Flush` (a sync per
    /// flush of the write buffer; per block without one) or `Relaxed` (MDBX SAFE_NOSYNC: atomic
    /// and consistent, but the last blocks may be lost on a system crash).
    pub durability: Durability,
    /// Seed of the random state and the per-run keys.
    pub seed: u64,
    /// Consecutive blocks per run on the same state (at least 1; 1 is the original protocol).
    /// The page cache is evicted before every block; the store's write buffer survives
    /// between blocks, as a node's would.
    #[serde(default = "one")]
    pub blocks_per_run: u32,
    /// Blocks the store's write buffer holds before it is flushed to MDBX, timed inside the
    /// block that triggers it (0: no buffer, every block is its own MDBX transaction).
    #[serde(default)]
    pub buffer_blocks: u64,
    /// Build every measured block's witness in both encodings (multiproof and stored blobs)
    /// from its pre-state, by an unmeasured dry run before the block (before the eviction and
    /// the reopen), and record their sizes. Off in files from before witnesses were measured.
    #[serde(default)]
    pub witness: bool,
    /// On-disk layouts measured: each database is built in MDBX, then (for `log`) copied into
    /// an appending log beside it; every cell runs on each layout. Files from before the layout
    /// dimension: MDBX only.
    #[serde(default = "mdbx_only")]
    pub layouts: Vec<Layout>,
    /// On the log layout, memory for the tree's upper levels in MiB
    /// ([`bintrie_logstore::LogOptions::pinned_bytes`]): read once when the log is opened,
    /// kept across blocks like the write buffer (the page-cache eviction before each block
    /// does not touch them), and held decoded and hashed by the state's trie (since
    /// 2026-12-04; before, each block decoded and hashed them again). 0 (and files from
    /// before it): none.
    #[serde(default)]
    pub log_pinned_mib: u64,
    /// On the MDBX layout, the branch pages of the flat stem table and the node table are put
    /// back in the page cache after each block's eviction, their leaves left cold
    /// ([`bintrie_store::warm_branch_pages`]):
    /// a node's B-tree as it holds it after running a while, where the default evicts every
    /// page. False (and files from before it): every page evicted.
    #[serde(default)]
    pub warm_branches: bool,
}

fn one() -> u32 {
    1
}

fn mdbx_only() -> Vec<Layout> {
    vec![Layout::Mdbx]
}

impl StudyConfig {
    /// The configuration of `scale` with every dimension at its default: all group depths and
    /// workloads, both read paths, prefetch off and on, 4 KB pages, [`BLOCK_GAS_LIMIT`],
    /// [`TX_GAS_LIMIT`], a 50% mixed read share, [`bintrie_revm::DEFAULT_PREFETCH_WORKERS`] prefetch workers, durable commits, seed 7864.
    pub fn for_scale(scale: Scale) -> Self {
        StudyConfig {
            scale,
            stems: scale.stems(),
            state_sizes: Vec::new(),
            holders: scale.holders(),
            group_depths: (1..=8).collect(),
            workloads: Workload::ALL.to_vec(),
            read_paths: ReadPath::ALL.to_vec(),
            prefetch: vec![false, true],
            page_sizes: vec![4096],
            runs: scale.runs(),
            block_gas_limit: BLOCK_GAS_LIMIT,
            tx_gas_limit: TX_GAS_LIMIT,
            mixed_read_pct: 50,
            prefetch_workers: bintrie_revm::DEFAULT_PREFETCH_WORKERS,
            durability: Durability::Durable,
            seed: 7864,
            blocks_per_run: 1,
            buffer_blocks: 0,
            witness: true,
            layouts: mdbx_only(),
            log_pinned_mib: 0,
            warm_branches: false,
        }
    }

    /// The state sizes measured: [`StudyConfig::state_sizes`], or `[stems]` when it is empty.
    pub fn sizes(&self) -> Vec<u64> {
        if self.state_sizes.is_empty() {
            vec![self.stems]
        } else {
            self.state_sizes.clone()
        }
    }

    /// Checks the bounds the field docs state and that no dimension is empty; the error names
    /// the first violation.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(!self.group_depths.is_empty(), "no group depths selected");
        for g in &self.group_depths {
            ensure!((1..=8).contains(g), "group depth {g} is outside 1..=8");
        }
        ensure!(!self.workloads.is_empty(), "no workloads selected");
        ensure!(!self.read_paths.is_empty(), "no read paths selected");
        ensure!(!self.prefetch.is_empty(), "no prefetch settings selected");
        ensure!(!self.page_sizes.is_empty(), "no page sizes selected");
        ensure!(!self.layouts.is_empty(), "no layouts selected");
        // A value twice would measure its cells twice under one key: results no reader takes.
        fn once<T: PartialEq + std::fmt::Debug>(v: &[T], what: &str) -> anyhow::Result<()> {
            for (i, x) in v.iter().enumerate() {
                ensure!(!v[..i].contains(x), "{what} lists {x:?} twice");
            }
            Ok(())
        }
        once(&self.group_depths, "--group-depths")?;
        once(&self.workloads, "--workloads")?;
        once(&self.read_paths, "--read-paths")?;
        once(&self.prefetch, "--prefetch")?;
        once(&self.page_sizes, "--page-sizes")?;
        once(&self.layouts, "--layouts")?;
        ensure!(
            !(self.layouts.contains(&Layout::Log) && self.read_paths.contains(&ReadPath::TrieWalk)),
            "the log layout finds a stem through its index, not by walking the trie: \
             measure it with --read-paths flat"
        );
        ensure!(
            self.log_pinned_mib == 0 || self.layouts.contains(&Layout::Log),
            "--log-pinned-mib applies to the log layout: add --layouts log"
        );
        ensure!(
            !self.warm_branches || self.layouts.contains(&Layout::Mdbx),
            "--warm-branches applies to the MDBX layout: add --layouts mdbx"
        );
        for p in &self.page_sizes {
            ensure!(
                p.is_power_of_two() && (4096..=65536).contains(p),
                "page size {p} is not a power of two in 4096..=65536"
            );
        }
        ensure!(
            self.runs >= 2,
            "--runs must be at least 2 (the first run is dropped)"
        );
        ensure!(
            self.tx_gas_limit <= self.block_gas_limit,
            "the transaction gas limit {} exceeds the block gas limit {}",
            self.tx_gas_limit,
            self.block_gas_limit
        );
        ensure!(
            (1..=99).contains(&self.mixed_read_pct),
            "the mixed read share must be 1..=99 percent"
        );
        ensure!(self.prefetch_workers >= 1, "at least one prefetch worker");
        ensure!(
            self.blocks_per_run >= 1,
            "--blocks-per-run must be at least 1"
        );
        ensure!(self.holders >= 1, "at least one ERC-20 holder");
        ensure!(
            self.holders <= MAX_HOLDERS,
            "--holders {} is more than {MAX_HOLDERS}: every holder's balance is held in memory \
             while a database is built (about 130 bytes each)",
            self.holders
        );
        ensure!(
            self.state_sizes.windows(2).all(|w| w[0] < w[1]),
            "state sizes must be ascending and distinct"
        );
        Ok(())
    }
}

/// The most ERC-20 holders a study takes (`--holders`): their balances are listed in memory
/// while each database is built, about 130 bytes each (6.5 GB at this bound).
pub const MAX_HOLDERS: u64 = 50_000_000;

/// `v` without the later repeats of any value, the first of each where it was: a list option
/// given a value twice measures it once.
pub fn unique<T: Clone + PartialEq>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

/// The trimmed parts of a comma-separated list; an error when one is empty, unless the whole
/// list is (the callers say "none given" for that).
fn list_parts<'a>(s: &'a str, what: &str) -> anyhow::Result<Vec<&'a str>> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    ensure!(
        parts.iter().all(|p| !p.is_empty()),
        "an empty {what} in `{s}` (a value missing between commas, or a comma at an end)"
    );
    Ok(parts)
}

/// Parses a list of state sizes in stems: `1M,4M,16M,64M`, `20000` or `500k,2M` (k, M and G are
/// 10^3, 10^6 and 10^9, either case; fractions such as `1.5M` are fine when they make whole
/// stems). The result is sorted and free of duplicates; an error names a part that is not a
/// size, that is not a whole number of stems (`1.5`, `0.0001k`) or is zero, an empty part
/// (`1k,,2k`: a value lost between two commas is a typo, not a shorter list), or an empty
/// list.
pub fn parse_stems(s: &str) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for part in list_parts(s, "state size")? {
        let (digits, zeros) = match part.char_indices().last() {
            Some((i, 'k' | 'K')) => (&part[..i], 3),
            Some((i, 'm' | 'M')) => (&part[..i], 6),
            Some((i, 'g' | 'G')) => (&part[..i], 9),
            _ => (part, 0),
        };
        // Exact decimal arithmetic: `1.5k` is 1500, `1000000.5` is no whole number of stems.
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        ensure!(
            !(whole.is_empty() && frac.is_empty())
                && whole
                    .bytes()
                    .chain(frac.bytes())
                    .all(|b| b.is_ascii_digit()),
            "bad state size `{part}` (expected e.g. 20000, 500k or 16M)"
        );
        let (kept, dropped) = frac.split_at(frac.len().min(zeros));
        ensure!(
            dropped.bytes().all(|b| b == b'0'),
            "state size `{part}` is not a whole number of stems"
        );
        let text = format!("{whole}{kept:0<zeros$}");
        let digits = text.trim_start_matches('0');
        let stems: u64 = if digits.is_empty() {
            0
        } else {
            ensure!(digits.len() <= 13, "state size `{part}` is too large");
            digits.parse().expect("at most 13 ASCII digits")
        };
        ensure!(stems <= 1 << 40, "state size `{part}` is too large");
        ensure!(
            stems >= 1,
            "state size `{part}` is zero: a state needs stems"
        );
        out.push(stems);
    }
    out.sort_unstable();
    out.dedup();
    ensure!(!out.is_empty(), "no state sizes given");
    Ok(out)
}

/// Parses a list of group depths: `1,5,6`, `1-8` or a mix (`1-3,6`). The result is sorted and
/// free of duplicates; an error names a part that is not a number or range within 1..=8, an
/// empty part, or an empty list.
pub fn parse_group_depths(s: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for part in list_parts(s, "group depth")? {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let bound = |x: &str| -> anyhow::Result<u8> {
            x.trim()
                .parse()
                .with_context(|| format!("bad group depth `{part}`"))
        };
        let (a, b) = (bound(a)?, bound(b)?);
        ensure!(
            a >= 1 && b <= 8 && a <= 8 && b >= 1,
            "group depths must be within 1..=8 (got `{part}`)"
        );
        ensure!(a <= b, "the range `{part}` goes down: write it `{b}-{a}`");
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    ensure!(!out.is_empty(), "no group depths given");
    Ok(out)
}
