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
    ConfigKey, DatabaseInfo, Machine, ReadPath, Results, RunRow, SCHEMA_VERSION, StudyConfig,
    Workload,
};
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use anyhow::{Context as _, Result, bail, ensure};
use bintrie_keys::{AccountState, TreeKey, account_entries};
use bintrie_node::{Sha256Hasher, TreeHasher};
use bintrie_revm::{BinTrieState, BlockDbOptions, BlockPlan, PipelineOptions, PrefetchList};
use bintrie_store::{Durability, StoreOptions, evict_page_cache};
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

/// Block gas limit of every measured block (STUDY.md).
pub const BLOCK_GAS_LIMIT: u64 = 100_000_000;
/// Gas limit of the one benchmark transaction per block: 2^24, EIP-7825's cap.
pub const TX_GAS_LIMIT: u64 = 1 << 24;
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

/// The preset sizes of a study.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Parses `smoke`, `small` or `study`.
    pub fn parse(s: &str) -> Option<Scale> {
        match s {
            "smoke" => Some(Scale::Smoke),
            "small" => Some(Scale::Small),
            "study" => Some(Scale::Study),
            _ => None,
        }
    }

    /// The scale's name.
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

/// Everything a study needs to know.
#[derive(Clone, Debug)]
pub struct StudyOptions {
    /// The preset the sizes came from (reported; the fields below are what is used).
    pub scale: Scale,
    /// Random stems per database.
    pub stems: u64,
    /// ERC-20 holders.
    pub holders: u64,
    /// Group depths, each 1..=8.
    pub group_depths: Vec<u8>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Read paths.
    pub read_paths: Vec<ReadPath>,
    /// Prefetch settings.
    pub prefetch: Vec<bool>,
    /// MDBX page sizes (powers of two, 4096..=65536).
    pub page_sizes: Vec<u32>,
    /// Runs per configuration, including the dropped first one (at least 2).
    pub runs: u32,
    /// Percent of the mixed workload's gas spent on balanceOf (1..=99).
    pub mixed_read_pct: u32,
    /// Prefetch worker threads.
    pub workers: usize,
    /// Seed of the random state and the per-run keys.
    pub seed: u64,
    /// Where the databases are built (one at a time, deleted when done unless `keep_databases`).
    pub db_dir: PathBuf,
    /// Keep each database after its configuration is measured.
    pub keep_databases: bool,
    /// Measure on an existing database in `db_dir` (from `keep_databases`) instead of building
    /// a new one, when one with the right group depth is there. For iterating on the engine;
    /// the report then shows a build time of 0 and the state includes earlier runs' writes.
    pub reuse_databases: bool,
    /// MDBX durability of every commit: `Durable` (fsync per block, the default) or
    /// `Relaxed` (atomic and consistent, but the last blocks may be lost on a system crash).
    pub durability: Durability,
    /// Show progress bars on stderr.
    pub progress: bool,
    /// The command line, for the report.
    pub command: String,
}

impl StudyOptions {
    /// Options for `scale` with every dimension at its default: all group depths and workloads,
    /// both read paths, prefetch off and on, 4 KB pages.
    pub fn for_scale(scale: Scale, db_dir: PathBuf) -> Self {
        StudyOptions {
            scale,
            stems: scale.stems(),
            holders: scale.holders(),
            group_depths: (1..=8).collect(),
            workloads: Workload::ALL.to_vec(),
            read_paths: vec![ReadPath::TrieWalk, ReadPath::Flat],
            prefetch: vec![false, true],
            page_sizes: vec![4096],
            runs: scale.runs(),
            mixed_read_pct: 50,
            workers: 8,
            seed: 7864,
            db_dir,
            keep_databases: false,
            reuse_databases: false,
            durability: Durability::Durable,
            progress: true,
            command: String::new(),
        }
    }

    fn validate(&self) -> Result<()> {
        ensure!(!self.group_depths.is_empty(), "no group depths selected");
        for g in &self.group_depths {
            ensure!((1..=8).contains(g), "group depth {g} is outside 1..=8");
        }
        ensure!(!self.workloads.is_empty(), "no workloads selected");
        ensure!(!self.read_paths.is_empty(), "no read paths selected");
        ensure!(!self.prefetch.is_empty(), "no prefetch settings selected");
        ensure!(!self.page_sizes.is_empty(), "no page sizes selected");
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
            (1..=99).contains(&self.mixed_read_pct),
            "the mixed read share must be 1..=99 percent"
        );
        ensure!(self.workers >= 1, "at least one prefetch worker");
        ensure!(self.holders >= 1, "at least one ERC-20 holder");
        Ok(())
    }
}

/// Nanoseconds per 64-byte node hash on this machine (median of 5 timed batches).
pub fn measure_hash64_ns() -> f64 {
    const N: u32 = 200_000;
    let mut samples = Vec::new();
    let mut x = [7u8; 64];
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..N {
            x[0] = i as u8;
            let h = Sha256Hasher::hash64(std::hint::black_box(&x));
            x[32..].copy_from_slice(&h);
        }
        samples.push(t.elapsed().as_nanos() as f64 / f64::from(N));
    }
    std::hint::black_box(x);
    samples.sort_by(f64::total_cmp);
    samples[2]
}

/// What is known about this machine.
pub fn machine(hash64_ns: f64) -> Machine {
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
    }
}

/// Runs the whole study and returns its results (statistics not yet computed: see
/// [`crate::stats`]). Errors stop the study; databases built so far are deleted unless kept.
pub fn run_study(opts: &StudyOptions) -> Result<Results> {
    opts.validate()?;
    let started = std::time::SystemTime::now();
    let t_all = Instant::now();
    let hash64_ns = measure_hash64_ns();
    tracing::info!(hash64_ns, "measured one 64-byte hash");
    let combos: Vec<(ReadPath, bool)> = opts
        .read_paths
        .iter()
        .flat_map(|&r| opts.prefetch.iter().map(move |&p| (r, p)))
        .collect();
    let per_db = opts.workloads.len() * combos.len() * opts.runs as usize;
    let dbs = opts.page_sizes.len() * opts.group_depths.len();

    let bars = MultiProgress::with_draw_target(if opts.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let overall = bars.add(ProgressBar::new((dbs * per_db) as u64));
    overall.set_style(
        ProgressStyle::with_template(
            "{prefix:>8} [{bar:40}] {pos}/{len} blocks, {elapsed_precise} elapsed, eta {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    overall.set_prefix("study");

    std::fs::create_dir_all(&opts.db_dir)
        .with_context(|| format!("creating {}", opts.db_dir.display()))?;
    let mut databases = Vec::new();
    let mut runs = Vec::new();
    for &page_size in &opts.page_sizes {
        for &g in &opts.group_depths {
            let dir = opts.db_dir.join(format!("db-p{page_size}-g{g}"));
            let reuse = opts.reuse_databases && dir.join("mdbx.dat").exists();
            if dir.exists() && !reuse {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing stale {}", dir.display()))?;
            }
            overall.set_message(format!("building g={g} page={page_size}"));
            let build = bars.add(ProgressBar::new_spinner());
            build.set_message(format!(
                "g={g}: building {} random stems + contracts",
                opts.stems
            ));
            build.enable_steady_tick(Duration::from_millis(200));
            let result = (|| -> Result<()> {
                let (mut bench, info) = if reuse {
                    Bench::reopen(&dir, g, page_size, opts)?
                } else {
                    Bench::build(&dir, g, page_size, opts)?
                };
                build.finish_and_clear();
                tracing::info!(
                    g,
                    page_size,
                    build_s = info.build_s,
                    bytes = info.file_bytes,
                    "database built"
                );
                databases.push(info);
                for &w in &opts.workloads {
                    let sizing = bench.size(w, opts)?;
                    tracing::info!(workload = w.name(), ?sizing, "sized");
                    for &(rp, pf) in &combos {
                        let key = ConfigKey {
                            page_size,
                            group_depth: g,
                            workload: w,
                            read_path: rp,
                            prefetch: pf,
                        };
                        overall.set_message(format!(
                            "g={g} {} {} prefetch={}",
                            w.name(),
                            rp.name(),
                            if pf { "on" } else { "off" }
                        ));
                        for run in 0..opts.runs {
                            let row = bench.measure(key, run, &sizing, opts, hash64_ns)?;
                            runs.push(row);
                            overall.inc(1);
                        }
                    }
                }
                Ok(())
            })();
            build.finish_and_clear();
            if !opts.keep_databases && dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("deleting {}", dir.display()))?;
            }
            result.with_context(|| format!("group depth {g}, page size {page_size}"))?;
        }
    }
    overall.finish_and_clear();
    Ok(Results {
        schema_version: SCHEMA_VERSION,
        started: humantime::format_rfc3339_seconds(started).to_string(),
        elapsed_s: t_all.elapsed().as_secs_f64(),
        command: opts.command.clone(),
        machine: machine(hash64_ns),
        config: StudyConfig {
            scale: opts.scale.name().to_string(),
            stems: opts.stems,
            holders: opts.holders,
            group_depths: opts.group_depths.clone(),
            workloads: opts.workloads.clone(),
            read_paths: opts.read_paths.clone(),
            prefetch: opts.prefetch.clone(),
            page_sizes: opts.page_sizes.clone(),
            runs: opts.runs,
            block_gas_limit: BLOCK_GAS_LIMIT,
            tx_gas_limit: TX_GAS_LIMIT,
            mixed_read_pct: opts.mixed_read_pct,
            prefetch_workers: opts.workers,
            durability: match opts.durability {
                Durability::Durable => "durable",
                Durability::Relaxed => "relaxed",
            }
            .to_string(),
            seed: opts.seed,
        },
        databases,
        runs,
        summaries: Vec::new(),
        comparisons: Vec::new(),
    })
}

/// Loop counts of one workload, sized from gas.
#[derive(Clone, Copy, Debug)]
pub struct Sizing {
    /// Iterations of the workload's loop (balanceOf, approve, sload, or sstore per phase).
    pub count: u64,
    /// For `mixed`: approve iterations after `count` balanceOf iterations.
    pub writes: u64,
}

/// The random state: `stems` random stems, a quarter of them accounts.
pub fn random_entries(stems: u64, seed: u64) -> Result<Vec<(TreeKey, [u8; 32])>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(stems as usize * 5 / 4);
    for i in 0..stems {
        if i % 4 == 0 {
            let address = Address::from(rng.random::<[u8; 20]>());
            let acct = AccountState {
                nonce: rng.random_range(0..1_000),
                balance: U256::from(rng.random::<u64>()),
                ..Default::default()
            };
            out.extend(account_entries(&address, &acct)?);
        } else {
            let mut value = rng.random::<[u8; 32]>();
            value[0] |= 1;
            out.push((
                TreeKey {
                    stem: rng.random(),
                    sub_index: rng.random(),
                },
                value,
            ));
        }
    }
    Ok(out)
}

/// The workload accounts: the sender, the ERC-20 with its holders, and the driver with its
/// pre-populated storage regions.
pub fn workload_accounts(holders: u64) -> Vec<(Address, AccountState)> {
    let per_holder = U256::from(1_000_000_000_000_000_000u128);
    let mut token_storage: Vec<(U256, U256)> = (0..holders)
        .map(|i| {
            let holder = contracts::counter_address(U256::from(HOLDER_BASE + i));
            (contracts::balance_slot(holder), per_holder)
        })
        .collect();
    token_storage.extend([
        (
            U256::from(contracts::TOTAL_SUPPLY_SLOT),
            per_holder * U256::from(holders),
        ),
        (
            U256::from(contracts::NAME_SLOT),
            contracts::short_string("Bench Token"),
        ),
        (
            U256::from(contracts::SYMBOL_SLOT),
            contracts::short_string("BENCH"),
        ),
    ]);
    let mut driver_storage: Vec<(U256, U256)> = (0..SLOAD_SLOTS)
        .map(|i| (U256::from(i), U256::from(i + 1)))
        .collect();
    for i in 0..SSTORE_REGION {
        driver_storage.push((U256::from(OTHER_BASE + i), U256::from(1)));
        driver_storage.push((U256::from(SAME_BASE + i), U256::from(SAME_VALUE)));
    }
    vec![
        (
            SENDER,
            AccountState {
                balance: U256::from(1_000_000_000_000_000_000_000u128),
                ..Default::default()
            },
        ),
        (
            TOKEN,
            AccountState {
                code: contracts::token_code(),
                storage: token_storage,
                ..Default::default()
            },
        ),
        (
            DRIVER,
            AccountState {
                code: contracts::driver_code(),
                storage: driver_storage,
                ..Default::default()
            },
        ),
    ]
}

/// A built database and the state of the benchmark chain on it.
struct Bench {
    dir: PathBuf,
    store_options: StoreOptions,
    state: Option<BinTrieState>,
    /// The sender's next nonce.
    nonce: u64,
    /// Blocks measured so far on this database: makes per-run keys unique.
    seq: u64,
    rng: StdRng,
    holders: u64,
}

impl Bench {
    fn build(
        dir: &Path,
        g: u8,
        page_size: u32,
        opts: &StudyOptions,
    ) -> Result<(Bench, DatabaseInfo)> {
        let t = Instant::now();
        let store_options = StoreOptions {
            group_depth: Some(g),
            page_size: Some(page_size as usize),
            durability: opts.durability,
            ..Default::default()
        };
        let mut state = BinTrieState::open(dir, &store_options)
            .with_context(|| format!("creating the database in {}", dir.display()))?;
        let mut writes = random_entries(opts.stems, opts.seed)?;
        let mut code = Vec::new();
        for (address, acct) in workload_accounts(opts.holders) {
            writes.extend(account_entries(&address, &acct)?);
            code.push((keccak256(&acct.code), acct.code));
        }
        state.import_entries(writes, code, 1)?;
        Self::with_state(dir, state, store_options, page_size, t.elapsed(), opts)
    }

    fn reopen(
        dir: &Path,
        g: u8,
        page_size: u32,
        opts: &StudyOptions,
    ) -> Result<(Bench, DatabaseInfo)> {
        let store_options = StoreOptions {
            group_depth: Some(g),
            create: false,
            durability: opts.durability,
            ..Default::default()
        };
        let state = BinTrieState::open(dir, &store_options)
            .with_context(|| format!("reopening {}", dir.display()))?;
        Self::with_state(dir, state, store_options, page_size, Duration::ZERO, opts)
    }

    fn with_state(
        dir: &Path,
        state: BinTrieState,
        store_options: StoreOptions,
        page_size: u32,
        build: Duration,
        opts: &StudyOptions,
    ) -> Result<(Bench, DatabaseInfo)> {
        let (nodes, stems, _) = state.store().counts()?;
        let info = DatabaseInfo {
            page_size,
            group_depth: state.store().meta().group_depth,
            build_s: build.as_secs_f64(),
            file_bytes: state.store().file_size()?,
            nodes,
            stems,
        };
        let nonce = bintrie_revm::TrieDb::new(state.store(), ReadPath::Flat)?
            .read_account(&SENDER)?
            .context("the database lacks the benchmark sender")?
            .info
            .nonce;
        // Per-block keys derive from the block number (a session makes far fewer than 10^6
        // transactions), so they stay fresh on a reused database.
        let seq = state.block() * 1_000_000;
        Ok((
            Bench {
                dir: dir.to_path_buf(),
                store_options,
                state: Some(state),
                nonce,
                seq,
                rng: StdRng::seed_from_u64(opts.seed ^ 0x5eed ^ seq),
                holders: opts.holders,
            },
            info,
        ))
    }

    fn state(&mut self) -> &mut BinTrieState {
        self.state.as_mut().expect("state is open between blocks")
    }

    /// Closes the database, evicts it from the page cache, and reopens it with empty caches.
    fn go_cold(&mut self) -> Result<()> {
        self.state = None;
        evict_page_cache(&self.dir)
            .with_context(|| format!("evicting {} from the page cache", self.dir.display()))?;
        self.state = Some(BinTrieState::open(&self.dir, &self.store_options)?);
        Ok(())
    }

    /// The calldata of one block of `w` with `sizing`, with keys fresh for this block.
    fn calldata(&mut self, w: Workload, sizing: &Sizing) -> Bytes {
        self.seq += 1;
        let unique = U256::from(SPENDER_BASE) + U256::from(self.seq) * U256::from(1u64 << 24);
        match w {
            Workload::Erc20Balanceof => {
                let start = HOLDER_BASE + self.rng.random_range(0..self.holders * 4);
                contracts::balance_of_loop(U256::from(start), sizing.count)
            }
            Workload::Erc20Approve => contracts::approve_loop(unique, sizing.count),
            Workload::Mixed => contracts::mixed(unique, sizing.count, sizing.writes),
            Workload::SloadBenchmark => contracts::sload_loop(0, sizing.count),
            Workload::SstoreVariants => {
                let regions = SstoreRegions {
                    fresh: U256::from(FRESH_BASE) + U256::from(self.seq) * U256::from(1u64 << 20),
                    other: U256::from(OTHER_BASE),
                    same: U256::from(SAME_BASE),
                    zero: U256::from(ZERO_BASE),
                };
                // Differs from whatever the previous block wrote (and from the initial 1).
                let value = U256::from(self.seq + 1);
                contracts::sstore_variants(
                    &regions,
                    sizing.count,
                    value,
                    U256::from(SAME_VALUE),
                    false,
                )
            }
        }
    }

    fn tx(&self, data: Bytes, access_list: Option<AccessList>) -> Result<TxEnv> {
        let b = TxEnv::builder()
            .caller(SENDER)
            .nonce(self.nonce)
            .to(DRIVER)
            .data(data)
            .gas_limit(TX_GAS_LIMIT)
            .gas_price(0)
            .chain_id(Some(1));
        let b = match access_list {
            Some(list) => b.tx_type(Some(1)).access_list(list),
            None => b.tx_type(Some(0)),
        };
        b.build()
            .map_err(|e| anyhow::anyhow!("building the transaction: {e:?}"))
    }

    /// Executes `tx` on the current state without committing: gas used and touched state.
    fn dry_run(&mut self, tx: TxEnv) -> Result<(u64, EvmState)> {
        let number = self.state().block() + 1;
        let state = self.state.as_ref().expect("open");
        let mut db = state.block_db(BlockDbOptions::default())?;
        let out = evm(&mut db, number).transact(tx)?;
        let gas = success_gas(&out.result)?;
        Ok((gas, out.state))
    }

    /// Gas per loop iteration and fixed gas of calldata `f(count)`, from two dry runs.
    fn gas_line(&mut self, f: impl Fn(&mut Self, u64) -> Bytes) -> Result<(f64, f64)> {
        let (a, b) = (16u64, 80u64);
        let da = f(self, a);
        let ga = self.dry_run(self.tx(da, None)?)?.0 as f64;
        let db = f(self, b);
        let gb = self.dry_run(self.tx(db, None)?)?.0 as f64;
        let per = (gb - ga) / (b - a) as f64;
        ensure!(
            per > 0.0,
            "a loop iteration costs no gas: the driver is broken"
        );
        Ok((per, ga - per * a as f64))
    }

    /// Loop counts that fill [`GAS_FILL`] of the transaction gas limit.
    fn size(&mut self, w: Workload, opts: &StudyOptions) -> Result<Sizing> {
        let budget = TX_GAS_LIMIT as f64 * GAS_FILL;
        let fit = |(per, fixed): (f64, f64), gas: f64| ((gas - fixed) / per).max(1.0) as u64;
        let one = |count| Sizing { count, writes: 0 };
        Ok(match w {
            Workload::Mixed => {
                let reads = self.gas_line(|s, n| {
                    s.calldata(
                        Workload::Mixed,
                        &Sizing {
                            count: n,
                            writes: 0,
                        },
                    )
                })?;
                let writes = self.gas_line(|s, n| {
                    s.calldata(
                        Workload::Mixed,
                        &Sizing {
                            count: 0,
                            writes: n,
                        },
                    )
                })?;
                let share = f64::from(opts.mixed_read_pct) / 100.0;
                Sizing {
                    count: fit(reads, budget * share),
                    writes: fit((writes.0, 0.0), budget * (1.0 - share) - reads.1),
                }
            }
            Workload::SloadBenchmark => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget).min(SLOAD_SLOTS))
            }
            Workload::SstoreVariants => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget).min(SSTORE_REGION))
            }
            _ => {
                let line = self.gas_line(|s, n| s.calldata(w, &one(n)))?;
                one(fit(line, budget))
            }
        })
    }

    /// One measured block.
    fn measure(
        &mut self,
        key: ConfigKey,
        run: u32,
        sizing: &Sizing,
        opts: &StudyOptions,
        hash64_ns: f64,
    ) -> Result<RunRow> {
        let data = self.calldata(key.workload, sizing);
        let mut prefetch_list = None;
        // The stems the block will write (what an EIP-7928 block access list tells apart from
        // its reads): the trie prefetcher preloads their paths.
        let mut write_stems: Vec<bintrie_keys::Stem> = Vec::new();
        let tx = if key.prefetch {
            // What eth_createAccessList gives: everything the transaction touches.
            let (_, touched) = self.dry_run(self.tx(data.clone(), None)?)?;
            let mut items = Vec::new();
            let mut list = PrefetchList::new();
            list.account(SENDER).account(DRIVER).account(COINBASE);
            for (address, account) in &touched {
                write_stems.push(bintrie_keys::basic_data_key(address).stem);
                write_stems.extend(
                    account
                        .changed_storage_slots()
                        .map(|(k, _)| bintrie_keys::storage_slot_key(address, k).stem),
                );
                let keys: Vec<B256> = account.storage.keys().map(|k| B256::from(*k)).collect();
                list.access_list([(*address, keys.as_slice())]);
                // The sender and the callee are warm anyway; list the callee's slots only.
                if *address != SENDER && !(*address == DRIVER && keys.is_empty()) {
                    items.push(AccessListItem {
                        address: *address,
                        storage_keys: keys,
                    });
                }
            }
            prefetch_list = Some(list);
            self.tx(data, Some(AccessList(items)))?
        } else {
            self.tx(data, None)?
        };

        self.go_cold()?;
        let read_path = key.read_path;
        let plan = BlockPlan {
            number: self.state().block() + 1,
            prefetch: prefetch_list,
            write_stems,
            block_hashes: Vec::new(),
        };
        let options = PipelineOptions::default()
            .with_db(
                BlockDbOptions::default()
                    .with_cache(true)
                    .with_read_path(read_path),
            )
            .with_workers(opts.workers);
        let number = plan.number;
        let block = self
            .state
            .as_mut()
            .expect("open")
            .run_block(&plan, &options, |db| evm(db, number).transact_commit(tx))
            .with_context(|| format!("block {number}"))?;
        let gas = success_gas(&block.output)?;
        let (reads, report, t) = (block.reads, block.commit, block.timings);
        let slots_written = block.writes.slots as u64;
        self.nonce += 1;

        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let state_read_ms = ms(t.state_read);
        let total_ms = ms(t.total);
        // Waiting for the trie prefetcher is part of the update.
        let trie_update_ms = ms(t.trie_update);
        let cold_reads = reads.unique_keys;
        let slots_read = reads.slot_reads;
        let hashes = report.trie.hashes;
        Ok(RunRow {
            key,
            run,
            kept: run > 0,
            gas,
            total_ms,
            state_read_ms,
            execution_ms: ms(t.execution),
            trie_update_ms,
            trie_warm_ms: ms(t.trie_prefetch),
            commit_ms: ms(t.commit),
            mgas_s: gas as f64 / 1e6 / t.total.as_secs_f64(),
            store_reads: reads.lookups,
            bytes_read: reads.bytes,
            nodes_loaded: report.trie.nodes_loaded,
            hashes,
            bytes_written: report.stats.bytes as u64,
            cold_reads,
            slots_read,
            slots_written,
            ms_per_cold_read: (slots_read > 0).then(|| state_read_ms / slots_read as f64),
            ms_per_written_slot: (slots_written > 0).then(|| total_ms / slots_written as f64),
            hash_floor: (hashes > 0).then(|| trie_update_ms * 1e6 / (hashes as f64 * hash64_ns)),
        })
    }
}

fn success_gas(result: &ExecutionResult) -> Result<u64> {
    match result {
        ExecutionResult::Success { .. } => Ok(result.tx_gas_used()),
        other => bail!("the benchmark transaction failed: {other:?}"),
    }
}

fn evm<DB: revm::Database>(
    db: DB,
    number: u64,
) -> revm::handler::MainnetEvm<revm::handler::MainnetContext<DB>> {
    Context::mainnet()
        .modify_cfg_chained(|c| c.set_spec_and_mainnet_gas_params(SpecId::PRAGUE))
        .modify_block_chained(|b| {
            b.number = U256::from(number);
            b.timestamp = U256::from(1_800_000_000u64 + number * 12);
            b.basefee = 0;
            b.beneficiary = COINBASE;
            b.gas_limit = BLOCK_GAS_LIMIT;
            b.prevrandao = Some(B256::from(keccak256(number.to_be_bytes())));
        })
        .with_db(db)
        .build_mainnet()
}
