//! Unit tests of each edit operation on small Python sources: the edit, idempotence, and the
//! missing and ambiguous anchors.

use super::*;

/// Locate and apply; then locating again must find the result present.
fn apply(edit: &Edit, source: &str) -> String {
    let splices = locate(edit, source).unwrap_or_else(|d| panic!("{d:?}"));
    assert!(!splices.is_empty(), "expected a change");
    let patched = splice(source, &splices);
    assert_eq!(
        syntax::first_error(&syntax::parse(&patched)),
        None,
        "result parses:\n{patched}"
    );
    assert_eq!(
        locate(edit, &patched),
        Ok(vec![]),
        "applying twice changes nothing"
    );
    patched
}

fn add_key(dict: &str, key: &str, value: DictValue) -> Edit {
    Edit::DictAddKey {
        dict: dict.into(),
        key: key.into(),
        value,
    }
}

#[test]
fn dict_add_key_copies_a_multiline_value() {
    let src = "MiB = 1024\n\nSIZES = {\n    9: {\n        2: 64 * MiB,  # 64 MB\n    },\n    10: {\n        2: 32 * MiB,\n    },\n}\nafter = 1\n";
    let out = apply(
        &add_key("SIZES", "12", DictValue::CopyFrom("10".into())),
        src,
    );
    assert_eq!(
        out,
        "MiB = 1024\n\nSIZES = {\n    9: {\n        2: 64 * MiB,  # 64 MB\n    },\n    10: {\n        2: 32 * MiB,\n    },\n    12: {\n        2: 32 * MiB,\n    },\n}\nafter = 1\n"
    );
}

#[test]
fn dict_add_key_in_a_class_and_without_trailing_comma() {
    let src = "class C:\n    _M = {\n        9: [4, 6, 8],\n        10: [6, 8]  # last\n    }\n";
    let out = apply(&add_key("_M", "12", DictValue::Given("[]".into())), src);
    assert_eq!(out, "class C:\n    _M = {\n        9: [4, 6, 8],\n        10: [6, 8],  # last\n        12: [],\n    }\n");
}

#[test]
fn dict_add_key_on_one_line_and_empty() {
    assert_eq!(
        apply(
            &add_key("D", "3", DictValue::Given("'c'".into())),
            "D = {1: 'a', 2: 'b'}\n"
        ),
        "D = {1: 'a', 2: 'b', 3: 'c'}\n"
    );
    assert_eq!(
        apply(
            &add_key("D", "3", DictValue::Given("'c'".into())),
            "D = {1: 'a',}\n"
        ),
        "D = {1: 'a', 3: 'c',}\n"
    );
    assert_eq!(
        apply(
            &add_key("D", "3", DictValue::Given("'c'".into())),
            "D = {}\n"
        ),
        "D = {3: 'c'}\n"
    );
}

#[test]
fn dict_add_key_drifts() {
    let missing = locate(
        &add_key("NOPE", "1", DictValue::Given("2".into())),
        "D = {1: 2}\n",
    )
    .unwrap_err();
    assert_eq!(missing.message, "no assignment to `NOPE` found");
    let twice = "D = {1: 2}\nif x:\n    D = {1: 3}\n";
    let ambiguous = locate(&add_key("D", "5", DictValue::Given("2".into())), twice).unwrap_err();
    assert_eq!(
        ambiguous.message,
        "ambiguous anchor: 2 places match assignment to `D` (lines 1, 3)"
    );
    assert_eq!(ambiguous.at, Some(twice.find("D = {1: 3}").unwrap()));
    let conflict = locate(
        &add_key("D", "1", DictValue::Given("7".into())),
        "D = {1: 2}\n",
    )
    .unwrap_err();
    assert_eq!(
        conflict.message,
        "`D` already has key 1, with a different value: 2"
    );
    let no_source = locate(
        &add_key("D", "3", DictValue::CopyFrom("9".into())),
        "D = {1: 2}\n",
    )
    .unwrap_err();
    assert_eq!(no_source.message, "`D` has no key 9 to copy the value from");
    let not_dict = locate(
        &add_key("D", "3", DictValue::Given("1".into())),
        "D = [1]\n",
    )
    .unwrap_err();
    assert_eq!(
        not_dict.message,
        "`D` is assigned a list, not a dict literal"
    );
    let broken = locate(
        &add_key("D", "3", DictValue::Given("1".into())),
        "D = {1: \n",
    )
    .unwrap_err();
    assert_eq!(broken.message, "the file does not parse as Python");
}

fn or_chain(after: Option<&str>) -> Edit {
    Edit::OrChainAddName {
        function: "gate".into(),
        name: "_c".into(),
        after: after.map(Into::into),
    }
}

#[test]
fn or_chain_add_name_inside_and() {
    let src = "def gate(n):\n    return (\n        (_a or _b)\n        and n > 0\n    )\n";
    let out = apply(&or_chain(Some("_b")), src);
    assert_eq!(
        out,
        "def gate(n):\n    return (\n        (_a or _b or _c)\n        and n > 0\n    )\n"
    );
}

#[test]
fn or_chain_add_name_drifts() {
    let src = "def gate(n):\n    return (_a or _b) and (_x or _y)\n";
    let ambiguous = locate(&or_chain(None), src).unwrap_err();
    assert_eq!(
        ambiguous.message,
        "ambiguous anchor: 2 places match `or` chain in the return of `gate` (lines 2, 2)"
    );
    assert_eq!(
        apply(&or_chain(Some("_y")), src),
        "def gate(n):\n    return (_a or _b) and (_x or _y or _c)\n"
    );
    let missing = locate(&or_chain(Some("_z")), src).unwrap_err();
    assert_eq!(
        missing.message,
        "no `or` chain holding `_z` in the return of `gate` found"
    );
    let no_function = locate(&or_chain(None), "def other():\n    return a or b\n").unwrap_err();
    assert_eq!(no_function.message, "no function `gate` found");
    let nested = "def gate():\n    def inner():\n        return a or b\n    return inner\n";
    assert_eq!(
        locate(&or_chain(None), nested).unwrap_err().message,
        "no `or` chain in the return of `gate` found"
    );
}

fn import(after: Option<&str>) -> Edit {
    Edit::ImportAddName {
        module: "pkg.utils".into(),
        name: "is_c".into(),
        after: after.map(Into::into),
    }
}

#[test]
fn import_add_name_multiline_after_anchor() {
    let src = "from pkg.utils import (\n    is_a,\n    is_b,\n    is_d,\n)\n";
    assert_eq!(
        apply(&import(Some("is_b")), src),
        "from pkg.utils import (\n    is_a,\n    is_b,\n    is_c,\n    is_d,\n)\n"
    );
    let no_trailing = "from pkg.utils import (\n    is_a,\n    is_b\n)\n";
    assert_eq!(
        apply(&import(None), no_trailing),
        "from pkg.utils import (\n    is_a,\n    is_b,\n    is_c\n)\n"
    );
}

#[test]
fn import_add_name_single_line_and_drifts() {
    assert_eq!(
        apply(&import(None), "from pkg.utils import is_a, is_b\n"),
        "from pkg.utils import is_a, is_b, is_c\n"
    );
    assert_eq!(
        locate(&import(None), "from pkg.utils import is_c as c\n"),
        Ok(vec![])
    );
    let missing = locate(&import(None), "from pkg.other import x\n").unwrap_err();
    assert_eq!(missing.message, "no `from pkg.utils import ...` found");
    let twice = locate(
        &import(None),
        "from pkg.utils import a\nfrom pkg.utils import b\n",
    )
    .unwrap_err();
    assert_eq!(
        twice.message,
        "ambiguous anchor: 2 places match `from pkg.utils import ...` (lines 1, 2)"
    );
    let no_anchor = locate(&import(Some("is_z")), "from pkg.utils import a\n").unwrap_err();
    assert_eq!(
        no_anchor.message,
        "`from pkg.utils import ...` does not import `is_z`"
    );
}

#[test]
fn insert_after_assignment_keeps_indent_and_is_idempotent() {
    let edit = Edit::InsertAfterAssignment {
        target: "_b".into(),
        code: "_c = _x and is_c()".into(),
    };
    let src = "_a = 1\n_b = _x and is_b()  # b\n_d = 4\n";
    assert_eq!(
        apply(&edit, src),
        "_a = 1\n_b = _x and is_b()  # b\n_c = _x and is_c()\n_d = 4\n"
    );
    let in_block = "if x:\n    _b = 2\n";
    assert_eq!(
        apply(&edit, in_block),
        "if x:\n    _b = 2\n    _c = _x and is_c()\n"
    );
    let missing = locate(&edit, "_a = 1\n").unwrap_err();
    assert_eq!(missing.message, "no assignment to `_b` found");
}

fn kwarg(from: Option<&str>) -> Edit {
    Edit::ReplaceCallKwargList {
        function: Some("gen".into()),
        call: "get_flags".into(),
        kwarg: "majors".into(),
        from: from.map(Into::into),
        to: "[9, 10, 12]".into(),
    }
}

#[test]
fn replace_call_kwarg_list_inside_function() {
    let src = "def other():\n    ctx.get_flags(majors=[8])\n\ndef gen():\n    f = ctx.get_flags(\n        majors=[9, 10]\n    )\n";
    let out = apply(&kwarg(Some("[9,10]")), src);
    assert_eq!(out, "def other():\n    ctx.get_flags(majors=[8])\n\ndef gen():\n    f = ctx.get_flags(\n        majors=[9, 10, 12]\n    )\n");
}

#[test]
fn replace_call_kwarg_list_drifts() {
    let unexpected = locate(
        &kwarg(Some("[9, 10]")),
        "def gen():\n    get_flags(majors=[9, 11])\n",
    )
    .unwrap_err();
    assert_eq!(unexpected.message, "`majors=` is [9, 11], expected [9, 10]");
    let twice = "def gen():\n    get_flags(majors=[9])\n    get_flags(majors=[10])\n";
    assert_eq!(
        locate(&kwarg(None), twice).unwrap_err().message,
        "ambiguous anchor: 2 places match call of `get_flags(majors=...)` inside `gen` (lines 2, 3)"
    );
    let not_list = locate(&kwarg(None), "def gen():\n    get_flags(majors=MAJORS)\n").unwrap_err();
    assert_eq!(
        not_list.message,
        "`majors=` is given MAJORS, not a list literal"
    );
    let outside = locate(&kwarg(None), "get_flags(majors=[9])\n").unwrap_err();
    assert_eq!(
        outside.message,
        "no call of `get_flags(majors=...)` inside `gen` found"
    );
}

#[test]
fn splices_leave_other_bytes_alone() {
    let src = "x = {1: 2}\r\n# trailing \u{00e9}\r\n";
    let out = apply(&add_key("x", "3", DictValue::Given("4".into())), src);
    assert_eq!(out, "x = {1: 2, 3: 4}\r\n# trailing \u{00e9}\r\n");
}

#[test]
fn an_annotation_only_declaration_is_drift_located_at_it_never_a_panic() {
    // `X: dict` is valid Python that assigns nothing (an upstream release may declare the
    // table and fill it elsewhere): a located drift, for either edit that anchors on it.
    let declared = "import os\nTORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES: dict\n";
    let add = add_key(
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",
        "12",
        DictValue::Given("{2: 1}".into()),
    );
    let drift = locate(&add, declared).unwrap_err();
    assert_eq!(
        drift.message,
        "`TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES` is only declared here \
         (`TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES: dict`), never assigned a value"
    );
    assert_eq!(drift.at, declared.find("TORCH_SYMM"));
    let insert = Edit::InsertAfterAssignment {
        target: "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES".into(),
        code: "_x = 1".into(),
    };
    assert_eq!(
        locate(&insert, declared).unwrap_err().at,
        declared.find("TORCH_SYMM")
    );
    // A declaration beside the annotated assignment that gives the value: the value is the
    // anchor, not an ambiguity.
    let both = "D: dict\nD: dict = {1: 2}\n";
    assert_eq!(
        apply(&add_key("D", "3", DictValue::Given("4".into())), both),
        "D: dict\nD: dict = {1: 2, 3: 4}\n"
    );
}
