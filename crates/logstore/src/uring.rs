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
    read_chained(requests, stop, |_, _| None::<Request>)
}

/// [`read_all`], where each read that completes whole is handed to `then(i, bytes)` at once,
/// and the requests it returns (if any) join the ring while the others are still in flight:
/// a read that depends on another (a contract's code on its account's stem) costs one more
/// device latency, not another round of the whole batch: a follow-up is submitted before
/// the initial requests still waiting (the drive completes reads in waves of about
/// [`DEPTH`]; this puts the follow-ups of one wave into the next). Follow-up requests are
/// numbered after the initial ones, in the order `then` returned them (within one call, in
/// its iterator's order); the result has one slot each.
pub(crate) fn read_chained<I>(
    requests: Vec<Request>,
    stop: &AtomicBool,
    mut then: impl FnMut(usize, &[u8]) -> I,
) -> std::io::Result<Vec<Option<std::io::Result<Vec<u8>>>>>
where
    I: IntoIterator<Item = Request>,
{
    let mut results: Vec<Option<std::io::Result<Vec<u8>>>> =
        (0..requests.len()).map(|_| None).collect();
    let mut initial = requests.into_iter().enumerate();
    read_fed(
        stop,
        || initial.next().map(|(i, r)| (r, i)),
        |i, res| {
            let next: Vec<Request> = match &res {
                Ok(bytes) => then(i, bytes).into_iter().collect(),
                Err(_) => Vec::new(),
            };
            results[i] = Some(res);
            // The follow-ups' slots: numbered after every request so far, in the order returned.
            let first = results.len();
            results.resize_with(first + next.len(), || None);
            next.into_iter().zip(first..)
        },
    )?;
    Ok(results)
}

/// Reads submitted at once before the ring goes on pulling: the drive starts on them while
/// the source finds the rest (a source that does work per request, like the trie prefetch's
/// index walk, would otherwise hold every read back until the ring is full). A buffered read's
/// submission cost the kernel about 6 µs in a traced block (pages allocated and put in the
/// page cache), and the device saw none of a batch until the whole batch was submitted: by
/// that estimate 8 rather than 32 lets the first reads start about 0.15 ms sooner. Measured:
/// the state batch's state read was shorter in 33 of 48 alternating cold runs of the mainnet
/// blocks, read first; the trie prefetch's reads no different in two rounds.
const SUBMIT_EVERY: u32 = 8;

/// One read in the ring: its buffer, its request (which keeps the file open) and its tag.
struct InFlight<T> {
    buf: Vec<u8>,
    request: Request,
    tag: T,
}

/// The ring itself: pulls requests from `next` (each with a tag) while fewer than [`DEPTH`]
/// are in flight, submitting every [`SUBMIT_EVERY`] so the drive starts on them while `next`
/// works, and hands each completed read to `done(tag, result)` (its bytes moved out; a short
/// read is an `UnexpectedEof` error, a failed one the OS error). The requests `done` returns
/// are submitted, in order, before anything `next` has not yet given. `next` returning `None`
/// ends the pulling for good; the ring returns once what it submitted has completed. Stops
/// pulling once `stop` is set. `Err` when the ring cannot be made (before `next` is ever
/// called) or waited on.
#[allow(unsafe_code)]
pub(crate) fn read_fed<T, F>(
    stop: &AtomicBool,
    mut next: impl FnMut() -> Option<(Request, T)>,
    mut done: impl FnMut(T, std::io::Result<Vec<u8>>) -> F,
) -> std::io::Result<()>
where
    F: IntoIterator<Item = (Request, T)>,
{
    use io_uring::{IoUring, opcode, types};
    let mut ring = IoUring::new(DEPTH)?;
    // Each in-flight buffer's heap block is neither moved nor freed from when its read is
    // queued until that read completes (growing `slots` moves only the `Vec` headers; a slot is
    // emptied only once its read has completed): the kernel writes into it in between.
    let mut slots: Vec<Option<InFlight<T>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Follow-ups returned by `done`, submitted before anything new from `next`.
    let mut follow: std::collections::VecDeque<(Request, T)> = std::collections::VecDeque::new();
    let mut pulled_all = false;
    let mut in_flight = 0u32;
    loop {
        let mut queued = 0u32;
        while in_flight < DEPTH && !stop.load(Ordering::Relaxed) {
            let item = match follow.pop_front() {
                Some(item) => Some(item),
                None if pulled_all => None,
                None => {
                    let item = next();
                    pulled_all = item.is_none();
                    item
                }
            };
            let Some((request, tag)) = item else {
                break;
            };
            let len = u32::try_from(request.len).expect("records are far below 4 GiB");
            let slot = free.pop().unwrap_or_else(|| {
                slots.push(None);
                slots.len() - 1
            });
            let entry = slots[slot].insert(InFlight {
                buf: vec![0u8; request.len],
                request,
                tag,
            });
            let e = opcode::Read::new(
                types::Fd(entry.request.file.as_raw_fd()),
                entry.buf.as_mut_ptr(),
                len,
            )
            .offset(entry.request.offset)
            .build()
            .user_data(slot as u64);
            // SAFETY: the slot's buffer is `len` bytes, owned here, used by no other read, and
            // its heap block outlives the read: the slot is emptied only after its completion
            // is reaped, and this function reaps every submitted read before it returns (and
            // leaks `slots` if it cannot); the slot's request keeps the file open.
            // The queue holds DEPTH entries and fewer than DEPTH reads are queued or in flight,
            // so it has room; if the kernel ever disagrees, that is an error, not a read
            // quietly dropped.
            if unsafe { ring.submission().push(&e) }.is_err() {
                std::mem::forget(slots);
                return Err(std::io::Error::other(
                    "the io_uring submission queue is full",
                ));
            }
            in_flight += 1;
            queued += 1;
            if queued.is_multiple_of(SUBMIT_EVERY)
                && let Err(e) = ring.submit()
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                // Reads may be in flight into the slots' buffers: never free them.
                std::mem::forget(slots);
                return Err(e);
            }
        }
        if in_flight == 0 {
            break;
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Reads may still be in flight into the slots' buffers: never free them.
            std::mem::forget(slots);
            return Err(e);
        }
        let completed: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (slot, n) in completed {
            in_flight -= 1;
            let InFlight { buf, request, tag } = slots[slot].take().expect("a submitted slot");
            free.push(slot);
            let want = request.len;
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
            follow.extend(done(tag, res));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A file of `n` bytes where byte `i` is `i % 251`.
    fn patterned(n: usize) -> (tempfile::NamedTempFile, Arc<File>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let bytes: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        f.write_all(&bytes).unwrap();
        let file = Arc::new(File::open(f.path()).unwrap());
        (f, file)
    }

    fn expected(offset: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((offset as usize + i) % 251) as u8)
            .collect()
    }

    #[test]
    fn a_fed_ring_reads_every_pulled_request_and_its_follow_ups_once() {
        let (_keep, file) = patterned(1 << 20);
        // More than DEPTH requests, so the ring must pull as reads complete; every tenth
        // completion asks for a follow-up read, every twentieth for two.
        let total = 3 * DEPTH as usize + 7;
        let request = |i: usize| Request {
            file: Arc::clone(&file),
            offset: (i as u64 * 4099) % ((1 << 20) - 600),
            len: 1 + i % 500,
        };
        let mut pulled = 0usize;
        let mut seen = vec![0u32; total * 3];
        let mut follow_ups = 0usize;
        let ring = read_fed(
            &AtomicBool::new(false),
            || {
                (pulled < total).then(|| {
                    pulled += 1;
                    (request(pulled - 1), pulled - 1)
                })
            },
            |tag: usize, res| {
                let r = request(tag);
                assert_eq!(res.unwrap(), expected(r.offset, r.len), "read {tag}");
                seen[tag] += 1;
                let mut more = Vec::new();
                if tag < total && tag.is_multiple_of(10) {
                    more.push((request(total + tag), total + tag));
                }
                if tag < total && tag.is_multiple_of(20) {
                    more.push((request(2 * total + tag), 2 * total + tag));
                }
                follow_ups += more.len();
                more
            },
        );
        if let Err(e) = ring {
            // The ring fails only where it cannot be made: then nothing was pulled.
            assert_eq!(pulled, 0, "{e}");
            eprintln!("io_uring unavailable here ({e}): nothing to check");
            return;
        }
        assert_eq!(pulled, total);
        assert_eq!(follow_ups, total.div_ceil(10) + total.div_ceil(20));
        for (tag, n) in seen.iter().enumerate() {
            let want = u32::from(
                tag < total
                    || (tag < 2 * total && (tag - total).is_multiple_of(10))
                    || (tag >= 2 * total && (tag - 2 * total).is_multiple_of(20)),
            );
            assert_eq!(*n, want, "read {tag} handed on {n} times");
        }
    }

    #[test]
    fn a_chained_ring_numbers_each_follow_up_after_the_requests_in_the_order_returned() {
        let (_keep, file) = patterned(1 << 16);
        let at = |offset: u64| Request {
            file: Arc::clone(&file),
            offset,
            len: 10,
        };
        let n = 30;
        // Request i returns i % 3 follow-ups, each at an offset of its own.
        let mut returned: Vec<u64> = Vec::new();
        let results = read_chained(
            (0..n).map(|i| at(i as u64 * 100)).collect(),
            &AtomicBool::new(false),
            |i, bytes| {
                if i >= n {
                    return Vec::new();
                }
                assert_eq!(bytes, expected(i as u64 * 100, 10), "read {i}");
                let more: Vec<u64> = (0..i % 3)
                    .map(|k| 10_000 + (i * 3 + k) as u64 * 50)
                    .collect();
                returned.extend(&more);
                more.into_iter().map(at).collect()
            },
        );
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                eprintln!("io_uring unavailable here ({e}): nothing to check");
                return;
            }
        };
        assert_eq!(returned.len(), (0..n).map(|i| i % 3).sum::<usize>());
        assert_eq!(results.len(), n + returned.len());
        for (k, offset) in returned.iter().enumerate() {
            let got = results[n + k].as_ref().expect("read").as_ref().unwrap();
            assert_eq!(got, &expected(*offset, 10), "follow-up {k}");
        }
    }

    #[test]
    fn a_short_read_fails_alone_and_stop_ends_the_pulling() {
        let (_keep, file) = patterned(10_000);
        let stop = AtomicBool::new(false);
        let (mut pulled, mut ok, mut short) = (0usize, 0usize, 0usize);
        let ring = read_fed(
            &stop,
            || {
                pulled += 1;
                // Request 3 runs past the end of the file; the rest fit.
                let offset = if pulled == 4 { 9_990 } else { 100 };
                Some((
                    Request {
                        file: Arc::clone(&file),
                        offset,
                        len: 20,
                    },
                    pulled,
                ))
            },
            |_, res| {
                match res {
                    Ok(bytes) => {
                        assert_eq!(bytes, expected(100, 20));
                        ok += 1;
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
                        short += 1;
                    }
                }
                // An endless source: the ring ends only because of the stop.
                if ok + short >= 600 {
                    stop.store(true, Ordering::Relaxed);
                }
                None::<(Request, usize)>
            },
        );
        if let Err(e) = ring {
            assert_eq!(pulled, 0, "{e}");
            eprintln!("io_uring unavailable here ({e}): nothing to check");
            return;
        }
        assert_eq!(short, 1);
        // Everything pulled was read and handed on; the pulling stopped at the stop (at most a
        // ring's depth was in flight then).
        assert_eq!(ok + short, pulled);
        assert!(pulled < 600 + DEPTH as usize, "pulled {pulled}");
    }
}
