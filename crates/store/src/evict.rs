//! Evicting a database from the OS page cache, for cold-cache measurements.

use std::path::Path;

/// Asks the kernel to drop the cached pages of the database in `dir` (`posix_fadvise` with
/// `POSIX_FADV_DONTNEED` on its data file). Pages still mapped by an open environment may stay
/// resident: close every [`crate::StateStore`] on it first. Returns the data file's size.
pub fn evict_page_cache(dir: &Path) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(dir.join("mdbx.dat"))?;
    let len = file.metadata()?.len();
    // SAFETY: a plain syscall on a file descriptor we own for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(len)
}
