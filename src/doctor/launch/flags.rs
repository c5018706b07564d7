//! The flags a server knows: SGLang's `server_args.py` read by syntax (tree-sitter, never
//! imported), llama-server's own `--help`; and the flags of a command line.

use std::path::Path;
use std::time::Duration;

use crate::patch::syntax;
use crate::process::{self, CommandSpec};

/// Every option string of `parser.add_argument("--x", "--y", ...)` calls in SGLang's
/// `server_args.py`, and of the dataclass fields it adds with `add_cli_args_from_dataclass`
/// (SGLang ≥ 0.5.1x: [`super::dataclass_flags`]); None when neither is found.
pub(crate) fn sglang_flags(server_args: &str) -> Option<Vec<String>> {
    let tree = syntax::parse(server_args);
    let mut flags: Vec<String> = syntax::all_of_kind(tree.root_node(), "call")
        .into_iter()
        .filter(|call| {
            call.child_by_field_name("function")
                .filter(|f| f.kind() == "attribute")
                .and_then(|f| f.child_by_field_name("attribute"))
                .is_some_and(|a| syntax::text(a, server_args) == "add_argument")
        })
        .filter_map(|call| call.child_by_field_name("arguments"))
        .flat_map(|args| {
            let mut cursor = args.walk();
            args.named_children(&mut cursor)
                .filter(|a| a.kind() == "string")
                .map(|a| syntax::unquote(syntax::text(a, server_args)))
                .collect::<Vec<_>>()
        })
        .filter(|s| s.starts_with('-'))
        .collect();
    flags.extend(super::dataclass_flags::dataclass_flags(server_args));
    flags.sort();
    flags.dedup();
    (!flags.is_empty()).then_some(flags)
}

/// `version = "0.5.9"` in `sglang/version.py` or the dist-info METADATA beside the package.
pub(crate) fn sglang_version(site: &Path) -> Option<String> {
    let entries = std::fs::read_dir(site).ok()?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(rest) = name.strip_prefix("sglang-") {
            if let Some(v) = rest.strip_suffix(".dist-info") {
                return Some(v.to_string());
            }
        }
    }
    None
}

/// The flags printed by `BIN --help` (llama.cpp's format: the flag column starts at column 0,
/// `-m,    --model FNAME`, descriptions are indented); None when it does not run.
pub(crate) fn help_flags(bin: &Path) -> Result<Vec<String>, String> {
    let spec = CommandSpec::new(bin.display().to_string(), ["--help"]);
    let out =
        process::capture_timeout(&spec, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(format!(
            "`{} --help` exited with {}",
            bin.display(),
            out.code.map_or("a signal".into(), |c| c.to_string())
        ));
    }
    let flags = parse_help(&format!("{}\n{}", out.stdout, out.stderr));
    if flags.is_empty() {
        return Err(format!("`{} --help` listed no flags", bin.display()));
    }
    Ok(flags)
}

pub(crate) fn parse_help(text: &str) -> Vec<String> {
    let mut flags: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('-')) {
        // The flag column ends at the first gap of two spaces that does not follow a comma.
        let mut column = String::new();
        for segment in line.split("  ").filter(|s| !s.trim().is_empty()) {
            column.push_str(segment.trim());
            column.push(' ');
            if !segment.trim_end().ends_with(',') {
                break;
            }
        }
        flags.extend(
            column
                .split([',', ' '])
                .filter(|t| is_flag(t))
                .map(str::to_string),
        );
    }
    flags.sort();
    flags.dedup();
    flags
}

/// A command-line token that is a flag: `-x`, `--xy`, `--x=v` (not `-1`, not `-`).
pub(crate) fn is_flag(token: &str) -> bool {
    let body = token
        .strip_prefix("--")
        .or_else(|| token.strip_prefix('-'))
        .unwrap_or("");
    token.starts_with('-') && body.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
}

/// A parsed command line: each flag with the value that follows it (`--x v` or `--x=v`).
pub(crate) struct Args<'a> {
    pub pairs: Vec<(&'a str, Option<&'a str>)>,
}

impl<'a> Args<'a> {
    pub(crate) fn parse(args: &'a [String]) -> Args<'a> {
        let mut pairs = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if is_flag(a) {
                if let Some((flag, value)) = a.split_once('=').filter(|_| a.starts_with("--")) {
                    pairs.push((flag, Some(value)));
                } else {
                    let value = args.get(i + 1).map(String::as_str).filter(|v| !is_flag(v));
                    pairs.push((a, value));
                    if value.is_some() {
                        i += 1;
                    }
                }
            }
            i += 1;
        }
        Args { pairs }
    }

    /// The value of the last of these flags given (the server's parser lets the last win).
    pub(crate) fn value(&self, names: &[&str]) -> Option<&'a str> {
        self.pairs
            .iter()
            .rev()
            .find(|(f, _)| names.contains(f))
            .and_then(|(_, v)| *v)
    }

    pub(crate) fn has(&self, names: &[&str]) -> bool {
        self.pairs.iter().any(|(f, _)| names.contains(f))
    }

    pub(crate) fn number(&self, names: &[&str]) -> Option<u64> {
        self.value(names).and_then(|v| v.parse().ok())
    }
}

/// How a server's parser takes `flag`: Ok(None) exactly, Ok(Some(full)) as an abbreviation,
/// Err(candidates) when unknown (empty) or ambiguous.
pub(crate) fn resolve<'k>(
    flag: &str,
    known: &'k [String],
    abbreviations: bool,
) -> Result<Option<&'k str>, Vec<&'k str>> {
    if known.iter().any(|k| k == flag) {
        return Ok(None);
    }
    if !abbreviations || !flag.starts_with("--") {
        return Err(Vec::new());
    }
    let matches: Vec<&str> = known
        .iter()
        .filter(|k| k.starts_with(flag))
        .map(String::as_str)
        .collect();
    match matches.as_slice() {
        [one] => Ok(Some(one)),
        [] => Err(Vec::new()),
        _ => Err(matches),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_add_argument_calls_by_syntax() {
        let src = r#"
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, help="--not-a-flag in help")
        parser.add_argument('--tp-size', type=int)
        # parser.add_argument("--commented-out")
        x = "--a-string-elsewhere"
"#;
        assert_eq!(
            sglang_flags(src).unwrap(),
            vec!["--model", "--model-path", "--tp-size"]
        );
    }

    #[test]
    fn parses_llama_help_columns() {
        let help = "----- common params -----\n\n-h,    --help, --usage                  print usage and exit\n-t,    --threads N                      number of threads (default: -1)\n                                        (env: LLAMA_ARG_THREADS)\n-fa,   --flash-attn [on|off|auto]       set Flash Attention use\n--no-mmap                               do not memory-map model\n                                        -1 = infinity\n";
        let flags = parse_help(help);
        for f in [
            "-h",
            "--help",
            "--usage",
            "-t",
            "--threads",
            "-fa",
            "--flash-attn",
            "--no-mmap",
        ] {
            assert!(flags.contains(&f.to_string()), "{f}: {flags:?}");
        }
        assert!(
            !flags.iter().any(|f| f == "-1" || f.starts_with("-----")),
            "{flags:?}"
        );
    }

    #[test]
    fn arguments_pair_flags_with_values() {
        let v: Vec<String> = [
            "--tp-size",
            "8",
            "--trust-remote-code",
            "--port=30000",
            "-n",
            "-1",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let a = Args::parse(&v);
        assert_eq!(a.number(&["--tp-size"]), Some(8));
        assert_eq!(a.value(&["--port"]), Some("30000"));
        assert!(a.has(&["--trust-remote-code"]));
        assert_eq!(a.value(&["-n"]), Some("-1"));
    }

    #[test]
    fn abbreviations_follow_argparse() {
        let known: Vec<String> = ["--tp-size", "--tokenizer-path", "--tokenizer-mode"]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        assert_eq!(resolve("--tp-size", &known, true), Ok(None));
        assert_eq!(resolve("--tp", &known, true), Ok(Some("--tp-size")));
        assert_eq!(resolve("--tokenizer", &known, true).unwrap_err().len(), 2);
        assert_eq!(resolve("--tp", &known, false), Err(Vec::new()));
    }
}
