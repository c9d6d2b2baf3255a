//! Code chunking (SPEC §2).

/// Bytes of code carried by one chunk (the 32nd byte, first in the chunk, is the push-data
/// count): code of `len` bytes takes `len.div_ceil(CHUNK_BODY_LEN)` chunks.
pub const CHUNK_BODY_LEN: usize = 31;
const PUSH1: u8 = 0x60;
const PUSH32: u8 = 0x7f;

/// Splits code into 32-byte chunks per SPEC §2.
///
/// The code is zero-padded to a multiple of 31 bytes and cut into `ceil(len / 31)` chunks;
/// chunk `i` is `[n] ‖ code[31i .. 31i + 31]`, where `n` is the number of leading bytes of
/// this chunk that are push data of a PUSH1..PUSH32 (0x60..=0x7f) that started in an earlier
/// chunk, capped at 31. Empty code gives no chunks. Identical to geth's `ChunkifyCode`.
pub fn chunkify_code(code: &[u8]) -> Vec<[u8; 32]> {
    let count = code.len().div_ceil(CHUNK_BODY_LEN);
    let mut chunks = Vec::with_capacity(count);
    // Position of the next instruction (opcode) at or after the start of the current chunk.
    let mut pc: usize = 0;
    for (i, body) in code.chunks(CHUNK_BODY_LEN).enumerate() {
        let start = i * CHUNK_BODY_LEN;
        while pc < start {
            pc = next_instruction(code, pc);
        }
        let mut chunk = [0u8; 32];
        // pc >= start here; anything past 31 bytes is capped.
        chunk[0] = (pc - start).min(CHUNK_BODY_LEN) as u8;
        chunk[1..=body.len()].copy_from_slice(body);
        chunks.push(chunk);
    }
    chunks
}

/// The code of length `len` whose chunks, in chunk order, are `chunks`: the inverse of
/// [`chunkify_code`] (the 31-byte bodies concatenated and cut to `len`). `None` when the
/// iterator ends before the `ceil(len / 31)` chunks the code needs (a missing chunk is `None`
/// in it too). The push-data counts are not checked: a caller compares the result with the
/// account's code hash before trusting it.
pub fn code_from_chunks<'a>(
    chunks: impl IntoIterator<Item = Option<&'a [u8; 32]>>,
    len: usize,
) -> Option<Vec<u8>> {
    let count = len.div_ceil(CHUNK_BODY_LEN);
    let mut code = Vec::with_capacity(count * CHUNK_BODY_LEN);
    let mut chunks = chunks.into_iter();
    for _ in 0..count {
        code.extend_from_slice(&chunks.next()??[1..]);
    }
    code.truncate(len);
    Some(code)
}

/// Position of the instruction after the one at `pc` (skipping its push data, if any).
fn next_instruction(code: &[u8], pc: usize) -> usize {
    let op = code.get(pc).copied().unwrap_or(0);
    let data_len = if (PUSH1..=PUSH32).contains(&op) {
        usize::from(op - PUSH1) + 1
    } else {
        0
    };
    pc.saturating_add(1 + data_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(chunk: &[u8; 32]) -> &[u8] {
        &chunk[1..]
    }

    #[test]
    fn empty_code_has_no_chunks() {
        assert!(chunkify_code(&[]).is_empty());
    }

    #[test]
    fn push_data_spilling_into_next_chunk() {
        // 28 JUMPDESTs, then PUSH4 0x99989796, PUSH1 0x80, MSTORE (the EIP's example).
        let mut code = vec![0x5b; 28];
        code.extend_from_slice(&[0x63, 0x99, 0x98, 0x97, 0x96, 0x60, 0x80, 0x52]);
        let chunks = chunkify_code(&code);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0][0], 0);
        assert_eq!(chunks[1][0], 2);
    }

    #[test]
    fn push32_covering_a_whole_chunk_is_capped_at_31() {
        // PUSH32 at offset 30: data at 31..=62 covers all of chunk 1 and byte 0 of chunk 2.
        let mut code = vec![0x5b; 30];
        code.push(PUSH32);
        code.extend_from_slice(&[0xee; 32]);
        code.push(0x00);
        let chunks = chunkify_code(&code);
        assert_eq!(chunks.len(), 3);
        assert_eq!([chunks[0][0], chunks[1][0], chunks[2][0]], [0, 31, 1]);
    }

    #[test]
    fn truncated_push_at_the_end_does_not_panic() {
        let mut code = vec![0x00; 31];
        code.push(PUSH32); // data would run past the end of the code
        let chunks = chunkify_code(&code);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1][0], 0);
        // A PUSH32 at offset 30 whose data runs off the end of a 1-byte final chunk: the
        // chunk's padded body counts as push data too, capped at 31 (as geth does).
        let mut code = vec![0x00; 30];
        code.extend_from_slice(&[PUSH32, 0x01]);
        let chunks = chunkify_code(&code);
        assert_eq!(chunks[1][0], 31);
    }

    #[test]
    fn push_data_looking_like_push_is_skipped() {
        // PUSH2 0x60 0x60 ending exactly at the chunk boundary: the 0x60 at offset 30 is data,
        // not a PUSH1 whose data would spill into chunk 1.
        let mut code = vec![0x00; 28];
        code.extend_from_slice(&[0x61, 0x60, 0x60]);
        code.extend_from_slice(&[0x00; 32]);
        let chunks = chunkify_code(&code);
        assert_eq!([chunks[0][0], chunks[1][0], chunks[2][0]], [0, 0, 0]);
        // Same, shifted one byte right: now the PUSH2 data spills one byte into chunk 1.
        let mut code = vec![0x00; 29];
        code.extend_from_slice(&[0x61, 0x60, 0x60]);
        code.extend_from_slice(&[0x00; 31]);
        let chunks = chunkify_code(&code);
        assert_eq!([chunks[0][0], chunks[1][0], chunks[2][0]], [0, 1, 0]);
    }

    proptest! {
        #[test]
        fn length_and_bodies(code in proptest::collection::vec(any::<u8>(), 0..700)) {
            let chunks = chunkify_code(&code);
            prop_assert_eq!(chunks.len(), code.len().div_ceil(31));
            let mut padded = code.clone();
            padded.resize(chunks.len() * 31, 0);
            let bodies: Vec<u8> = chunks.iter().flat_map(|c| body(c).to_vec()).collect();
            prop_assert_eq!(bodies, padded);
            for c in &chunks {
                prop_assert!(c[0] <= 31);
            }
        }

        #[test]
        fn chunks_give_the_code_back(code in proptest::collection::vec(any::<u8>(), 0..700)) {
            let chunks = chunkify_code(&code);
            prop_assert_eq!(code_from_chunks(chunks.iter().map(Some), code.len()), Some(code.clone()));
            // One chunk short, or one missing, is no code.
            if let Some((_, head)) = chunks.split_last() {
                prop_assert_eq!(code_from_chunks(head.iter().map(Some), code.len()), None);
                let holed = chunks.iter().enumerate().map(|(i, c)| (i != head.len() / 2).then_some(c));
                prop_assert_eq!(code_from_chunks(holed, code.len()), None);
            }
        }

        #[test]
        fn push_heavy_code(code in proptest::collection::vec(0x5fu8..=0x7f, 0..400)) {
            let chunks = chunkify_code(&code);
            prop_assert_eq!(chunks.len(), code.len().div_ceil(31));
            prop_assert_eq!(chunks.first().map(|c| c[0]), code.first().map(|_| 0));
            // Reference: mark push-data bytes, then count leading ones per chunk.
            let mut is_data = vec![false; code.len().div_ceil(31) * 31 + 33];
            let mut pc = 0;
            while pc < code.len() {
                let op = code[pc];
                let n = if (0x60..=0x7f).contains(&op) { usize::from(op - 0x5f) } else { 0 };
                for d in is_data.iter_mut().skip(pc + 1).take(n) {
                    *d = true;
                }
                pc += 1 + n;
            }
            for (i, c) in chunks.iter().enumerate() {
                let lead = is_data[i * 31..i * 31 + 31].iter().take_while(|d| **d).count();
                prop_assert_eq!(usize::from(c[0]), lead);
            }
        }
    }
}
