//! Opening a store: validating an existing file before MDBX may touch it, read-only opens
//! that never write, and the directory lock that serialises opens.

use crate::*;

/// Why a database whose sorted build was interrupted is refused.
const INTERRUPTED_BUILD: &str = "an interrupted sorted build (killed before its last \
    transaction): nothing in it is usable; delete the directory and build again";

/// An advisory lock (`flock`) on a database directory, held while a store is opened, so that
/// one process creating a database and another opening it never see a half-made file. Best
/// effort: where the filesystem has no `flock` (some network filesystems), opens go unlocked.
struct DirLock(#[allow(dead_code)] Option<std::fs::File>);

impl DirLock {
    /// Waits for the exclusive lock (a writer's open).
    fn exclusive(dir: &FsPath) -> Self {
        Self::take(dir, std::fs::File::lock)
    }

    /// Waits for a shared lock (a reader's open).
    fn shared(dir: &FsPath) -> Self {
        Self::take(dir, std::fs::File::lock_shared)
    }

    fn take(dir: &FsPath, lock: fn(&std::fs::File) -> std::io::Result<()>) -> Self {
        match std::fs::File::open(dir).and_then(|f| lock(&f).map(|()| f)) {
            Ok(f) => DirLock(Some(f)),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "opening without a directory lock");
                DirLock(None)
            }
        }
    }
}

/// Whether `dir` holds a file named as a log layout segment (`log.` and six digits), the
/// appending layout's state (crate `bintrie-logstore`, which this crate does not depend on).
fn holds_log_segment(dir: &FsPath) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("log."))
                .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// What a reopened handle keeps: its write buffer and its (locked) journal.
pub(crate) struct Kept {
    meta: Meta,
    pending: buffer::Pending,
    journal: buffer::Journal,
}

/// Whether MDBX refused to open an environment because this process has it open already
/// (`Busy` from a read-only open, EAGAIN from a writer's), [`StoreError::OpenInProcess`].
fn open_in_process(e: &libmdbx::Error) -> bool {
    matches!(e, libmdbx::Error::Busy)
        || matches!(e, libmdbx::Error::Other(code) if *code == libc::EAGAIN)
}

/// The smallest page size a database is made with ([`StoreOptions::page_size`]).
const MIN_PAGE_SIZE: usize = 4096;

/// What MDBX's "No data available" on opening means: a page it needs lies past the file's end.
const SHORT_OR_FOREIGN: &str = "the file is shorter than its own header says (cut short: a \
    truncated copy?) or is not an MDBX file; restore it or build it again";

/// Why a reader refuses an empty data file ([`check_whole_pages`]).
const CREATION_CUT_SHORT: &str = "an empty file: a database whose creation was cut short (its \
    creator stopped before MDBX wrote its first pages), holding nothing; if no writer is \
    running, open it for writing once to make it (`bintrie import --db DIR -i /dev/null` does \
    only that), or delete it";

/// Refuses a data file cut short: MDBX sizes it in whole pages (a database this project makes
/// has pages of [`MIN_PAGE_SIZE`] or a multiple), so a length that is not a multiple of 4 KiB is a
/// truncated copy, never an unclean close. Refused before MDBX opens it: a writer's open
/// would cut the partial page and fail, changing the damaged file. A data file that is not a
/// regular file (a directory) is refused too.
///
/// Returns whether the file is empty: what a creation killed before MDBX wrote its first pages
/// leaves (MDBX writes its meta pages in one write, then sizes the file). It holds nothing, so
/// a writer that may create lets MDBX make the database in it, and a reader refuses it saying
/// so ([`open_read_only`]). Only a file of the directory's own counts, not a symbolic link to
/// an empty file elsewhere (MDBX's open then refuses that). A file whose length cannot be read
/// is left to the open (`false`).
fn check_whole_pages(data: &FsPath) -> Result<bool, StoreError> {
    let len = match std::fs::metadata(data) {
        Ok(m) if m.is_file() => m.len(),
        // MDBX said "File descriptor in bad state" of a directory there.
        Ok(m) => {
            return Err(StoreError::NotADatabase {
                path: data.to_path_buf(),
                reason: format!(
                    "not a regular file but {}",
                    if m.is_dir() {
                        "a directory"
                    } else {
                        "a device, a FIFO or a socket"
                    }
                ),
            });
        }
        Err(_) => return Ok(false),
    };
    if len.is_multiple_of(MIN_PAGE_SIZE as u64) {
        let own = std::fs::symlink_metadata(data).is_ok_and(|m| m.is_file());
        return Ok(len == 0 && own);
    }
    Err(StoreError::NotADatabase {
        path: data.to_path_buf(),
        reason: format!(
            "{len} bytes, not a whole number of 4 KiB pages: the file was cut short (a \
             truncated copy?); restore it or build it again"
        ),
    })
}

/// Opens the environment read-only (`MDBX_RDONLY`, accepting the mode of a running writer) and
/// reads its meta: `None` for a valid MDBX environment that has no table yet (a database
/// being created). Never creates, formats or writes the data file. An empty data file is
/// [`StoreError::NotADatabase`], saying it is a creation cut short and how to finish it.
pub(crate) fn open_read_only(
    dir: &FsPath,
) -> Result<(Database<MapKind>, Option<Meta>), StoreError> {
    let data = dir.join("mdbx.dat");
    let not_db = |reason: String| StoreError::NotADatabase {
        path: data.clone(),
        reason,
    };
    if check_whole_pages(&data)? {
        return Err(not_db(CREATION_CUT_SHORT.into()));
    }
    let db = Database::<MapKind>::open_with_options(
        dir,
        DatabaseOptions {
            max_tables: Some(8),
            max_readers: Some(256),
            no_rdahead: true,
            accede: true,
            mode: Mode::ReadOnly,
            ..Default::default()
        },
    )
    .map_err(|e| match e {
        // A header page past the file's end: what a copy cut at a page boundary gives.
        libmdbx::Error::NoData => not_db(format!("MDBX cannot open it: {e}; {SHORT_OR_FOREIGN}")),
        libmdbx::Error::Other(code) if code == libc::ENODATA => {
            not_db(format!("MDBX cannot open it: {e}; {SHORT_OR_FOREIGN}"))
        }
        libmdbx::Error::Invalid
        | libmdbx::Error::Corrupted
        | libmdbx::Error::PageNotFound
        | libmdbx::Error::VersionMismatch
        | libmdbx::Error::Problem
        | libmdbx::Error::Panic => not_db(format!("MDBX cannot open it: {e}")),
        libmdbx::Error::Other(code) if code == libc::EINVAL => {
            not_db(format!("MDBX cannot open it: {e}"))
        }
        libmdbx::Error::WannaRecovery => StoreError::NeedsRecovery(dir.to_path_buf()),
        e if open_in_process(&e) => StoreError::OpenInProcess(dir.to_path_buf()),
        // Readers register in MDBX's reader table, in the lock file beside the data.
        libmdbx::Error::Access | libmdbx::Error::PermissionDenied => {
            StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "permission denied: reading {} needs read access to mdbx.dat and write \
                     access to mdbx.lck (MDBX's table of readers)",
                    dir.display()
                ),
            ))
        }
        other => map_err(other),
    })?;
    let meta = {
        let txn = db.begin_ro_txn().map_err(map_err)?;
        let mut missing = Vec::new();
        for t in [T_NODES, T_STEMS, T_CODE, T_META] {
            match txn.open_table(Some(t)) {
                Ok(_) => {}
                Err(libmdbx::Error::NotFound) => missing.push(t),
                Err(e) => return Err(map_err(e)),
            }
        }
        if missing.len() == 4 {
            // A valid MDBX environment without any table: one whose creation has not
            // committed its first transaction yet (another process is creating it, or one
            // was killed doing so). It holds no data.
            None
        } else if let Some(t) = missing.first() {
            return Err(not_db(format!("no `{t}` table")));
        } else {
            let mt = txn.open_table(Some(T_META)).map_err(map_err)?;
            if txn
                .get::<libmdbx::ObjectLength>(&mt, M_BUILDING)
                .map_err(map_err)?
                .is_some()
            {
                return Err(not_db(INTERRUPTED_BUILD.into()));
            }
            Some(read_meta(&txn, &mt)?.ok_or_else(|| not_db("its meta table is empty".into()))?)
        }
    };
    Ok((db, meta))
}

impl StateStore {
    /// Opens the database in directory `dir`.
    ///
    /// - `options.read_only`: the database must exist ([`StoreError::NotFound`]); nothing is
    ///   created or written, see [`StoreOptions::read_only`].
    /// - otherwise a missing database is created (unless `options.create` is false); an
    ///   existing data file is first opened read-only and must be a bintrie database of this
    ///   format, else [`StoreError::NotADatabase`] and nothing is written (MDBX would otherwise
    ///   format a short file over). The one exception is an empty data file, what a creation
    ///   killed before MDBX wrote anything leaves: a writer that may create makes the database
    ///   in it (with a warning); one that may not, and a reader, refuse it
    ///   ([`StoreError::NotADatabase`], saying so). An existing database keeps its group depth:
    ///   asking for another is [`StoreError::GroupDepthMismatch`].
    ///
    /// A writer replays the blocks its journal holds past MDBX's last sync (after a power loss
    /// under a buffered writer) and syncs them before it returns; a read-only open leaves them
    /// to the next writer (with a warning).
    pub fn open(dir: impl AsRef<FsPath>, options: &StoreOptions) -> Result<Self, StoreError> {
        Self::open_with(dir.as_ref(), options, None)
    }

    /// `open`, keeping the write buffer and journal of a handle being reopened (`kept`).
    pub(crate) fn open_with(
        dir: &FsPath,
        options: &StoreOptions,
        kept: Option<Kept>,
    ) -> Result<Self, StoreError> {
        let dir = dir.to_path_buf();
        if let Some(b) = &options.buffer
            && b.max_blocks == 0
        {
            return Err(StoreError::Options(
                "a write buffer holds at least 1 block".into(),
            ));
        }
        let data = dir.join("mdbx.dat");
        let exists = match std::fs::symlink_metadata(&data) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e.into()),
        };
        if let Some(g) = options.group_depth
            && !(1..=8).contains(&g)
        {
            return Err(StoreError::Options(format!("group depth {g} outside 1..8")));
        }
        if exists {
            check_whole_pages(&data)?;
        }
        if !exists && (options.read_only || !options.create) {
            return Err(StoreError::NotFound(dir));
        }
        // The shape a database was made with: a group depth or page size asked for that is not
        // its own is refused, never silently ignored.
        let check_shape = |meta: &Meta| match (options.group_depth, options.page_size) {
            (Some(req), _) if req != meta.group_depth => Err(StoreError::GroupDepthMismatch {
                stored: meta.group_depth,
                requested: req,
            }),
            (_, Some(p)) if p != meta.page_size as usize => Err(StoreError::Options(format!(
                "the database's page size is {} bytes, not the {p} asked for: a page size is \
                 chosen when a database is made",
                meta.page_size
            ))),
            _ => Ok(()),
        };
        if options.read_only {
            check_room_for_lock(&dir)?;
            let _open_lock = DirLock::shared(&dir);
            let (db, meta) = open_read_only(&dir)?;
            let meta = meta.ok_or_else(|| StoreError::NotADatabase {
                path: data.clone(),
                reason: "an MDBX environment without tables: a database still being created".into(),
            })?;
            check_shape(&meta)?;
            // A buffered writer empties its journal at every flush, so one that is not empty
            // holds blocks past MDBX's last sync (or, after a crash between a flush and the
            // emptying, none that count). A stat, not a read: every reader opens here, and
            // `check_journal` (info, verify) reads and checks it whole.
            if let Ok(m) = std::fs::metadata(dir.join(buffer::JOURNAL))
                && m.len() > 0
            {
                tracing::warn!(
                    at = meta.block,
                    journal_bytes = m.len(),
                    "the database's write journal is not empty: a buffered writer is still \
                     running (its next flush syncs its blocks), or one stopped before its flush \
                     (the next writer replays them); this handle reads MDBX's last commit, \
                     which may be past its last sync (`bintrie info` lists the journaled blocks \
                     past it)"
                );
            }
            return Ok(StateStore {
                inner: Arc::new(Inner {
                    db,
                    dir,
                    read_only: true,
                    warm: Default::default(),
                    pending: Default::default(),
                    journal: Default::default(),
                    options: options.clone(),
                }),
                meta,
            });
        }
        // Opening for writing may create and format the data file. Two processes doing that
        // at once would each see the other's half-made file and call it "not a database";
        // opens are serialised by a lock on the directory, held until the tables exist.
        std::fs::create_dir_all(&dir)?;
        check_room_for_lock(&dir)?;
        let _open_lock = DirLock::exclusive(&dir);
        let exists = exists || data.exists();
        // Read under the lock, which a creation holds until its tables exist: an empty file
        // now is one whose creator was killed.
        let empty = exists && check_whole_pages(&data)?;
        // Under the directory's lock, which the command line's log-layout writers also hold
        // while they make a log: of two writers of different layouts starting on one new
        // directory, the second finds the first's state and is refused.
        if (!exists || empty) && holds_log_segment(&dir) {
            return Err(StoreError::OtherLayout(dir));
        }
        if empty && !options.create {
            return Err(StoreError::NotADatabase {
                path: data,
                reason: CREATION_CUT_SHORT.into(),
            });
        }
        if empty {
            tracing::warn!(
                path = %data.display(),
                "an empty data file (a creation cut short): making the database in it"
            );
        } else if exists {
            // Validate before MDBX opens it for writing: never format over a file that is not
            // a database of this format.
            match open_read_only(&dir) {
                Ok((_, Some(meta))) => check_shape(&meta)?,
                Ok((_, None)) => {}
                // A real MDBX file that a killed writer left for recovery: the open for
                // writing below recovers it, and its tables and meta are checked after.
                Err(StoreError::NeedsRecovery(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // The journal's lock before MDBX opens for writing: a buffered writer must be alone (and MDBX would refuse a
        // second open in this process with a less helpful error).
        let opened_journal = match &kept {
            None => Some(buffer::Journal::open(
                &dir,
                options.buffer.is_some(),
                options.durability == Durability::Durable,
            )?),
            Some(_) => None,
        };
        let page_size = match options.page_size {
            None => None,
            Some(p) if p.is_power_of_two() && (MIN_PAGE_SIZE..=65536).contains(&p) => {
                Some(PageSize::Set(p))
            }
            Some(p) => {
                return Err(StoreError::Options(format!(
                    "page size {p}: a power of two from 4096 to 65536"
                )));
            }
        };
        let open = |sync_mode: SyncMode| {
            Database::<MapKind>::open_with_options(
                &dir,
                DatabaseOptions {
                    max_tables: Some(8),
                    max_readers: Some(256),
                    page_size: page_size.clone(),
                    no_rdahead: true,
                    mode: Mode::ReadWrite(ReadWriteOptions {
                        sync_mode,
                        min_size: None,
                        max_size: Some(options.max_size.unwrap_or(1 << 40) as isize),
                        growth_step: options.growth_step.map(|g| g as isize),
                        shrink_threshold: None,
                    }),
                    ..Default::default()
                },
            )
        };
        // A buffered writer commits without an fsync and syncs at its flushes; its journal
        // makes every block as durable as its options say.
        let durability = match options.buffer {
            Some(_) => Durability::Relaxed,
            None => options.durability,
        };
        let db = match durability {
            Durability::Durable | Durability::Flush => open(SyncMode::Durable),
            // The first process to open an environment sets its durability for all who join,
            // and a reader that got there first holds it durable: a relaxed writer then joins
            // durable (never weaker than asked) rather than fail.
            Durability::Relaxed => match open(SyncMode::SafeNoSync) {
                Err(libmdbx::Error::Incompatible) => {
                    let db = open(SyncMode::Durable);
                    if db.is_ok() {
                        tracing::warn!(
                            "another process holds the database open in durable mode: this \
                             writer's commits are durable too"
                        );
                    }
                    db
                }
                other => other,
            },
        }
        .map_err(|e| match e {
            libmdbx::Error::Incompatible => StoreError::Options(
                "another process has the database open for writing with another durability \
                 (durable vs relaxed); use the same, or wait for it to finish"
                    .into(),
            ),
            // For a database open in this process, the validating read-only open above meets
            // it first; this is a defence for an open that skipped it (no data file then).
            e if open_in_process(&e) => StoreError::OpenInProcess(dir.clone()),
            other => map_err(other),
        })?;
        let inner = Arc::new(Inner {
            db,
            dir,
            read_only: false,
            warm: Default::default(),
            pending: Default::default(),
            journal: Default::default(),
            options: options.clone(),
        });
        let meta = {
            let txn = inner.db.begin_rw_txn().map_err(map_err)?;
            for t in [T_NODES, T_STEMS, T_CODE, T_META] {
                txn.create_table(Some(t), TableFlags::default())
                    .map_err(map_err)?;
            }
            let mt = txn.open_table(Some(T_META)).map_err(map_err)?;
            // Checked again here: a database recovered by this open was not validated before.
            if txn
                .get::<libmdbx::ObjectLength>(&mt, M_BUILDING)
                .map_err(map_err)?
                .is_some()
            {
                return Err(StoreError::NotADatabase {
                    path: data.clone(),
                    reason: INTERRUPTED_BUILD.into(),
                });
            }
            let meta = match read_meta(&txn, &mt)? {
                Some(meta) => {
                    check_shape(&meta)?;
                    meta
                }
                None => {
                    let page = inner.db.stat().map_err(map_err)?.page_size();
                    let meta = Meta {
                        root: ZERO_HASH,
                        block: 0,
                        group_depth: options.group_depth.unwrap_or(DEFAULT_GROUP_DEPTH),
                        format: FORMAT_VERSION,
                        page_size: page,
                    };
                    put_meta(&txn, &mt, &meta)?;
                    meta
                }
            };
            txn.commit().map_err(map_err)?;
            meta
        };
        let mut store = StateStore { inner, meta };
        match (kept, opened_journal) {
            (Some(kept), _) => {
                // A reopened handle: MDBX must be where it left it.
                if (kept.meta.block, kept.meta.root) != (meta.block, meta.root) {
                    store.meta = kept.meta;
                    return Err(store.conflict(Some(meta)));
                }
                *store.pending() = kept.pending;
                *store.journal() = Some(kept.journal);
            }
            (None, Some((journal, bytes))) => {
                *store.journal() = Some(journal);
                let records = buffer::replay(&bytes, meta)?;
                if let Some(last) = records.last() {
                    tracing::info!(
                        from = meta.block,
                        to = last.meta.block,
                        "replaying the write journal (a buffered writer lost its unsynced blocks)"
                    );
                    let last = last.meta;
                    store.write_txn(|txn, t| {
                        for rec in &records {
                            crate::write::put_block(
                                txn,
                                t,
                                &rec.removed,
                                rec.nodes.iter().map(|(k, b)| (k, &b[..])),
                                &rec.code,
                            )?;
                        }
                        Ok(Some(last))
                    })?;
                }
                store.pending().synced = Some(store.meta);
                if !bytes.is_empty() {
                    // What the journal holds must be synced in MDBX before it goes (the
                    // blocks a buffered writer committed and did not flush, or replayed ones).
                    store.inner.db.sync(true).map_err(map_err)?;
                    store.journal().as_mut().map(|j| j.clear()).transpose()?;
                }
            }
            // Not reached: a journal is opened whenever none is kept.
            (None, None) => {}
        }
        Ok(store)
    }

    /// Closes the environment (its memory map), calls `between` with the directory (to evict
    /// it from the page cache, say), and opens it again with the same options — keeping the
    /// write buffer and the journal's lock, as a running node keeps its buffer. Fails when
    /// other clones of this handle are alive (they hold the environment open).
    pub fn reopen(
        self,
        between: impl FnOnce(&FsPath) -> std::io::Result<()>,
    ) -> Result<StateStore, StoreError> {
        let meta = self.meta;
        let inner = Arc::try_unwrap(self.inner).map_err(|_| {
            StoreError::Options("reopen: other handles to this store are still open".into())
        })?;
        let Inner {
            db,
            dir,
            pending,
            journal,
            options,
            ..
        } = inner;
        drop(db);
        let pending = pending
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let journal = journal
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        between(&dir)?;
        match journal {
            Some(journal) => Self::open_with(
                &dir,
                &options,
                Some(Kept {
                    meta,
                    pending,
                    journal,
                }),
            ),
            None => Self::open_with(&dir, &options, None),
        }
    }

    pub(crate) fn journal(&self) -> std::sync::MutexGuard<'_, Option<buffer::Journal>> {
        self.inner
            .journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens an existing database read-only: `open` with [`StoreOptions::read_only`].
    pub fn open_read_only(dir: impl AsRef<FsPath>) -> Result<Self, StoreError> {
        Self::open(
            dir,
            &StoreOptions {
                read_only: true,
                ..Default::default()
            },
        )
    }

    /// True when this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }
}

/// Removes `dir` when it holds nothing worth keeping: nothing but a database's own files
/// ([`crate::is_store_file_name`]; the journal empty), and in them either no database (none,
/// or an empty `mdbx.dat`: a creation that failed) or one with no committed block (block 0,
/// empty root). Anything else stays, including any other file; a database that a full disk
/// keeps from being opened to check stays too, with a warning that says so. Returns whether
/// it was removed. For a command that created `dir` and failed before committing: it leaves
/// nothing behind.
///
/// A writer that has the database open (or is opening it) keeps it: the check and the removal
/// hold the journal's lock, which every writer takes, exclusively; the directory is renamed
/// aside before it is removed, so a writer that comes to it after the check finds no
/// directory, never one emptied under it.
pub fn remove_if_empty(dir: &std::path::Path) -> bool {
    remove_own(dir, false)
}

/// Removes `dir`, a database directory a command made and was stopped in (by the user) before
/// its work was done, whatever blocks it holds: as [`remove_if_empty`] (nothing but the
/// database's own files, and not while a writer has it open: the journal's lock), without the
/// check for committed blocks. Returns whether it was removed.
pub fn remove_made(dir: &std::path::Path) -> bool {
    remove_own(dir, true)
}

/// [`remove_if_empty`], or with `any_blocks` [`remove_made`].
fn remove_own(dir: &std::path::Path, any_blocks: bool) -> bool {
    let own = |e: &std::fs::DirEntry| {
        let name = e.file_name();
        crate::is_store_file_name(&name)
            && (any_blocks || name != buffer::JOURNAL || e.metadata().is_ok_and(|m| m.len() == 0))
    };
    let lock = || {
        let journal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(buffer::JOURNAL))
            .ok()?;
        // Where the filesystem has no `flock`, writers go unlocked too (`Journal::open`).
        match journal.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) => None,
            _ => Some(journal),
        }
    };
    let unused = || any_blocks || holds_no_block(dir);
    let removed = bintrie_trie::remove_store_dir_if(dir, own, lock, unused);
    removed.unwrap_or_else(|e| {
        tracing::warn!(dir = %dir.display(), error = %e, "an empty database could not be removed");
        !dir.exists()
    })
}

/// Whether the database in `dir` holds no committed block ([`remove_if_empty`]): block 0 with
/// the empty root, no database, or an empty data file (a creation that failed before writing).
/// A data file with bytes that does not open may hold blocks (one a writer must recover), and
/// one a full disk keeps from being opened may too (said in a warning): both count as holding.
fn holds_no_block(dir: &std::path::Path) -> bool {
    match StateStore::open_read_only(dir) {
        Ok(store) => {
            let meta = store.meta();
            meta.block == 0 && meta.root == [0; 32]
        }
        Err(StoreError::NoRoomToOpen { .. }) => {
            let none = !dir.join("mdbx.dat").exists();
            if !none {
                tracing::warn!(
                    "{} is kept: with the disk full it cannot be opened to check whether it \
                     holds a committed block. Free some space and run `bintrie info --db {0}`",
                    dir.display()
                );
            }
            none
        }
        Err(_) => std::fs::metadata(dir.join("mdbx.dat")).map_or(true, |m| m.len() == 0),
    }
}

/// Free bytes on the database's filesystem below which an open whose lock file is not wholly
/// allocated is refused ([`StoreError::NoRoomToOpen`]): a few pages would do, this leaves room.
const MIN_FREE_TO_OPEN: u64 = 1 << 20;

/// Refuses to open the database in `dir` when MDBX would map a lock file the filesystem may
/// not be able to back ([`StoreError::NoRoomToOpen`]).
fn check_room_for_lock(dir: &FsPath) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(st) = rustix::fs::statvfs(dir) else {
        return Ok(());
    };
    // On a read-only filesystem MDBX opens without a lock file, and such filesystems (images)
    // report nothing free.
    if st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return Ok(());
    }
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let lck = std::fs::metadata(dir.join("mdbx.lck"))
        .ok()
        .map(|m| (m.blocks().saturating_mul(512), m.len()));
    if lock_needs_room(lck, free) {
        return Err(StoreError::NoRoomToOpen {
            dir: dir.to_path_buf(),
            free,
        });
    }
    Ok(())
}

/// Whether an open must be refused for room: the lock file (its allocated bytes and its
/// length, `None` when missing) may need pages the filesystem's `free` bytes cannot give.
/// An empty one needs them all: MDBX cuts it to nothing at a clean close.
fn lock_needs_room(lck: Option<(u64, u64)>, free: u64) -> bool {
    let whole = lck.is_some_and(|(allocated, len)| len > 0 && allocated >= len);
    !whole && free < MIN_FREE_TO_OPEN
}

#[cfg(test)]
mod room_tests {
    use super::*;

    #[test]
    fn an_open_is_refused_for_room_only_when_the_lock_file_may_need_pages() {
        let little = MIN_FREE_TO_OPEN - 1;
        assert!(lock_needs_room(None, little), "no lock file yet");
        assert!(
            lock_needs_room(Some((4096, 65_536)), little),
            "a sparse one"
        );
        assert!(
            !lock_needs_room(Some((65_536, 65_536)), little),
            "wholly allocated"
        );
        assert!(
            lock_needs_room(Some((0, 0)), little),
            "cut to nothing at a clean close"
        );
        assert!(!lock_needs_room(None, MIN_FREE_TO_OPEN), "room enough");
        assert!(!lock_needs_room(Some((0, 65_536)), 1 << 30));
    }
}
