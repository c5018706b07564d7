//! The sections of kiln's man pages that clap cannot know (roff): how kiln exits, the
//! environment it reads (a test checks every variable the code reads is here) and its files.

pub(super) const EXIT_STATUS: &str = ".SH \"EXIT STATUS\"
.TP
\\fB0\\fR
Everything asked for worked (advisories such as bench noise are warnings, unless
\\fB\\-\\-strict\\fR).
.TP
\\fB1\\fR
A failure: a preflight, a step, the server, a tuning that fell back, wrong greedy output in
\\fBkiln up\\fR, an advisory under \\fB\\-\\-strict\\fR, a patch not in effect, a doctor warning.
.TP
\\fB2\\fR
Bad input: a command line, recipe, patch set or signature file kiln cannot use (the message says
where, as file:line:col, and what to do). Also what a command documents as 2: wrong greedy output
(\\fBkiln verify\\fR), a result below the baseline's gate (\\fBkiln bench\\fR), a tuning whose server
crashed or whose evidence conflicts (\\fBkiln serve\\fR), a failed check (\\fBkiln doctor\\fR).
.PP
Every non\\-zero exit ends with one \\fBerror:\\fR line that says why. With \\fB\\-\\-json\\fR
(every command that takes it) the failure is also an \\fBerror\\fR event on stdout, and the last
event is always \\fBoutcome\\fR with \\fBexit_code\\fR.
";

pub(super) const ENVIRONMENT: &str = ".SH ENVIRONMENT
.TP
\\fBKILN_HOME\\fR
The state directory (receipts, logs, caches, reports), as \\fB\\-\\-state\\-dir\\fR.
.TP
\\fBXDG_STATE_HOME\\fR
Without \\fBKILN_HOME\\fR: the state directory is \\fI$XDG_STATE_HOME/kiln\\fR, else
\\fI~/.local/state/kiln\\fR (from \\fBHOME\\fR).
.TP
\\fBKILN_CACHE_DIR\\fR
The cache (downloads, compiled wheels, tools kiln installs) [default: \\fI<state>/cache\\fR].
.TP
\\fBKILN_REMOTE_CACHE\\fR
An OCI registry reference (REGISTRY/REPO[:TAG]) compiled wheels are pulled from before a
build and pushed to after one.
.TP
\\fBKILN_REGISTRY_USER\\fR, \\fBKILN_REGISTRY_PASSWORD\\fR
Credentials for that registry (never logged).
.TP
\\fBKILN_CACHE_SIGNING_KEY\\fR
A key file from \\fBkiln cache key generate\\fR: step-cache entries this kiln stores, exports
or pushes are signed with it.
.TP
\\fBKILN_CACHE_TRUSTED_KEYS\\fR
Public keys (NAME:BASE64, separated by spaces or commas) whose signatures make a step-cache
entry another machine stored restorable here.
.TP
\\fBKILN_CACHE_REQUIRE_SIGS\\fR
\\fBfalse\\fR: accept unsigned step-cache entries from elsewhere (a private cache only).
.TP
\\fBKILN_NO_PROGRESS\\fR
Set (to anything but 0/false/no/off): as \\fB\\-\\-no\\-progress\\fR.
.TP
\\fBNO_COLOR\\fR
Set and not empty: no colour, unless \\fB\\-\\-color always\\fR.
.TP
\\fBCLICOLOR_FORCE\\fR
Set and not 0: colour even when not on a terminal, unless \\fBNO_COLOR\\fR or
\\fB\\-\\-color never\\fR.
.TP
\\fBKILN_NO_UV\\fR
Build Python environments with pip even where uv is available.
.TP
\\fBKILN_NO_RECIPE_CACHE\\fR
Parse recipes afresh (do not reuse parsed recipes from the state directory).
.TP
\\fBCUDA_HOME\\fR, \\fBCUDA_VISIBLE_DEVICES\\fR
Read as host facts (the CUDA toolkit, the GPUs a server may use).
.TP
\\fBKILN_PYTHON_PROBE_TIMEOUT\\fR
Seconds the doctor's Python probe (the interpreter's start and its package versions; torch is
never imported) may take before its process group is ended [default: 6].
.TP
\\fBUSER\\fR
Read by the launch preflight to find the JIT caches a server fills (\\fI/tmp/torchinductor_$USER\\fR).
.TP
\\fBSOURCE_DATE_EPOCH\\fR
The timestamp of \\fBkiln image export\\fR archives (reproducible builds).
.TP
\\fBHF_TOKEN\\fR and other tokens
Passed to steps that need them, never written to logs or reports.
";

pub(super) const FILES: &str = ".SH FILES
.TP
\\fI<state>/runs/<recipe>/receipts/\\fR, \\fI<state>/runs/<recipe>/logs/\\fR
A receipt and a log per step.
.TP
\\fI<state>/reports/<recipe>/report.{json,md,html}\\fR
How the last \\fBkiln up\\fR ended.
.TP
\\fI<state>/serve/\\fR
Servers kiln started and their logs.
.TP
\\fI<state>/bench/\\fR, \\fI<state>/tune/<recipe>/\\fR
Bench history; tune results and winner profiles.
.TP
\\fI<cache>/\\fR
Downloads, compiled wheels and tools, shared by every recipe.
";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Every `"KILN_…"` string literal in `text` (a full variable name, not a prefix).
    fn kiln_literals(text: &str, out: &mut BTreeSet<String>) {
        for part in text.split("\"KILN_").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if part[name.len()..].starts_with('"') && !name.ends_with('_') {
                out.insert(format!("KILN_{name}"));
            }
        }
    }

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// ENVIRONMENT spells kiln's variable names a second time: each `KILN_*` name the code
    /// spells (read directly, through a constant, or as clap's `env = …`) is documented, but for the
    /// debug-only test hooks (`KILN_TEST_*`), and each
    /// documented `KILN_*` name is one the code spells (a stale entry fails too).
    #[test]
    fn the_environment_section_and_the_code_name_the_same_kiln_variables() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut in_code = BTreeSet::new();
        for file in files.iter().filter(|f| !f.ends_with("man_sections.rs")) {
            kiln_literals(&std::fs::read_to_string(file).unwrap(), &mut in_code);
        }
        // The switches of kiln's own tests exist in debug builds only and are not documented.
        in_code.retain(|name| !name.starts_with("KILN_TEST_"));
        let documented: BTreeSet<String> = super::ENVIRONMENT
            .split("\\fB")
            .skip(1)
            .filter_map(|p| p.split_once("\\fR").map(|(name, _)| name))
            .filter(|name| name.starts_with("KILN_"))
            .map(str::to_string)
            .collect();
        assert!(in_code.contains("KILN_REMOTE_CACHE"), "{in_code:?}");
        // Test hooks (`KILN_TEST_*`) exist in debug builds only and are not a user's to set.
        in_code.retain(|name| !name.starts_with("KILN_TEST_"));
        assert_eq!(in_code, documented);
    }
}
