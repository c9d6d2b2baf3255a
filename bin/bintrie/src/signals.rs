//! Signals: a graceful stop on Ctrl-C, SIGTERM and SIGHUP for the commands that run long
//! (`bench`, `import`, `exec`), and SIGXFSZ ignored, so that a file-size limit (`ulimit -f`) is a write
//! error the commands report, not a silent kill. The binary's `unsafe` code is here and in
//! main.rs (the allocator option, the SIGBUS handler, the closed-stdout check).

/// Calls `handler` on Ctrl-C, SIGTERM and SIGHUP (ctrlc's `termination`), except for a signal
/// the process was started ignoring, which stays ignored (as Unix programs keep an inherited
/// SIG_IGN): a study run under `nohup` outlives its terminal, one started in the background
/// by a shell without job control is not stopped by the terminal's Ctrl-C.
#[allow(unsafe_code)]
pub(crate) fn stop_on_signals(handler: impl FnMut() + Send + 'static) {
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    // SAFETY: `sigaction` with no new action only reads the current one into `old`.
    let ignored = signals.map(|signal| unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    });
    let _ = ctrlc::set_handler(handler);
    for (signal, ignored) in signals.into_iter().zip(ignored) {
        if ignored {
            // SAFETY: puts back the disposition the process started with; installs no handler.
            unsafe {
                libc::signal(signal, libc::SIG_IGN);
            }
        }
    }
}

/// Ignores SIGXFSZ: a write past the process's file-size limit (`ulimit -f`, RLIMIT_FSIZE) then
/// fails with `EFBIG`, which every writer reports as an error naming the file (a full disk's
/// path), instead of the kernel killing the process in the middle of a write with no message.
#[allow(unsafe_code)]
pub(crate) fn ignore_file_size_limit_signal() {
    // SAFETY: sets a disposition (ignore); installs no handler.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Set by the first signal [`stop_between_blocks`] takes.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For `import`: the first Ctrl-C (or SIGTERM, SIGHUP) asks its block loop to stop after the
/// block being committed, sync and close the state ([`stop_requested`]); a second one quits at
/// once (what a committed block left unsynced is then in the write buffer's journal, replayed
/// by the next writer, as after a kill). Without it a signal killed the import with no
/// message, leaving an MDBX state that readers refuse until a writer opens it.
pub(crate) fn stop_between_blocks() {
    stop_at_next_step(
        b"stopping after the block being committed, synced (Ctrl-C again to quit at once)\n",
    );
}

/// The first Ctrl-C (or SIGTERM, SIGHUP) sets the flag [`stop_requested`] reads and prints
/// `message` on stderr; a second one quits at once (exit 130). For `import`
/// ([`stop_between_blocks`]) and `exec`, whose steps check the flag between them.
pub(crate) fn stop_at_next_step(message: &'static [u8]) {
    stop_on_signals(move || {
        if STOP.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::process::exit(130);
        }
        let _ = std::io::Write::write_all(&mut std::io::stderr(), message);
    });
}

/// Whether a stop was asked for ([`stop_between_blocks`]).
pub(crate) fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::SeqCst)
}
