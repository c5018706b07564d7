//! Python syntax trees (tree-sitter-python): parsing, node search, and code comparison by tokens.

use tree_sitter::{Node, Parser, Tree};

/// Parse Python source. tree-sitter always yields a tree; syntax errors show up as ERROR nodes.
pub fn parse(source: &str) -> Tree {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .expect("the bundled Python grammar matches the tree-sitter runtime");
    parser
        .parse(source, None)
        .expect("parsing without a timeout or cancellation flag always yields a tree")
}

/// The byte offset of the first syntax error (an ERROR or MISSING node), if any.
pub fn first_error(tree: &Tree) -> Option<usize> {
    if !tree.root_node().has_error() {
        return None;
    }
    preorder(tree.root_node())
        .into_iter()
        .find(|n| n.is_error() || n.is_missing())
        .map(|n| n.start_byte())
}

/// Every node under `root` (itself included), in source order.
pub fn preorder(root: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    let mut cursor = root.walk();
    loop {
        out.push(cursor.node());
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.node() == root {
                return out;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
        }
    }
}

/// Nodes of one kind under `root`.
pub fn all_of_kind<'t>(root: Node<'t>, kind: &str) -> Vec<Node<'t>> {
    preorder(root)
        .into_iter()
        .filter(|n| n.kind() == kind)
        .collect()
}

pub fn text<'s>(node: Node<'_>, source: &'s str) -> &'s str {
    &source[node.byte_range()]
}

/// A string literal's body: `"--x"` or `'--x'` → `--x` (prefixes such as `r` dropped).
pub fn unquote(literal: &str) -> String {
    let body = literal.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    body.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// The code tokens of a fragment: leaf texts without comments or layout. Two fragments that
/// differ only in spacing, line breaks or comments have equal tokens.
pub fn tokens(fragment: &str) -> Vec<String> {
    let tree = parse(fragment);
    preorder(tree.root_node())
        .into_iter()
        .filter(|n| n.child_count() == 0 && n.kind() != "comment" && !n.byte_range().is_empty())
        .map(|n| fragment[n.byte_range()].to_string())
        .collect()
}

/// Whether two fragments are the same code (see `tokens`).
pub fn same_code(a: &str, b: &str) -> bool {
    tokens(a) == tokens(b)
}

/// 1-based line of a byte offset.
pub fn line_of(source: &str, offset: usize) -> usize {
    source[..offset.min(source.len())].matches('\n').count() + 1
}

/// The whitespace that starts the line holding `offset`.
pub fn indent_at(source: &str, offset: usize) -> &str {
    let start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = &source[start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// The offset of the end of the line holding `offset` (the `\n`, or the end of the source).
pub fn line_end(source: &str, offset: usize) -> usize {
    source[offset..]
        .find('\n')
        .map_or(source.len(), |i| offset + i)
}

/// Whether `node` sits inside a function, lambda or class that is itself below `top`.
pub fn nested_scope_between(node: Node<'_>, top: Node<'_>) -> bool {
    let mut current = node.parent();
    while let Some(n) = current {
        if n == top {
            return false;
        }
        if matches!(
            n.kind(),
            "function_definition" | "lambda" | "class_definition"
        ) {
            return true;
        }
        current = n.parent();
    }
    false
}

/// Names of the functions and classes enclosing `node`, innermost last.
pub fn enclosing_scopes(node: Node<'_>, source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = node.parent();
    while let Some(n) = current {
        if matches!(n.kind(), "function_definition" | "class_definition") {
            if let Some(name) = n.child_by_field_name("name") {
                names.push(text(name, source).to_string());
            }
        }
        current = n.parent();
    }
    names.reverse();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_ignore_layout_and_comments() {
        assert!(same_code("[9, 10]", "[9,10]  # sm90, sm100"));
        assert!(same_code("{\n  2: 64 * MiB,  # 64 MB\n}", "{2: 64*MiB,}"));
        assert!(!same_code("[9, 10]", "[9, 10, 12]"));
        assert!(!same_code("'a b'", "'ab'"));
    }

    #[test]
    fn finds_syntax_errors() {
        assert_eq!(first_error(&parse("x = 1\n")), None);
        assert!(first_error(&parse("x = (1,\n")).is_some());
    }

    #[test]
    fn lines_and_indents() {
        let src = "a = 1\n    b = 2\n";
        assert_eq!(line_of(src, 10), 2);
        assert_eq!(indent_at(src, 10), "    ");
        assert_eq!(line_end(src, 0), 5);
    }
}
