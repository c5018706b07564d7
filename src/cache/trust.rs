//! Whom the step cache trusts, in the model of Nix's `trusted-public-keys`: an entry is
//! restored, imported or pulled only when this state directory stored it itself, or it carries
//! an ed25519 signature by a key the user trusts.
//!
//! - `kiln cache key generate NAME --out FILE` writes a secret key (`NAME:BASE64(seed)`, mode
//!   0600) and prints its public key (`NAME:BASE64(key)`).
//! - `KILN_CACHE_SIGNING_KEY=FILE`: entries this kiln stores, exports or pushes are signed with
//!   it (an entry it does not trust itself is never signed).
//! - `KILN_CACHE_TRUSTED_KEYS="NAME:BASE64 …"` (spaces or commas): the keys whose signatures are
//!   accepted (the signing key's own is always).
//! - `KILN_CACHE_REQUIRE_SIGS=false`: the explicit opt-out for a private cache; every entry
//!   whose hashes check out is accepted, as before signatures.
//!
//! "Stored by this machine" means stored by this state directory: each store writes
//! `<state>/cache-own/<id>` holding the sha256 of the entry's signed message, so another host
//! writing a shared `KILN_CACHE_DIR` cannot make an entry pass for ours (it cannot write our
//! state directory), and an entry changed after we stored it no longer matches.
//!
//! The signed message covers the entry's key id, the sha256 of its manifest and outputs list
//! (as JSON, keys sorted) and its archive's sha256 and size.
//!
//! Compiled wheels are trusted the same way, with the same keys and variables ([`Signed`] says
//! what each kind's signature covers: a wheel's key id, file name, sha256, size and the index it
//! was built from); a wheel's own-store record is `<state>/cache-own/wheel-<id>`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};

use crate::error::{Error, Result};

pub(crate) const ENV_SIGNING_KEY: &str = "KILN_CACHE_SIGNING_KEY";
pub(crate) const ENV_TRUSTED_KEYS: &str = "KILN_CACHE_TRUSTED_KEYS";
pub(crate) const ENV_REQUIRE_SIGS: &str = "KILN_CACHE_REQUIRE_SIGS";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A named ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PublicKey {
    name: String,
    key: Vec<u8>,
}

/// This kiln's trust: its signing key, the keys it trusts, whether signatures are required, and
/// where its own stores are recorded.
pub(crate) struct Trust {
    signer: Option<(String, Ed25519KeyPair)>,
    trusted: Vec<PublicKey>,
    require: bool,
    own: PathBuf,
}

fn parse_named(text: &str, what: &str, len: Option<usize>) -> Result<(String, Vec<u8>)> {
    let bad = |why: &str| {
        Error::usage(
            format!(
                "{what} `{}` is not NAME:BASE64 ({why})",
                super::printable(text)
            ),
            Some("make keys with `kiln cache key generate NAME --out FILE`".into()),
        )
    };
    let (name, b64) = text.trim().split_once(':').ok_or_else(|| bad("no `:`"))?;
    if name.is_empty() {
        return Err(bad("an empty name"));
    }
    let bytes = B64.decode(b64).map_err(|_| bad("bad base64"))?;
    if len.is_some_and(|l| bytes.len() != l) {
        return Err(bad("wrong length"));
    }
    Ok((name.to_string(), bytes))
}

impl Trust {
    /// The trust of a state directory from the environment (see the module's doc); `own`: its
    /// records of the entries it stored ([`crate::paths::StatePaths::cache_own`]).
    pub(crate) fn from_env(own: &Path) -> Result<Trust> {
        let signer = match std::env::var_os(ENV_SIGNING_KEY).filter(|v| !v.is_empty()) {
            None => None,
            Some(path) => Some(read_secret(Path::new(&path))?),
        };
        let mut trusted = Vec::new();
        if let Ok(list) = std::env::var(ENV_TRUSTED_KEYS) {
            for item in list
                .split([' ', ',', '\n'])
                .filter(|s| !s.trim().is_empty())
            {
                let (name, key) = parse_named(item, ENV_TRUSTED_KEYS, Some(32))?;
                trusted.push(PublicKey { name, key });
            }
        }
        if let Some((name, pair)) = &signer {
            trusted.push(PublicKey {
                name: name.clone(),
                key: pair.public_key().as_ref().to_vec(),
            });
        }
        let require = match std::env::var(ENV_REQUIRE_SIGS).as_deref() {
            Err(_) | Ok("" | "true" | "1") => true,
            Ok("false" | "0") => false,
            Ok(other) => {
                return Err(Error::usage(
                    format!("{ENV_REQUIRE_SIGS}={} is not true or false", super::printable(other)),
                    Some(format!("{ENV_REQUIRE_SIGS}=false accepts unsigned step-cache entries (a private cache only)")),
                ))
            }
        };
        Ok(Trust {
            signer,
            trusted,
            require,
            own: own.to_path_buf(),
        })
    }

    /// A trust that requires signatures and trusts no key: only what the state whose records
    /// are in `own` stored.
    #[cfg(test)]
    pub(crate) fn strict(own: &Path) -> Trust {
        Trust {
            signer: None,
            trusted: Vec::new(),
            require: true,
            own: own.to_path_buf(),
        }
    }

    /// [`Self::strict`] that signs with the secret key in `key_file` (and trusts its public
    /// key), as `KILN_CACHE_SIGNING_KEY=key_file` makes [`Self::from_env`] do.
    #[cfg(test)]
    pub(crate) fn signing(own: &Path, key_file: &Path) -> Result<Trust> {
        let (name, pair) = read_secret(key_file)?;
        let public = PublicKey {
            name: name.clone(),
            key: pair.public_key().as_ref().to_vec(),
        };
        Ok(Trust {
            signer: Some((name, pair)),
            trusted: vec![public],
            require: true,
            own: own.to_path_buf(),
        })
    }

    /// Add this kiln's signature to `entry` (when a signing key is set and it is not there).
    /// Whether the entry changed.
    pub(crate) fn sign(&self, id: &str, entry: &mut impl Signed) -> bool {
        let Some((name, pair)) = &self.signer else {
            return false;
        };
        let sig = format!(
            "{name}:{}",
            B64.encode(pair.sign(&entry.message(id)).as_ref())
        );
        let signatures = entry.signatures_mut();
        if signatures.contains(&sig) {
            return false;
        }
        signatures.retain(|s| !s.starts_with(&format!("{name}:")));
        signatures.push(sig);
        true
    }

    /// [`Self::sign`] entry `id` only when this kiln vouches for it ([`Self::vouches`]): one it
    /// merely accepted is carried unsigned, never laundered by a signature. Whether it changed.
    pub(crate) fn sign_vouched<E: Signed>(&self, id: &str, entry: &mut E) -> bool {
        self.vouches(id, entry) && self.sign(id, entry)
    }

    /// [`Self::sign_vouched`] the entry stored in `dir` (read with `read`, written back with
    /// `write` when it changed): what export and push do before an entry leaves. An entry that
    /// does not read is left as it is.
    pub(crate) fn sign_stored<E: Signed>(
        &self,
        id: &str,
        dir: &Path,
        read: impl FnOnce(&Path) -> Option<E>,
        write: impl FnOnce(&Path, &E) -> Result<()>,
    ) -> Result<()> {
        let Some(mut entry) = read(dir) else {
            return Ok(());
        };
        if self.sign_vouched(id, &mut entry) {
            write(dir, &entry)?;
        }
        Ok(())
    }

    /// Record entry `id` as stored by this state directory.
    pub(crate) fn record_own<E: Signed>(&self, id: &str, entry: &E) -> Result<()> {
        super::perms::create_dir_with(&self.own, 0o700)?;
        super::perms::write_file(
            &self.own.join(E::own_name(id)),
            sha256_hex(&entry.message(id)).as_bytes(),
            0o600,
        )
    }

    /// Whether entry `id` may be used here: stored by this state directory, signed by a trusted
    /// key ([`Self::vouches`]), or signatures are not required. The reason on refusal.
    pub(crate) fn check<E: Signed>(&self, id: &str, entry: &E) -> std::result::Result<(), String> {
        if self.vouches(id, entry) || !self.require {
            return Ok(());
        }
        let names: Vec<String> = entry
            .signatures()
            .iter()
            .filter_map(|s| s.split_once(':').map(|(n, _)| super::printable(n)))
            .collect();
        Err(if names.is_empty() {
            "it is not signed, and this state directory did not store it".to_string()
        } else {
            format!(
                "no valid signature by a trusted key (signed by: {}); trusted: {}",
                names.join(", "),
                self.trusted_names()
            )
        })
    }

    /// Whether this kiln can vouch for entry `id`: this state directory stored it, or a key it
    /// trusts signed it. What signing asks (an entry merely accepted because signatures are not
    /// required, `KILN_CACHE_REQUIRE_SIGS=false`, is never signed: no laundering).
    pub(crate) fn vouches<E: Signed>(&self, id: &str, entry: &E) -> bool {
        let msg = entry.message(id);
        // A record another user could have written is no record (read as a regular file of a
        // digest's size, in a directory only this user can change).
        let own = super::read_regular(&self.own.join(E::own_name(id)), 128).ok();
        if own.is_some_and(|d| String::from_utf8_lossy(&d).trim() == sha256_hex(&msg)) {
            return true;
        }
        for sig in entry.signatures() {
            let Some((name, b64)) = sig.split_once(':') else {
                continue;
            };
            let Ok(bytes) = B64.decode(b64) else { continue };
            for k in self.trusted.iter().filter(|k| k.name == name) {
                if UnparsedPublicKey::new(&ED25519, &k.key)
                    .verify(&msg, &bytes)
                    .is_ok()
                {
                    return true;
                }
            }
        }
        false
    }

    fn trusted_names(&self) -> String {
        if self.trusted.is_empty() {
            return "none".into();
        }
        let names: Vec<&str> = self.trusted.iter().map(|k| k.name.as_str()).collect();
        names.join(", ")
    }
}

/// The hint of every refusal by [`Trust::check`].
pub(crate) fn hint() -> String {
    format!(
        "trust the fleet's key with {ENV_TRUSTED_KEYS}=\"NAME:BASE64\" (its builder signs with \
         {ENV_SIGNING_KEY}=FILE, made by `kiln cache key generate`), or accept unsigned entries \
         of a private cache with {ENV_REQUIRE_SIGS}=false"
    )
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    crate::hash::hex(&sha2::Sha256::digest(bytes))
}

/// An entry kind that is signed: what its signature covers, where its signatures are, and the
/// name of its own-store record. Implemented beside each kind's entry format (step entries in
/// `entry.rs`, wheels in `wheels.rs`), so this module imports neither.
pub(crate) trait Signed {
    /// The file name, under `<state>/cache-own/`, that records entry `id` as this state's.
    fn own_name(id: &str) -> String;
    /// The bytes a signature of entry `id` signs.
    fn message(&self, id: &str) -> Vec<u8>;
    fn signatures(&self) -> &[String];
    fn signatures_mut(&mut self) -> &mut Vec<String>;
}

fn read_secret(path: &Path) -> Result<(String, Ed25519KeyPair)> {
    let text = read_key_file(path)?;
    let (name, seed) = parse_named(&text, ENV_SIGNING_KEY, Some(32))?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|e| {
        Error::other(
            format!("the signing key {} is refused: {e}", path.display()),
            Some("make one with `kiln cache key generate NAME --out FILE`".into()),
        )
    })?;
    Ok((name, pair))
}

/// The signing key file `path` (a link to it is followed: secrets are often mounted so): a
/// regular file of at most 4 KiB (a FIFO is refused, never waited on), owned by this user or
/// root and writable by no one else ([`super::perms`]).
fn read_key_file(path: &Path) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let ctx = |e| Error::io(format!("cannot read the signing key {}", path.display()), e);
    let f = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(ctx)?;
    let meta = f.metadata().map_err(ctx)?;
    let refuse = |why: String| {
        let (message, hint) = match why.split_once(" (hint: ") {
            Some((m, h)) => (m.to_string(), h.trim_end_matches(')').to_string()),
            None => (
                why,
                "make one with `kiln cache key generate NAME --out FILE`".into(),
            ),
        };
        Error::usage(format!("refusing the signing key: {message}"), Some(hint))
    };
    if !meta.is_file() {
        return Err(refuse(format!("{} is not a regular file", path.display())));
    }
    if let Some(why) = super::perms::unsafe_because(path, &meta) {
        return Err(refuse(why));
    }
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).map_err(ctx)?;
    Ok(text)
}

/// A new key `name`: the secret written to `out` (created exclusively, mode 0600), its public
/// key returned as `NAME:BASE64`.
pub(crate) fn generate(name: &str, out: &Path) -> Result<String> {
    if name.is_empty() || name.contains([':', ' ', ',', '\n']) || name.chars().any(char::is_control)
    {
        return Err(Error::usage(
            format!("key name `{}` must be non-empty, without `:`, spaces, commas or control characters", super::printable(name)),
            Some("e.g. `kiln cache key generate fleet-2026 --out fleet.key`".into()),
        ));
    }
    let mut seed = [0u8; 32];
    super::random_bytes(&mut seed).map_err(|e| Error::io("cannot make a key (getrandom)", e))?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("32-byte seeds are keys");
    let secret = format!("{name}:{}\n", B64.encode(seed));
    let ctx = |e| Error::io(format!("cannot write {}", out.display()), e);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(out)
        .map_err(ctx)?;
    f.write_all(secret.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(ctx)?;
    Ok(format!("{name}:{}", B64.encode(pair.public_key().as_ref())))
}
