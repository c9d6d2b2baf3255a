//! Updates: a sorted batch applied by one recursive descent, split across rayon tasks.

use super::*;

/// Applies a sorted, deduplicated, non-empty batch under `node` at `path`. Returns whether
/// anything changed. After [`preload`] succeeded for the same batch it loads nothing and cannot
/// fail; it still loads (and checks depth) itself, so it is safe on its own.
pub(super) fn apply<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<bool, TrieError<S::Error>> {
    let depth = path.len();
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
    }
    let first = &batch[0].0.stem;
    let single_stem = batch[batch.len() - 1].0.stem == *first;
    match node {
        Node::Hashed(_) => unreachable!("replaced above"),
        Node::Empty => {
            if single_stem {
                let mut values = StemValues::new();
                for (k, v) in batch {
                    values.set(k.sub_index, *v);
                }
                *node = Node::Stem(Box::new(StemNode {
                    stem: *first,
                    values,
                    hash: None,
                    dirty: true,
                    stored_depth: None,
                }));
                return Ok(true);
            }
            *node = Node::new_internal(Node::Empty, Node::Empty);
        }
        Node::Stem(s) => {
            if single_stem && s.stem == *first {
                let mut changed = false;
                for (k, v) in batch {
                    changed |= s.values.set(k.sub_index, *v);
                }
                if changed {
                    s.hash = None;
                    s.dirty = true;
                }
                return Ok(changed);
            }
            // Another stem arrives: push this one down one level; the internal-node case below
            // keeps splitting until the stems part. (Two stems never share all 248 bits.)
            if depth >= MAX_DEPTH {
                return Err(TrieError::TooDeep);
            }
            let Node::Stem(mut s) = std::mem::replace(node, Node::Empty) else {
                unreachable!()
            };
            if s.stored_depth == Some(depth as u8) {
                ctx.vacated
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(path);
            }
            s.dirty = true;
            let bit = stem_bit(&s.stem, depth);
            let moved = Node::Stem(s);
            *node = if bit == 0 {
                Node::new_internal(moved, Node::Empty)
            } else {
                Node::new_internal(Node::Empty, moved)
            };
        }
        Node::Internal(_) => {}
    }
    let Node::Internal(n) = node else {
        unreachable!("every other case returned or became internal")
    };
    if depth >= MAX_DEPTH {
        return Err(TrieError::TooDeep);
    }
    let split = batch.partition_point(|(k, _)| stem_bit(&k.stem, depth) == 0);
    let (lb, rb) = batch.split_at(split);
    let lp = path.child(0).ok_or(TrieError::TooDeep)?;
    let rp = path.child(1).ok_or(TrieError::TooDeep)?;
    let Internal { left, right, .. } = &mut **n;
    let (lc, rc) = if batch.len() >= PAR_BATCH && !lb.is_empty() && !rb.is_empty() {
        rayon::join(
            || apply::<S, H>(ctx, left, lp, lb),
            || apply::<S, H>(ctx, right, rp, rb),
        )
    } else {
        let lc = if lb.is_empty() {
            Ok(false)
        } else {
            apply::<S, H>(ctx, left, lp, lb)
        };
        let rc = if rb.is_empty() {
            Ok(false)
        } else {
            apply::<S, H>(ctx, right, rp, rb)
        };
        (lc, rc)
    };
    let changed = lc? | rc?;
    if changed {
        n.hash = None;
        n.dirty = true;
    }
    Ok(changed)
}
