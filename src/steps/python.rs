//! `kind = "python"`: a venv made with uv (installed from PyPI when missing; pip as fallback),
//! pinned requirements with index / extra-index URLs, source builds through the compiled-wheel
//! cache, and post-install verification.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

mod wheel;

use super::{run::run_spec, StepContext};
use crate::cache::wheels::WheelCache;
use crate::error::{Error, Result};
use crate::process::CommandSpec;
use crate::recipe::{PythonStep, Step};

/// How packages get installed.
enum Installer {
    Uv(PathBuf),
    Pip,
}

pub(crate) fn run(
    step: &Step,
    p: &PythonStep,
    ctx: &StepContext,
    log: &mut dyn Write,
    on_line: &mut dyn FnMut(&str),
) -> Result<()> {
    let env = super::build_env(step);
    let mut sh = |spec: CommandSpec, log: &mut dyn Write| {
        run_spec(&step.id, &spec, step.timeout, log, on_line)
    };
    let installer = find_uv(ctx, log, &mut sh);
    let vpy = p.venv.join("bin").join("python");
    if vpy.exists() {
        let _ = writeln!(log, "venv exists: {}", p.venv.display());
    } else {
        let spec = match &installer {
            Installer::Uv(uv) => {
                CommandSpec::new(uv.display().to_string(), ["venv", "--seed", "--python"])
                    .arg(&p.python)
            }
            Installer::Pip => CommandSpec::new(&p.python, ["-m", "venv"]),
        };
        let spec = if p.system_site_packages {
            spec.arg("--system-site-packages")
        } else {
            spec
        };
        let spec = spec.arg(p.venv.display().to_string());
        sh(spec.with_env(&env), log)?;
    }
    let index_args = index_args(p);
    let plain: Vec<&String> = p.install.iter().filter(|r| !p.build.contains(r)).collect();
    if !plain.is_empty() {
        sh(
            install_spec(
                &installer,
                &vpy,
                &index_args,
                plain.iter().map(|s| s.as_str()),
            )
            .with_env(&env),
            log,
        )?;
    }
    let cache = WheelCache::with_trust(
        &ctx.paths.wheels(),
        crate::cache::trust::Trust::from_env(&ctx.paths.cache_own())?,
    );
    let builds = wheel::WheelBuild {
        p,
        vpy: &vpy,
        env: &env,
        index_args: &index_args,
        cache: &cache,
    };
    for req in &p.build {
        let wheel = builds.build_or_reuse(req, log, &mut sh)?;
        let mut spec = install_spec(
            &installer,
            &vpy,
            &[],
            [wheel.display().to_string().as_str()],
        );
        spec.args.insert(spec.args.len() - 1, "--no-deps".into());
        sh(spec.with_env(&env), log)?;
    }
    if let Some(code) = &p.verify {
        let _ = writeln!(log, "--- verify ---");
        sh(
            CommandSpec::new(vpy.display().to_string(), ["-c"])
                .arg(code)
                .with_env(&env),
            log,
        )
        .map_err(|e| match e {
            Error::StepFailed {
                step,
                reason,
                log,
                tail,
                hint,
            } => Error::StepFailed {
                step,
                reason: format!("post-install verification failed: {reason}"),
                log,
                tail,
                hint,
            },
            other => other,
        })?;
    }
    if let Some((module, arch)) = &p.sass {
        let target = super::sass::Target::Module {
            python: &vpy,
            module,
        };
        super::sass::check(step, &target, arch, log)?;
    }
    Ok(())
}

impl CommandSpec {
    fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    fn with_env(mut self, env: &BTreeMap<String, String>) -> Self {
        self.env
            .extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }
}

/// uv on PATH, or kiln's own copy, or installed from PyPI into the cache; else pip.
fn find_uv(
    ctx: &StepContext,
    log: &mut dyn Write,
    sh: &mut dyn FnMut(CommandSpec, &mut dyn Write) -> Result<()>,
) -> Installer {
    if std::env::var_os("KILN_NO_UV").is_some() {
        let _ = writeln!(log, "KILN_NO_UV is set: using python -m venv and pip");
        return Installer::Pip;
    }
    if let Ok(uv) = which::which("uv") {
        return Installer::Uv(uv);
    }
    let target = ctx.paths.tool("uv");
    let uv = target.join("bin").join("uv");
    if uv.exists() {
        return Installer::Uv(uv);
    }
    let _ = writeln!(
        log,
        "uv not found: installing it from PyPI into {}",
        target.display()
    );
    let spec = CommandSpec::new(
        "python3",
        [
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
        ],
    )
    .arg(target.display().to_string())
    .arg("uv");
    match sh(spec, log) {
        Ok(()) if uv.exists() => Installer::Uv(uv),
        _ => {
            let _ = writeln!(
                log,
                "could not install uv; falling back to python -m venv and pip"
            );
            Installer::Pip
        }
    }
}

fn index_args(p: &PythonStep) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(u) = &p.index_url {
        args.extend(["--index-url".to_string(), u.clone()]);
    }
    for u in &p.extra_index_urls {
        args.extend(["--extra-index-url".to_string(), u.clone()]);
    }
    args
}

fn install_spec<'a>(
    installer: &Installer,
    vpy: &Path,
    index_args: &[String],
    reqs: impl IntoIterator<Item = &'a str>,
) -> CommandSpec {
    let mut spec = match installer {
        Installer::Uv(uv) => {
            CommandSpec::new(uv.display().to_string(), ["pip", "install", "--python"])
                .arg(vpy.display().to_string())
        }
        Installer::Pip => CommandSpec::new(
            vpy.display().to_string(),
            ["-m", "pip", "install", "--disable-pip-version-check"],
        ),
    };
    spec.args.extend(index_args.iter().cloned());
    spec.args.extend(reqs.into_iter().map(str::to_string));
    spec
}
