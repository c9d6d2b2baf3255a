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
pub(crate) fn read_chained(
    requests: Vec<Request>,
    stop: &AtomicBool,
    mut then: impl FnMut(usize, &[u8]) -> Option<Request>,
) -> std::io::Result<Vec<Option<std::io::Result<Vec<u8>>>>> {
    let mut results: Vec<Option<std::io::Result<Vec<u8>>>> =
        (0..requests.len()).map(|_| None).collect();
    read_each(requests, stop, |i, res| {
        let next = res.as_ref().ok().and_then(|bytes| then(i, bytes));
        results[i] = Some(res);
        if next.is_some() {
            // The follow-up's slot: numbered in the order returned, as `read_each` does.
            results.push(None);
        }
        next
    })?;
    Ok(results)
}

/// The ring under [`read_all`] and [`read_chained`]: each read is handed to `done(i, result)`
/// as it completes, its bytes moved out (a short read is an `UnexpectedEof` error, a failed
/// one the OS error), and the request `done` returns (if any) is submitted next, before the
/// initial requests still waiting, numbered after every request so far. Stops submitting once
/// `stop` is set and returns when what was submitted has completed; requests never submitted
/// are never handed to `done`. `Err` when the ring cannot be made or waited on.
#[allow(unsafe_code)]
pub(crate) fn read_each(
    mut requests: Vec<Request>,
    stop: &AtomicBool,
    mut done: impl FnMut(usize, std::io::Result<Vec<u8>>) -> Option<Request>,
) -> std::io::Result<()> {
    use io_uring::{IoUring, opcode, types};
    let mut ring = IoUring::new(DEPTH)?;
    // Each buffer's heap block is neither moved nor freed from when its read is queued until
    // that read completes (growing `bufs` moves only the `Vec` headers; a buffer is moved out
    // only once its read has completed): the kernel writes into it in between.
    let mut bufs: Vec<Vec<u8>> = requests.iter().map(|r| vec![0u8; r.len]).collect();
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
            // its heap block outlives the read: it is moved out only after its completion is
            // reaped, and this function reaps every submitted read before it returns (and
            // leaks `bufs` if it cannot); the file stays open through `requests`.
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
        let completed: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (i, n) in completed {
            in_flight -= 1;
            let want = requests[i].len;
            let buf = std::mem::take(&mut bufs[i]);
            let res = if n < 0 {
                Err(std::io::Error::from_raw_os_error(-n))
            } else if n as usize != want {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("read {n} of {want} bytes"),
                ))
            } else {
                Ok(buf)
            };
            if let Some(r) = done(i, res) {
                pending.push_front(requests.len());
                bufs.push(vec![0u8; r.len]);
                requests.push(r);
            }
        }
    }
    Ok(())
}
