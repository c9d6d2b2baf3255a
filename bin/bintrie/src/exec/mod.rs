//! `bintrie exec`: import a block's pre-state into a binary-trie database, execute the block with
//! revm through alloy-evm's Ethereum block executor over the revm adapter (with prefetch), commit,
//! and validate the result against the header and the fixture's post values.

mod fixture;

use crate::db::ReadPathArg;
use crate::hex0x;
use alloy_consensus::Transaction as _;
use alloy_eips::eip7840::BlobParams;
use alloy_evm::block::{BlockExecutor, BlockExecutorFactory};
use alloy_evm::eth::receipt_builder::AlloyReceiptBuilder;
use alloy_evm::eth::spec::EthSpec;
use alloy_evm::eth::{EthBlockExecutionCtx, EthBlockExecutorFactory};
use alloy_evm::{EthEvmFactory, EvmEnv, EvmFactory};
use alloy_hardforks::EthereumHardforks;
use alloy_primitives::{Address, B256, Bloom, U256};
use anyhow::{Context, Result, bail};
use bintrie_keys::{AccountState, BasicData, basic_data_key, code_hash_key, storage_slot_key};
use bintrie_revm::{
    BinTrieState, BlockChanges, BlockDbOptions, BlockPlan, PipelineOptions, PrefetchList,
    ReadStats, StageTimings, TrieDb, WriteCounts,
};
use bintrie_store::{Durability, ReadPath, StoreOptions};
use fixture::Fixture;
use revm::database_interface::DatabaseRef;
use revm::primitives::hardfork::SpecId;
use serde_json::json;
use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct ExecArgs {
    /// The block: a zkpi fixture (`*.zkpi.json`), a JSON-RPC cache (`*.rpccache.json[.gz]`), or
    /// an `eth_getBlockByNumber(n, true)` block (`*.block.json`, with --pre-state).
    #[arg(long)]
    fixture: PathBuf,
    /// Pre-state of a block fixture: address -> {basic {balance, nonce}, code {bytecode,
    /// original_len} or null, code_hash, storage}. Default: the `.pre_state.json` file next to a
    /// `.block.json` fixture.
    #[arg(long)]
    pre_state: Option<PathBuf>,
    /// Database directory (absent or empty; it is kept). Default: a temporary directory,
    /// removed at exit (under $TMPDIR).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Group depth of the new database (1..=8).
    #[arg(long, short = 'g', default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: u8,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Do not prefetch: every key is read from the store when execution first asks for it.
    #[arg(long)]
    no_prefetch: bool,
    /// Prefetch only what the transactions name (senders, recipients, EIP-2930 lists, coinbase,
    /// withdrawals, system contracts), not the fixture's record of the keys the block touches.
    #[arg(long)]
    no_block_access_list: bool,
    /// No per-block cache: every access goes to the store (read amplification above 1).
    #[arg(long)]
    no_cache: bool,
    /// Evict the database from the OS page cache before executing (close, evict, reopen).
    #[arg(long)]
    cold: bool,
    /// How stems are found in the store.
    #[arg(long, value_enum, default_value = "flat")]
    read_path: ReadPathArg,
    /// Prefetch threads (each with its own read transaction).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
    /// Skip fsync on commit.
    #[arg(long)]
    relaxed: bool,
}

/// Blob parameters of mainnet at `timestamp` (alloy has no helper for the schedule).
fn blob_params(spec: &EthSpec, timestamp: u64) -> Option<BlobParams> {
    if spec.is_bpo2_active_at_timestamp(timestamp) {
        Some(BlobParams::bpo2())
    } else if spec.is_bpo1_active_at_timestamp(timestamp) {
        Some(BlobParams::bpo1())
    } else if spec.is_osaka_active_at_timestamp(timestamp) {
        Some(BlobParams::osaka())
    } else if spec.is_prague_active_at_timestamp(timestamp) {
        Some(BlobParams::prague())
    } else if spec.is_cancun_active_at_timestamp(timestamp) {
        Some(BlobParams::cancun())
    } else {
        None
    }
}

/// What importing the pre-state did.
struct Import {
    accounts: usize,
    /// Accounts imported with their code hash but without code (the fixture lacks it).
    without_code: usize,
    root: B256,
    time: Duration,
}

/// Imports the pre-state as block `block`: whole accounts with
/// [`BinTrieState::import_accounts`], then the accounts whose code the fixture lacks as header
/// leaves with their real code hash (code size 0: unknown) and no code.
fn import_pre_state(state: &mut BinTrieState, fx: &Fixture, block: u64) -> Result<Import> {
    let t = Instant::now();
    let full: Vec<(&Address, &AccountState)> = fx
        .pre
        .iter()
        .filter(|(_, p)| p.code_hash_only.is_none())
        .map(|(a, p)| (a, &p.state))
        .collect();
    state
        .import_accounts(full, block)
        .context("importing the pre-state")?;
    let mut changes = BlockChanges::default();
    for (a, p) in &fx.pre {
        let Some(hash) = p.code_hash_only else {
            continue;
        };
        let basic = BasicData {
            version: 0,
            code_size: 0,
            nonce: p.state.nonce,
            balance: p.state.balance,
        }
        .encode()
        .with_context(|| format!("pre-state account {a}"))?;
        changes.writes.push((basic_data_key(a), basic));
        changes.writes.push((code_hash_key(a), hash.0));
        for (k, v) in &p.state.storage {
            changes
                .writes
                .push((storage_slot_key(a, k), v.to_be_bytes::<32>()));
        }
        changes.accounts_written += 1;
        changes.slots_written += p.state.storage.len();
    }
    let without_code = changes.accounts_written;
    if without_code > 0 {
        state
            .commit_block(changes, block)
            .context("importing the accounts without code")?;
    }
    Ok(Import {
        accounts: fx.pre.len(),
        without_code,
        root: state.root(),
        time: t.elapsed(),
    })
}

/// The keys to read before executing: senders, recipients, EIP-2930 lists, coinbase, withdrawal
/// recipients, the system contracts and (with `block_access_list`) the fixture's record of the
/// keys the block touches.
fn prefetch_list(fx: &Fixture, block_access_list: bool) -> PrefetchList {
    // The coinbase, and the caller of the system calls (EIP-4788 and later).
    let mut accounts = vec![
        fx.block.header.inner.beneficiary,
        alloy_eips::eip4788::SYSTEM_ADDRESS,
    ];
    let mut slots: Vec<(Address, B256)> = Vec::new();
    for tx in fx.block.transactions.txns() {
        accounts.push(tx.inner.signer());
        accounts.extend(tx.inner.to());
        if let Some(list) = tx.inner.access_list() {
            for item in list.iter() {
                accounts.push(item.address);
                slots.extend(item.storage_keys.iter().map(|k| (item.address, *k)));
            }
        }
    }
    if let Some(w) = &fx.block.withdrawals {
        accounts.extend(w.iter().map(|w| w.address));
    }
    if block_access_list {
        for (a, keys) in &fx.access_list {
            accounts.push(*a);
            slots.extend(keys.iter().map(|k| (*a, *k)));
        }
    }
    let mut list = PrefetchList::new();
    list.system_contracts();
    for a in accounts {
        list.account(a);
    }
    for (a, k) in slots {
        list.slot(a, U256::from_be_bytes(k.0));
    }
    list
}

/// One check against the header or the fixture.
struct Check {
    name: &'static str,
    ok: bool,
}

/// Everything measured and checked for one block.
struct Outcome {
    spec: SpecId,
    transactions: usize,
    gas_used: u64,
    checks: Vec<Check>,
    errors: Vec<String>,
    post_accounts: usize,
    post_slots: usize,
    stats: ReadStats,
    writes: WriteCounts,
    timings: StageTimings,
    root: B256,
}

impl Outcome {
    fn valid(&self) -> bool {
        self.errors.is_empty() && self.checks.iter().all(|c| c.ok)
    }

    /// The block's time: state read, execution, trie update and commit (the trie prefetch
    /// overlaps them).
    fn total(&self) -> Duration {
        let t = &self.timings;
        t.state_read + t.execution + t.trie_update + t.commit
    }

    fn mgas_per_s(&self) -> f64 {
        let secs = self.total().as_secs_f64();
        if secs > 0.0 {
            self.gas_used as f64 / 1e6 / secs
        } else {
            0.0
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Executes the fixture's block over `state`, commits it, and checks it.
fn run_block(state: &mut BinTrieState, fx: &Fixture, args: &ExecArgs) -> Result<Outcome> {
    let number = fx.number();
    let header = &fx.block.header.inner;
    let read_path: ReadPath = args.read_path.into();
    let options = PipelineOptions::default()
        .with_db(BlockDbOptions {
            cache: !args.no_cache,
            read_path,
        })
        .with_workers(args.workers as usize);
    // Prefetch: the state the block reads, and the tree paths of the stems it may write (the
    // same list: a block access list names the keys a block touches, without telling reads
    // from writes; an extra path costs a read, a missing one is loaded on demand).
    let (prefetch, write_stems) = if args.no_prefetch {
        (None, Vec::new())
    } else {
        let list = prefetch_list(fx, !args.no_block_access_list);
        let stems = list.stems().into_iter().map(|(s, _)| s).collect();
        (Some(list), stems)
    };
    let plan = BlockPlan {
        number,
        prefetch,
        write_stems,
        block_hashes: fx.block_hashes.iter().map(|(n, h)| (*n, *h)).collect(),
    };

    let factory = EthBlockExecutorFactory::new(
        AlloyReceiptBuilder::default(),
        EthSpec::mainnet(),
        EthEvmFactory::default(),
    );
    let env = EvmEnv::for_eth_block(
        header,
        factory.spec(),
        fx.chain_id,
        blob_params(factory.spec(), header.timestamp),
    );
    let spec = env.cfg_env.spec;
    let run = state
        .run_block(&plan, &options, |db| {
            let evm = factory.evm_factory().create_evm(db, env);
            let ctx = EthBlockExecutionCtx {
                parent_hash: header.parent_hash,
                parent_beacon_block_root: header.parent_beacon_block_root,
                ommers: &[],
                withdrawals: fx
                    .block
                    .withdrawals
                    .as_ref()
                    .map(|w| Cow::Borrowed(w.0.as_slice())),
                extra_data: header.extra_data.clone(),
                tx_count_hint: Some(fx.block.transactions.len()),
                slot_number: header.slot_number,
            };
            let executor = factory.create_executor(evm, ctx);
            executor.execute_block(fx.block.transactions.txns().map(|tx| &tx.inner))
        })
        .with_context(|| {
            let mut msg = format!("executing and committing block {number}");
            if !fx.problems.is_empty() {
                msg.push_str(&format!(
                    " (the fixture is inconsistent: {})",
                    fx.problems.join("; ")
                ));
            }
            msg
        })?;
    let result = &run.output;

    // Against the header.
    let mut checks = Vec::new();
    let mut errors = Vec::new();
    let mut check = |name: &'static str, ok: bool, detail: String| {
        if !ok {
            errors.push(detail);
        }
        checks.push(Check { name, ok });
    };
    check(
        "gas_used",
        result.gas_used == header.gas_used,
        format!(
            "gas used: header {}, execution {}",
            header.gas_used, result.gas_used
        ),
    );
    let receipts_root = alloy_consensus::proofs::calculate_receipt_root(&result.receipts);
    check(
        "receipts_root",
        receipts_root == header.receipts_root,
        format!(
            "receipts root: header {}, execution {receipts_root}",
            header.receipts_root
        ),
    );
    let mut bloom = Bloom::ZERO;
    for r in &result.receipts {
        bloom.accrue_bloom(r.logs_bloom());
    }
    check(
        "logs_bloom",
        bloom == header.logs_bloom,
        format!(
            "logs bloom: header {}, execution {bloom}",
            header.logs_bloom
        ),
    );
    match header.requests_hash {
        Some(h) => {
            let got = result.requests.requests_hash();
            check(
                "requests_hash",
                got == h,
                format!("requests hash: header {h}, execution {got}"),
            );
        }
        None if spec >= SpecId::PRAGUE => check(
            "requests_hash",
            false,
            "requests hash: missing `requestsHash` in the header of a Prague block".into(),
        ),
        None => {}
    }
    if let Some(b) = header.blob_gas_used {
        check(
            "blob_gas_used",
            b == result.blob_gas_used,
            format!(
                "blob gas used: header {b}, execution {}",
                result.blob_gas_used
            ),
        );
    }

    // Against the fixture's post values, read back from the committed state.
    let (mut post_accounts, mut post_slots) = (0, 0);
    if let Some(expected) = &fx.expected {
        let db = TrieDb::new(state.store(), read_path)?;
        let before = errors.len();
        for (a, e) in expected {
            post_accounts += 1;
            let got = db.basic_ref(*a)?;
            let got = got
                .filter(|i| !i.is_empty())
                .map(|i| (i.balance, i.nonce, i.code_hash));
            let want = e.info.filter(|(b, n, h)| {
                !(b.is_zero() && *n == 0 && *h == bintrie_keys::EMPTY_CODE_HASH)
            });
            if got != want {
                let show = |x: Option<(U256, u64, B256)>| match x {
                    None => "absent".to_string(),
                    Some((b, n, h)) => format!("balance {b} nonce {n} code hash {h}"),
                };
                errors.push(format!(
                    "account {a}: expected {}, state holds {}",
                    show(want),
                    show(got)
                ));
            }
            for (k, v) in &e.storage {
                post_slots += 1;
                let got = db.storage_ref(*a, *k)?;
                if got != *v {
                    errors.push(format!(
                        "account {a} slot {}: expected {}, state holds {}",
                        hex0x(k.to_be_bytes::<32>()),
                        hex0x(v.to_be_bytes::<32>()),
                        hex0x(got.to_be_bytes::<32>())
                    ));
                }
            }
        }
        checks.push(Check {
            name: "post_state",
            ok: errors.len() == before,
        });
    }
    checks.push(Check {
        name: "fixture",
        ok: fx.problems.is_empty(),
    });
    errors.extend(fx.problems.iter().cloned());

    Ok(Outcome {
        spec,
        transactions: fx.block.transactions.len(),
        gas_used: result.gas_used,
        checks,
        errors,
        post_accounts,
        post_slots,
        stats: run.reads,
        writes: run.writes,
        timings: run.timings,
        root: run.commit.root,
    })
}

/// The context of an error writing the command's output.
const WRITING: &str = "writing output";

pub(crate) fn cmd_exec(args: ExecArgs) -> Result<()> {
    let t = Instant::now();
    let fx = fixture::load(&args.fixture, args.pre_state.as_deref())?;
    let load_time = t.elapsed();
    if fx.chain_id != 1 {
        bail!(
            "chain id {}: only mainnet (chain id 1) is supported",
            fx.chain_id
        );
    }
    let number = fx.number();
    let parent = number
        .checked_sub(1)
        .context("block 0 has no pre-state to execute from")?;

    let tmp;
    let dir: &Path = match &args.db {
        Some(d) => d,
        None => {
            tmp = tempfile::Builder::new()
                .prefix("bintrie-exec-")
                .tempdir()
                .context("creating a temporary database directory")?;
            tmp.path()
        }
    };
    let options = StoreOptions {
        group_depth: Some(args.group_depth),
        durability: if args.relaxed {
            Durability::Relaxed
        } else {
            Durability::Durable
        },
        ..Default::default()
    };
    let open =
        || BinTrieState::open(dir, &options).with_context(|| format!("opening {}", dir.display()));
    let mut state = open()?;
    if state.block() != 0 || state.root() != B256::ZERO {
        bail!(
            "{} already holds block {} (root {}): exec imports the pre-state into an empty database",
            dir.display(),
            state.block(),
            state.root()
        );
    }
    let import = import_pre_state(&mut state, &fx, parent)?;
    if args.cold {
        drop(state);
        bintrie_store::evict_page_cache(dir)
            .with_context(|| format!("evicting {} from the page cache", dir.display()))?;
        state = open()?;
    }
    let out = run_block(&mut state, &fx, &args)?;
    drop(state);

    let valid = out.valid();
    let stats = &out.stats;
    // A closed stdout (`| head -0`) or a full one (`> /dev/full`) is an error, not a panic.
    let mut w = std::io::stdout().lock();
    if args.json {
        let checks: serde_json::Map<String, serde_json::Value> = out
            .checks
            .iter()
            .map(|c| (c.name.to_string(), c.ok.into()))
            .collect();
        let j = json!({
            "fixture": args.fixture.display().to_string(),
            "format": fx.format,
            "block": number,
            "hash": fx.block.header.hash.to_string(),
            "spec": format!("{:?}", out.spec),
            "transactions": out.transactions,
            "gas_used": out.gas_used,
            "valid": valid,
            "checks": checks,
            "post_accounts_checked": out.post_accounts,
            "post_slots_checked": out.post_slots,
            "errors": out.errors,
            "mgas_per_s": out.mgas_per_s(),
            "read_amplification": stats.read_amplification(),
            "keys_read": stats.unique_keys,
            "keys_written": out.writes.keys,
            "accounts_written": out.writes.accounts,
            "slots_written": out.writes.slots,
            "store_reads": stats.store_reads,
            "prefetch_reads": stats.prefetch_reads,
            "prefetch_stems": stats.prefetch_stems,
            "cache_hits": stats.cache_hits,
            "misses": stats.misses,
            "timings_ms": {
                "state_read": ms(out.timings.state_read),
                "execution": ms(out.timings.execution),
                "trie_update": ms(out.timings.trie_update),
                "commit": ms(out.timings.commit),
                "total": ms(out.total()),
                "prefetch": ms(stats.prefetch_time),
                "trie_prefetch": ms(out.timings.trie_prefetch),
                "load": ms(load_time),
                "import": ms(import.time),
            },
            "root": out.root.to_string(),
            "pre_state": {
                "block": parent,
                "accounts": import.accounts,
                "accounts_without_code": import.without_code,
                "root": import.root.to_string(),
            },
            "mode": {
                "prefetch": !args.no_prefetch,
                "block_access_list": !args.no_prefetch && !args.no_block_access_list,
                "cache": !args.no_cache,
                "cold": args.cold,
                "read_path": match args.read_path { ReadPathArg::Trie => "trie", ReadPathArg::Flat => "flat" },
                "group_depth": args.group_depth,
                "workers": args.workers,
            },
        });
        writeln!(w, "{j}").context(WRITING)?;
    } else {
        let spec = format!("{:?}", out.spec);
        writeln!(
            w,
            "block {number} ({}, {spec}): {} transactions, {} gas, {}",
            fx.format,
            out.transactions,
            out.gas_used,
            if valid { "valid" } else { "INVALID" }
        )
        .context(WRITING)?;
        let checks: Vec<String> = out
            .checks
            .iter()
            .map(|c| format!("{} {}", c.name, if c.ok { "ok" } else { "FAILED" }))
            .collect();
        writeln!(w, "  checks      {}", checks.join(", ")).context(WRITING)?;
        if fx.expected.is_some() {
            writeln!(
                w,
                "  post-state  {} accounts and {} slots compared",
                out.post_accounts, out.post_slots
            )
            .context(WRITING)?;
        } else {
            writeln!(w, "  post-state  none in the fixture").context(WRITING)?;
        }
        writeln!(w, "  speed       {:.1} Mgas/s", out.mgas_per_s()).context(WRITING)?;
        writeln!(
            w,
            "  time        state read {:.3} ms, execution {:.3} ms, trie update {:.3} ms, commit {:.3} ms (total {:.3} ms)",
            ms(out.timings.state_read),
            ms(out.timings.execution),
            ms(out.timings.trie_update),
            ms(out.timings.commit),
            ms(out.total())
        )
        .context(WRITING)?;
        writeln!(
            w,
            "  keys        {} read, {} written ({} accounts, {} slots)",
            stats.unique_keys, out.writes.keys, out.writes.accounts, out.writes.slots
        )
        .context(WRITING)?;
        writeln!(
            w,
            "  store reads {} ({} by prefetch), cache hits {}, misses {}, read amplification {:.2}",
            stats.store_reads,
            stats.prefetch_reads,
            stats.cache_hits,
            stats.misses,
            stats.read_amplification()
        )
        .context(WRITING)?;
        writeln!(
            w,
            "  pre-state   {} accounts at block {parent} ({} without code), root {}, imported in {:.1} ms",
            import.accounts,
            import.without_code,
            import.root,
            ms(import.time)
        )
        .context(WRITING)?;
        writeln!(w, "  root        {}", out.root).context(WRITING)?;
        for e in &out.errors {
            writeln!(w, "  MISMATCH    {e}").context(WRITING)?;
        }
    }
    w.flush().context(WRITING)?;
    drop(w);
    if !valid {
        let failed: Vec<&str> = out
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect();
        bail!(
            "block {number} does not validate: {} failed; {} difference(s){}",
            failed.join(", "),
            out.errors.len(),
            out.errors
                .first()
                .map(|e| format!(", first: {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
