//! Evicting a database from the OS page cache, for cold-cache measurements.

use std::path::Path;

/// Asks the kernel to drop the cached pages of the database in `dir` (`posix_fadvise` with
/// `POSIX_FADV_DONTNEED` on its data file). Pages still mapped by an open environment may stay
/// resident: close every [`crate::StateStore`] on it first. Returns the data file's size.
pub fn evict_page_cache(dir: &Path) -> std::io::Result<u64> {
    let file = std::fs::File::open(dir.join("mdbx.dat"))?;
    let len = file.metadata()?.len();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(len)
}
