//! The compiled-component cache: compiled machine code on disk, keyed by the
//! component's SHA-256 and the engine's configuration, so a restart or a reload of an
//! unchanged file does not recompile. Loading an entry loads native code, so every
//! entry is authenticated: its sidecar holds an HMAC-SHA256, under a per-user secret
//! key (`cache/key`, 32 random bytes, 0600), of the entry's identity (component digest
//! and engine key) and its bytes. An entry whose tag does not verify (truncated,
//! corrupted, copied from another entry, tampered with by anyone without the key) is
//! never deserialized: it is recompiled and rewritten. An entry is read once through a
//! descriptor to check its tag, then mapped from that descriptor: its code is shared
//! with the page cache, and only the pages that run are resident.
//!
//! Plugins loaded from the same bytes (one component under several names, or a reload
//! of an unchanged file while the old version still serves) share one compiled
//! component while any of them lives: one copy of its code and of its memory image,
//! each instance still its own. Measured (`cargo bench --bench pipeline`, five guards
//! that are one component under five names): the chain cost 9.5-11.1 µs more than five
//! calls of one guard when each name had its own copy, 0.1-3.0 µs with one copy.
//!
//! Loading compiled code is `unsafe` (wasmtime cannot check it): this module decides
//! what it vouches for, and the launch platform loads it ([`dsh_launch::compiled`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use dsh_launch::compiled;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use wasmtime::component::Component;
use wasmtime::Engine;

use super::plugin::ComponentBytes;
use crate::private;

/// Bytes of the secret key.
const KEY_BYTES: usize = private::SECRET_KEY_BYTES;
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
    /// Already loaded from the same bytes (for a plugin still loaded): shared.
    Shared,
    /// Loaded from an authenticated entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// No entry: the code precompiled when dsh was built fits this engine, stored and
    /// mapped (an embedded component's first load).
    Precompiled,
    /// An entry failed authentication (or did not deserialize): replaced (by the code
    /// precompiled when dsh was built where it fits, else compiled).
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
    /// The components loaded now, by digest: held by their plugins, gone with the last.
    loaded: Arc<Mutex<HashMap<String, Weak<Component>>>>,
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
            loaded: Arc::default(),
        }
    }

    /// The engine's part of every entry's name: its compatibility hash and dsh's
    /// version, hashed.
    pub fn engine_key(&self) -> &str {
        &self.engine_key
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
            .get_or_init(|| {
                load_or_create_key(dir)
                    .map_err(|e| format!("compile cache key in {}: {e}", dir.display()))
            })
            .as_ref()
            .copied()
            .map_err(String::as_str)
    }

    /// The compiled `component`: the one already loaded from the same bytes if a
    /// plugin still holds it, else from the cache when an authenticated entry exists,
    /// else compiled. Blocking: call off the async threads.
    pub fn load(
        &self,
        engine: &Engine,
        component: &ComponentBytes,
    ) -> wasmtime::Result<(Arc<Component>, CacheOutcome)> {
        let digest = component.digest();
        if let Some(shared) = self.loaded_now(digest) {
            return Ok((shared, CacheOutcome::Shared));
        }
        let (compiled, outcome) = self.compile_or_map(engine, component)?;
        let compiled = Arc::new(compiled);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|_, component| component.strong_count() > 0);
        loaded.insert(digest.to_string(), Arc::downgrade(&compiled));
        Ok((compiled, outcome))
    }

    /// The component loaded from the bytes of SHA-256 `digest`, if a plugin holds it.
    fn loaded_now(&self, digest: &str) -> Option<Arc<Component>> {
        let loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.get(digest).and_then(Weak::upgrade)
    }

    fn compile_or_map(
        &self,
        engine: &Engine,
        component: &ComponentBytes,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(dir) = &self.dir else {
            return Ok((without_cache(engine, component)?, CacheOutcome::Disabled));
        };
        let key = match self.key(dir) {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "no compile cache key: compiling without the cache");
                return Ok((without_cache(engine, component)?, CacheOutcome::Disabled));
            }
        };
        let entry = Entry::new(self, dir, component.digest(), &key);
        let outcome = match entry.map(engine) {
            Ok(compiled) => return Ok((compiled, CacheOutcome::Hit)),
            Err(EntryError::Missing) => CacheOutcome::Miss,
            Err(error) => {
                tracing::warn!(%error, entry = %entry.code_path.display(), "compile cache entry discarded: recompiling");
                CacheOutcome::Corrupt
            }
        };
        if let Some(code) = component.precompiled() {
            // Stored as any entry, then mapped through the same checks: wasmtime refuses
            // code that does not fit this engine, and it is compiled below instead.
            let tag = tag(&key, component.digest(), &self.engine_key, code);
            match store_entry(dir, &entry.code_path, &entry.tag_path, code, &tag) {
                Ok(()) => match entry.map_just_written(engine) {
                    Ok(compiled) if outcome == CacheOutcome::Corrupt => {
                        return Ok((compiled, outcome))
                    }
                    Ok(compiled) => return Ok((compiled, CacheOutcome::Precompiled)),
                    Err(error) => {
                        tracing::info!(%error, "the code precompiled when dsh was built does not fit this machine: compiling");
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, dir = %dir.display(), "cannot write the compile cache");
                    return Ok((without_cache(engine, component)?, outcome));
                }
            }
        }
        let code = engine.precompile_component(component.bytes())?;
        let tag = tag(&key, component.digest(), &self.engine_key, &code);
        match store_entry(dir, &entry.code_path, &entry.tag_path, &code, &tag) {
            // Mapped from the file just written, so its code is shared with the page
            // cache and only what runs is resident.
            Ok(()) => match entry.map_just_written(engine) {
                Ok(compiled) => return Ok((compiled, outcome)),
                Err(error) => {
                    tracing::warn!(%error, entry = %entry.code_path.display(), "compile cache entry just written does not load: using the compiled code in memory");
                }
            },
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "cannot write the compile cache");
            }
        }
        // Vouched for: `code` was just produced by this engine.
        let compiled = compiled::load(engine, &code)?;
        Ok((compiled, outcome))
    }
}

/// `component` without the cache: its precompiled code where wasmtime finds that it
/// fits `engine`, else compiled.
fn without_cache(engine: &Engine, component: &ComponentBytes) -> wasmtime::Result<Component> {
    if let Some(code) = component.precompiled() {
        // Vouched for: the code is part of this binary: wasmtime of this very version made it
        // when the binary was built, from these component bytes, and checks here that it
        // was made for an engine like this one (target, CPU features, settings).
        match compiled::load(engine, code) {
            Ok(compiled) => return Ok(compiled),
            Err(error) => {
                tracing::info!(error = %format!("{error:#}"), "the code precompiled when dsh was built does not fit this machine: compiling");
            }
        }
    }
    Component::new(engine, component.bytes())
}

/// Why an entry was not loaded.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error("no entry")]
    Missing,
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    #[error("it fails authentication (truncated, corrupted or tampered with)")]
    Unauthentic,
    #[error("it does not deserialize: {0}")]
    Deserialize(wasmtime::Error),
}

/// One component's entry in the cache: its code file and its tag's sidecar.
struct Entry<'a> {
    code_path: PathBuf,
    tag_path: PathBuf,
    component_digest: &'a str,
    engine_key: &'a str,
    key: &'a [u8; KEY_BYTES],
}

impl<'a> Entry<'a> {
    fn new(
        cache: &'a ComponentCache,
        dir: &Path,
        component_digest: &'a str,
        key: &'a [u8; KEY_BYTES],
    ) -> Self {
        let (code_path, tag_path) = cache.entry(dir, component_digest);
        Entry {
            code_path,
            tag_path,
            component_digest,
            engine_key: &cache.engine_key,
            key,
        }
    }

    /// The entry's compiled component, mapped from its file once the file's bytes,
    /// read through the same descriptor, carry a valid tag. Nothing is copied: the
    /// code stays in the page cache and only the pages that run are resident.
    fn map(&self, engine: &Engine) -> Result<Component, EntryError> {
        match std::fs::File::open(&self.code_path) {
            Ok(file) => self.load_open(engine, &file),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(EntryError::Missing),
            Err(error) => Err(EntryError::Read(error)),
        }
    }

    /// The entry this process has just written, mapped without reading it again to
    /// check its tag (computed over the very bytes written): a second pass of SHA-256
    /// over megabytes of code was a quarter of a first start's CPU. Only a writer with
    /// this user's rights could have replaced it since, and such a writer can read the
    /// key. Where it cannot be mapped (a `noexec` cache), [`Self::map`] loads a checked
    /// copy.
    fn map_just_written(&self, engine: &Engine) -> Result<Component, EntryError> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&self.code_path).map_err(EntryError::Read)?;
        let same_file = format!("/proc/self/fd/{}", file.as_raw_fd());
        // Vouched for: this process wrote these bytes a moment ago (code this engine compiled,
        // or the binary's own precompiled code, which wasmtime checks against the engine
        // as it maps it); see `load_open` for who else could change the file.
        match compiled::map(engine, Path::new(&same_file)) {
            Ok(component) => Ok(component),
            Err(_) => self.load_open(engine, &file),
        }
    }

    /// [`Self::map`] for the entry's opened `file`. A file that cannot be mapped
    /// executable (a cache on a `noexec` mount) is read whole, checked again and copied
    /// instead: it is loaded, not recompiled at every start.
    fn load_open(&self, engine: &Engine, file: &std::fs::File) -> Result<Component, EntryError> {
        use std::os::fd::AsRawFd;
        let tag_hex = std::fs::read_to_string(&self.tag_path).unwrap_or_default();
        let tag_hex = tag_hex.trim();
        let authentic = |code: &mut dyn std::io::Read| {
            verify(
                self.key,
                self.component_digest,
                self.engine_key,
                code,
                tag_hex,
            )
            .map_err(EntryError::Read)
        };
        let mut reader = file;
        if !authentic(&mut reader)? {
            return Err(EntryError::Unauthentic);
        }
        // The descriptor's own file (a path could name another by now).
        let same_file = format!("/proc/self/fd/{}", file.as_raw_fd());
        // Vouched for: the file's bytes carry a valid tag under this user's secret key over
        // this entry's identity and content: this process's engine configuration (the
        // key includes its compatibility hash) wrote them for this component, or they
        // are the code this binary carries for it (precompiled when it was built, and
        // checked by wasmtime against this engine as it is mapped). Entries
        // are replaced by rename, never written in place; a writer with this user's
        // rights could still change the file under the mapping, but such a writer can
        // read the key as well, which the tag never defended against.
        let map_error = match compiled::map(engine, Path::new(&same_file)) {
            Ok(component) => return Ok(component),
            Err(error) => error,
        };
        tracing::debug!(error = %format!("{map_error:#}"), entry = %self.code_path.display(), "compile cache entry cannot be mapped: loading a copy");
        let code = std::fs::read(&same_file).map_err(EntryError::Read)?;
        if !authentic(&mut code.as_slice())? {
            return Err(EntryError::Unauthentic);
        }
        // Vouched for: as above, for these very bytes (checked after they were read).
        compiled::load(engine, &code).map_err(EntryError::Deserialize)
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

/// True when `tag_hex` is the tag of the entry whose bytes `code` reads (compared in
/// constant time). The bytes are read in chunks, never held whole.
fn verify(
    key: &[u8; KEY_BYTES],
    component_digest: &str,
    engine_key: &str,
    mut code: impl std::io::Read,
    tag_hex: &str,
) -> std::io::Result<bool> {
    let Some(tag) = unhex(tag_hex) else {
        return Ok(false);
    };
    let mut mac = mac(key, component_digest, engine_key, &[]);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match code.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => mac.update(&chunk[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(mac.verify_slice(&tag).is_ok())
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
/// Reads `dir/key`, or creates it ([`private::secret_key`]). A key replaced because it
/// was not private makes every entry recompile: entries tagged under a key anyone else
/// could have read or chosen are not trusted.
fn load_or_create_key(dir: &Path) -> std::io::Result<[u8; KEY_BYTES]> {
    private::create_dir_all(dir)?;
    let path = dir.join(KEY_FILE);
    let (key, replaced) = private::secret_key(&path)?;
    if replaced {
        tracing::warn!(key = %path.display(), "compile cache key is not a private 32-byte file of this user: replaced (every entry will be recompiled)");
    }
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
        let verifies =
            |key: &[u8; KEY_BYTES], digest: &str, engine: &str, code: &[u8], tag: &str| {
                verify(key, digest, engine, code, tag).unwrap()
            };
        assert!(verifies(&key, DIGEST, ENGINE, b"code", &good));
        assert!(!verifies(&key, DIGEST, ENGINE, b"code!", &good));
        assert!(!verifies(&key, "cd34", ENGINE, b"code", &good));
        assert!(!verifies(&key, DIGEST, "ffffffffffffffff", b"code", &good));
        assert!(!verifies(&[8u8; KEY_BYTES], DIGEST, ENGINE, b"code", &good));
        assert!(!verifies(
            &key,
            DIGEST,
            ENGINE,
            b"code",
            &good[..good.len() - 2]
        ));
        assert!(!verifies(&key, DIGEST, ENGINE, b"code", "not hex"));
        // The SHA-256 an attacker can compute is no tag.
        let sha = crate::engine::plugin::digest(b"code");
        assert!(!verifies(&key, DIGEST, ENGINE, b"code", &sha));
        // Read in chunks: a tag over more than one chunk verifies too.
        let long = vec![3u8; 200 << 10];
        let long_tag = tag(&key, DIGEST, ENGINE, &long);
        assert!(verifies(&key, DIGEST, ENGINE, &long, &long_tag));
    }

    /// A hit maps the entry's file (its code shared with the page cache, resident
    /// only where it runs), and so does a miss once the entry is written; a tampered
    /// entry is neither mapped nor loaded.
    #[test]
    fn entries_are_mapped_from_their_files_after_their_tags_verify() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ComponentCache::new(&engine, Some(dir.path().to_path_buf()));
        let component = crate::engine::embedded::component("redact_secrets").unwrap();
        let digest = component.digest();
        let mapped = |code_path: &Path| {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.lines()
                .filter(|line| line.ends_with(&*code_path.to_string_lossy()))
                .count()
        };
        let key = cache.key(dir.path()).unwrap();
        let code_path = Entry::new(&cache, dir.path(), digest, &key).code_path;

        let (missed, outcome) = cache.load(&engine, &component).unwrap();
        assert_eq!(outcome, CacheOutcome::Miss);
        let mappings = mapped(&code_path);
        assert!(mappings > 0, "a fresh entry is mapped from its file");
        // Loaded again while the first is held: the same component, mapped once.
        let (shared, outcome) = cache.load(&engine, &component).unwrap();
        assert_eq!(outcome, CacheOutcome::Shared);
        assert!(Arc::ptr_eq(&missed, &shared));
        assert_eq!(mapped(&code_path), mappings, "mapped once for both");
        drop((missed, shared));
        assert_eq!(mapped(&code_path), 0, "unmapped with its components");
        // Once nothing holds it, a load maps the entry again.
        let (hit, outcome) = cache.load(&engine, &component).unwrap();
        assert_eq!(outcome, CacheOutcome::Hit);
        assert!(mapped(&code_path) > 0);
        drop(hit);
        assert_eq!(mapped(&code_path), 0);

        let mut code = std::fs::read(&code_path).unwrap();
        let last = code.len() - 1;
        code[last] ^= 1;
        std::fs::write(&code_path, &code).unwrap();
        let entry = Entry::new(&cache, dir.path(), digest, &key);
        assert!(matches!(entry.map(&engine), Err(EntryError::Unauthentic)));
        assert_eq!(mapped(&code_path), 0, "a tampered entry is never mapped");
        let (_, outcome) = cache.load(&engine, &component).unwrap();
        assert_eq!(outcome, CacheOutcome::Corrupt);
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
