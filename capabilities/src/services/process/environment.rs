//! The environment commands get (bash, background jobs, terminals): built once from the
//! host's environment by the `[process.env]` policy, so no secret of the host reaches a
//! command unless the operator passes it on purpose.
//!
//! A host variable is passed when no `exclude` glob matches its name, and either an
//! `include` glob matches it, or it is a candidate (`inherit = "safe"`: every variable;
//! `inherit = "none"`: the [`CORE`] variables) whose name does not look secret
//! ([`SECRET_NAMES`]). Then `set` puts its values in, replacing any of the same name.
//! Every glob (`*` matches any run of characters) matches names case-insensitively.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use serde::Deserialize;

use crate::glob::glob_match;

/// Names that look secret (case-insensitive globs): dropped unless `include` names them.
/// `DSH_*` keeps dsh's own settings (the HTTP bearer token `DSH_HTTP_TOKEN` first) from
/// the commands it runs.
pub const SECRET_NAMES: &[&str] = &[
    "*TOKEN*",
    "*SECRET*",
    "*KEY*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*PRIVATE*",
    "DSH_*",
];

/// What `inherit = "none"` keeps (globs, matched case-insensitively): enough for a shell,
/// its tools and their locale to work.
pub const CORE: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TMPDIR", "TZ",
];

/// `[process.env]` in `dsh.toml`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EnvPolicy {
    /// `safe`: the host's variables except those whose names look secret; `none`: only
    /// a minimal core (PATH, HOME, LANG, TERM, ...).
    pub inherit: Inherit,
    /// Name globs passed from the host even when they look secret (or, with `none`,
    /// outside the core).
    pub include: Vec<String>,
    /// Name globs never passed from the host (this wins over `include`).
    pub exclude: Vec<String>,
    /// Variables set to these values, after everything else.
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
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Every variable except those whose names look secret.
    #[default]
    Safe,
    /// Only a minimal core.
    None,
}

impl EnvPolicy {
    /// Checks the policy at config load; the error names the key (`process.env.…`).
    pub fn check(&self) -> Result<(), String> {
        for (key, globs) in [("include", &self.include), ("exclude", &self.exclude)] {
            for (index, glob) in globs.iter().enumerate() {
                if glob.is_empty() {
                    return Err(format!("process.env.{key}[{index}]: empty pattern"));
                }
                if glob.contains(['=', '\0']) {
                    return Err(format!(
                        "process.env.{key}[{index}]: pattern {glob:?} contains `=` or a NUL byte"
                    ));
                }
            }
        }
        for (name, value) in &self.set {
            if name.is_empty() {
                return Err("process.env.set: empty variable name".to_string());
            }
            if name.contains(['=', '\0']) {
                return Err(format!(
                    "process.env.set: variable name {name:?} contains `=` or a NUL byte"
                ));
            }
            if value.contains('\0') {
                return Err(format!(
                    "process.env.set.{name}: the value contains a NUL byte"
                ));
            }
        }
        Ok(())
    }

    /// Whether the host variable `name` is passed (before `set`).
    pub fn passes(&self, name: &str) -> bool {
        let name = name.to_uppercase();
        if matches_any(&self.exclude, &name) {
            return false;
        }
        if matches_any(&self.include, &name) {
            return true;
        }
        let candidate = match self.inherit {
            Inherit::Safe => true,
            Inherit::None => matches_any(CORE, &name),
        };
        candidate && !matches_any(SECRET_NAMES, &name)
    }
}

/// Whether any of `globs` matches the upper-cased `name`, case-insensitively.
fn matches_any(globs: &[impl AsRef<str>], name: &str) -> bool {
    globs
        .iter()
        .any(|glob| glob_match(&glob.as_ref().to_uppercase(), name))
}

/// The variables a command gets, as `(NAME, NAME=VALUE)`, from the host's `vars` by
/// `policy`: the host's variables it passes, in their order, then its `set` variables.
pub fn command_environment(
    policy: &EnvPolicy,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(Vec<u8>, CString)> {
    let entry = |key: &[u8], value: &[u8]| {
        let mut entry = key.to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value);
        Some((key.to_vec(), CString::new(entry).ok()?))
    };
    let inherited = vars.into_iter().filter_map(|(key, value)| {
        let name = key.to_string_lossy();
        if !policy.passes(&name) || policy.set.contains_key(name.as_ref()) {
            tracing::trace!(variable = %name, "not passed to commands");
            return None;
        }
        entry(key.as_bytes(), value.as_bytes())
    });
    let set = policy
        .set
        .iter()
        .filter_map(|(key, value)| entry(key.as_bytes(), value.as_bytes()));
    inherited.chain(set).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/me"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("TERM", "xterm"),
            ("USER", "me"),
            ("EDITOR", "vi"),
            ("DSH_HTTP_TOKEN", "bearer"),
            ("DSH_STATE_DIR", "/state"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("AWS_ACCESS_KEY_ID", "akid"),
            ("github_token", "ghp"),
            ("OPENAI_API_KEY", "sk"),
            ("PGPASSWORD", "pg"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/creds.json"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn environment(policy: &EnvPolicy) -> BTreeMap<String, String> {
        command_environment(policy, host())
            .into_iter()
            .map(|(key, entry)| {
                let entry = entry.into_string().unwrap();
                let key = String::from_utf8(key).unwrap();
                let value = entry.strip_prefix(&format!("{key}=")).unwrap().to_string();
                (key, value)
            })
            .collect()
    }

    fn names(policy: &EnvPolicy) -> Vec<String> {
        environment(policy).into_keys().collect()
    }

    fn policy(text: &str) -> EnvPolicy {
        let policy: EnvPolicy = toml::from_str(text).unwrap();
        policy.check().unwrap();
        policy
    }

    #[test]
    fn safe_drops_secret_looking_names_and_keeps_the_rest() {
        assert_eq!(
            names(&EnvPolicy::default()),
            [
                "EDITOR",
                "HOME",
                "LANG",
                "LC_ALL",
                "PATH",
                "SSH_AUTH_SOCK",
                "TERM",
                "USER"
            ]
        );
    }

    #[test]
    fn secret_names_match_case_insensitively() {
        let policy = EnvPolicy::default();
        assert!(!policy.passes("github_token"));
        assert!(!policy.passes("Api_Key"));
        assert!(!policy.passes("dsh_http_token"));
        assert!(!policy.passes("MYSQL_PWD_PASSWD"));
        assert!(!policy.passes("SSH_PRIVATE_KEY_PATH"));
        assert!(policy.passes("Editor"));
    }

    #[test]
    fn no_core_variable_looks_secret() {
        for core in CORE {
            let name = core.replace('*', "ALL");
            assert!(
                EnvPolicy::default().passes(&name),
                "{name} is in the core but looks secret"
            );
        }
    }

    #[test]
    fn none_keeps_only_the_core() {
        assert_eq!(
            names(&policy("inherit = \"none\"")),
            ["HOME", "LANG", "LC_ALL", "PATH", "TERM", "USER"]
        );
    }

    #[test]
    fn include_passes_a_secret_looking_name_and_adds_to_the_core() {
        let safe = environment(&policy("include = [\"aws_secret_*\"]"));
        assert_eq!(safe["AWS_SECRET_ACCESS_KEY"], "aws");
        assert!(!safe.contains_key("AWS_ACCESS_KEY_ID"));
        let none = names(&policy(
            "inherit = \"none\"\ninclude = [\"EDITOR\", \"DSH_STATE_DIR\"]",
        ));
        assert_eq!(
            none,
            [
                "DSH_STATE_DIR",
                "EDITOR",
                "HOME",
                "LANG",
                "LC_ALL",
                "PATH",
                "TERM",
                "USER"
            ]
        );
    }

    #[test]
    fn exclude_wins_over_include_and_the_core() {
        let names = names(&policy(
            "include = [\"*TOKEN*\"]\nexclude = [\"DSH_*\", \"path\", \"LC_*\"]",
        ));
        assert!(names.contains(&"github_token".to_string()), "{names:?}");
        assert!(!names.contains(&"DSH_HTTP_TOKEN".to_string()), "{names:?}");
        assert!(!names.contains(&"PATH".to_string()), "{names:?}");
        assert!(!names.contains(&"LC_ALL".to_string()), "{names:?}");
    }

    #[test]
    fn set_replaces_and_adds_after_everything_else() {
        let env = environment(&policy(
            "exclude = [\"EDITOR\"]\n[set]\nPATH = \"/opt/bin\"\nEDITOR = \"nano\"\nNEW_ONE = \"x=y\"",
        ));
        assert_eq!(env["PATH"], "/opt/bin");
        assert_eq!(env["EDITOR"], "nano");
        assert_eq!(env["NEW_ONE"], "x=y");
        let entries = command_environment(&policy("[set]\nPATH = \"/opt/bin\""), host());
        assert_eq!(
            entries.iter().filter(|(key, _)| key == b"PATH").count(),
            1,
            "a set variable appears once"
        );
    }

    #[test]
    fn a_name_that_is_not_utf8_is_matched_on_its_lossy_form_and_kept_raw() {
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(b"ODD_\xffNAME".to_vec());
        let secret = OsString::from_vec(b"X_\xff_TOKEN".to_vec());
        let env = command_environment(
            &EnvPolicy::default(),
            [(odd, "1".into()), (secret, "2".into())],
        );
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].0, b"ODD_\xffNAME");
        assert_eq!(env[0].1.as_bytes(), b"ODD_\xffNAME=1");
    }

    #[test]
    fn bad_set_names_and_empty_globs_are_errors_naming_the_key() {
        let error = |text: &str| {
            toml::from_str::<EnvPolicy>(text)
                .unwrap()
                .check()
                .unwrap_err()
        };
        assert!(error("[set]\n\"\" = \"x\"").contains("process.env.set"));
        assert!(error("[set]\n\"A=B\" = \"x\"").contains("\"A=B\""));
        assert!(error("[set]\n\"A\\u0000\" = \"x\"").contains("process.env.set"));
        assert!(error("[set]\nA = \"x\\u0000\"").contains("process.env.set.A"));
        assert!(error("include = [\"\"]").contains("process.env.include[0]"));
        assert!(error("exclude = [\"A\", \"\"]").contains("process.env.exclude[1]"));
    }
}
