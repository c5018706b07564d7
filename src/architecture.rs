//! The layer check: builds the graph of top-level modules from the `crate::` paths (and
//! `super::` paths that climb to the crate root) in `src/**/*.rs`, and fails on a cycle, on an
//! arrow to a higher layer, or on a module no layer names. docs/architecture.md explains the
//! layers; this table is their source of truth.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top to bottom. A module may use modules of its own layer (without a cycle) and of lower ones.
const LAYERS: &[&[&str]] = &[
    &["cli", "commands"],
    &["pipeline", "serve", "bench", "doctor", "image", "tune"],
    &["engine", "steps"],
    &[
        "recipe", "requires", "host", "process", "cache", "oci", "patch",
    ],
    &[
        "fs",
        "hash",
        "error",
        "diagnostic",
        "redact",
        "output",
        "bounded",
        "report",
        "shell",
        "source",
        "units",
        "embedded",
        "paths",
        "version",
        "dist",
        "fatbin",
        "columns",
    ],
];

type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// `module -> used module -> first file that uses it`.
fn module_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    let mut files = Vec::new();
    collect(src, &mut files);
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let mut path: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        if path == ["lib"] || path == ["main"] || path == ["architecture"] {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let from = path[0].clone();
        for to in used_modules(&text, path.len()) {
            if to != from {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| rel.display().to_string());
            }
        }
        graph.entry(from).or_default();
    }
    graph
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level modules named by the paths in `text`, a file `depth` modules below the root.
fn used_modules(text: &str, depth: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let code = line.split("//").next().unwrap_or("");
        let code_start = line_start;
        line_start += line.len();
        let mut rest = code;
        while let Some(at) = [rest.find("crate::"), rest.find("super::")]
            .into_iter()
            .flatten()
            .min()
        {
            let mut tail = &rest[at..];
            let mut supers = 0;
            let from_root = if let Some(t) = tail.strip_prefix("crate::") {
                tail = t;
                true
            } else {
                while let Some(t) = tail.strip_prefix("super::") {
                    supers += 1;
                    tail = t;
                }
                supers >= depth
            };
            if from_root {
                if tail.starts_with('{') {
                    let group = code_start + (code.len() - tail.len()) + 1;
                    out.extend(group_heads(&text[group..]));
                } else {
                    out.insert(ident(tail).to_string());
                }
            }
            rest = &rest[at + 7..];
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// The first segments of the `a::x, b, c::{..}}` that follows a use group's `{` (it may span
/// lines).
fn group_heads(group: &str) -> Vec<String> {
    let (mut depth, mut heads, mut expect) = (1, Vec::new(), true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => expect = true,
            c if expect && depth == 1 && (c.is_alphabetic() || c == '_') => {
                heads.push(ident(&group[i..]).to_string());
                expect = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every violation of the layer rules in `graph`, as readable lines.
fn violations(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let layer = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = Vec::new();
    for (from, uses) in graph {
        let Some(lf) = layer(from) else {
            out.push(format!("module `{from}` is in no layer: add it to LAYERS"));
            continue;
        };
        for (to, file) in uses {
            if layer(to).is_some_and(|lt| lt < lf) {
                out.push(format!(
                    "upward arrow {from} -> {to} (src/{file}): `{to}` is in a higher layer"
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(graph) {
        out.push(format!("cycle: {}", cycle.join(" -> ")));
    }
    out
}

/// One cycle of the graph, if it has any (depth-first search with an on-path mark).
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit<'g>(
        g: &'g Graph,
        n: &'g str,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == n) {
            let mut cycle: Vec<String> = path[at..]
                .iter()
                .map(std::string::ToString::to_string)
                .collect();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if !done.insert(n) {
            return None;
        }
        path.push(n);
        for next in g.get(n).into_iter().flat_map(BTreeMap::keys) {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

/// `file -> files it uses`, by module path (`pipeline::report` for `src/pipeline/report.rs`,
/// `pipeline` for its `mod.rs`). A path is resolved to the deepest file module it names;
/// a `mod.rs` naming its children by their bare names (`child::x`) is not an arrow, a child
/// reaching its parent through `super::` is. Code after a `#[cfg(test)] mod` is not read.
type FileGraph = BTreeMap<String, BTreeSet<String>>;

fn file_graph(src: &Path) -> FileGraph {
    let mut files = Vec::new();
    collect(src, &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let mut path: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        if path == ["lib"] || path == ["main"] || path == ["architecture"] {
            continue;
        }
        modules.insert(path, file);
    }
    let mut graph = FileGraph::new();
    for (path, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let from = path.join("::");
        let uses = graph.entry(from.clone()).or_default();
        for used in used_paths(&text, path) {
            let Some(to) = (1..=used.len())
                .rev()
                .map(|n| &used[..n])
                .find(|p| modules.contains_key(*p))
            else {
                continue;
            };
            let to = to.join("::");
            if to != from {
                uses.insert(to);
            }
        }
    }
    graph
}

/// The full paths (from the crate root) named by `crate::` and `super::` paths in `text`,
/// the code of module `at`; `use` groups are expanded.
fn used_paths(text: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        code.push_str(line.split("//").next().unwrap_or(""));
        code.push('\n');
    }
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at_word) = [rest.find("crate::"), rest.find("super::")]
        .into_iter()
        .flatten()
        .min()
    {
        let boundary = rest[..at_word]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let mut tail = &rest[at_word..];
        let mut base: Vec<String> = Vec::new();
        if let Some(t) = tail.strip_prefix("crate::") {
            tail = t;
        } else {
            let mut supers = 0;
            while let Some(t) = tail.strip_prefix("super::") {
                supers += 1;
                tail = t;
            }
            base = at[..at.len().saturating_sub(supers)].to_vec();
        }
        if boundary {
            let mut chars = tail.char_indices().peekable();
            for p in expand(tail, &mut chars) {
                let mut full = base.clone();
                full.extend(p);
                out.push(full);
            }
        }
        rest = &rest[at_word + 7..];
    }
    out
}

/// The paths a use tree spells from its first segment: `a::{b, c::{d, self}}` gives `a::b`,
/// `a::c::d`, `a::c`.
fn expand(s: &str, chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> Vec<Vec<String>> {
    let skip_space = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    let mut prefix = Vec::new();
    loop {
        skip_space(chars);
        match chars.peek().copied() {
            Some((_, '{')) => {
                chars.next();
                let mut out = Vec::new();
                loop {
                    skip_space(chars);
                    match chars.peek().copied() {
                        Some((_, '}')) | None => {
                            chars.next();
                            break;
                        }
                        Some((_, ',')) => {
                            chars.next();
                        }
                        _ => {
                            let before = chars.peek().map(|(i, _)| *i);
                            for p in expand(s, chars) {
                                let mut full = prefix.clone();
                                full.extend(p.into_iter().filter(|seg| seg != "self"));
                                out.push(full);
                            }
                            if chars.peek().map(|(i, _)| *i) == before {
                                chars.next();
                            }
                        }
                    }
                }
                return out;
            }
            Some((i, c)) if c.is_alphabetic() || c == '_' => {
                let name = ident(&s[i..]);
                for _ in name.chars() {
                    chars.next();
                }
                prefix.push(name.to_string());
                if s[i + name.len()..].starts_with("::") {
                    chars.next();
                    chars.next();
                } else {
                    // `x as y`: skip the rename up to the end of the item.
                    skip_space(chars);
                    if s[chars.peek().map_or(s.len(), |(i, _)| *i)..].starts_with("as ") {
                        chars.next();
                        chars.next();
                        skip_space(chars);
                        while chars
                            .next_if(|(_, c)| c.is_alphanumeric() || *c == '_')
                            .is_some()
                        {}
                    }
                    return vec![prefix];
                }
            }
            _ => return vec![prefix],
        }
    }
}

/// The groups of files that import each other, directly or in a loop (the strongly connected
/// components of more than one file), each sorted.
fn file_cycles(graph: &FileGraph) -> Vec<Vec<String>> {
    // Reachability by depth-first search from each file; a file's group is every file it
    // reaches that reaches it back. Quadratic, and the crate has a few hundred files.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|k| (k, reach(k))).collect();
    let mut groups = BTreeSet::new();
    for (file, seen) in &reached {
        if !seen.contains(*file) {
            continue;
        }
        let group: Vec<String> = seen
            .iter()
            .filter(|other| reached.get(other).is_some_and(|r| r.contains(*file)))
            .cloned()
            .collect();
        groups.insert(group);
    }
    groups.into_iter().collect()
}

#[test]
fn the_module_graph_follows_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    // The scan itself works: known arrows are found, through `use crate::{..}` groups too.
    assert!(graph["commands"].contains_key("cli"), "{graph:?}");
    assert!(graph["engine"].contains_key("steps"), "{graph:?}");
    let problems = violations(&graph, LAYERS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_upward_arrows_cycles_and_unplaced_modules() {
    let text = "use crate::{\n    engine::x,\n    fs::{a, b},\n};\nuse super::super::cli::Y;\n// crate::ignored\nlet _ = crate::hash::sha;\n";
    let found = used_modules(text, 2);
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["cli", "engine", "fs", "hash"]
    );
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string())
                .or_default()
                .insert(b.to_string(), "x.rs".into());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let layers: &[&[&str]] = &[&["top"], &["mid", "mid2"], &["low"]];
    assert!(violations(
        &graph(&[("top", "mid"), ("mid", "mid2"), ("mid2", "low")]),
        layers
    )
    .is_empty());
    let up = violations(&graph(&[("low", "top")]), layers);
    assert!(up[0].starts_with("upward arrow low -> top"), "{up:?}");
    let cycle = violations(&graph(&[("mid", "mid2"), ("mid2", "mid")]), layers);
    assert_eq!(cycle, ["cycle: mid -> mid2 -> mid"]);
    let stray = violations(&graph(&[("new", "low")]), layers);
    assert_eq!(stray, ["module `new` is in no layer: add it to LAYERS"]);
}

/// No two files import each other, directly or through a loop of files (issue 33): every
/// circle is cut, so any new one fails here.
#[test]
fn no_two_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = file_graph(&src);
    assert!(
        graph["pipeline::html"].contains("pipeline::report"),
        "{graph:?}"
    );
    let cycles = file_cycles(&graph);
    assert!(
        cycles.is_empty(),
        "files that import each other (cut the circle): {cycles:?}"
    );
}

#[test]
fn the_file_check_expands_use_groups_and_finds_loops() {
    let at = ["a".to_string(), "b".to_string()];
    let paths = used_paths(
        "use super::c::{d, e::{self, F}};\nuse crate::x::y as z;\n#[cfg(test)]\nmod tests {\nuse crate::q;\n}\n",
        &at,
    );
    let paths: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["a::c::d", "a::c::e", "a::c::e::F", "x::y"]);
    let mut g = FileGraph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    }
    assert_eq!(file_cycles(&g), [vec!["a", "b", "c"]]);
}
