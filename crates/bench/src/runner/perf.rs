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
use std::sync::Mutex;

/// The FIFOs named by `BINTRIE_PERF_CTL` (commands) and `BINTRIE_PERF_ACK` (perf's answers,
/// optional: without it a command is not waited for).
struct Control {
    ctl: File,
    ack: Option<File>,
}

static CONTROL: Mutex<Option<Option<Control>>> = Mutex::new(None);

/// Sends `command` to perf when `BINTRIE_PERF_CTL` names its control FIFO, and waits for its
/// acknowledgement when `BINTRIE_PERF_ACK` names that one. Without the variable it does
/// nothing; a FIFO that cannot be opened or written is logged once and then ignored (a
/// profile is never a reason to fail a run).
fn send(command: &str) {
    let mut guard = CONTROL.lock().unwrap_or_else(|e| e.into_inner());
    let control = guard.get_or_insert_with(|| {
        let ctl = std::env::var_os("BINTRIE_PERF_CTL")?;
        let open = |path: &std::ffi::OsStr, write: bool| {
            use std::os::unix::fs::OpenOptionsExt as _;
            // The command FIFO without a non-blocking open would wait forever for a perf
            // that is not running; this way that is an error at once (ENXIO). The answer
            // FIFO is opened once perf holds the other, so perf holds it too.
            let flags = if write {
                rustix::fs::OFlags::NONBLOCK.bits() as i32
            } else {
                0
            };
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(flags)
                .open(path)
                .map_err(|e| {
                    tracing::warn!(
                        path = %path.to_string_lossy(),
                        error = %e,
                        "perf control FIFO not usable (is `perf record --control` running?); \
                         profiling is not switched"
                    );
                })
                .ok()
        };
        let ctl = open(&ctl, true)?;
        let ack = std::env::var_os("BINTRIE_PERF_ACK").and_then(|p| open(&p, false));
        Some(Control { ctl, ack })
    });
    let Some(c) = control else {
        return;
    };
    let sent = c.ctl.write_all(format!("{command}\n").as_bytes());
    let acked = sent.and_then(|()| match &mut c.ack {
        Some(ack) => {
            // perf answers each command with "ack\n".
            let mut buf = [0u8; 4];
            ack.read_exact(&mut buf)
        }
        None => Ok(()),
    });
    if let Err(e) = acked {
        tracing::warn!(error = %e, "perf control: profiling stops being switched");
        *control = None;
    }
}

/// Starts sampling (before a measured block).
pub(crate) fn enable() {
    send("enable");
}

/// Stops sampling (after a measured block).
pub(crate) fn disable() {
    send("disable");
}
