//! Profiling only the measured blocks: `perf record --control` takes `enable` and `disable`
//! commands on a FIFO, and the runner sends them around each measured block, so a profile
//! holds the blocks and none of the build, the open or the eviction between them.
//!
//! ```text
//! mkfifo /tmp/perf.ctl /tmp/perf.ack
//! BINTRIE_PERF_CTL=/tmp/perf.ctl BINTRIE_PERF_ACK=/tmp/perf.ack \
//!   perf record -D -1 --control fifo:/tmp/perf.ctl,/tmp/perf.ack -F 999 -g -- bintrie bench ...
//! ```

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::sync::{LazyLock, Mutex};

/// The FIFOs named by `BINTRIE_PERF_CTL` (commands) and `BINTRIE_PERF_ACK` (perf's answers,
/// optional: without it a command is not waited for).
struct Control {
    ctl: File,
    ack: Option<File>,
}

/// Opened from the environment on first use; `None` without `BINTRIE_PERF_CTL`, and once a
/// FIFO failed.
static CONTROL: LazyLock<Mutex<Option<Control>>> = LazyLock::new(|| Mutex::new(open_control()));

/// Opens the FIFO at `path` without blocking: the command FIFO when perf is not reading it
/// is an error at once (ENXIO), not a wait forever; the answer FIFO is then made blocking,
/// so a read waits for perf's answer, or ends at once (end of file) when nothing holds the
/// other end. Anything but a FIFO is refused (a regular file would silently collect the
/// commands). Logs why when it fails.
fn open_fifo(path: &std::ffi::OsStr, write: bool) -> Option<File> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let opened = std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .and_then(|f| {
            if !f.metadata()?.file_type().is_fifo() {
                return Err(std::io::Error::other("not a FIFO (make it with mkfifo)"));
            }
            if !write {
                rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::empty())?;
            }
            Ok(f)
        });
    opened
        .map_err(|e| {
            tracing::warn!(
                path = %path.to_string_lossy(),
                error = %e,
                "perf control FIFO not usable (is `perf record --control` running?); \
                 profiling is not switched"
            );
        })
        .ok()
}

fn open_control() -> Option<Control> {
    let ctl = open_fifo(&std::env::var_os("BINTRIE_PERF_CTL")?, true)?;
    let ack = match std::env::var_os("BINTRIE_PERF_ACK") {
        Some(path) => Some(open_fifo(&path, false)?),
        None => None,
    };
    Some(Control { ctl, ack })
}

/// Sends `line` to perf when `BINTRIE_PERF_CTL` names its control FIFO, and waits for its
/// answer when `BINTRIE_PERF_ACK` names that one. Without the variable it does nothing; a
/// FIFO that cannot be opened, written or read is logged once and then left alone (a
/// profile is never a reason to fail a run).
fn send(line: &[u8]) {
    let mut guard = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = guard.as_mut() else {
        return;
    };
    let sent = c.ctl.write_all(line).and_then(|()| match &mut c.ack {
        // perf answers each command with "ack\n".
        Some(ack) => ack.read_exact(&mut [0u8; 4]),
        None => Ok(()),
    });
    if let Err(e) = sent {
        tracing::warn!(error = %e, "perf control: profiling stops being switched");
        *guard = None;
    }
}

/// Starts sampling (before a measured block).
pub(crate) fn enable() {
    send(b"enable\n");
}

/// Stops sampling (after a measured block).
pub(crate) fn disable() {
    send(b"disable\n");
}
