//! The edit operations: each finds its anchor by syntax and yields byte-range splices, so every
//! byte outside them stays as it was. An edit whose result is already present yields nothing.

use tree_sitter::Node;

use super::diff::UnifiedDiff;
use super::splice::drift;
pub use super::splice::{splice, Drift, Splice};
use super::syntax::{self, text};

/// One edit of a patch, in domain form (validated from the patch-set file).
#[derive(Debug, Clone)]
pub enum Edit {
    /// Add `key: value` to the dict literal assigned to `dict`.
    DictAddKey {
        dict: String,
        key: String,
        value: DictValue,
    },
    /// Add `or NAME` to the `or` chain (holding `after`, if given) in `function`'s return.
    OrChainAddName {
        function: String,
        name: String,
        after: Option<String>,
    },
    /// Add `name` to `from MODULE import (...)`, after `after` or at the end.
    ImportAddName {
        module: String,
        name: String,
        after: Option<String>,
    },
    /// Insert the statement `code` right after the assignment to `target`.
    InsertAfterAssignment { target: String, code: String },
    /// Replace the list given as `kwarg=[...]` to a call of `call` (inside `function`, if given).
    ReplaceCallKwargList {
        function: Option<String>,
        call: String,
        kwarg: String,
        from: Option<String>,
        to: String,
    },
    /// A unified diff, located by its context lines.
    Diff(UnifiedDiff),
}

#[derive(Debug, Clone)]
pub enum DictValue {
    Given(String),
    CopyFrom(String),
}

impl Edit {
    /// A short description for reports: `dict-add-key TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[12]`.
    pub fn describe(&self) -> String {
        match self {
            Edit::DictAddKey { dict, key, .. } => format!("dict-add-key {dict}[{key}]"),
            Edit::OrChainAddName { function, name, .. } => {
                format!("or-chain-add-name {name} in {function}()")
            }
            Edit::ImportAddName { module, name, .. } => {
                format!("import-add-name {name} from {module}")
            }
            Edit::InsertAfterAssignment { target, .. } => {
                format!("insert-after-assignment {target}")
            }
            Edit::ReplaceCallKwargList { call, kwarg, .. } => {
                format!("replace-call-kwarg-list {call}({kwarg}=...)")
            }
            Edit::Diff(d) => format!("diff ({} hunks)", d.hunks.len()),
        }
    }
}

/// Locate `edit` in `source`: `Ok(vec![])` when its result is already present.
pub fn locate(edit: &Edit, source: &str) -> Result<Vec<Splice>, Drift> {
    if let Edit::Diff(d) = edit {
        return d.locate(source);
    }
    let tree = syntax::parse(source);
    if let Some(at) = syntax::first_error(&tree) {
        return Err(drift("the file does not parse as Python", Some(at)));
    }
    let root = tree.root_node();
    match edit {
        Edit::DictAddKey { dict, key, value } => dict_add_key(root, source, dict, key, value),
        Edit::OrChainAddName {
            function,
            name,
            after,
        } => or_chain_add_name(root, source, function, name, after.as_deref()),
        Edit::ImportAddName {
            module,
            name,
            after,
        } => import_add_name(root, source, module, name, after.as_deref()),
        Edit::InsertAfterAssignment { target, code } => {
            insert_after_assignment(root, source, target, code)
        }
        Edit::ReplaceCallKwargList {
            function,
            call,
            kwarg,
            from,
            to,
        } => replace_call_kwarg_list(
            root,
            source,
            function.as_deref(),
            call,
            kwarg,
            from.as_deref(),
            to,
        ),
        Edit::Diff(_) => unreachable!("handled above"),
    }
}

/// Exactly one candidate, or a drift naming the lines of all of them.
fn only_one<'t>(candidates: &[Node<'t>], source: &str, what: &str) -> Result<Node<'t>, Drift> {
    match candidates.len() {
        0 => Err(drift(format!("no {what} found"), None)),
        1 => Ok(candidates[0]),
        n => {
            let lines: Vec<String> = candidates
                .iter()
                .map(|c| syntax::line_of(source, c.start_byte()).to_string())
                .collect();
            Err(drift(
                format!(
                    "ambiguous anchor: {n} places match {what} (lines {})",
                    lines.join(", ")
                ),
                Some(candidates[1].start_byte()),
            ))
        }
    }
}

fn assignments_to<'t>(root: Node<'t>, source: &str, name: &str) -> Vec<Node<'t>> {
    syntax::all_of_kind(root, "assignment")
        .into_iter()
        .filter(|a| {
            a.child_by_field_name("left")
                .is_some_and(|l| text(l, source) == name)
        })
        .collect()
}

/// The assignments among `assignments` that give a value (`X = ...`, `X: T = ...`), leaving
/// out declarations (`X: T`, valid Python that assigns nothing); when there are only
/// declarations, a drift located at the first one.
fn with_values<'t>(
    assignments: Vec<Node<'t>>,
    source: &str,
    name: &str,
) -> Result<Vec<Node<'t>>, Drift> {
    let first = assignments.first().copied();
    let valued: Vec<Node<'t>> = assignments
        .into_iter()
        .filter(|a| a.child_by_field_name("right").is_some())
        .collect();
    match first {
        Some(declared) if valued.is_empty() => Err(drift(
            format!(
                "`{name}` is only declared here (`{}`), never assigned a value",
                text(declared, source)
            ),
            Some(declared.start_byte()),
        )),
        _ => Ok(valued),
    }
}

/// The value an assignment gives (its right side), or a drift located at it.
fn value_of<'t>(assignment: Node<'t>, source: &str, name: &str) -> Result<Node<'t>, Drift> {
    assignment.child_by_field_name("right").ok_or_else(|| {
        drift(
            format!(
                "`{name}` is declared without a value (`{}`)",
                text(assignment, source)
            ),
            Some(assignment.start_byte()),
        )
    })
}

/// The value of a dict entry (`key: value`), or a drift located at the entry.
fn pair_value<'t>(pair: Node<'t>, dict: &str) -> Result<Node<'t>, Drift> {
    pair.child_by_field_name("value").ok_or_else(|| {
        drift(
            format!("an entry of `{dict}` has no value"),
            Some(pair.start_byte()),
        )
    })
}

/// The next sibling token after `node` if it is a comma, then a comment on the same line.
fn after_comma_and_comment(node: Node<'_>) -> (Option<Node<'_>>, usize) {
    let mut end = node.end_byte();
    let mut comma = None;
    let mut next = node.next_sibling();
    if let Some(c) = next.filter(|n| n.kind() == ",") {
        comma = Some(c);
        end = c.end_byte();
        next = c.next_sibling();
    }
    if let Some(c) =
        next.filter(|n| n.kind() == "comment" && n.start_position().row == node.end_position().row)
    {
        end = c.end_byte();
    }
    (comma, end)
}

fn dict_add_key(
    root: Node<'_>,
    source: &str,
    dict: &str,
    key: &str,
    value: &DictValue,
) -> Result<Vec<Splice>, Drift> {
    let assignment = only_one(
        &with_values(assignments_to(root, source, dict), source, dict)?,
        source,
        &format!("assignment to `{dict}`"),
    )?;
    let right = value_of(assignment, source, dict)?;
    if right.kind() != "dictionary" {
        return Err(drift(
            format!(
                "`{dict}` is assigned a {}, not a dict literal",
                right.kind()
            ),
            Some(right.start_byte()),
        ));
    }
    let mut cursor = right.walk();
    let pairs: Vec<Node<'_>> = right
        .named_children(&mut cursor)
        .filter(|n| n.kind() == "pair")
        .collect();
    let find = |k: &str| {
        pairs.iter().copied().find(|p| {
            p.child_by_field_name("key")
                .is_some_and(|n| syntax::same_code(text(n, source), k))
        })
    };
    let value_text = match value {
        DictValue::Given(v) => v.clone(),
        DictValue::CopyFrom(from) => {
            let pair = find(from).ok_or_else(|| {
                drift(
                    format!("`{dict}` has no key {from} to copy the value from"),
                    Some(right.start_byte()),
                )
            })?;
            text(pair_value(pair, dict)?, source).to_string()
        }
    };
    if let Some(existing) = find(key) {
        let current = pair_value(existing, dict)?;
        if syntax::same_code(text(current, source), &value_text) {
            return Ok(vec![]);
        }
        return Err(drift(
            format!(
                "`{dict}` already has key {key}, with a different value: {}",
                text(current, source)
            ),
            Some(existing.start_byte()),
        ));
    }
    let entry = format!("{key}: {value_text}");
    let Some(last) = pairs.last().copied() else {
        let open = right.start_byte() + 1;
        return Ok(vec![Splice {
            range: open..open,
            text: entry,
        }]);
    };
    let (comma, end) = after_comma_and_comment(last);
    if last.start_position().row == right.start_position().row {
        return Ok(vec![match comma {
            Some(c) => Splice {
                range: c.end_byte()..c.end_byte(),
                text: format!(" {entry},"),
            },
            None => Splice {
                range: last.end_byte()..last.end_byte(),
                text: format!(", {entry}"),
            },
        }]);
    }
    let indent = syntax::indent_at(source, last.start_byte());
    let mut splices = vec![Splice {
        range: end..end,
        text: format!("\n{indent}{entry},"),
    }];
    if comma.is_none() {
        splices.push(Splice {
            range: last.end_byte()..last.end_byte(),
            text: ",".into(),
        });
    }
    Ok(splices)
}

fn or_operands<'t>(node: Node<'t>, source: &str, out: &mut Vec<Node<'t>>) {
    let is_or = |n: Node<'_>| {
        n.kind() == "boolean_operator"
            && n.child_by_field_name("operator")
                .is_some_and(|o| text(o, source) == "or")
    };
    if is_or(node) {
        for field in ["left", "right"] {
            if let Some(child) = node.child_by_field_name(field) {
                or_operands(child, source, out);
            }
        }
    } else {
        out.push(node);
    }
}

fn or_chain_add_name(
    root: Node<'_>,
    source: &str,
    function: &str,
    name: &str,
    after: Option<&str>,
) -> Result<Vec<Splice>, Drift> {
    let functions: Vec<Node<'_>> = syntax::all_of_kind(root, "function_definition")
        .into_iter()
        .filter(|f| {
            f.child_by_field_name("name")
                .is_some_and(|n| text(n, source) == function)
        })
        .collect();
    let function_node = only_one(&functions, source, &format!("function `{function}`"))?;
    let is_or = |n: &Node<'_>| {
        n.kind() == "boolean_operator"
            && n.child_by_field_name("operator")
                .is_some_and(|o| text(o, source) == "or")
    };
    let mut chains = Vec::new();
    for ret in syntax::all_of_kind(function_node, "return_statement") {
        if syntax::nested_scope_between(ret, function_node) {
            continue;
        }
        for node in syntax::preorder(ret) {
            if is_or(&node) && !node.parent().is_some_and(|p| is_or(&p)) {
                let mut operands = Vec::new();
                or_operands(node, source, &mut operands);
                let names: Vec<&str> = operands.iter().map(|o| text(*o, source)).collect();
                if after.is_none_or(|a| names.contains(&a)) {
                    chains.push((node, names.contains(&name)));
                }
            }
        }
    }
    if chains.iter().any(|(_, has)| *has) {
        return Ok(vec![]);
    }
    let what = match after {
        Some(a) => format!("`or` chain holding `{a}` in the return of `{function}`"),
        None => format!("`or` chain in the return of `{function}`"),
    };
    let chain = only_one(
        &chains.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        source,
        &what,
    )
    .map_err(|d| Drift {
        at: d.at.or(Some(function_node.start_byte())),
        ..d
    })?;
    Ok(vec![Splice {
        range: chain.end_byte()..chain.end_byte(),
        text: format!(" or {name}"),
    }])
}

/// The names a `from X import ...` statement binds, with their nodes.
fn imported_names<'t>(stmt: Node<'t>, source: &str) -> Vec<(Node<'t>, String)> {
    let mut cursor = stmt.walk();
    stmt.children_by_field_name("name", &mut cursor)
        .map(|n| {
            let bound = match n.kind() {
                "aliased_import" => n.child_by_field_name("name").unwrap_or(n),
                _ => n,
            };
            (n, text(bound, source).to_string())
        })
        .collect()
}

fn import_add_name<'t>(
    root: Node<'t>,
    source: &str,
    module: &str,
    name: &str,
    after: Option<&str>,
) -> Result<Vec<Splice>, Drift> {
    let imports: Vec<Node<'t>> = syntax::all_of_kind(root, "import_from_statement")
        .into_iter()
        .filter(|i| {
            i.child_by_field_name("module_name")
                .is_some_and(|m| text(m, source) == module)
        })
        .collect();
    let imported = |stmt: Node<'t>| imported_names(stmt, source);
    if imports
        .iter()
        .any(|i| imported(*i).iter().any(|(_, n)| n == name))
    {
        return Ok(vec![]);
    }
    let stmt = only_one(&imports, source, &format!("`from {module} import ...`"))?;
    let names = imported(stmt);
    let anchor = match after {
        Some(a) => names
            .iter()
            .find(|(_, n)| n == a)
            .map(|(node, _)| *node)
            .ok_or_else(|| {
                drift(
                    format!("`from {module} import ...` does not import `{a}`"),
                    Some(stmt.start_byte()),
                )
            })?,
        None => names
            .last()
            .map(|(node, _)| *node)
            .ok_or_else(|| drift("the import lists no names", Some(stmt.start_byte())))?,
    };
    let first_on_line = source[..anchor.start_byte()]
        .rsplit('\n')
        .next()
        .is_some_and(|l| l.trim().is_empty());
    let (comma, _) = after_comma_and_comment(anchor);
    if first_on_line && anchor.start_position().row > stmt.start_position().row {
        let indent = syntax::indent_at(source, anchor.start_byte());
        return Ok(vec![match comma {
            Some(c) => Splice {
                range: c.end_byte()..c.end_byte(),
                text: format!("\n{indent}{name},"),
            },
            None => Splice {
                range: anchor.end_byte()..anchor.end_byte(),
                text: format!(",\n{indent}{name}"),
            },
        }]);
    }
    Ok(vec![Splice {
        range: anchor.end_byte()..anchor.end_byte(),
        text: format!(", {name}"),
    }])
}

fn insert_after_assignment(
    root: Node<'_>,
    source: &str,
    target: &str,
    code: &str,
) -> Result<Vec<Splice>, Drift> {
    let statements: Vec<Node<'_>> =
        with_values(assignments_to(root, source, target), source, target)?
            .into_iter()
            .filter_map(|a| a.parent().filter(|p| p.kind() == "expression_statement"))
            .collect();
    let statement = only_one(&statements, source, &format!("assignment to `{target}`"))?;
    let block = statement.parent().ok_or_else(|| {
        drift(
            format!("the assignment to `{target}` sits in no block"),
            Some(statement.start_byte()),
        )
    })?;
    let mut cursor = block.walk();
    if block
        .named_children(&mut cursor)
        .any(|s| syntax::same_code(text(s, source), code))
    {
        return Ok(vec![]);
    }
    let indent = syntax::indent_at(source, statement.start_byte());
    let body = code
        .trim_end()
        .lines()
        .collect::<Vec<_>>()
        .join(&format!("\n{indent}"));
    let at = syntax::line_end(source, statement.end_byte());
    Ok(vec![Splice {
        range: at..at,
        text: format!("\n{indent}{body}"),
    }])
}

fn replace_call_kwarg_list(
    root: Node<'_>,
    source: &str,
    function: Option<&str>,
    call: &str,
    kwarg: &str,
    from: Option<&str>,
    to: &str,
) -> Result<Vec<Splice>, Drift> {
    let suffix = format!(".{call}");
    let mut values = Vec::new();
    for c in syntax::all_of_kind(root, "call") {
        let callee = c
            .child_by_field_name("function")
            .map(|f| text(f, source))
            .unwrap_or_default();
        if callee != call && !callee.ends_with(&suffix) {
            continue;
        }
        if function.is_some_and(|f| !syntax::enclosing_scopes(c, source).iter().any(|s| s == f)) {
            continue;
        }
        let Some(args) = c.child_by_field_name("arguments") else {
            continue;
        };
        let mut cursor = args.walk();
        for kw in args
            .named_children(&mut cursor)
            .filter(|n| n.kind() == "keyword_argument")
        {
            if kw
                .child_by_field_name("name")
                .is_some_and(|n| text(n, source) == kwarg)
            {
                values.extend(kw.child_by_field_name("value"));
            }
        }
    }
    let scope = function
        .map(|f| format!(" inside `{f}`"))
        .unwrap_or_default();
    let value = only_one(
        &values,
        source,
        &format!("call of `{call}({kwarg}=...)`{scope}"),
    )?;
    let current = text(value, source);
    if syntax::same_code(current, to) {
        return Ok(vec![]);
    }
    if value.kind() != "list" {
        return Err(drift(
            format!("`{kwarg}=` is given {current}, not a list literal"),
            Some(value.start_byte()),
        ));
    }
    if let Some(expected) = from.filter(|f| !syntax::same_code(current, f)) {
        return Err(drift(
            format!("`{kwarg}=` is {current}, expected {expected}"),
            Some(value.start_byte()),
        ));
    }
    Ok(vec![Splice {
        range: value.byte_range(),
        text: to.to_string(),
    }])
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
