//! SGLang / FlashInfer capability gates, read from the installed source files (never imported):
//! the torch symmetric-memory tables (S1, S2), the all-reduce fusion gate (S3) and FlashInfer's
//! `trtllm_comm` JIT gate. Read with the tree-sitter Python grammar `src/patch/` edits with, so
//! comments, strings and layout never fool a check.

use std::path::{Path, PathBuf};

use serde::Serialize;
use tree_sitter::Node;

use super::{Check, CheckDef, DoctorFacts};
use crate::patch::syntax;

const PATCHSET: &str = "sglang-0.5.9-sm120";
/// The FlashInfer set the fusion patch (S3, experimental) needs first (its S3b).
const FLASHINFER_PATCHSET: &str = "flashinfer-0.6.3-sm120";
/// The one SGLang version kiln's patch set fits (its anchors are that version's source).
const PATCHED_SGLANG: &str = "0.5.9";
const SIZES: &str = "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES";
const MULTIMEM: &str = "_WORLD_SIZES_MULTIMEM";
const SYMM_FLAG: &str = "--enable-torch-symm-mem";
const FUSION_FLAG: &str = "--enable-flashinfer-allreduce-fusion";

/// How a capability table is looked up: `TABLE[cc]` raises KeyError, `TABLE.get(cc)` does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Lookup {
    Index,
    Get,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CapTable {
    pub file: PathBuf,
    pub keys: Vec<u32>,
    pub lookup: Lookup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GateKind {
    /// Returns False without a log line (0.5.9 `apply_flashinfer_allreduce_fusion`).
    Silent,
    /// Raises ValueError when the fusion is requested (0.5.23 `_resolve_backend`).
    Raises,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Gate {
    pub file: PathBuf,
    pub majors: Vec<u32>,
    pub kind: GateKind,
}

/// What the installed sources say (None: file or construct not found).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct StackSources {
    pub sglang_dir: Option<PathBuf>,
    pub symm_sizes: Option<CapTable>,
    pub symm_multimem: Option<CapTable>,
    pub fusion_gate: Option<Gate>,
    pub flashinfer_dir: Option<PathBuf>,
    pub flashinfer_comm_majors: Option<Vec<u32>>,
}

pub(crate) fn read_sources(site: &Path) -> StackSources {
    let mut s = StackSources::default();
    let sg = site.join("sglang");
    if sg.join("srt").is_dir() {
        let comm = sg.join("srt/distributed/device_communicators");
        let symm_py =
            crate::bounded::read_state(&comm.join("torch_symm_mem.py"), crate::bounded::SOURCE_CAP)
                .unwrap_or_default();
        let utils = comm.join("all_reduce_utils.py");
        s.symm_sizes = crate::bounded::read_state(&utils, crate::bounded::SOURCE_CAP)
            .ok()
            .and_then(|text| {
                Some(CapTable {
                    file: utils.clone(),
                    keys: dict_keys(&text, SIZES)?,
                    lookup: lookup(&symm_py, SIZES),
                })
            });
        s.symm_multimem = dict_keys(&symm_py, MULTIMEM).map(|keys| CapTable {
            file: comm.join("torch_symm_mem.py"),
            keys,
            lookup: lookup(&symm_py, MULTIMEM),
        });
        s.fusion_gate = fusion_gate(&sg);
        s.sglang_dir = Some(sg);
    }
    let fi = site.join("flashinfer");
    if fi.is_dir() {
        s.flashinfer_comm_majors =
            crate::bounded::read_state(&fi.join("jit/comm.py"), crate::bounded::SOURCE_CAP)
                .ok()
                .and_then(|t| majors_in(&t, "gen_trtllm_comm_module"));
        s.flashinfer_dir = Some(fi);
    }
    s
}

/// The first function named `name` in `root`.
fn function<'t>(root: Node<'t>, source: &str, name: &str) -> Option<Node<'t>> {
    syntax::all_of_kind(root, "function_definition")
        .into_iter()
        .find(|f| {
            f.child_by_field_name("name")
                .is_some_and(|n| syntax::text(n, source) == name)
        })
}

/// Integer keys of the top level of the dict literal assigned to `name` (`NAME = {...}` or
/// `NAME: dict[...] = {...}`).
pub(crate) fn dict_keys(text: &str, name: &str) -> Option<Vec<u32>> {
    let tree = syntax::parse(text);
    let dict = syntax::all_of_kind(tree.root_node(), "assignment")
        .into_iter()
        .filter(|a| {
            a.child_by_field_name("left")
                .is_some_and(|l| syntax::text(l, text) == name)
        })
        .find_map(|a| a.child_by_field_name("right"))
        .filter(|r| r.kind() == "dictionary")?;
    let mut cursor = dict.walk();
    let keys = dict
        .named_children(&mut cursor)
        .filter(|n| n.kind() == "pair")
        .filter_map(|p| p.child_by_field_name("key"))
        .filter(|k| k.kind() == "integer")
        .filter_map(|k| syntax::text(k, text).parse().ok())
        .collect();
    Some(keys)
}

/// Whether `node` is the table `name`: `name` itself or an attribute `x.name` (`self.name`).
fn is_table(node: Node<'_>, code: &str, name: &str) -> bool {
    match node.kind() {
        "identifier" => syntax::text(node, code) == name,
        "attribute" => node
            .child_by_field_name("attribute")
            .is_some_and(|a| syntax::text(a, code) == name),
        _ => false,
    }
}

/// How `code` looks the table `name` up: `name[self.device_capability]` or `name.get(...)`.
fn lookup(code: &str, name: &str) -> Lookup {
    let tree = syntax::parse(code);
    let root = tree.root_node();
    let indexed = syntax::all_of_kind(root, "subscript").into_iter().any(|s| {
        s.child_by_field_name("value")
            .is_some_and(|v| is_table(v, code, name))
            && s.child_by_field_name("subscript")
                .is_some_and(|i| syntax::same_code(syntax::text(i, code), "self.device_capability"))
    });
    if indexed {
        return Lookup::Index;
    }
    let got = syntax::all_of_kind(root, "call").into_iter().any(|c| {
        c.child_by_field_name("function")
            .filter(|f| f.kind() == "attribute")
            .is_some_and(|f| {
                f.child_by_field_name("attribute")
                    .is_some_and(|a| syntax::text(a, code) == "get")
                    && f.child_by_field_name("object")
                        .is_some_and(|o| is_table(o, code, name))
            })
    });
    if got {
        Lookup::Get
    } else {
        Lookup::Unknown
    }
}

fn fusion_gate(sg: &Path) -> Option<Gate> {
    let file = sg.join("srt/layers/communicator.py");
    if let Ok(text) = crate::bounded::read_state(&file, crate::bounded::SOURCE_CAP) {
        let tree = syntax::parse(&text);
        if let Some(f) = function(tree.root_node(), &text, "apply_flashinfer_allreduce_fusion") {
            return Some(Gate {
                majors: gate_majors(f, &text),
                file,
                kind: GateKind::Silent,
            });
        }
    }
    let file = sg.join("srt/layers/flashinfer_comm_fusion.py");
    let text = crate::bounded::read_state(&file, crate::bounded::SOURCE_CAP).ok()?;
    let tree = syntax::parse(&text);
    let raises = syntax::all_of_kind(tree.root_node(), "string")
        .into_iter()
        .any(|s| syntax::text(s, &text).contains("allreduce fusion requires SM90 or SM10X"));
    raises.then_some(Gate {
        file,
        majors: vec![9, 10],
        kind: GateKind::Raises,
    })
}

/// Majors named by `_is_smNN_supported` / `_is_blackwell` guards in a function.
fn gate_majors(function: Node<'_>, source: &str) -> Vec<u32> {
    let mut majors = Vec::new();
    for id in syntax::all_of_kind(function, "identifier") {
        let name = syntax::text(id, source);
        if name == "_is_blackwell" {
            majors.extend([10, 11, 12]);
        }
        let sm = name
            .strip_prefix("_is_sm")
            .and_then(|r| r.strip_suffix("_supported"))
            .and_then(|d| d.parse::<u32>().ok());
        majors.extend(sm.map(|n| n / 10));
    }
    majors.sort_unstable();
    majors.dedup();
    majors
}

/// The numbers of the first `supported_major_versions=[...]` argument inside function `name`.
pub(crate) fn majors_in(text: &str, name: &str) -> Option<Vec<u32>> {
    let tree = syntax::parse(text);
    let f = function(tree.root_node(), text, name)?;
    let list = syntax::all_of_kind(f, "keyword_argument")
        .into_iter()
        .filter(|k| {
            k.child_by_field_name("name")
                .is_some_and(|n| syntax::text(n, text) == "supported_major_versions")
        })
        .find_map(|k| k.child_by_field_name("value"))
        .filter(|v| v.kind() == "list")?;
    let mut cursor = list.walk();
    let majors = list
        .named_children(&mut cursor)
        .filter_map(|n| syntax::text(n, text).parse().ok())
        .collect();
    Some(majors)
}

pub(crate) fn definitions() -> Vec<CheckDef> {
    vec![
        CheckDef { id: "sglang.symm-mem-table", about: "SGLang's torch symmetric-memory size table covers this GPU (else KeyError at startup)", run: symm_mem_table },
        CheckDef { id: "sglang.symm-mem-multimem", about: "SGLang's multimem world-size table covers this GPU (else KeyError at the first all-reduce)", run: symm_mem_multimem },
        CheckDef { id: "sglang.allreduce-fusion-gate", about: "SGLang's FlashInfer all-reduce fusion gate admits this GPU (else the flag silently does nothing)", run: fusion_gate_check },
        CheckDef { id: "flashinfer.comm-jit-gate", about: "FlashInfer's trtllm_comm JIT module builds for this GPU (else crash at CUDA graph capture)", run: flashinfer_comm_gate },
    ]
}

fn keys(keys: &[u32]) -> String {
    keys.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fix for a closed gate: kiln's patch set where the installed SGLang is the version it
/// fits, else `instead` (patching another version would refuse its anchors or, worse, miss).
/// Which of kiln's patch sets a fix applies: the symmetric-memory fixes (S1, S2) alone, or the
/// fusion gate's (S3), which needs FlashInfer's set first.
#[derive(Clone, Copy)]
enum Patches {
    SymmMem,
    Fusion,
}

/// The command lines that apply `patches` to the environment the doctor judged (its
/// site-packages, else its interpreter; `PYTHON` where it knows neither).
fn apply(f: &DoctorFacts, patches: Patches) -> String {
    let target = match (&f.site_packages, f.python().map(|p| p.executable.as_str())) {
        (Some(site), _) => format!(
            "--site-packages {}",
            crate::shell::quote(&site.display().to_string())
        ),
        (None, Some(python)) => format!("--python {}", crate::shell::quote(python)),
        (None, None) => "--python PYTHON".to_string(),
    };
    match patches {
        Patches::SymmMem => format!("kiln patch apply {PATCHSET} {target} --skip-experimental"),
        Patches::Fusion => format!(
            "kiln patch apply {FLASHINFER_PATCHSET} {target} && kiln patch apply {PATCHSET} {target}"
        ),
    }
}

fn patch_or(f: &DoctorFacts, patches: Patches, note: &str, instead: &str) -> String {
    match f.packages.get("sglang").map(String::as_str) {
        Some(PATCHED_SGLANG) | None => format!("{}   ({note})", apply(f, patches)),
        Some(v) => format!(
            "{instead}   (kiln's patch set sglang-0.5.9-sm120 fits SGLang {PATCHED_SGLANG} only; this is {v})"
        ),
    }
}

fn version(f: &DoctorFacts, package: &str) -> String {
    f.packages
        .get(package)
        .map_or_else(|| package.to_string(), |v| format!("{package} {v}"))
}

/// Shared preconditions: SGLang sources and a target capability.
fn sglang_target(f: &DoctorFacts, id: &'static str) -> Result<u32, Check> {
    if f.sources.sglang_dir.is_none() {
        let where_ = f
            .site_packages
            .as_ref()
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default();
        return Err(Check::skip(id, format!("sglang is not installed{where_}")));
    }
    match f.target_cc() {
        Some((major, _)) => Ok(major),
        None => Err(Check::skip(
            id,
            "no GPU found to check against (pin one with KILN_FACT_GPU_CC=12.0)",
        )),
    }
}

fn symm_mem_table(f: &DoctorFacts) -> Check {
    let id = "sglang.symm-mem-table";
    let major = match sglang_target(f, id) {
        Ok(m) => m,
        Err(c) => return c,
    };
    let Some(t) = &f.sources.symm_sizes else {
        return Check::skip(id, format!("{SIZES} not found in {}", version(f, "sglang")));
    };
    let evidence = format!(
        "{}: {SIZES} keys {{{}}}, looked up with {:?}",
        t.file.display(),
        keys(&t.keys),
        t.lookup
    );
    let requested = f.server_flags.is_empty() || f.flag_requested(SYMM_FLAG);
    if major < 9 || t.keys.contains(&major) {
        return Check::pass(
            id,
            format!(
                "{} has torch symm-mem sizes for cc {major}",
                version(f, "sglang")
            ),
        )
        .evidence(evidence);
    }
    match (t.lookup, requested) {
        (Lookup::Index, true) => Check::fail(
            id,
            format!(
                "{}: {SYMM_FLAG} will crash at startup with `KeyError: {major}` ({SIZES} has only {})",
                version(f, "sglang"),
                keys(&t.keys)
            ),
        )
        .fix(patch_or(f, Patches::SymmMem, &format!("or drop {SYMM_FLAG}"), &format!("drop {SYMM_FLAG}"))),
        (Lookup::Index, false) => Check::pass(
            id,
            format!("{SYMM_FLAG} would crash with `KeyError: {major}`, but no profile passes it"),
        ),
        (_, true) => Check::warn(
            id,
            format!("SGLang's symm-mem communicator disables itself on cc {major} (\"Device capability {major} not supported\"): {SYMM_FLAG} has no effect"),
        )
        .fix(format!("drop {SYMM_FLAG}")),
        (_, false) => Check::pass(id, format!("symm-mem communicator disables itself on cc {major}; no profile asks for it")),
    }
    .evidence(evidence)
}

/// Whether NVLink multicast can exist here (the only way SGLang 0.5.9's communicator turns on).
/// The deep probe cannot tell: it always runs with multicast disabled.
fn multicast_possible(f: &DoctorFacts) -> bool {
    !f.env_is("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        && f.topology.as_ref().is_some_and(|t| !t.pcie_only())
}

fn symm_mem_multimem(f: &DoctorFacts) -> Check {
    let id = "sglang.symm-mem-multimem";
    let major = match sglang_target(f, id) {
        Ok(m) => m,
        Err(c) => return c,
    };
    let Some(t) = &f.sources.symm_multimem else {
        return Check::skip(
            id,
            format!("{MULTIMEM} not found in {}", version(f, "sglang")),
        );
    };
    let evidence = format!(
        "{}: {MULTIMEM} keys {{{}}}, looked up with {:?}",
        t.file.display(),
        keys(&t.keys),
        t.lookup
    );
    if major < 9 || t.keys.contains(&major) || t.lookup != Lookup::Index {
        return Check::pass(
            id,
            format!("multimem table covers cc {major} (or falls back to two-shot)"),
        )
        .evidence(evidence);
    }
    if multicast_possible(f) {
        Check::fail(id, format!("with multicast available, the first symm-mem all-reduce raises `KeyError: {major}` ({MULTIMEM} has only {})", keys(&t.keys)))
            .fix(patch_or(f, Patches::SymmMem, "adds the missing entry", &format!("drop {SYMM_FLAG}")))
            .evidence(evidence)
    } else {
        Check::pass(
            id,
            format!("{MULTIMEM} lacks cc {major}, but it is not reached without multicast"),
        )
        .evidence(evidence)
    }
}

fn fusion_gate_check(f: &DoctorFacts) -> Check {
    let id = "sglang.allreduce-fusion-gate";
    let major = match sglang_target(f, id) {
        Ok(m) => m,
        Err(c) => return c,
    };
    let Some(g) = &f.sources.fusion_gate else {
        return Check::skip(
            id,
            format!(
                "no all-reduce fusion gate found in {}",
                version(f, "sglang")
            ),
        );
    };
    let evidence = format!(
        "{}: gate admits SM majors {{{}}} ({:?})",
        g.file.display(),
        keys(&g.majors),
        g.kind
    );
    if g.majors.contains(&major) {
        return Check::pass(id, format!("all-reduce fusion gate admits cc {major}"))
            .evidence(evidence);
    }
    let requested = f.server_flags.is_empty() || f.flag_requested(FUSION_FLAG);
    match g.kind {
        GateKind::Silent => Check::warn(
            id,
            format!(
                "{}: {FUSION_FLAG} is silently ignored on cc {major}: the gate admits only SM {}; all-reduce + RMSNorm run unfused",
                version(f, "sglang"),
                keys(&g.majors)
            ),
        )
        .fix(patch_or(
            f,
            Patches::Fusion,
            "opens this gate and FlashInfer's JIT gate together",
            &format!("drop {FUSION_FLAG}: it does nothing on this GPU"),
        )),
        GateKind::Raises if requested => Check::fail(
            id,
            format!("{FUSION_FLAG} is refused on cc {major}: ValueError \"FlashInfer allreduce fusion requires SM90 or SM10X\""),
        )
        .fix(format!("drop {FUSION_FLAG}")),
        GateKind::Raises => Check::pass(id, format!("fusion unsupported on cc {major}, and no profile asks for it")),
    }
    .evidence(evidence)
}

fn flashinfer_comm_gate(f: &DoctorFacts) -> Check {
    let id = "flashinfer.comm-jit-gate";
    if f.sources.flashinfer_dir.is_none() {
        return Check::skip(id, "flashinfer-python is not installed");
    }
    let Some((major, _)) = f.target_cc() else {
        return Check::skip(
            id,
            "no GPU found to check against (pin one with KILN_FACT_GPU_CC=12.0)",
        );
    };
    let Some(majors) = &f.sources.flashinfer_comm_majors else {
        return Check::skip(
            id,
            format!(
                "gen_trtllm_comm_module not found in {}",
                version(f, "flashinfer-python")
            ),
        );
    };
    let evidence = format!(
        "flashinfer/jit/comm.py: gen_trtllm_comm_module supported_major_versions=[{}]",
        keys(majors)
    );
    if majors.contains(&major) {
        return Check::pass(
            id,
            format!(
                "{} builds trtllm_comm for SM {major}",
                version(f, "flashinfer-python")
            ),
        )
        .evidence(evidence);
    }
    let sglang_open = f
        .sources
        .fusion_gate
        .as_ref()
        .is_some_and(|g| g.majors.contains(&major));
    if sglang_open {
        Check::fail(
            id,
            format!("SGLang's fusion gate is open but FlashInfer's JIT is not: CUDA graph capture will crash with \"No supported CUDA architectures found for major versions [{}]\"", keys(majors)),
        )
        .fix(patch_or(f, Patches::Fusion, "FlashInfer's set patches flashinfer/jit/comm.py", &format!("drop {FUSION_FLAG}")))
        .evidence(evidence)
    } else {
        Check::skip(id, format!("not reached: SGLang's fusion gate is closed on cc {major} (opening it alone would crash at graph capture)"))
            .evidence(evidence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dict_keys_across_nesting_and_comments() {
        let t = "MiB = 1\nTORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {\n    9: {\n        2: 64 * MiB,  # 64 MB\n    },\n    10: {2: 1},\n}\n";
        assert_eq!(dict_keys(t, SIZES), Some(vec![9, 10]));
        assert_eq!(
            dict_keys(
                "_WORLD_SIZES_MULTIMEM = {9: [4, 6, 8], 10: [6, 8], 12: []}",
                MULTIMEM
            ),
            Some(vec![9, 10, 12])
        );
    }

    #[test]
    fn tells_index_from_get() {
        assert_eq!(
            lookup("x = T[\n  self.device_capability\n]", "T"),
            Lookup::Index
        );
        assert_eq!(
            lookup("x = T.get(self.device_capability)", "T"),
            Lookup::Get
        );
    }

    fn majors_of(body: &str) -> Vec<u32> {
        let text = format!("def gate():\n    return {body}\n");
        let tree = syntax::parse(&text);
        gate_majors(function(tree.root_node(), &text, "gate").unwrap(), &text)
    }

    #[test]
    fn reads_gate_majors() {
        assert_eq!(
            majors_of("(_is_sm90_supported or _is_sm100_supported)"),
            [9, 10]
        );
        assert_eq!(
            majors_of("(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)"),
            [9, 10, 12]
        );
        // A guard named in a comment or a string is not a guard.
        assert_eq!(majors_of("_is_sm90_supported  # _is_sm120_supported"), [9]);
        let t = "def gen_x():\n  a(supported_major_versions=[9])\ndef gen_trtllm_comm_module() -> JitSpec:\n    f(\n        supported_major_versions=[9, 10]\n    )";
        assert_eq!(majors_in(t, "gen_trtllm_comm_module"), Some(vec![9, 10]));
    }

    #[test]
    fn a_table_in_a_comment_or_string_is_not_the_table() {
        let t = "# TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {12: 1}\nDOC = 'TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {11: 1}'\nTORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES: dict[int, int] = {9: 1}\n";
        assert_eq!(dict_keys(t, SIZES), Some(vec![9]));
        assert_eq!(
            lookup("# T[self.device_capability]\nx = T.get(cc)", "T"),
            Lookup::Get
        );
        assert_eq!(
            lookup("if n in self.T[self.device_capability]: pass", "T"),
            Lookup::Index
        );
    }
}
