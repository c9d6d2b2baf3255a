//! The study's data model: what one measured block produced, and what `results.json` holds.
//!
//! These types are the contract between the runner (which fills [`RunRow`]s), the statistics
//! (which reduce them to [`Summary`]s and [`Comparison`]s) and the report (which renders all of
//! it). `results.json` is [`Results`] serialized with serde; its schema is documented in the
//! README and versioned by [`SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

/// Version of the `results.json` schema; bump on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One benchmark workload (STUDY.md's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// `balanceOf(counter)` in a loop on a real ERC-20: random, mostly absent slots.
    Erc20Balanceof,
    /// `approve(spender = counter, amount)` in a loop: every write a brand-new slot.
    Erc20Approve,
    /// A balanceOf loop then an approve loop, split by gas (50/50 unless configured).
    Mixed,
    /// Sequential storage slots of one account, read.
    SloadBenchmark,
    /// Sequential storage slots of one account, written through the four sstore transitions.
    SstoreVariants,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 5] = [
        Workload::Erc20Balanceof,
        Workload::Erc20Approve,
        Workload::Mixed,
        Workload::SloadBenchmark,
        Workload::SstoreVariants,
    ];

    /// The snake_case name used on the command line and in `results.json`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Erc20Balanceof => "erc20_balanceof",
            Workload::Erc20Approve => "erc20_approve",
            Workload::Mixed => "mixed",
            Workload::SloadBenchmark => "sload_benchmark",
            Workload::SstoreVariants => "sstore_variants",
        }
    }

    /// Parses [`Workload::name`]; `None` for anything else.
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    /// True for the workloads whose point is writing (they get a hash floor).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Workload::Erc20Approve | Workload::Mixed | Workload::SstoreVariants
        )
    }
}

/// How the EVM's state reads reach the store: the store's own type (`trie` or `flat` in
/// `results.json`).
pub use bintrie_store::ReadPath;

/// One cell of the study: everything that identifies a series of runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigKey {
    /// MDBX page size in bytes.
    pub page_size: u32,
    /// Group depth 1..=8.
    pub group_depth: u8,
    /// The workload.
    pub workload: Workload,
    /// Read path.
    pub read_path: ReadPath,
    /// Whether the block's access list was prefetched in parallel before execution.
    pub prefetch: bool,
}

/// What one measured block produced. Times are milliseconds of wall clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The configuration.
    #[serde(flatten)]
    pub key: ConfigKey,
    /// Run index, 0-based; run 0 is the warm-up the statistics drop.
    pub run: u32,
    /// False for dropped runs.
    pub kept: bool,
    /// Gas used by the block's one transaction.
    pub gas: u64,
    /// Whole block: prefetch + execution (with its reads) + trie update + commit.
    pub total_ms: f64,
    /// Time spent reading state from the store (prefetch plus reads missed during execution).
    pub state_read_ms: f64,
    /// EVM execution without its store reads.
    pub execution_ms: f64,
    /// Waiting for the trie prefetcher, applying the writes to the trie and rehashing (includes
    /// loading trie nodes that were not preloaded).
    pub trie_update_ms: f64,
    /// Wall time of the background trie-path preload (prefetch on only: the group and stem
    /// blobs on the paths of the stems the block writes are read in parallel with the state
    /// prefetch and the execution, so the trie update finds them in memory); overlapped, so not
    /// part of the sum of the other stages. 0 when prefetch is off.
    pub trie_warm_ms: f64,
    /// Serializing dirty nodes and the MDBX write transaction (durable).
    pub commit_ms: f64,
    /// Gas / total time, in millions of gas per second.
    pub mgas_s: f64,
    /// Store lookups made for state reads (node and stem blobs on the trie path, one per key on
    /// the flat path).
    pub store_reads: u64,
    /// Bytes those lookups returned.
    pub bytes_read: u64,
    /// Trie nodes (group and stem blobs) loaded by the trie update.
    pub nodes_loaded: u64,
    /// Hash-function calls made by the trie update.
    pub hashes: u64,
    /// Bytes of blobs written by the commit.
    pub bytes_written: u64,
    /// Unique state keys (stems: an account header or 256 storage slots; and code) read from
    /// the store in this block.
    pub cold_reads: u64,
    /// Storage slots the EVM read from the state (revm asks once per slot per transaction, and
    /// every block has one transaction, so these are distinct cold slot reads).
    pub slots_read: u64,
    /// Storage slots whose value changed in this block.
    pub slots_written: u64,
    /// state_read_ms / slots_read (the anchor's "ms per cold slot read"); `None` when no slot
    /// was read.
    pub ms_per_cold_read: Option<f64>,
    /// total_ms / slots_written; `None` when nothing was written.
    pub ms_per_written_slot: Option<f64>,
    /// trie_update_ms / (hashes x the measured cost of one hash); `None` without hashes.
    pub hash_floor: Option<f64>,
}

/// The metrics the statistics summarise, by field name of [`RunRow`].
pub const METRICS: [&str; 19] = [
    "gas",
    "total_ms",
    "state_read_ms",
    "execution_ms",
    "trie_update_ms",
    "trie_warm_ms",
    "commit_ms",
    "mgas_s",
    "store_reads",
    "bytes_read",
    "nodes_loaded",
    "hashes",
    "bytes_written",
    "cold_reads",
    "slots_read",
    "slots_written",
    "ms_per_cold_read",
    "ms_per_written_slot",
    "hash_floor",
];

impl RunRow {
    /// The value of metric `name` (one of [`METRICS`]); `None` for an absent optional metric or
    /// an unknown name.
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "gas" => self.gas as f64,
            "total_ms" => self.total_ms,
            "state_read_ms" => self.state_read_ms,
            "execution_ms" => self.execution_ms,
            "trie_update_ms" => self.trie_update_ms,
            "trie_warm_ms" => self.trie_warm_ms,
            "commit_ms" => self.commit_ms,
            "mgas_s" => self.mgas_s,
            "store_reads" => self.store_reads as f64,
            "bytes_read" => self.bytes_read as f64,
            "nodes_loaded" => self.nodes_loaded as f64,
            "hashes" => self.hashes as f64,
            "bytes_written" => self.bytes_written as f64,
            "cold_reads" => self.cold_reads as f64,
            "slots_read" => self.slots_read as f64,
            "slots_written" => self.slots_written as f64,
            "ms_per_cold_read" => return self.ms_per_cold_read,
            "ms_per_written_slot" => return self.ms_per_written_slot,
            "hash_floor" => return self.hash_floor,
            _ => return None,
        })
    }
}

/// Median and spread of one metric over the kept runs of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    /// Median of the kept runs.
    pub median: f64,
    /// Coefficient of variation (sample standard deviation / mean x 100) of the kept runs; 0
    /// when the mean is 0 or fewer than 2 runs had the metric.
    pub cv_pct: f64,
    /// Number of kept runs that had this metric.
    pub n: usize,
}

/// All metric summaries of one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The configuration.
    #[serde(flatten)]
    pub key: ConfigKey,
    /// Metric name (from [`METRICS`]) to its summary; metrics no kept run had are absent.
    pub metrics: std::collections::BTreeMap<String, MetricSummary>,
}

/// A Mann-Whitney U comparison of one metric between two group depths, everything else equal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The configuration compared (its `group_depth` is `group_depth_b`).
    #[serde(flatten)]
    pub key: ConfigKey,
    /// The baseline group depth: `group_depth_b - 1` (adjacent) or 1 (against GD-1).
    pub group_depth_a: u8,
    /// The group depth compared against the baseline.
    pub group_depth_b: u8,
    /// `"adjacent"` or `"vs_gd1"`.
    pub kind: String,
    /// Metric name.
    pub metric: String,
    /// (median_b - median_a) / median_a x 100.
    pub pct_diff: f64,
    /// Two-sided Mann-Whitney U p-value; `None` when either side has fewer than 2 runs or every
    /// value is identical.
    pub p_value: Option<f64>,
}

/// The machine the study ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model name from /proc/cpuinfo, when known.
    pub cpu_model: Option<String>,
    /// Total memory in bytes, when known.
    pub memory_bytes: Option<u64>,
    /// Kernel release, when known.
    pub kernel: Option<String>,
    /// Nanoseconds for one 64-byte SHA-256 node hash, measured at the start of the study.
    pub hash64_ns: f64,
}

/// How the study was configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyConfig {
    /// `smoke`, `small`, `study` or `custom`.
    pub scale: String,
    /// Random stems written into each database before the workload contracts.
    pub stems: u64,
    /// ERC-20 holders with a balance.
    pub holders: u64,
    /// Group depths measured.
    pub group_depths: Vec<u8>,
    /// Workloads measured.
    pub workloads: Vec<Workload>,
    /// Read paths measured.
    pub read_paths: Vec<ReadPath>,
    /// Prefetch settings measured.
    pub prefetch: Vec<bool>,
    /// MDBX page sizes measured.
    pub page_sizes: Vec<u32>,
    /// Runs per configuration, including the dropped first run.
    pub runs: u32,
    /// Block gas limit.
    pub block_gas_limit: u64,
    /// Gas limit of the one benchmark transaction per block.
    pub tx_gas_limit: u64,
    /// Percent of the mixed workload's gas spent on the balanceOf loop.
    pub mixed_read_pct: u32,
    /// Prefetch worker threads.
    pub prefetch_workers: usize,
    /// `durable` (fsync per block) or `relaxed` (MDBX SAFE_NOSYNC).
    pub durability: String,
    /// Seed of the random state.
    pub seed: u64,
}

/// How long building one database took and what it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatabaseInfo {
    /// MDBX page size.
    pub page_size: u32,
    /// Group depth.
    pub group_depth: u8,
    /// Seconds to generate, build and bulk-load the state.
    pub build_s: f64,
    /// Database file size in bytes after the build.
    pub file_bytes: u64,
    /// Node blobs stored.
    pub nodes: u64,
    /// Flat stems stored.
    pub stems: u64,
}

/// Everything a study produced: `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the study started, RFC 3339 UTC.
    pub started: String,
    /// Seconds the whole study took.
    pub elapsed_s: f64,
    /// The command line that produced it.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The configuration.
    pub config: StudyConfig,
    /// One entry per database built.
    pub databases: Vec<DatabaseInfo>,
    /// Every run, dropped ones included (with `kept: false`).
    pub runs: Vec<RunRow>,
    /// Per-configuration medians and CV% over the kept runs.
    pub summaries: Vec<Summary>,
    /// Mann-Whitney U tests between group depths.
    pub comparisons: Vec<Comparison>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// results.json names the read paths `trie` and `flat` (schema version 1), whatever the
    /// store calls its variants.
    #[test]
    fn read_paths_keep_their_results_json_names() {
        for (p, name) in [(ReadPath::TrieWalk, "trie"), (ReadPath::Flat, "flat")] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<ReadPath>(&json).unwrap(), p);
            assert_eq!((p.name(), ReadPath::from_name(name)), (name, Some(p)));
        }
        assert!(serde_json::from_str::<ReadPath>("\"trie_walk\"").is_err());
        assert_eq!(ReadPath::from_name("Trie"), None);
    }
}
