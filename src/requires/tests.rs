use super::*;

#[test]
fn entries_parse_with_and_without_a_version() {
    let r = parse("c++").unwrap();
    assert_eq!((r.tool.name, r.min), ("c++", None));
    let r = parse("c++ ").unwrap();
    assert_eq!((r.tool.name, r.min), ("c++", None));
    let r = parse("python3>=3.10").unwrap();
    assert_eq!(r.min, dotted("3.10"));
    assert_eq!(
        r.min.as_ref().map(ToString::to_string).as_deref(),
        Some("3.10")
    );
    assert_eq!(r.to_string(), "python3>=3.10");
    assert_eq!(
        parse("cmake >= 3.25.1").unwrap().to_string(),
        "cmake>=3.25.1"
    );
}

#[test]
fn bad_entries_point_at_the_part_at_fault() {
    let e = parse("cmak>=3.20").unwrap_err();
    assert_eq!(e.message, "unknown host tool `cmak`");
    assert_eq!(e.hint, "did you mean `cmake`?");
    assert_eq!((e.offset, e.len), (0, 4));

    let e = parse("python3==3.10").unwrap_err();
    assert_eq!(e.message, "unexpected `==3.10` after `python3`");
    assert_eq!((e.offset, e.len), (7, 6));

    let e = parse("python3>=three").unwrap_err();
    assert_eq!(e.message, "`three` is not a version");
    assert_eq!((e.offset, e.len), (9, 5));

    let e = parse(">=3").unwrap_err();
    assert_eq!(e.message, "`>=3` does not start with a tool name");
    assert!(
        e.hint.starts_with("known tools: cc, c++, python3"),
        "{}",
        e.hint
    );
}

#[test]
fn versions_compare_number_by_number() {
    let v = |s: &str| dotted(s).unwrap();
    assert!(v("3.10") >= v("3.9"));
    assert!(v("3.8.0") >= v("3.8"));
    assert!(v("3.8") >= v("3.8.0"));
    assert!(v("3.7.17") < v("3.8"));
    assert_eq!(dotted("3.x"), None);
    assert_eq!(
        dotted("3.10rc1"),
        None,
        "a requires version is dotted numbers only"
    );
    assert_eq!(dotted("1.2.3.4.5"), None);
    assert_eq!(
        version_in("cmake version 3.25.1\n\nCMake suite"),
        Some(v("3.25.1"))
    );
    assert_eq!(version_in("Python 3.11.2"), Some(v("3.11.2")));
    assert_eq!(
        version_in("g++ (Debian 12.2.0-14) 12.2.0"),
        Some(v("12.2.0"))
    );
}

#[test]
fn os_release_picks_the_family() {
    let f = OsFamily::from_os_release;
    assert_eq!(f("ID=debian\nVERSION_ID=\"12\"\n"), OsFamily::Debian);
    assert_eq!(f("ID=ubuntu\nID_LIKE=debian\n"), OsFamily::Debian);
    assert_eq!(f("ID=fedora\n"), OsFamily::Fedora);
    assert_eq!(
        f("ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"),
        OsFamily::Fedora
    );
    assert_eq!(f("ID=arch\n"), OsFamily::Arch);
    assert_eq!(f("ID=alpine\n"), OsFamily::Other);
}

#[test]
fn install_hints_name_this_os_packages() {
    let tools: Vec<&Tool> = ["c++", "python3-venv", "cc"]
        .iter()
        .map(|n| parse(n).unwrap().tool)
        .collect();
    assert_eq!(
        OsFamily::Debian.install_hint(&tools, false),
        "on Debian/Ubuntu: sudo apt-get install -y g++ python3-venv gcc"
    );
    assert_eq!(
        OsFamily::Fedora.install_hint(&tools, false),
        "on Fedora: sudo dnf install -y gcc-c++ python3 gcc"
    );
    assert_eq!(
        OsFamily::Arch.install_hint(&tools, false),
        "on Arch: sudo pacman -S --needed gcc python"
    );
    assert_eq!(
        OsFamily::MacOs.install_hint(&tools, false),
        "on macOS: xcode-select --install && brew install python"
    );
    assert_eq!(
        OsFamily::Other.install_hint(&tools, false),
        "install c++, python3-venv, cc with your system's package manager"
    );
    // As root (a container, CI) there may be no sudo, and none is needed.
    assert_eq!(
        OsFamily::Debian.install_hint(&tools, true),
        "on Debian/Ubuntu: apt-get install -y g++ python3-venv gcc"
    );
    assert_eq!(
        OsFamily::Arch.install_hint(&tools, true),
        "on Arch: pacman -S --needed gcc python"
    );
}

#[test]
fn the_check_runs_the_real_tool() {
    // python3 runs the tests' own recipes, so it is on every machine these tests run on.
    match parse("python3>=3.0").unwrap().check() {
        Found::Ok { version, .. } => assert!(version.unwrap().to_string().starts_with("3.")),
        other => panic!("python3 not found: {other:?}"),
    }
    assert!(matches!(
        parse("python3>=99").unwrap().check(),
        Found::TooOld { .. }
    ));
}
