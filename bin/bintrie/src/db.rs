//! Database commands: `import`, `info`, `get`, `verify`, `compact`.

use crate::durability::held_layout;
use crate::hex0x;
use anyhow::{Context, Result, bail};
use bintrie_bench::model::Layout;
use bintrie_exec::kv;
use bintrie_keys::TreeKey;
use bintrie_store::{ReadPath, StateStore, StoreOptions};
use bintrie_trie::Trie;
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// Segment bytes from which opening a log shows a spinner: about a second of scanning here.
const OPEN_SPINNER_BYTES: u64 = 256 << 20;

/// Opens the log in `dir`, writable with `options` or read-only with `None`, with a spinner on
/// stderr while the open scans its segments, when they hold at least [`OPEN_SPINNER_BYTES`]:
/// the scan rebuilds the index, 6.3-9.3 s at 16M stems on this project's machine (README).
/// The spinner draws only on a terminal.
pub(crate) fn open_log(
    dir: &std::path::Path,
    options: Option<&bintrie_logstore::LogOptions>,
) -> Result<bintrie_logstore::LogStore> {
    let bytes = bintrie_logstore::segment_bytes(dir).unwrap_or(0);
    let bar = if bytes >= OPEN_SPINNER_BYTES {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}, {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.set_message(format!(
            "opening {}: scanning {} of log segments to rebuild the index",
            dir.display(),
            indicatif::DecimalBytes(bytes)
        ));
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let store = match options {
        Some(options) => bintrie_logstore::LogStore::open(dir, options),
        None => bintrie_logstore::LogStore::open_read_only(dir),
    };
    bar.finish_and_clear();
    match store {
        // One that names the directory first already says where ("opening l3: l3: another
        // process …").
        Err(e) if e.to_string().starts_with(&dir.display().to_string()) => Err(e.into()),
        store => store.with_context(|| format!("opening {}", dir.display())),
    }
}

/// Read path names for `get`: the two store paths, or the verified walk.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum GetReadPath {
    /// From the root through the group blobs to the stem, trusting them (a log: re-hashing
    /// them, as `verified`).
    Trie,
    /// One lookup in the flat stem table, trusting it (a log: the stem's entry in its index,
    /// then its record).
    Flat,
    /// The trie walk with every blob on the way re-hashed against the root.
    Verified,
}

/// Parses `--batch` ([`crate::parse_at_least_one`]).
fn batch_size(s: &str) -> Result<u64, String> {
    crate::parse_at_least_one(s, "entries", "a block holds at least 1 entry")
}

/// The `KEY VALUE` lines `import` reads, from a file or stdin.
type Lines = kv::KvLines<Box<dyn BufRead + Send>>;

/// One block's writes, as `import` reads them.
type Batch = Vec<(TreeKey, [u8; 32])>;

#[derive(clap::Args, Debug)]
pub(crate) struct ImportArgs {
    /// Database directory (created when absent).
    #[arg(long)]
    db: PathBuf,
    /// Group depth (1..=8): for a new database, default 5; an existing one must match.
    #[arg(long, short = 'g', value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: Option<u8>,
    /// `KEY VALUE` lines as for `bintrie root`; `-` is stdin.
    #[arg(long, short = 'i', default_value = "-")]
    input: String,
    /// Entries per committed block (`KEY VALUE` lines; comments and blank lines do not count).
    #[arg(long, default_value_t = 100_000, value_parser = batch_size)]
    batch: u64,
    #[command(flatten)]
    write: crate::durability::WriteArgs,
    /// MDBX page size of a new database: a power of two from 4096 to 65536 (default: the OS
    /// page size). An existing database keeps the page size it was created with: another
    /// value is refused.
    #[arg(long, value_parser = parse_page_size)]
    page_size: Option<usize>,
    /// Build a new (or empty) database from the whole input as block 1, for inputs of any
    /// size: the lines are sorted in runs of --memory-budget (spilled to temporary files beside
    /// the database, then merged; a later line for the same key wins) and streamed into the
    /// database, so memory stays bounded. Checks free disk first for a file input. No write
    /// buffer: the build is one block.
    #[arg(long, conflicts_with_all = ["batch", "buffer_blocks", "buffer_mib"])]
    bulk: bool,
    /// Memory for --bulk's sort, in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=1 << 24), requires = "bulk")]
    memory_budget: u64,
    /// `mdbx` (default) or `log`: every block appended to a log of blobs with an in-memory
    /// index (one sequential write and, when durable, one fdatasync per block; README, "The
    /// log layout"). The write buffer, --page-size and --bulk are MDBX's (refused with `log`).
    #[arg(long, value_enum, default_value = "mdbx")]
    layout: bintrie_bench::model::Layout,
}

pub(crate) fn cmd_import(args: ImportArgs) -> Result<()> {
    if args.layout == Layout::Log {
        for (given, flag) in [
            (args.bulk, "--bulk"),
            (args.page_size.is_some(), "--page-size"),
        ] {
            anyhow::ensure!(
                !given,
                "{flag} applies to the MDBX layout only, not --layout log"
            );
        }
    }
    let (reader, source) = crate::open_input(&args.input)?;
    let mut lines = kv::kv_lines(reader, &source);
    let batch = usize::try_from(args.batch).unwrap_or(usize::MAX);
    // The first batch is parsed before the database is opened: bad input never creates one.
    let first = lines.next_batch(batch)?;
    // `create_dir` succeeds for exactly one process: only the one that made the directory may
    // remove it again.
    crate::durability::check_layout(&args.db, args.layout)?;
    args.write.check_for(args.layout, IMPORT_BUFFER_BLOCKS)?;
    let created_dir = std::fs::create_dir(&args.db).is_ok();
    if !args.bulk {
        crate::signals::stop_between_blocks();
    }
    if args.layout == bintrie_bench::model::Layout::Log {
        // The directory's lock for the whole import, the layout checked again under it: an
        // MDBX writer's open takes the same lock, and refuses to make a database beside a log,
        // so of two writers of different layouts starting on one new directory the second is
        // refused. A refusal here returns before any removal: the directory is the other
        // writer's.
        let _lock = bintrie_bench::runner::lock_dir(&args.db, "import", "--db")?;
        crate::durability::check_layout(&args.db, args.layout)?;
        let result = import_log(&args, first, lines, batch);
        if let Err(e) = &result
            && created_dir
        {
            remove_failed_new_db(&args.db, Layout::Log, e);
        }
        return result;
    }
    let store = StateStore::open(
        &args.db,
        &args.write.apply(
            StoreOptions {
                group_depth: args.group_depth,
                page_size: args.page_size,
                ..Default::default()
            },
            IMPORT_BUFFER_BLOCKS,
        ),
    )
    .with_context(|| format!("opening {}", args.db.display()));
    let result = store.and_then(|store| {
        if args.bulk {
            let budget = usize::try_from(args.memory_budget << 20).unwrap_or(usize::MAX);
            bulk_import(store, &args, first, &mut lines, budget)
        } else {
            import_into(store, first, lines, batch)
        }
    });
    if let Err(e) = &result
        && created_dir
    {
        remove_failed_new_db(&args.db, Layout::Mdbx, e);
    }
    result
}

/// Whether `error` says another writer holds the database (locked) or committed to it under
/// this one (a conflict, or a read that found it moved on), in either layout, directly or
/// inside a state's error.
fn another_writer(error: &anyhow::Error) -> bool {
    use bintrie_store::StoreError;
    let store = |e: &StoreError| {
        matches!(
            e,
            StoreError::Conflict { .. } | StoreError::Locked(_) | StoreError::Moved { .. }
        )
    };
    error.chain().any(|c| {
        matches!(
            c.downcast_ref::<bintrie_logstore::LogError>(),
            Some(
                bintrie_logstore::LogError::Locked(_) | bintrie_logstore::LogError::Conflict { .. }
            )
        ) || c.downcast_ref::<StoreError>().is_some_and(store)
            || matches!(
                c.downcast_ref::<bintrie_revm::StateError>(),
                Some(bintrie_revm::StateError::Store(e)) if store(e)
            )
    })
}

/// After a failed command that made a new database in `dir` (`import`, `exec --db`): removes
/// it when it holds no committed block, as [`bintrie_store::remove_if_empty`] (which says why
/// it keeps one a full disk keeps it from checking) and [`bintrie_logstore::remove_if_empty`] decide for
/// `layout`. Never when `error` says another writer holds it (its first block may be on the
/// way).
pub(crate) fn remove_failed_new_db(dir: &std::path::Path, layout: Layout, error: &anyhow::Error) {
    if another_writer(error) {
        return;
    }
    match layout {
        Layout::Log => {
            bintrie_logstore::remove_if_empty(dir);
        }
        Layout::Mdbx => {
            bintrie_store::remove_if_empty(dir);
        }
    }
}

/// After a command that made a new database in `dir` was stopped by a signal before its work
/// was done (`exec`): removes it whatever blocks it holds, as the layout's `remove_made`
/// decides ([`bintrie_store::remove_made`], [`bintrie_logstore::remove_made`]: its own files
/// only, never while another writer holds it). Returns whether it was removed.
pub(crate) fn remove_stopped_new_db(dir: &std::path::Path, layout: Layout) -> bool {
    match layout {
        Layout::Log => bintrie_logstore::remove_made(dir),
        Layout::Mdbx => bintrie_store::remove_made(dir),
    }
}

/// Blocks `import` commits between MDBX syncs unless --buffer-blocks says otherwise.
const IMPORT_BUFFER_BLOCKS: u64 = 8;

/// Disk one input line needs in a bulk import: its sort record (72 bytes) and its share of the
/// database (a random key is mostly a stem of its own: ~400 bytes with its group blobs).
const BULK_BYTES_PER_LINE: u64 = 480;

/// `import --bulk`: every line through the external sort, then the streaming build as block 1.
fn bulk_import(
    mut store: StateStore,
    args: &ImportArgs,
    first: Vec<(TreeKey, [u8; 32])>,
    lines: &mut Lines,
    budget: usize,
) -> Result<()> {
    if args.input != "-" {
        // A line is at least 129 bytes (two words and a space).
        let size = std::fs::metadata(&args.input).map_or(0, |m| m.len());
        let need = size / 129 * BULK_BYTES_PER_LINE;
        if let Some(free) = bintrie_store::free_bytes(&args.db)
            && free < need
        {
            bail!(
                "{} holds up to {} lines, which need about {} free in {} (sort runs and \
                 database); {} are free",
                args.input,
                size / 129,
                indicatif::DecimalBytes(need),
                args.db.display(),
                indicatif::DecimalBytes(free)
            );
        }
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {pos} ({per_sec}), {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(format!("sorting lines in {} MiB runs:", budget >> 20));
    let mut sorter = bintrie_store::ExternalSort::new(&args.db, budget);
    let mut batch = first;
    while !batch.is_empty() {
        for (k, v) in batch {
            sorter.push(k, v)?;
        }
        bar.set_position(sorter.len());
        batch = lines.next_batch(1 << 16)?;
    }
    let entries = sorter.len();
    if entries == 0 && store.meta().block == 0 {
        // As a plain import of no lines: no block (a block 1 holding nothing would make the
        // database no longer empty, and a later --bulk would be refused). A database that
        // holds blocks is refused below, as for any input.
        bar.finish_and_clear();
        tracing::warn!("no lines to import: nothing committed");
        return Ok(());
    }
    bar.set_message("stems placed:");
    bar.set_position(0);
    let root = store.build_sorted(
        bintrie_store::stems_of(sorter.finish()?),
        &[],
        1,
        64 << 20,
        &mut |n| bar.set_position(n),
    )?;
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "committed block 1 entries {entries} root {}",
        hex0x(root)
    )
    .and_then(|()| out.flush())
    .context(crate::WRITING)
}

fn import_into(
    store: StateStore,
    first: Vec<(TreeKey, [u8; 32])>,
    lines: Lines,
    batch_size: usize,
) -> Result<()> {
    let meta = store.meta();
    let mut trie: Trie<StateStore> = Trie::open(store, meta.group_depth, meta.root)?;
    let result = import_blocks(&mut trie, first, lines, batch_size);
    if result.is_err() && trie.store().buffered_blocks() > 0 {
        // The blocks committed before the error stay committed: sync them too (best effort;
        // the journal keeps them either way).
        if let Err(e) = trie.store_mut().flush() {
            tracing::warn!(error = %e, "syncing the blocks committed before the error");
        }
    }
    result
}

/// What `import` needs of a store, MDBX or log: where it stands, a block's commit, the
/// durable-block note it prints, and the final sync.
trait ImportTarget: bintrie_trie::NodeStore
where
    Self::Error: Into<anyhow::Error>,
{
    /// The last committed block and root.
    fn last(&self) -> (u64, [u8; 32]);
    /// Commits `set` as block `block`.
    fn commit(&mut self, set: &bintrie_trie::CommitSet, block: u64) -> Result<(), Self::Error>;
    /// `durable through block B`, or why none is promised.
    fn durable_note(&self) -> String;
    /// Syncs what the last blocks left unsynced; `true` when there was something to sync.
    fn sync_last(&mut self) -> Result<bool>;
}

impl ImportTarget for StateStore {
    fn last(&self) -> (u64, [u8; 32]) {
        (self.meta().block, self.meta().root)
    }
    fn commit(&mut self, set: &bintrie_trie::CommitSet, block: u64) -> Result<(), Self::Error> {
        self.write_block(set, block, &[])
    }
    fn durable_note(&self) -> String {
        crate::durability::durable_note(self)
    }
    fn sync_last(&mut self) -> Result<bool> {
        if self.buffered_blocks() == 0 {
            return Ok(false);
        }
        self.flush().context(
            "syncing the last blocks (they stay in the journal and replay on the next open)",
        )?;
        Ok(true)
    }
}

impl ImportTarget for bintrie_logstore::LogStore {
    fn last(&self) -> (u64, [u8; 32]) {
        (self.meta().block, self.meta().root)
    }
    fn commit(&mut self, set: &bintrie_trie::CommitSet, block: u64) -> Result<(), Self::Error> {
        self.write_block(set, block, &[])
    }
    fn durable_note(&self) -> String {
        match self.durable_block() {
            Some(b) => format!("durable through block {b}"),
            None => "no block is promised to survive a power loss".to_string(),
        }
    }
    fn sync_last(&mut self) -> Result<bool> {
        if self.durable_block() == Some(self.meta().block) {
            return Ok(false);
        }
        self.sync().context("syncing the log")?;
        Ok(true)
    }
}

/// The block loop of `import`: one block per batch, each printed with its root and the durable
/// block, then the final sync.
fn import_blocks<S: ImportTarget>(
    trie: &mut Trie<S>,
    first: Vec<(TreeKey, [u8; 32])>,
    lines: Lines,
    batch_size: usize,
) -> Result<()>
where
    S::Error: Into<anyhow::Error>,
    bintrie_trie::TrieError<S::Error>: Into<anyhow::Error>,
{
    let mut out = std::io::stdout().lock();
    // The input is read on a thread of its own, a batch ahead: the loop waits for it while
    // watching for a stop (Ctrl-C), so a stop is taken between blocks even while the input is
    // stalled (a pipe with nothing in it). A reader still blocked when the loop stops is left
    // to the process's end.
    let (tx, rx) = std::sync::mpsc::sync_channel(0);
    std::thread::Builder::new()
        .name("import input".into())
        .spawn(move || {
            let mut lines = lines;
            loop {
                let batch = lines.next_batch(batch_size);
                let end = batch.as_ref().map_or(true, Vec::is_empty);
                if tx.send(batch).is_err() || end {
                    break;
                }
            }
        })
        .context("starting the input's reader thread")?;
    let mut batch = first;
    let start = trie.store().last().0;
    while !batch.is_empty() {
        // A stop asked for while the store opened, or as a batch arrived (perhaps the last
        // of an input cut by the same Ctrl-C): nothing more is committed.
        if crate::signals::stop_requested() {
            return Err(stopped(trie, start));
        }
        let entries = batch.len();
        let (last_block, last_root) = trie.store().last();
        // Where the state stays, unless another writer moved it (its error says where to).
        let failed = |e: anyhow::Error, what: String| {
            if another_writer(&e) {
                e.context(format!("{what}; nothing of it was written"))
            } else {
                e.context(format!(
                    "{what}; the state stays at block {last_block} (root {})",
                    hex0x(last_root)
                ))
            }
        };
        trie.update(batch)
            .map_err(|e| failed(e.into(), "updating the tree".into()))?;
        let block = last_block + 1;
        let stats = trie
            .commit_with(|store, set| store.commit(set, block))
            .map_err(|e| failed(e.into(), format!("committing block {block}")))?;
        writeln!(
            out,
            "committed block {block} entries {entries} root {}; {}",
            hex0x(stats.root),
            trie.store().durable_note()
        )
        .and_then(|()| out.flush())
        // The block is in the state: a script that lost its line learns it here. (What is
        // durable is not said: the error's way out may sync more.)
        .with_context(|| {
            format!(
                "{} (block {block} is committed, root {}; the rest of the input was not \
                 imported)",
                crate::WRITING,
                hex0x(stats.root)
            )
        })?;
        batch = match next_batch_or_stop(&rx)? {
            Some(batch) => batch,
            None => return Err(stopped(trie, start)),
        };
    }
    if trie.store_mut().sync_last()? {
        writeln!(out, "{}", trie.store().durable_note())
            .and_then(|()| out.flush())
            .context(crate::WRITING)?;
    }
    Ok(())
}

/// The next batch from the input's reader thread, or `None` once a stop is asked for
/// ([`crate::signals::stop_requested`]), checked before the wait, every 50 ms during it and
/// after it (what arrives with a stop, a batch or an error, is dropped: a Ctrl-C in a pipeline
/// also ends the program feeding it, which may leave its last line cut).
fn next_batch_or_stop(rx: &std::sync::mpsc::Receiver<Result<Batch>>) -> Result<Option<Batch>> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        if crate::signals::stop_requested() {
            return Ok(None);
        }
        match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(_) if crate::signals::stop_requested() => return Ok(None),
            Ok(batch) => return batch.map(Some),
            Err(RecvTimeoutError::Timeout) => {}
            // The reader sends the end (an empty batch) or an error before it ends: it died.
            Err(RecvTimeoutError::Disconnected) => {
                bail!("the input's reader thread ended before the end of the input")
            }
        }
    }
}

/// The error a stop ([`crate::signals::stop_between_blocks`]) ends `import` with, after
/// syncing what its blocks left unsynced: where the state is (past `start`, the block it
/// opened at, once it committed one), and what is durable.
fn stopped<S: ImportTarget>(trie: &mut Trie<S>, start: u64) -> anyhow::Error
where
    S::Error: Into<anyhow::Error>,
{
    if let Err(e) = trie.store_mut().sync_last() {
        return e.context("stopped by a signal, then syncing the last blocks");
    }
    let (block, root) = trie.store().last();
    let when = if block > start {
        format!("after block {block}")
    } else {
        format!("before its first block, at block {block}")
    };
    anyhow::anyhow!(
        "stopped by a signal {when} (root {}); {}",
        hex0x(root),
        trie.store().durable_note()
    )
}

/// `import --layout log`: [`import_blocks`] over a log.
fn import_log(
    args: &ImportArgs,
    first: Vec<(TreeKey, [u8; 32])>,
    lines: Lines,
    batch_size: usize,
) -> Result<()> {
    use bintrie_logstore::LogStore;
    let options = bintrie_logstore::LogOptions {
        group_depth: args.group_depth,
        ..args.write.log_options()
    };
    let store = open_log(&args.db, Some(&options))?;
    let meta = store.meta();
    let mut trie: Trie<LogStore> = Trie::open(store, meta.group_depth, meta.root)?;
    import_blocks(&mut trie, first, lines, batch_size)
}

/// The file names of log segments `ns`, comma-separated.
fn segment_names(ns: &[u32]) -> String {
    ns.iter()
        .map(|n| bintrie_logstore::segment_name(*n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `info` on a log: its block, root and sizes.
fn info_log(args: &InfoArgs) -> Result<()> {
    let store = open_committed_log(&args.db)?;
    let (meta, i) = (store.meta(), store.info());
    let mut out = std::io::stdout().lock();
    if args.json {
        let j = serde_json::json!({
            "layout": "log",
            "root": hex0x(meta.root),
            "block": meta.block,
            "group_depth": meta.group_depth,
            "nodes": i.nodes,
            "stems": i.stems,
            "code": i.code,
            "segments": i.segments,
            "log_bytes": i.log_bytes,
            "live_bytes": i.live_bytes,
            "garbage_bytes": i.garbage_bytes(),
            "index_bytes": i.index_bytes,
            "pending_drops": store.interrupted_drops(),
        });
        writeln!(out, "{j}")
    } else {
        // Files an interrupted compaction dropped, still in the directory: not the log's.
        let pending = match store.interrupted_drops() {
            [] => String::new(),
            p => format!(
                "\npending      {} left by an interrupted compaction, not part of the log (the \
                 next writer removes them)",
                segment_names(p)
            ),
        };
        writeln!(
            out,
            "layout       log\nroot         {}\nblock        {}\ngroup depth  {}\n\
             nodes        {}\nstems        {}\ncode entries {}\nsegments     {}\n\
             log size     {} bytes ({} live, {} superseded)\nindex memory {} bytes{pending}",
            hex0x(meta.root),
            meta.block,
            meta.group_depth,
            i.nodes,
            i.stems,
            i.code,
            i.segments,
            i.log_bytes,
            i.live_bytes,
            i.garbage_bytes(),
            i.index_bytes
        )
    }
    .and_then(|()| out.flush())
    .context(crate::WRITING)
}

#[derive(clap::Args, Debug)]
pub(crate) struct CompactArgs {
    /// Directory of a state in the log layout (`--layout log` of `import` and `exec`).
    #[arg(long)]
    db: PathBuf,
    /// Compact a sealed segment when at least this share of its bytes (0 to 1) is superseded
    /// records; 0 compacts every sealed segment, 1 only those with nothing live.
    #[arg(long, value_name = "SHARE", default_value_t = bintrie_logstore::DEFAULT_COMPACT_GARBAGE, value_parser = parse_share, allow_negative_numbers = true)]
    min_garbage: f64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--page-size`: a power of two from 4096 to 65536 (a usage error otherwise, exit status 2).
fn parse_page_size(s: &str) -> std::result::Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of bytes"))?;
    if v.is_power_of_two() && (4096..=65536).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a power of two from 4096 to 65536"))
    }
}

/// A share within 0..=1, for `--min-garbage`.
fn parse_share(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v.abs()) // -0 is 0
    } else {
        Err(format!("{s} is outside 0..=1"))
    }
}

pub(crate) fn cmd_compact(args: CompactArgs) -> Result<()> {
    match held_layout(&args.db)? {
        Some(Layout::Log) => {}
        Some(Layout::Mdbx) => bail!(
            "{} holds an MDBX database, which reuses the pages it frees: only the log layout is \
             compacted",
            args.db.display()
        ),
        None => bail!("{} holds no state in the log layout", args.db.display()),
    }
    let options = bintrie_logstore::LogOptions {
        create: false,
        compact_garbage: None,
        ..Default::default()
    };
    let mut store = open_log(&args.db, Some(&options))?;
    let before = store.info();
    let done = store
        .compact(args.min_garbage)
        .with_context(|| format!("compacting {}", args.db.display()))?;
    let (meta, after) = (store.meta(), store.info());
    let mut out = std::io::stdout().lock();
    if args.json {
        let j = serde_json::json!({
            "root": hex0x(meta.root),
            "block": meta.block,
            "min_garbage": args.min_garbage,
            "finished_at_open": store.interrupted_drops(),
            "dropped": done.dropped,
            "dropped_bytes": done.dropped_bytes,
            "copied_records": done.copied_records,
            "copied_bytes": done.copied_bytes,
            "removals": done.removals,
            "left_in_place": done.left_in_place,
            "left_for_room": done.left_for_room,
            "stopped": done.stopped,
            "seconds": done.seconds,
            "log_bytes_before": before.log_bytes,
            "log_bytes": after.log_bytes,
            "live_bytes": after.live_bytes,
            "segments": after.segments,
        });
        writeln!(out, "{j}")
    } else {
        // The open finished a compaction a crash interrupted: said, or its files vanish
        // unexplained while this one may report nothing dropped.
        let finished = match store.interrupted_drops() {
            [] => String::new(),
            f => format!(
                "finished     an interrupted compaction: removed {} it had dropped ({})\n",
                match f.len() {
                    1 => "1 segment".to_string(),
                    n => format!("{n} segments"),
                },
                segment_names(f)
            ),
        };
        writeln!(
            out,
            "{finished}dropped      {} segments ({} bytes){}\ncopied       {} records ({} bytes), {} removals\n\
             log size     {} -> {} bytes ({} live) in {} segments\ntook         {:.3} s\n\
             state        block {} root {} (unchanged)",
            done.dropped.len(),
            done.dropped_bytes,
            compact_notes(&done, before.segments, args.min_garbage),
            done.copied_records,
            done.copied_bytes,
            done.removals,
            before.log_bytes,
            after.log_bytes,
            after.live_bytes,
            after.segments,
            done.seconds,
            meta.block,
            hex0x(meta.root),
        )
    }
    .and_then(|()| out.flush())
    .context(crate::WRITING)?;
    if let Some(why) = &done.stopped {
        bail!(
            "compacting {}: a later round failed, after the drops above: {why}",
            args.db.display()
        );
    }
    Ok(())
}

/// What follows `dropped N segments (B bytes)` in `compact`'s output: why nothing was dropped,
/// and what was left (for room, or in place).
fn compact_notes(done: &bintrie_logstore::Compaction, segments: usize, min_garbage: f64) -> String {
    let mut notes = Vec::new();
    if done.dropped.is_empty() && segments <= 1 {
        notes.push(
            "there is no sealed segment yet (the segment being written waits until it is full)"
                .to_string(),
        );
    } else if done.dropped.is_empty()
        && done.left_for_room.is_empty()
        && done.left_in_place.is_empty()
    {
        notes.push(format!(
            "no sealed segment is {min_garbage} superseded (the segment being written waits until \
             it is full)"
        ));
    }
    if !done.left_for_room.is_empty() {
        notes.push(format!(
            "{} more left, their copies would not fit in the free space: free some and compact \
             again",
            done.left_for_room.len()
        ));
    }
    if !done.left_in_place.is_empty() {
        notes.push(format!(
            "{} could not be removed, the next open removes them",
            done.left_in_place.len()
        ));
    }
    match (notes.is_empty(), done.dropped.is_empty()) {
        (true, _) => String::new(),
        (false, true) => format!(": {}", notes.join("; ")),
        (false, false) => format!("; {}", notes.join("; ")),
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct InfoArgs {
    /// Database directory.
    #[arg(long)]
    db: PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An existing state opened read-only, in the layout its directory holds.
pub(crate) enum Existing {
    /// An MDBX database.
    Mdbx(StateStore),
    /// A state in the log layout (its index rebuilt by the open's scan).
    Log(bintrie_logstore::LogStore),
}

/// Opens the state in `dir` read-only, whichever its layout (never creates, formats or writes
/// anything), at its own group depth. A directory holding neither is MDBX's "no database"
/// error, one holding both is refused ([`held_layout`]).
pub(crate) fn open_existing(dir: &std::path::Path) -> Result<Existing> {
    Ok(match held_layout(dir)? {
        Some(Layout::Log) => Existing::Log(open_committed_log(dir)?),
        _ => Existing::Mdbx(open_mdbx(dir)?),
    })
}

/// The log in `dir`, read-only, refused unless it holds a whole commit record: without one it
/// would read as an empty state that no writer committed (a log whose creation was cut short
/// or is under way; a segment that cannot be a log's start is refused by the open itself).
fn open_committed_log(dir: &std::path::Path) -> Result<bintrie_logstore::LogStore> {
    let store = open_log(dir, None)?;
    if !store.found_commit() {
        bail!(
            "{} holds no committed block: its log was cut short while it was being created (or \
             a writer is creating it now)",
            dir.display()
        );
    }
    Ok(store)
}

/// The MDBX database in `dir`, read-only, for a caller that has told the layout already.
fn open_mdbx(dir: &std::path::Path) -> Result<StateStore> {
    StateStore::open_read_only(dir).with_context(|| format!("opening {}", dir.display()))
}

pub(crate) fn cmd_info(args: InfoArgs) -> Result<()> {
    if held_layout(&args.db)? == Some(Layout::Log) {
        return info_log(&args);
    }
    let store = open_mdbx(&args.db)?;
    let shape = store.shape()?;
    let meta = shape.meta;
    let (min, mean, max) = shape.depth_summary();
    let (groups, stems, codes, size) = (shape.groups, shape.stems, shape.code, shape.file_bytes);
    let (journaled, journal_error) = match store.check_journal() {
        Ok(blocks) => (blocks, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let hist: serde_json::Map<String, serde_json::Value> = shape
            .stem_depths
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(d, c)| (d.to_string(), (*c).into()))
            .collect();
        let j = serde_json::json!({
            "root": hex0x(meta.root),
            "block": meta.block,
            "group_depth": meta.group_depth,
            "page_size": meta.page_size,
            "format": meta.format,
            "nodes": shape.nodes,
            "groups": groups,
            "stems": stems,
            "code": codes,
            "db_bytes": size,
            "stem_depth": {"min": min, "mean": mean, "max": max, "histogram": hist},
            "journaled_blocks": journaled,
            "journal_error": journal_error,
        });
        writeln!(out, "{j}")
    } else {
        writeln!(
            out,
            "root         {}\nblock        {}\ngroup depth  {}\npage size    {}\ngroups       {groups}\n\
             stems        {stems}\ncode entries {codes}\ndb size      {size} bytes\n\
             stem depth   min {min} mean {mean:.2} max {max}",
            hex0x(meta.root),
            meta.block,
            meta.group_depth,
            meta.page_size,
        )
        .and_then(|()| match (&journal_error, journaled.first(), journaled.last()) {
            (Some(e), _, _) => writeln!(out, "journal      damaged: {e}"),
            (None, Some(a), Some(b)) => writeln!(
                out,
                "journal      blocks {a}..={b} journaled but not in MDBX (a power loss took \
                 MDBX back before them, or a writer is committing them now; the next writer \
                 replays them)"
            ),
            // A buffered writer's blocks up to this one may be in it too, not yet synced.
            _ => writeln!(out, "journal      no block past this one"),
        })
    }
    .and_then(|()| out.flush())
    .context(crate::WRITING)?;
    if !shape.is_consistent() {
        bail!(
            "flat stem table has {stems} stems but the node table {}: the database is inconsistent",
            shape.stem_blobs()
        );
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub(crate) struct GetArgs {
    /// Database directory (opened read-only).
    #[arg(long)]
    db: PathBuf,
    /// The 32-byte tree key (hex, 0x optional).
    key: String,
    /// How to find the stem: `flat` trusts the flat stem table (a log: its index, then the
    /// stem's record, whose checksum is checked), `trie` trusts the node blobs on the path,
    /// `verified` re-hashes every blob on the path against the database's root, so a value (or
    /// its absence) is what the root commits to, or an error names the bad node. On a log,
    /// `trie` is the verified walk: every blob a trie loads from a log is re-hashed.
    #[arg(long, value_enum, default_value = "flat")]
    read_path: GetReadPath,
}

pub(crate) fn cmd_get(args: GetArgs) -> Result<()> {
    let key = TreeKey::from_bytes(kv::parse_b32(&args.key).context("KEY")?);
    let values = match open_existing(&args.db)? {
        Existing::Mdbx(store) => {
            let reader = store.reader()?;
            match args.read_path {
                GetReadPath::Trie => reader.get_stem(&key.stem, ReadPath::TrieWalk)?,
                GetReadPath::Flat => reader.get_stem(&key.stem, ReadPath::Flat)?,
                GetReadPath::Verified => reader.get_stem_verified(&key.stem)?,
            }
        }
        Existing::Log(store) => match args.read_path {
            // The index's entry for the stem, then its blob (whose record is checked).
            GetReadPath::Flat => store.get_stem(&key.stem, None)?,
            // A trie over a log checks every blob it loads against its parent's hash: the walk
            // that trusts the blobs and the verified one are the same walk here.
            GetReadPath::Trie | GetReadPath::Verified => {
                let meta = store.meta();
                let mut trie: Trie<_> = Trie::open(store, meta.group_depth, meta.root)?;
                trie.get_stem(&key.stem)?.cloned()
            }
        },
    };
    if let Some(v) = values.as_ref().and_then(|values| values.get(key.sub_index)) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", hex0x(v))
            .and_then(|()| out.flush())
            .context(crate::WRITING)?;
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// Database directory (opened read-only).
    #[arg(long)]
    db: PathBuf,
    /// One JSON object: `{"ok": true, "root", "block", "nodes", "groups", "stems", "code"}`
    /// (a log: `"layout": "log"` and no `groups`), or `{"ok": false, "error": "…"}` (exit
    /// status 1).
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// `verify` on a log: every blob reachable from the root re-hashed, no blob the index holds
/// unreachable, every stem entry at a blob of the tree, every code entry hashing to its key.
fn verify_log(args: &VerifyArgs) -> Result<()> {
    use bintrie_logstore::LogStore;
    // One that cannot be opened: `main` prints `{"ok": false, "error": …}` for --json.
    let store = open_committed_log(&args.db)?;
    let (meta, info) = (store.meta(), store.info());
    let bar = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("verifying {} blobs", info.nodes));
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    };
    let result = (|| -> Result<(u64, u64)> {
        if meta.root != bintrie_node::ZERO_HASH {
            let mut trie: Trie<LogStore> = Trie::open(store.clone(), meta.group_depth, meta.root)?;
            trie.verify()?;
            let loaded = trie.stats().nodes_loaded;
            if loaded != info.nodes {
                bail!(
                    "the index holds {} node blobs, the tree reaches {loaded}: {} are \
                     unreachable",
                    info.nodes,
                    info.nodes.saturating_sub(loaded)
                );
            }
        } else if info.nodes > 0 {
            bail!(
                "the root is empty but the index holds {} node blobs",
                info.nodes
            );
        }
        let stems = store.check_index()?;
        let mut code = 0u64;
        let mut bad = None;
        store.for_each_code(|hash, bytes| {
            code += 1;
            if bad.is_none() && alloy_primitives::keccak256(bytes).0 != *hash {
                bad = Some(hex0x(hash));
            }
        })?;
        if let Some(h) = bad {
            bail!("code {h} does not hash to its key");
        }
        Ok((stems, code))
    })();
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    let written = match (&result, args.json) {
        (Ok((stems, code)), true) => writeln!(
            out,
            "{}",
            serde_json::json!({
                "ok": true, "layout": "log", "root": hex0x(meta.root), "block": meta.block,
                "nodes": info.nodes, "stems": stems, "code": code,
            })
        ),
        (Ok((stems, code)), false) => writeln!(
            out,
            "ok: block {} root {}: {} node blobs re-hashed to the root, none unreachable, {stems} \
             stems indexed at their blobs, {code} code entries match their hashes",
            meta.block,
            hex0x(meta.root),
            info.nodes
        ),
        (Err(e), true) => writeln!(
            out,
            "{}",
            serde_json::json!({"ok": false, "error": format!("{e:#}")})
        ),
        (Err(_), false) => Ok(()),
    };
    written.and_then(|()| out.flush()).context(crate::WRITING)?;
    if args.json {
        crate::json_written();
    }
    result.with_context(|| format!("{} failed verification", args.db.display()))?;
    Ok(())
}

pub(crate) fn cmd_verify(args: VerifyArgs) -> Result<()> {
    let opened = match held_layout(&args.db) {
        Ok(Some(Layout::Log)) => return verify_log(&args),
        Ok(_) => open_mdbx(&args.db),
        Err(e) => Err(e),
    }
    .and_then(|store| {
        let (_, total_stems, _) = store.counts()?;
        Ok((store, total_stems))
    });
    let (store, total_stems) = opened?;
    let bar = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(total_stems);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "verifying {bar:40} {pos}/{len} stems, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    };
    // A journal every writer would refuse is a failure too, though MDBX's state checks out.
    let result = store
        .verify(&|n| bar.set_position(n))
        .and_then(|r| store.check_journal().map(|_| r));
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    let written = match (&result, args.json) {
        (Ok(r), true) => writeln!(
            out,
            "{}",
            serde_json::json!({
                "ok": true, "root": hex0x(r.root), "block": r.block, "nodes": r.nodes,
                "groups": r.groups, "stems": r.stems, "code": r.code,
            })
        ),
        (Ok(r), false) => writeln!(
            out,
            "ok: block {} root {}: {} node blobs ({} groups, {} stems) re-hashed to the root, \
             the flat table matches, {} code entries match their hashes",
            r.block,
            hex0x(r.root),
            r.nodes,
            r.groups,
            r.stems,
            r.code
        ),
        (Err(e), true) => writeln!(
            out,
            "{}",
            serde_json::json!({"ok": false, "error": e.to_string()})
        ),
        (Err(_), false) => Ok(()),
    };
    written.and_then(|()| out.flush()).context(crate::WRITING)?;
    if args.json {
        crate::json_written();
    }
    result.with_context(|| format!("{} failed verification", args.db.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--batch` takes a whole number of entries from 1; 0, a sign and words are refused,
    /// saying what it takes.
    #[test]
    fn a_batch_is_at_least_one_entry() {
        assert_eq!(batch_size("1"), Ok(1));
        assert_eq!(batch_size("100000"), Ok(100_000));
        assert_eq!(
            batch_size("0"),
            Err("a block holds at least 1 entry".to_string())
        );
        for bad in ["-1", "+", "ten", "1.5", ""] {
            let e = batch_size(bad).unwrap_err();
            assert!(
                e.ends_with("a whole number of entries, at least 1"),
                "{bad}: {e}"
            );
        }
    }

    /// `compact`'s notes say every reason at once: what was left for room and what could not
    /// be removed both (one used to hide the other).
    #[test]
    fn compact_notes_say_what_was_left_and_why() {
        use bintrie_logstore::Compaction;
        let some = |dropped: Vec<u32>, room: Vec<u32>, place: Vec<u32>| Compaction {
            dropped,
            left_for_room: room,
            left_in_place: place,
            ..Default::default()
        };
        assert_eq!(compact_notes(&some(vec![1], vec![], vec![]), 3, 0.5), "");
        assert_eq!(
            compact_notes(&some(vec![], vec![], vec![]), 1, 0.0),
            ": there is no sealed segment yet (the segment being written waits until it is full)"
        );
        assert!(
            compact_notes(&some(vec![], vec![], vec![]), 3, 0.5)
                .starts_with(": no sealed segment is 0.5 superseded")
        );
        assert_eq!(
            compact_notes(&some(vec![1], vec![2, 3], vec![1]), 4, 0.5),
            "; 2 more left, their copies would not fit in the free space: free some and compact \
             again; 1 could not be removed, the next open removes them"
        );
        assert!(compact_notes(&some(vec![], vec![2], vec![]), 4, 0.5).starts_with(": 1 more left"));
    }
}
