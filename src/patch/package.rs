//! Installed Python packages: the version from `<site>/<name>-<ver>.dist-info/METADATA`, and the
//! site-packages directory of an interpreter.

use std::path::{Path, PathBuf};

use crate::dist::{dist_infos, name_and_version, normalize};
use crate::error::{Error, Result};
use crate::version::Version;

/// A distribution found in a site-packages directory.
#[derive(Debug, Clone)]
pub struct Installed {
    pub name: String,
    pub version: Version,
    pub metadata: PathBuf,
}

/// Find `package` in `site` by its dist-info directory and read name and version from METADATA.
pub fn find(site: &Path, package: &str) -> Result<Installed> {
    let wanted = normalize(package);
    let mut found: Vec<PathBuf> = dist_infos(site)
        .map_err(|e| {
            Error::io(
                format!("cannot read site-packages directory {}", site.display()),
                e,
            )
        })?
        .into_iter()
        .filter(|(name, _)| *name == wanted)
        .map(|(_, metadata)| metadata)
        .collect();
    let metadata = match found.len() {
        1 => found.remove(0),
        0 => {
            return Err(Error::other(
                format!("package `{package}` is not installed in {}", site.display()),
                Some(format!(
                    "no `{}-*.dist-info` there; install it first, or point --site-packages/--python at the environment that has it",
                    package.replace('-', "_")
                )),
            ))
        }
        _ => {
            found.sort();
            let list: Vec<String> = found.iter().map(|p| p.parent().unwrap_or(p).display().to_string()).collect();
            return Err(Error::other(
                format!("package `{package}` is installed more than once in {}: {}", site.display(), list.join(", ")),
                Some("remove the stale dist-info directory (a broken uninstall leaves one behind)".into()),
            ));
        }
    };
    let text = crate::bounded::read_state(&metadata, crate::bounded::SOURCE_CAP)
        .map_err(|e| Error::io(format!("cannot read {}", metadata.display()), e))?;
    let (name, version) = name_and_version(&text);
    let bad = |what: &str| {
        Error::other(
            format!("{} has no valid `{what}:` header", metadata.display()),
            Some("reinstall the package".into()),
        )
    };
    let name = name.ok_or_else(|| bad("Name"))?;
    let version = version
        .and_then(|v| Version::parse(&v))
        .ok_or_else(|| bad("Version"))?;
    Ok(Installed {
        name,
        version,
        metadata,
    })
}

/// The pure-Python site-packages directory of an interpreter (a venv's python gives the venv's).
pub fn site_packages_of(python: &Path) -> Result<PathBuf> {
    let program = python.to_string_lossy();
    let out = crate::process::capture(
        &program,
        &[
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
    )?;
    let site = PathBuf::from(out.trim());
    if !site.is_dir() {
        return Err(Error::other(
            format!(
                "`{program}` reports site-packages {}, which is not a directory",
                site.display()
            ),
            Some("pass --site-packages DIR instead".into()),
        ));
    }
    Ok(site)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_version_from_metadata() {
        let site = tempfile::tempdir().unwrap();
        let info = site.path().join("flashinfer_python-0.6.3.dist-info");
        std::fs::create_dir(&info).unwrap();
        std::fs::write(
            info.join("METADATA"),
            "Metadata-Version: 2.4\nName: flashinfer-python\nVersion: 0.6.3\n\nVersion: 9\n",
        )
        .unwrap();
        let found = find(site.path(), "flashinfer-python").unwrap();
        assert_eq!(
            (found.name.as_str(), found.version.to_string()),
            ("flashinfer-python", "0.6.3".to_string())
        );
        let missing = find(site.path(), "sglang").unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("package `sglang` is not installed in "),
            "{missing}"
        );
    }

    #[test]
    fn interpreter_site_packages() {
        let site = site_packages_of(Path::new("python3")).unwrap();
        assert!(site.is_dir());
        assert!(site_packages_of(Path::new("/nonexistent/python")).is_err());
    }
}
