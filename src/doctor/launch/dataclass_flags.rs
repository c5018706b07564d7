//! SGLang ≥ 0.5.1x derives most server flags from `ServerArgs`'s dataclass fields
//! (`sglang/srt/arg_groups/arg_utils.py`, `add_cli_args_from_dataclass`): a field annotated
//! `A[T, "help"]` or `A[T, Arg(...)]` (`A` is `typing.Annotated`) becomes `--field-name`, or
//! `Arg(cli_name=...)`, plus `Arg(aliases=[...])`; `Arg(no_cli=True)` and fields without a help
//! string or an `Arg` get no flag. Read by syntax (tree-sitter), never imported.

use tree_sitter::Node;

use crate::patch::syntax;

/// The flags of every dataclass passed to `add_cli_args_from_dataclass(parser, Class)` in
/// `source`, by the rules above (empty when the file has no such call).
pub(crate) fn dataclass_flags(source: &str) -> Vec<String> {
    let tree = syntax::parse(source);
    let root = tree.root_node();
    let classes: Vec<&str> = syntax::all_of_kind(root, "call")
        .into_iter()
        .filter(|c| {
            c.child_by_field_name("function")
                .is_some_and(|f| syntax::text(f, source) == "add_cli_args_from_dataclass")
        })
        .filter_map(|c| c.child_by_field_name("arguments"))
        .filter_map(|args| args.named_child(1))
        .filter(|a| a.kind() == "identifier")
        .map(|a| syntax::text(a, source))
        .collect();
    let mut flags = Vec::new();
    for class in syntax::all_of_kind(root, "class_definition") {
        let named = class
            .child_by_field_name("name")
            .map(|n| syntax::text(n, source));
        if !named.is_some_and(|n| classes.contains(&n)) {
            continue;
        }
        let Some(body) = class.child_by_field_name("body") else {
            continue;
        };
        let mut cursor = body.walk();
        for statement in body.named_children(&mut cursor) {
            let Some(assignment) = statement
                .named_child(0)
                .filter(|a| a.kind() == "assignment")
            else {
                continue;
            };
            flags.extend(field_flags(assignment, source));
        }
    }
    flags
}

/// The flags of one annotated field `name: A[T, ...] = default`.
fn field_flags(assignment: Node<'_>, source: &str) -> Vec<String> {
    let (Some(name), Some(annotation)) = (
        assignment.child_by_field_name("left"),
        assignment.child_by_field_name("type"),
    ) else {
        return Vec::new();
    };
    // `A[T, meta]` parses as a `generic_type` (identifier + type_parameter of `type` nodes) in
    // an annotation, as a `subscript` elsewhere: both are read.
    let Some(generic) = annotation.named_child(0) else {
        return Vec::new();
    };
    let (head, metadata): (Option<Node<'_>>, Vec<Node<'_>>) = match generic.kind() {
        "generic_type" => {
            let head = generic.named_child(0);
            let params = generic
                .named_child(1)
                .filter(|p| p.kind() == "type_parameter");
            let mut cursor = generic.walk();
            let items = params.map_or_else(Vec::new, |p| {
                p.named_children(&mut cursor)
                    .filter_map(|t| t.named_child(0))
                    .skip(1)
                    .collect()
            });
            (head, items)
        }
        "subscript" => {
            let mut cursor = generic.walk();
            let items = generic
                .children_by_field_name("subscript", &mut cursor)
                .skip(1)
                .collect();
            (generic.child_by_field_name("value"), items)
        }
        _ => return Vec::new(),
    };
    if !matches!(
        head.map(|h| syntax::text(h, source)),
        Some("A" | "Annotated")
    ) {
        return Vec::new();
    }
    let default_name = format!("--{}", syntax::text(name, source).replace('_', "-"));
    for m in metadata {
        let m = unparenthesized(m);
        if matches!(m.kind(), "string" | "concatenated_string") {
            return vec![default_name];
        }
        if let Some(flags) = arg_call_flags(m, source, &default_name) {
            return flags;
        }
    }
    Vec::new()
}

/// `Arg(help=..., cli_name="--x", aliases=["--y"], no_cli=True)` → its flags (with
/// `action=argparse.BooleanOptionalAction`, argparse adds `--no-x` for each); None when `node` is
/// not an `Arg(...)` call.
fn arg_call_flags(node: Node<'_>, source: &str, default_name: &str) -> Option<Vec<String>> {
    if node.kind() != "call"
        || node
            .child_by_field_name("function")
            .map(|f| syntax::text(f, source))
            != Some("Arg")
    {
        return None;
    }
    let args = node.child_by_field_name("arguments")?;
    let mut name = default_name.to_string();
    let mut aliases = Vec::new();
    let mut negatable = false;
    let mut cursor = args.walk();
    for kw in args
        .named_children(&mut cursor)
        .filter(|k| k.kind() == "keyword_argument")
    {
        let key = kw
            .child_by_field_name("name")
            .map(|k| syntax::text(k, source));
        let Some(value) = kw.child_by_field_name("value") else {
            continue;
        };
        match key {
            Some("no_cli") if syntax::text(value, source) == "True" => return Some(Vec::new()),
            Some("cli_name") if value.kind() == "string" => {
                name = syntax::unquote(syntax::text(value, source));
            }
            Some("aliases") => {
                let mut c = value.walk();
                aliases.extend(
                    value
                        .named_children(&mut c)
                        .filter(|s| s.kind() == "string")
                        .map(|s| syntax::unquote(syntax::text(s, source))),
                );
            }
            Some("action") => {
                negatable = syntax::text(value, source).ends_with("BooleanOptionalAction");
            }
            _ => {}
        }
    }
    let names: Vec<String> = std::iter::once(name).chain(aliases).collect();
    let negations: Vec<String> = names
        .iter()
        .filter(|_| negatable)
        .filter_map(|n| n.strip_prefix("--").map(|b| format!("--no-{b}")))
        .collect();
    Some(names.into_iter().chain(negations).collect())
}

/// `("a" "b")` → `"a" "b"`.
fn unparenthesized(mut node: Node<'_>) -> Node<'_> {
    while node.kind() == "parenthesized_expression" {
        match node.named_child(0) {
            Some(inner) => node = inner,
            None => break,
        }
    }
    node
}

#[cfg(test)]
mod tests {
    use super::dataclass_flags;

    const SOURCE: &str = r#"
from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass

@dataclasses.dataclass
class ServerArgs:
    model_path: A[str, Arg(help="Path.", aliases=["--model"])]
    host: A[str, "The host of the HTTP server."] = "127.0.0.1"
    tp_size: A[int, Arg(help="TP.", aliases=["--tp", "--tensor-parallel-size"])] = 1
    disable_cuda_graph: A[bool, Arg(no_cli=True)] = False
    fp8_gemm_runner_backend: A[str, Arg(help="x", cli_name="--fp8-gemm-backend")] = "auto"
    plain: int = 3
    unannotated: A[int, SomethingElse()] = 1
    split: A[bool, ("Two " "parts.")] = False
    strict: A[bool, Arg(help="s", action=argparse.BooleanOptionalAction)] = False

    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)

@dataclasses.dataclass
class PortArgs:
    not_a_flag: A[int, "never added"] = 0
"#;

    #[test]
    fn fields_become_flags_by_sglangs_rules() {
        let mut flags = dataclass_flags(SOURCE);
        flags.sort();
        assert_eq!(
            flags,
            [
                "--fp8-gemm-backend",
                "--host",
                "--model",
                "--model-path",
                "--no-strict",
                "--split",
                "--strict",
                "--tensor-parallel-size",
                "--tp",
                "--tp-size"
            ]
        );
    }

    #[test]
    fn a_file_that_adds_no_dataclass_has_no_dataclass_flags() {
        assert!(dataclass_flags("class ServerArgs:\n    host: A[str, \"h\"] = 1\n").is_empty());
    }
}
