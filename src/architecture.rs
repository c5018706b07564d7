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
