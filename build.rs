//! Build script: the commit kiln is built from, for `kiln --version` ("kiln 0.1.0 (commit
//! 1a2b3c4d5e6f)"). `KILN_BUILD_COMMIT` names it when set (.ci/wheel sets it); else `git
//! rev-parse` in the source tree; a tarball without .git says "unknown commit". No crate needed.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KILN_BUILD_COMMIT");
    let commit = std::env::var("KILN_BUILD_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .or_else(git_head);
    let built_from = match commit {
        Some(c) => format!("commit {c}"),
        None => "unknown commit".to_string(),
    };
    println!("cargo:rustc-env=BUILT_FROM={built_from}");
}

/// The short hash of HEAD when this package is the top of a git work tree (an unpacked tarball
/// inside some other repository is not), and the files whose change moves it (HEAD itself, the
/// branch it names, packed-refs) so that a new commit reruns this script.
fn git_head() -> Option<String> {
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let here = std::env::current_dir().ok()?;
    if std::fs::canonicalize(top).ok()? != std::fs::canonicalize(here).ok()? {
        return None;
    }
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        // A missing file would rerun the script (and rebuild kiln) on every build.
        match git(&["rev-parse", "--git-path", &name]) {
            Some(path) if std::path::Path::new(&path).exists() => {
                println!("cargo:rerun-if-changed={path}");
            }
            _ => {}
        }
    }
    Some(hash)
}

/// One line of git's output, or None (no git, not a repository, a failed command).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
