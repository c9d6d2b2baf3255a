//! `bintrie`: the command-line tool of the EIP-7864 binary-trie state backend.

#![deny(unsafe_code)]

/// mimalloc: the trie allocates millions of small nodes, and glibc's per-thread arenas made
/// repeated large builds up to 50% slower (measured in `cargo bench -p bintrie-trie`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (the same index in mimalloc 2 and 3;
/// the test below checks it holds the purge delay's default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the memory mimalloc frees for a minute before returning it to the OS
/// ([`PURGE_DELAY_MS`]). By default mimalloc purges what stayed free for a second, so each
/// block of a run (blocks a second or more apart, as in the study and on a chain) faulted
/// fresh pages back in, the kernel zeroing a 2 MB huge page at each fault (23-80 faults and
/// about 4% of a cold approve block's CPU). Measured, three alternating rounds of the study's
/// approve blocks with purging off: GD-5 block -6.5% (3 of 3 rounds), commit -8.3% (3 of 3),
/// trie update -11.3% (2 of 3); docs/study/writes.md, twenty-first session. A minute keeps
/// that (0 faults in the median block, as with purging off) and still returns what a
/// process stopped using: the tables an index outgrew while a log opened (at 16M stems, an
/// index of 2.4 GB then: the process held 5.3-5.6 GB with purging off, 3.4 GB a minute after
/// the open with this delay, its blocks still without faults in the median; since the
/// twenty-eighth session an open sizes its tables from `index-sizes` and outgrows few).
/// A delay given in the environment is left as it is ([`purge_delay_given`]).
#[allow(unsafe_code)]
fn keep_freed_memory() {
    if purge_delay_given(std::env::vars_os().map(|(name, _)| name)) {
        return;
    }
    // SAFETY: `mi_option_set` only stores an option's value; mimalloc reads it when it next
    // decides whether to purge. Called once, at the start of `main`.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

/// The log filter without `RUST_LOG`: warnings and errors, but none of libmdbx's own lines.
/// It logs what it meets opening a damaged or uncleanly closed file (`ERROR libmdbx:
/// dxb_read_header: …`) before the store's error says the same in this project's words and
/// what to do; `RUST_LOG=warn` (or `libmdbx=debug`) shows them.
const DEFAULT_LOG: &str = "warn,libmdbx=off";

/// What a bus error (SIGBUS) prints before the process ends with status 1.
const BUS_ERROR: &[u8] = b"error: a memory-mapped database file ended under a read (SIGBUS): \
the disk may have filled under it (free some space), or the file is damaged or was cut short \
while open; what was under way is not committed. Run `bintrie verify --db DIR` (once there is \
room) before rebuilding or restoring anything\n";

/// Ends the process with [`BUS_ERROR`] on a bus error, instead of dying silently (status 135).
/// MDBX maps its files: a page of the lock file that a full disk cannot back, or a read past
/// the end of a data file cut short under a reader, faults. (The store checks a value's stored
/// length before reading it, so a damaged length is an error naming its key; libmdbx's own
/// validation mode checks every page, at twice a read's cost, and cannot be set on a read-only
/// open through the binding.) Such a fault cannot be returned as an error from inside the
/// read; what this can do is say so.
#[allow(unsafe_code)]
fn explain_bus_errors() {
    extern "C" fn on_bus_error(_: libc::c_int) {
        // SAFETY: `write` and `_exit` are async-signal-safe; the message is a static.
        unsafe {
            libc::write(2, BUS_ERROR.as_ptr().cast(), BUS_ERROR.len());
            libc::_exit(1);
        }
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions; once, at the
    // start of `main`, before any thread.
    unsafe {
        libc::signal(
            libc::SIGBUS,
            on_bus_error as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// The purge delay [`keep_freed_memory`] sets: memory free this long goes back to the OS.
const PURGE_DELAY_MS: std::ffi::c_long = 60_000;

/// Whether one of these environment variable names sets mimalloc's purge delay, as mimalloc
/// reads them: `MIMALLOC_PURGE_DELAY` or its old name `MIMALLOC_RESET_DELAY`, in any case, with
/// any value (an empty one is 1 ms to mimalloc).
fn purge_delay_given(names: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    names.into_iter().any(|name| {
        ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
            .iter()
            .any(|m| name.eq_ignore_ascii_case(m))
    })
}

mod bench;
mod db;
mod durability;
mod eftest;
mod exec;

mod proof;
mod signals;

use anyhow::{Context, Result, bail};
use bintrie_exec::kv;
use bintrie_keys::TreeKey;
use bintrie_trie::{MemoryStore, Trie};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use tracing::info;

/// EIP-7864 binary trie: roots, storage, and block execution on the binary-trie state.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compute the EIP-7864 (SHA-256, geth-compatible) root of a set of tree entries or of a
    /// genesis alloc.
    ///
    /// The tree is committed to an in-memory store at the group depth, reloaded, and every
    /// stored blob is re-hashed; the printed root is the reloaded tree's (an error if it differs).
    Root(RootArgs),
    /// Import `KEY VALUE` lines into a database (MDBX, or the log layout with `--layout log`),
    /// committing one block every `--batch` entries and printing `committed block B entries E
    /// root 0x…` after each.
    ///
    /// Ctrl-C (or SIGTERM, SIGHUP) stops it after the block being committed, synced, and it
    /// exits with status 1 naming that block (an input cut by the same Ctrl-C, as in a
    /// pipeline, commits nothing more); a second one quits at once (the state then opens at a
    /// block the durability contract promises, as after a kill). Not during `--bulk`, which a
    /// signal ends as a kill does.
    Import(db::ImportArgs),
    /// Show a database's root, block, group depth and counts (MDBX: also its page size and
    /// stem depths; a log: its segments, bytes and index). Opens the database read-only.
    Info(db::InfoArgs),
    /// Compact a state in the log layout: drop the sealed segments whose superseded records
    /// are at least --min-garbage of their bytes, after copying what is live in them to the
    /// log's end.
    ///
    /// The state (root, block) does not change, and a crash at any instant leaves it whole:
    /// the copies are synced before any segment file is removed, the oldest first. `import`
    /// and `exec` on the log layout already compact as they go, a slice after each block once
    /// more than half of the log is garbage (the segment with the most garbage among those
    /// whose copies fit in the free space, or none until there is room); this does it at once.
    /// It takes, oldest first, the segments whose copies fit in the free space, in rounds as
    /// the drops free room, and fails saying what it needs when none fits. MDBX
    /// databases reuse the pages they free and need none. Needs the writer's lock (fails while
    /// another process writes the state).
    Compact(db::CompactArgs),
    /// Print the value at a tree key (nothing when absent). Opens the database read-only,
    /// either layout.
    Get(db::GetArgs),
    /// Check a whole database: every node blob re-hashed against its parent up to the root,
    /// no unreachable blob, the flat stem table equal to the tree's stems, every code entry
    /// equal to its hash. Exit status 1 naming the first bad path, stem or code hash.
    /// Opens the database read-only.
    Verify(db::VerifyArgs),
    /// Print a proof of the value at each tree key given (or of its absence) against the
    /// database's root, one JSON line per key: `root`, `key`, `value` (null: absent),
    /// `siblings` (root level first), `stem` (null: the walk ends in an empty subtree),
    /// `stem_siblings` (8, leaf level first, iff the walk ends at the key's stem) or
    /// `subtree_root` and `other_stem_leaf` (iff it ends at another stem: one of that stem's
    /// present leaves, `index`, `value` and 8 `siblings`, without which a subtree root proves
    /// nothing). Opens the database read-only, either layout. A key no proof can show (the stem
    /// of 31 zero bytes, which no account or storage key has, past an empty left subtree: that
    /// node hashes as the stem's own) fails the command, naming it, and nothing is printed.
    Prove(proof::ProveArgs),
    /// Check proofs printed by `prove` (one, or many one per line): exit 0 printing each value
    /// (or `absent`) on its own line, exit 1 naming the first proof that does not verify
    /// against --root (default: its own root field) and why. The proofs are read as a stream:
    /// the values of those before a bad one are printed before it is found, so a script takes
    /// the output only with exit status 0. An absence proof that ends at another stem must open
    /// one of its present leaves (`other_stem_leaf`). What a proof shows holds for a tree whose
    /// stems are hashes, as Ethereum state's are: with raw keys chosen to match hashes, a
    /// forged proof can verify (README, "A gap in the tree's hash").
    VerifyProof(proof::VerifyProofArgs),
    /// Execute a mainnet block from a fixture on a binary-trie database and validate it.
    ///
    /// The pre-state is imported into a new database (temporary unless --db), the block runs
    /// through alloy-evm's Ethereum block executor (system calls, withdrawals, the fork and blob
    /// parameters of its timestamp) over the revm adapter with prefetch, and is committed. Gas
    /// used, blob gas used, receipts root, logs bloom (and the requests hash from Prague) must
    /// match the header, and every post value the fixture records must equal the committed
    /// state; otherwise the differences are printed and the exit status is non-zero. Reports
    /// timings (state read, execution, trie update, commit), Mgas/s over their total, keys read
    /// and written, store reads and read amplification, and the new root.
    Exec(exec::ExecArgs),
    /// Run Ethereum's blockchain tests (ethereum/tests `BlockchainTests`) on the binary-trie
    /// state.
    ///
    /// Each test runs on a fresh in-memory state: `pre` is imported, every block goes through
    /// the block pipeline (RLP, the header against its parent, the transactions and
    /// withdrawals roots, execution with alloy-evm under the test's network, then gas used,
    /// receipts root, logs bloom, blob gas and requests hash against the header, all before
    /// the commit), a
    /// block with `expectException` must be rejected and leave the state as it was, and after
    /// the last block every account and slot of `postState` is read back; slots and accounts
    /// that are touched but not listed must read as zero / absent. The Merkle-Patricia
    /// `stateRoot`s are not comparable and are not checked. Networks before the Merge, balances
    /// of 2^128 or more (EIP-7864 stores 16 bytes), blocks invalid only through their
    /// Merkle-Patricia `stateRoot` and creations onto storage-only accounts (EIP-7610) are
    /// skipped with the reason. Exit status 1 when any test fails.
    BlockchainTest(eftest::BlockchainTestArgs),
    /// The whole-system group-depth study (what `cargo xtask bench` runs).
    ///
    /// For each page size and group depth: build a database of random state plus an ERC-20 and
    /// the loop-driver contracts (sorted on disk and built in bounded memory), then for every
    /// workload, read path and prefetch setting run one-transaction blocks (100M block gas, 2^24
    /// transaction gas), each cold: the database is evicted from the OS page cache and every
    /// in-process cache is empty. The first run of each configuration is dropped. Writes
    /// results.json, report.md, SVG charts and index.html into --out; each database is deleted
    /// when its group depth is done. Under --db-dir only directories holding nothing but a
    /// bench database's files are deleted.
    /// Ctrl-C (or SIGTERM, or SIGHUP; not one it was started ignoring, as under nohup) stops the
    /// study before its next block and deletes its databases (unless kept); the blocks measured
    /// so far are kept in --out (results.json marked incomplete, and their report); a second
    /// one quits at once, losing them.
    Bench(Box<bench::BenchArgs>),
    /// Measure the drive under a directory, the ceiling of every I/O figure: random 4 KB reads
    /// (O_DIRECT) at 1..256 requests in flight, random write IOPS, the time of an fdatasync and
    /// sequential write bandwidth, on a scratch file unlinked as soon as it is open (nothing
    /// is left however the probe ends; the fsync's few KB left by a killed probe are removed
    /// by the next). `bench` records the same as `machine.disk`.
    ProbeDisk(bench::ProbeDiskArgs),
    /// Compare two versions of the code from their `bench` results: for every configuration
    /// both measured, the pooled medians and change of each metric, a Mann-Whitney p over the
    /// pooled blocks and one over the invocations' medians, and, for invocations run in
    /// alternating rounds, in how many the second version was lower (with a sign test). One
    /// invocation's blocks move together on a noisy machine, so a claim should rest on the
    /// invocations, not on the pooled blocks. Exit status 1 on an unreadable or foreign file
    /// or when the two sides share no configuration.
    Compare(bench::CompareArgs),
}

#[derive(clap::Args, Debug)]
struct RootArgs {
    /// Binary levels per stored node (1..=8). The root does not depend on it.
    #[arg(long, short = 'g', default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: u8,
    /// File of `KEY VALUE` lines (32-byte hex each, 0x optional; lines starting with `#` and
    /// blank lines skipped, nothing may follow the value; a later line overrides an earlier
    /// one with the same key). `-` is stdin.
    #[arg(long, short = 'i', default_value = "-", conflicts_with = "alloc")]
    input: String,
    /// A geth genesis alloc (address -> {balance, nonce, code, storage}) or a whole genesis file
    /// with an `alloc` field, instead of key/value lines.
    #[arg(long)]
    alloc: Option<PathBuf>,
    /// Print a JSON object (root, group depth, entries, stems, blobs, bytes) instead of the root.
    #[arg(long)]
    json: bool,
}

/// Whether descriptor 1 (standard output) was closed when the process started, as
/// [`note_closed_stdout`] found it.
static STDOUT_WAS_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether descriptor 0 (standard input) was closed when the process started, as
/// [`note_closed_stdout`] found it: the standard library then opens /dev/null there, and an
/// input read from it would be empty (`bintrie root <&-` printed the empty tree's root).
static STDIN_WAS_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A count option that must be at least 1 (`import --batch`, `blockchain-test --jobs`): a
/// whole number, else "…: a whole number of `unit`, at least 1"; 0 is `zero`, which says why.
/// (clap's range check said "0 is not in 1..18446744073709551615", and `--jobs 0` was taken
/// as 1 without a word.)
pub(crate) fn parse_at_least_one<T>(
    s: &str,
    unit: &str,
    zero: &str,
) -> std::result::Result<T, String>
where
    T: std::str::FromStr<Err = std::num::ParseIntError> + PartialEq + From<u8>,
{
    match s.parse::<T>() {
        Ok(n) if n == T::from(0) => Err(zero.to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: a whole number of {unit}, at least 1")),
    }
}

/// A root given as an option (`exec --pre-root`, `verify-proof --root`): 32 bytes in hex, a
/// usage error otherwise (exit status 2, as every bad value).
pub(crate) fn parse_root_arg(s: &str) -> std::result::Result<[u8; 32], String> {
    kv::parse_b32(s).map_err(|e| format!("{e:#}"))
}

/// Refuses to read standard input when it was closed at the start ([`STDIN_WAS_CLOSED`]):
/// nothing can be read there, which is not an empty input.
pub(crate) fn check_stdin_open() -> Result<()> {
    if STDIN_WAS_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        bail!(
            "standard input is closed: there is no input to read (give it with a file, or \
             pipe it in)"
        );
    }
    Ok(())
}

/// [`kv::open_input`], refusing `-` when standard input was closed at the start
/// ([`STDIN_WAS_CLOSED`]): nothing can be read there, which is not an empty input.
pub(crate) fn open_input(input: &str) -> Result<(Box<dyn std::io::BufRead + Send>, String)> {
    if input == "-" {
        check_stdin_open()?;
    }
    kv::open_input(input)
}

/// Notes whether standard output (and standard input) is closed, before the standard library
/// starts (an ELF `.init_array` entry runs before `main`): the library then opens /dev/null on
/// a closed descriptor 0-2, so every write to stdout would succeed and the output vanish, with
/// status 0 (`bintrie info --json >&-`). `main` refuses to run instead; a closed stdin is
/// refused where an input is read from it ([`open_input`]).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
extern "C" fn note_closed_stdout() {
    let closed = |fd| {
        // SAFETY: fcntl(F_GETFD) reads the flags of a descriptor number; a closed one is -1
        // with EBADF (any other failure, a sandbox refusing the call, is not taken for closed).
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
    };
    STDIN_WAS_CLOSED.store(closed(0), std::sync::atomic::Ordering::Relaxed);
    STDOUT_WAS_CLOSED.store(closed(1), std::sync::atomic::Ordering::Relaxed);
}

/// [`note_closed_stdout`]'s place among the functions the loader runs before `main`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// Whether `NO_COLOR` is unset or empty (<https://no-color.org>: any other value turns colours
/// off).
fn no_color_unset() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn main() {
    if STDOUT_WAS_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        let _ = writeln!(
            std::io::stderr(),
            "error: standard output is closed: bintrie writes its results there (give \
             `>/dev/null` to discard them)"
        );
        std::process::exit(1);
    }
    keep_freed_memory();
    explain_bus_errors();
    signals::ignore_file_size_limit_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG)),
        )
        .with_writer(std::io::stderr)
        // Colours only for a terminal: a log file or a pipe gets plain text, and NO_COLOR
        // (set and not empty) turns them off on a terminal too.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && no_color_unset())
        .init();
    let cli = parse_cli();
    let json = cli.command.json();
    let result = match cli.command {
        Command::Root(args) => cmd_root(args),
        Command::Import(args) => db::cmd_import(args),
        Command::Info(args) => db::cmd_info(args),
        Command::Compact(args) => db::cmd_compact(args),
        Command::Get(args) => db::cmd_get(args),
        Command::Verify(args) => db::cmd_verify(args),
        Command::Prove(args) => proof::cmd_prove(args),
        Command::VerifyProof(args) => proof::cmd_verify_proof(args),
        Command::Exec(args) => exec::cmd_exec(args),
        Command::BlockchainTest(args) => eftest::cmd_blockchain_test(args),
        Command::Bench(args) => bench::cmd_bench(*args),
        Command::ProbeDisk(args) => bench::cmd_probe_disk(args),
        Command::Compare(args) => bench::cmd_compare(args),
    };
    if let Err(e) = result {
        // Never `eprintln!`: it panics when stderr is closed.
        let _ = writeln!(std::io::stderr(), "error: {e:#}");
        // A script reading `--json` gets one object whatever happened: the command's own, or
        // this one (a closed stdout is no further error).
        if json && !JSON_WRITTEN.load(std::sync::atomic::Ordering::SeqCst) {
            let mut out = std::io::stdout().lock();
            let error = serde_json::json!({"ok": false, "error": format!("{e:#}")});
            let _ = writeln!(out, "{error}").and_then(|()| out.flush());
        }
        std::process::exit(1);
    }
}

/// Set once a `--json` command has written its object to stdout: when it then fails (a block
/// that does not validate, tests that fail, a database that fails `verify`), that object,
/// which says so, is its output, and `main` adds no error object after it.
static JSON_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that this `--json` command wrote its object to stdout ([`JSON_WRITTEN`]). Every
/// command that can fail after writing it calls this right after the write.
pub(crate) fn json_written() {
    JSON_WRITTEN.store(true, std::sync::atomic::Ordering::SeqCst);
}

impl Command {
    /// Whether `--json` was given: the command's output is one JSON value, and a failure
    /// before it is written prints `{"ok": false, "error": "…"}` in its place (README,
    /// "JSON output").
    fn json(&self) -> bool {
        match self {
            Command::Root(a) => a.json,
            Command::Info(a) => a.json,
            Command::Compact(a) => a.json,
            Command::Verify(a) => a.json,
            Command::Exec(a) => a.json,
            Command::BlockchainTest(a) => a.json,
            Command::Bench(a) => a.json,
            Command::ProbeDisk(a) => a.json,
            Command::Compare(a) => a.json,
            Command::Import(_) | Command::Get(_) | Command::Prove(_) | Command::VerifyProof(_) => {
                false
            }
        }
    }
}

/// The command line, or the process ends: with clap's message and status for a usage error or
/// for `--help` and `--version`, except that help or version text that cannot be written (a
/// closed or full stdout) ends in status 1 with the reason on stderr, never in a silent 0.
fn parse_cli() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if let Err(io) = e.print() {
                let _ = writeln!(std::io::stderr(), "error: {WRITING}: {io}");
                std::process::exit(1);
            }
            std::process::exit(e.exit_code());
        }
    }
}

/// The largest genesis alloc `root --alloc` reads, in bytes: mainnet's is under 1 MB, and its
/// parse holds about 20 bytes per byte of JSON (so about 1.3 GB at this cap).
const MAX_ALLOC_BYTES: u64 = 64 << 20;

/// `0x`-prefixed lower-case hex, for messages and output.
pub(crate) use alloy_primitives::hex::encode_prefixed as hex0x;

fn cmd_root(args: RootArgs) -> Result<()> {
    let writes: Vec<(TreeKey, [u8; 32])> = if let Some(path) = &args.alloc {
        let json = bintrie_exec::input::read_json_at_most(path, MAX_ALLOC_BYTES)?;
        bintrie_exec::alloc::alloc_writes(&json).with_context(|| format!("{}", path.display()))?
    } else {
        let (reader, source) = open_input(&args.input)?;
        kv::read_kv_lines(reader, &source)?
    };
    let entries = writes.len();
    info!(entries, group_depth = args.group_depth, "building tree");
    let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::new(), args.group_depth)?;
    trie.update(writes)?;
    let built = trie.root();
    let commit = trie.commit()?;
    let store = trie.into_store();
    let (blobs, bytes) = (store.len(), store.total_bytes());
    let stems = store
        .iter()
        .filter(|(_, b)| b.first() == Some(&bintrie_node::STEM_TAG))
        .count();
    let mut reloaded: Trie<MemoryStore> = Trie::open(store, args.group_depth, built)?;
    let root = reloaded.verify().context("re-hashing the committed tree")?;
    if root != built {
        bail!(
            "root after reload {} differs from the root before {}",
            hex0x(root),
            hex0x(built)
        );
    }
    info!(
        blobs = commit.blobs,
        bytes = commit.bytes,
        "committed and verified"
    );
    let line = if args.json {
        serde_json::json!({
            "root": hex0x(root),
            "group_depth": args.group_depth,
            "entries": entries,
            "stems": stems,
            "blobs": blobs,
            "bytes": bytes,
        })
        .to_string()
    } else {
        hex0x(root)
    };
    print_line(&line)
}

/// The context of every error writing a command's output: it names stdout, so that a full or
/// closed stdout is not taken for the database's disk full.
pub(crate) const WRITING: &str = "writing output to stdout";

/// Writes `line` and a newline to stdout through a locked handle and flushes it: a closed or
/// full stdout is an error ("writing output to stdout: …", exit status 1), never a panic.
pub(crate) fn print_line(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context(crate::WRITING)
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys::mi_option_get;

    /// The option set at start is mimalloc's purge delay (its default, 1000 ms in mimalloc 3),
    /// and afterwards it is a minute; a delay the environment gives is kept.
    #[test]
    #[allow(unsafe_code)]
    fn the_option_kept_at_start_is_the_purge_delay() {
        // SAFETY: reads an option's value.
        let get = || unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        let before = get();
        super::keep_freed_memory();
        match super::purge_delay_given(std::env::vars_os().map(|(name, _)| name)) {
            true => assert_eq!(get(), before, "the environment's delay is kept"),
            false => {
                assert_eq!(
                    before,
                    1000,
                    "option {} is not the purge delay",
                    super::MI_OPTION_PURGE_DELAY
                );
                assert_eq!(get(), super::PURGE_DELAY_MS);
            }
        }
    }

    /// The names mimalloc takes for its purge delay, and only those: any case, the old name;
    /// not a longer or shorter name, another option, an empty or non-UTF-8 name.
    #[test]
    fn only_the_names_mimalloc_reads_count_as_a_given_delay() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt as _;
        let given = |names: &[&str]| super::purge_delay_given(names.iter().map(OsString::from));
        for name in [
            "MIMALLOC_PURGE_DELAY",
            "mimalloc_purge_delay",
            "Mimalloc_Purge_Delay",
            "MIMALLOC_RESET_DELAY",
        ] {
            assert!(given(&["PATH", name]), "{name}");
        }
        for name in [
            "",
            "MIMALLOC_PURGE_DELAYS",
            "XMIMALLOC_PURGE_DELAY",
            "MIMALLOC_PURGE",
            "MIMALLOC_ARENA_PURGE_MULT",
            "MIMALLOC_PURGE_DELAY ",
        ] {
            assert!(!given(&[name]), "{name:?}");
        }
        assert!(!given(&[]));
        let odd = OsString::from_vec(b"MIMALLOC_PURGE_DELAY\xff".to_vec());
        assert!(!super::purge_delay_given([odd]));
        let odd = OsString::from_vec(b"\xffMIMALLOC_PURGE_DELAY".to_vec());
        assert!(!super::purge_delay_given([odd]));
    }
}
