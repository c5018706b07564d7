//! Bounded, deterministic fuzzing of everything that reads recipe text (issue 11): the recipe
//! loader and validator (TOML, imports, vars, steps, profiles), `when` conditions, `${}` templates
//! and unit parsing. A mutation fuzzer, seeded from every recipe in the repository, with a fixed
//! seed and case budget so CI runs it in well under two minutes; no dependency beyond std.
//!
//! Goal: 0 panics, 0 aborts (a stack overflow kills the test binary), 0 hangs (a case still
//! running after 20 s fails its target's test, alone). No timed assertion: each target reports its
//! slowest case; the time budget (no case over 1 s, in a release build) is checked by
//! `bench/fuzz-budget.sh`, which sets `KILN_FUZZ_SLOW_MS`. Longer runs:
//! `KILN_FUZZ_SECS=600 KILN_FUZZ_SEED=N cargo test --release --test it fuzz:: -- --nocapture`
//! (see BENCHMARKS.md). A failing input is written to `target/fuzz-failures/`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kiln::host::{Facts, FACT_KEYS};
use kiln::recipe::interp::{Quoting, Template};
use kiln::recipe::{load, when, LoadOptions};
use kiln::units;

/// Cases per target in CI (recipe, when, template, units).
const DEFAULT_CASES: u64 = 6000;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Fragments that reach the interesting paths: tables, keys, templates, conditions, imports.
const DICTIONARY: &[&str] = &[
    "[[step]]\n",
    "[vars]\n",
    "[recipe]\n",
    "[profile.x]\n",
    "[env]\n",
    "id = \"s\"\n",
    "kind = \"run\"\n",
    "kind = \"fetch\"\n",
    "kind = \"extract\"\n",
    "kind = \"python\"\n",
    "kind = \"cuda\"\n",
    "kind = \"patch\"\n",
    "cmd = [\"true\"]\n",
    "shell = true\n",
    "needs = [\"s\"]\n",
    "import = [\"x.toml\"]\n",
    "import = [\"/dev/zero\"]\n",
    "when = \"",
    "timeout = \"",
    "max_size = \"",
    "mem_per_job = \"",
    "${",
    "}",
    "$$",
    ":-",
    "|nodot",
    "|quote",
    "${host.gpu.cc}",
    "${recipe.dir}",
    "${steps.s.path}",
    "(",
    ")",
    "not ",
    " and ",
    " or ",
    " == ",
    " >= ",
    "gpu.cc",
    "var.",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "\\u0000",
    "\\",
    "\n",
    "=",
    ",",
    "[",
    "]",
    "{",
    "}",
    "#",
    "é",
    "\u{0}",
    "999999999999999999999",
    "1.5GiB",
    "30m",
    "-1",
    "..",
    "../",
    "/",
];

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, rng.next() as u8),
            2 if !v.is_empty() => {
                let end = (at + rng.below(32)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 | 4 => {
                let word = DICTIONARY[rng.below(DICTIONARY.len())].as_bytes();
                v.splice(at..at, word.iter().copied());
            }
            5 if !v.is_empty() => {
                // Repeat a short chunk many times: deep nesting, long chains, huge values.
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(16)).min(v.len());
                let chunk = v[start..end].to_vec();
                let times = 1 + rng.below(2000);
                let bytes: Vec<u8> = chunk
                    .iter()
                    .copied()
                    .cycle()
                    .take(chunk.len() * times)
                    .collect();
                v.splice(end..end, bytes);
            }
            6 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len());
                let end = (from + rng.below(256)).min(other.len());
                v.splice(at..at, other[from..end].iter().copied());
            }
            _ => {
                let i = rng.below(v.len().max(1));
                v.truncate(i);
            }
        }
    }
    v.truncate(1 << 20);
    v
}

fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            toml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
}

/// Every recipe-like file in the repository, plus strings that look like conditions/templates.
fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in ["recipes", "toolchains", "tests/fixtures"] {
        toml_files(&root.join(d), &mut files);
    }
    files.sort();
    let mut out: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    for s in [
        "gpu.cc >= 12.0 and os == 'linux'",
        "not (arch == aarch64) or var.flavour != \"cpu\"",
        "sm_${arch|nodot} $$HOME ${host.gpu.cc:-9.0|major}",
        "${a}${b}${c}",
        "64GiB",
        "1h30m",
    ] {
        out.push(s.as_bytes().to_vec());
    }
    assert!(
        out.len() > 20,
        "the corpus is seeded from tests/ and recipes/"
    );
    out
}

struct Budget {
    cases: u64,
    until: Option<Instant>,
    seed: u64,
    /// A case slower than this fails: only when `KILN_FUZZ_SLOW_MS` asks (bench/fuzz-budget.sh).
    slow: Option<Duration>,
}

/// A case still running after this is a hang.
const HANG: Duration = Duration::from_secs(20);

fn budget() -> Budget {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    Budget {
        cases: env("KILN_FUZZ_CASES").unwrap_or(DEFAULT_CASES),
        until: env("KILN_FUZZ_SECS").map(|s| Instant::now() + Duration::from_secs(s)),
        seed: env("KILN_FUZZ_SEED").unwrap_or(0x6b69_6c6e),
        slow: env("KILN_FUZZ_SLOW_MS").map(Duration::from_millis),
    }
}

/// Run `target` on mutated inputs in a worker thread; panics (and, with a budget, slow cases) are
/// collected, saved and reported; a case that does not return within [`HANG`] fails this test at
/// once (its worker is left behind; the other tests of the binary go on).
fn fuzz(name: &str, target: impl Fn(&[u8], &Path) + Send + 'static) {
    let b = budget();
    let corpus = corpus();
    let mut rng = Rng(b.seed
        ^ name
            .bytes()
            .fold(0u64, |h, c| h.wrapping_mul(31) ^ u64::from(c))
        | 1);
    let work = tempfile::tempdir().unwrap();
    let (to_worker, inputs) = mpsc::channel::<Vec<u8>>();
    let (to_test, results) = mpsc::channel::<(bool, Duration)>();
    let dir = work.path().to_path_buf();
    std::thread::spawn(move || {
        for input in inputs {
            let t = Instant::now();
            let ok = catch_unwind(AssertUnwindSafe(|| target(&input, &dir))).is_ok();
            if to_test.send((ok, t.elapsed())).is_err() {
                break;
            }
        }
    });
    let failures = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
    let (mut failed, mut slowest, mut cases) = (Vec::new(), (Duration::ZERO, 0u64), 0u64);
    loop {
        let done = match b.until {
            Some(t) => Instant::now() >= t,
            None => cases >= b.cases,
        };
        if done {
            break;
        }
        let base = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, base, &corpus);
        cases += 1;
        to_worker.send(input.clone()).expect("the fuzz worker runs");
        let Ok((ok, took)) = results.recv_timeout(HANG) else {
            let _ = std::fs::create_dir_all(&failures);
            let path = failures.join(format!("{name}-hang-{cases}"));
            std::fs::write(&path, &input).unwrap();
            panic!(
                "fuzz {name}: case {cases} still runs after {} s (a hang); its input: {}",
                HANG.as_secs(),
                path.display()
            );
        };
        if took > slowest.0 {
            slowest = (took, cases);
        }
        let why = match (ok, b.slow.is_some_and(|s| took > s)) {
            (false, _) => Some("panic"),
            (true, true) => Some("slow"),
            _ => None,
        };
        if let Some(why) = why {
            let _ = std::fs::create_dir_all(&failures);
            let path = failures.join(format!("{name}-{why}-{cases}"));
            std::fs::write(&path, &input).unwrap();
            failed.push(format!("{why} ({took:?}): {}", path.display()));
        }
    }
    // Past the harness's capture: the slowest case shows on a passing run too.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "fuzz {name}: {cases} cases, seed {:#x}, slowest case #{} took {:?}{}, {} failures",
        b.seed,
        slowest.1,
        slowest.0,
        b.slow.map_or(
            " (no time budget here: bench/fuzz-budget.sh)".into(),
            |s| format!(" (budget {s:?})")
        ),
        failed.len()
    );
    assert!(failed.is_empty(), "fuzz {name}:\n{}", failed.join("\n"));
}

fn facts() -> Facts {
    FACT_KEYS
        .iter()
        .fold(Facts::new(), |f, k| f.with_override(k, "12.0"))
}

#[test]
fn fuzz_recipe_loader_and_validator() {
    let facts = facts();
    fuzz("recipe", move |input, dir| {
        let path = dir.join("r.toml");
        std::fs::write(&path, input).unwrap();
        let opts = LoadOptions {
            overrides: &[("x".into(), "${y}".into())],
            facts: &facts,
            paths: &kiln::paths::StatePaths::new(dir.join("state"), Some(dir.join("cache"))),
        };
        if let Err(e) = load(Some(path.to_str().unwrap()), &opts) {
            let _ = e.render();
        }
    });
}

#[test]
fn fuzz_when_conditions() {
    fuzz("when", |input, _| {
        let text = String::from_utf8_lossy(input);
        if let Ok(e) = when::parse(&text) {
            let _ = e.idents();
            let _ = e.eval(&|k| (k.len() % 3 != 0).then(|| k.to_string()));
        }
    });
}

#[test]
fn fuzz_templates_and_units() {
    fuzz("template", |input, _| {
        let text = String::from_utf8_lossy(input);
        let _ = units::parse_size(&text);
        let _ = units::parse_duration(&text);
        if let Ok(t) = Template::parse(&text) {
            for q in [Quoting::None, Quoting::Shell, Quoting::Python] {
                let _ = t.expand(q, |v| Ok::<_, ()>(v.name.repeat(3)), || ());
            }
        }
    });
}
