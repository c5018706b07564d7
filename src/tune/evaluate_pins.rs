//! Pins of `kiln tune`'s room check and port choice (issue 48's mutation run): the free memory
//! is read on the tightest GPU the first server used, and a second server fits only with a
//! tenth to spare.

use super::*;
use crate::host::gpu::parse_csv;

/// The real 2x H200 capture, with GPU 1 taken by another process (`busy` MiB used).
fn h200x2(busy: u64) -> Vec<Gpu> {
    let capture = include_str!("../../tests/fixtures/gpu/h200x2/nvidia-smi-query.txt");
    let mut gpus = parse_csv(capture.split_once('\n').unwrap().1);
    assert_eq!(gpus.len(), 2);
    assert_eq!(
        (gpus[0].memory_mib, gpus[0].memory_used_mib),
        (143_771, Some(0))
    );
    gpus[1].memory_used_mib = Some(busy);
    gpus
}

/// The room after a server took `one` MiB on GPU 0.
fn after(busy: u64, one: u64) -> Room {
    let before = h200x2(busy);
    let mut after = before.clone();
    after[0].memory_used_mib = Some(one);
    Room::between(&before, &after).unwrap()
}

#[test]
fn the_room_left_is_read_on_the_gpus_the_server_used_not_a_fuller_one_it_did_not() {
    // GPU 1 nearly full (another process), untouched by the server on GPU 0.
    let r = after(140_000, 20_000);
    assert_eq!(
        (r.one_mib, r.free_mib, r.fits_another()),
        (20_000, 123_771, true)
    );
    // No server memory seen: the room is the least free memory of any GPU.
    let r = after(140_000, 0);
    assert_eq!((r.one_mib, r.free_mib, r.fits_another()), (0, 3_771, true));
}

#[test]
fn a_second_server_needs_its_size_and_a_tenth_again() {
    // 20 GiB used, 123 GiB free: fits (with a tenth to spare, not ten times).
    assert!(after(0, 20_000).fits_another());
    // 70 GiB used, 73.8 GiB free: more than its size, less than its size and a tenth.
    let r = after(0, 70_000);
    assert_eq!(r.free_mib, 73_771);
    assert!(!r.fits_another(), "{r:?}");
    // 65 GiB used, 78.8 GiB free: 71.5 GiB needed, fits.
    assert!(after(0, 65_000).fits_another());
}

#[test]
fn a_free_port_is_one_kiln_can_listen_on_outside_the_reserved_range() {
    let port = free_port().expect("a free port");
    assert!(port >= 1024, "{port}");
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    assert_eq!(l.local_addr().unwrap().port(), port);
}
