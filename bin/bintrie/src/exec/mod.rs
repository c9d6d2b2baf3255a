//! `bintrie exec`: import a block's pre-state into a binary-trie database, execute the block with
//! revm through alloy-evm's Ethereum block executor over the revm adapter (with prefetch), commit,
//! and validate the result against the header and the fixture's post values.

mod base;
mod witness;

use anyhow::{Context, Result, bail};
use bintrie_bench::model::Layout;
use bintrie_exec::{
    ExecOptions, Prefetch, execute_block, fixture, import_pre_state_over, validate, validate_over,
};
use bintrie_revm::{
    BinTrieState, BlockDbOptions, BlockState, LogBackend, LogState, PipelineOptions,
};
use bintrie_store::{ReadPath, StoreOptions};
use serde_json::json;
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
    /// Database directory (absent or empty; it is kept, unless the run made it and fails
    /// before the pre-state is committed; one `exec` at a time on it). Default: a temporary
    /// directory, removed at exit (under $TMPDIR).
    #[arg(long)]
    db: Option<PathBuf>,
    /// How the database lays out the state: `mdbx` (path-keyed blobs and a flat stem table in
    /// MDBX) or `log` (every block appended to a log of blobs, found through an in-memory
    /// index: one sequential write per block; see README, "The log layout"). With `log`,
    /// --read-path is ignored (the index finds a stem's blob directly) and a --base-stems base
    /// is built in MDBX (or taken from --base-db) and copied into the log.
    #[arg(long, value_enum, default_value = "mdbx")]
    layout: bintrie_bench::model::Layout,
    /// Group depth of the new database (1..=8).
    #[arg(long, short = 'g', default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: u8,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Do not prefetch: every key is read from the store when execution first asks for it.
    #[arg(long)]
    no_prefetch: bool,
    /// Prefetch only what the transactions name (senders, recipients, EIP-2930 lists, coinbase,
    /// withdrawals, system contracts), not the fixture's record of the keys the block touches.
    #[arg(long)]
    no_block_access_list: bool,
    /// Read the whole prefetch before executing (the study's protocol) instead of streaming
    /// it into execution. Streamed (the default, with --layout log), execution starts at
    /// once and waits only for a listed key whose read is still in flight; `state_read` is
    /// then that wait plus the misses, and `prefetch` the prefetch's own time beside
    /// execution. The MDBX layout always reads the prefetch first.
    #[arg(long)]
    no_stream: bool,
    /// No per-block cache: every access goes to the store (read amplification above 1).
    #[arg(long)]
    no_cache: bool,
    /// Evict the database from the OS page cache before executing (close, evict, reopen).
    #[arg(long)]
    cold: bool,
    /// How stems are found in the store.
    #[arg(long, value_enum, default_value = "flat")]
    read_path: ReadPath,
    /// Prefetch threads (each with its own read transaction; the reads block, so one request
    /// in flight per thread).
    #[arg(long, default_value_t = bintrie_revm::DEFAULT_PREFETCH_WORKERS as u64, value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
    /// Write the block's witness to this file: the pre-state root, the tree nodes of every key
    /// the block reads or writes and the code it runs, enough for a verifier without the state
    /// to execute the block and compute the post-state root (`--stateless`). Both encodings
    /// are built and measured; --json reports their sizes. File format: README, "Block
    /// witnesses". Written whole (a new file renamed into place) and only for a block that
    /// validates; refused before the block runs when FILE exists and is not a witness, or
    /// lies in a directory holding a database.
    #[arg(long, value_name = "FILE")]
    witness_out: Option<PathBuf>,
    /// The encoding written by --witness-out: `multiproof` (the tree pruned to the block's
    /// keys, sibling hashes only) or `blobs` (the stored group and stem blobs, geth's choice;
    /// depends on the group depth).
    #[arg(
        long,
        value_enum,
        default_value = "multiproof",
        requires = "witness_out"
    )]
    witness_encoding: witness::EncodingArg,
    /// Execute the block statelessly from this witness (written by --witness-out): no database,
    /// the fixture's pre-state is not read (it may be absent). Every value is proven against
    /// the witness's pre-state root before execution uses it; the writes are applied to the
    /// partial tree and the post-state root computed. A witness that lacks something the block
    /// needs fails with "witness incomplete at path ...". No prefetch (nothing to read ahead).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["db", "pre_state", "cold", "base_stems", "base_db", "witness_out"])]
    stateless: Option<PathBuf>,
    /// With --stateless: the pre-state root you trust (the parent block's state root). The
    /// witness must be against it; without this option the witness's own pre-state root is
    /// taken, so a valid run shows the block executes on *a* state with that root (printed as
    /// `pre-root`), which the caller must compare with the one it trusts.
    #[arg(long, value_name = "0x…", requires = "stateless", value_parser = crate::parse_root_arg)]
    pre_root: Option<[u8; 32]>,
    #[command(flatten)]
    write: crate::durability::WriteArgs,
    #[command(flatten)]
    base: base::BaseArgs,
}

/// Imports the fixture's pre-state into `state`, on top of `base` when there is one.
fn import_over<S: BlockState>(
    state: &mut S,
    fx: &fixture::Fixture,
    base: Option<&base::Base>,
    dir: &Path,
) -> Result<bintrie_exec::PreStateImport> {
    let at = base.map_or((0, alloy_primitives::B256::ZERO), |b| (b.block, b.root));
    import_pre_state_over(state, fx, at)
        .with_context(|| format!("importing into {}", dir.display()))
}

/// Refuses an `--db` that is not absent or empty: every run imports its pre-state into a new
/// database, so one holding a state (an earlier run's, or a failed run's that imported the
/// pre-state) is refused before the fixture is read, saying so, and a directory of other files
/// is never written into.
fn check_new_db(db: &Path) -> Result<()> {
    if let Some(layout) = crate::durability::held_layout(db)? {
        anyhow::bail!(
            "{} already holds a database ({}): `exec --db` imports the pre-state into a new one \
             each run, so this one is from an earlier run, or from a failed one that could not \
             remove it (`bintrie info --db {0}` shows its block); remove it or give another \
             directory",
            db.display(),
            match layout {
                Layout::Mdbx => "MDBX",
                Layout::Log => "log layout",
            }
        );
    }
    if std::fs::read_dir(db).is_ok_and(|mut entries| entries.next().is_some()) {
        anyhow::bail!(
            "{} is not empty, and holds no database: `exec --db` takes an absent or empty \
             directory",
            db.display()
        );
    }
    Ok(())
}

/// An error of running the fixture's block: which block, on which pre-state, and whether
/// `db` (`--db`) keeps that pre-state; with a hint first when the pre-state holds no account
/// (the failure itself, "nonce 890 too high, expected 0", does not say why).
fn block_error(e: anyhow::Error, fx: &fixture::Fixture, db: Option<&Path>) -> anyhow::Error {
    let e = match db {
        Some(db) => e.context(format!(
            "block {}: running and committing it ({} keeps its pre-state, block {})",
            fx.number(),
            db.display(),
            // The block the pre-state was imported as.
            fx.parent()
                .map_or_else(|_| "?".to_string(), |p| p.to_string())
        )),
        None => e.context(format!("block {}: running and committing it", fx.number())),
    };
    if fx.pre.is_empty() {
        e.context("the pre-state holds no accounts (is it the block's? --pre-state names it)")
    } else {
        e
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub(crate) fn cmd_exec(args: ExecArgs) -> Result<()> {
    if let Some(w) = &args.stateless {
        return witness::cmd_stateless(&args, w);
    }
    if let (Some(db), Some(base)) = (&args.db, &args.base.base_db) {
        anyhow::ensure!(
            !base::same_directory(db, base),
            "--base-db and --db must be different directories"
        );
    }
    // `requires` is met by `--base-stems 0` too, which asks for no base: the directory would be
    // ignored without a word.
    anyhow::ensure!(
        args.base.base_db.is_none() || args.base.base_stems > 0,
        "--base-db keeps a base of --base-stems stems, and --base-stems 0 asks for none: give \
         --base-stems N (N > 0), or leave out --base-db"
    );
    // Before anything is read or made (`--db` is new or empty: no layout to check against).
    args.write.check_for(args.layout, 0)?;
    if let Some(out) = &args.witness_out {
        witness::check_out_path(out, args.db.as_deref())?;
    }
    // Read before anything is made and before a signal only asks for a stop: a fixture that
    // never comes (a FIFO no one writes, a stalled pipe) is ended by one Ctrl-C or SIGTERM,
    // as any reader would be, and leaves nothing behind.
    let t = Instant::now();
    let fx = fixture::load(&args.fixture, args.pre_state.as_deref())?;
    let load_time = t.elapsed();
    // From here a signal asks for a stop at the next step, before `--db` is made: a stopped run
    // removes what it made.
    crate::signals::stop_at_next_step(
        b"stopping before the next step (Ctrl-C again to quit at once)\n",
    );
    let new_db = match &args.db {
        Some(db) => {
            check_new_db(db)?;
            // `create_dir` succeeds for exactly one process: only the run that made the
            // directory may remove it again. One given empty is left alone.
            std::fs::create_dir(db).is_ok().then_some(db)
        }
        None => None,
    };
    // With the log layout the database is made only once the base is built (seconds to
    // minutes), so a second run on the same --db found it empty meanwhile and went on, and one
    // of the two failed later. One `exec` at a time there. (MDBX's own open takes this lock on
    // the directory, and refuses a second run by itself; it also refuses to make a database
    // beside a log, and a base copied in takes the lock for its copy.) The directory is
    // checked again under the lock: an MDBX writer may have made a database meanwhile.
    let locked = match (&args.db, args.layout) {
        (Some(db), Layout::Log) => Some(
            bintrie_bench::runner::lock_dir(db, "exec", "--db")
                .and_then(|lock| check_new_db(db).map(|()| lock)),
        ),
        _ => None,
    };
    // Refused under the lock: another writer has the directory (or made a database in it
    // meanwhile), which is then its directory, never removed here.
    if let Some(Err(e)) = locked {
        return Err(e);
    }
    let result = exec_checked(&args, fx, load_time);
    // A run that failed before committing a block removes the directory it made. One that
    // imported the pre-state keeps it (a block that failed can be looked at), unless a signal
    // stopped it before the block ran: that directory holds nothing anyone asked for, and
    // would only make the rerun be refused.
    if let (Err(e), Some(db)) = (&result, new_db) {
        if e.downcast_ref::<Stopped>().is_some() {
            let said = if crate::db::remove_stopped_new_db(db, args.layout) {
                format!(
                    "removed {}, the database this stopped run made",
                    db.display()
                )
            } else {
                format!(
                    "kept {}: it holds other files than the database's, or another writer has \
                     it open",
                    db.display()
                )
            };
            let _ = writeln!(std::io::stderr(), "{said}");
        } else {
            crate::db::remove_failed_new_db(db, args.layout, e);
        }
    }
    result
}

/// A signal's stop ([`crate::signals::stop_at_next_step`]), found between two of `exec`'s
/// steps before the block ran.
#[derive(Debug)]
struct Stopped(u64);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped by a signal before block {} ran: nothing of it was committed",
            self.0
        )
    }
}

impl std::error::Error for Stopped {}

/// [`Stopped`] once a signal asked for a stop.
fn stop_point(number: u64) -> Result<()> {
    if crate::signals::stop_requested() {
        return Err(Stopped(number).into());
    }
    Ok(())
}

/// [`cmd_exec`] once the fixture `fx` was read (in `load_time`) and `--db` was checked.
fn exec_checked(args: &ExecArgs, fx: fixture::Fixture, load_time: Duration) -> Result<()> {
    let number = fx.number();
    let parent = fx.parent()?;
    stop_point(number)?;

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
    let options = args.write.apply(
        StoreOptions {
            group_depth: Some(args.group_depth),
            ..Default::default()
        },
        0,
    );
    let read_path = args.read_path;
    let exec_options = ExecOptions::default()
        .with_pipeline(
            PipelineOptions::default()
                .with_db(
                    BlockDbOptions::default()
                        .with_cache(!args.no_cache)
                        .with_read_path(read_path),
                )
                .with_workers(args.workers as usize)
                .with_witness(args.witness_out.is_some())
                .with_stream(!args.no_stream),
        )
        .with_prefetch(match (args.no_prefetch, args.no_block_access_list) {
            (true, _) => Prefetch::None,
            (false, true) => Prefetch::Transactions,
            (false, false) => Prefetch::BlockAccessList,
        });
    let (base, import, executed, v, durable_block) = match args.layout {
        Layout::Mdbx => {
            let base = base::prepare(&args.base, dir, &options, args.group_depth)?;
            let mut state = BinTrieState::open(dir, &options)
                .with_context(|| format!("opening {}", dir.display()))?;
            stop_point(number)?;
            let import = import_over(&mut state, &fx, base.as_ref(), dir)?;
            if args.cold {
                state = state
                    .reopen(|dir| bintrie_store::evict_page_cache(dir).map(drop))
                    .with_context(|| format!("evicting {} from the page cache", dir.display()))?;
            }
            stop_point(number)?;
            let executed = execute_block(&mut state, &fx, &exec_options)
                .map_err(|e| block_error(e.into(), &fx, args.db.as_deref()))?;
            let v = validate(&state, &fx, &executed, read_path)?;
            // Sync what the write buffer holds: the database is whole on disk when this
            // returns.
            state
                .flush()
                .with_context(|| format!("syncing {}", dir.display()))?;
            let durable_block = state.store().durable_block();
            (base, import, executed, v, durable_block)
        }
        Layout::Log => {
            let log_options = bintrie_logstore::LogOptions {
                group_depth: Some(args.group_depth),
                ..args.write.log_options()
            };
            let (base, log) = if args.base.base_stems > 0 {
                // The base is an MDBX database (built beside, or --base-db), copied in.
                let staging = tempfile::Builder::new()
                    .prefix("bintrie-base-")
                    .tempdir_in(
                        dir.parent()
                            .filter(|p| !p.as_os_str().is_empty())
                            .unwrap_or(Path::new(".")),
                    )
                    .context("creating a directory for the base")?;
                let located =
                    base::locate(&args.base, dir, staging.path(), &options, args.group_depth)?
                        .expect("a base was asked for");
                // `located` holds a --base-db until the copy is made and checked.
                let log = base::copy_into_log(
                    &located.base,
                    &located.source,
                    args.base.base_db.is_some(),
                    dir,
                    &log_options,
                )?;
                (Some(located.base), log)
            } else {
                (None, crate::db::open_log(dir, Some(&log_options))?)
            };
            let mut state =
                LogState::from_store(log).with_context(|| format!("opening {}", dir.display()))?;
            stop_point(number)?;
            let import = import_over(&mut state, &fx, base.as_ref(), dir)?;
            if args.cold {
                state.store().sync()?;
                bintrie_logstore::evict_page_cache(dir)
                    .with_context(|| format!("evicting {} from the page cache", dir.display()))?;
                state = state.drop_trie()?;
            }
            stop_point(number)?;
            let executed = execute_block(&mut state, &fx, &exec_options)
                .map_err(|e| block_error(e.into(), &fx, args.db.as_deref()))?;
            let v = validate_over(&LogBackend::new(state.store()), &fx, &executed)?;
            state
                .store()
                .sync()
                .with_context(|| format!("syncing {}", dir.display()))?;
            let durable_block = state.store().durable_block();
            (base, import, executed, v, durable_block)
        }
    };
    let encoding = args.witness_encoding.into();
    // A block that does not validate leaves --witness-out as it was (the run fails).
    let witness_json = match (&args.witness_out, &executed.run.witness) {
        (Some(path), Some(w)) if v.valid() => {
            Some(witness::write(w, encoding, path).with_context(|| {
                // The block is in the database by now: a rerun would be refused ("not an empty
                // database"), so the error says where it is.
                match &args.db {
                    Some(db) => format!(
                        "block {number} is committed to {}{}, but its witness could not be written",
                        db.display(),
                        durable_block
                            .map_or_else(String::new, |b| format!(" (durable through block {b})"))
                    ),
                    None => format!("block {number} ran, but its witness could not be written"),
                }
            })?)
        }
        _ => None,
    };

    let run = &executed.run;
    let (stats, t, w) = (&run.reads, &run.timings, &run.writes);
    // The block's time: the trie prefetch overlaps the stages.
    let total = t.state_read + t.execution + t.trie_update + t.commit;
    let gas_used = run.output.gas_used;
    let mgas_per_s = if total.is_zero() {
        0.0
    } else {
        gas_used as f64 / 1e6 / total.as_secs_f64()
    };
    let transactions = fx.block.transactions.len();
    let valid = v.valid();
    // A closed stdout (`| head -0`) or a full one (`> /dev/full`) is an error, not a panic.
    let mut out = std::io::stdout().lock();
    if args.json {
        let checks = witness::checks_json(&v);
        let j = json!({
            "fixture": args.fixture.display().to_string(),
            "format": fx.format,
            "block": number,
            "hash": fx.block.header.hash.to_string(),
            "spec": format!("{:?}", executed.spec),
            "transactions": transactions,
            "gas_used": gas_used,
            "valid": valid,
            "checks": checks,
            "post_accounts_checked": v.post_accounts,
            "post_slots_checked": v.post_slots,
            "errors": v.findings,
            "mgas_per_s": mgas_per_s,
            "read_amplification": stats.read_amplification(),
            "keys_read": stats.unique_keys,
            "keys_written": w.keys,
            "accounts_written": w.accounts,
            "slots_written": w.slots,
            "store_reads": stats.store_reads,
            "prefetch_reads": stats.prefetch_reads,
            "prefetch_stems": stats.prefetch_stems,
            "cache_hits": stats.cache_hits,
            "misses": stats.misses,
            "timings_ms": {
                "state_read": ms(t.state_read),
                "execution": ms(t.execution),
                "trie_update": ms(t.trie_update),
                "commit": ms(t.commit),
                "total": ms(total),
                "prefetch": ms(t.prefetch),
                "prefetch_wait": ms(stats.prefetch_wait),
                "trie_prefetch": ms(t.trie_prefetch),
                "load": ms(load_time),
                "import": ms(import.time),
            },
            "root": run.commit.root.to_string(),
            "durable_block": durable_block,
            "witness": witness_json,
            "witness_bytes": witness_json.as_ref().map(|w| w[encoding.name()]["total"].clone()),
            "base_stems": base.as_ref().map_or(0, |b| b.stems),
            "base": base.as_ref().map(|b| json!({
                "stems": b.stems,
                "seed": b.seed,
                "root": b.root.to_string(),
                "build_s": b.build_s,
                "reused_from": b.reused_from.as_ref().map(|p| p.display().to_string()),
            })),
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
                "streamed": stats.streamed,
                "cold": args.cold,
                "read_path": args.read_path.name(),
                "layout": args.layout.name(),
                "group_depth": args.group_depth,
                "workers": args.workers,
            },
        });
        writeln!(out, "{j}").context(crate::WRITING)?;
        crate::json_written();
    } else {
        writeln!(
            out,
            "block {number} ({}, {:?}): {transactions} transactions, {gas_used} gas, {}",
            fx.format,
            executed.spec,
            if valid { "valid" } else { "INVALID" }
        )
        .context(crate::WRITING)?;
        writeln!(out, "  checks      {}", witness::checks_text(&v)).context(crate::WRITING)?;
        if fx.expected.is_some() {
            writeln!(
                out,
                "  post-state  {} accounts and {} slots compared",
                v.post_accounts, v.post_slots
            )
            .context(crate::WRITING)?;
        } else {
            writeln!(out, "  post-state  none in the fixture").context(crate::WRITING)?;
        }
        if let Some(b) = &base {
            writeln!(
                out,
                "  base        {} random stems (seed {}, root {}), {}",
                b.stems,
                b.seed,
                b.root,
                match &b.reused_from {
                    Some(p) => format!("copied from {}", p.display()),
                    None => format!("built in {:.1} s", b.build_s),
                }
            )
            .context(crate::WRITING)?;
        }
        writeln!(out, "  speed       {mgas_per_s:.1} Mgas/s").context(crate::WRITING)?;
        writeln!(
            out,
            "  durable     {}",
            durable_block.map_or_else(
                || "relaxed: not promised to survive a power loss".to_string(),
                |b| format!("through block {b}")
            )
        )
        .context(crate::WRITING)?;
        writeln!(
            out,
            "  time        state read {:.3} ms, execution {:.3} ms, trie update {:.3} ms, commit {:.3} ms (total {:.3} ms)",
            ms(t.state_read),
            ms(t.execution),
            ms(t.trie_update),
            ms(t.commit),
            ms(total)
        )
        .context(crate::WRITING)?;
        if stats.streamed {
            writeln!(
                out,
                "  prefetch    streamed into execution: {:.3} ms beside it, {:.3} ms waited for",
                ms(t.prefetch),
                ms(stats.prefetch_wait)
            )
            .context(crate::WRITING)?;
        }
        writeln!(
            out,
            "  keys        {} read, {} written ({} accounts, {} slots)",
            stats.unique_keys, w.keys, w.accounts, w.slots
        )
        .context(crate::WRITING)?;
        writeln!(
            out,
            "  store reads {} ({} by prefetch), cache hits {}, misses {}, read amplification {:.2}",
            stats.store_reads,
            stats.prefetch_reads,
            stats.cache_hits,
            stats.misses,
            stats.read_amplification()
        )
        .context(crate::WRITING)?;
        writeln!(
            out,
            "  pre-state   {} accounts at block {parent} ({} without code), root {}, imported in {:.1} ms",
            import.accounts,
            import.without_code,
            import.root,
            ms(import.time)
        )
        .context(crate::WRITING)?;
        writeln!(out, "  root        {}", run.commit.root).context(crate::WRITING)?;
        match (&args.witness_out, &run.witness, &witness_json) {
            (Some(path), Some(w), Some(_)) => writeln!(
                out,
                "  witness     {}",
                witness::describe(w, encoding, path)
            )
            .context(crate::WRITING)?,
            (Some(path), _, None) => writeln!(
                out,
                "  witness     not written to {}: the block does not validate",
                path.display()
            )
            .context(crate::WRITING)?,
            _ => {}
        }
        for e in &v.findings {
            writeln!(out, "  MISMATCH    {e}").context(crate::WRITING)?;
        }
    }
    out.flush().context(crate::WRITING)?;
    drop(out);
    fail_if_invalid(number, &v)
}

/// Exits with an error naming the failed checks when the block does not validate.
fn fail_if_invalid(number: u64, v: &bintrie_exec::Validation) -> Result<()> {
    if !v.valid() {
        let failed: Vec<&str> = v.failed().iter().map(|c| c.name()).collect();
        bail!(
            "block {number} does not validate: {} failed; {} difference(s){}",
            failed.join(", "),
            v.findings.len(),
            v.findings
                .first()
                .map(|e| format!(", first: {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
