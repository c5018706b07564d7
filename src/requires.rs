//! Host tools a recipe or a step needs (`requires = ["c++", "python3>=3.10"]`): the syntax, the
//! tools kiln knows how to find and version, the check `kiln up` runs before its first step, and
//! the install hint for this operating system.
//!
//! Syntax of one entry: `TOOL` or `TOOL>=VERSION` (spaces around `>=` allowed), where TOOL is one
//! of [`TOOLS`] and VERSION is dotted numbers (`3.10`, `3.25.1`). Only `>=` exists: a recipe
//! states the oldest tool it works with, nothing else.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::diagnostic::did_you_mean;
use crate::process::{capture_timeout, CommandSpec};
use crate::version::Version;

/// A tool kiln knows: how to find it, how to ask its version, how to install it.
#[derive(Debug)]
pub(crate) struct Tool {
    pub(crate) name: &'static str,
    /// Programs that provide it, tried in order on PATH.
    programs: &'static [&'static str],
    /// Arguments that print the version (the first `N.N[.N]` in the output is taken).
    version_args: &'static [&'static str],
    /// Extra arguments that must exit 0 for the tool to count (e.g. python's venv module).
    probe: Option<&'static [&'static str]>,
    /// Package names: Debian/Ubuntu, Fedora, Arch, macOS (Homebrew; `xcode` for the CLI tools).
    packages: [&'static str; 4],
}

/// Every tool a `requires` entry can name.
pub(crate) const TOOLS: &[Tool] = &[
    tool(
        "cc",
        &["cc", "gcc", "clang"],
        ["gcc", "gcc", "gcc", "xcode"],
    ),
    tool(
        "c++",
        &["c++", "g++", "clang++"],
        ["g++", "gcc-c++", "gcc", "xcode"],
    ),
    tool(
        "python3",
        &["python3"],
        ["python3", "python3", "python", "python"],
    ),
    Tool {
        name: "python3-venv",
        programs: &["python3"],
        version_args: &["--version"],
        probe: Some(&["-c", "import venv, ensurepip"]),
        packages: ["python3-venv", "python3", "python", "python"],
    },
    tool("cmake", &["cmake"], ["cmake", "cmake", "cmake", "cmake"]),
    tool(
        "ninja",
        &["ninja", "ninja-build"],
        ["ninja-build", "ninja-build", "ninja", "ninja"],
    ),
    tool(
        "make",
        &["make", "gmake"],
        ["make", "make", "make", "xcode"],
    ),
    tool("git", &["git"], ["git", "git", "git", "git"]),
    tool("curl", &["curl"], ["curl", "curl", "curl", "curl"]),
    tool("tar", &["tar"], ["tar", "tar", "tar", "gnu-tar"]),
    tool("patch", &["patch"], ["patch", "patch", "patch", "gpatch"]),
    tool("xz", &["xz"], ["xz-utils", "xz", "xz", "xz"]),
    tool("zstd", &["zstd"], ["zstd", "zstd", "zstd", "zstd"]),
    tool(
        "docker",
        &["docker"],
        ["docker.io", "moby-engine", "docker", "docker"],
    ),
];

const fn tool(
    name: &'static str,
    programs: &'static [&'static str],
    packages: [&'static str; 4],
) -> Tool {
    Tool {
        name,
        programs,
        version_args: &["--version"],
        probe: None,
        packages,
    }
}

/// A `requires` version: dotted numbers (`3.10`, `3.25.1`, at most four), compared as
/// [`crate::version`] compares (`3.10` > `3.9`; `3.8` == `3.8.0`).
fn dotted(text: &str) -> Option<Version> {
    let numbers = text.split('.').count() <= 4
        && text
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numbers.then(|| Version::parse(text)).flatten()
}

/// The first `N.N[.N[.N]]` in a tool's `--version` output.
fn version_in(output: &str) -> Option<Version> {
    let re = regex::Regex::new(r"\d+\.\d+(?:\.\d+){0,2}").expect("valid regex");
    re.find(output).and_then(|m| dotted(m.as_str()))
}

/// One parsed `requires` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub(crate) tool: &'static Tool,
    pub(crate) min: Option<Version>,
}

impl PartialEq for Tool {
    fn eq(&self, other: &Tool) -> bool {
        self.name == other.name
    }
}
impl Eq for Tool {}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.min {
            Some(v) => write!(f, "{}>={v}", self.tool.name),
            None => f.write_str(self.tool.name),
        }
    }
}

impl serde::Serialize for Requirement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Back from the text `Serialize` writes (`tool` or `tool>=VERSION`): the recipe cache.
impl<'de> serde::Deserialize<'de> for Requirement {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// Why an entry does not parse: the message, a hint, and the bytes of the entry at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) message: String,
    pub(crate) hint: String,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// Parse one entry (`c++`, `python3>=3.10`).
pub(crate) fn parse(text: &str) -> Result<Requirement, ParseError> {
    let err = |message: String, hint: String, offset: usize, len: usize| ParseError {
        message,
        hint,
        offset,
        len: len.max(1),
    };
    let name_end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || "+-_.".contains(c)))
        .unwrap_or(text.len());
    let name = &text[..name_end];
    let rest = &text[name_end..];
    let Some(tool) = TOOLS.iter().find(|t| t.name == name) else {
        let names = TOOLS.iter().map(|t| t.name);
        let hint = did_you_mean(name, names.clone()).map_or_else(
            || format!("known tools: {}", names.collect::<Vec<_>>().join(", ")),
            |b| format!("did you mean `{b}`?"),
        );
        let message = if name.is_empty() {
            format!("`{text}` does not start with a tool name")
        } else {
            format!("unknown host tool `{name}`")
        };
        return Err(err(message, hint, 0, name.len()));
    };
    let trimmed = rest.trim_start();
    if trimmed.is_empty() {
        return Ok(Requirement { tool, min: None });
    }
    let op_at = name_end + (rest.len() - trimmed.len());
    let Some(after_op) = trimmed.strip_prefix(">=") else {
        return Err(err(
            format!("unexpected `{}` after `{name}`", trimmed.trim_end()),
            format!("write `{name}` or `{name}>=VERSION` (only `>=` is supported)"),
            op_at,
            trimmed.len(),
        ));
    };
    let version = after_op.trim();
    let v_at = op_at + 2 + (after_op.len() - after_op.trim_start().len());
    match dotted(version) {
        Some(min) => Ok(Requirement {
            tool,
            min: Some(min),
        }),
        None => Err(err(
            format!("`{version}` is not a version"),
            format!("write dotted numbers, e.g. `{name}>=3.10`"),
            v_at,
            version.len(),
        )),
    }
}

/// What the check found for one requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// Present (and new enough): the program and the version it reported.
    Ok {
        path: PathBuf,
        version: Option<Version>,
    },
    Missing,
    TooOld {
        path: PathBuf,
        version: Version,
    },
    /// Present, but its version could not be read or its probe failed.
    Broken {
        path: PathBuf,
        why: String,
    },
}

impl Requirement {
    /// Merge another requirement of the same tool into this one: the higher minimum wins.
    pub(crate) fn raise_min(&mut self, other: &Requirement) {
        if let Some(min) = &other.min {
            if self.min.as_ref().is_none_or(|have| have < min) {
                self.min = Some(min.clone());
            }
        }
    }

    /// Find the tool on PATH and compare its version; a few short processes, no shell.
    pub(crate) fn check(&self) -> Found {
        let Some(path) = self.tool.programs.iter().find_map(|p| which::which(p).ok()) else {
            return Found::Missing;
        };
        let program = path.display().to_string();
        let run = |args: &[&str]| {
            capture_timeout(
                &CommandSpec::new(&program, args.iter().copied()),
                Duration::from_secs(10),
            )
        };
        if let Some(probe) = self.tool.probe {
            match run(probe) {
                Ok(c) if c.success() => {}
                Ok(c) => {
                    let why = c.stderr.lines().last().unwrap_or("the probe failed").trim();
                    return Found::Broken {
                        path,
                        why: format!("`{program} {}` failed: {why}", probe.join(" ")),
                    };
                }
                Err(e) => {
                    return Found::Broken {
                        path,
                        why: e.to_string(),
                    }
                }
            }
        }
        let version = run(self.tool.version_args)
            .ok()
            .and_then(|c| version_in(&format!("{}\n{}", c.stdout, c.stderr)));
        match (&self.min, version) {
            (Some(min), Some(v)) if v < *min => Found::TooOld { path, version: v },
            (Some(_), None) => Found::Broken {
                path,
                why: format!(
                    "`{program} {}` printed no version",
                    self.tool.version_args.join(" ")
                ),
            },
            (_, version) => Found::Ok { path, version },
        }
    }
}

/// The operating-system families install hints are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OsFamily {
    Debian,
    Fedora,
    Arch,
    MacOs,
    Other,
}

impl OsFamily {
    /// This host: macOS by build target, else `/etc/os-release` (`ID`, then `ID_LIKE`).
    pub(crate) fn detect() -> OsFamily {
        if cfg!(target_os = "macos") {
            return OsFamily::MacOs;
        }
        std::fs::read_to_string("/etc/os-release")
            .map_or(OsFamily::Other, |t| Self::from_os_release(&t))
    }

    pub(crate) fn from_os_release(text: &str) -> OsFamily {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches(['"', '\'']).to_ascii_lowercase())
                .unwrap_or_default()
        };
        let ids = format!("{} {}", field("ID"), field("ID_LIKE"));
        let has = |id: &str| ids.split_whitespace().any(|w| w == id);
        if has("debian") || has("ubuntu") {
            OsFamily::Debian
        } else if has("fedora") || has("rhel") || has("centos") {
            OsFamily::Fedora
        } else if has("arch") || has("archlinux") {
            OsFamily::Arch
        } else {
            OsFamily::Other
        }
    }

    /// One command line that installs these tools here.
    /// `root`: kiln runs as root (a container, CI), where `sudo` is often absent and never needed.
    pub(crate) fn install_hint(self, tools: &[&Tool], root: bool) -> String {
        let idx = match self {
            OsFamily::Debian => 0,
            OsFamily::Fedora => 1,
            OsFamily::Arch => 2,
            OsFamily::MacOs => 3,
            OsFamily::Other => {
                let names: Vec<&str> = tools.iter().map(|t| t.name).collect();
                return format!(
                    "install {} with your system's package manager",
                    names.join(", ")
                );
            }
        };
        let mut pkgs: Vec<&str> = Vec::new();
        for t in tools {
            let p = t.packages[idx];
            if !pkgs.contains(&p) {
                pkgs.push(p);
            }
        }
        let xcode = pkgs.contains(&"xcode");
        pkgs.retain(|p| *p != "xcode");
        let list = pkgs.join(" ");
        let sudo = if root { "" } else { "sudo " };
        match self {
            OsFamily::Debian => format!("on Debian/Ubuntu: {sudo}apt-get install -y {list}"),
            OsFamily::Fedora => format!("on Fedora: {sudo}dnf install -y {list}"),
            OsFamily::Arch => format!("on Arch: {sudo}pacman -S --needed {list}"),
            _ => match (xcode, pkgs.is_empty()) {
                (true, true) => "on macOS: xcode-select --install".into(),
                (true, false) => format!("on macOS: xcode-select --install && brew install {list}"),
                _ => format!("on macOS: brew install {list}"),
            },
        }
    }
}

#[cfg(test)]
mod tests;
