//! `bintrie prove` and `bintrie verify-proof`: single-key proofs as JSON (the format is
//! [`bintrie_exec::proof`]'s), one per line for several keys.

use crate::hex0x;
use anyhow::{Context, Result, bail};
use bintrie_exec::kv::parse_b32;
use bintrie_exec::proof::ProofJson;
use bintrie_keys::TreeKey;
use bintrie_node::Sha256Hasher;
use bintrie_store::StateStore;
use bintrie_trie::Trie;
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ProveArgs {
    /// Database directory (opened read-only).
    #[arg(long)]
    db: PathBuf,
    /// The 32-byte tree keys (hex, 0x optional): one proof per key, one JSON line each, in
    /// the order given (the nodes the walks share are loaded once).
    #[arg(required = true)]
    keys: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct VerifyProofArgs {
    /// The proofs, as `bintrie prove` prints them: one JSON object, or several (one per line,
    /// or any whitespace between them); `-` is stdin.
    #[arg(long)]
    proof: String,
    /// The root to check against (default: each proof's own `root`, which then only shows the
    /// proof is consistent).
    #[arg(long)]
    root: Option<String>,
}

pub(crate) fn cmd_prove(args: ProveArgs) -> Result<()> {
    let keys = args
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            parse_b32(k)
                .map(TreeKey::from_bytes)
                .with_context(|| format!("KEY {} ({k:?})", i + 1))
        })
        .collect::<Result<Vec<_>>>()?;
    let store = StateStore::open_read_only(&args.db)
        .with_context(|| format!("opening {}", args.db.display()))?;
    let meta = store.meta();
    let mut trie: Trie<StateStore> = Trie::open(store, meta.group_depth, meta.root)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for key in &keys {
        let proof = trie.prove(key)?;
        let json = serde_json::to_string(&ProofJson::new(&meta.root, &proof))?;
        writeln!(out, "{json}").context("writing output")?;
    }
    out.flush().context("writing output")
}

/// The largest proof read: a proof is under 20 KB, so anything larger is refused as not one
/// (and a hostile file cannot make this command hold more).
const MAX_PROOF_BYTES: usize = 1 << 20;

pub(crate) fn cmd_verify_proof(args: VerifyProofArgs) -> Result<()> {
    use std::io::BufRead;
    let root = args
        .root
        .as_deref()
        .map(|r| parse_b32(r).context("--root"))
        .transpose()?;
    let (src, input): (String, Box<dyn Read>) = if args.proof == "-" {
        ("stdin".into(), Box::new(std::io::stdin().lock()))
    } else {
        let f =
            std::fs::File::open(&args.proof).with_context(|| format!("reading {}", args.proof))?;
        (args.proof.clone(), Box::new(f))
    };
    let mut input = std::io::BufReader::with_capacity(1 << 16, input);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // Proofs are read a line at a time: one JSON object per line parses as soon as its line is
    // in; a pretty-printed one is complete after its last line.
    let mut buf: Vec<u8> = Vec::new();
    let (mut n, mut at, mut line) = (0usize, 0u64, 0u64);
    loop {
        let start = buf.len();
        let read = input
            .by_ref()
            .take((MAX_PROOF_BYTES + 1 - buf.len().min(MAX_PROOF_BYTES)) as u64)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {src}"))?;
        line += read as u64;
        if buf[..start].iter().all(u8::is_ascii_whitespace) {
            // Nothing pending before this line: a proof starts here.
            at = line - read as u64;
        }
        let pending = !buf.iter().all(u8::is_ascii_whitespace);
        if read == 0 && !pending {
            break;
        }
        if buf.len() > MAX_PROOF_BYTES {
            bail!(
                "{src}: proof {} (byte {at}) is larger than {MAX_PROOF_BYTES} bytes: not a proof",
                n + 1
            );
        }
        if !pending {
            buf.clear();
            continue;
        }
        let json: ProofJson = match serde_json::from_slice(&buf) {
            Ok(j) => j,
            // Incomplete: wait for the next line (unless there is none).
            Err(e) if e.is_eof() && read > 0 => continue,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("{src}: proof {} (byte {at}): not a proof", n + 1));
            }
        };
        n += 1;
        let which = || format!("{src}: proof {n} (byte {at})");
        let (own_root, proof) = json.parse().with_context(which)?;
        buf.clear();
        let value = proof
            .verify::<Sha256Hasher>(&root.unwrap_or(own_root))
            .with_context(|| format!("{} does not verify", which()))?;
        match value {
            Some(v) => writeln!(out, "{}", hex0x(v)),
            None => writeln!(out, "absent"),
        }
        .context("writing output")?;
    }
    if n == 0 {
        bail!("{src}: no proof in it");
    }
    out.flush().context("writing output")
}
