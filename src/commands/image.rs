//! `kiln image dockerfile` and `kiln image export`: glue from flags to src/image.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::Settings;
use crate::cli::{ImageArgs, ImageCommand, ImageDockerfileArgs, ImageExportArgs, RecipeArgs};
use crate::error::{Error, Result};
use crate::image::archive::{self, ExportOptions};
use crate::image::dockerfile::{self, RecipeSource};
use crate::report::Block;

/// The `dockerfile` event: what was rendered, and where it went.
#[derive(Serialize)]
struct DockerfileEvent<'a> {
    recipe: &'a str,
    base: &'a str,
    profile: Option<&'a str>,
    /// The file written (`-o`); None: the text went to stdout (a human) or is `text` (JSON).
    output: Option<&'a Path>,
    text: &'a str,
}

/// The `image_exported` event: the archive and each layer, as numbers and digests.
#[derive(Serialize)]
struct ExportedEvent<'a> {
    output: &'a Path,
    archive_size: u64,
    manifest_digest: String,
    tag: Option<&'a str>,
    layers: Vec<LayerEvent<'a>>,
}

#[derive(Serialize)]
struct LayerEvent<'a> {
    prefix: &'a Path,
    digest: String,
    size: u64,
    files: u64,
    dirs: u64,
    symlinks: u64,
}

pub(super) fn run(settings: &Settings, args: &ImageArgs) -> Result<u8> {
    match &args.command {
        ImageCommand::Dockerfile(a) => run_dockerfile(settings, a),
        ImageCommand::Export(a) => run_export(settings, a),
    }
}

fn run_dockerfile(settings: &Settings, args: &ImageDockerfileArgs) -> Result<u8> {
    let recipe = settings.load_recipe(&RecipeArgs {
        recipe_flag: None,
        recipe: args.recipe.clone(),
        set: args.set.clone(),
    })?;
    let source = if crate::recipe::is_shipped(&recipe.origin) {
        RecipeSource::Shipped(
            args.recipe
                .clone()
                .unwrap_or_else(|| crate::recipe::shipped::DEFAULT.to_string()),
        )
    } else {
        RecipeSource::File(context_relative(Path::new(
            args.recipe.as_deref().unwrap_or_default(),
        ))?)
    };
    let text = dockerfile::render(
        &recipe,
        &source,
        &args.base,
        args.profile.as_deref(),
        &args.set,
    )?;
    if let Some(path) = &args.output {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::io("cannot read the current directory", e))?;
        crate::output::write(&cwd.join(path), "the Dockerfile", text.as_bytes())?;
    }
    let event = DockerfileEvent {
        recipe: &recipe.name,
        base: &args.base,
        profile: args.profile.as_deref(),
        output: args.output.as_deref(),
        text: &text,
    };
    let shown = if args.output.is_some() {
        ""
    } else {
        text.as_str()
    };
    crate::report::current().result(&Block::new("dockerfile", shown, &event));
    Ok(0)
}

/// The recipe's path inside the build context (the current directory), with `/` separators.
fn context_relative(path: &Path) -> Result<String> {
    let cwd =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let relative = if path.is_absolute() {
        path.strip_prefix(&cwd).ok().map(Path::to_path_buf)
    } else {
        Some(path.to_path_buf())
    };
    let outside = || {
        Error::usage(
            format!("recipe {} is outside the build context {}", path.display(), cwd.display()),
            Some("run `kiln image dockerfile` from the directory you pass to `docker build`, with the recipe inside it".to_string()),
        )
    };
    let relative = relative.ok_or_else(outside)?;
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(c) => parts.push(c.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => return Err(outside()),
        }
    }
    Ok(parts.join("/"))
}

fn run_export(settings: &Settings, args: &ImageExportArgs) -> Result<u8> {
    let cwd =
        std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?;
    let mut prefixes = Vec::new();
    for prefix in &args.prefix {
        let absolute: PathBuf = cwd.join(prefix);
        if !absolute.is_dir() {
            return Err(Error::usage(
                format!("prefix {} is not a directory", prefix.display()),
                Some(
                    "pass directories that `kiln up` provisioned, e.g. --prefix /opt/kiln/glm5"
                        .to_string(),
                ),
            ));
        }
        prefixes.push(absolute);
    }
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse::<u64>().map_err(|_| {
            Error::usage(
                format!("SOURCE_DATE_EPOCH={v} is not a number of seconds"),
                Some(
                    "set it to e.g. `$(git log -1 --format=%ct)`, or unset it for mtime 0"
                        .to_string(),
                ),
            )
        })?,
        _ => 0,
    };
    let (env, labels) = match &args.config_from {
        Some(spec) => {
            let recipe = settings.load_recipe(&RecipeArgs {
                recipe_flag: None,
                recipe: Some(spec.clone()),
                set: args.set.clone(),
            })?;
            let labels = BTreeMap::from([
                (
                    "org.opencontainers.image.title".to_string(),
                    recipe.name.clone(),
                ),
                (
                    "org.opencontainers.image.description".to_string(),
                    recipe.description.clone(),
                ),
                (
                    "org.opencontainers.image.version".to_string(),
                    recipe.version.clone(),
                ),
            ]);
            (crate::image::shared_env(&recipe), labels)
        }
        None => (BTreeMap::new(), BTreeMap::new()),
    };
    let options = ExportOptions {
        prefixes,
        tag: args.tag.clone(),
        epoch,
        env,
        labels,
    };
    let reporter = super::reporter(false);
    let exported = archive::export(&options, &args.output, &|line| reporter.note(line))?;
    reporter.note(&format!(
        "wrote {} ({}, {} layer(s))",
        args.output.display(),
        crate::units::human_bytes(exported.archive_size as f64),
        exported.layers.len()
    ));
    let event = ExportedEvent {
        output: &args.output,
        archive_size: exported.archive_size,
        manifest_digest: format!("sha256:{}", exported.manifest_digest),
        tag: args.tag.as_deref(),
        layers: exported
            .layers
            .iter()
            .map(|l| LayerEvent {
                prefix: &l.prefix,
                digest: format!("sha256:{}", l.digest),
                size: l.size,
                files: l.files,
                dirs: l.dirs,
                symlinks: l.symlinks,
            })
            .collect(),
    };
    let text = event.manifest_digest.clone();
    reporter.result(&Block::new("image_exported", text, &event));
    Ok(0)
}
