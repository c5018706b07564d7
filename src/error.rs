//! Typed errors for the whole crate and their one renderer (`error:`, `caused by:`, `hint:`).

use std::io;
use std::path::PathBuf;

use crate::diagnostic::Diagnostic;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A problem located in a source file; the diagnostic carries its own hint.
    #[error("{0}")]
    Source(Box<Diagnostic>),

    #[error("recipe `{name}` not found")]
    RecipeNotFound { name: String, known: Vec<String> },

    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error("step `{step}` failed: {reason}")]
    StepFailed {
        step: String,
        reason: String,
        log: Option<PathBuf>,
        tail: String,
        /// What to do about the cause, when the step knows (shown before the log hint).
        hint: Option<String>,
    },

    #[error("{failed} {} failed: {steps}", if *failed == 1 { "step" } else { "steps" })]
    RunFailed { failed: usize, steps: String },

    #[error("state directory {path} is in use by another kiln run{holder}")]
    Locked { path: PathBuf, holder: String },

    #[error("sha256 mismatch for {url}: expected {expected}, got {actual}")]
    ChecksumMismatch {
        url: String,
        expected: String,
        actual: String,
    },

    #[error("download of {url} is truncated: got {got} of {expected} bytes")]
    Truncated {
        url: String,
        got: u64,
        expected: u64,
    },

    #[error("download of {url} failed: {reason}")]
    Download { url: String, reason: String },

    #[error("refusing unsafe entry `{entry}` in archive {archive}: {why}")]
    UnsafeArchive {
        archive: PathBuf,
        entry: String,
        why: &'static str,
    },

    /// `kiln up`'s host-tool preflight: one line per tool missing, too old or broken.
    #[error("{} host tool(s) missing for recipe `{recipe}`:\n  {}", problems.len(), problems.join("\n  "))]
    HostTools {
        recipe: String,
        problems: Vec<String>,
        hint: String,
    },

    /// A command did its work and what it found is a failure (a tuning fell back, wrong greedy
    /// output, a patch not in effect, a failed doctor check, `--strict` warnings): `code` is the
    /// exit status the command documents.
    #[error("{message}")]
    Finding {
        code: u8,
        message: String,
        hint: Option<String>,
    },

    /// An archive kiln will not unpack as a whole (a device node, past a size limit).
    #[error("refusing archive {archive}: {why}")]
    ArchiveRefused {
        archive: PathBuf,
        why: String,
        hint: String,
    },

    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },

    #[error("{message}")]
    Other {
        message: String,
        hint: Option<String>,
    },
}

impl Error {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn usage(message: impl Into<String>, hint: impl Into<Option<String>>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// `Ok(0)` for a zero `code`; else a [`Error::Finding`] that says why (`why` is asked only then).
    pub fn finding(code: u8, why: impl FnOnce() -> (String, Option<String>)) -> Result<u8> {
        if code == 0 {
            return Ok(0);
        }
        let (message, hint) = why();
        Err(Error::Finding {
            code,
            message,
            hint,
        })
    }

    pub fn other(message: impl Into<String>, hint: impl Into<Option<String>>) -> Self {
        Error::Other {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The process exit code this error maps to.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage { .. } | Error::Source(_) | Error::RecipeNotFound { .. } => 2,
            Error::Finding { code, .. } => (*code).max(1),
            _ => 1,
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            Error::RecipeNotFound { name, known } => Some(
                match crate::diagnostic::did_you_mean(name, known.iter().map(String::as_str)) {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!(
                        "pass a path to a recipe file, or one of the shipped recipes: {}",
                        known.join(", ")
                    ),
                },
            ),
            Error::StepFailed { log, hint, .. } => {
                let log = log.as_ref().map(|p| {
                    format!("full log: {}; fix the cause and run the same `kiln up` command again: finished steps are not re-run", p.display())
                });
                match (hint, log) {
                    (Some(h), Some(l)) => Some(format!("{h}\nhint: {l}")),
                    (h, l) => h.clone().or(l),
                }
            }
            Error::Locked { .. } => {
                Some("wait for the other run to finish, or use a separate --state-dir".into())
            }
            Error::ChecksumMismatch { .. } => Some(
                "the file changed upstream or the recipe's sha256 is wrong; nothing was cached"
                    .into(),
            ),
            Error::Truncated { .. } | Error::Download { .. } => {
                Some("check the network and run again; nothing was cached".into())
            }
            Error::UnsafeArchive { .. } => Some(
                "the archive tries to write outside its destination; nothing was extracted".into(),
            ),
            Error::Usage { hint, .. } | Error::Other { hint, .. } | Error::Finding { hint, .. } => {
                hint.clone()
            }
            Error::HostTools { hint, .. } => Some(format!(
                "{hint}; then run the same `kiln up` command again (nothing ran yet)"
            )),
            Error::ArchiveRefused { hint, .. } => Some(hint.clone()),
            Error::Io { source, .. } => io_hint(source),
            Error::Source(_) | Error::RunFailed { .. } => None,
        }
    }

    /// The message followed by each cause (`cannot read archive x: unexpected end of file`), for
    /// places that keep one line: step reasons, step logs.
    pub fn with_causes(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            source = cause.source();
        }
        out
    }

    /// Render for a terminal: `error: ...`, the output tail, `caused by:` chain, `hint:`.
    pub fn render(&self) -> String {
        let mut out = format!("error: {self}");
        if let Error::StepFailed { tail, reason, .. } = self {
            // The log ends with the failure itself: said once, above.
            let said = format!("error: {reason}");
            let tail: Vec<&str> = tail.lines().filter(|l| l.trim() != said).collect();
            if !tail.is_empty() {
                out.push_str("\n--- last lines of the step's output ---\n");
                out.push_str(tail.join("\n").trim_end());
            }
        }
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            out.push_str(&format!("\ncaused by: {cause}"));
            source = cause.source();
        }
        if let Some(hint) = self.hint() {
            out.push_str(&format!("\nhint: {hint}"));
        }
        crate::redact::scrub(&out)
    }
}

impl From<Diagnostic> for Error {
    fn from(d: Diagnostic) -> Self {
        Error::Source(Box::new(d))
    }
}

/// What to do about an OS error whose cause is plain from its kind.
fn io_hint(e: &io::Error) -> Option<String> {
    match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => Some(
            "the disk is full: free space (or point KILN_HOME / --state-dir elsewhere) and run again; finished steps are not re-run".into(),
        ),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            Some("check the permissions of that path, or point kiln at a writable one".into())
        }
        io::ErrorKind::NotFound => Some(
            "nothing is at that path: check it (a relative path is taken from the current directory)"
                .into(),
        ),
        _ => None,
    }
}
