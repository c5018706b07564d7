//! Bounded, deterministic fuzzing of everything that reads recipe text (issue 11): the recipe
//! loader and validator (TOML, imports, vars, steps, profiles), `when` conditions, `${}` templates
//! and unit parsing. A mutation fuzzer, seeded from every recipe in the repository, with a fixed
//! seed and case budget so CI runs it in well under two minutes; no dependency beyond std.
//!
//! Goal: 0 panics, 0 aborts (a stack overflow kills the test binary), 0 cases over 1 s. Longer
//! runs: `KILN_FUZZ_SECS=600 KILN_FUZZ_SEED=N cargo test --release --test it fuzz:: -- --nocapture`
//! (see BENCHMARKS.md). A failing input is written to `target/fuzz-failures/`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln::host::{Facts, FACT_KEYS};
use kiln::recipe::interp::{Quoting, Template};
use kiln::recipe::{load, units, when, LoadOptions};

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
    /// A case slower than this fails (1 s).
    slow: Duration,
}

fn budget() -> Budget {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    Budget {
        cases: env("KILN_FUZZ_CASES").unwrap_or(DEFAULT_CASES),
        until: env("KILN_FUZZ_SECS").map(|s| Instant::now() + Duration::from_secs(s)),
        seed: env("KILN_FUZZ_SEED").unwrap_or(0x6b69_6c6e),
        slow: Duration::from_millis(env("KILN_FUZZ_SLOW_MS").unwrap_or(1000)),
    }
}

/// Run `target` on mutated inputs; panics and slow cases are collected, saved and reported.
fn fuzz(name: &str, target: &dyn Fn(&[u8], &Path)) {
    let b = budget();
    let corpus = corpus();
    let mut rng = Rng(b.seed
        ^ name
            .bytes()
            .fold(0u64, |h, c| h.wrapping_mul(31) ^ c as u64)
        | 1);
    let work = tempfile::tempdir().unwrap();
    // A case still running after 20 s is a hang: say which and stop the whole binary.
    let started = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let (s, label) = (started.clone(), name.to_string());
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let t = s.load(Ordering::SeqCst);
        if t != 0 && epoch.elapsed().as_millis() as u64 - t > 20_000 {
            eprintln!(
                "fuzz {label}: a case hangs; its input is target/fuzz-failures/{label}-current"
            );
            std::process::exit(101);
        }
    });
    let failures = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
    let (mut failed, mut slowest, mut cases) = (Vec::new(), Duration::ZERO, 0u64);
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
        let _ = std::fs::create_dir_all(&failures);
        let _ = std::fs::write(failures.join(format!("{name}-current")), &input);
        started.store(epoch.elapsed().as_millis().max(1) as u64, Ordering::SeqCst);
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| target(&input, work.path())));
        let took = t.elapsed();
        started.store(0, Ordering::SeqCst);
        slowest = slowest.max(took);
        let why = match (outcome, took > b.slow) {
            (Err(_), _) => Some("panic"),
            (Ok(()), true) => Some("slow"),
            _ => None,
        };
        if let Some(why) = why {
            let path = failures.join(format!("{name}-{why}-{cases}"));
            std::fs::write(&path, &input).unwrap();
            failed.push(format!("{why} ({took:?}): {}", path.display()));
        }
    }
    let _ = std::fs::remove_file(failures.join(format!("{name}-current")));
    eprintln!(
        "fuzz {name}: {cases} cases, seed {:#x}, slowest {slowest:?}, {} failures",
        b.seed,
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
    fuzz("recipe", &|input, dir| {
        let path = dir.join("r.toml");
        std::fs::write(&path, input).unwrap();
        let opts = LoadOptions {
            overrides: &[("x".into(), "${y}".into())],
            facts: &facts,
            state_dir: &dir.join("state"),
            cache_dir: &dir.join("cache"),
        };
        if let Err(e) = load(Some(path.to_str().unwrap()), &opts) {
            let _ = e.render();
        }
    });
}

#[test]
fn fuzz_when_conditions() {
    fuzz("when", &|input, _| {
        let text = String::from_utf8_lossy(input);
        if let Ok(e) = when::parse(&text) {
            let _ = e.idents();
            let _ = e.eval(&|k| (k.len() % 3 != 0).then(|| k.to_string()));
        }
    });
}

#[test]
fn fuzz_templates_and_units() {
    fuzz("template", &|input, _| {
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
