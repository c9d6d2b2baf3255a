//! The study's data model: what one measured block produced, and what `results.json` holds.
//!
//! These types are the contract between the runner (which fills [`RunRow`]s), the statistics
//! (which reduce them to [`Summary`]s and [`Comparison`]s) and the report (which renders all of
//! it). `results.json` is [`Results`] serialized with serde; its schema is documented in the
//! README and versioned by [`SCHEMA_VERSION`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, ensure};
use serde::{Deserialize, Serialize};

/// How the EVM's state reads reach the store: the store's own type (`trie` or `flat` in
/// `results.json` and on the command line).
pub use bintrie_store::ReadPath;

/// MDBX durability of every measured commit: the store's own type (`durable` or `relaxed` in
/// `results.json` and on the command line).
pub use bintrie_store::Durability;

/// How the state is laid out on disk: `mdbx` (path-keyed blobs and a flat stem table in MDBX's
/// copy-on-write B-tree, the default) or `log` (every block's blobs appended to a log and found
/// through an in-memory index: crate `bintrie-logstore`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Layout {
    /// MDBX: B-tree pages rewritten in place (copy-on-write).
    #[default]
    Mdbx,
    /// An append-only log of blobs with an in-memory index.
    Log,
}

impl Layout {
    /// `mdbx` or `log`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Mdbx => "mdbx",
            Layout::Log => "log",
        }
    }
}

mod config;
pub use config::{
    BLOCK_GAS_LIMIT, MAX_HOLDERS, Scale, StudyConfig, TX_GAS_LIMIT, parse_group_depths,
    parse_stems, unique,
};

/// Version of the `results.json` schema; bump on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One benchmark workload (STUDY.md's table), named as [`Workload::name`] on the command line
/// and in `results.json`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
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

    /// True for the workloads whose point is reading cold slots (they get a per-slot read chart).
    pub fn reads(self) -> bool {
        matches!(
            self,
            Workload::Erc20Balanceof | Workload::Mixed | Workload::SloadBenchmark
        )
    }

    /// True for the workloads whose point is writing (they get a hash floor).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Workload::Erc20Approve | Workload::Mixed | Workload::SstoreVariants
        )
    }
}

/// One cell of the study: everything that identifies a series of runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConfigKey {
    /// Random stems in the database (the state size; `results.json` files from before the
    /// state-size dimension lack it, and [`Results::read`] fills in the configuration's).
    #[serde(default)]
    pub stems: u64,
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
    /// The on-disk layout (files from before the layout dimension lack it: MDBX).
    #[serde(default)]
    pub layout: Layout,
}

/// What one measured block produced. Times are milliseconds of wall clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The configuration.
    #[serde(flatten)]
    pub key: ConfigKey,
    /// Run index, 0-based; run 0 is the warm-up the statistics drop.
    pub run: u32,
    /// The block's place in its run, 0-based (always 0 with one block per run).
    #[serde(default)]
    pub block_in_run: u32,
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
    /// loading trie nodes that were not preloaded; since 2026-12-04, thirteenth session, also
    /// serializing the changed blobs, which the rehash does in the same walk).
    pub trie_update_ms: f64,
    /// Wall time of the background trie-path preload (prefetch on only: the group and stem
    /// blobs on the paths of the stems the block writes are read in parallel with the state
    /// prefetch and the execution, so the trie update finds them in memory); overlapped, so not
    /// part of the sum of the other stages. 0 when prefetch is off.
    pub trie_warm_ms: f64,
    /// Of [`RunRow::trie_update_ms`], the time spent waiting for the trie prefetch after
    /// execution ended (decoding what it had read meanwhile): the rest of the update is the
    /// CPU work of applying the writes and rehashing. 0 when prefetch is off; absent in
    /// results written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trie_wait_ms: Option<f64>,
    /// The store's write of the block (durable): the MDBX write transaction or the log's
    /// append (before 2026-12-04, thirteenth session, also serializing the dirty nodes).
    pub commit_ms: f64,
    /// Writing out the data file's dirty pages before this block's eviction, ms (outside the
    /// block's total): the device writes earlier commits left to the OS (with a write buffer,
    /// everything since its last sync); about 0 when every commit syncs.
    #[serde(default)]
    pub writeback_ms: f64,
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
    /// Pages the block read from the device: the process's major page faults during the block
    /// (as `getrusage` counts them, from `/proc/self/stat`; MDBX is opened without read-ahead,
    /// so one fault reads one 4 KB page). Counts the trie prefetch and the commit's faults
    /// too, not only the state reads. `None` where they cannot be read, and in files from
    /// before they were recorded.
    #[serde(default)]
    pub device_reads: Option<u64>,
    /// CPU time the process used during the block, every thread (execution, the prefetch
    /// threads, the trie's workers, and the kernel's work on their behalf;
    /// `CLOCK_PROCESS_CPUTIME_ID`): above `total_ms` when more than one core worked, and at
    /// most `machine.cpus` x `total_ms`, where the block is bound by the CPU. `None` in files
    /// from before it was recorded.
    #[serde(default)]
    pub cpu_ms: Option<f64>,
    /// Minor page faults of the process during the block (field 10 of `/proc/self/stat`):
    /// pages mapped without a device read, mostly fresh memory the allocator takes from the
    /// kernel (a huge page counts once). A block whose CPU time is far above its usual with no
    /// more device reads shows here whether it was faulting memory in. `None` where they
    /// cannot be read, and in files from before they were recorded.
    #[serde(default)]
    pub minor_faults: Option<u64>,
    /// The machine's steal time during the block, ms, summed over its CPUs (`steal` of
    /// `/proc/stat`'s `cpu` line, in clock ticks of 10 ms): time the hypervisor gave this
    /// VM's CPUs to something else while they had work. A stalled block with steal here was
    /// the host's doing, not this process's. `None` where it cannot be read, and in files
    /// from before it was recorded.
    #[serde(default)]
    pub steal_ms: Option<f64>,
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
    /// trie_update_ms / (hashes x the cost of one hash); `None` without hashes, and (since
    /// the nineteenth session) for a workload that does not write ([`Workload::writes`]). The
    /// cost is [`RunRow::hash64_ns`]; older results used the run's [`Machine::hash64_ns`].
    pub hash_floor: Option<f64>,
    /// One 64-byte hash, ns, probed just before this block (outside its timing) when its
    /// workload writes, so the hash floor divides by the CPU's speed of the same moment;
    /// `None` otherwise, and in results from before 2026-12-05 (nineteenth session), whose
    /// floors used the run's one probe.
    #[serde(default)]
    pub hash64_ns: Option<f64>,
    /// Tree keys the block read or wrote (an account read is two keys, its BASIC_DATA and
    /// CODE_HASH leaves; a slot one): what its witness proves. `None` when witnesses were not
    /// built ([`StudyConfig::witness`](crate::model::StudyConfig::witness)).
    #[serde(default)]
    pub witness_keys: Option<u64>,
    /// Bytes of the block's witness as a multiproof (the tree pruned to its keys, sibling
    /// hashes only), code included; `None` when not built.
    #[serde(default)]
    pub witness_multiproof_bytes: Option<u64>,
    /// Bytes of the block's witness as stored blobs (every group and stem blob its walks
    /// cross, geth's choice), code included; `None` when not built.
    #[serde(default)]
    pub witness_blobs_bytes: Option<u64>,
}

/// A metric the statistics summarise: one numeric field of [`RunRow`], named (in `results.json`
/// and by [`Metric::name`]) as that field.
///
/// The variants are declared in the alphabetical order of their names, so the derived `Ord` (the
/// key order of [`Summary::metrics`] in `results.json`) is the order of the names;
/// [`Metric::ALL`] lists them in report order. On the command line (`clap::ValueEnum`) a
/// metric goes by the same name.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Metric {
    /// Bytes the state reads took from the store, prefetch included.
    BytesRead,
    /// Blob bytes the block committed.
    BytesWritten,
    /// Unique stems and code read from the store.
    ColdReads,
    /// The store's write, ms (its sync included).
    CommitMs,
    /// CPU time of the whole process during the block, ms (absent in some rows).
    CpuMs,
    /// Pages the block read from the device (absent in some rows).
    DeviceReads,
    /// EVM execution without its store reads, ms.
    ExecutionMs,
    /// Gas used by the block.
    Gas,
    /// One 64-byte hash, ns, probed before the block (absent in some rows).
    Hash64Ns,
    /// Trie update time over its hashing time on one core (absent in some rows).
    HashFloor,
    /// Hash calls of the trie update.
    Hashes,
    /// Gas over the block's time, millions per second.
    MgasS,
    /// State read time per storage slot read, ms (absent in some rows).
    MsPerColdRead,
    /// Block time per storage slot written, ms (absent in some rows).
    MsPerWrittenSlot,
    /// Trie blobs the update loaded.
    NodesLoaded,
    /// Storage slots the EVM read.
    SlotsRead,
    /// Storage slots the block changed.
    SlotsWritten,
    /// Prefetch plus the store reads execution missed, ms.
    StateReadMs,
    /// Store lookups for state reads, prefetch included.
    StoreReads,
    /// The whole block, ms.
    TotalMs,
    /// The trie update, ms (its wait for the trie prefetch included).
    TrieUpdateMs,
    /// Of the trie update, the wait for the trie prefetch, ms (absent in some rows).
    TrieWaitMs,
    /// Wall time of the trie prefetch, ms.
    TrieWarmMs,
    /// The block's witness as stored blobs, bytes (absent in some rows).
    WitnessBlobsBytes,
    /// Tree keys in the block's witness (absent in some rows).
    WitnessKeys,
    /// The block's witness as a multiproof, bytes (absent in some rows).
    WitnessMultiproofBytes,
}

impl Metric {
    /// Every metric, in report order (the order [`crate::stats::compare`] emits them in).
    pub const ALL: [Metric; 26] = [
        Metric::Gas,
        Metric::TotalMs,
        Metric::StateReadMs,
        Metric::ExecutionMs,
        Metric::TrieUpdateMs,
        Metric::TrieWaitMs,
        Metric::TrieWarmMs,
        Metric::CommitMs,
        Metric::CpuMs,
        Metric::MgasS,
        Metric::StoreReads,
        Metric::BytesRead,
        Metric::NodesLoaded,
        Metric::Hashes,
        Metric::BytesWritten,
        Metric::DeviceReads,
        Metric::ColdReads,
        Metric::SlotsRead,
        Metric::SlotsWritten,
        Metric::MsPerColdRead,
        Metric::MsPerWrittenSlot,
        Metric::HashFloor,
        Metric::Hash64Ns,
        Metric::WitnessKeys,
        Metric::WitnessMultiproofBytes,
        Metric::WitnessBlobsBytes,
    ];

    /// The metric's name: the [`RunRow`] field it reads, as in `results.json`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Gas => "gas",
            Metric::TotalMs => "total_ms",
            Metric::StateReadMs => "state_read_ms",
            Metric::ExecutionMs => "execution_ms",
            Metric::TrieUpdateMs => "trie_update_ms",
            Metric::TrieWaitMs => "trie_wait_ms",
            Metric::TrieWarmMs => "trie_warm_ms",
            Metric::CommitMs => "commit_ms",
            Metric::CpuMs => "cpu_ms",
            Metric::MgasS => "mgas_s",
            Metric::StoreReads => "store_reads",
            Metric::BytesRead => "bytes_read",
            Metric::NodesLoaded => "nodes_loaded",
            Metric::Hashes => "hashes",
            Metric::BytesWritten => "bytes_written",
            Metric::DeviceReads => "device_reads",
            Metric::ColdReads => "cold_reads",
            Metric::SlotsRead => "slots_read",
            Metric::SlotsWritten => "slots_written",
            Metric::MsPerColdRead => "ms_per_cold_read",
            Metric::MsPerWrittenSlot => "ms_per_written_slot",
            Metric::HashFloor => "hash_floor",
            Metric::Hash64Ns => "hash64_ns",
            Metric::WitnessKeys => "witness_keys",
            Metric::WitnessMultiproofBytes => "witness_multiproof_bytes",
            Metric::WitnessBlobsBytes => "witness_blobs_bytes",
        }
    }
}

impl Results {
    /// The file [`Results::read`] reads for `path`: `path` itself, or in a directory its
    /// `results.json`, else its `results.json.gz` when only that exists.
    pub fn file_at(path: &Path) -> std::path::PathBuf {
        if !path.is_dir() {
            return path.to_path_buf();
        }
        let plain = path.join(crate::report::RESULTS_FILE);
        let gz = path.join(format!("{}.gz", crate::report::RESULTS_FILE));
        if !plain.exists() && gz.exists() {
            gz
        } else {
            plain
        }
    }

    /// Refuses rows no run could have measured ([`Results::read`]); errors name `path`.
    fn check_rows(&self, path: &Path) -> anyhow::Result<()> {
        ensure!(
            !self.runs.is_empty(),
            "{}: holds no measured blocks (`runs` is empty)",
            path.display()
        );
        let mut seen = std::collections::HashSet::new();
        for (i, row) in self.runs.iter().enumerate() {
            ensure!(
                seen.insert((row.key, row.run, row.block_in_run)),
                "{}: runs[{i}] repeats run {} block {} of its configuration: one block would \
                 count twice",
                path.display(),
                row.run,
                row.block_in_run
            );
            for m in Metric::ALL {
                if let Some(v) = row.metric(m) {
                    ensure!(
                        (0.0..1e15).contains(&v),
                        "{}: runs[{i}].{} is {}: not a measurement (negative, or beyond 10^15)",
                        path.display(),
                        m.name(),
                        // Short for a huge value (1e300 printed as 301 digits).
                        if v.abs() < 1e15 {
                            v.to_string()
                        } else {
                            format!("{v:e}")
                        }
                    );
                }
            }
        }
        Ok(())
    }
}

impl RunRow {
    /// The value of metric `m` (counts as `f64`); `None` for an absent optional metric.
    pub fn metric(&self, m: Metric) -> Option<f64> {
        Some(match m {
            Metric::Gas => self.gas as f64,
            Metric::TotalMs => self.total_ms,
            Metric::StateReadMs => self.state_read_ms,
            Metric::ExecutionMs => self.execution_ms,
            Metric::TrieUpdateMs => self.trie_update_ms,
            Metric::TrieWaitMs => return self.trie_wait_ms,
            Metric::TrieWarmMs => self.trie_warm_ms,
            Metric::CommitMs => self.commit_ms,
            Metric::CpuMs => return self.cpu_ms,
            Metric::MgasS => self.mgas_s,
            Metric::StoreReads => self.store_reads as f64,
            Metric::BytesRead => self.bytes_read as f64,
            Metric::NodesLoaded => self.nodes_loaded as f64,
            Metric::Hashes => self.hashes as f64,
            Metric::BytesWritten => self.bytes_written as f64,
            Metric::DeviceReads => return self.device_reads.map(|n| n as f64),
            Metric::ColdReads => self.cold_reads as f64,
            Metric::SlotsRead => self.slots_read as f64,
            Metric::SlotsWritten => self.slots_written as f64,
            Metric::MsPerColdRead => return self.ms_per_cold_read,
            Metric::MsPerWrittenSlot => return self.ms_per_written_slot,
            Metric::HashFloor => return self.hash_floor,
            Metric::Hash64Ns => return self.hash64_ns,
            Metric::WitnessKeys => return self.witness_keys.map(|n| n as f64),
            Metric::WitnessMultiproofBytes => {
                return self.witness_multiproof_bytes.map(|n| n as f64);
            }
            Metric::WitnessBlobsBytes => return self.witness_blobs_bytes.map(|n| n as f64),
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
    /// Each metric's summary (keyed by [`Metric::name`] in `results.json`); metrics no kept run
    /// had are absent.
    pub metrics: BTreeMap<Metric, MetricSummary>,
    /// Sum of the kept blocks' totals (flushes included) over the slots they wrote, ms; absent
    /// when they wrote none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amortized_ms_per_written_slot: Option<f64>,
    /// [`Summary::amortized_ms_per_written_slot`] with the kept blocks' writeback added: what
    /// the writes cost the device, whenever it did them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amortized_with_writeback_ms_per_written_slot: Option<f64>,
    /// The slowest kept block's total, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_total_ms: Option<f64>,
}

/// Which baseline a [`Comparison`] tests against (`adjacent` or `vs_gd1` in `results.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparisonKind {
    /// Against the group depth one below.
    Adjacent,
    /// Against group depth 1.
    VsGd1,
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
    /// The baseline: the group depth one below, or GD-1.
    pub kind: ComparisonKind,
    /// The metric compared.
    pub metric: Metric,
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
    /// The drive under the databases, measured at the start of the study (absent when the
    /// probe was skipped or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::device::Disk>,
}

/// How long building one database took and what it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatabaseInfo {
    /// Random stems the database was built with (0 in files from before the state-size
    /// dimension: the configuration's).
    #[serde(default)]
    pub random_stems: u64,
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
    /// The layout (MDBX in files from before the layout dimension).
    #[serde(default)]
    pub layout: Layout,
    /// The log layout's in-memory index after the copy, bytes (its tables' capacity x entry
    /// size); absent for MDBX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_bytes: Option<u64>,
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
    /// Why the study stopped before measuring every configuration (an error, or a stop asked
    /// for), when it did: the rows are the blocks measured before it. Absent for a whole study.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

impl Results {
    /// Whether `other` records the same `bench` invocation as this (the same start, length and
    /// command line): a copy of one file, or the file and its gzip, however they are named.
    pub fn same_invocation(&self, other: &Results) -> bool {
        (&self.started, self.elapsed_s.to_bits(), &self.command)
            == (&other.started, other.elapsed_s.to_bits(), &other.command)
    }

    /// Reads the `results.json` at `path`, or the one inside `path` when it is a directory (a
    /// report's `--out`). Errors name the file: unreadable, not JSON of this schema, or a
    /// `schema_version` other than [`SCHEMA_VERSION`].
    ///
    /// A gzip-compressed file is read as well (docs/study keeps its results as
    /// `results.json.gz`; a directory holding only that is read through it). Rows that no run
    /// could have measured are refused, naming the row: no rows at all, a metric that is
    /// negative or beyond 10^15, or one (configuration, run, block) given twice, which would
    /// count one block twice in every statistic.
    pub fn read(path: &Path) -> anyhow::Result<Results> {
        // Far above any study's results (the largest in docs/study is 3.3 MB), and a bound on
        // what a hostile gzip file can make this hold.
        Results::read_at_most(path, 256 << 20)
    }

    /// [`Results::read`], refusing a file, or the text its gzip compression holds, of more
    /// than `max_bytes` (read no further: `/dev/zero` is refused, not read until memory runs
    /// out).
    fn read_at_most(path: &Path, max_bytes: u64) -> anyhow::Result<Results> {
        use std::io::Read;
        let file = Results::file_at(path);
        let path = file.as_path();
        let mut raw = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(max_bytes + 1).read_to_end(&mut raw))
            .with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            raw.len() as u64 <= max_bytes,
            "{}: more than {max_bytes} bytes",
            path.display()
        );
        let text = if raw.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..])
                .take(max_bytes + 1)
                .read_to_end(&mut out)
                .with_context(|| format!("{}: decompressing gzip", path.display()))?;
            ensure!(
                out.len() as u64 <= max_bytes,
                "{}: more than {max_bytes} bytes once decompressed",
                path.display()
            );
            out
        } else {
            raw
        };
        let mut results: Results = serde_json::from_slice(&text).with_context(|| {
            format!(
                "{}: not a results.json of schema {SCHEMA_VERSION}",
                path.display()
            )
        })?;
        ensure!(
            results.schema_version == SCHEMA_VERSION,
            "{}: schema version {} (this build reads {SCHEMA_VERSION})",
            path.display(),
            results.schema_version
        );
        results.check_rows(path)?;
        // A file from before the state-size dimension has one state size and no `stems` on its
        // rows (read as 0): it is the configuration's. (With several sizes, 0 is a size.)
        if results.config.state_sizes.is_empty() {
            let stems = results.config.stems;
            let keys = (results.runs.iter_mut().map(|r| &mut r.key))
                .chain(results.summaries.iter_mut().map(|s| &mut s.key))
                .chain(results.comparisons.iter_mut().map(|c| &mut c.key));
            for k in keys {
                k.stems = stems;
            }
            for d in &mut results.databases {
                d.random_stems = stems;
            }
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A metric has one name everywhere: results.json (serde), the report ([`Metric::name`])
    /// and the command line (clap).
    #[test]
    fn a_metric_has_one_name_everywhere() {
        use clap::ValueEnum as _;
        for m in Metric::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.name()));
            assert_eq!(m.to_possible_value().unwrap().get_name(), m.name());
            assert_eq!(Metric::from_str(m.name(), false), Ok(m));
        }
        assert!(Metric::from_str("latency", false).is_err());
    }

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

    fn row() -> RunRow {
        RunRow {
            key: ConfigKey {
                stems: 1000,
                page_size: 4096,
                group_depth: 4,
                workload: Workload::Mixed,
                read_path: ReadPath::Flat,
                prefetch: true,
                layout: Default::default(),
            },
            run: 1,
            kept: true,
            gas: 1,
            total_ms: 2.0,
            state_read_ms: 3.0,
            execution_ms: 4.0,
            trie_update_ms: 5.0,
            trie_warm_ms: 6.0,
            trie_wait_ms: Some(5.5),
            commit_ms: 7.0,
            writeback_ms: 0.0,
            block_in_run: 0,
            mgas_s: 8.0,
            store_reads: 9,
            bytes_read: 10,
            nodes_loaded: 11,
            hashes: 12,
            bytes_written: 13,
            device_reads: Some(20),
            cpu_ms: Some(21.0),
            minor_faults: Some(30),
            steal_ms: Some(31.0),
            cold_reads: 14,
            slots_read: 15,
            slots_written: 16,
            ms_per_cold_read: Some(17.0),
            ms_per_written_slot: Some(18.0),
            hash_floor: Some(19.0),
            hash64_ns: Some(22.0),
            witness_keys: None,
            witness_multiproof_bytes: None,
            witness_blobs_bytes: None,
        }
    }

    /// Every metric is named as the `RunRow` field it reads (in `results.json` too), and every
    /// measured field of a `RunRow` is a metric.
    #[test]
    fn metrics_are_the_run_row_fields() {
        let row = row();
        let json = serde_json::to_value(&row).unwrap();
        let fields = json.as_object().unwrap();
        for m in Metric::ALL {
            assert_eq!(
                fields[m.name()].as_f64(),
                row.metric(m),
                "{m:?} reads another field than {}",
                m.name()
            );
            let name = serde_json::to_string(&m).unwrap();
            assert_eq!(name, format!("\"{}\"", m.name()));
            assert_eq!(serde_json::from_str::<Metric>(&name).unwrap(), m);
        }
        let not_metrics = [
            "stems",
            "page_size",
            "group_depth",
            "workload",
            "read_path",
            "prefetch",
            "layout",
            "run",
            "kept",
            // Where the block sits in its run, and the writeback before it: per-block context,
            // summarized separately (`Summary::amortized_*`), not compared across group depths.
            "block_in_run",
            "writeback_ms",
            // Diagnostics for a single block (a stall), not figures to compare.
            "minor_faults",
            "steal_ms",
        ];
        let mut measured: Vec<&str> = fields
            .keys()
            .map(String::as_str)
            .filter(|k| !not_metrics.contains(k))
            .collect();
        let mut names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        measured.sort_unstable();
        // Sorting by the derived `Ord` sorts by name: summaries keep their key order.
        let mut by_ord = Metric::ALL;
        by_ord.sort();
        assert_eq!(by_ord.map(Metric::name).to_vec(), measured);
        names.sort_unstable();
        assert_eq!(names, measured);
        let absent = RunRow {
            hash_floor: None,
            ..row
        };
        assert_eq!(absent.metric(Metric::HashFloor), None);
    }

    #[test]
    fn closed_sets_keep_their_names() {
        for (k, name) in [
            (ComparisonKind::Adjacent, "adjacent"),
            (ComparisonKind::VsGd1, "vs_gd1"),
        ] {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{name}\""));
        }
        for (d, name) in [
            (Durability::Durable, "durable"),
            (Durability::Relaxed, "relaxed"),
        ] {
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{name}\""));
        }
        use clap::ValueEnum as _;
        for s in [Scale::Smoke, Scale::Small, Scale::Study] {
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.name())
            );
            assert_eq!(Scale::from_str(s.name(), false), Ok(s));
        }
        for w in Workload::ALL {
            assert_eq!(
                serde_json::to_string(&w).unwrap(),
                format!("\"{}\"", w.name())
            );
            assert_eq!(Workload::from_str(w.name(), false), Ok(w));
        }
    }

    /// The configuration serializes with the names and values results.json always had.
    #[test]
    fn study_config_json() {
        let json = serde_json::to_value(StudyConfig::for_scale(Scale::Small)).unwrap();
        assert_eq!(json["scale"], "small");
        assert_eq!(json["durability"], "durable");
        assert_eq!(json["read_paths"], serde_json::json!(["trie", "flat"]));
        assert_eq!(json["prefetch_workers"], 32);
        assert_eq!(json["tx_gas_limit"], 1 << 24);
        let back: StudyConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, StudyConfig::for_scale(Scale::Small));
        assert!(back.validate().is_ok());
        let bad = StudyConfig {
            tx_gas_limit: BLOCK_GAS_LIMIT + 1,
            ..back
        };
        assert!(bad.validate().is_err());
    }

    /// docs/study keeps its results gzip-compressed: the file and its directory read as the
    /// decompressed file does.
    #[test]
    fn compressed_results_read_as_the_plain_file() {
        let study = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/study");
        let gz = Results::read(&study.join("results.json.gz")).unwrap();
        let by_dir = Results::read(&study).unwrap();
        assert!(!gz.runs.is_empty());
        assert_eq!(
            serde_json::to_value(&gz).unwrap(),
            serde_json::to_value(&by_dir).unwrap()
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("results.json");
        std::fs::write(&plain, serde_json::to_vec(&gz).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(Results::read(&plain).unwrap()).unwrap(),
            serde_json::to_value(&gz).unwrap()
        );
        // A truncated stream is an error naming the file, not a panic.
        let cut = dir.path().join("cut.json.gz");
        let bytes = std::fs::read(study.join("results.json.gz")).unwrap();
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let err = format!("{:#}", Results::read(&cut).unwrap_err());
        assert!(err.contains("cut.json.gz"), "{err}");
        // Bytes after the last gzip member are refused, not silently dropped.
        let tail = dir.path().join("tail.json.gz");
        std::fs::write(&tail, [&bytes[..], b"junk"].concat()).unwrap();
        let err = format!("{:#}", Results::read(&tail).unwrap_err());
        assert!(err.contains("tail.json.gz: decompressing gzip"), "{err}");
        // Past the cap, the read stops: a bomb is refused by its decompressed size.
        let gz_file = study.join("results.json.gz");
        let whole = std::io::Read::bytes(flate2::read::GzDecoder::new(&bytes[..])).count() as u64;
        let err = format!(
            "{:#}",
            Results::read_at_most(&gz_file, whole - 1).unwrap_err()
        );
        assert!(
            err.ends_with(&format!(
                "results.json.gz: more than {} bytes once decompressed",
                whole - 1
            )),
            "{err}"
        );
        assert!(Results::read_at_most(&gz_file, whole).is_ok());
        // The file itself is read no further than its cap either (`/dev/zero` grew without end).
        let err = format!("{:#}", Results::read_at_most(&plain, 1000).unwrap_err());
        assert!(err.ends_with("results.json: more than 1000 bytes"), "{err}");
        let err = format!("{:#}", Results::read(Path::new("/dev/zero")).unwrap_err());
        assert!(
            err.ends_with("/dev/zero: more than 268435456 bytes"),
            "{err}"
        );
    }

    #[test]
    fn state_size_lists() {
        assert_eq!(
            parse_stems("16M, 1M,4m,1000000").unwrap(),
            vec![1_000_000, 4_000_000, 16_000_000]
        );
        assert_eq!(parse_stems("20000").unwrap(), vec![20_000]);
        assert_eq!(parse_stems("1.5k,2G").unwrap(), vec![1_500, 2_000_000_000]);
        assert_eq!(parse_stems("1.1M,0.5k").unwrap(), vec![500, 1_100_000]);
        assert_eq!(
            parse_stems("1.2500M,.5k,7.,0100").unwrap(),
            vec![7, 100, 500, 1_250_000]
        );
        assert_eq!(parse_stems("1099.5G").unwrap(), vec![1_099_500_000_000]);
        for (bad, says) in [
            ("1.5", "not a whole number of stems"),
            ("0.0001k", "not a whole number of stems"),
            ("1000000.5", "not a whole number of stems"),
            ("1.0000005M", "not a whole number of stems"),
            ("1000000000.5", "not a whole number of stems"),
            ("1.0000000005G", "not a whole number of stems"),
            ("1000000.0005", "not a whole number of stems"),
            ("0.000", "is zero"),
            ("2000G", "too large"),
            ("0", "is zero"),
            ("0k", "is zero"),
        ] {
            let e = parse_stems(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        for bad in [
            "",
            ",",
            "M",
            "-1M",
            "+4M",
            "1e6",
            "١M",
            "4MM",
            "99999999G",
            "0x10",
            "1.2.3",
            "1k,,2k",
            "1k,",
            ",1k",
        ] {
            assert!(parse_stems(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn group_depth_lists_and_ranges() {
        assert_eq!(parse_group_depths("1-3,6").unwrap(), vec![1, 2, 3, 6]);
        assert_eq!(parse_group_depths("5").unwrap(), vec![5]);
        assert_eq!(parse_group_depths(" 8, 1,1 ").unwrap(), vec![1, 8]);
        for bad in ["0-3", "9", "3-1", "x", "1-", "", ",", "4,,5", "5,"] {
            assert!(parse_group_depths(bad).is_err(), "{bad}");
        }
        let e = parse_group_depths("5-3").unwrap_err().to_string();
        assert!(
            e.contains("the range `5-3` goes down: write it `3-5`"),
            "{e}"
        );
    }
}
