//! Running many test files in parallel: [`run_files`].

use super::{Status, TestOptions, TestOutcome, load_file, run_test};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The outcome of one test, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TestResult {
    /// The file.
    pub file: PathBuf,
    /// The test's name; for a file that could not be read, the empty string.
    pub name: String,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: TestOutcome,
}

/// A whole run as JSON (`bintrie blockchain-test --json`): `{"passed", "failed", "skipped",
/// "results": [{"file", "name", "status", "reason"}]}`.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Report<'a> {
    /// The counts.
    #[serde(flatten)]
    pub summary: Summary,
    /// Every result.
    pub results: &'a [TestResult],
}

/// Counts of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Tests that passed.
    pub passed: usize,
    /// Tests that failed (or files that could not be read).
    pub failed: usize,
    /// Tests skipped for a stated reason.
    pub skipped: usize,
}

impl std::fmt::Display for Summary {
    /// `N passed, N failed, N skipped`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

impl Summary {
    /// The counts of `results`.
    pub fn of(results: &[TestResult]) -> Self {
        let mut s = Summary::default();
        for r in results {
            s.add(r.outcome.status);
        }
        s
    }

    /// Counts one more test that ended with `status`.
    pub fn add(&mut self, status: Status) {
        match status {
            Status::Passed => self.passed += 1,
            Status::Failed => self.failed += 1,
            Status::Skipped => self.skipped += 1,
        }
    }
}

/// Runs every test in `files` whose name `selected` accepts, on `jobs` threads (files are
/// shared out one at a time), calling `done` after each test (for a progress bar). Returns the
/// results sorted by file and name. A file that cannot be read or parsed gives one failed
/// result with an empty name; a test that does not parse, a failed result with the parse
/// error. A test that panics (a bug: the runner's own, or a dependency's) is a failure that
/// says so, and the run goes on; the panic hook in place still runs (the default one prints
/// the panic on stderr: install another with `std::panic::set_hook` to keep it quiet).
pub fn run_files(
    files: &[PathBuf],
    options: &TestOptions,
    jobs: usize,
    selected: &(dyn Fn(&str) -> bool + Sync),
    done: &(dyn Fn(&TestResult) + Sync),
) -> Vec<TestResult> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, files.len().max(1)) {
            s.spawn(|| {
                while let Some(file) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let mut mine = run_file(file, options, selected, done);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .append(&mut mine);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| (&a.file, &a.name).cmp(&(&b.file, &b.name)));
    results
}

fn run_file(
    file: &Path,
    options: &TestOptions,
    selected: &(dyn Fn(&str) -> bool + Sync),
    done: &(dyn Fn(&TestResult) + Sync),
) -> Vec<TestResult> {
    let result = |name: &str, outcome: TestOutcome| {
        let r = TestResult {
            file: file.to_path_buf(),
            name: name.to_string(),
            outcome,
        };
        done(&r);
        r
    };
    let tests = match load_file(file) {
        Ok(t) => t,
        Err(e) => return vec![result("", TestOutcome::failed(format!("{e:#}")))],
    };
    tests
        .into_iter()
        .filter(|(name, _)| selected(name))
        .map(|(name, test)| {
            let outcome = match test {
                Err(e) => TestOutcome::failed(format!("the test does not parse: {e:#}")),
                Ok(t) => {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_test(&t, options)))
                        .unwrap_or_else(|p| {
                            let msg = p
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| p.downcast_ref::<String>().cloned())
                                .unwrap_or_default();
                            TestOutcome::failed(format!("panicked (a bug): {msg}"))
                        })
                }
            };
            result(&name, outcome)
        })
        .collect()
}
