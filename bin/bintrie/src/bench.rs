//! `bintrie bench`: the whole-system group-depth study (what `cargo xtask bench` runs).

use anyhow::{Context, Result, bail};
use bintrie_bench::device::{ProbeOptions, QD_REFERENCE, probe_disk};
use bintrie_bench::model::{
    Durability, Layout, Metric, ReadPath, Results, Scale, StudyConfig, Workload,
    parse_group_depths, parse_stems, unique,
};
use bintrie_bench::runner::{StudyOptions, run_study};
use bintrie_bench::{report, stats};
use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Arguments of `bintrie bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// Preset sizes: `smoke` (20k stems, 3 runs: checks the pipeline in about a minute), `small`
    /// (1M stems, 10 runs: about 8.5 minutes on 2 cores), `study` (16M stems per database, 10 runs:
    /// about 28 minutes and one 5-6 GB database at a time).
    #[arg(long, value_enum, default_value_t = Scale::Small)]
    scale: Scale,
    /// Random stems per database (overrides the scale's), or a list of state sizes to measure
    /// each at, e.g. `1M,4M,16M,64M` (k, M, G = 10^3, 10^6, 10^9): one database per size,
    /// page size and group depth, one at a time, and charts of the per-slot costs by size.
    #[arg(long, value_parser = parse_stems, allow_hyphen_values = true)]
    stems: Option<std::vec::Vec<u64>>,
    /// ERC-20 holders with a balance (overrides the scale's; at most 50,000,000, which the
    /// build lists in memory).
    #[arg(long)]
    holders: Option<u64>,
    /// Group depths to measure, e.g. `1,5,6` or `1-8` (default: 1-8).
    // `std::vec::Vec` (not `Vec`) makes clap take the whole list as one value.
    #[arg(long, default_value = "1-8", value_parser = parse_group_depths)]
    group_depths: std::vec::Vec<u8>,
    /// Workloads, comma-separated (default: all).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = Workload::ALL,
        hide_default_value = true
    )]
    workloads: Vec<Workload>,
    /// Read paths: `trie` (walk group blobs from the root: the anchor's), `flat` (one lookup in
    /// the stem table), or both.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "trie,flat")]
    read_paths: Vec<ReadPath>,
    /// Prefetch settings: `off`, `on` (the transaction carries an EIP-2930 access list that is
    /// read in parallel before execution), or both.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,on",
        value_parser = PossibleValuesParser::new(["off", "on"]).map(|s| s == "on"),
    )]
    prefetch: Vec<bool>,
    /// On-disk layouts: `mdbx` (blobs in MDBX's B-tree, rewritten in place) and/or `log`
    /// (every block's blobs appended to a log, found through an in-memory index; built as a
    /// copy of each MDBX database; flat read path only; its commit is already one append, and
    /// --buffer-blocks sets how many blocks' blobs it keeps in memory instead).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mdbx")]
    layouts: Vec<Layout>,
    /// MDBX page sizes in bytes, e.g. `4096,16384`.
    #[arg(long, value_delimiter = ',', default_value = "4096")]
    page_sizes: Vec<u32>,
    /// Runs per configuration, the dropped first run included (overrides the scale's).
    #[arg(long)]
    runs: Option<u32>,
    /// Percent of the mixed workload's gas spent on balanceOf; the rest approves.
    #[arg(long, default_value_t = 50)]
    mixed_read_pct: u32,
    /// Prefetch worker threads (state and trie prefetch each): blocking reads, so one request
    /// in flight per thread.
    #[arg(long, default_value_t = bintrie_revm::DEFAULT_PREFETCH_WORKERS)]
    workers: usize,
    /// Seed of the random state and the per-run keys.
    #[arg(long, default_value_t = 7864)]
    seed: u64,
    /// Report directory (default: target/bench/TIMESTAMP, the start time in UTC). One that
    /// already holds another invocation's report, or a file a report writes (report.md,
    /// index.html, its charts) with no results.json beside it, is refused.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where databases are built, one at a time (default: OUT/databases). One study at a time
    /// per directory: a second one started on it fails at once (a study holds the directory
    /// locked while it runs), as it would delete the first one's databases. A database
    /// directory the study did not make (no record of the study's in it) is refused, never
    /// deleted.
    #[arg(long)]
    db_dir: Option<PathBuf>,
    /// Keep each database instead of deleting it when its group depth is done.
    #[arg(long)]
    keep_databases: bool,
    /// Measure on the databases a previous `--keep-databases` run left in --db-dir instead of
    /// building new ones (for iterating on the engine; not for reported studies). A log
    /// layout's copy is cut back to the state it was copied at (the blocks earlier runs wrote
    /// on it dropped) instead of copied again, when it then opens at the MDBX database's root.
    /// A database built from other --stems, --seed, --holders (or one that does not record
    /// them) is refused: run without this flag to rebuild it.
    #[arg(long, requires = "db_dir")]
    reuse_databases: bool,
    /// `durable`: every committed block survives a power loss (the default; an fsync per
    /// block, of the journal when --buffer-blocks is set). `flush`: synced at each flush only.
    /// `relaxed`: no fsync (MDBX SAFE_NOSYNC); commits stay atomic and the database
    /// consistent, but the last blocks can be lost on a system crash.
    #[arg(long, value_enum, default_value_t = Durability::Durable)]
    durability: Durability,
    /// Consecutive blocks per run on the same state: the page cache is evicted before every
    /// block, the write buffer survives between them; rows stay one per block.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    blocks_per_run: u32,
    /// Blocks the write buffer holds before a flush to MDBX (timed in the block that
    /// triggers it); on the log layout, the blocks whose blobs stay in memory. 0: no buffer.
    /// Default: --blocks-per-run when it is above 1, else 0.
    #[arg(long)]
    buffer_blocks: Option<u64>,
    /// On the log layout, memory for the tree's upper levels, in MiB of blobs: the deepest
    /// group level that fits with every level above it is read into memory when the log is
    /// opened and kept across blocks (written blobs there replace the kept ones), and the
    /// state's trie keeps the same levels decoded and hashed (about 3.7x the blobs' bytes more),
    /// so a block neither reads nor re-hashes them. Recorded in results.json
    /// (`log_pinned_mib`). 0: none.
    #[arg(long, value_name = "MIB", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    log_pinned_mib: u64,
    /// On the MDBX layout, put the branch pages of the flat stem table and the node table
    /// (about 1% of each, the pages every lookup passes) back in the page cache after each
    /// block's eviction and leave their leaves cold, as a node holds its B-tree after running a while; by default every page
    /// is evicted. Costs about one read per leaf met outside the measured block. Recorded in
    /// results.json (`warm_branches`).
    #[arg(long)]
    warm_branches: bool,
    /// Memory for building each database, in MiB: the state is sorted in runs of this size
    /// (spilled to temporary files beside the database) and streamed into it.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=1 << 24))]
    memory_budget: u64,
    /// Do not measure the drive under --db-dir first (`machine.disk` in results.json: random
    /// 4 KB reads at queue depths 1..256, write IOPS, fsync, sequential writes; about 8 s and a
    /// 1 GiB scratch file). Without it the report has no device efficiency.
    #[arg(long)]
    no_disk_probe: bool,
    /// Do not build the blocks' witnesses (by default every measured block's witness is built
    /// in both encodings after its execution, outside the timed stages, and its size recorded:
    /// `witness_*` in results.json, "Witness size" in the report).
    #[arg(long)]
    no_witness: bool,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Do not measure: re-render the report (statistics, report.md, charts, index.html) from
    /// an existing results.json (gzip-compressed or not), or the report directory holding it,
    /// into --out, e.g. after a change to the report. Takes none of the options that say what
    /// to measure or where (refused beside it: they would be ignored).
    #[arg(
        long,
        value_name = "RESULTS_JSON",
        conflicts_with_all = [
            "scale", "stems", "holders", "group_depths", "workloads", "read_paths", "prefetch",
            "layouts", "page_sizes", "runs", "mixed_read_pct", "workers", "seed", "db_dir",
            "keep_databases", "reuse_databases", "durability", "blocks_per_run",
            "buffer_blocks", "log_pinned_mib", "warm_branches", "memory_budget",
            "no_disk_probe", "no_witness",
        ]
    )]
    from_results: Option<PathBuf>,
    /// Print results.json to stdout when done (the report is written either way).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `bintrie bench`.
pub(crate) fn cmd_bench(args: BenchArgs) -> Result<()> {
    let out = args.out.clone().unwrap_or_else(|| {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        PathBuf::from("target/bench").join(now.replace(':', "-"))
    });
    // What is to be measured (or re-rendered) is checked before anything is made in --out.
    let input = match &args.from_results {
        Some(path) => Input::Rendered(Box::new(Results::read(path)?)),
        None => {
            let config = study_config(&args);
            config.validate()?;
            Input::Study(Box::new(config))
        }
    };
    let made_out = !out.exists();
    anyhow::ensure!(
        made_out || out.is_dir(),
        "--out {} is not a directory",
        out.display()
    );
    std::fs::create_dir_all(&out).with_context(|| {
        format!(
            "--out {}: cannot make the report's directory",
            out.display()
        )
    })?;
    // A run that ends with nothing in the --out it made (refused, or stopped before a block)
    // leaves no empty directory behind.
    let _made = bintrie_bench::runner::RemoveIfEmpty(made_out.then(|| out.clone()));
    let results_file = out.join(bintrie_bench::report::RESULTS_FILE);
    // One bench at a time per --out (its --db-dir is locked by the study): a second one would
    // replace this one's results when it ends. (The same directory as --db-dir is locked once.)
    let same_dir = args
        .db_dir
        .as_ref()
        .is_some_and(|d| d.canonicalize().ok() == out.canonicalize().ok());
    let _out_lock = if same_dir {
        None
    } else {
        Some(bintrie_bench::runner::lock_dir(&out, "bench", "--out")?)
    };
    // Another report there (its results.json, or the .gz docs/study keeps) would be replaced,
    // its charts mixed with these: refused, unless it is a copy of the same invocation.
    let there = Results::file_at(&out);
    if there.exists() {
        anyhow::ensure!(
            std::fs::metadata(&there).is_ok_and(|m| m.is_file()),
            "--out {} holds {}, which is not a regular file: give another directory, or remove \
             it first",
            out.display(),
            there.display()
        );
        // Replaced only by a re-render of the same invocation.
        if !matches!(&input, Input::Rendered(results) if same_invocation(results, &there)) {
            bail!(
                "--out {} already holds a report ({}) of another invocation: give another \
                 directory, or remove it first (`--from-results {} --out {}` re-renders that \
                 report in place)",
                out.display(),
                there.display(),
                out.display(),
                out.display()
            );
        }
    } else if let Some(name) = report_file_in(&out)? {
        // No report there, yet a file the report writes: someone else's, which it would
        // replace.
        bail!(
            "--out {} holds {name}, and no {} beside it: it is not a bench report, and the \
             report would replace it; give another directory",
            out.display(),
            bintrie_bench::report::RESULTS_FILE
        );
    }
    // The results are written at the end: a directory that takes no file would lose the whole
    // run then, so try one now (a new file: a link planted at the name is not written through).
    let probe = out.join(format!(".bintrie-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| {
            format!(
                "--out {}: cannot write there, where the results go after the run",
                out.display()
            )
        })?;
    let mut results = match input {
        Input::Rendered(results) => *results,
        Input::Study(config) => {
            let db_dir = args.db_dir.clone().unwrap_or_else(|| out.join("databases"));
            // Ctrl-C (or SIGTERM, SIGHUP) ends the study at its next block and deletes its
            // databases (GBs at study scale) as its normal end does; a second one quits at once.
            crate::signals::stop_on_signals(|| {
                if bintrie_bench::runner::request_stop() {
                    std::process::exit(130);
                }
                let _ = writeln!(
                    std::io::stderr(),
                    "stopping before the next block: the blocks measured so far are kept in \
                     --out, the databases it made deleted unless kept (Ctrl-C again to quit at \
                     once, leaving the databases and losing the blocks measured)"
                );
            });
            let done = run_study(&StudyOptions {
                keep_databases: args.keep_databases || args.reuse_databases,
                reuse_databases: args.reuse_databases,
                progress: !args.no_progress,
                probe_disk: !args.no_disk_probe,
                memory_budget: usize::try_from(args.memory_budget << 20).unwrap_or(usize::MAX),
                command: std::env::args().collect::<Vec<_>>().join(" "),
                partial_out: Some(out.clone()),
                remove_empty_db_dir: args.db_dir.is_none(),
                ..StudyOptions::new(*config, db_dir)
            });
            done?
        }
    };
    stats::analyze(&mut results);
    if let Err(e) = report::write_report(&results, &out) {
        let e = e.context(format!("writing the report into {}", out.display()));
        if args.from_results.is_some() {
            return Err(e);
        }
        // The measurements are all this run made: kept, in --out or elsewhere.
        return Err(bintrie_bench::runner::keep_measurements(
            e,
            &results_file,
            &results,
        ));
    }
    // Written, not printed: `println!` panics when stdout is closed or full.
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &results)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(stdout))
    } else if args.from_results.is_some() {
        writeln!(
            stdout,
            "report of {} blocks re-rendered: {}",
            results.runs.len(),
            out.join("report.md").display()
        )
    } else {
        writeln!(
            stdout,
            "{} blocks measured in {:.0} s; report: {}",
            results.runs.len(),
            results.elapsed_s,
            out.join("report.md").display()
        )
    }
    .and_then(|()| stdout.flush())
    .context(crate::WRITING)?;
    Ok(())
}

/// What `bench` renders: a study to run, or results read back.
enum Input {
    Study(Box<StudyConfig>),
    Rendered(Box<Results>),
}

/// Whether the results file at `path` holds the invocation `results` does (the same start,
/// length and command line): a re-render of it replaces nothing of another study's.
fn same_invocation(results: &Results, path: &std::path::Path) -> bool {
    Results::read(path).is_ok_and(|there| there.same_invocation(results))
}

/// The study `args` describe (each list free of repeats: a value given twice is measured
/// once, as --stems and --group-depths do).
fn study_config(args: &BenchArgs) -> StudyConfig {
    let scale = args.scale;
    let sizes = args.stems.clone().unwrap_or_else(|| vec![scale.stems()]);
    StudyConfig {
        stems: *sizes.last().expect("parse_stems returns at least one size"),
        state_sizes: if sizes.len() > 1 { sizes } else { Vec::new() },
        holders: args.holders.unwrap_or(scale.holders()),
        group_depths: args.group_depths.clone(),
        workloads: unique(&args.workloads),
        read_paths: unique(&args.read_paths),
        prefetch: unique(&args.prefetch),
        page_sizes: unique(&args.page_sizes),
        runs: args.runs.unwrap_or(scale.runs()),
        mixed_read_pct: args.mixed_read_pct,
        prefetch_workers: args.workers,
        durability: args.durability,
        seed: args.seed,
        blocks_per_run: args.blocks_per_run,
        buffer_blocks: args.buffer_blocks.unwrap_or(if args.blocks_per_run > 1 {
            u64::from(args.blocks_per_run)
        } else {
            0
        }),
        witness: !args.no_witness,
        layouts: unique(&args.layouts),
        log_pinned_mib: args.log_pinned_mib,
        warm_branches: args.warm_branches,
        ..StudyConfig::for_scale(scale)
    }
}

/// Arguments of `bintrie probe-disk`.
#[derive(clap::Args, Debug)]
pub(crate) struct ProbeDiskArgs {
    /// Directory on the filesystem to measure (the scratch file is written there).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Size of the scratch file in MiB (the random I/O spreads over it).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    mib: u64,
    /// Milliseconds spent at each queue depth and on the random writes.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=60000))]
    point_ms: u64,
    /// Print the measurement as JSON (the `machine.disk` object of results.json).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `bintrie probe-disk`.
pub(crate) fn cmd_probe_disk(args: ProbeDiskArgs) -> Result<()> {
    let options = ProbeOptions {
        file_bytes: args.mib << 20,
        point: std::time::Duration::from_millis(args.point_ms),
        ..ProbeOptions::default()
    };
    let disk = probe_disk(&args.dir, &options)
        .with_context(|| format!("probing the disk under {}", args.dir.display()))?;
    if args.json {
        return crate::print_line(&serde_json::to_string_pretty(&disk)?);
    }
    let mut text = format!(
        "{} ({}{})\nrandom 4 KB reads: {:.1} µs at QD1, {:.1} µs per read at QD{QD_REFERENCE} \
         ({:.1}x), 90% of the most from QD{} (the most: {:.0} IOPS)\n",
        disk.dir,
        disk.filesystem.as_deref().unwrap_or("filesystem unknown"),
        if disk.in_memory() {
            ": in memory, these are not a drive's figures"
        } else {
            ""
        },
        disk.read_qd1_us,
        disk.read_qd16_us,
        disk.queue_gain(),
        disk.saturation_depth,
        disk.max_read_iops
    );
    for p in &disk.read_curve {
        text.push_str(&format!(
            "  QD{:<3} {:>9.0} IOPS  {:>8.1} µs latency\n",
            p.depth, p.iops, p.latency_us
        ));
    }
    text.push_str(&format!(
        "random 4 KB writes: {:.0} IOPS at QD{QD_REFERENCE}\nfdatasync: {:.0} µs\n\
         sequential writes: {:.0} MB/s",
        disk.write_iops_qd16, disk.fsync_us, disk.seq_write_mb_s
    ));
    crate::print_line(&text)
}

/// The first file in `out` of a name the report writes besides its results (`report.md`,
/// `index.html`, a chart: [`report::is_report_file`]), `None` when there is none (or no
/// `out`).
fn report_file_in(out: &Path) -> Result<Option<String>> {
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading --out {}", out.display())),
    };
    for entry in entries {
        let name = entry
            .with_context(|| format!("reading --out {}", out.display()))?
            .file_name();
        let name = name.to_string_lossy();
        if name != report::RESULTS_FILE && report::is_report_file(&name) {
            return Ok(Some(name.into_owned()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn defaults_are_the_full_study_at_small_scale() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.scale, Scale::Small);
        assert_eq!(a.group_depths, (1..=8).collect::<Vec<u8>>());
        assert_eq!(a.workloads, Workload::ALL);
        assert_eq!(a.read_paths, ReadPath::ALL);
        assert_eq!(a.prefetch, vec![false, true]);
        assert_eq!(a.page_sizes, vec![4096]);
        assert_eq!(a.durability, Durability::Durable);
    }

    #[test]
    fn lists_parse_to_typed_values() {
        let a = parse(&[
            "--scale",
            "smoke",
            "--group-depths",
            "1-3,6",
            "--workloads",
            "erc20_balanceof,sstore_variants",
            "--read-paths",
            "flat",
            "--prefetch",
            "on",
            "--page-sizes",
            "4096,16384",
            "--durability",
            "relaxed",
            "--stems",
            "4M,1M",
        ])
        .unwrap();
        assert_eq!(a.stems, Some(vec![1_000_000, 4_000_000]));
        assert_eq!(a.scale, Scale::Smoke);
        assert_eq!(a.group_depths, vec![1, 2, 3, 6]);
        assert_eq!(
            a.workloads,
            vec![Workload::Erc20Balanceof, Workload::SstoreVariants]
        );
        assert_eq!(a.read_paths, vec![ReadPath::Flat]);
        assert_eq!(a.prefetch, vec![true]);
        assert_eq!(a.page_sizes, vec![4096, 16384]);
        assert_eq!(a.durability, Durability::Relaxed);
    }

    /// A value given twice in a list is measured once (each cell measured twice under one key
    /// made results that `compare` and `--from-results` refuse), in the order first given.
    #[test]
    fn repeated_list_values_are_measured_once() {
        let a = parse(&[
            "--workloads",
            "mixed,erc20_approve,mixed",
            "--read-paths",
            "flat,flat",
            "--prefetch",
            "on,off,on",
            "--page-sizes",
            "8192,4096,8192",
            "--layouts",
            "mdbx,log,mdbx",
        ])
        .unwrap();
        let c = study_config(&a);
        assert_eq!(c.workloads, vec![Workload::Mixed, Workload::Erc20Approve]);
        assert_eq!(c.read_paths, vec![ReadPath::Flat]);
        assert_eq!(c.prefetch, vec![true, false]);
        assert_eq!(c.page_sizes, vec![8192, 4096]);
        assert_eq!(c.layouts, vec![Layout::Mdbx, Layout::Log]);
        assert!(c.validate().is_ok());
        // The library refuses a configuration with a repeat, naming it.
        let twice = StudyConfig {
            page_sizes: vec![4096, 4096],
            ..c
        };
        let e = twice.validate().unwrap_err().to_string();
        assert!(e.contains("--page-sizes lists 4096 twice"), "{e}");
    }
}

/// Arguments of `bintrie compare`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// The first version's `bench` results: `results.json` files or the report directories
    /// holding them, one per invocation, in the order they ran (space-separated, or the flag
    /// repeated).
    #[arg(long, required = true, num_args = 1..)]
    before: Vec<PathBuf>,
    /// The second version's, likewise. Invocations run in alternating rounds (before 1,
    /// after 1, before 2, after 2, ...) pair by position: the i-th after with the i-th before.
    #[arg(long, required = true, num_args = 1..)]
    after: Vec<PathBuf>,
    /// Metrics to compare, by their names in results.json's runs (the possible values below,
    /// e.g. `total_ms,commit_ms`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "total_ms,state_read_ms,trie_update_ms,trie_wait_ms,commit_ms,cpu_ms,ms_per_written_slot,ms_per_cold_read,hash_floor"
    )]
    metrics: Vec<Metric>,
    /// Print the rows as a JSON array instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `bintrie compare`.
pub(crate) fn cmd_compare(args: CompareArgs) -> Result<()> {
    let read = |paths: &[PathBuf]| -> Result<Vec<Results>> {
        paths.iter().map(|p| Results::read(p)).collect()
    };
    let (before, after) = (read(&args.before)?, read(&args.after)?);
    // One invocation twice on a side (one file by two paths, a copy, a gzip of it) would count
    // as two samples; caught by what it records. (On both sides it is fine: a version compared
    // with itself shows no change.)
    for (side, files, paths) in [
        ("before", &before, &args.before),
        ("after", &after, &args.after),
    ] {
        for (i, r) in files.iter().enumerate() {
            if let Some(j) = files[..i].iter().position(|q| q.same_invocation(r)) {
                bail!(
                    "{} and {} hold the same invocation (started {}), given twice on the {side} \
                     side: each invocation is one sample",
                    paths[j].display(),
                    paths[i].display(),
                    r.started
                );
            }
        }
    }
    let rows = bintrie_bench::ab::compare_sides(&before, &after, &unique(&args.metrics));
    anyhow::ensure!(
        !rows.is_empty(),
        "the two sides share no configuration with a kept block and one of the metrics asked for"
    );
    // Settings outside the configuration key that differ: said on stderr (the JSON on stdout
    // keeps its shape) and above the table, since a change may be theirs.
    let differ = bintrie_bench::ab::settings_differences(&before, &after);
    let warning = (!differ.is_empty()).then(|| {
        format!(
            "the invocations differ in settings outside the configuration (a change below may be \
             theirs, not the code's): {}",
            differ.join("; ")
        )
    });
    if let Some(w) = &warning {
        let _ = writeln!(std::io::stderr(), "warning: {w}");
    }
    if args.json {
        return crate::print_line(&serde_json::to_string_pretty(&rows)?);
    }
    let table = report::compare_markdown(&rows);
    match warning {
        Some(w) => crate::print_line(&format!("**Warning:** {w}.\n\n{}", table.trim_end())),
        None => crate::print_line(table.trim_end()),
    }
}
