//! `exec --base-stems N`: the fixture's pre-state on top of N random stems, so that a recorded
//! block reads cold from a B-tree as deep as a real state's instead of a file under 1 MB.

use anyhow::{Context, Result, bail, ensure};
use bintrie_bench::runner::build_random_state;
use bintrie_store::{StateStore, StoreOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The arguments that choose a base.
#[derive(clap::Args, Debug)]
pub(crate) struct BaseArgs {
    /// Put the fixture's pre-state on top of this many random stems (the study's random state:
    /// a quarter accounts, the rest single storage values), so the block reads from a
    /// realistically deep B-tree (with --cold: from disk). 0: no base.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1 << 34))]
    pub base_stems: u64,
    /// Seed of the random base.
    #[arg(long, default_value_t = 7864)]
    pub base_seed: u64,
    /// Keep the base in this directory and reuse it: built there when it is empty or new,
    /// checked (stems, seed, group depth, root) and copied into the block's database when it
    /// holds a base (--layout log: converted into a log once and kept in DIR/log; every run
    /// shares its segments but the last by hard links where the filesystem allows, and copies
    /// the rest); anything else there (a state, other files) is refused, left as it was.
    /// Runs started together on one directory take turns there: one builds, the others wait
    /// and copy. Default: the base is built into the block's database and not kept.
    #[arg(long, requires = "base_stems")]
    pub base_db: Option<PathBuf>,
    /// Memory for building the base, MiB: the state is sorted in runs of this size (spilled
    /// beside the database) and streamed into it.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=1 << 20))]
    pub base_memory_mib: u64,
}

/// The base a block database starts from (what `exec --json` reports as `base`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Base {
    /// Random stems.
    pub stems: u64,
    /// Their seed.
    pub seed: u64,
    /// Group depth of the database.
    pub group_depth: u8,
    /// The block the base is committed as.
    pub block: u64,
    /// Its root.
    pub root: alloy_primitives::B256,
    /// Seconds spent building it (0 when reused).
    #[serde(skip)]
    pub build_s: f64,
    /// Where it was reused from.
    #[serde(skip)]
    pub reused_from: Option<PathBuf>,
}

/// The file beside a kept base's `mdbx.dat` that says what it holds.
const MARKER: &str = "base.json";

/// Puts the base `args` asks for into the empty database directory `dir` (opened with
/// `options`): built there, or copied from --base-db (built there first if it is empty).
/// `None` when no base is asked for.
pub(crate) fn prepare(
    args: &BaseArgs,
    dir: &Path,
    options: &StoreOptions,
    group_depth: u8,
) -> Result<Option<Base>> {
    let Some(located) = locate(args, dir, dir, options, group_depth)? else {
        return Ok(None);
    };
    if located.source != dir {
        copy_database(&located.source, dir)?;
    }
    Ok(Some(located.base))
}

/// A base found or built by [`locate`]: what it is, where it is, and, for a --base-db, that
/// directory held for this process until this is dropped ([`lock_base`]).
pub(crate) struct Located {
    /// The base.
    pub(crate) base: Base,
    /// The directory holding it as an MDBX database.
    pub(crate) source: PathBuf,
    /// The held lock on a --base-db (`None` for a base built for this run alone).
    _lock: Option<std::fs::File>,
}

/// The file in a --base-db that an `exec` holds locked while it builds, checks or copies the
/// base there ([`lock_base`]). A file of its own, not the directory: the store locks the
/// directory while it opens a database in it.
const BASE_LOCK: &str = "base.lock";

/// Locks the --base-db `keep` for this process (an exclusive `flock` on [`BASE_LOCK`] in it,
/// released when the handle is dropped or the process ends), waiting, with a message, while
/// another process holds it. An `exec` holds it while it builds, checks or copies the base, so
/// another one on the same --base-db waits instead of finding the base half built (and being
/// told to remove it) or rebuilding the kept log copy under another's copy. Best effort, as
/// the store's own lock: where the file cannot be made (a read-only base) or the filesystem
/// has no `flock`, the run goes on unlocked, with a warning (`None`).
fn lock_base(keep: &Path) -> Option<std::fs::File> {
    let path = keep.join(BASE_LOCK);
    let unlocked = |e: &dyn std::fmt::Display| {
        tracing::warn!(path = %path.display(), error = %e, "cannot lock the base: going on unlocked (one run at a time on it)");
    };
    // A read-only base can still be locked through a lock file that is there already.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .or_else(|e| std::fs::File::open(&path).map_err(|_| e));
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            unlocked(&e);
            return None;
        }
    };
    match file.try_lock() {
        Ok(()) => return Some(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            tracing::warn!(base = %keep.display(), "another process is building or copying this base: waiting for it");
        }
        Err(std::fs::TryLockError::Error(e)) => {
            unlocked(&e);
            return None;
        }
    }
    match file.lock() {
        Ok(()) => Some(file),
        Err(e) => {
            unlocked(&e);
            None
        }
    }
}

/// Whether `a` and `b` are one directory: the same real path (links and `.` resolved), or the
/// same path as given when either cannot be resolved (one that does not exist yet).
pub(crate) fn same_directory(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The base `args` asks for as an MDBX database, and the directory that holds it: --base-db
/// (built there first if it is empty; refused unless empty or a base, [`check_base_dir`]),
/// or `build_into` (empty) when there is no --base-db. `None` when no base is asked for.
/// `dir` is the block's database directory. A --base-db is held ([`lock_base`]) from before
/// it is looked at until the result is dropped: keep it while copying from it.
pub(crate) fn locate(
    args: &BaseArgs,
    dir: &Path,
    build_into: &Path,
    options: &StoreOptions,
    group_depth: u8,
) -> Result<Option<Located>> {
    if args.base_stems == 0 {
        return Ok(None);
    }
    let mut lock = None;
    if let Some(keep) = &args.base_db {
        for d in [keep.as_path(), dir] {
            ensure!(
                !d.exists() || d.is_dir(),
                "{} is not a directory",
                d.display()
            );
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        ensure!(
            !same_directory(keep, dir),
            "--base-db and --db must be different directories"
        );
        // Before the lock file is made in it, so that a directory that is not a base keeps no
        // trace; one that holds the lock file may hold a base another exec is building (files
        // but no marker yet): checked once the lock is held, when no build is under way.
        if !keep.join(BASE_LOCK).exists() {
            check_base_dir(keep)?;
        }
        lock = lock_base(keep);
        check_base_dir(keep)?;
    }
    ensure!(
        crate::durability::held_layout(dir)?.is_none(),
        "{} already holds a database: a base goes into an empty one",
        dir.display()
    );
    let Some(keep) = &args.base_db else {
        return build(args, build_into, options, group_depth).map(|base| {
            Some(Located {
                base,
                source: build_into.to_path_buf(),
                _lock: None,
            })
        });
    };
    let base = if keep.join("mdbx.dat").exists() {
        let base = read_marker(keep)?;
        ensure!(
            (base.stems, base.seed, base.group_depth)
                == (args.base_stems, args.base_seed, group_depth),
            "{} holds a base of {} stems (seed {}, group depth {}), not the {} stems (seed {}, \
             group depth {group_depth}) asked for: use another --base-db or remove it",
            keep.display(),
            base.stems,
            base.seed,
            base.group_depth,
            args.base_stems,
            args.base_seed
        );
        let meta = StateStore::open_read_only(keep)
            .with_context(|| format!("opening the base in {}", keep.display()))?
            .meta();
        ensure!(
            (meta.block, meta.root) == (base.block, base.root.0),
            "{}: the database is at block {} and not the base its {MARKER} describes (block {}, \
             root {}): it was written to since; remove it to rebuild",
            keep.display(),
            meta.block,
            base.block,
            base.root
        );
        Base {
            reused_from: Some(keep.clone()),
            ..base
        }
    } else {
        let base = build(args, keep, options, group_depth)?;
        // Through a synced temporary and a rename: a kill mid-write leaves no torn marker.
        bintrie_bench::runner::write_json_replacing(&keep.join(MARKER), &base)?;
        base
    };
    Ok(Some(Located {
        base,
        source: keep.clone(),
        _lock: lock,
    }))
}

/// Builds the base into `dir`.
fn build(args: &BaseArgs, dir: &Path, options: &StoreOptions, group_depth: u8) -> Result<Base> {
    let t = Instant::now();
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} building the base: {pos} stems placed ({per_sec}), {elapsed}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let budget = usize::try_from(args.base_memory_mib << 20).unwrap_or(usize::MAX);
    let root = build_random_state(
        dir,
        options,
        args.base_stems,
        args.base_seed,
        &[],
        budget,
        &|n| bar.set_position(n),
    );
    bar.finish_and_clear();
    let root = root.with_context(|| {
        format!(
            "building a base of {} random stems in {}",
            args.base_stems,
            dir.display()
        )
    })?;
    tracing::info!(stems = args.base_stems, %root, "base built");
    Ok(Base {
        stems: args.base_stems,
        seed: args.base_seed,
        group_depth,
        block: 1,
        root,
        build_s: t.elapsed().as_secs_f64(),
        reused_from: None,
    })
}

/// Refuses a --base-db `keep` that is neither a base nor empty: one that holds a database
/// without [`MARKER`] (an MDBX database that is not a base, or a log state) or anything else
/// when it holds no database (a base is built only into an empty directory, so the user's
/// files and states are never written beside). A lock file left by an earlier run is not
/// counted. A base whose build was interrupted (`mdbx.dat` without its marker) is refused,
/// with the advice to remove it.
fn check_base_dir(keep: &Path) -> Result<()> {
    if keep.join("mdbx.dat").exists() {
        if keep.join(MARKER).exists() {
            return Ok(());
        }
        // Its message: not a base, or an interrupted build.
        return read_marker(keep).map(|_| ());
    }
    let entries = std::fs::read_dir(keep)
        .with_context(|| format!("cannot read the directory {}", keep.display()))?;
    let mut others = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read the directory {}", keep.display()))?;
        if entry.file_name() != BASE_LOCK {
            others.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    others.sort();
    if others.is_empty() {
        return Ok(());
    }
    let layout = match crate::durability::held_layout(keep) {
        Ok(Some(layout)) => format!(
            "a state of the {} layout, not a base made by `exec --base-db`",
            layout.name()
        ),
        _ => {
            let more = others.len().saturating_sub(5);
            others.truncate(5);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("files ({}{more}) but no base", others.join(", "))
        }
    };
    bail!(
        "--base-db {} holds {layout}: a base is built only into an empty or new directory, and \
         reused from one that holds a base; give another directory",
        keep.display()
    )
}

fn read_marker(keep: &Path) -> Result<Base> {
    let path = keep.join(MARKER);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} holds a database without {MARKER}: not a base made by `exec --base-db` (give \
             another directory), or one whose build was interrupted (remove it to rebuild)",
            keep.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        // A FIFO would block the read, a device never end it.
        Ok(m) if !m.is_file() => bail!(
            "{} is not a regular file: not a base description; remove {} to rebuild",
            path.display(),
            keep.display()
        ),
        Ok(_) => {}
    }
    // Bounded: a base description is a few hundred bytes.
    let bytes = bintrie_exec::input::read_file_at_most(&path, 64 << 10)?;
    serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{}: not a base description (damaged, or not written by `exec --base-db`): remove \
             {} to rebuild",
            path.display(),
            keep.display()
        )
    })
}

/// Copies the data file of the closed database in `from` into the empty directory `to` and
/// syncs it (so that a later eviction can drop its pages: dirty pages stay cached).
fn copy_database(from: &Path, to: &Path) -> Result<()> {
    let (src, dst) = (from.join("mdbx.dat"), to.join("mdbx.dat"));
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    // Under the directory's lock, which a log-layout `exec` or `import` holds while it runs
    // there: a database is never copied in beside a log another process is making.
    let _lock = bintrie_bench::runner::lock_dir(to, "exec", "--db")?;
    if crate::durability::held_layout(to)?.is_some() {
        anyhow::bail!(
            "{} holds a database made by another process meanwhile: the base is not copied \
             in beside it",
            to.display()
        );
    }
    copy_synced(&src, &dst)
}

/// Copies the file `from` to `to` and syncs the copy.
fn copy_synced(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", to.display()))
}

/// Puts `base`, an MDBX database in `source`, into the empty directory `dir` as a log and
/// opens it there with `options`, returning the open log, which holds the base (its block and
/// root). With `keep` (`source` is a kept --base-db), the log is kept too, in `source/log`,
/// sealed ([`bintrie_logstore::LogStore::seal`]: its last segment empty), and later runs share
/// its other segments by hard links and copy only the last, instead of converting again. The
/// copy is checked where it is opened anyway: a kept log the check blames (it holds another
/// block or root than the base, or its open finds it damaged, half built or of another group
/// depth) is rebuilt from the base and copied again, once; any other failure (copying into
/// `dir`, say) is returned as it is, the kept log left alone. (The kept log is not opened
/// first, but once to seal it when it was kept unsealed: that open would scan every segment
/// a second time, about 40% of a run on a 4M-stem base.)
pub(crate) fn copy_into_log(
    base: &Base,
    source: &Path,
    keep: bool,
    dir: &Path,
    options: &bintrie_logstore::LogOptions,
) -> Result<bintrie_logstore::LogStore> {
    let from_mdbx = |to: &Path| -> Result<bintrie_logstore::LogStore> {
        let src = StateStore::open_read_only(source)
            .with_context(|| format!("opening the base in {}", source.display()))?;
        bintrie_bench::runner::copy_into_log(&src, to, options)
    };
    let holds_base = |dir: &Path, log: &bintrie_logstore::LogStore| -> Result<()> {
        let meta = log.meta();
        if (meta.block, meta.root) == (base.block, base.root.0) {
            return Ok(());
        }
        Err(NotTheBase(format!(
            "{} holds block {} (root {}), not the base's block {} (root {})",
            dir.display(),
            meta.block,
            alloy_primitives::B256::from(meta.root),
            base.block,
            base.root
        ))
        .into())
    };
    let open = |dir: &Path| -> Result<bintrie_logstore::LogStore> {
        let log = crate::db::open_log(dir, Some(options))?;
        holds_base(dir, &log)?;
        Ok(log)
    };
    if !keep {
        drop(from_mdbx(dir)?);
        return open(dir);
    }
    let kept = source.join("log");
    let stale = |e: &anyhow::Error| {
        tracing::warn!(
            kept = %kept.display(),
            error = format!("{e:#}"),
            "the kept log copy of the base does not hold the base: rebuilding it"
        );
    };
    let listed = bintrie_logstore::segment_files(&kept)
        .with_context(|| format!("listing {}", kept.display()))?;
    if let Some((_, last)) = listed.last() {
        // A log kept before seals existed: sealed once, here (a scan of its segments). Best
        // effort: one that cannot be (a read-only base) is copied whole, its last segment
        // with the others.
        let seal = || -> Result<()> {
            let meta =
                std::fs::metadata(last).with_context(|| format!("reading {}", last.display()))?;
            if meta.len() == 0 {
                return Ok(());
            }
            let mut log = crate::db::open_log(
                &kept,
                Some(&bintrie_logstore::LogOptions {
                    group_depth: Some(base.group_depth),
                    compact_garbage: None,
                    ..Default::default()
                }),
            )?;
            holds_base(&kept, &log)?;
            log.seal()
                .with_context(|| format!("sealing {}", kept.display()))
        };
        let usable = match seal() {
            Ok(()) => true,
            Err(e) if blames_the_log(&e) => {
                stale(&e);
                false
            }
            Err(e) => {
                tracing::warn!(
                    kept = %kept.display(),
                    error = format!("{e:#}"),
                    "the kept log of the base could not be sealed: copying it whole"
                );
                true
            }
        };
        if usable {
            copy_log_files(&kept, dir)?;
            match open(dir) {
                Ok(log) => return Ok(log),
                Err(e) if blames_the_log(&e) => {
                    stale(&e);
                    remove_log_files(dir)?;
                }
                Err(e) => return Err(e),
            }
        }
    }
    if kept.exists() {
        std::fs::remove_dir_all(&kept)
            .with_context(|| format!("removing {} to rebuild it from the base", kept.display()))?;
    }
    from_mdbx(&kept)?
        .seal()
        .with_context(|| format!("sealing {}", kept.display()))?;
    copy_log_files(&kept, dir)?;
    open(dir)
}

/// A log that holds another block or root than the base it was made from.
#[derive(Debug)]
struct NotTheBase(String);

impl std::fmt::Display for NotTheBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotTheBase {}

/// Whether `e`, from opening a log (or checking what it holds), says the log itself is not the
/// base: another block or root ([`NotTheBase`]), damage, a bulk load never finished, no
/// committed block, another group depth. Not a failure of the machine (an I/O error, a lock
/// held elsewhere), which rebuilding the log would not mend.
fn blames_the_log(e: &anyhow::Error) -> bool {
    use bintrie_logstore::LogError;
    e.downcast_ref::<NotTheBase>().is_some()
        || matches!(
            e.downcast_ref::<LogError>(),
            Some(
                LogError::Corrupt(_)
                    | LogError::Building
                    | LogError::Uncommitted(_)
                    | LogError::GroupDepth { .. }
                    | LogError::NotFound(_)
            )
        )
}

/// Puts the log files of `kept` into `dir` (created if missing), each synced: the index's
/// sizes (a hint that lets the copy's open size its tables before the scan) and the last
/// segment copied, the other segments hard links to `kept`'s (no writer changes them once
/// `kept` is sealed), or copies where a link cannot be made (another filesystem).
fn copy_log_files(kept: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let segments = bintrie_logstore::segment_files(kept)
        .with_context(|| format!("listing {}", kept.display()))?;
    let copy = |from: &Path| copy_synced(from, &dir.join(from.file_name().unwrap_or_default()));
    let sizes = kept.join(bintrie_logstore::INDEX_SIZES_FILE);
    if sizes.is_file() {
        copy(&sizes)?;
    }
    let Some(((_, last), earlier)) = segments.split_last() else {
        bail!("{} holds no log segment", kept.display());
    };
    for (_, from) in earlier {
        let to = dir.join(from.file_name().unwrap_or_default());
        match std::fs::hard_link(from, &to) {
            Ok(()) => {}
            // Links cannot be made here (another filesystem, one without links, a file at its
            // most links): a copy instead. Any other failure is an error: a copy onto a name
            // that exists (a link to the same file) would empty the kept segment.
            Err(e)
                if e.kind() == std::io::ErrorKind::CrossesDevices
                    || matches!(
                        e.raw_os_error(),
                        Some(libc::EPERM | libc::EMLINK | libc::EOPNOTSUPP)
                    ) =>
            {
                tracing::debug!(from = %from.display(), error = %e, "no hard link: copying");
                copy(from)?;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("linking {} to {}", from.display(), to.display()));
            }
        }
    }
    copy(last)?;
    // The directory's new entries (the links above all) on the device too.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

/// Removes from `dir` the files a log keeps there (what [`copy_log_files`] copied, and the
/// writer's lock an open made), leaving the directory and anything else in it.
fn remove_log_files(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if bintrie_logstore::is_log_file_name(&entry.file_name()) {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A marker torn by a kill mid-write (before it was written through a temporary and a
    /// rename) is refused saying what to do, as a missing one is.
    #[test]
    fn a_torn_marker_says_to_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        for torn in [&b""[..], b"{\"stems\": 20", b"\xff\xfe{"] {
            std::fs::write(dir.path().join(MARKER), torn).unwrap();
            let err = format!("{:#}", read_marker(dir.path()).unwrap_err());
            assert!(err.contains("not a base description"), "{err}");
            assert!(err.contains("to rebuild"), "{err}");
        }
        std::fs::remove_file(dir.path().join(MARKER)).unwrap();
        let err = format!("{:#}", read_marker(dir.path()).unwrap_err());
        assert!(err.contains("to rebuild"), "{err}");
        // A FIFO or a device there is refused unread (the read would block, or never end).
        // (Made by calls, not by `mkfifo` and `ln`: a child process holds every descriptor of
        // this process, other tests' lock files among them, between its fork and its exec.)
        for fifo in [true, false] {
            let path = dir.path().join(MARKER);
            if fifo {
                bintrie_exec::testing::make_fifo(&path);
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            }
            let err = format!("{:#}", read_marker(dir.path()).unwrap_err());
            assert!(
                err.contains("is not a regular file") && err.contains("to rebuild"),
                "{err}"
            );
            std::fs::remove_file(dir.path().join(MARKER)).unwrap();
        }
        // Larger than any description: refused at the bound.
        std::fs::write(dir.path().join(MARKER), vec![b' '; 100 << 10]).unwrap();
        let err = format!("{:#}", read_marker(dir.path()).unwrap_err());
        assert!(err.contains("larger than"), "{err}");
    }
}
