//! What a capability hands the next binary at an upgrade (`dsh upgrade`, see
//! `crate::upgrade`), through the hooks of [`Capability`](super::Capability): it pauses,
//! hands over its entries of the snapshot (JSON under keys of its own: `terminals`,
//! `jobs`, …), and, in the next binary, names the descriptors and processes they hold,
//! checks that it can read them, and rebuilds from them: records first (what the others
//! attach their processes to), then processes. The snapshot's layout is the union of
//! the entries, so a capability is added or removed without the upgrade naming it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;

use dsh_launch::Child;

/// The capabilities' entries of a snapshot, by key.
pub type Handed = serde_json::Map<String, serde_json::Value>;

/// The processes a snapshot names, adopted as the new binary's children before anything
/// could reap them; those no capability takes back are killed when dropped.
pub type Adopted = HashMap<i32, Child>;

/// A boxed future of a handover step.
pub type HandoverFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a capability cannot hand over now.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// Something it holds cannot be handed over now (a job that does not pause).
    #[error("no upgrade: {0}")]
    Blocked(String),
    /// One of its things cannot be handed over (a terminal session, saying which).
    #[error("{0}")]
    Refused(String),
    #[error("cannot write the snapshot: {0}")]
    Write(#[from] std::io::Error),
}

/// The entry `key` of `handed` (its default when the binary before had none), or why it
/// cannot be read.
pub fn entry<T: DeserializeOwned + Default>(handed: &Handed, key: &str) -> Result<T, String> {
    match handed.get(key) {
        None => Ok(T::default()),
        Some(value) => T::deserialize(value).map_err(|e| format!("its `{key}`: {e}")),
    }
}

/// The entry `key` of `handed`, already checked ([`entry`] in the check run before the
/// exec); what cannot be read is logged and taken as none.
pub fn checked_entry<T: DeserializeOwned + Default>(handed: &Handed, key: &str) -> T {
    entry(handed, key).unwrap_or_else(|why| {
        tracing::error!(%why, "a snapshot entry cannot be read; nothing of it is taken over");
        T::default()
    })
}

/// `value` as a snapshot entry under `key`.
pub fn to_entry(
    key: &'static str,
    value: &impl serde::Serialize,
) -> Result<(&'static str, serde_json::Value), HandoverError> {
    let value = serde_json::to_value(value).map_err(std::io::Error::other)?;
    Ok((key, value))
}
