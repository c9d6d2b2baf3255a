//! `bintrie bench`: the whole-system group-depth study (what `cargo xtask bench` runs).

use anyhow::{Context, Result, bail};
use bintrie_bench::model::{ReadPath, Results, SCHEMA_VERSION, Workload};
use bintrie_bench::runner::{Scale, StudyOptions, run_study};
use bintrie_bench::{report, stats};
use std::path::PathBuf;

/// Arguments of `bintrie bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// Preset sizes: `smoke` (20k stems, 3 runs: checks the pipeline in about a minute), `small`
    /// (1M stems, 10 runs: about 9 minutes on 2 cores), `study` (16M stems per database, 10 runs:
    /// about 30 minutes and one 5-6 GB database at a time).
    #[arg(long, default_value = "small")]
    scale: String,
    /// Random stems per database (overrides the scale's).
    #[arg(long)]
    stems: Option<u64>,
    /// ERC-20 holders with a balance (overrides the scale's).
    #[arg(long)]
    holders: Option<u64>,
    /// Group depths to measure, e.g. `1,5,6` or `1-8` (default: 1-8).
    #[arg(long, default_value = "1-8")]
    group_depths: String,
    /// Workloads, comma-separated: erc20_balanceof, erc20_approve, mixed, sload_benchmark,
    /// sstore_variants (default: all).
    #[arg(long)]
    workloads: Option<String>,
    /// Read paths: `trie` (walk group blobs from the root: the anchor's), `flat` (one lookup in
    /// the stem table), or both.
    #[arg(long, default_value = "trie,flat")]
    read_paths: String,
    /// Prefetch settings: `off`, `on` (the transaction carries an EIP-2930 access list that is
    /// read in parallel before execution), or both.
    #[arg(long, default_value = "off,on")]
    prefetch: String,
    /// MDBX page sizes in bytes, e.g. `4096,16384`.
    #[arg(long, default_value = "4096")]
    page_sizes: String,
    /// Runs per configuration, the dropped first run included (overrides the scale's).
    #[arg(long)]
    runs: Option<u32>,
    /// Percent of the mixed workload's gas spent on balanceOf; the rest approves.
    #[arg(long, default_value_t = 50)]
    mixed_read_pct: u32,
    /// Prefetch worker threads.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Seed of the random state and the per-run keys.
    #[arg(long, default_value_t = 7864)]
    seed: u64,
    /// Report directory (default: target/bench/TIMESTAMP, the start time in UTC).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where databases are built, one at a time (default: OUT/databases).
    #[arg(long)]
    db_dir: Option<PathBuf>,
    /// Keep each database instead of deleting it when its group depth is done.
    #[arg(long)]
    keep_databases: bool,
    /// Measure on the databases a previous `--keep-databases` run left in --db-dir instead of
    /// building new ones (for iterating on the engine; not for reported studies).
    #[arg(long, requires = "db_dir")]
    reuse_databases: bool,
    /// `durable`: every block's commit is fsynced (the default: crash-safe per block).
    /// `relaxed`: MDBX SAFE_NOSYNC, commits stay atomic and the database consistent, but the
    /// last blocks can be lost on a system crash (what a client with a write buffer accepts).
    #[arg(long, default_value = "durable")]
    durability: String,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Do not measure: re-render the report (statistics, report.md, charts, index.html) from
    /// an existing results.json into --out, e.g. after a change to the report.
    #[arg(long, value_name = "RESULTS_JSON")]
    from_results: Option<PathBuf>,
    /// Print results.json to stdout when done (the report is written either way).
    #[arg(long)]
    json: bool,
}

fn list<T>(s: &str, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>> {
    let out: Vec<T> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| parse(x).with_context(|| format!("unknown {what} `{x}`")))
        .collect::<Result<_>>()?;
    if out.is_empty() {
        bail!("no {what} given");
    }
    Ok(out)
}

/// Parses `1,5,6`, `1-8` or a mix (`1-3,6`).
fn group_depths(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let (a, b): (u8, u8) = (
            a.parse()
                .with_context(|| format!("bad group depth `{part}`"))?,
            b.parse()
                .with_context(|| format!("bad group depth `{part}`"))?,
        );
        if a > b || a < 1 || b > 8 {
            bail!("group depths must be within 1..=8 (got `{part}`)");
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        bail!("no group depths given");
    }
    Ok(out)
}

/// Runs `bintrie bench`.
pub(crate) fn cmd_bench(args: BenchArgs) -> Result<()> {
    let scale = Scale::parse(&args.scale)
        .with_context(|| format!("unknown scale `{}` (smoke, small or study)", args.scale))?;
    let out = args.out.clone().unwrap_or_else(|| {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        PathBuf::from("target/bench").join(now.replace(':', "-"))
    });
    let db_dir = args.db_dir.clone().unwrap_or_else(|| out.join("databases"));
    let mut opts = StudyOptions::for_scale(scale, db_dir);
    if let Some(n) = args.stems {
        opts.stems = n;
    }
    if let Some(n) = args.holders {
        opts.holders = n;
    }
    if let Some(n) = args.runs {
        opts.runs = n;
    }
    opts.group_depths = group_depths(&args.group_depths)?;
    if let Some(w) = &args.workloads {
        opts.workloads = list(w, "workload", Workload::parse)?;
    }
    opts.read_paths = list(&args.read_paths, "read path", ReadPath::from_name)?;
    opts.prefetch = list(&args.prefetch, "prefetch setting", |s| match s {
        "off" => Some(false),
        "on" => Some(true),
        _ => None,
    })?;
    opts.page_sizes = list(&args.page_sizes, "page size", |s| s.parse().ok())?;
    opts.mixed_read_pct = args.mixed_read_pct;
    opts.durability = match args.durability.as_str() {
        "durable" => bintrie_store::Durability::Durable,
        "relaxed" => bintrie_store::Durability::Relaxed,
        other => bail!("unknown durability `{other}` (durable or relaxed)"),
    };
    opts.workers = args.workers;
    opts.seed = args.seed;
    opts.keep_databases = args.keep_databases || args.reuse_databases;
    opts.reuse_databases = args.reuse_databases;
    opts.progress = !args.no_progress;
    opts.command = std::env::args().collect::<Vec<_>>().join(" ");

    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut results = match &args.from_results {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let results: Results = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{}: not a results.json of schema {SCHEMA_VERSION}",
                    path.display()
                )
            })?;
            if results.schema_version != SCHEMA_VERSION {
                bail!(
                    "{}: schema version {} (this build reads {SCHEMA_VERSION})",
                    path.display(),
                    results.schema_version
                );
            }
            results
        }
        None => run_study(&opts)?,
    };
    results.summaries = stats::summarize(&results.runs);
    results.comparisons = stats::compare(&results.runs, &bintrie_bench::model::METRICS);
    report::write_report(&results, &out)
        .with_context(|| format!("writing the report into {}", out.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else if args.from_results.is_some() {
        println!(
            "report of {} blocks re-rendered: {}",
            results.runs.len(),
            out.join("report.md").display()
        );
    } else {
        println!(
            "{} blocks measured in {:.0} s; report: {}",
            results.runs.len(),
            results.elapsed_s,
            out.join("report.md").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_depth_lists_and_ranges() {
        assert_eq!(group_depths("1-3,6").unwrap(), vec![1, 2, 3, 6]);
        assert_eq!(group_depths("5").unwrap(), vec![5]);
        assert_eq!(group_depths("8,1,1").unwrap(), vec![1, 8]);
        assert!(group_depths("0-3").is_err());
        assert!(group_depths("9").is_err());
        assert!(group_depths("3-1").is_err());
        assert!(group_depths("x").is_err());
    }

    #[test]
    fn lists_reject_unknown_names() {
        assert!(list("erc20_balanceof,nope", "workload", Workload::parse).is_err());
        assert_eq!(
            list("mixed", "workload", Workload::parse).unwrap(),
            vec![Workload::Mixed]
        );
    }
}
