//! Pins of pid identity (issue 48's mutation run): what each refusal says, the executable an
//! identity records, and that a pid without an identity is never signalled.

use super::*;

#[test]
fn each_refusal_says_why_the_process_is_left_alone() {
    for (refusal, says) in [
        (
            Refusal::Reserved(0),
            "pid 0 is never signalled (as a process group it means kiln's own group)",
        ),
        (
            Refusal::Reserved(1),
            "pid 1 is never signalled (as a process group it means every process)",
        ),
        (Refusal::OwnGroup(7), "process group 7 is kiln's own"),
        (Refusal::Gone(7), "no process 7 is running"),
        (
            Refusal::OtherBoot(7),
            "pid 7 was recorded before the machine restarted",
        ),
        (
            Refusal::Reused {
                pid: 7,
                recorded: 10,
                now: 20,
            },
            "pid 7 now belongs to another process (started at tick 20, not 10)",
        ),
        (
            Refusal::Unidentified(7),
            "the record of pid 7 has no start time to tell the process from a later one",
        ),
        (
            Refusal::Unreadable(7),
            "the executable of pid 7 cannot be read (not kiln's user's process)",
        ),
    ] {
        assert_eq!(refusal.to_string(), says);
    }
}

#[test]
fn an_identity_records_the_executable_the_process_runs() {
    let me = Identity::of(std::process::id()).expect("own identity");
    assert_eq!(me.exe, std::env::current_exe().unwrap());
}

#[test]
fn a_pid_without_an_identity_is_refused_with_the_reason() {
    assert_eq!(verify_bare(0), Err(Refusal::Reserved(0)));
    assert_eq!(verify_bare(1), Err(Refusal::Reserved(1)));
    assert_eq!(
        verify_bare(own_group()),
        Err(Refusal::OwnGroup(own_group()))
    );
    // A pid that runs (this very process, unless it leads kiln's group) is refused all the same.
    let me = std::process::id();
    if me != own_group() {
        assert_eq!(verify_bare(me), Err(Refusal::Unidentified(me)));
    }
    assert_eq!(verify_bare(u32::MAX), Err(Refusal::Unidentified(u32::MAX)));
}
