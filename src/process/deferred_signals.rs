//! While the watchdog runs, a terminating signal (Ctrl-C's SIGINT, SIGTERM, SIGHUP) ends kiln
//! as before, but never between a step's spawn and its group's registration: in that moment
//! kiln dying would leave a group the watchdog does not know of running for good. The handler
//! only wakes a thread (a byte down a pipe); that thread waits for any spawn in progress to be
//! registered, then ends kiln with the same signal, the way its default action would have.
//! A signal kiln was started with ignored (`nohup`, a script's background job) stays ignored.
//! SIGKILL cannot be deferred: a kill in the few microseconds of that window is not covered.

use std::io::Read;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

const DEFERRED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Held from a step's spawn until its group is registered.
static SPAWNING: Mutex<()> = Mutex::new(());

/// The pipe's write end the handler wakes the ending thread through (-1: none).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// Hold while spawning a step and registering its group: a terminating signal waits for it.
pub(super) fn spawning() -> MutexGuard<'static, ()> {
    SPAWNING.lock().unwrap_or_else(PoisonError::into_inner)
}

extern "C" fn on_terminate(sig: libc::c_int) {
    let byte = u8::try_from(sig).unwrap_or(0);
    // SAFETY: write(2) on a non-blocking pipe is async-signal-safe; a full pipe drops the byte
    // (a signal is already on its way).
    unsafe {
        libc::write(
            WAKE.load(Ordering::SeqCst),
            std::ptr::from_ref(&byte).cast(),
            1,
        );
    }
}

/// The signals deferred from now on (those kiln was not started with ignored). Once a process:
/// the pipe and its thread live as long as kiln does.
pub(super) fn defer() -> std::io::Result<Vec<libc::c_int>> {
    if WAKE.load(Ordering::SeqCst) < 0 {
        let (mut reader, writer) = os_pipe::pipe()?;
        let fd = writer.into_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe {
            libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
        }
        WAKE.store(fd, Ordering::SeqCst);
        std::thread::spawn(move || {
            let mut byte = [0u8];
            loop {
                match reader.read(&mut byte) {
                    Ok(1) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    _ => return,
                }
            }
            let _registered = spawning();
            let sig = libc::c_int::from(byte[0]);
            // SAFETY: back to the default action, then the signal again, to this thread: kiln
            // ends as the signal would have ended it (nothing runs after).
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        });
    }
    let mut deferred = Vec::new();
    for sig in DEFERRED {
        // SAFETY: the handler only writes to a pipe, which is async-signal-safe.
        let before = unsafe {
            libc::signal(
                sig,
                on_terminate as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
        if before == libc::SIG_IGN {
            // SAFETY: putting back the disposition kiln was started with.
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        } else {
            deferred.push(sig);
        }
    }
    Ok(deferred)
}

/// Give `signals` their default action back (the watchdog ended).
pub(super) fn restore(signals: &[libc::c_int]) {
    for &sig in signals {
        // SAFETY: the default disposition has no preconditions.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// The test hook: `KILN_TEST_SIGNAL_AT_SPAWN=1` makes kiln send itself SIGINT right after a
/// step's spawn, before its group is registered, so a test can hit that window every time.
/// Debug builds only (the ones `cargo test` drives).
#[cfg(debug_assertions)]
pub(super) fn signal_point() {
    if std::env::var("KILN_TEST_SIGNAL_AT_SPAWN").is_ok_and(|v| v == "1") {
        // SAFETY: a signal to this very process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGINT);
        }
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn signal_point() {}
