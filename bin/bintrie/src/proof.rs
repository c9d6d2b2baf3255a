//! `bintrie prove` and `bintrie verify-proof`: single-key proofs as JSON (the format is
//! [`bintrie_exec::proof`]'s).

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
    /// The 32-byte tree key (hex, 0x optional).
    key: String,
}

#[derive(clap::Args, Debug)]
pub(crate) struct VerifyProofArgs {
    /// The proof, as `bintrie prove` prints it; `-` is stdin.
    #[arg(long)]
    proof: String,
    /// The root to check against (default: the proof's own `root`, which then only shows the
    /// proof is consistent).
    #[arg(long)]
    root: Option<String>,
}

pub(crate) fn cmd_prove(args: ProveArgs) -> Result<()> {
    let key = TreeKey::from_bytes(parse_b32(&args.key).context("KEY")?);
    let store = StateStore::open_read_only(&args.db)
        .with_context(|| format!("opening {}", args.db.display()))?;
    let meta = store.meta();
    let mut trie: Trie<StateStore> = Trie::open(store, meta.group_depth, meta.root)?;
    let proof = trie.prove(&key)?;
    let json = serde_json::to_string(&ProofJson::new(&meta.root, &proof))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{json}")
        .and_then(|()| out.flush())
        .context("writing output")
}

/// The largest proof file read: a proof is under 20 KB.
const MAX_PROOF_BYTES: u64 = 1 << 20;

pub(crate) fn cmd_verify_proof(args: VerifyProofArgs) -> Result<()> {
    let mut raw = Vec::new();
    let src = if args.proof == "-" {
        std::io::stdin()
            .take(MAX_PROOF_BYTES + 1)
            .read_to_end(&mut raw)
            .context("reading the proof from stdin")?;
        "stdin".to_string()
    } else {
        std::fs::File::open(&args.proof)
            .and_then(|f| f.take(MAX_PROOF_BYTES + 1).read_to_end(&mut raw))
            .with_context(|| format!("reading {}", args.proof))?;
        args.proof.clone()
    };
    if raw.len() as u64 > MAX_PROOF_BYTES {
        bail!("{src}: larger than {MAX_PROOF_BYTES} bytes: not a proof");
    }
    let json: ProofJson =
        serde_json::from_slice(&raw).with_context(|| format!("{src}: not a proof"))?;
    let (own_root, proof) = json.parse().with_context(|| src.clone())?;
    let root = match &args.root {
        Some(r) => parse_b32(r).context("--root")?,
        None => own_root,
    };
    let value = proof
        .verify::<Sha256Hasher>(&root)
        .with_context(|| format!("{src} does not verify"))?;
    let mut out = std::io::stdout().lock();
    match value {
        Some(v) => writeln!(out, "{}", hex0x(v)),
        None => writeln!(out, "absent"),
    }
    .and_then(|()| out.flush())
    .context("writing output")
}
