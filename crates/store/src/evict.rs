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

/// What [`warm_branch_pages`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarmBranches {
    /// The branch pages of the flat stem table and the node table (MDBX's counts).
    pub branch_pages: u64,
    /// Their leaf pages.
    pub leaf_pages: u64,
    /// Lookups made, evenly spread over each table's key space.
    pub lookups: u64,
    /// Distinct leaf pages those lookups read, evicted again afterwards.
    pub leaf_pages_evicted: u64,
}

/// Lookups per branch page of a table that [`warm_branch_pages`] makes: enough that a branch
/// page covering a quarter of an average one's share of the (uniform) keys is still met
/// about twice.
const LOOKUPS_PER_BRANCH: u64 = 8;

/// The tables whose branch pages [`warm_branch_pages`] keeps: the flat stem table and the
/// node table (the code and meta tables stay cold).
const TABLES: [&str; 2] = [crate::T_STEMS, crate::T_NODES];

/// Leaves the branch pages of the flat stem table and the node table of the database in `dir`
/// (and the pages above them) in the page cache and their leaf pages out of it, as a node
/// that has run for a while holds its B-trees: the pages above the leaves, about 1% of a
/// table, are touched by every lookup and stay cached, while a random stem's leaf is cold. For
/// cold-read measurements: call it after [`evict_page_cache`] with no environment open on
/// `dir` (pages that are mapped cannot be evicted). It opens the MDBX file read-only, looks
/// up keys evenly spread over each table's key space (eight per branch page,
/// on 16 threads), which reads every branch page and one leaf page per lookup, notes the
/// file offset of each leaf page met (through the mapping's place in `/proc/self/maps`),
/// closes the database and evicts those leaf pages again. The code table stays cold.
pub fn warm_branch_pages(dir: &Path) -> Result<WarmBranches, crate::StoreError> {
    use crate::{StoreError, map_err};
    use std::borrow::Cow;
    // MDBX alone, not a store: a store would look at the write journal, which holds the
    // blocks a buffered writer has not flushed yet (and warn about them).
    let (db, _) = crate::open::open_read_only(dir)?;
    let mut out = WarmBranches::default();
    let mut plan = Vec::new();
    let mut page = 4096;
    {
        let txn = db.begin_ro_txn().map_err(map_err)?;
        for name in TABLES {
            let table = txn.open_table(Some(name)).map_err(map_err)?;
            let stat = txn.table_stat(&table).map_err(map_err)?;
            page = stat.page_size() as usize;
            let (branches, leaves) = (stat.branch_pages() as u64, stat.leaf_pages() as u64);
            let lookups = (branches * LOOKUPS_PER_BRANCH).min(leaves);
            out.branch_pages += branches;
            out.leaf_pages += leaves;
            out.lookups += lookups;
            plan.push((name, lookups));
        }
    }
    const THREADS: u64 = 16;
    let mut pages: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (db, plan) = (&db, &plan);
                s.spawn(move || -> Result<Vec<usize>, StoreError> {
                    let txn = db.begin_ro_txn().map_err(map_err)?;
                    let mut pages = Vec::new();
                    for &(name, lookups) in plan {
                        let table = txn.open_table(Some(name)).map_err(map_err)?;
                        let mut cursor = txn.cursor(&table).map_err(map_err)?;
                        for i in (t..lookups).step_by(THREADS as usize) {
                            // The i-th of `lookups` points spread evenly over the first 8
                            // bytes of the keys.
                            let at = ((u128::from(i) << 64) / u128::from(lookups)) as u64;
                            let mut key = [0u8; 31];
                            key[..8].copy_from_slice(&at.to_be_bytes());
                            let found = cursor
                                .set_range::<Cow<'_, [u8]>, Cow<'_, [u8]>>(&key)
                                .map_err(map_err)?;
                            // A key read from a read-only transaction lies in the map, in its
                            // leaf.
                            if let Some((Cow::Borrowed(k), _)) = found {
                                pages.push(k.as_ptr() as usize & !(page - 1));
                            }
                        }
                    }
                    Ok(pages)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().expect("a warm-up thread panicked")?);
        }
        Ok::<_, StoreError>(all)
    })?;
    pages.sort_unstable();
    pages.dedup();
    let data = dir.join("mdbx.dat");
    let offsets = file_offsets(&data, &pages)?;
    drop(db);
    let file = std::fs::File::open(&data)?;
    for off in &offsets {
        rustix::fs::fadvise(
            &file,
            *off,
            std::num::NonZeroU64::new(page as u64),
            rustix::fs::Advice::DontNeed,
        )
        .map_err(std::io::Error::from)?;
    }
    out.leaf_pages_evicted = offsets.len() as u64;
    Ok(out)
}

/// The offsets in the file `data` of the mapped addresses `addrs`, from this process's
/// mappings of it (`/proc/self/maps`); an address outside every mapping of it is an error.
fn file_offsets(data: &Path, addrs: &[usize]) -> std::io::Result<Vec<u64>> {
    let want = std::fs::canonicalize(data)?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    // (start, end, offset) of each mapping of the file.
    let mut ranges = Vec::new();
    for line in maps.lines() {
        // `start-end perms offset dev inode path`: the path is the rest of the line as it
        // is (spaces inside it kept; split into words it would not match a path with two
        // spaces running).
        let mut rest = line;
        let mut fields = [""; 5];
        for field in &mut fields {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            (*field, rest) = rest.split_at(end);
        }
        let [range, _, offset, _, _] = fields;
        if Path::new(rest.trim_start()) != want {
            continue;
        }
        let parse = |s: &str| usize::from_str_radix(s, 16).ok();
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        if let (Some(start), Some(end), Some(offset)) = (parse(start), parse(end), parse(offset)) {
            ranges.push((start, end, offset as u64));
        }
    }
    addrs
        .iter()
        .map(|&a| {
            ranges
                .iter()
                .find(|(s, e, _)| (*s..*e).contains(&a))
                .map(|(s, _, off)| off + (a - s) as u64)
                .ok_or_else(|| {
                    std::io::Error::other(format!(
                        "address {a:#x} is not in a mapping of {}",
                        want.display()
                    ))
                })
        })
        .collect()
}
