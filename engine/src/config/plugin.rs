//! `[plugins.NAME]` in `dsh.toml`: one plugin's bounds, settings and grants (host
//! interfaces, environment, network patterns, directories), and the network pattern
//! syntax (`HOST:PORT`, CIDR blocks through `ipnet`), and the kinds of plugin (what
//! `[pipeline]` names each must be). The engine resolves these into a
//! plugin's effective grants (`engine::grants`).

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::Deserialize;

use crate::services::capabilities;

/// One plugin's bounds and settings.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Guest CPU time per call, in milliseconds (time spent in host calls is not counted).
    pub cpu_ms: Option<u64>,
    /// Linear memory cap in MiB.
    pub memory_mb: Option<u64>,
    /// The execute stage's timeout for this plugin's tools.
    pub timeout_ms: Option<u64>,
    /// Free-form settings handed to the plugin as JSON in its call context.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub settings: toml::Table,
    /// Host interfaces the plugin may import; `None` takes the embedded plugin's
    /// defaults (none for any other plugin).
    pub interfaces: Option<Vec<String>>,
    /// Environment variables the plugin sees, by key, with the host's values.
    #[serde(default)]
    pub env: Vec<String>,
    /// `HOST:PORT` patterns the plugin may connect (and send datagrams) to.
    #[serde(default, alias = "connect")]
    pub network: Vec<String>,
    /// `HOST:PORT` patterns the plugin may bind and listen on.
    #[serde(default)]
    pub bind: Vec<String>,
    /// Any host name may be looked up (else only those the patterns name).
    #[serde(default)]
    pub dns: bool,
    /// Directories mapped into the plugin.
    #[serde(default)]
    pub fs: Vec<FsGrant>,
}

/// A directory granted to a plugin.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FsGrant {
    /// The host directory (absolute).
    pub path: std::path::PathBuf,
    /// Where the plugin sees it; the same path by default.
    pub guest: Option<String>,
    /// Read-only (`ro`) or read-write (`rw`).
    pub mode: FsMode,
}

/// Read-only or read-write.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
pub enum FsMode {
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

/// Default guest CPU budget per call.
pub const DEFAULT_CPU_MS: u64 = 10_000;
/// Default guest CPU budget per call of a guard or result filter: they decide, they do
/// not work.
pub const DEFAULT_GUARD_CPU_MS: u64 = 1_000;
/// Default linear memory cap per plugin instance.
pub const DEFAULT_MEMORY_MB: u64 = 64;

impl PluginConfig {
    /// Checks what can be checked without loading the plugin.
    pub(super) fn check(&self) -> Result<(), String> {
        for interface in self.interfaces.iter().flatten() {
            if !capabilities::NAMES.contains(&interface.as_str()) {
                return Err(format!(
                    "unknown interface {interface:?} in `interfaces` (grantable: {})",
                    capabilities::NAMES.join(", ")
                ));
            }
        }
        for (key, patterns) in [("network", &self.network), ("bind", &self.bind)] {
            for pattern in patterns {
                AddressPattern::parse(pattern)
                    .map_err(|e| format!("{key} pattern {pattern:?}: {e}"))?;
            }
        }
        for grant in &self.fs {
            if !grant.path.is_absolute() {
                return Err(format!("fs path {} must be absolute", grant.path.display()));
            }
            if grant.guest.as_deref().is_some_and(|g| !g.starts_with('/')) {
                return Err(format!(
                    "fs guest path {:?} must be absolute",
                    grant.guest.as_deref().unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

/// One `HOST:PORT` network grant, host names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPattern {
    /// `None`: any address.
    net: Option<IpNet>,
    /// `None`: any port.
    port: Option<u16>,
}

/// A parsed pattern whose host may still be a name.
pub enum ParsedPattern {
    Resolved(AddressPattern),
    Name { host: String, port: Option<u16> },
}

impl AddressPattern {
    /// Any address on `port` (`None`: any port).
    pub fn any_address(port: Option<u16>) -> Self {
        AddressPattern { net: None, port }
    }

    /// Exactly `ip` on `port` (`None`: any port).
    pub fn exact(ip: IpAddr, port: Option<u16>) -> Self {
        AddressPattern {
            net: Some(IpNet::from(ip)),
            port,
        }
    }

    /// Parses `HOST:PORT` (see `dsh.toml`'s documentation); names are not looked up.
    pub fn parse(text: &str) -> Result<ParsedPattern, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or("expected HOST:PORT (use `*` for any port)")?;
        let port = match port {
            "*" => None,
            number => Some(
                number
                    .parse::<u16>()
                    .map_err(|_| format!("port {number:?} is not a number or `*`"))?,
            ),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host == "*" {
            return Ok(ParsedPattern::Resolved(AddressPattern::any_address(port)));
        }
        let (addr, prefix) = match host.split_once('/') {
            Some((addr, bits)) => (
                addr,
                Some(
                    bits.parse::<u8>()
                        .map_err(|_| format!("prefix length {bits:?} is not a number"))?,
                ),
            ),
            None => (host, None),
        };
        match addr.parse::<IpAddr>() {
            Ok(ip) => {
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let prefix = prefix.unwrap_or(max);
                let net = IpNet::new(ip, prefix)
                    .map_err(|_| format!("prefix length {prefix} is longer than {max}"))?;
                Ok(ParsedPattern::Resolved(AddressPattern {
                    net: Some(net),
                    port,
                }))
            }
            Err(_)
                if prefix.is_none() && !host.is_empty() && !host.contains(char::is_whitespace) =>
            {
                Ok(ParsedPattern::Name {
                    host: host.to_string(),
                    port,
                })
            }
            Err(_) => Err(format!(
                "{host:?} is not an address, a CIDR block, `*` or a host name"
            )),
        }
    }

    /// True when `addr` is inside this pattern. An IPv4 grant also covers the same
    /// address seen as IPv4-mapped IPv6.
    pub fn matches(&self, addr: SocketAddr) -> bool {
        if self.port.is_some_and(|port| port != addr.port()) {
            return false;
        }
        let Some(net) = self.net else {
            return true;
        };
        let ip = match (net, addr.ip()) {
            (IpNet::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, ip) => ip,
        };
        net.contains(&ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> AddressPattern {
        match AddressPattern::parse(text).unwrap() {
            ParsedPattern::Resolved(pattern) => pattern,
            ParsedPattern::Name { .. } => panic!("{text} parsed as a name"),
        }
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn exact_addresses_and_ports() {
        let exact = pattern("127.0.0.1:8080");
        assert!(exact.matches(addr("127.0.0.1:8080")));
        assert!(!exact.matches(addr("127.0.0.1:8081")));
        assert!(!exact.matches(addr("127.0.0.2:8080")));
        assert!(exact.matches(addr("[::ffff:127.0.0.1]:8080")));
        assert!(pattern("127.0.0.1:*").matches(addr("127.0.0.1:1")));
        assert!(pattern("*:443").matches(addr("[2001:db8::1]:443")));
        assert!(!pattern("*:443").matches(addr("10.0.0.1:80")));
        assert!(pattern("[::1]:22").matches(addr("[::1]:22")));
    }

    #[test]
    fn cidr_blocks() {
        let private = pattern("10.0.0.0/8:*");
        assert!(private.matches(addr("10.200.3.4:99")));
        assert!(!private.matches(addr("11.0.0.1:99")));
        assert!(pattern("0.0.0.0/0:53").matches(addr("8.8.8.8:53")));
        assert!(pattern("2001:db8::/32:*").matches(addr("[2001:db8:1::5]:1")));
        assert!(!pattern("2001:db8::/32:*").matches(addr("[2001:db9::5]:1")));
    }

    #[test]
    fn bad_patterns_say_why() {
        for (text, why) in [
            ("127.0.0.1", "HOST:PORT"),
            ("127.0.0.1:http", "not a number"),
            ("10.0.0.0/40:1", "longer than 32"),
            (":80", "not an address"),
        ] {
            let error = AddressPattern::parse(text).err().unwrap();
            assert!(error.contains(why), "{text}: {error}");
        }
        assert!(matches!(
            AddressPattern::parse("example.com:443"),
            Ok(ParsedPattern::Name { .. })
        ));
    }
}

/// What a plugin is, by the world its component exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    Tool,
    Guard,
    Middleware,
    ResultFilter,
    Observer,
}

impl PluginKind {
    /// `a tool`, `a guard`, `a middleware`, `a result filter`, `an observer`.
    pub fn with_article(self) -> &'static str {
        match self {
            PluginKind::Tool => "a tool",
            PluginKind::Guard => "a guard",
            PluginKind::Middleware => "a middleware",
            PluginKind::ResultFilter => "a result filter",
            PluginKind::Observer => "an observer",
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginKind::Tool => "tool",
            PluginKind::Guard => "guard",
            PluginKind::Middleware => "middleware",
            PluginKind::ResultFilter => "result-filter",
            PluginKind::Observer => "observer",
        })
    }
}
