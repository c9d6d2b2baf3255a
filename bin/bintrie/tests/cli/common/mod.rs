//! Helpers the binary's integration tests share: running the binary, random `KEY VALUE` input,
//! and finding and editing the recorded mainnet fixtures.

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Sends `signal` (as `kill` takes it: `-TERM`, `-HUP`, `-BUS`) to `child`, asserting it was
/// delivered.
pub(crate) fn send_signal(child: &std::process::Child, signal: &str) {
    assert!(
        Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap()
            .success(),
        "kill {signal} {}",
        child.id()
    );
}

/// The `bintrie` binary under test.
pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bintrie"))
}

/// `lines` random `KEY VALUE` lines (unprefixed hex), the same for the same `seed`.
pub(crate) fn input(lines: usize, seed: u64) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..lines)
        .map(|_| {
            let k: [u8; 32] = rng.random();
            let v: [u8; 32] = rng.random();
            format!("{} {}\n", hex::encode(k), hex::encode(v))
        })
        .collect()
}

/// The process's stderr, lossily decoded.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The process's stdout, lossily decoded and trimmed.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The recorded mainnet blocks: `$BINTRIE_FIXTURES`, else `../shared/fixtures/mainnet` next to
/// the repository; fails the test saying so when neither exists.
pub(crate) fn fixtures_dir() -> PathBuf {
    if let Ok(d) = std::env::var("BINTRIE_FIXTURES") {
        return PathBuf::from(d);
    }
    let d = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/mainnet"
    ));
    assert!(
        d.is_dir(),
        "mainnet fixtures not found: set BINTRIE_FIXTURES or provide ../shared/fixtures/mainnet \
         next to the repository (looked at {})",
        d.display()
    );
    d
}

/// The path of fixture `name`; fails the test when it is missing.
pub(crate) fn fixture(name: &str) -> PathBuf {
    let p = fixtures_dir().join(name);
    assert!(p.is_file(), "fixture {} is missing", p.display());
    p
}

/// A JSON file, gzipped or not.
pub(crate) fn read_json(path: &Path) -> Value {
    let raw = std::fs::read(path).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        serde_json::from_reader(flate2::read::GzDecoder::new(raw.as_slice())).unwrap()
    } else {
        serde_json::from_slice(&raw).unwrap()
    }
}

/// A copy of fixture `name` written into `dir` (never into the repository), edited by `edit`.
pub(crate) fn edited(dir: &Path, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut j = read_json(&fixture(name));
    edit(&mut j);
    let out = dir.join(name.trim_end_matches(".gz"));
    std::fs::write(&out, serde_json::to_vec(&j).unwrap()).unwrap();
    out
}

/// Where Ethereum's blockchain tests are (the exec crate's rule).
pub(crate) use bintrie_exec::testing::ethereum_tests_dir;

/// The roots `bintrie import` printed, one per committed block, from its lines
/// `committed block B entries E root R; durable ...`.
pub(crate) fn roots_printed(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("committed block"))
        .filter_map(|l| l.split(" root ").nth(1))
        .map(|r| r.split(';').next().unwrap_or_default().to_string())
        .collect()
}

/// `bintrie info --json --db DB`, which must succeed.
pub(crate) fn info_json(db: &Path) -> serde_json::Value {
    let o = bin()
        .args(["info", "--json", "--db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}
