//! What a recipe tells the doctor (`kiln doctor --recipe`, `kiln up`'s doctor gate): its venv's
//! python, toolkit and driver floor, prefix, server flags, built binaries, the toolchain warnings
//! `kiln plan` shows, and what it needs of the host.

use std::path::PathBuf;

use super::{Inputs, Needs};
use crate::recipe::{Recipe, StepKind};

/// What a recipe tells the doctor: its venv's python, toolkit and driver floor, prefix, server
/// flags, and what it needs of the host.
pub(crate) fn apply(recipe: &Recipe, inputs: &mut Inputs) {
    inputs.needs = Some(needs_of(recipe));
    for step in &recipe.steps {
        match &step.kind {
            StepKind::Python(p) if inputs.python.is_none() => {
                let python = p.venv.join("bin/python");
                if python.exists() {
                    inputs.python = Some(python.display().to_string());
                } else if inputs.python_to_come.is_none() {
                    // The recipe installs its own interpreter: the system python is not it.
                    inputs.python_to_come = Some((python, step.id.clone()));
                }
            }
            StepKind::Cuda(c) => {
                inputs.toolkit_version = Some(c.version.clone());
                if let Some(floor) = &c.driver_floor {
                    inputs.driver_floor = Some(floor.clone());
                }
            }
            _ => {}
        }
    }
    if inputs.python.is_none() && inputs.python_to_come.is_none() {
        if let Some(python) = served_python(recipe) {
            if python.exists() {
                inputs.python = Some(python.display().to_string());
            } else if let Some(step) = crate::recipe::maker(&recipe.made_paths(), &python) {
                inputs.python_to_come = Some((python, step.to_string()));
            }
        }
    }
    inputs.prefix = recipe.vars.get("prefix").map(PathBuf::from);
    inputs.toolchain_warnings = Some(crate::recipe::cuda_arch::family_conflicts(recipe));
    inputs.server_flags = recipe
        .profiles
        .values()
        .flat_map(|p| p.args.iter().cloned())
        .collect();
    // A built llama-server's device code is read too (`sass.packages`).
    inputs.binaries = recipe
        .profiles
        .values()
        .filter_map(|p| p.cmd.first().map(PathBuf::from))
        .filter(|c| c.file_name().is_some_and(|n| n == "llama-server") && c.is_absolute())
        .collect();
    inputs.binaries.dedup();
}

/// The interpreter an SGLang profile runs (`/ABS/python -m sglang.launch_server`): the serving
/// environment of a recipe whose venv a `run` step makes (sglang-cuda), where no `python` step
/// names it. Without it, doctor inspected the system python3 beside that venv.
fn served_python(recipe: &Recipe) -> Option<PathBuf> {
    recipe.profiles.values().find_map(|p| {
        let (program, rest) = p.cmd.split_first()?;
        let python = PathBuf::from(program);
        let runs_sglang = rest.first().is_some_and(|a| a == "-m")
            && rest.get(1).is_some_and(|m| m == "sglang.launch_server");
        let named = python
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"));
        (runs_sglang && named && python.is_absolute()).then_some(python)
    })
}

/// What a recipe needs of the host: a GPU, torch, SGLang, a toolchain build.
pub(crate) fn needs_of(recipe: &Recipe) -> Needs {
    let mut needs = Needs {
        recipe: recipe.name.clone(),
        named: if crate::recipe::is_shipped(&recipe.origin) {
            recipe.name.clone()
        } else {
            crate::shell::quote(&recipe.origin)
        },
        arch_var: recipe.vars.contains_key("arch"),
        ..Needs::default()
    };
    for step in &recipe.steps {
        match &step.kind {
            StepKind::Python(p) => {
                let installs = |name: &str| {
                    p.install.iter().chain(&p.build).any(|i| {
                        crate::dist::normalize(
                            i.split(['=', '<', '>', '!', '~', ' ', '@', '[', ';'])
                                .next()
                                .unwrap_or(""),
                        ) == name
                    })
                };
                needs.torch |= installs("torch") || installs("sglang");
                needs.sglang |= installs("sglang");
                needs.toolchain |= installs("torch") || installs("flash-attn");
            }
            StepKind::Cuda(_) => {
                needs.gpu = true;
                needs.toolchain = true;
            }
            _ => {}
        }
    }
    for p in recipe.profiles.values() {
        match super::launch::table::server_of(&p.cmd) {
            Some(s) if s.name == "SGLang" => needs.sglang = true,
            Some(s) => {
                let args = super::launch::flags::Args::parse(&p.args);
                needs.gpu |= args.value(s.gpu_layers).is_some_and(|n| n != "0");
            }
            None => {}
        }
    }
    needs.gpu |= needs.torch || needs.sglang;
    needs.torch |= needs.sglang;
    needs
}
