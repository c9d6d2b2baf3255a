//! A log's segments front to back, read ahead by a thread of their own, for the open's scan.
//!
//! The reads go around the page cache (`O_DIRECT`) where the filesystem allows it. A cold
//! open reads every byte of the log once, and through the page cache each byte is copied out
//! of pages the kernel has just filled: on this machine that copy was a quarter of a 16M-stem
//! open's CPU, on the thread the open waits for (`perf record`, forty-second session). Read
//! directly, the drive writes into a few buffers this module reuses, and the scan copies the
//! bytes once, from memory the process already holds.
//!
//! Where a direct read is refused (a filesystem without `O_DIRECT`, such as tmpfs) or comes
//! back short of a page boundary, the rest of the file is read through the page cache, as
//! every read was before: the bytes are the same either way. The end of a file is only ever
//! where a read returns no bytes.

use rustix::fs::OFlags;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// The bytes of one read ahead: smaller in tests, so that small logs span several pieces
/// and records straddle them.
pub(crate) const PIECE: usize = if cfg!(test) { 64 << 10 } else { 8 << 20 };

/// The alignment a direct read asks of its buffer, offset and length (a page: at least any
/// drive's logical block).
const ALIGN: usize = 4096;

/// Buffers in use at once: one being read into, one waiting in the queue, one being copied.
const BUFFERS: usize = 3;

/// One piece read from file `file` of the list: `len` bytes from `buf[start]`. A piece
/// shorter than [`PIECE`] (perhaps empty) is the file's last.
struct Piece {
    file: usize,
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

/// The bytes of a list of files, in order, read by one thread in the same few buffers
/// throughout. The thread stays at most two pieces ahead of the caller (one waiting, one
/// being read), going on into the next file once one ends. Dropping it stops the thread.
pub(crate) struct ReadAhead {
    pieces: Option<Receiver<std::io::Result<Piece>>>,
    spare: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
    /// The last file a piece taken has ended, if any.
    ended: Option<usize>,
    /// The thread sent an error (it sends nothing after one) or stopped.
    failed: bool,
}

impl ReadAhead {
    /// Starts reading `paths` from the first byte of the first. Fails only when the thread
    /// cannot be started; the files' own errors come from [`ReadAhead::append_next`].
    pub(crate) fn start(paths: Vec<PathBuf>) -> std::io::Result<ReadAhead> {
        let (to_scan, pieces) = sync_channel(1);
        let (spare, spares) = sync_channel(BUFFERS);
        let thread = std::thread::Builder::new()
            .name("log-read".into())
            .spawn(move || read_ahead(&paths, &to_scan, &spares))?;
        Ok(ReadAhead {
            pieces: Some(pieces),
            spare: Some(spare),
            thread: Some(thread),
            ended: None,
            failed: false,
        })
    }

    /// Appends the next bytes of file `file` (its place in the list) to `to`: a piece, at most
    /// [`PIECE`] bytes. Returns `false` once that file has ended (the piece that ends it may
    /// have appended bytes), and from then on appends nothing for it. Pieces of earlier files
    /// a caller stopped taking are passed over. An error (a file's, or the thread's end) is
    /// returned once; every call after it returns `false`.
    pub(crate) fn append_next(&mut self, file: usize, to: &mut Vec<u8>) -> std::io::Result<bool> {
        if self.failed || self.ended.is_some_and(|e| e >= file) {
            return Ok(false);
        }
        let piece = loop {
            let got = self.pieces.as_ref().map(Receiver::recv);
            let piece = match got {
                Some(Ok(Ok(piece))) => piece,
                Some(Ok(Err(e))) => {
                    self.failed = true;
                    return Err(e);
                }
                // The thread ends only after the last file or an error: this is its panic, or
                // a caller asking past the list.
                Some(Err(_)) | None => {
                    self.failed = true;
                    return Err(std::io::Error::other("the thread reading the log stopped"));
                }
            };
            if piece.file == file {
                break piece;
            }
            self.recycle(piece.buf);
        };
        to.extend_from_slice(&piece.buf[piece.start..piece.start + piece.len]);
        let last = piece.len < PIECE;
        if last {
            self.ended = Some(file);
        }
        self.recycle(piece.buf);
        Ok(!last)
    }

    /// Hands a buffer back to the thread.
    fn recycle(&self, buf: Vec<u8>) {
        if let Some(spare) = &self.spare {
            // Full or gone only once the thread has stopped: the buffer is then not needed.
            let _ = spare.try_send(buf);
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing both channels wakes the thread wherever it waits; it then ends.
        self.pieces = None;
        self.spare = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reading thread: pieces of each file of `paths` in turn, into `to_scan`, each file
/// until a read returns no bytes. Stops after an error (sent too), or when the scan stops
/// listening.
fn read_ahead(
    paths: &[PathBuf],
    to_scan: &SyncSender<std::io::Result<Piece>>,
    spares: &Receiver<Vec<u8>>,
) {
    let mut made = 0;
    for (file, path) in paths.iter().enumerate() {
        let mut source = match Source::open(path) {
            Ok(s) => s,
            Err(e) => {
                let _ = to_scan.send(Err(e));
                return;
            }
        };
        let mut at = 0u64;
        loop {
            let mut buf = match spares.try_recv() {
                Ok(buf) => buf,
                Err(_) if made < BUFFERS => {
                    made += 1;
                    vec![0u8; PIECE + ALIGN]
                }
                Err(_) => match spares.recv() {
                    Ok(buf) => buf,
                    Err(_) => return,
                },
            };
            let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
            let len = match source.read_full(&mut buf[start..start + PIECE], at) {
                Ok(len) => len,
                Err(e) => {
                    let _ = to_scan.send(Err(e));
                    return;
                }
            };
            let piece = Piece {
                file,
                buf,
                start,
                len,
            };
            if to_scan.send(Ok(piece)).is_err() {
                return;
            }
            if len < PIECE {
                break;
            }
            at += len as u64;
        }
    }
}

/// One file being read, directly while that works, through one handle from first byte to
/// last (a file removed or replaced by name meanwhile is still read whole, as it was).
struct Source {
    file: File,
    direct: bool,
}

impl Source {
    /// Opens `path` without waiting (`O_NONBLOCK`, so that a FIFO swapped in after the scan's
    /// own check cannot stop this thread) and refuses anything but a regular file. Its reads
    /// then wait as usual, and go around the page cache where the filesystem allows it.
    fn open(path: &Path) -> std::io::Result<Source> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "not a regular file, and every segment of a log is one",
            ));
        }
        let flags = rustix::fs::fcntl_getfl(&file)? - OFlags::NONBLOCK;
        rustix::fs::fcntl_setfl(&file, flags)?;
        let direct = rustix::fs::fcntl_setfl(&file, flags | OFlags::DIRECT).is_ok();
        Ok(Source { file, direct })
    }

    /// Reads into all of `dst` from offset `at`, stopping early only where a read returns no
    /// bytes (the end of the file): the bytes read.
    fn read_full(&mut self, dst: &mut [u8], at: u64) -> std::io::Result<usize> {
        let mut got = 0;
        while got < dst.len() {
            match self.file.read_at(&mut dst[got..], at + got as u64) {
                Ok(0) => break,
                Ok(k) => {
                    got += k;
                    // A direct read may go on only from a page boundary.
                    if self.direct && got % ALIGN != 0 {
                        self.through_page_cache()?;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if self.direct && e.kind() == ErrorKind::InvalidInput => {
                    self.through_page_cache()?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// Reads the rest of the file through the page cache (the same handle).
    fn through_page_cache(&mut self) -> std::io::Result<()> {
        let flags = rustix::fs::fcntl_getfl(&self.file)?;
        rustix::fs::fcntl_setfl(&self.file, flags - OFlags::DIRECT)?;
        self.direct = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_of_every_file_comes_back_in_order_at_sizes_around_the_pieces_and_pages() {
        let dir = tempfile::tempdir().unwrap();
        let lens = [
            0,
            1,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            PIECE - 1,
            PIECE,
            PIECE + 1,
            3 * PIECE + 5 * ALIGN + 17,
        ];
        let mut files = Vec::new();
        for (n, len) in lens.into_iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251 + n) as u8).collect();
            let path = dir.path().join(format!("seg{len}"));
            std::fs::write(&path, &bytes).unwrap();
            files.push((path, bytes));
        }
        let mut ahead = ReadAhead::start(files.iter().map(|f| f.0.clone()).collect()).unwrap();
        for (file, (_, bytes)) in files.iter().enumerate() {
            let mut out = Vec::new();
            while ahead.append_next(file, &mut out).unwrap() {}
            assert!(
                !ahead.append_next(file, &mut out).unwrap(),
                "nothing after the end"
            );
            assert!(out == *bytes, "{} bytes", bytes.len());
        }
    }

    #[test]
    fn the_pieces_of_a_file_left_unread_are_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![1u8; 4 * PIECE + 9]).unwrap();
        std::fs::write(&b, vec![2u8; PIECE + 3]).unwrap();
        let mut ahead = ReadAhead::start(vec![a, b]).unwrap();
        let mut out = Vec::new();
        assert!(ahead.append_next(0, &mut out).unwrap());
        out.clear();
        while ahead.append_next(1, &mut out).unwrap() {}
        assert_eq!(out, vec![2u8; PIECE + 3]);
    }

    /// A file `seg` of two pieces and 100 bytes in `dir`, and its bytes.
    fn two_pieces_and_a_bit(dir: &Path) -> (PathBuf, Vec<u8>) {
        let path = dir.join("seg");
        let bytes: Vec<u8> = (0..2 * PIECE + 100).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    /// Room for three pieces in `buf`, starting at a page boundary.
    fn three_aligned_pieces(buf: &mut Vec<u8>) -> &mut [u8] {
        *buf = vec![0u8; 3 * PIECE + ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN);
        &mut buf[start..start + 3 * PIECE]
    }

    #[test]
    fn reads_that_cannot_be_direct_go_through_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = two_pieces_and_a_bit(dir.path());
        // A direct read refused outright (an odd offset and address)...
        let mut source = Source::open(&path).unwrap();
        let mut buf = vec![0u8; PIECE + 1];
        assert_eq!(source.read_full(&mut buf[1..], 3).unwrap(), PIECE);
        assert!(!source.direct);
        assert!(buf[1..] == bytes[3..3 + PIECE]);
        // ...and one that ends past no page boundary (the file's end), then read on.
        let mut source = Source::open(&path).unwrap();
        let was_direct = source.direct;
        let mut buf = Vec::new();
        let dst = three_aligned_pieces(&mut buf);
        assert_eq!(source.read_full(dst, 0).unwrap(), bytes.len());
        assert!(dst[..bytes.len()] == bytes[..]);
        assert!(!source.direct, "the read ended off a page boundary");
        // Where the temporary directory's filesystem takes direct reads (ext4 here), they
        // were direct until then.
        if direct_possible(dir.path()) {
            assert!(was_direct);
        }
    }

    /// Whether a file in `dir` can be read with `O_DIRECT` (an aligned read of a page).
    fn direct_possible(dir: &Path) -> bool {
        let path = dir.join("probe");
        std::fs::write(&path, vec![1u8; ALIGN]).unwrap();
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::DIRECT.bits() as i32)
            .open(&path)
        else {
            return false;
        };
        let mut buf = vec![0u8; 2 * ALIGN];
        let start = buf.as_ptr().align_offset(ALIGN);
        file.read_at(&mut buf[start..start + ALIGN], 0).is_ok()
    }

    #[test]
    fn a_file_replaced_by_name_while_read_is_read_whole_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = two_pieces_and_a_bit(dir.path());
        let mut source = Source::open(&path).unwrap();
        let mut buf = Vec::new();
        let dst = three_aligned_pieces(&mut buf);
        assert_eq!(source.read_full(&mut dst[..PIECE], 0).unwrap(), PIECE);
        // Removed, and another file made under its name (as a rewind and a new segment may).
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, vec![0xeeu8; 4 * PIECE]).unwrap();
        let rest = source.read_full(&mut dst[PIECE..], PIECE as u64).unwrap();
        assert_eq!(PIECE + rest, bytes.len());
        assert!(dst[..bytes.len()] == bytes[..]);
    }

    #[test]
    fn a_file_that_is_no_regular_file_is_refused_by_the_reading_thread_too() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        crate::tests::make_fifo(&fifo);
        for path in [fifo, PathBuf::from("/dev/zero"), dir.path().to_path_buf()] {
            let mut ahead = ReadAhead::start(vec![path.clone()]).unwrap();
            let err = ahead.append_next(0, &mut Vec::new()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{}", path.display());
        }
    }

    #[test]
    fn a_missing_file_is_an_error_not_an_end() {
        let dir = tempfile::tempdir().unwrap();
        let there = dir.path().join("there");
        std::fs::write(&there, b"bytes").unwrap();
        let mut ahead = ReadAhead::start(vec![there, dir.path().join("none")]).unwrap();
        let mut out = Vec::new();
        assert!(!ahead.append_next(0, &mut out).unwrap());
        assert_eq!(out, b"bytes");
        let err = ahead.append_next(1, &mut out).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(!ahead.append_next(1, &mut out).unwrap());
    }

    #[test]
    fn a_reader_dropped_early_stops_its_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        std::fs::write(&path, vec![5u8; 6 * PIECE]).unwrap();
        let mut ahead = ReadAhead::start(vec![path]).unwrap();
        let mut out = Vec::new();
        assert!(ahead.append_next(0, &mut out).unwrap());
        // Joins the thread, which is blocked sending the next piece: a hang fails the test.
        drop(ahead);
        assert_eq!(out, vec![5u8; PIECE]);
    }
}
