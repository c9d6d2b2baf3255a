//! `bintrie prove` and `bintrie verify-proof`: single-key proofs as JSON.
//!
//! The format, for other implementations to check (hex strings are 0x-prefixed):
//! `{"root", "key", "value" | null, "siblings": [root level first], "stem" | null,
//!   "stem_siblings": [8, leaf level first] (iff stem == key[:31]),
//!   "subtree_root" (iff stem is another stem)}`.

use crate::hex0x;
use crate::input::parse_hex_array;
use anyhow::{Context, Result, bail};
use bintrie_keys::TreeKey;
use bintrie_node::{Hash32, Sha256Hasher};
use bintrie_store::StateStore;
use bintrie_trie::{Proof, Trie};
use serde::{Deserialize, Serialize};
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

/// The JSON form of a proof. Optional parts are omitted, not null, except `value` and `stem`.
#[derive(Serialize, Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ProofJson {
    root: String,
    key: String,
    value: Option<String>,
    siblings: Vec<String>,
    stem: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stem_siblings: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subtree_root: Option<String>,
}

impl ProofJson {
    fn new(root: &Hash32, p: &Proof) -> Self {
        ProofJson {
            root: hex0x(root),
            key: hex0x(p.key.to_bytes()),
            value: p.value.map(hex0x),
            siblings: p.siblings.iter().map(hex0x).collect(),
            stem: p.stem.map(hex0x),
            stem_siblings: p.stem_siblings.map(|s| s.iter().map(hex0x).collect()),
            subtree_root: p.subtree_root.map(hex0x),
        }
    }

    /// The proof and the root it names; errors name the field.
    fn parse(&self) -> Result<(Hash32, Proof)> {
        let b32 = |s: &str, what: &str| parse_hex_array::<32>(s).with_context(|| what.to_string());
        let list = |v: &[String], what: &str| -> Result<Vec<Hash32>> {
            v.iter()
                .enumerate()
                .map(|(i, s)| b32(s, &format!("{what}[{i}]")))
                .collect()
        };
        if self.siblings.len() > bintrie_node::MAX_DEPTH {
            bail!(
                "siblings: {} entries, a path has at most {} levels",
                self.siblings.len(),
                bintrie_node::MAX_DEPTH
            );
        }
        let stem_siblings = match &self.stem_siblings {
            None => None,
            Some(v) => {
                let v = list(v, "stem_siblings")?;
                let n = v.len();
                Some(
                    <[Hash32; 8]>::try_from(v)
                        .map_err(|_| anyhow::anyhow!("stem_siblings: {n} entries, expected 8"))?,
                )
            }
        };
        let proof = Proof {
            key: TreeKey::from_bytes(b32(&self.key, "key")?),
            value: self.value.as_deref().map(|v| b32(v, "value")).transpose()?,
            siblings: list(&self.siblings, "siblings")?,
            stem: self
                .stem
                .as_deref()
                .map(|s| parse_hex_array::<31>(s).context("stem"))
                .transpose()?,
            stem_siblings,
            subtree_root: self
                .subtree_root
                .as_deref()
                .map(|s| b32(s, "subtree_root"))
                .transpose()?,
        };
        Ok((b32(&self.root, "root")?, proof))
    }
}

pub(crate) fn cmd_prove(args: ProveArgs) -> Result<()> {
    let key = TreeKey::from_bytes(crate::input::parse_b32(&args.key).context("KEY")?);
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
        Some(r) => crate::input::parse_b32(r).context("--root")?,
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
