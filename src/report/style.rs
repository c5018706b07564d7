//! Colour: whether to use it (`--color`, `NO_COLOR`, `CLICOLOR_FORCE`, a terminal) and the few
//! things kiln paints: the `error:`/`warning:`/`hint:` labels, step marks, verdict statuses and
//! doctor marks. indicatif's bars follow the same choice.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

/// `--color`: `auto` colours a terminal unless `NO_COLOR` is set (or `CLICOLOR_FORCE` forces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ColorWhen {
    #[default]
    Auto,
    Always,
    Never,
}

static STDERR: AtomicBool = AtomicBool::new(false);
static STDOUT: AtomicBool = AtomicBool::new(false);

/// Whether to colour a stream: `--color always|never` win; then a non-empty `NO_COLOR` turns
/// colour off, a `CLICOLOR_FORCE` other than `0` turns it on; else a terminal (not `TERM=dumb`)
/// gets colour.
pub(crate) fn decide(
    when: ColorWhen,
    terminal: bool,
    env: impl Fn(&str) -> Option<String>,
) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            if env("NO_COLOR").is_some_and(|v| !v.is_empty()) {
                false
            } else if env("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
                true
            } else {
                terminal && env("TERM").as_deref() != Some("dumb")
            }
        }
    }
}

/// Decide for stderr and stdout once, and tell indicatif's styling the same.
pub(super) fn apply(when: ColorWhen) {
    let env = |k: &str| std::env::var(k).ok();
    let err = decide(when, std::io::stderr().is_terminal(), env);
    let out = decide(when, std::io::stdout().is_terminal(), env);
    STDERR.store(err, Ordering::Relaxed);
    STDOUT.store(out, Ordering::Relaxed);
    console::set_colors_enabled_stderr(err);
    console::set_colors_enabled(out);
}

/// Which stream a text is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

fn on(stream: Stream) -> bool {
    match stream {
        Stream::Stdout => STDOUT.load(Ordering::Relaxed),
        Stream::Stderr => STDERR.load(Ordering::Relaxed),
    }
}

/// The colours kiln uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tone {
    Bad,
    Warn,
    Good,
    Hint,
    Dim,
}

/// `text` in `tone` when `stream` is coloured.
pub(crate) fn paint(stream: Stream, tone: Tone, text: &str) -> String {
    if on(stream) {
        paint_always(tone, text)
    } else {
        text.to_string()
    }
}

fn paint_always(tone: Tone, text: &str) -> String {
    let code = match tone {
        Tone::Bad => "1;31",
        Tone::Warn => "1;33",
        Tone::Good => "32",
        Tone::Hint => "1;36",
        Tone::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The labels at the start of lines of `text` (`error:`, `warning:`, `hint:`, `caused by:`)
/// painted, for stderr.
pub(crate) fn labels(text: &str) -> String {
    if !on(Stream::Stderr) {
        return text.to_string();
    }
    labels_painted(text)
}

fn labels_painted(text: &str) -> String {
    const LABELS: [(&str, Tone); 4] = [
        ("error:", Tone::Bad),
        ("warning:", Tone::Warn),
        ("hint:", Tone::Hint),
        ("caused by:", Tone::Dim),
    ];
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let label = LABELS.iter().find(|(l, _)| line.starts_with(l));
        match label {
            Some((l, tone)) => {
                out.push_str(&paint_always(*tone, l));
                out.push_str(&line[l.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Doctor's marks (`[✓]`, `[!]`, `[✗]`) painted, for stdout.
pub(crate) fn marks(text: &str) -> String {
    if !on(Stream::Stdout) {
        return text.to_string();
    }
    text.replace("[✓]", &paint_always(Tone::Good, "[✓]"))
        .replace("[!]", &paint_always(Tone::Warn, "[!]"))
        .replace("[✗]", &paint_always(Tone::Bad, "[✗]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn flags_win_then_no_color_then_clicolor_force_then_the_terminal() {
        let none: &[(&str, &str)] = &[];
        assert!(decide(ColorWhen::Always, false, env(&[("NO_COLOR", "1")])));
        assert!(!decide(
            ColorWhen::Never,
            true,
            env(&[("CLICOLOR_FORCE", "1")])
        ));
        assert!(!decide(ColorWhen::Auto, true, env(&[("NO_COLOR", "1")])));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(decide(ColorWhen::Auto, true, env(&[("NO_COLOR", "")])));
        assert!(decide(
            ColorWhen::Auto,
            false,
            env(&[("CLICOLOR_FORCE", "1")])
        ));
        assert!(!decide(
            ColorWhen::Auto,
            false,
            env(&[("CLICOLOR_FORCE", "0")])
        ));
        assert!(decide(ColorWhen::Auto, true, env(none)));
        assert!(!decide(ColorWhen::Auto, true, env(&[("TERM", "dumb")])));
        assert!(!decide(ColorWhen::Auto, false, env(none)));
    }

    #[test]
    fn labels_at_line_starts_are_painted_and_nothing_else() {
        let text = "error: x failed: error: inner\ncaused by: io\nhint: run again";
        assert_eq!(
            labels_painted(text),
            "\x1b[1;31merror:\x1b[0m x failed: error: inner\n\x1b[2mcaused by:\x1b[0m io\n\x1b[1;36mhint:\x1b[0m run again"
        );
    }
}
