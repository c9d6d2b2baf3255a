//! The study's runner: build one database per (page size, group depth), then measure every
//! (workload, read path, prefetch) cell on it, one cold block at a time.
//!
//! Protocol per measured block (STUDY.md): the state handle is closed, the database file is
//! evicted from the OS page cache, and the state is reopened with an empty trie and an empty
//! block cache; then the block's one transaction runs (after a parallel prefetch of its access
//! list when prefetch is on), its writes are applied to the trie and rehashed, and the block is
//! committed durably. Sizing and access-list dry runs happen before the eviction and are not
//! measured.

use crate::contracts::{self, COINBASE, DRIVER, SENDER, SstoreRegions, TOKEN};
use crate::model::{
    ConfigKey, DatabaseInfo, Durability, Layout, Machine, Results, RunRow, SCHEMA_VERSION,
    StudyConfig, Workload,
};
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use anyhow::{Context as _, Result, bail, ensure};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use bintrie_logstore::LogStore;
use bintrie_node::{Sha256Hasher, TreeHasher};
use bintrie_revm::{
    BinTrieState, BlockDbOptions, BlockPlan, BlockState as _, LogState, PipelineOptions,
    PrefetchList,
};
use bintrie_store::{
    ExternalSort, StateStore, StoreOptions, evict_page_cache, stems_of, warm_branch_pages,
};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use revm::context::result::ExecutionResult;
use revm::context::{Context, TxEnv};
use revm::context_interface::transaction::{AccessList, AccessListItem};
use revm::primitives::hardfork::SpecId;
use revm::state::EvmState;
use revm::{ExecuteCommitEvm, ExecuteEvm, MainBuilder, MainContext};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod block;
mod perf;
mod state;

use block::Bench;
pub use block::copy_into_log;
pub use state::{Sizing, build_database, build_random_state, random_state, workload_accounts};

/// Share of the transaction gas limit the loops are sized to use (the rest is headroom).
const GAS_FILL: f64 = 0.95;

/// Sequential driver slots `0 .. SLOAD_SLOTS` hold non-zero values for `sload_benchmark`.
pub const SLOAD_SLOTS: u64 = 10_240;
/// Slots per pre-populated `sstore_variants` region.
pub const SSTORE_REGION: u64 = 4_096;
const OTHER_BASE: u64 = 1 << 32;
const SAME_BASE: u64 = 1 << 33;
const ZERO_BASE: u64 = 1 << 34;
const FRESH_BASE: u64 = 1 << 40;
const SAME_VALUE: u64 = 7;
/// ERC-20 holders sit at counter addresses `HOLDER_BASE ..`.
const HOLDER_BASE: u64 = 1 << 32;
/// Spender counters of the write workloads start here (far from every holder).
const SPENDER_BASE: u64 = 1 << 48;

/// Everything a study needs to know: what to measure (recorded in `results.json`) and how to
/// run it (not recorded, except the command line).
#[derive(Clone, Debug)]
pub struct StudyOptions {
    /// What is measured, and how; becomes `Results::config` as is.
    pub config: StudyConfig,
    /// Where the databases are built (one at a time, deleted when done unless `keep_databases`).
    pub db_dir: PathBuf,
    /// Keep each database after its configuration is measured.
    pub keep_databases: bool,
    /// Measure on an existing database in `db_dir` (from `keep_databases`) instead of building
    /// a new one, when one with the right group depth is there. For iterating on the engine;
    /// the report then shows a build time of 0 and the state includes earlier runs' writes.
    pub reuse_databases: bool,
    /// Show progress bars on stderr.
    pub progress: bool,
    /// Memory for building a database, in bytes: the state's writes are sorted in runs of at
    /// most this size, spilled to temporary files in the database's directory and merged
    /// into the streaming build, so building takes about this much memory at any state size.
    pub memory_budget: usize,
    /// Measure the drive under `db_dir` before the study (`machine.disk`; a few seconds).
    pub probe_disk: bool,
    /// The command line, for the report.
    pub command: String,
    /// The report directory where the blocks measured so far go, with their report, when the
    /// study fails or is stopped part-way ([`Results::incomplete`] says why), so that hours of
    /// measuring are not lost with it; `None`: nowhere.
    pub partial_out: Option<PathBuf>,
    /// Remove `db_dir` at the end when it is empty (a directory the caller made for the
    /// study: `bench`'s default `OUT/databases`). Only a study that held its lock does.
    pub remove_empty_db_dir: bool,
}

impl StudyOptions {
    /// Options running `config` with databases in `db_dir`: databases deleted when done, none
    /// reused, progress bars shown, the disk probed, no command line recorded.
    pub fn new(config: StudyConfig, db_dir: PathBuf) -> Self {
        StudyOptions {
            config,
            db_dir,
            keep_databases: false,
            reuse_databases: false,
            progress: true,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            probe_disk: true,
            command: String::new(),
            partial_out: None,
            remove_empty_db_dir: false,
        }
    }
}

/// The default [`StudyOptions::memory_budget`]: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// Nanoseconds per 64-byte node hash on this machine (median of 5 timed batches of 200,000).
pub fn measure_hash64_ns() -> f64 {
    hash64_ns_of_batches(200_000)
}

/// Nanoseconds per 64-byte node hash, measured in about 10 ms (median of 5 batches of 15,000):
/// the probe taken just before each measured block, so that a block's hash floor divides by
/// the hash cost of the same moment (this VM's CPU speed moves by 2x within a run).
pub fn block_hash64_ns() -> f64 {
    hash64_ns_of_batches(15_000)
}

/// Median over 5 timed batches of `n` (at least 1) chained 64-byte hashes, ns per hash.
fn hash64_ns_of_batches(n: u32) -> f64 {
    let mut samples = Vec::new();
    let mut x = [7u8; 64];
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..n {
            x[0] = i as u8;
            let h = Sha256Hasher::hash64(std::hint::black_box(&x));
            x[32..].copy_from_slice(&h);
        }
        samples.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    std::hint::black_box(x);
    samples.sort_by(f64::total_cmp);
    samples[2]
}

/// What is known about this machine, with the hash cost and the drive measured by the caller.
pub fn machine(hash64_ns: f64, disk: Option<crate::device::Disk>) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string());
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory_bytes,
        kernel,
        hash64_ns,
        disk,
    }
}

/// Runs the whole study and returns its results (statistics not yet computed: see
/// [`crate::stats`]). Errors stop the study; databases built so far are deleted unless kept.
/// The study holds `db_dir` locked from start to end ([`lock_db_dir`]): a second study on the
/// same directory fails at once, before it builds, copies or deletes anything there.
pub fn run_study(opts: &StudyOptions) -> Result<Results> {
    let config = &opts.config;
    config.validate()?;
    let started = std::time::SystemTime::now();
    let t_all = Instant::now();
    let hash64_ns = measure_hash64_ns();
    tracing::info!(hash64_ns, "measured one 64-byte hash");
    // Every database, in the order they are built: state size, page size, group depth.
    let plan: Vec<(u64, u32, u8)> = config
        .sizes()
        .into_iter()
        .flat_map(|n| {
            config
                .page_sizes
                .iter()
                .flat_map(move |&p| config.group_depths.iter().map(move |&g| (n, p, g)))
        })
        .collect();
    let blocks_per_db = config.workloads.len()
        * config.layouts.len()
        * config.read_paths.len()
        * config.prefetch.len()
        * (config.runs * config.blocks_per_run) as usize;

    let bars = MultiProgress::with_draw_target(if opts.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let overall = bars.add(ProgressBar::new((plan.len() * blocks_per_db) as u64));
    overall.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {pos}/{len} blocks, {elapsed_precise} elapsed, eta {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    overall.set_prefix("study");

    std::fs::create_dir_all(&opts.db_dir).with_context(|| {
        if opts.db_dir.exists() && !opts.db_dir.is_dir() {
            format!("--db-dir {} is not a directory", opts.db_dir.display())
        } else {
            format!("creating --db-dir {}", opts.db_dir.display())
        }
    })?;
    let _lock = lock_db_dir(&opts.db_dir)?;
    // Dropped before the lock (declared after it): the directory goes, when empty, while this
    // study still holds it, however the study ends.
    let _remove = RemoveIfEmpty(opts.remove_empty_db_dir.then(|| opts.db_dir.clone()));
    let several_sizes = config.sizes().len() > 1;
    // Every directory the study will delete is checked before the first is built (and before
    // the disk is probed), so a file that is not the study's stops it at once, not after hours
    // of measuring.
    for &(stems, page_size, g) in &plan {
        let (dir, log_dir) = database_dirs(&opts.db_dir, several_sizes, stems, page_size, g);
        check_database_dir(&dir)?;
        check_database_dir(&log_dir)?;
    }
    let disk = opts.probe_disk.then(|| {
        overall.set_message("measuring the disk");
        probe(&opts.db_dir)
    });
    let mut study = Study {
        opts,
        several_sizes,
        bars,
        overall,
        databases: Vec::new(),
        runs: Vec::new(),
    };
    let mut failed = None;
    for (stems, page_size, g) in plan {
        if let Err(e) = study.database(stems, page_size, g) {
            failed = Some(e);
            break;
        }
    }
    let Study {
        overall,
        databases,
        runs,
        ..
    } = study;
    overall.finish_and_clear();
    let results = Results {
        schema_version: SCHEMA_VERSION,
        started: humantime::format_rfc3339_seconds(started).to_string(),
        elapsed_s: t_all.elapsed().as_secs_f64(),
        command: opts.command.clone(),
        machine: machine(hash64_ns, disk.flatten()),
        config: opts.config.clone(),
        databases,
        runs,
        summaries: Vec::new(),
        comparisons: Vec::new(),
        incomplete: failed.as_ref().map(|e| format!("{e:#}")),
    };
    match failed {
        None => Ok(results),
        Some(e) => Err(save_partial(opts, results, e)),
    }
}

/// Removes its directory, when empty, on drop (nothing with `None`): a directory made for a
/// run that ended with nothing in it.
pub struct RemoveIfEmpty(pub Option<PathBuf>);

impl Drop for RemoveIfEmpty {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The error of a study that stopped part-way, with the blocks it measured and their report
/// written to [`StudyOptions::partial_out`] when there are any, or kept elsewhere
/// ([`keep_measurements`]) when that fails.
fn save_partial(opts: &StudyOptions, mut results: Results, e: anyhow::Error) -> anyhow::Error {
    if results.runs.is_empty() {
        return e.context("no block was measured");
    }
    let Some(dir) = &opts.partial_out else {
        return e;
    };
    // Rows of a configuration cut short mid-run are kept: a partial run's blocks were measured
    // like any other, and the statistics count kept rows only.
    crate::stats::analyze(&mut results);
    let path = dir.join(crate::report::RESULTS_FILE);
    match crate::report::write_report(&results, dir) {
        Ok(()) => e.context(format!(
            "{} measured {} saved in {}, with their report",
            blocks(results.runs.len()),
            if results.runs.len() == 1 { "is" } else { "are" },
            path.display()
        )),
        Err(w) => keep_measurements(e.context(format!("{w:#}")), &path, &results),
    }
}

/// `n` blocks, in words: `1 block`, `2 blocks`.
fn blocks(n: usize) -> String {
    match n {
        1 => "1 block".to_string(),
        n => format!("{n} blocks"),
    }
}

/// `e`, saying where `results` are kept: written to `path` ([`write_json_replacing`]) or, when
/// that fails, to a file in the system's temporary directory, with how to render them; or why
/// neither took them. What a study that fails after measuring, or whose report cannot be
/// written, returns: its measurements are never lost with it.
pub fn keep_measurements(e: anyhow::Error, path: &Path, results: &Results) -> anyhow::Error {
    let n = blocks(results.runs.len());
    let are = if results.runs.len() == 1 { "is" } else { "are" };
    let spare = std::env::temp_dir().join(format!(
        "bintrie-results-{}-{}.json",
        results.started.replace(':', "-"),
        std::process::id()
    ));
    // Already there (a report that failed after writing its results.json): not written again.
    let there = Results::read(path).is_ok_and(|r| r.same_invocation(results));
    let saved = (if there {
        Ok(())
    } else {
        write_json_replacing(path, results)
    })
    .map(|()| path)
    .or_else(|first| {
        write_json_replacing(&spare, results)
            .map(|()| spare.as_path())
            .map_err(|second| format!("{first:#}; {second:#}"))
    });
    match saved {
        Ok(at) => e.context(format!(
            "{n} measured {are} saved in {} (`bintrie bench --from-results {} --out DIR` \
             renders their report)",
            at.display(),
            at.display()
        )),
        Err(why) => e.context(format!("{n} measured could not be saved: {why}")),
    }
}

/// Takes the study's lock on `dir`, its `--db-dir`: an exclusive `flock` on the directory
/// itself (no file is left behind), released when the returned handle is dropped or the
/// process ends, however it ends. Another study holding it is an error: its databases are
/// rebuilt, copied and deleted in that directory, so two studies there would delete each
/// other's state or measure each other's blocks. Best effort, as the store's own lock: where
/// the filesystem has no `flock` (some network filesystems), the study runs unlocked, with a
/// warning.
pub fn lock_db_dir(dir: &Path) -> Result<std::fs::File> {
    lock_dir(dir, "bench", "--db-dir")
}

/// [`lock_db_dir`] for any directory one run of `bintrie COMMAND` at a time may use, `option`
/// naming it in the error (`bench`'s `--db-dir` and `--out`, `exec`'s `--db`).
pub fn lock_dir(dir: &Path, command: &str, option: &str) -> Result<std::fs::File> {
    let handle = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    match rustix::fs::flock(
        &handle,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => bail!(
            "another `bintrie {command}` is using {}: wait for it to end, or give this one \
             another {option}",
            dir.display()
        ),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot lock the {option} directory: running unlocked (one {command} at a time there)");
        }
    }
    Ok(handle)
}

/// The drive under `dir` (`None`, with a warning, when the probe fails).
fn probe(dir: &Path) -> Option<crate::device::Disk> {
    match crate::device::probe_disk(dir, &crate::device::ProbeOptions::default()) {
        Ok(d) => {
            tracing::info!(
                qd1_us = d.read_qd1_us,
                qd16_us = d.read_qd16_us,
                saturation = d.saturation_depth,
                "measured the disk"
            );
            Some(d)
        }
        Err(e) => {
            tracing::warn!("the disk probe failed, machine.disk stays empty: {e:#}");
            None
        }
    }
}

/// A study under way: what it measured so far, and its progress bars.
struct Study<'a> {
    opts: &'a StudyOptions,
    /// Several state sizes: database directories name theirs.
    several_sizes: bool,
    bars: MultiProgress,
    overall: ProgressBar,
    databases: Vec<DatabaseInfo>,
    runs: Vec<RunRow>,
}

/// What a study database's random state was built from, kept beside it
/// ([`BuiltFrom::FILE`]) so that `--reuse-databases` measures only a database of the state
/// the run asks for: reused with other stems or another seed, it used to be measured and
/// reported under the new run's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct BuiltFrom {
    stems: u64,
    seed: u64,
    holders: u64,
    page_size: u32,
    group_depth: u8,
}

/// Set when the user asked the study to stop ([`request_stop`]).
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks a running study to stop (the CLI calls it on Ctrl-C): it ends with an error before its
/// next block, or its next stem while it generates a database's state, and deletes the
/// databases it made as at its normal end (unless they are kept); the blocks measured so far
/// go to [`StudyOptions::partial_out`]. Returns whether a stop had been asked already (a second
/// Ctrl-C: quit at once).
pub fn request_stop() -> bool {
    STOP.swap(true, std::sync::atomic::Ordering::SeqCst)
}

/// An error once a stop was asked for ([`request_stop`]).
pub(crate) fn check_stop() -> Result<()> {
    ensure!(
        !STOP.load(std::sync::atomic::Ordering::Relaxed),
        "interrupted: the study stopped before its end"
    );
    Ok(())
}

/// The database directories of one cell of the plan under `db_dir`: MDBX's and the log's. One
/// state size keeps the names earlier studies used (and --reuse-databases finds).
fn database_dirs(
    db_dir: &Path,
    several_sizes: bool,
    stems: u64,
    page_size: u32,
    g: u8,
) -> (PathBuf, PathBuf) {
    let name = if several_sizes {
        format!("db-s{stems}-p{page_size}-g{g}")
    } else {
        format!("db-p{page_size}-g{g}")
    };
    (db_dir.join(&name), db_dir.join(format!("{name}-log")))
}

/// Deletes `dir`, a database directory this study makes under `--db-dir` (absent: nothing to
/// do), but only when every entry in it is a file a bench database holds: the store's
/// ([`bintrie_store::is_store_file_name`]), the log's ([`bintrie_logstore::is_log_file_name`])
/// and the study's own records, or a record's `.tmp` (a crash between its write and its
/// rename); and only when the study made it: a directory holding anything at all must hold
/// one of the study's records ([`claim_database_dir`]'s mark, or the records a build or a copy
/// leaves). Anything else (a user's file, or a user's database, in a directory that happens to
/// bear the name) makes it an error naming the directory, and nothing is deleted.
pub(crate) fn remove_database_dir(dir: &Path) -> Result<()> {
    if check_database_dir(dir)? {
        std::fs::remove_dir_all(dir).with_context(|| format!("deleting {}", dir.display()))?;
    }
    Ok(())
}

/// [`remove_database_dir`]'s check, deleting nothing: `Ok(true)` when `dir` exists and holds
/// only a bench database's files and, unless it is empty, one of the study's records
/// ([`RECORDS`]); `Ok(false)` when it is absent; else the error.
fn check_database_dir(dir: &Path) -> Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let (mut any, mut marked) = (false, false);
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name();
        any = true;
        marked |= name.to_str().is_some_and(|n| RECORDS.contains(&n));
        let record = name.to_str().is_some_and(is_record_name);
        let ours = record
            || bintrie_store::is_store_file_name(&name)
            || bintrie_logstore::is_log_file_name(&name);
        ensure!(
            ours && entry.file_type().is_ok_and(|t| t.is_file()),
            "{} holds {name:?}, which a bench database does not: bench deletes and rebuilds \
             its databases in --db-dir, so it leaves this directory alone; move what is yours \
             out of it, or give another --db-dir",
            dir.display()
        );
    }
    ensure!(
        marked || !any,
        "{} holds a database this study did not make (none of its records: {}): bench deletes \
         and rebuilds its databases in --db-dir, so it leaves this one alone; move it, or give \
         another --db-dir (one that an older bintrie bench left without a record, a build cut \
         short or one from before 2026-12-06, is to be deleted by hand)",
        dir.display(),
        RECORDS.join(", ")
    );
    Ok(true)
}

/// The study's mark on a database directory it makes (written before anything else goes in):
/// what lets [`remove_database_dir`] delete a directory whose build or copy was cut short.
const OWNER_FILE: &str = "bench-database";

/// The study's records in a database directory: any one marks the directory as the study's.
const RECORDS: [&str; 3] = [OWNER_FILE, BuiltFrom::FILE, block::BASE_FILE];

/// Makes `dir` (a database directory under `--db-dir` that [`remove_database_dir`] left
/// absent or empty) and marks it as the study's ([`OWNER_FILE`]) before a build or a copy puts
/// anything in it, so that a build cut short is still deleted by the next study, not refused.
/// The mark is written in place, not through a temporary file renamed over it: only its name
/// matters, and a kill between a temporary file and its rename would leave a directory with
/// no mark, refused from then on.
pub(crate) fn claim_database_dir(dir: &Path) -> Result<()> {
    let path = dir.join(OWNER_FILE);
    let claim = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut file = std::fs::File::create(&path)?;
        std::io::Write::write_all(
            &mut file,
            b"made by bintrie bench, which deletes and rebuilds this directory\n",
        )?;
        file.sync_all()?;
        std::fs::File::open(dir)?.sync_all()
    };
    claim().with_context(|| format!("marking {} as the study's", dir.display()))
}

/// Writes `value` as JSON (and a newline) to `path` through a new temporary file beside it
/// (`NAME.XXXXXX.tmp`, made with `O_EXCL`: no file or link there is written through, and two
/// writers never share one), synced, renamed over `path` and the directory synced, so that a
/// crash, a kill or a full disk leaves the old file or the new one, never a torn one (a torn
/// record would refuse a database that is whole; a torn `results.json` would lose the study).
/// A failed write removes its temporary file.
pub fn write_json_replacing(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let mut bytes =
        serde_json::to_vec_pretty(value).with_context(|| format!("writing {}", path.display()))?;
    bytes.push(b'\n');
    write_replacing(path, &bytes)
}

/// Writes `bytes` to `path` as [`write_json_replacing`] does: through a new temporary file
/// beside it, synced, renamed over `path`, the directory synced; the old file or the new one,
/// never a torn one, and nothing half-written left beside it (mode 0644).
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let write = || -> std::io::Result<()> {
        // Readable by all, as a file written plainly is (a temporary file is made 0600).
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{name}."))
            .suffix(".tmp")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(dir)?;
        std::io::Write::write_all(&mut tmp.as_file(), bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// Whether `name` is one of the study's records in a database directory, or a temporary file
/// of one ([`write_json_replacing`]'s `NAME.XXXXXX.tmp`, or `NAME.tmp` of older versions) that
/// a kill left.
fn is_record_name(name: &str) -> bool {
    RECORDS.iter().any(|file| {
        name == *file
            || name
                .strip_prefix(file)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| rest == "tmp" || rest.ends_with(".tmp"))
    })
}

impl BuiltFrom {
    /// The file in the database directory.
    const FILE: &str = "bench-built-from.json";

    /// Writes this record into `dir` (after its build).
    fn record(&self, dir: &Path) -> Result<()> {
        write_json_replacing(&dir.join(Self::FILE), self)
    }

    /// Refuses to reuse `dir` unless it records that it was built from this.
    fn check(&self, dir: &Path) -> Result<()> {
        let path = dir.join(Self::FILE);
        let found: BuiltFrom = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("--reuse-databases: reading {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "--reuse-databases: {} does not record what it was built from (no {}: its build \
                 was interrupted): run once without --reuse-databases to rebuild it",
                dir.display(),
                Self::FILE
            ),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("--reuse-databases: reading {}", path.display()));
            }
        };
        ensure!(
            found == *self,
            "--reuse-databases: {} was built from {found}, this run asks for {self}: run \
             without --reuse-databases to rebuild it",
            dir.display()
        );
        Ok(())
    }
}

impl std::fmt::Display for BuiltFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} stems, seed {}, {} holders, {}-byte pages, group depth {}",
            self.stems, self.seed, self.holders, self.page_size, self.group_depth
        )
    }
}

impl Study<'_> {
    /// Builds (or reuses) the database of `stems` random stems, `page_size` and group depth
    /// `g`, measures every workload, read path and prefetch setting on it, and deletes it
    /// unless it is kept.
    fn database(&mut self, stems: u64, page_size: u32, g: u8) -> Result<()> {
        let opts = self.opts;
        // The configuration at this state size: what the database is built from.
        let config = &StudyConfig {
            stems,
            ..opts.config.clone()
        };
        let (dir, log_dir) = database_dirs(&opts.db_dir, self.several_sizes, stems, page_size, g);
        let reuse = opts.reuse_databases && dir.join("mdbx.dat").exists();
        if !reuse {
            remove_database_dir(&dir)?;
            claim_database_dir(&dir)?;
        }
        self.overall
            .set_message(format!("building g={g} page={page_size} stems={stems}"));
        let build = self.bars.add(ProgressBar::new_spinner());
        build.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg}: {pos} stems placed ({per_sec}), {elapsed}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        build.set_message(format!(
            "g={g}: building {stems} random stems + contracts (sorting in {} MiB, then streaming)",
            opts.memory_budget >> 20
        ));
        build.enable_steady_tick(Duration::from_millis(200));
        let built_from = BuiltFrom {
            stems,
            seed: config.seed,
            holders: config.holders,
            page_size,
            group_depth: g,
        };
        let result = (|| -> Result<()> {
            let (mut bench, info) = if reuse {
                built_from.check(&dir)?;
                Bench::reopen(&dir, g, page_size, config)?
            } else {
                let built = Bench::build(&dir, g, page_size, config, opts.memory_budget, &|n| {
                    build.set_position(n)
                })?;
                built_from.record(&dir)?;
                built
            };
            build.finish_and_clear();
            tracing::info!(
                g,
                page_size,
                build_s = info.build_s,
                bytes = info.file_bytes,
                "database built"
            );
            self.databases.push(info);
            // The log layout first: its copy is made from the database before any block runs
            // on it, so both layouts start from the same state (the copy used to start from
            // the state the MDBX layout's blocks left).
            let mut layouts = config.layouts.clone();
            layouts.sort_by_key(|l| *l != Layout::Log);
            for &layout in &layouts {
                match layout {
                    Layout::Mdbx => self.measure(&mut bench, config, stems, page_size, g)?,
                    Layout::Log => {
                        self.overall
                            .set_message(format!("g={g}: copying the state into the log layout"));
                        let (mut log, info) = bench.log_copy(&log_dir, page_size, config, reuse)?;
                        self.databases.push(info);
                        self.measure(&mut log, config, stems, page_size, g)?;
                        log.finish()?;
                        // The copy read the whole MDBX file into the page cache: dropped, so
                        // that the MDBX layout's sizing maps only what it reads (as after the
                        // build).
                        bintrie_store::evict_page_cache(&dir)
                            .with_context(|| format!("evicting {}", dir.display()))?;
                    }
                }
            }
            bench.finish()
        })();
        build.finish_and_clear();
        if !opts.keep_databases {
            // Checked before the study began; should a file have appeared since, the study's
            // measurements are kept and the directory with it.
            for dir in [&dir, &log_dir] {
                if let Err(e) = remove_database_dir(dir) {
                    tracing::warn!(error = %format!("{e:#}"), "a database directory was kept");
                }
            }
        }
        result.with_context(|| format!("group depth {g}, page size {page_size}, {stems} stems"))
    }

    /// Every workload, read path and prefetch setting on one database: `runs` runs of
    /// `blocks_per_run` blocks each.
    fn measure(
        &mut self,
        bench: &mut Bench,
        config: &StudyConfig,
        stems: u64,
        page_size: u32,
        g: u8,
    ) -> Result<()> {
        for &w in &config.workloads {
            let sizing = bench.size(w, config)?;
            tracing::info!(workload = w.name(), ?sizing, "sized");
            for &read_path in &config.read_paths {
                for &prefetch in &config.prefetch {
                    let key = ConfigKey {
                        stems,
                        page_size,
                        group_depth: g,
                        workload: w,
                        read_path,
                        prefetch,
                        layout: bench.layout(),
                    };
                    self.overall.set_message(format!(
                        "g={g} {} {} {} prefetch={}",
                        bench.layout().name(),
                        w.name(),
                        read_path.name(),
                        if prefetch { "on" } else { "off" }
                    ));
                    for run in 0..config.runs {
                        for b in 0..config.blocks_per_run {
                            check_stop()?;
                            let row = bench.measure(key, run, b, &sizing, config)?;
                            tracing::debug!(
                                run,
                                block = b,
                                total_ms = row.total_ms,
                                "block measured"
                            );
                            self.runs.push(row);
                            self.overall.inc(1);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory holding a bench database's files (and the temporaries of its records) is
    /// deleted; one holding anything else, or a directory in its place, is refused and kept.
    #[test]
    fn only_a_bench_databases_directory_is_deleted() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db-p4096-g5");
        let fill = |names: &[&str]| {
            std::fs::create_dir_all(&dir).unwrap();
            for n in names {
                std::fs::write(dir.join(n), b"").unwrap();
            }
        };
        assert!(!check_database_dir(&dir).unwrap(), "absent");
        fill(&["mdbx.dat", "mdbx.lck", "journal", "bench-built-from.json"]);
        fill(&[
            "log.000001",
            "LOCK",
            "index-sizes.tmp",
            "bench-base.json.tmp",
            "bench-built-from.json.a1B2c3.tmp",
        ]);
        remove_database_dir(&dir).unwrap();
        assert!(!dir.exists());
        for foreign in [
            "notes.txt",
            "log.1",
            "mdbx.dat.bak",
            "x.tmp",
            "bench-base.json.bak",
        ] {
            fill(&["mdbx.dat", foreign]);
            let err = format!("{:#}", remove_database_dir(&dir).unwrap_err());
            assert!(err.contains(&format!("{foreign:?}")), "{err}");
            assert!(dir.join(foreign).exists());
            std::fs::remove_dir_all(&dir).unwrap();
        }
        fill(&["mdbx.dat", "bench-database"]);
        std::fs::create_dir(dir.join("log.000002")).unwrap();
        assert!(remove_database_dir(&dir).is_err());
        assert!(dir.join("mdbx.dat").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        // A database of the store's or the log's files alone is a user's, whose name only
        // happens to be one the study uses: refused, left whole. Any one of the study's
        // records makes it the study's; an empty directory is removed.
        for files in [
            &["mdbx.dat", "mdbx.lck"][..],
            &["log.000001", "index-sizes"],
        ] {
            fill(files);
            let err = format!("{:#}", remove_database_dir(&dir).unwrap_err());
            assert!(err.contains("did not make"), "{err}");
            assert!(files.iter().all(|f| dir.join(f).exists()));
            for record in RECORDS {
                std::fs::write(dir.join(record), b"").unwrap();
                assert!(check_database_dir(&dir).unwrap(), "{record}");
                std::fs::remove_file(dir.join(record)).unwrap();
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir(&dir).unwrap();
        remove_database_dir(&dir).unwrap();
        assert!(!dir.exists());
        claim_database_dir(&dir).unwrap();
        fill(&["mdbx.dat", "mdbx.lck"]);
        remove_database_dir(&dir).unwrap();
        assert!(!dir.exists(), "a directory the study claimed is deleted");
    }
}
