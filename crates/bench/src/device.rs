//! The drive under the databases, measured by the study itself: every I/O figure of a study
//! needs its ceiling beside it, measured on the same filesystem in the same run.
//!
//! [`probe_disk`] writes one scratch file in the database directory with `O_DIRECT` (the page
//! cache bypassed, as fio's `--direct=1`) and measures:
//!
//! - sequential write bandwidth: the whole file in 1 MiB writes, then one `fdatasync`;
//! - random 4 KB reads at 1, 2, 4, .. 256 requests in flight from one io_uring (what the drive
//!   can do, as fio's `--ioengine=io_uring`): reads per second at each depth, the per-read time
//!   at QD1 and QD16, and the saturation depth;
//! - the same with one thread per request, each issuing blocking `pread`s back to back (what
//!   blocking reads such as page faults of a memory-mapped database can get out of the drive
//!   on this machine's cores);
//! - random 4 KB writes at 16 in flight (IOPS);
//! - the time of an `fdatasync` after a 4 KB append.
//!
//! The scratch file is unlinked as soon as it is open (it lives as long as the probe's handle,
//! so nothing is left however the probe ends); the fsync's few KB are a file of their own,
//! deleted afterwards, also on error, or by the next probe when this one was killed. Both are
//! created anew: nothing at their names is written through.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde::{Deserialize, Serialize};

/// The unit of every random I/O: one 4 KB block, aligned.
const BLOCK: usize = 4096;
/// Size of one sequential write.
const SEQ_CHUNK: usize = 1 << 20;
/// Queue depths of the read curve: up to 256, the depth the log's io_uring keeps in flight,
/// so the curve covers what it uses (this machine's O_DIRECT reads level off near 64).
pub const READ_DEPTHS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// The depth whose per-read time is the study's "QD16" figure (the drive near saturation).
pub const QD_REFERENCE: u32 = 16;

/// How long and how large a probe is.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Size of the scratch file, bytes (a multiple of 1 MiB, at least 1 MiB).
    pub file_bytes: u64,
    /// Time spent at each queue depth of the read curve and on the random writes.
    pub point: Duration,
    /// `fdatasync`s timed.
    pub fsyncs: u32,
}

impl Default for ProbeOptions {
    /// 1 GiB, 300 ms per point, 100 fsyncs: about 7 seconds (two curves of 9 depths, the
    /// writes, and writing the file once).
    fn default() -> Self {
        ProbeOptions {
            file_bytes: 1 << 30,
            point: Duration::from_millis(300),
            fsyncs: 100,
        }
    }
}

/// One point of the read curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthPoint {
    /// Requests in flight: entries kept in the io_uring, or threads each issuing one blocking
    /// read at a time.
    pub depth: u32,
    /// Reads completed per second.
    pub iops: f64,
    /// Mean time of one read as a thread sees it, µs (the latency at this depth).
    pub latency_us: f64,
}

/// What the drive under the databases can do (`machine.disk` in `results.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    /// The directory probed (where the databases are built).
    pub dir: String,
    /// The filesystem type under it (`ext4`, `xfs`, `tmpfs`, ...; `0x…` when unknown): on
    /// `tmpfs` the figures are memory's, not a drive's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// How it was measured: one sentence.
    pub method: String,
    /// Size of the scratch file the random I/O spread over, bytes.
    pub file_bytes: u64,
    /// Random 4 KB reads, one in flight: µs per read.
    pub read_qd1_us: f64,
    /// Random 4 KB reads, 16 in flight: wall µs per read (1e6 / IOPS), the figure device
    /// efficiencies are computed against.
    pub read_qd16_us: f64,
    /// The smallest depth of the curve that reaches 90% of its highest IOPS.
    pub saturation_depth: u32,
    /// The highest read IOPS of the curve.
    pub max_read_iops: f64,
    /// Random 4 KB reads at each depth, from one io_uring.
    pub read_curve: Vec<DepthPoint>,
    /// Random 4 KB reads at each depth with one blocking thread per request in flight.
    #[serde(default)]
    pub blocking_read_curve: Vec<DepthPoint>,
    /// Random 4 KB writes, 16 in flight, per second (no sync: what the drive accepts).
    pub write_iops_qd16: f64,
    /// Median time of an `fdatasync` after a 4 KB append, µs.
    pub fsync_us: f64,
    /// Sequential writes in 1 MiB blocks, the closing `fdatasync` included, MB/s (10^6 bytes).
    pub seq_write_mb_s: f64,
}

impl Disk {
    /// QD1 per-read time over QD16 per-read time: how much a full queue speeds reads up.
    pub fn queue_gain(&self) -> f64 {
        self.read_qd1_us / self.read_qd16_us
    }

    /// True when the probed directory is in memory (`tmpfs`, `ramfs`): no drive was measured.
    pub fn in_memory(&self) -> bool {
        matches!(self.filesystem.as_deref(), Some("tmpfs" | "ramfs"))
    }
}

/// The type of the filesystem holding `dir` (from `statfs`), by name when it is a common one.
pub fn filesystem_type(dir: &Path) -> Option<String> {
    let kind = rustix::fs::statfs(dir).ok()?.f_type as u64;
    Some(
        match kind {
            0xEF53 => "ext4",
            0x5846_5342 => "xfs",
            0x9123_683E => "btrfs",
            0x0102_1994 => "tmpfs",
            0x8584_58f6 => "ramfs",
            0x794C_7630 => "overlayfs",
            0x2FC1_2FC1 => "zfs",
            0x6969 => "nfs",
            0xF2F5_2010 => "f2fs",
            _ => return Some(format!("{kind:#x}")),
        }
        .to_string(),
    )
}

/// Removes the scratch file when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 4 KB-aligned buffer of `len` bytes inside `storage` (filled with a constant).
fn aligned(storage: &mut Vec<u8>, len: usize) -> &mut [u8] {
    storage.clear();
    storage.resize(len + BLOCK, 0xa5);
    let off = storage.as_ptr().align_offset(BLOCK);
    &mut storage[off..off + len]
}

/// Creates `path` anew for reads and writes with `O_DIRECT`: whatever was at the name (a link
/// planted there included) is removed first, never opened through.
fn create_direct(path: &Path) -> Result<File> {
    remove_if_there(path).context("making the disk probe's scratch file")?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))
}

/// Removes the file or link at `path` (not what a link points at); absent is fine.
fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("clearing the name {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The scratch file of a probe by process `pid`.
const SCRATCH_PREFIX: &str = ".bintrie-disk-probe-";

/// Removes the scratch files that probes killed before they could delete them left in `dir`:
/// those whose process no longer runs (no `/proc/PID`). A file of a running process, or whose
/// name does not end in a process number, stays.
fn remove_stale_scratch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .map(|p| p.strip_suffix(".sync").unwrap_or(p))
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let path = entry.path();
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(file = %path.display(), "removed the scratch file of a probe that did not finish")
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "could not remove the scratch file of a probe that did not finish")
                }
            }
        }
    }
}

/// Measures the drive under `dir` (see the module doc); the scratch file is written there
/// (and those that killed probes left there are removed first). Errors name the step: a
/// filesystem without `O_DIRECT` (tmpfs), too little free space, an I/O error.
pub fn probe_disk(dir: &Path, options: &ProbeOptions) -> Result<Disk> {
    ensure!(
        options.file_bytes >= SEQ_CHUNK as u64
            && options.file_bytes.is_multiple_of(SEQ_CHUNK as u64),
        "the probe file must be a positive multiple of 1 MiB"
    );
    match std::fs::metadata(dir) {
        Ok(m) => ensure!(m.is_dir(), "{} is not a directory", dir.display()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    remove_stale_scratch(dir);
    if let Some(free) = bintrie_store::free_bytes(dir) {
        ensure!(
            free > options.file_bytes.saturating_mul(2),
            "probing the disk needs more than {} bytes free in {} (twice the probe file); {} \
             bytes are free",
            options.file_bytes.saturating_mul(2),
            dir.display(),
            free
        );
    }
    let path = dir.join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
    let file = create_direct(&path)?;
    // Unlinked at once: the open file is all the probe needs, and nothing is left in `dir`
    // however the process ends (a signal, a kill), where a 1 GiB file was left before.
    remove_if_there(&path)?;

    // Sequential write of the whole file: also what the random I/O then spreads over.
    let mut storage = Vec::new();
    let chunk = aligned(&mut storage, SEQ_CHUNK);
    let t = Instant::now();
    for i in 0..options.file_bytes / SEQ_CHUNK as u64 {
        chunk[..8].copy_from_slice(&i.to_le_bytes());
        file.write_all_at(chunk, i * SEQ_CHUNK as u64)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    file.sync_data()
        .with_context(|| format!("syncing {}", path.display()))?;
    let seq_write_mb_s = options.file_bytes as f64 / 1e6 / t.elapsed().as_secs_f64();

    let blocks = options.file_bytes / BLOCK as u64;
    let point = |depth: u32, (ops, wall): (u64, Duration)| {
        let iops = ops as f64 / wall.as_secs_f64();
        DepthPoint {
            depth,
            iops,
            latency_us: f64::from(depth) * 1e6 / iops,
        }
    };
    let mut read_curve = Vec::new();
    let mut blocking_read_curve = Vec::new();
    for depth in READ_DEPTHS {
        let ring = uring_reads(&file, blocks, depth, options.point).with_context(|| {
            format!(
                "io_uring random reads of {} at depth {depth}",
                path.display()
            )
        })?;
        read_curve.push(point(depth, ring));
        let threads = random_io(&file, blocks, depth, options.point, false)
            .with_context(|| format!("random reads of {} at depth {depth}", path.display()))?;
        blocking_read_curve.push(point(depth, threads));
    }
    let max_read_iops = read_curve.iter().map(|p| p.iops).fold(0.0, f64::max);
    let saturation_depth = read_curve
        .iter()
        .find(|p| p.iops >= 0.9 * max_read_iops)
        .map_or(QD_REFERENCE, |p| p.depth);
    let per_read = |depth| {
        let p: &DepthPoint = read_curve
            .iter()
            .find(|p| p.depth == depth)
            .expect("a depth of the curve");
        1e6 / p.iops
    };
    let (read_qd1_us, read_qd16_us) = (per_read(1), per_read(QD_REFERENCE));

    let (ops, wall) = random_io(&file, blocks, QD_REFERENCE, options.point, true)
        .with_context(|| format!("random writes to {}", path.display()))?;
    let write_iops_qd16 = ops as f64 / wall.as_secs_f64();
    drop(file);

    let fsync_us = fsync_latency(&path, options.fsyncs)?;
    Ok(Disk {
        dir: dir.display().to_string(),
        filesystem: filesystem_type(dir),
        method: format!(
            "O_DIRECT on a {} MiB scratch file, {} ms per point: 4 KB random reads from one \
             io_uring (read_curve) and from one blocking thread per request in flight \
             (blocking_read_curve); 4 KB random writes, one thread per request; sequential 1 MiB \
             writes + fdatasync; fdatasync after a 4 KB append",
            options.file_bytes >> 20,
            options.point.as_millis()
        ),
        file_bytes: options.file_bytes,
        read_qd1_us,
        read_qd16_us,
        saturation_depth,
        max_read_iops,
        read_curve,
        blocking_read_curve,
        write_iops_qd16,
        fsync_us,
        seq_write_mb_s,
    })
}

/// `depth` threads each doing random 4 KB reads (or writes) of `file`'s first `blocks` blocks
/// back to back for `time`: operations completed and the wall time they took.
fn random_io(
    file: &File,
    blocks: u64,
    depth: u32,
    time: Duration,
    write: bool,
) -> Result<(u64, Duration)> {
    let start = Instant::now();
    let deadline = start + time;
    let counts = std::thread::scope(|s| {
        let handles: Vec<_> = (0..depth)
            .map(|t| {
                s.spawn(move || -> std::io::Result<u64> {
                    let mut rng = StdRng::seed_from_u64(0xd15c ^ u64::from(t));
                    let mut storage = Vec::new();
                    let buf = aligned(&mut storage, BLOCK);
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        let at = rng.random_range(0..blocks) * BLOCK as u64;
                        if write {
                            file.write_all_at(buf, at)?;
                        } else {
                            file.read_exact_at(buf, at)?;
                        }
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<std::io::Result<Vec<u64>>>()
    })?;
    Ok((counts.iter().sum(), start.elapsed()))
}

/// Random 4 KB reads of `file`'s first `blocks` blocks from one io_uring keeping `depth` reads
/// in flight for `time`: reads completed and the wall time they took (the last in-flight
/// reads drained).
#[allow(unsafe_code)]
fn uring_reads(file: &File, blocks: u64, depth: u32, time: Duration) -> Result<(u64, Duration)> {
    use io_uring::{IoUring, opcode, types};
    use std::os::fd::AsRawFd as _;
    let mut ring = IoUring::new(depth.next_power_of_two())
        .context("creating an io_uring (is io_uring disabled on this kernel?)")?;
    let fd = types::Fd(file.as_raw_fd());
    let mut storage = Vec::new();
    let base = aligned(&mut storage, depth as usize * BLOCK).as_mut_ptr();
    let mut rng = StdRng::seed_from_u64(0x0451);
    let entry = |slot: u32, rng: &mut StdRng| {
        let at = rng.random_range(0..blocks) * BLOCK as u64;
        // In bounds: slot < depth, and `base` starts `depth` aligned blocks.
        let buf = base.wrapping_add(slot as usize * BLOCK);
        opcode::Read::new(fd, buf, BLOCK as u32)
            .offset(at)
            .build()
            .user_data(u64::from(slot))
    };
    let start = Instant::now();
    let deadline = start + time;
    let mut in_flight = 0u32;
    let mut done = 0u64;
    let mut error = None;
    let mut finished: Vec<(u32, i32)> = Vec::with_capacity(depth as usize);
    for slot in 0..depth {
        let e = entry(slot, &mut rng);
        // SAFETY: the buffer is one aligned BLOCK of `storage`, owned by this function, used
        // by no other request, and `storage` outlives every request: the loop below waits for
        // each submitted read to complete before returning (or leaks `storage` if it cannot).
        unsafe { ring.submission().push(&e) }.expect("the ring has `depth` entries");
        in_flight += 1;
    }
    while in_flight > 0 {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Reads may still be in flight into `storage`: never free it.
            std::mem::forget(storage);
            return Err(e).context("waiting for io_uring completions");
        }
        finished.clear();
        finished.extend(
            ring.completion()
                .map(|c| (c.user_data() as u32, c.result())),
        );
        for &(slot, result) in &finished {
            in_flight -= 1;
            if result != BLOCK as i32 {
                error.get_or_insert(result);
            } else {
                done += 1;
            }
            if error.is_none() && Instant::now() < deadline {
                let e = entry(slot, &mut rng);
                // SAFETY: as above; this slot's previous read has completed.
                unsafe { ring.submission().push(&e) }.expect("a completed slot frees an entry");
                in_flight += 1;
            }
        }
    }
    let wall = start.elapsed();
    drop(storage);
    match error {
        Some(r) if r < 0 => Err(std::io::Error::from_raw_os_error(-r)).context("an io_uring read"),
        Some(r) => anyhow::bail!("an io_uring read returned {r} bytes of {BLOCK}"),
        None => Ok((done, wall)),
    }
}

/// Median µs of an `fdatasync` after each of `n` 4 KB appends to a file beside `path`.
fn fsync_latency(path: &Path, n: u32) -> Result<f64> {
    // Linked while it is synced (an unlinked file's sync may skip what a real one does), a
    // few KB; removed when done, or by the next probe when this one is killed.
    let path = path.with_extension("sync");
    remove_if_there(&path)?;
    let _scratch = Scratch(path.clone());
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let block = [0x5au8; BLOCK];
    let mut times = Vec::with_capacity(n as usize);
    for i in 0..u64::from(n.max(1)) {
        file.write_all_at(&block, i * BLOCK as u64)
            .with_context(|| format!("writing {}", path.display()))?;
        let t = Instant::now();
        file.sync_data()
            .with_context(|| format!("syncing {}", path.display()))?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny probe of the temporary directory gives a consistent, plausible record and leaves
    /// no file behind, also none that a killed probe had left (a process number that cannot
    /// run). (Where the filesystem refuses O_DIRECT, the error must say so.)
    #[test]
    fn a_small_probe_is_consistent_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        // Above any pid_max (at most 2^22).
        let stale = dir.path().join(format!("{SCRATCH_PREFIX}4000000000"));
        std::fs::write(&stale, [7; 4096]).unwrap();
        let stale_sync = dir.path().join(format!("{SCRATCH_PREFIX}4000000000.sync"));
        std::fs::write(&stale_sync, [7; 4096]).unwrap();
        // Links planted at this probe's names: replaced, never written through.
        let elsewhere = tempfile::tempdir().unwrap();
        let victims = [elsewhere.path().join("a"), elsewhere.path().join("b")];
        let mine = dir
            .path()
            .join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        for (victim, link) in victims
            .iter()
            .zip([mine.clone(), mine.with_extension("sync")])
        {
            std::fs::write(victim, b"precious").unwrap();
            std::os::unix::fs::symlink(victim, link).unwrap();
        }
        let untouched = || {
            for v in &victims {
                assert_eq!(std::fs::read(v).unwrap(), b"precious");
            }
        };
        let options = ProbeOptions {
            file_bytes: 4 << 20,
            point: Duration::from_millis(20),
            fsyncs: 3,
        };
        let disk = match probe_disk(dir.path(), &options) {
            Ok(d) => d,
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.contains("O_DIRECT"), "{msg}");
                assert!(!stale.exists() && !stale_sync.exists());
                untouched();
                return;
            }
        };
        assert_eq!(disk.read_curve.len(), READ_DEPTHS.len());
        assert!(disk.read_curve.iter().all(|p| p.iops > 0.0));
        assert!(READ_DEPTHS.contains(&disk.saturation_depth));
        assert!(disk.read_qd1_us > 0.0 && disk.read_qd16_us > 0.0);
        let sat = disk
            .read_curve
            .iter()
            .find(|p| p.depth == disk.saturation_depth);
        assert!(sat.unwrap().iops >= 0.9 * disk.max_read_iops);
        assert!(disk.seq_write_mb_s > 0.0 && disk.write_iops_qd16 > 0.0 && disk.fsync_us > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        untouched();
        assert!(disk.filesystem.is_some());
    }

    /// A scratch file of a process that runs (this one) is not taken for a stale one, nor a
    /// name that only looks like one.
    #[test]
    fn scratch_files_of_running_processes_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir
            .path()
            .join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        let odd = dir.path().join(format!("{SCRATCH_PREFIX}12ab"));
        let dead = dir.path().join(format!("{SCRATCH_PREFIX}4000000001"));
        for f in [&mine, &odd, &dead] {
            std::fs::write(f, b"x").unwrap();
        }
        remove_stale_scratch(dir.path());
        assert!(mine.exists() && odd.exists() && !dead.exists());
    }

    #[test]
    fn a_bad_size_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let options = ProbeOptions {
            file_bytes: 1000,
            ..Default::default()
        };
        assert!(probe_disk(dir.path(), &options).is_err());
    }

    /// A file where the directory should be: said as such (it was reported as "removing
    /// FILE/.bintrie-disk-probe-PID: Not a directory"), the file left alone.
    #[test]
    fn a_dir_that_is_not_one_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("afile");
        std::fs::write(&file, b"mine").unwrap();
        let err = format!(
            "{:#}",
            probe_disk(&file, &ProbeOptions::default()).unwrap_err()
        );
        assert!(err.contains("is not a directory"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    }
}
