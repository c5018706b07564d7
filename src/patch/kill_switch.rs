//! The test kill switch: `KILN_TEST_PATCH_KILL_AT=N` makes `kiln patch apply` SIGKILL itself
//! at its Nth write point, so that a test can stop an apply between any two writes. It exists
//! in debug builds only (the ones `cargo test` drives): a release kiln has no such switch.

#[cfg(debug_assertions)]
use std::sync::atomic::{AtomicU32, Ordering};

/// A point between two writes of an apply: where a test may have the process killed (debug
/// builds only).
#[cfg(not(debug_assertions))]
pub(super) fn write_point() {}

/// A point between two writes of an apply: where a test may have the process killed (debug
/// builds only).
#[cfg(debug_assertions)]
pub(super) fn write_point() {
    static AT: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    static SEEN: AtomicU32 = AtomicU32::new(0);
    let Some(at) = *AT.get_or_init(|| {
        std::env::var("KILN_TEST_PATCH_KILL_AT")
            .ok()
            .and_then(|v| v.parse().ok())
    }) else {
        return;
    };
    if SEEN.fetch_add(1, Ordering::SeqCst) + 1 == at {
        // SAFETY: a signal to this very process; SIGKILL cannot be caught, nothing runs after.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
