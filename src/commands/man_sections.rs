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
\\fBkiln up\\fR, an advisory under \\fB\\-\\-strict\\fR, a patch not in effect, a failed doctor
check.
.TP
\\fB2\\fR
Bad input: a command line, recipe, patch set or signature file kiln cannot use (the message says
where, as file:line:col, and what to do). Also what a command documents as 2: wrong greedy output
(\\fBkiln verify\\fR), a result below the baseline's gate (\\fBkiln bench\\fR), a tuning whose server
crashed (\\fBkiln serve\\fR).
.PP
Every non\\-zero exit ends with one \\fBerror:\\fR line that says why. With \\fB\\-\\-json\\fR
(\\fBkiln up\\fR, \\fBkiln plan\\fR) the failure is also an \\fBerror\\fR event on stdout, and the last
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
Seconds the doctor's Python probe (\\fBimport torch\\fR, ...) may take before its process group
is ended [default: 60].
.TP
\\fBUSER\\fR
Read by the launch preflight to find the JIT caches a server fills (\\fI/tmp/torchinductor_$USER\\fR).
.TP
\\fBKILN_TEST_PATCH_KILL_AT\\fR
For kiln's own tests: \\fBkiln patch apply\\fR kills itself at its Nth write point (the kill-safety test).
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
