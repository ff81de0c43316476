//! The compiled-component cache: compiled machine code on disk, keyed by the
//! component's SHA-256 and the engine's configuration, so a restart or a reload of an
//! unchanged file does not recompile. Every entry carries the SHA-256 of its own bytes;
//! an entry that does not match (truncated, corrupted, tampered with) is never
//! deserialized: it is recompiled and rewritten.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

use super::plugin::digest;

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a verified entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry failed verification: compiled and replaced.
    Corrupt,
    /// No cache directory configured: compiled.
    Disabled,
}

/// The on-disk cache of compiled components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
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
        }
    }

    fn entry(&self, dir: &Path, component_digest: &str) -> (PathBuf, PathBuf) {
        let stem = format!("{component_digest}-{}", self.engine_key);
        (
            dir.join(format!("{stem}.cwasm")),
            dir.join(format!("{stem}.sha256")),
        )
    }

    /// The compiled component for `bytes` (whose SHA-256 is `component_digest`), from
    /// the cache when a verified entry exists. Blocking: call off the async threads.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        component_digest: &str,
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, bytes)?, CacheOutcome::Disabled));
        };
        let (code_path, sum_path) = self.entry(dir, component_digest);
        let outcome = match (
            std::fs::read(&code_path),
            std::fs::read_to_string(&sum_path),
        ) {
            (Ok(code), Ok(sum)) if digest(&code) == sum.trim() => {
                // SAFETY: the bytes are what this process's engine configuration wrote
                // (the key includes its compatibility hash), verified against the
                // SHA-256 stored beside them.
                match unsafe { Component::deserialize(engine, &code) } {
                    Ok(component) => return Ok((component, CacheOutcome::Hit)),
                    Err(error) => {
                        tracing::warn!(%error, path = %code_path.display(), "cache entry does not deserialize");
                        CacheOutcome::Corrupt
                    }
                }
            }
            (Err(_), _) => CacheOutcome::Miss,
            _ => CacheOutcome::Corrupt,
        };
        let code = engine.precompile_component(bytes)?;
        // SAFETY: `code` was just produced by this engine.
        let component = unsafe { Component::deserialize(engine, &code)? };
        if let Err(error) = store_entry(dir, &code_path, &sum_path, &code) {
            tracing::warn!(%error, dir = %dir.display(), "cannot write the compile cache");
        }
        Ok((component, outcome))
    }
}

/// Writes an entry so a reader never sees half of it: temp files, then renames (the
/// checksum last, so an entry without one is a miss or corrupt, never trusted).
fn store_entry(dir: &Path, code_path: &Path, sum_path: &Path, code: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let unique = format!("{}.{:?}", std::process::id(), std::thread::current().id());
    let code_tmp = code_path.with_extension(format!("tmp.{unique}"));
    std::fs::write(&code_tmp, code)?;
    std::fs::rename(&code_tmp, code_path)?;
    let sum_tmp = sum_path.with_extension(format!("tmp.{unique}"));
    std::fs::write(&sum_tmp, digest(code))?;
    std::fs::rename(&sum_tmp, sum_path)
}
