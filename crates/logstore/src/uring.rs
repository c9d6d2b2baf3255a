//! Many positioned reads kept in flight from one thread: one io_uring, up to [`DEPTH`] reads
//! at once, instead of one blocking thread per read.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Reads kept in flight. Measured on this machine's drive (virtio, `examples/warm.rs`, 641
/// stems' paths, 2,200 reads of a 4M-stem log, cold): 66-70k reads/s at 64, 76-78k at 128,
/// 68-104k (mostly 90-100k) at 256. The drive completes reads in waves of the queue's depth,
/// so a deeper queue is fewer waves.
pub(crate) const DEPTH: u32 = 256;

/// One read: the file, the offset and the length.
pub(crate) struct Request {
    pub(crate) file: Arc<File>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// Reads every request, at most [`DEPTH`] at a time, and returns their bytes in request order
/// (stopping early, with what was read so far marked `None`, once `stop` is set). `Err` when
/// the ring cannot be made (io_uring disabled): the caller falls back to blocking reads. A
/// short or failed read is an error for that request only: its slot is `Some(Err(..))`.
pub(crate) fn read_all(
    requests: Vec<Request>,
    stop: &AtomicBool,
) -> std::io::Result<Vec<Option<std::io::Result<Vec<u8>>>>> {
    read_chained(requests, stop, |_, _| None)
}

/// [`read_all`], where each read that completes whole is handed to `then(i, bytes)` at once,
/// and the request it returns (if any) joins the ring while the others are still in flight:
/// a read that depends on another (a contract's code on its account's stem) costs one more
/// device latency, not another round of the whole batch: a follow-up is submitted before
/// the initial requests still waiting (the drive completes reads in waves of about
/// [`DEPTH`]; this puts the follow-ups of one wave into the next). Follow-up requests are
/// numbered after the initial ones, in the order `then` returned them; the result has one
/// slot each.
#[allow(unsafe_code)]
pub(crate) fn read_chained(
    mut requests: Vec<Request>,
    stop: &AtomicBool,
    mut then: impl FnMut(usize, &[u8]) -> Option<Request>,
) -> std::io::Result<Vec<Option<std::io::Result<Vec<u8>>>>> {
    use io_uring::{IoUring, opcode, types};
    let mut ring = IoUring::new(DEPTH)?;
    // Each buffer is allocated when its request is queued and its heap block is neither moved
    // nor freed until the last completion is reaped (growing `bufs` moves only the `Vec`
    // headers): the kernel writes into them in between.
    let mut bufs: Vec<Vec<u8>> = requests.iter().map(|r| vec![0u8; r.len]).collect();
    let mut results: Vec<Option<i32>> = vec![None; requests.len()];
    // Requests not yet submitted, next first: follow-ups go to the front.
    let mut pending: std::collections::VecDeque<usize> = (0..requests.len()).collect();
    let mut in_flight = 0u32;
    loop {
        while in_flight < DEPTH && !stop.load(Ordering::Relaxed) {
            let Some(&next) = pending.front() else {
                break;
            };
            let r = &requests[next];
            let len = u32::try_from(r.len).expect("records are far below 4 GiB");
            let e = opcode::Read::new(types::Fd(r.file.as_raw_fd()), bufs[next].as_mut_ptr(), len)
                .offset(r.offset)
                .build()
                .user_data(next as u64);
            // SAFETY: `bufs[next]` is `len` bytes, owned here, used by no other request, and
            // its heap block outlives the read: this function reaps every submitted read
            // before it returns (and leaks `bufs` if it cannot); the file stays open through
            // `requests`.
            if unsafe { ring.submission().push(&e) }.is_err() {
                break;
            }
            pending.pop_front();
            in_flight += 1;
        }
        if in_flight == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Reads may still be in flight into `bufs`: never free them.
            std::mem::forget(bufs);
            return Err(e);
        }
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (i, res) in done {
            in_flight -= 1;
            results[i] = Some(res);
            if usize::try_from(res).ok() == Some(requests[i].len)
                && let Some(r) = then(i, &bufs[i])
            {
                pending.push_front(requests.len());
                bufs.push(vec![0u8; r.len]);
                results.push(None);
                requests.push(r);
            }
        }
    }
    Ok(bufs
        .into_iter()
        .zip(results)
        .zip(&requests)
        .map(|((buf, res), r)| {
            res.map(|n| {
                if n < 0 {
                    Err(std::io::Error::from_raw_os_error(-n))
                } else if n as usize != r.len {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("read {n} of {} bytes", r.len),
                    ))
                } else {
                    Ok(buf)
                }
            })
        })
        .collect())
}
