//! Updates: a sorted batch applied by one recursive descent, split across rayon tasks.

use super::*;

/// Applies a sorted, deduplicated, non-empty batch under `node` at `path`. Returns whether
/// anything changed. After [`preload`] succeeded for the same batch it loads nothing and cannot
/// fail; on its own (a trie with nothing uncommitted: [`Trie::apply_sorted`]) it loads (and
/// checks depth) as it goes, and an error leaves part of the batch applied, for the caller to
/// discard.
///
/// The recursion is as deep as the tree (up to 248 levels), so this frame holds only the
/// descent: the cases that end it or rebuild a node are in [`leaf`], which is never inlined.
/// (In a debug build, with them inline, the frame was 5.4 KB and a 248-deep path took 1.3 MB
/// of a worker's 2 MB stack.)
pub(super) fn apply<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<bool, TrieError<S::Error>> {
    if let Some(done) = leaf::<S, H>(ctx, node, &path, batch)? {
        return Ok(done);
    }
    let Node::Internal(n) = node else {
        unreachable!("leaf returned or left an internal node")
    };
    let (parallel, [(lp, lb), (rp, rb)]) = split_batch(&path, batch)?;
    let Internal { left, right, .. } = &mut **n;
    let (lc, rc) = join_halves(
        parallel,
        || match lb {
            [] => Ok(false),
            lb => apply::<S, H>(ctx, left, lp, lb),
        },
        || match rb {
            [] => Ok(false),
            rb => apply::<S, H>(ctx, right, rp, rb),
        },
    );
    let changed = lc? | rc?;
    if changed {
        n.hash = None;
        n.dirty = ctx.epoch;
    }
    Ok(changed)
}

/// The non-recursive part of [`apply`] at `node`: loads it if it is unloaded, then either
/// finishes the batch here (`Some(changed)`: a new stem in an empty slot, or values written
/// into this stem) or leaves `node` internal for [`apply`] to split the batch under (`None`:
/// an empty slot or a stem that another stem arrives at becomes an internal node, the stem
/// pushed one level down).
#[inline(never)]
fn leaf<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: &Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<Option<bool>, TrieError<S::Error>> {
    let depth = path.len();
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, path, h)?;
    }
    let first = &batch[0].0.stem;
    let single_stem = batch[batch.len() - 1].0.stem == *first;
    match node {
        Node::Hashed(_) => unreachable!("replaced above"),
        Node::Empty => {
            // A new node here (a stem, or an internal node the batch splits under): at or
            // below the resident depth, the next trim drops it.
            ctx.note_below(path);
            if single_stem {
                let mut values = StemValues::new();
                for (k, v) in batch {
                    values.set(k.sub_index, *v);
                }
                *node = Node::Stem(Slot::new(
                    StemNode {
                        stem: *first,
                        values,
                        stored_depth: None,
                        written: None,
                    },
                    None,
                    ctx.epoch,
                ));
                return Ok(Some(true));
            }
            *node = Node::new_internal(Node::Empty, Node::Empty, ctx.epoch);
        }
        Node::Stem(s) => {
            if single_stem && s.stem == *first {
                let mut changed = false;
                for (k, v) in batch {
                    changed |= s.values.set(k.sub_index, *v);
                }
                if changed {
                    s.hash = None;
                    s.dirty = ctx.epoch;
                }
                return Ok(Some(changed));
            }
            // Another stem arrives: push this one down one level; the internal-node case in
            // `apply` keeps splitting until the stems part. (Two stems never share all 248
            // bits.)
            if depth >= MAX_DEPTH {
                return Err(TrieError::TooDeep);
            }
            let Node::Stem(mut s) = std::mem::replace(node, Node::Empty) else {
                unreachable!()
            };
            if s.stored_at(ctx.epoch) == Some(depth as u8) {
                ctx.vacated
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(*path);
            }
            s.dirty = ctx.epoch;
            let bit = stem_bit(&s.stem, depth);
            // Pushed down to or past the resident depth, perhaps on another prefix than any
            // written stem's: noted, so the next trim drops it.
            if let Some(down) = path.child(bit) {
                ctx.note_below(&down);
            }
            let moved = Node::Stem(s);
            *node = if bit == 0 {
                Node::new_internal(moved, Node::Empty, ctx.epoch)
            } else {
                Node::new_internal(Node::Empty, moved, ctx.epoch)
            };
        }
        Node::Internal(_) => {}
    }
    // An internal node at depth 248 is refused by `split_batch`, before any bit is read.
    Ok(None)
}
