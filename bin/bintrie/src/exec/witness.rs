//! `exec --witness-out W` (write the block's witness) and `exec --stateless W` (execute a block
//! from a witness alone, no database).

use super::{ExecArgs, ms};
use crate::WRITING;
use anyhow::{Context, Result, bail};
use bintrie_exec::{ExecOptions, Prefetch, Validation, execute_block, fixture, validate_over};
use bintrie_revm::{
    BlockDbOptions, BlockState, BlockWitness, PipelineOptions, StatelessState, WitnessBytes,
    WitnessEncoding, Witnesses,
};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// `--witness-encoding`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum EncodingArg {
    /// The tree pruned to the block's keys: sibling hashes only.
    Multiproof,
    /// The stored group and stem blobs the block's walks cross (geth's choice).
    Blobs,
}

impl From<EncodingArg> for WitnessEncoding {
    fn from(e: EncodingArg) -> Self {
        match e {
            EncodingArg::Multiproof => WitnessEncoding::Multiproof,
            EncodingArg::Blobs => WitnessEncoding::Blobs,
        }
    }
}

/// The largest witness file read: far above any block's (the node section is capped at 256 MiB,
/// the code of a block is a few MB).
const MAX_WITNESS_BYTES: u64 = 512 << 20;

fn bytes_json(b: &WitnessBytes) -> Value {
    json!({"nodes": b.nodes, "values": b.values, "code": b.code, "total": b.total})
}

/// The directory a file `path` is in (`.` for a bare name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Refuses a `--witness-out` path before the block runs: the file is replaced whole, so a
/// mistyped path must not cost a database, a fixture or any other file. Refused: a path whose
/// directory does not exist, a directory, an existing regular file that is not a witness (an
/// empty one, or one starting with the witness's magic, is replaced), and any path in a
/// directory that holds a database (the `--db` being made, or another). A device or a FIFO
/// (`/dev/null`) is written to as it is ([`write()`]).
pub(crate) fn check_out_path(out: &Path, db: Option<&Path>) -> Result<()> {
    let parent = directory_of(out);
    let dir = std::fs::canonicalize(parent);
    // A directory that does not exist yet may be inside a --db not made yet: said as that.
    let lexically_in_db = db.is_some_and(|db| {
        std::path::absolute(parent)
            .ok()
            .zip(std::path::absolute(db).ok())
            .is_some_and(|(p, db)| p.starts_with(db))
    });
    if dir.is_err() && lexically_in_db {
        bail!(
            "--witness-out {}: it is inside --db: a witness is not written among a database's \
             files; choose a path outside it",
            out.display()
        );
    }
    let dir = dir.with_context(|| {
        format!(
            "--witness-out {}: its directory {} cannot be used",
            out.display(),
            parent.display()
        )
    })?;
    let in_db = db
        .and_then(|db| std::fs::canonicalize(db).ok())
        .is_some_and(|db| dir.starts_with(db));
    if in_db || crate::durability::held_layout(&dir).is_ok_and(|l| l.is_some()) {
        bail!(
            "--witness-out {}: its directory holds a database (or is --db): a witness is not \
             written among a database's files; choose a path outside it",
            out.display()
        );
    }
    match std::fs::metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("--witness-out {}", out.display())),
        Ok(m) if m.is_dir() => bail!("--witness-out {} is a directory", out.display()),
        Ok(m) if !m.is_file() => Ok(()),
        Ok(_) => {
            let mut head = Vec::new();
            std::fs::File::open(out)
                .and_then(|f| {
                    use std::io::Read as _;
                    f.take(BlockWitness::MAGIC.len() as u64)
                        .read_to_end(&mut head)
                })
                .with_context(|| format!("--witness-out {}: reading it", out.display()))?;
            if head.is_empty() || head == BlockWitness::MAGIC {
                Ok(())
            } else {
                bail!(
                    "--witness-out {} holds something other than a witness: it is not \
                     replaced (remove it, or choose another path)",
                    out.display()
                )
            }
        }
    }
}

/// Writes the chosen encoding of `w` to `path`, whole or not at all: into a new file beside
/// it, synced, then renamed over it (a failure, a full disk, leaves what was there), with the
/// replaced file's mode (a new one's: 0666 less the umask). A path that is a device, a FIFO
/// or a symbolic link is written through directly (renaming over it would replace it).
/// Returns what `exec --json` reports as `witness`.
pub(crate) fn write(w: &Witnesses, encoding: WitnessEncoding, path: &Path) -> Result<Value> {
    let chosen = w.get(encoding);
    let dir = directory_of(path);
    // Written through as it is: a device or FIFO, and a symbolic link (`/dev/stdout`), which a
    // rename would replace.
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
        || std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let write = || -> std::io::Result<()> {
        if special {
            return std::fs::write(path, chosen.encode());
        }
        // The mode a plain write gives (0666 less the umask), or the replaced file's own.
        let mode = std::fs::metadata(path).map_or_else(
            |_| std::os::unix::fs::PermissionsExt::from_mode(0o666),
            |m| m.permissions(),
        );
        let mut tmp = tempfile::Builder::new()
            .prefix(".bintrie-witness-")
            .permissions(mode)
            .tempfile_in(dir)?;
        tmp.write_all(&chosen.encode())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().with_context(|| format!("writing the witness to {}", path.display()))?;
    Ok(json!({
        "path": path.display().to_string(),
        "encoding": encoding.name(),
        "keys": w.keys,
        "stems": w.stems,
        "codes": chosen.codes.len(),
        "build_ms": ms(w.build_time),
        "multiproof": bytes_json(&w.multiproof.bytes()),
        "blobs": bytes_json(&w.blobs.bytes()),
        "blobs_over_multiproof": w.blobs.bytes().total as f64 / w.multiproof.bytes().total.max(1) as f64,
    }))
}

/// The text line `exec` prints for a witness it wrote.
pub(crate) fn describe(w: &Witnesses, encoding: WitnessEncoding, path: &Path) -> String {
    let (m, b) = (w.multiproof.bytes(), w.blobs.bytes());
    format!(
        "{} written to {} ({} keys, {} stems); multiproof {} bytes (nodes {}, values {}, code {}), \
         blobs {} bytes (nodes {}, values {}, code {})",
        encoding.name(),
        path.display(),
        w.keys,
        w.stems,
        m.total,
        m.nodes,
        m.values,
        m.code,
        b.total,
        b.nodes,
        b.values,
        b.code
    )
}

fn read_witness(path: &Path) -> Result<BlockWitness> {
    let raw = bintrie_exec::input::read_file_at_most(path, MAX_WITNESS_BYTES)?;
    BlockWitness::decode(&raw).with_context(|| format!("{}", path.display()))
}

/// The `checks` object of `exec --json`.
pub(crate) fn checks_json(v: &Validation) -> serde_json::Map<String, Value> {
    v.checks
        .iter()
        .map(|(c, ok)| (c.name().to_string(), (*ok).into()))
        .collect()
}

/// The `checks` line of `exec`'s text output: `gas_used ok, receipts_root FAILED, ...`.
pub(crate) fn checks_text(v: &Validation) -> String {
    let checks: Vec<String> = v
        .checks
        .iter()
        .map(|(c, ok)| format!("{} {}", c.name(), if *ok { "ok" } else { "FAILED" }))
        .collect();
    checks.join(", ")
}

/// `exec --stateless W`.
pub(crate) fn cmd_stateless(args: &ExecArgs, path: &Path) -> Result<()> {
    let t = Instant::now();
    let fx = fixture::load_without_pre_state(&args.fixture)?;
    let load_time = t.elapsed();
    let number = fx.number();
    let t = Instant::now();
    let witness = read_witness(path)?;
    let read_time = t.elapsed();
    if witness.block != number {
        bail!(
            "{} is the witness of block {}, the fixture's block is {number}",
            path.display(),
            witness.block
        );
    }
    if let Some(trusted) = args.pre_root
        && witness.pre_root.0 != trusted
    {
        bail!(
            "{} is a witness against pre-state root {}, not the trusted --pre-root {}",
            path.display(),
            witness.pre_root,
            alloy_primitives::B256::from(trusted)
        );
    }
    let bytes = witness.bytes();
    let (encoding, group_depth, codes) =
        (witness.encoding(), witness.group_depth, witness.codes.len());
    let t = Instant::now();
    let mut state = StatelessState::from_witness(witness)
        .with_context(|| format!("{} does not prove its pre-state", path.display()))?;
    let prove_time = t.elapsed();
    let pre_root = state.root();
    let options = ExecOptions::default()
        .with_pipeline(
            PipelineOptions::default()
                .with_db(BlockDbOptions::default().with_cache(!args.no_cache))
                .with_workers(1),
        )
        .with_prefetch(Prefetch::None);
    let executed = execute_block(&mut state, &fx, &options)
        .with_context(|| format!("executing block {number} from {}", path.display()))?;
    let v = validate_over(&state.backend(), &fx, &executed)?;
    let run = &executed.run;
    let t = &run.timings;
    let total = prove_time + t.state_read + t.execution + t.trie_update;
    let valid = v.valid();
    let mut out = std::io::stdout().lock();
    if args.json {
        let j = json!({
            "fixture": args.fixture.display().to_string(),
            "format": fx.format,
            "block": number,
            "hash": fx.block.header.hash.to_string(),
            "spec": format!("{:?}", executed.spec),
            "stateless": true,
            "transactions": fx.block.transactions.len(),
            "gas_used": run.output.gas_used,
            "valid": valid,
            "checks": checks_json(&v),
            "post_accounts_checked": v.post_accounts,
            "post_slots_checked": v.post_slots,
            "post_unproven": v.post_unproven,
            "errors": v.findings,
            "keys_written": run.writes.keys,
            "pre_root": pre_root.to_string(),
            "root": run.commit.root.to_string(),
            "witness": {
                "path": path.display().to_string(),
                "encoding": encoding.name(),
                "group_depth": group_depth,
                "codes": codes,
                "bytes": bytes_json(&bytes),
            },
            "witness_bytes": bytes.total,
            "timings_ms": {
                "load": ms(load_time),
                "witness_read": ms(read_time),
                "prove": ms(prove_time),
                "state_read": ms(t.state_read),
                "execution": ms(t.execution),
                "trie_update": ms(t.trie_update),
                "total": ms(total),
            },
        });
        writeln!(out, "{j}").context(WRITING)?;
        crate::json_written();
    } else {
        writeln!(
            out,
            "block {number} ({}, {:?}), stateless from {}: {} transactions, {} gas, {}",
            fx.format,
            executed.spec,
            path.display(),
            fx.block.transactions.len(),
            run.output.gas_used,
            if valid { "valid" } else { "INVALID" }
        )
        .context(WRITING)?;
        writeln!(out, "  checks      {}", checks_text(&v)).context(WRITING)?;
        writeln!(
            out,
            "  post-state  {} accounts and {} slots compared, {} outside the witness",
            v.post_accounts, v.post_slots, v.post_unproven
        )
        .context(WRITING)?;
        writeln!(
            out,
            "  witness     {} at group depth {}, {} bytes (nodes {}, values {}, code {})",
            encoding.name(),
            group_depth,
            bytes.total,
            bytes.nodes,
            bytes.values,
            bytes.code
        )
        .context(WRITING)?;
        writeln!(
            out,
            "  time        prove {:.3} ms, state read {:.3} ms, execution {:.3} ms, trie update {:.3} ms (total {:.3} ms)",
            ms(prove_time),
            ms(t.state_read),
            ms(t.execution),
            ms(t.trie_update),
            ms(total)
        )
        .context(WRITING)?;
        writeln!(out, "  pre-root    {pre_root}").context(WRITING)?;
        writeln!(out, "  root        {}", run.commit.root).context(WRITING)?;
        for e in &v.findings {
            writeln!(out, "  MISMATCH    {e}").context(WRITING)?;
        }
    }
    out.flush().context(WRITING)?;
    drop(out);
    super::fail_if_invalid(number, &v)
}
