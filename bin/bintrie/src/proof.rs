//! `bintrie prove` and `bintrie verify-proof`: single-key proofs as JSON (the format is
//! [`bintrie_exec::proof`]'s), one per line for several keys.

use crate::db::Existing;
use crate::hex0x;
use anyhow::{Context, Result, bail};
use bintrie_exec::kv::parse_b32;
use bintrie_exec::proof::ProofJson;
use bintrie_keys::TreeKey;
use bintrie_node::Hash32;
use bintrie_node::Sha256Hasher;
use bintrie_store::StoreError;
use bintrie_trie::{NodeStore, Trie, TrieError};
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
    #[arg(long, value_parser = crate::parse_root_arg)]
    root: Option<[u8; 32]>,
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
    let lines = prove_at_one_block(&args.db, &keys)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for json in lines {
        writeln!(out, "{json}").context(crate::WRITING)?;
    }
    out.flush().context(crate::WRITING)
}

/// One JSON proof line per key, all against the root of one block, in either layout. On MDBX,
/// the trie reads each blob in a transaction of its own and checks it against its parent's
/// hash, so a writer committing meanwhile shows as a conflict (never as a wrong proof): the
/// whole set is then proved again at the new block, up to a bound, as `verify`'s readers do. A
/// log opened read-only reads the block its open found (its index does not follow a writer).
fn prove_at_one_block(db: &std::path::Path, keys: &[TreeKey]) -> Result<Vec<String>> {
    const ATTEMPTS: usize = 100;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let proved = match crate::db::open_existing(db)? {
            Existing::Mdbx(store) => {
                let meta = store.meta();
                prove_all(store, meta.group_depth, meta.root, keys)
            }
            Existing::Log(store) => {
                let meta = store.meta();
                return prove_all(store, meta.group_depth, meta.root, keys);
            }
        };
        match proved {
            Err(e) if attempt < ATTEMPTS && moved_on(&e) => {
                tracing::debug!(
                    attempt,
                    "a writer committed during the proofs: proving again"
                );
            }
            other => return other,
        }
    }
}

/// The proof of each key, as a JSON line, in a trie over `store` at `root`.
fn prove_all<S: NodeStore>(
    store: S,
    group_depth: u8,
    root: Hash32,
    keys: &[TreeKey],
) -> Result<Vec<String>> {
    let mut trie: Trie<S> = Trie::open(store, group_depth, root)?;
    keys.iter()
        .map(|key| {
            // The one key no proof can show is the trie's `Unprovable` error, never a proof.
            let proof = trie.prove(key)?;
            Ok(serde_json::to_string(&ProofJson::new(&root, &proof))?)
        })
        .collect()
}

/// Whether `e` says another writer committed since the store was opened.
fn moved_on(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<TrieError<StoreError>>(),
            Some(TrieError::Store(StoreError::Conflict { .. }))
        ) || matches!(
            c.downcast_ref::<StoreError>(),
            Some(StoreError::Conflict { .. })
        )
    })
}

/// The largest proof read: a proof is under 20 KB, so anything larger is refused as not one
/// (and a hostile file cannot make this command hold more).
const MAX_PROOF_BYTES: usize = 1 << 20;

/// Finds where JSON values end in a byte stream: the nesting depth of `{}`/`[]` outside
/// strings, carried across chunks. Linear in the input whatever its shape; strings are skipped
/// to their next quote or backslash at once.
#[derive(Default)]
struct Framer {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Framer {
    /// Scans `bytes` (continuing where the last call stopped); `Some(n)`: the first `n` bytes
    /// close a top-level value (the state is then reset for the next one).
    fn scan(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut j = 0;
        while j < bytes.len() {
            if self.escaped {
                self.escaped = false;
                j += 1;
                continue;
            }
            if self.in_string {
                match memchr::memchr2(b'"', b'\\', &bytes[j..]) {
                    None => return None,
                    Some(p) => {
                        j += p;
                        if bytes[j] == b'\\' {
                            self.escaped = true;
                        } else {
                            self.in_string = false;
                        }
                        j += 1;
                    }
                }
                continue;
            }
            match bytes[j] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        *self = Framer::default();
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
            j += 1;
        }
        None
    }
}

pub(crate) fn cmd_verify_proof(args: VerifyProofArgs) -> Result<()> {
    let (src, mut input): (String, Box<dyn Read>) = if args.proof == "-" {
        crate::check_stdin_open()?;
        ("stdin".into(), Box::new(std::io::stdin().lock()))
    } else {
        let f =
            std::fs::File::open(&args.proof).with_context(|| format!("reading {}", args.proof))?;
        (args.proof.clone(), Box::new(f))
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // The input is read in chunks and cut where each top-level value closes; each value is
    // parsed once, from a slice (its strings borrowed).
    let mut chunk = vec![0u8; 1 << 16];
    let mut pending: Vec<u8> = Vec::new();
    let mut framer = Framer::default();
    let (mut n, mut offset, mut at) = (0usize, 0u64, 0u64);
    let mut verify_one = |value: &[u8], n: usize, at: u64| -> Result<()> {
        let which = || format!("{src}: proof {n} (byte {at})");
        // serde's own words for an array ("invalid type: map, expected a string") name neither.
        anyhow::ensure!(
            value.first() != Some(&b'['),
            "{}: a JSON array, not a proof: give the proofs one object after another, as \
             `prove` prints them",
            which()
        );
        let json: ProofJson =
            serde_json::from_slice(value).with_context(|| format!("{}: not a proof", which()))?;
        let (own_root, proof) = json.parse().with_context(which)?;
        let value = proof
            .verify::<Sha256Hasher>(&args.root.unwrap_or(own_root))
            .with_context(|| format!("{} does not verify", which()))?;
        match value {
            Some(v) => writeln!(out, "{}", hex0x(v)),
            None => writeln!(out, "absent"),
        }
        .context(crate::WRITING)
    };
    loop {
        let read = input
            .read(&mut chunk)
            .with_context(|| format!("reading {src}"))?;
        if read == 0 {
            break;
        }
        let data = &chunk[..read];
        let mut i = 0;
        while i < data.len() {
            // Where the value being read starts in this chunk: here, or before it (pending).
            let seg = if pending.is_empty() {
                match data[i..].iter().position(|b| !b.is_ascii_whitespace()) {
                    None => break,
                    Some(p) => i += p,
                }
                at = offset + i as u64;
                i
            } else {
                i
            };
            match framer.scan(&data[i..]) {
                Some(len) => {
                    n += 1;
                    if pending.is_empty() {
                        verify_one(&data[seg..i + len], n, at)?;
                    } else {
                        pending.extend_from_slice(&data[seg..i + len]);
                        verify_one(&pending, n, at)?;
                        pending.clear();
                    }
                    i += len;
                }
                None => {
                    pending.extend_from_slice(&data[seg..]);
                    if pending.len() > MAX_PROOF_BYTES {
                        bail!(
                            "{src}: proof {} (byte {at}) is larger than {MAX_PROOF_BYTES} bytes: \
                             not a proof",
                            n + 1
                        );
                    }
                    i = data.len();
                }
            }
        }
        offset += read as u64;
    }
    if !pending.is_empty() {
        // An unclosed value (or stray text): the parser says what is wrong with it.
        n += 1;
        verify_one(&pending, n, at)?;
    }
    if n == 0 {
        bail!("{src}: no proof in it");
    }
    out.flush().context(crate::WRITING)
}
