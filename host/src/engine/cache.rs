//! The compiled-component cache: compiled machine code on disk, keyed by the
//! component's SHA-256 and the engine's configuration, so a restart or a reload of an
//! unchanged file does not recompile. Loading an entry loads native code, so every
//! entry is authenticated: its sidecar holds an HMAC-SHA256, under a per-user secret
//! key (`cache/key`, 32 random bytes, 0600), of the entry's identity (component digest
//! and engine key) and its bytes. An entry whose tag does not verify (truncated,
//! corrupted, copied from another entry, tampered with by anyone without the key) is
//! never deserialized: it is recompiled and rewritten.
// Unsafe allowed: deserializing compiled code wasmtime cannot check (see `tidy.rs`).
#![allow(unsafe_code)]

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use wasmtime::component::Component;
use wasmtime::Engine;

use crate::private;

/// Bytes of the secret key.
const KEY_BYTES: usize = 32;
/// The key's file name in the cache directory.
const KEY_FILE: &str = "key";
/// Sidecar extension: the entry's authentication tag, hex.
const TAG_EXTENSION: &str = "hmac";
/// What the tag is computed over first, so a tag from this scheme means nothing
/// anywhere else.
const TAG_DOMAIN: &[u8] = b"dsh compile cache entry v1\0";

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from an authenticated entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry failed authentication (or did not deserialize): compiled and replaced.
    Corrupt,
    /// No cache directory configured, or no key could be had: compiled.
    Disabled,
}

/// The on-disk cache of compiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    /// The secret key, read or created on first use (`Err`: the cache is off).
    key: Arc<OnceLock<Result<[u8; KEY_BYTES], String>>>,
}

impl ComponentCache {
    /// A cache in `dir` (`None` disables it) for components compiled by `engine`.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
            key: Arc::default(),
        }
    }

    fn entry(&self, dir: &Path, component_digest: &str) -> (PathBuf, PathBuf) {
        let stem = format!("{component_digest}-{}", self.engine_key);
        (
            dir.join(format!("{stem}.cwasm")),
            dir.join(format!("{stem}.{TAG_EXTENSION}")),
        )
    }

    /// The secret key, read from or created in `dir` once per process.
    fn key(&self, dir: &Path) -> Result<[u8; KEY_BYTES], &str> {
        self.key
            .get_or_init(|| load_or_create_key(dir).map_err(|e| e.to_string()))
            .as_ref()
            .copied()
            .map_err(String::as_str)
    }

    /// The compiled component for `bytes` (whose SHA-256 is `component_digest`), from
    /// the cache when an authenticated entry exists. Blocking: call off the async
    /// threads.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        component_digest: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, bytes)?, CacheOutcome::Disabled));
        };
        let key = match self.key(dir) {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "no compile cache key: compiling without the cache");
                return Ok((Component::new(engine, bytes)?, CacheOutcome::Disabled));
            }
        };
        let (code_path, tag_path) = self.entry(dir, component_digest);
        let outcome = match (
            std::fs::read(&code_path),
            std::fs::read_to_string(&tag_path),
        ) {
            (Err(_), _) => CacheOutcome::Miss,
            (Ok(code), tag) => {
                let tag = tag.unwrap_or_default();
                if verify(&key, component_digest, &self.engine_key, &code, tag.trim()) {
                    // SAFETY: the bytes carry a valid tag under this user's secret key
                    // over this entry's identity and content: this process's engine
                    // configuration (the key includes its compatibility hash) wrote
                    // them for this component.
                    match unsafe { Component::deserialize(engine, &code) } {
                        Ok(component) => return Ok((component, CacheOutcome::Hit)),
                        Err(error) => {
                            tracing::warn!(%error, entry = %code_path.display(), "compile cache entry does not deserialize: recompiling");
                        }
                    }
                } else {
                    tracing::warn!(entry = %code_path.display(), "compile cache entry fails authentication (truncated, corrupted or tampered with): discarded, recompiling");
                }
                CacheOutcome::Corrupt
            }
        };
        let code = engine.precompile_component(bytes)?;
        // SAFETY: `code` was just produced by this engine.
        let component = unsafe { Component::deserialize(engine, &code)? };
        let tag = tag(&key, component_digest, &self.engine_key, &code);
        if let Err(error) = store_entry(dir, &code_path, &tag_path, &code, &tag) {
            tracing::warn!(%error, dir = %dir.display(), "cannot write the compile cache");
        }
        Ok((component, outcome))
    }
}

/// The keyed MAC of one entry: its identity, then its bytes.
fn mac(
    key: &[u8; KEY_BYTES],
    component_digest: &str,
    engine_key: &str,
    code: &[u8],
) -> Hmac<Sha256> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(TAG_DOMAIN);
    mac.update(component_digest.as_bytes());
    mac.update(b"\0");
    mac.update(engine_key.as_bytes());
    mac.update(b"\0");
    mac.update(code);
    mac
}

/// The entry's tag, hex.
fn tag(key: &[u8; KEY_BYTES], component_digest: &str, engine_key: &str, code: &[u8]) -> String {
    hex(&mac(key, component_digest, engine_key, code)
        .finalize()
        .into_bytes())
}

/// True when `tag_hex` is the entry's tag (compared in constant time).
fn verify(
    key: &[u8; KEY_BYTES],
    component_digest: &str,
    engine_key: &str,
    code: &[u8],
    tag_hex: &str,
) -> bool {
    let Some(tag) = unhex(tag_hex) else {
        return false;
    };
    mac(key, component_digest, engine_key, code)
        .verify_slice(&tag)
        .is_ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// Why the cache key cannot be had.
#[derive(Debug, thiserror::Error)]
enum KeyError {
    #[error("compile cache key {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no random bytes for the compile cache key: {0}")]
    Random(getrandom::Error),
}

/// Reads `dir/key`, or creates it (atomically: concurrent processes agree on one key).
/// A key file that is not a private regular file of this user with 32 bytes is
/// replaced: entries tagged under a key anyone else could have read or chosen are
/// not trusted.
fn load_or_create_key(dir: &Path) -> Result<[u8; KEY_BYTES], KeyError> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(KEY_FILE);
    let io_error = |source| KeyError::Io {
        path: path.clone(),
        source,
    };
    private::create_dir_all(dir).map_err(io_error)?;
    for _ in 0..2 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => {
                let private_file = meta.is_file()
                    && meta.uid() == crate::private::euid()
                    && meta.mode() & 0o077 == 0
                    && meta.len() == KEY_BYTES as u64;
                if private_file {
                    let bytes = std::fs::read(&path).map_err(io_error)?;
                    if let Ok(key) = <[u8; KEY_BYTES]>::try_from(bytes.as_slice()) {
                        return Ok(key);
                    }
                }
                tracing::warn!(key = %path.display(), "compile cache key is not a private 32-byte file of this user: replaced (every entry will be recompiled)");
                let key = random_key()?;
                private::write_file_atomic(&path, &key).map_err(io_error)?;
                return Ok(key);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = random_key()?;
                if private::create_file_atomic(&path, &key).map_err(io_error)? {
                    return Ok(key);
                }
                // Another process created it first: read theirs.
            }
            Err(error) => return Err(io_error(error)),
        }
    }
    Err(io_error(std::io::Error::other(
        "it keeps appearing and disappearing",
    )))
}

fn random_key() -> Result<[u8; KEY_BYTES], KeyError> {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key).map_err(KeyError::Random)?;
    Ok(key)
}

/// Writes an entry so a reader never sees half of it: temp files, then renames (the
/// tag last, so an entry without its tag is corrupt, never trusted). Files are 0600.
fn store_entry(
    dir: &Path,
    code_path: &Path,
    tag_path: &Path,
    code: &[u8],
    tag: &str,
) -> std::io::Result<()> {
    private::create_dir_all(dir)?;
    private::write_file_atomic(code_path, code)?;
    private::write_file_atomic(tag_path, tag.as_bytes())?;
    // The unkeyed checksum sidecar of older versions means nothing any more.
    let _ = std::fs::remove_file(code_path.with_extension("sha256"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "ab12";
    const ENGINE: &str = "0011223344556677";

    #[test]
    fn a_tag_verifies_only_for_its_key_identity_and_bytes() {
        let key = [7u8; KEY_BYTES];
        let good = tag(&key, DIGEST, ENGINE, b"code");
        assert!(verify(&key, DIGEST, ENGINE, b"code", &good));
        assert!(!verify(&key, DIGEST, ENGINE, b"code!", &good));
        assert!(!verify(&key, "cd34", ENGINE, b"code", &good));
        assert!(!verify(&key, DIGEST, "ffffffffffffffff", b"code", &good));
        assert!(!verify(&[8u8; KEY_BYTES], DIGEST, ENGINE, b"code", &good));
        assert!(!verify(
            &key,
            DIGEST,
            ENGINE,
            b"code",
            &good[..good.len() - 2]
        ));
        assert!(!verify(&key, DIGEST, ENGINE, b"code", "not hex"));
        // The SHA-256 an attacker can compute is no tag.
        let sha = crate::engine::plugin::digest(b"code");
        assert!(!verify(&key, DIGEST, ENGINE, b"code", &sha));
    }

    #[test]
    fn the_key_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let first = load_or_create_key(&cache).unwrap();
        let second = load_or_create_key(&cache).unwrap();
        assert_eq!(first, second);
        assert_ne!(first, [0u8; KEY_BYTES]);
        assert_eq!(private::mode_of(&cache.join(KEY_FILE)).unwrap(), 0o600);
        assert_eq!(private::mode_of(&cache).unwrap(), 0o700);
    }

    #[test]
    fn a_key_others_can_read_is_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_key(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let second = load_or_create_key(dir.path()).unwrap();
        assert_ne!(first, second);
        assert_eq!(private::mode_of(&path).unwrap(), 0o600);
    }
}
