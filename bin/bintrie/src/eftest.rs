//! `bintrie blockchain-test`: Ethereum's blockchain tests on the binary-trie state.

use anyhow::{Context, Result, bail};
use bintrie_exec::blockchain_test::{
    Report, Status, Summary, TestOptions, TestResult, run_files, test_files,
};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `bintrie blockchain-test`.
#[derive(clap::Args, Debug)]
pub(crate) struct BlockchainTestArgs {
    /// Test files (`.json`, `.json.gz`) or directories, searched recursively, e.g.
    /// `../shared/fixtures/ethereum-tests/BlockchainTests`.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print one JSON object instead of the summary: `{"passed", "failed", "skipped",
    /// "results": [{"file", "name", "status", "reason"}]}`.
    #[arg(long)]
    pub(crate) json: bool,
    /// Tests run in parallel, at least 1 (default: the number of CPUs).
    #[arg(long, value_parser = job_count)]
    jobs: Option<usize>,
    /// Binary levels per stored node of each test's state (1..=8); the root does not depend
    /// on it.
    #[arg(long, short = 'g', default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=8))]
    group_depth: u8,
    /// Also run every accepted block statelessly from its witness (both encodings, written
    /// out and read back: no state, every read proven against the pre-state root) and fail
    /// the test unless it passes the same checks and reaches the same root.
    #[arg(long)]
    stateless: bool,
    /// Run only the tests whose name matches this regular expression.
    #[arg(long)]
    filter: Option<String>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// Parses `--jobs` ([`crate::parse_at_least_one`]).
fn job_count(s: &str) -> Result<usize, String> {
    crate::parse_at_least_one(s, "tests run at a time", "at least 1 test runs at a time")
}

/// Runs `bintrie blockchain-test`; exit status 1 (an error) when any test fails or none ran.
pub(crate) fn cmd_blockchain_test(args: BlockchainTestArgs) -> Result<()> {
    let filter = args
        .filter
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--filter")?;
    let files = test_files(&args.paths)?;
    if files.is_empty() {
        bail!("no .json or .json.gz test files under the given paths");
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} {spinner} {pos} tests ({per_sec}) of {len} files: {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_length(files.len() as u64);
        bar
    };
    let counts = std::sync::Mutex::new(Summary::default());
    let options = TestOptions::default()
        .with_group_depth(args.group_depth)
        .with_stateless(args.stateless);
    let selected = |name: &str| filter.as_ref().is_none_or(|f| f.is_match(name));
    let done = |r: &TestResult| {
        let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
        c.add(r.outcome.status);
        bar.inc(1);
        bar.set_message(c.to_string());
    };
    let results = run_files(&files, &options, jobs, &selected, &done);
    bar.finish_and_clear();
    let summary = Summary::of(&results);
    let mut out = std::io::stdout().lock();
    if args.json {
        let report = Report {
            summary,
            results: &results,
        };
        serde_json::to_writer(&mut out, &report).context(crate::WRITING)?;
        writeln!(out).context(crate::WRITING)?;
        crate::json_written();
    } else {
        for r in results
            .iter()
            .filter(|r| r.outcome.status != Status::Passed)
        {
            writeln!(
                out,
                "{:?} {} {}: {}",
                r.outcome.status,
                r.file.display(),
                r.name,
                r.outcome.reason.as_deref().unwrap_or("")
            )
            .context(crate::WRITING)?;
        }
        writeln!(out, "{summary} ({} files)", files.len()).context(crate::WRITING)?;
    }
    out.flush().context(crate::WRITING)?;
    if results.is_empty() {
        bail!(
            "no test ran: {}",
            if filter.is_some() {
                "--filter matched no test in the given files"
            } else {
                "the given files hold no test"
            }
        );
    }
    if summary.failed > 0 {
        bail!("{} of {} tests failed", summary.failed, results.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--jobs` takes a whole number from 1; 0 is refused, saying so, not run as 1.
    #[test]
    fn jobs_are_at_least_one() {
        assert_eq!(job_count("1"), Ok(1));
        assert_eq!(job_count("16"), Ok(16));
        assert_eq!(
            job_count("0"),
            Err("at least 1 test runs at a time".to_string())
        );
        for bad in ["-1", "two", ""] {
            let e = job_count(bad).unwrap_err();
            assert!(e.ends_with("at least 1"), "{bad}: {e}");
        }
    }
}
