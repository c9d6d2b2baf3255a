//! The write options `import` and `exec` share: the durability contract and the write buffer.

use bintrie_store::{BufferOptions, Durability, StoreOptions};

/// `--buffer-mib` when not given.
const DEFAULT_BUFFER_MIB: u64 = 256;

/// How committed blocks reach the disk. See the README's "Durability" section for what each
/// setting loses at most on a kill -9, a power loss and a full disk.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct WriteArgs {
    /// `durable`: every committed block survives a power loss (an fsync per block: of MDBX
    /// without a buffer, of the journal with one). `flush`: a power loss rolls back to the last
    /// flush. `relaxed`: no fsync at all; a power loss rolls back to some earlier block. A
    /// process crash (kill -9) loses no committed block in any mode, and no mode ever leaves a
    /// torn state. On the log layout `flush` and `relaxed` are the same: the log syncs when it
    /// closes or a segment fills.
    #[arg(long, value_enum, default_value_t = Durability::Durable)]
    pub(crate) durability: Durability,
    /// The same as `--durability relaxed`.
    #[arg(long, conflicts_with = "durability")]
    pub(crate) relaxed: bool,
    /// Write buffer: commit each block to MDBX without an fsync, journal it (one sequential
    /// append, fdatasync'd when durable) and sync MDBX every N blocks. 0: no buffer, every
    /// block is its own synced MDBX commit. A buffered writer must be the only writer; readers
    /// beside it see each block once it is committed, synced or not (a power loss takes MDBX
    /// back to its last sync, and the next writer replays the journal's blocks). Default: 8 for
    /// `import`, 0 for `exec` (one block).
    #[arg(long, value_name = "N")]
    pub(crate) buffer_blocks: Option<u64>,
    /// ... or once this many MiB of blobs were committed since the last sync (default 256).
    /// Only with a write buffer, on the MDBX layout.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) buffer_mib: Option<u64>,
    /// With --layout log: memory for the tree's upper levels, in MiB of blobs. When the log is
    /// opened, the deepest group level that fits (with every level above it) is read into
    /// memory and kept; blocks then read only the levels below (at 16M stems, 64 MiB holds
    /// group depth 5's groups down to depth 15, one of the two reads a new stem needs). `exec`
    /// also loads those levels into its trie at open and keeps them decoded and hashed across
    /// `--cold` blocks (about 3.7x the blobs' bytes more); `import` keeps its trie across all
    /// its blocks anyway. 0: none.
    #[arg(long, value_name = "MIB", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    pub(crate) log_pinned_mib: u64,
}

impl WriteArgs {
    /// Refuses the options that do not apply to `layout` (`--log-pinned-mib` on MDBX,
    /// `--buffer-blocks` and `--buffer-mib` on the log) or to no write buffer (`--buffer-mib`
    /// with `--buffer-blocks 0`, or without it where `default_blocks` is 0) instead of ignoring
    /// them.
    pub(crate) fn check_for(
        &self,
        layout: bintrie_bench::model::Layout,
        default_blocks: u64,
    ) -> anyhow::Result<()> {
        use bintrie_bench::model::Layout;
        anyhow::ensure!(
            self.log_pinned_mib == 0 || layout == Layout::Log,
            "--log-pinned-mib applies to --layout log only"
        );
        anyhow::ensure!(
            self.buffer_blocks.is_none() || layout == Layout::Mdbx,
            "--buffer-blocks applies to the MDBX layout only (a log commit is already one append)"
        );
        anyhow::ensure!(
            self.buffer_mib.is_none() || layout == Layout::Mdbx,
            "--buffer-mib applies to the MDBX layout only (a log commit is already one append)"
        );
        anyhow::ensure!(
            self.buffer_mib.is_none() || self.buffer_blocks.unwrap_or(default_blocks) > 0,
            "--buffer-mib sizes the write buffer, which is off here: give --buffer-blocks N too"
        );
        Ok(())
    }

    /// The log layout's options with this durability (`flush` and `relaxed` sync only when
    /// the log is closed or a segment fills; the write buffer does not apply: a log commit is
    /// already one append).
    pub(crate) fn log_options(&self) -> bintrie_logstore::LogOptions {
        let durable = !self.relaxed && self.durability == Durability::Durable;
        bintrie_logstore::LogOptions {
            durability: if durable {
                bintrie_logstore::Durability::Durable
            } else {
                bintrie_logstore::Durability::Relaxed
            },
            pinned_bytes: self.log_pinned_mib << 20,
            ..Default::default()
        }
    }

    /// `options` with this durability and buffer; `default_blocks` when --buffer-blocks is not
    /// given.
    pub(crate) fn apply(&self, options: StoreOptions, default_blocks: u64) -> StoreOptions {
        let blocks = self.buffer_blocks.unwrap_or(default_blocks);
        StoreOptions {
            durability: if self.relaxed {
                Durability::Relaxed
            } else {
                self.durability
            },
            buffer: (blocks > 0).then(|| BufferOptions {
                max_blocks: blocks,
                max_bytes: usize::try_from(self.buffer_mib.unwrap_or(DEFAULT_BUFFER_MIB) << 20)
                    .unwrap_or(usize::MAX),
            }),
            ..options
        }
    }
}

/// What a crash can take back, for output: `durable through block N`, or why nothing is
/// promised.
pub(crate) fn durable_note(store: &bintrie_store::StateStore) -> String {
    match store.durable_block() {
        Some(b) => format!("durable through block {b}"),
        None => "relaxed: no block is promised to survive a power loss".to_string(),
    }
}

/// The layout of the state `dir` holds: `None` when it holds none (or does not exist). An error
/// when `dir` is a file or cannot be listed (no read permission, an I/O error, a component of
/// the path that is a file), or when it holds both an MDBX database (`mdbx.dat`) and log
/// segments: which of the two is the state cannot be told, and a command must not pick one
/// silently.
pub(crate) fn held_layout(
    dir: &std::path::Path,
) -> anyhow::Result<Option<bintrie_bench::model::Layout>> {
    use bintrie_bench::model::Layout;
    // A directory that cannot be listed is its error, never "no database here".
    let log = bintrie_logstore::holds_log(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotADirectory && dir.is_file() {
            anyhow::anyhow!(
                "{} is a file: a database is a directory (mdbx.dat, or log.NNNNNN segments)",
                dir.display()
            )
        } else {
            anyhow::anyhow!("cannot read the directory {}: {e}", dir.display())
        }
    })?;
    match (dir.join("mdbx.dat").exists(), log) {
        (true, true) => anyhow::bail!(
            "{} holds both an MDBX database (mdbx.dat) and a log (log.NNNNNN segments, or the \
             index-sizes of one that held blocks): which is the state cannot be told; move one \
             of them to a directory of its own",
            dir.display()
        ),
        (true, false) => Ok(Some(Layout::Mdbx)),
        (false, true) => Ok(Some(Layout::Log)),
        (false, false) => Ok(None),
    }
}

/// Refuses to open `dir` as `layout` when it already holds a state in the other layout (one
/// would be created beside the other), or both ([`held_layout`]).
pub(crate) fn check_layout(
    dir: &std::path::Path,
    layout: bintrie_bench::model::Layout,
) -> anyhow::Result<()> {
    use bintrie_bench::model::Layout;
    match (layout, held_layout(dir)?) {
        (Layout::Mdbx, Some(Layout::Log)) => anyhow::bail!(
            "{} holds a state in the log layout: add --layout log",
            dir.display()
        ),
        (Layout::Log, Some(Layout::Mdbx)) => anyhow::bail!(
            "{} holds an MDBX database: drop --layout log (or use another directory)",
            dir.display()
        ),
        _ => Ok(()),
    }
}
