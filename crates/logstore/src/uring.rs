//! Many positioned reads kept in flight from one thread: one io_uring, up to [`DEPTH`] reads
//! at once (the drive's saturation depth here), instead of one blocking thread per read.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Reads kept in flight.
pub(crate) const DEPTH: u32 = 64;

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
#[allow(unsafe_code)]
pub(crate) fn read_all(
    requests: &[Request],
    stop: &AtomicBool,
) -> std::io::Result<Vec<Option<std::io::Result<Vec<u8>>>>> {
    use io_uring::{IoUring, opcode, types};
    let mut ring = IoUring::new(DEPTH)?;
    // Every buffer is allocated before the first submission and neither moved nor freed until
    // the last completion is reaped: the kernel writes into them in between.
    let mut bufs: Vec<Vec<u8>> = requests.iter().map(|r| vec![0u8; r.len]).collect();
    let mut out: Vec<Option<std::io::Result<Vec<u8>>>> = Vec::with_capacity(requests.len());
    out.resize_with(requests.len(), || None);
    let mut results: Vec<Option<i32>> = vec![None; requests.len()];
    let mut next = 0usize;
    let mut in_flight = 0u32;
    loop {
        while in_flight < DEPTH && next < requests.len() && !stop.load(Ordering::Relaxed) {
            let r = &requests[next];
            let len = u32::try_from(r.len).expect("records are far below 4 GiB");
            let e = opcode::Read::new(types::Fd(r.file.as_raw_fd()), bufs[next].as_mut_ptr(), len)
                .offset(r.offset)
                .build()
                .user_data(next as u64);
            // SAFETY: `bufs[next]` is `len` bytes, owned here, used by no other request, and
            // outlives the read: this function reaps every submitted read before it returns
            // (and leaks `bufs` if it cannot); the file stays open through `requests`.
            if unsafe { ring.submission().push(&e) }.is_err() {
                break;
            }
            next += 1;
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
        for c in ring.completion() {
            in_flight -= 1;
            results[c.user_data() as usize] = Some(c.result());
        }
    }
    for (i, (buf, res)) in bufs.into_iter().zip(results).enumerate() {
        out[i] = res.map(|n| {
            if n < 0 {
                Err(std::io::Error::from_raw_os_error(-n))
            } else if n as usize != requests[i].len {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("read {n} of {} bytes", requests[i].len),
                ))
            } else {
                Ok(buf)
            }
        });
    }
    Ok(out)
}
