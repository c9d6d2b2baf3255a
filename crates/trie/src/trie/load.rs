//! Loading: a blob from the store, checked against the hash its parent holds, expanded into
//! nodes; and the preload pass that makes an update atomic.

use super::*;

/// Blobs decoded and hashed ahead of the load that needs them ([`Trie::decode_ahead`]), by
/// path. A load takes its path's entry and uses it only if it hashes to what the parent
/// holds; otherwise it reads the store as if nothing had been decoded.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    map: Mutex<HashMap<PathKey, Decoded>>,
    /// Whether anything was decoded since the last clear: a load skips the lock otherwise
    /// (`verify` and the witness walks load millions of blobs with nothing decoded ahead).
    used: AtomicBool,
}

/// One blob decoded ahead: the node it expands to, its hash, the hash calls that took and the
/// blob's length.
#[derive(Debug)]
struct Decoded {
    node: Node,
    hash: Hash32,
    calls: u64,
    bytes: u64,
}

impl Ahead {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<PathKey, Decoded>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes what was decoded ahead at `key`, if anything.
    fn take(&self, key: &PathKey) -> Option<Decoded> {
        if !self.used.load(Ordering::Relaxed) {
            return None;
        }
        self.map().remove(key)
    }

    /// Decodes `blob`, stored at `key` (the path `path`), for a tree at group depth `g`; keeps it when it
    /// decodes. Returns whether it did.
    pub(super) fn decode<H: TreeHasher>(
        &self,
        key: &PathKey,
        path: &Path,
        blob: &[u8],
        g: u8,
    ) -> bool {
        // The error is the load's to report, if the load ever reads this blob.
        let Ok((node, hash, calls)) = expand_blob::<H, std::convert::Infallible>(path, blob, g)
        else {
            return false;
        };
        let bytes = blob.len() as u64;
        self.used.store(true, Ordering::Relaxed);
        self.map().insert(
            *key,
            Decoded {
                node,
                hash,
                calls,
                bytes,
            },
        );
        true
    }

    /// Drops everything decoded ahead.
    pub(super) fn clear(&mut self) {
        self.map
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *self.used.get_mut() = false;
    }

    /// How many blobs wait to be loaded.
    pub(super) fn len(&self) -> usize {
        self.map().len()
    }
}

/// Loads the node at `path` whose hash is `hash` (held by its parent, or the trie's root), and
/// checks the blob against it: a stem blob by its stem hash, a group blob by hashing its entries
/// up through its inner nodes exactly as [`hash_node`] hashes the expanded subtree. The inner
/// nodes keep those hashes (nothing to recompute until something below them changes). Hash calls
/// are counted in `ctx.counters.hashes`. A blob decoded ahead at `path` that hashes to `hash` is
/// taken instead of reading the store (its decoding and hashes count as this load's).
pub(super) fn load<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    path: &Path,
    hash: Hash32,
) -> Result<Node, TrieError<S::Error>> {
    let key = path.to_key();
    ctx.note_below(path);
    let count = |bytes: u64, calls: u64| {
        ctx.counters.nodes_loaded.fetch_add(1, Ordering::Relaxed);
        ctx.counters
            .bytes_loaded
            .fetch_add(bytes, Ordering::Relaxed);
        ctx.counters.hashes.fetch_add(calls, Ordering::Relaxed);
    };
    // Taken either way: a stale or damaged one is never offered again.
    if let Some(d) = ctx.ahead.take(&key).filter(|d| d.hash == hash) {
        count(d.bytes, d.calls);
        return Ok(d.node);
    }
    // A blob that does not fit: damage, unless the store knows another cause.
    let mismatch =
        |e: TrieError<S::Error>| ctx.store.explain_mismatch().map_or(e, TrieError::Store);
    let blob = ctx
        .store
        .get_node(&key)
        .map_err(TrieError::Store)?
        .ok_or_else(|| mismatch(TrieError::MissingNode { path: *path }))?;
    let decoded = expand_blob::<H, S::Error>(path, &blob, ctx.group_depth);
    let (node, computed, calls) = decoded?;
    count(blob.len() as u64, calls);
    if computed == hash {
        Ok(node)
    } else {
        Err(mismatch(TrieError::HashMismatch {
            path: *path,
            claimed: hash,
            computed,
        }))
    }
}

/// Decodes the blob stored at `path` in a tree at group depth `g` into the node it stands for
/// and hashes it: a stem blob by its stem hash, a group blob through its inner nodes (which
/// keep their hashes). Returns the node, its hash and the hash calls. Errors when the blob is
/// malformed, does not belong at `path` or was written at another group depth.
fn expand_blob<H: TreeHasher, E: std::error::Error + Send + Sync + 'static>(
    path: &Path,
    blob: &[u8],
    g: u8,
) -> Result<(Node, Hash32, u64), TrieError<E>> {
    let corrupt = |reason: String| TrieError::Corrupt {
        path: *path,
        reason,
    };
    match NodeBlob::decode(blob).map_err(|e| corrupt(e.to_string()))? {
        NodeBlob::Stem(stem, values) => {
            if !path.is_prefix_of(&stem) {
                return Err(corrupt("stem does not lie under its path".into()));
            }
            let (h, calls) = values.stem_hash::<H>(&stem);
            Ok((
                Node::Stem(Slot::new(
                    StemNode {
                        stem,
                        values,
                        stored_depth: Some(path.len() as u8),
                        written: None,
                    },
                    Some(h),
                    CLEAN,
                )),
                h,
                calls as u64,
            ))
        }
        NodeBlob::Group(group) => {
            let stored = group.group_depth;
            if stored != g {
                return Err(TrieError::GroupDepthMismatch {
                    stored,
                    expected: g,
                });
            }
            if !path.len().is_multiple_of(g as usize) {
                return Err(corrupt(format!(
                    "group blob at depth {}, not a multiple of {g}",
                    path.len()
                )));
            }
            let mut node = Node::Empty;
            let (h, calls) = expand_group::<H>(&group.entries, g, 0, 0, path.len(), &mut node)
                .map_err(corrupt)?;
            if !matches!(node, Node::Internal(_)) {
                return Err(corrupt("group blob does not hold an internal node".into()));
            }
            Ok((node, h, calls))
        }
    }
}

/// Builds the binary subtree of a group at relative depth `rel`, relative path `prefix`, for a
/// group rooted at absolute depth `base`, into `slot` (left as it was on an error), and hashes
/// it: an internal node is `H(left ‖ right)`, an empty side zero, an entry its stored hash.
/// Returns the hash and the hash calls. Errors (instead of building) when an internal node
/// would sit at depth 248 or deeper, or an entry below depth 248: no valid tree has either.
/// Each internal node is allocated before its children are built into it, so only its slot
/// (a pointer, a hash and an epoch) moves on the way back up: returning each subtree by value
/// copied it once per level (paired in one process, decoding a block's blobs took 3-4% less
/// time without those copies, at GD-4 and GD-5).
fn expand_group<H: TreeHasher>(
    entries: &[GroupEntry],
    g: u8,
    rel: u8,
    prefix: u16,
    base: usize,
    slot: &mut Node,
) -> Result<(Hash32, u64), String> {
    if entries.is_empty() {
        return Ok((ZERO_HASH, 0));
    }
    let depth = base + rel as usize;
    let span = 1u16 << (g - rel);
    let start = prefix << (g - rel);
    if entries.len() == 1 && entries[0].depth == rel && entries[0].index == start {
        if depth > MAX_DEPTH {
            return Err(format!(
                "group entry at depth {depth}, past the deepest stem"
            ));
        }
        let h = entries[0].hash;
        *slot = Node::Hashed(h);
        return Ok((h, 0));
    }
    if rel == g {
        // Decoded groups never have two entries at one bottom position.
        return Err("two group entries at one position".into());
    }
    if depth >= MAX_DEPTH {
        return Err(format!(
            "group expands to an internal node at depth {depth}"
        ));
    }
    let mid = start + span / 2;
    let split = entries.partition_point(|e| e.index < mid);
    let mut n = Slot::new(
        Internal {
            left: Node::Empty,
            right: Node::Empty,
        },
        None,
        CLEAN,
    );
    let (lh, ln) = expand_group::<H>(
        &entries[..split],
        g,
        rel + 1,
        prefix << 1,
        base,
        &mut n.left,
    )?;
    let (rh, rn) = expand_group::<H>(
        &entries[split..],
        g,
        rel + 1,
        (prefix << 1) | 1,
        base,
        &mut n.right,
    )?;
    let h = H::hash_pair(&lh, &rh);
    n.hash = Some(h);
    *slot = Node::Internal(n);
    Ok((h, ln + rn + 1))
}

/// Loads (and verifies) every node above depth `depth` under `node` at `path`: the resident
/// top ([`Trie::load_resident`]), the two halves in parallel above [`PAR_DEPTH`].
pub(super) fn load_top<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    depth: usize,
) -> Result<(), TrieError<S::Error>> {
    if path.len() >= depth {
        return Ok(());
    }
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
    }
    let Node::Internal(n) = node else {
        return Ok(());
    };
    let (Some(lp), Some(rp)) = (path.child(0), path.child(1)) else {
        return Err(TrieError::TooDeep);
    };
    let Internal { left, right, .. } = &mut **n;
    let (lr, rr) = join_halves(
        path.len() < PAR_DEPTH,
        || load_top::<S, H>(ctx, left, lp, depth),
        || load_top::<S, H>(ctx, right, rp, depth),
    );
    lr.and(rr)
}

/// Loads and verifies every unloaded node that [`apply`] would reach with this sorted,
/// non-empty batch, without changing anything else: the fallible half of an update, so that
/// [`apply`] finds everything loaded and an error leaves the tree as it was.
pub(super) fn preload<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<(), TrieError<S::Error>> {
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
    }
    // An empty node or a stem: `apply` builds new nodes below and loads nothing.
    let Node::Internal(n) = node else {
        return Ok(());
    };
    let (parallel, [(lp, lb), (rp, rb)]) = split_batch(&path, batch)?;
    let Internal { left, right, .. } = &mut **n;
    let (lr, rr) = join_halves(
        parallel,
        || match lb {
            [] => Ok(()),
            lb => preload::<S, H>(ctx, left, lp, lb),
        },
        || match rb {
            [] => Ok(()),
            rb => preload::<S, H>(ctx, right, rp, rb),
        },
    );
    lr.and(rr)
}
