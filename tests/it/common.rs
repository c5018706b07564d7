//! Shared helpers: a temp workspace with its own state dir, and the real `kiln` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// A temp directory holding recipes and a private `KILN_HOME`.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Workspace { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// Write a file relative to the workspace, creating parent directories.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    /// `kiln` with cwd = workspace, KILN_HOME = workspace/state, no progress bars.
    pub fn kiln(&self) -> Command {
        let mut c = Command::cargo_bin("kiln").expect("kiln binary");
        c.current_dir(self.path())
            .env("KILN_HOME", self.state())
            .env("KILN_NO_PROGRESS", "1")
            .env_remove("XDG_STATE_HOME");
        for (k, _) in std::env::vars() {
            if k.starts_with("KILN_FACT_") {
                c.env_remove(k);
            }
        }
        c
    }
}

/// Replace the workspace path in output so snapshots are stable.
pub fn scrub(text: &str, ws: &Workspace) -> String {
    text.replace(&ws.path().display().to_string(), "[WS]")
}
