//! Which hosts a contained run may reach through dsh's egress proxy: the `allow` and
//! `deny` lists (host names, `*.` wildcards, IP addresses, each with an optional `:port`),
//! checked twice for each connection.
//!
//! First by name, the name the run asked for (a CONNECT's host, a request's host, the
//! TLS ClientHello's SNI): `deny` wins, then an `allow` entry must match, on a port it
//! names (no port: 80 and 443). An IP literal is a name no entry matches unless an entry
//! is that address.
//!
//! Then by address, the address dsh resolved the name to and is about to connect to (so
//! a name that resolves to something else the second time reaches nothing more): an
//! address inside (loopback, link-local with the cloud metadata address, private and
//! shared ranges, multicast, unspecified, broadcast, documentation and reserved ranges;
//! for IPv6 everything outside global unicast, Teredo, and 6to4 of an inside IPv4
//! address; or one of the host's own addresses) is refused, unless the entry that allowed the
//! name names the inside itself: the name `localhost` (loopback only) or that very
//! address. A wildcard never reaches the inside.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports an entry without `:port` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One entry of `allow` or `deny`, as written and as matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// The entry as the configuration wrote it (named in refusals and events).
    pub written: String,
    host: HostPattern,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// A name, lower case, without a trailing dot.
    Name(String),
    /// `*.SUFFIX`: any name ending in `.SUFFIX` (not SUFFIX itself).
    Below(String),
    Address(IpAddr),
}

/// Why a connection is refused; its text is what the run's client and the model read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{host}:{port} is not allowed (no `allow` entry names it)")]
    NotAllowed { host: String, port: u16 },
    #[error("{host}:{port} is denied by `{rule}`")]
    Denied {
        host: String,
        port: u16,
        rule: String,
    },
    #[error("{host}:{port}: `{rule}` allows that host on other ports only")]
    Port {
        host: String,
        port: u16,
        rule: String,
    },
    #[error("{host} resolves to {address}, inside this machine or its network, which `{rule}` does not name")]
    Inside {
        host: String,
        address: IpAddr,
        rule: String,
    },
    #[error("`{0}` is not a host name or an address")]
    BadName(String),
    #[error("{host} cannot be resolved: {why}")]
    Unresolved { host: String, why: String },
    #[error("the tunnel to {host} opened TLS for another host, {sni}")]
    OtherName { host: String, sni: String },
    #[error(
        "{host} gets a header from dsh's variable {variable}, which was not set when dsh started"
    )]
    NoValue { host: String, variable: String },
}

impl Refusal {
    /// The host it names (none for a name that is not one).
    pub fn host(&self) -> Option<&str> {
        match self {
            Refusal::NotAllowed { host, .. }
            | Refusal::Denied { host, .. }
            | Refusal::Port { host, .. }
            | Refusal::Inside { host, .. }
            | Refusal::Unresolved { host, .. }
            | Refusal::OtherName { host, .. }
            | Refusal::NoValue { host, .. } => Some(host),
            Refusal::BadName(_) => None,
        }
    }

    /// `host:port (why)`, as a call's result line lists it.
    pub fn summary(&self, port: u16) -> String {
        let why = match self {
            Refusal::NotAllowed { .. } => "not allowed".to_string(),
            Refusal::Denied { rule, .. } => format!("denied by {rule}"),
            Refusal::Port { .. } => "port not allowed".to_string(),
            Refusal::Inside { address, .. } => format!("resolves inside, to {address}"),
            Refusal::BadName(name) => return format!("{name} (not a host name)"),
            Refusal::Unresolved { .. } => "not resolved".to_string(),
            Refusal::OtherName { sni, .. } => format!("TLS names {sni}"),
            Refusal::NoValue { variable, .. } => format!("{variable} not set"),
        };
        let host = self.host().unwrap_or_default();
        match host.contains(':') {
            true => format!("[{host}]:{port} ({why})"),
            false => format!("{host}:{port} ({why})"),
        }
    }
}

/// `[process.network] allow` and `deny`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: Vec<HostRule>,
    deny: Vec<HostRule>,
    /// The host's own addresses (inside, whatever their range).
    own: Vec<IpAddr>,
}

impl EgressPolicy {
    /// The policy of `allow` and `deny`; `own`: the host's own addresses. An entry that
    /// cannot be read is an error naming it.
    pub fn new(allow: &[String], deny: &[String], own: Vec<IpAddr>) -> Result<Self, String> {
        let parse = |entries: &[String], list: &str| -> Result<Vec<HostRule>, String> {
            entries
                .iter()
                .map(|entry| {
                    HostRule::parse(entry).map_err(|why| format!("{list}: `{entry}`: {why}"))
                })
                .collect()
        };
        Ok(EgressPolicy {
            allow: parse(allow, "allow")?,
            deny: parse(deny, "deny")?,
            own,
        })
    }

    /// Whether any host is allowed (else runs get no network at all).
    pub fn allows_any(&self) -> bool {
        !self.allow.is_empty()
    }

    /// The entry that lets a run reach `host` on `port` by name, or why none does.
    pub fn check_name(&self, host: &str, port: u16) -> Result<&HostRule, Refusal> {
        let name = normalize(host).ok_or_else(|| Refusal::BadName(host.to_string()))?;
        if let Some(rule) = self
            .deny
            .iter()
            .find(|rule| rule.host.matches(&name) && rule.port.is_none_or(|p| p == port))
        {
            return Err(Refusal::Denied {
                host: name,
                port,
                rule: rule.written.clone(),
            });
        }
        let mut named = None;
        for rule in self.allow.iter().filter(|rule| rule.host.matches(&name)) {
            if rule.allows_port(port) {
                return Ok(rule);
            }
            named.get_or_insert(rule);
        }
        Err(match named {
            Some(rule) => Refusal::Port {
                host: name,
                port,
                rule: rule.written.clone(),
            },
            None => Refusal::NotAllowed { host: name, port },
        })
    }

    /// Whether `address`, what `host` (allowed by `rule`) resolved to, may be connected to.
    pub fn check_address(
        &self,
        host: &str,
        rule: &HostRule,
        address: IpAddr,
    ) -> Result<(), Refusal> {
        self.check_address_among(host, rule, address, &self.own)
    }

    /// [`Self::check_address`] with `own` as the host's own addresses (read afresh by the
    /// proxy, as interfaces come and go).
    pub fn check_address_among(
        &self,
        host: &str,
        rule: &HostRule,
        address: IpAddr,
        own: &[IpAddr],
    ) -> Result<(), Refusal> {
        let address = canonical(address);
        if !is_inside(address) && !own.iter().any(|own| canonical(*own) == address) {
            return Ok(());
        }
        let named_inside = match &rule.host {
            HostPattern::Address(allowed) => canonical(*allowed) == address,
            HostPattern::Name(name) => name == "localhost" && address.is_loopback(),
            HostPattern::Below(_) => false,
        };
        if named_inside {
            Ok(())
        } else {
            Err(Refusal::Inside {
                host: host.to_string(),
                address,
                rule: rule.written.clone(),
            })
        }
    }
}

impl HostRule {
    fn parse(entry: &str) -> Result<HostRule, String> {
        let entry = entry.trim();
        let (host, port) = split_port(entry)?;
        let host = if let Ok(address) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            HostPattern::Address(address)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = normalize(suffix).ok_or("not a host name after `*.`")?;
            if !suffix.contains('.') {
                return Err(
                    "a wildcard needs at least two labels after `*.` (`*.example.com`)".into(),
                );
            }
            HostPattern::Below(suffix)
        } else if host.contains('*') {
            return Err("a wildcard is only `*.` at the start".into());
        } else {
            HostPattern::Name(normalize(host).ok_or("not a host name")?)
        };
        Ok(HostRule {
            written: entry.to_string(),
            host,
            port,
        })
    }

    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(allowed) => allowed == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

impl HostPattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            HostPattern::Name(allowed) => allowed == name,
            HostPattern::Below(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostPattern::Address(address) => name
                .trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .is_ok_and(|asked| canonical(asked) == canonical(*address)),
        }
    }
}

/// `host[:port]`, `[v6]:port` or a bare IPv6 address.
fn split_port(entry: &str) -> Result<(&str, Option<u16>), String> {
    let port = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("`{text}` is not a port"))
    };
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("an unclosed `[`")?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(port(p)?))),
            None if after.is_empty() => Ok((host, None)),
            None => Err("text after `]`".into()),
        };
    }
    if entry.matches(':').count() > 1 {
        return Ok((entry, None));
    }
    match entry.rsplit_once(':') {
        Some((host, p)) => Ok((host, Some(port(p)?))),
        None => Ok((entry, None)),
    }
}

/// A host name as matched: lower case, no trailing dot, only letters, digits, `-`, `_`
/// and dots between labels; or an IP literal as written. None when it is neither.
fn normalize(host: &str) -> Option<String> {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    if host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
        return Some(host.trim_matches(['[', ']']).to_string());
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    valid.then_some(host)
}

/// An IPv4-mapped or -compatible IPv6 address as the IPv4 address it is.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Whether `address` is inside: this machine, its networks, or no one's.
fn is_inside(address: IpAddr) -> bool {
    match canonical(address) {
        IpAddr::V4(v4) => is_inside_v4(v4),
        IpAddr::V6(v6) => is_inside_v6(v6),
    }
}

fn is_inside_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        // Shared address space (carrier-grade NAT), 100.64.0.0/10.
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments, 192.0.0.0/24, and benchmarking, 198.18.0.0/15.
        || (a == 192 && b == 0 && v4.octets()[2] == 0)
        || (a == 198 && (b == 18 || b == 19))
        // Reserved, 240.0.0.0/4.
        || a >= 240
}

/// An IPv6 address is outside only in global unicast (2000::/3), and there not in the
/// ranges that reach something else: documentation, Teredo, and 6to4 of an inside IPv4
/// address. Built from what is allowed: a range nobody listed is inside.
fn is_inside_v6(v6: Ipv6Addr) -> bool {
    let segments = v6.segments();
    let first = segments[0];
    if first & 0xe000 != 0x2000 {
        return true;
    }
    // Documentation, 2001:db8::/32, and Teredo, 2001::/32 (a tunnel to any IPv4 address).
    if first == 0x2001 && (segments[1] == 0x0db8 || segments[1] == 0) {
        return true;
    }
    // 6to4, 2002::/16: the IPv4 address it carries decides.
    if first == 0x2002 {
        return is_inside_v4(Ipv4Addr::from_bits(
            (u32::from(segments[1]) << 16) | u32::from(segments[2]),
        ));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        let own = vec!["10.1.2.3".parse().unwrap(), "203.0.113.7".parse().unwrap()];
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        EgressPolicy::new(&strings(allow), &strings(deny), own).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn names_wildcards_and_ports_are_matched_and_deny_wins() {
        let p = policy(
            &[
                "pypi.org",
                "*.pythonhosted.org",
                "github.com",
                "git.internal:8443",
            ],
            &["gist.github.com"],
        );
        assert_eq!(p.check_name("PyPI.org.", 443).unwrap().written, "pypi.org");
        assert!(p.check_name("pypi.org", 80).is_ok());
        assert!(matches!(
            p.check_name("pypi.org", 22),
            Err(Refusal::Port { .. })
        ));
        assert!(p.check_name("files.pythonhosted.org", 443).is_ok());
        assert!(p.check_name("a.b.pythonhosted.org", 443).is_ok());
        assert!(matches!(
            p.check_name("pythonhosted.org", 443),
            Err(Refusal::NotAllowed { .. })
        ));
        assert!(matches!(
            p.check_name("evilpythonhosted.org", 443),
            Err(Refusal::NotAllowed { .. })
        ));
        assert!(matches!(
            p.check_name("gist.github.com", 443),
            Err(Refusal::Denied { .. })
        ));
        assert!(matches!(
            p.check_name("api.github.com", 443),
            Err(Refusal::NotAllowed { .. })
        ));
        assert!(p.check_name("git.internal", 8443).is_ok());
        assert!(matches!(
            p.check_name("git.internal", 443),
            Err(Refusal::Port { .. })
        ));
        // URL tricks arrive as names that are no host: refused whole.
        for trick in [
            "github.com@evil.example",
            "github.com/evil",
            "evil.example#github.com",
            "",
        ] {
            assert!(
                matches!(p.check_name(trick, 443), Err(Refusal::BadName(_))),
                "{trick}"
            );
        }
    }

    #[test]
    fn an_ip_literal_is_refused_unless_an_entry_is_that_address() {
        let p = policy(&["github.com", "192.0.2.10:8080", "[2001:db8::5]:443"], &[]);
        assert!(matches!(
            p.check_name("140.82.112.3", 443),
            Err(Refusal::NotAllowed { .. })
        ));
        assert!(p.check_name("192.0.2.10", 8080).is_ok());
        assert!(p.check_name("[2001:db8::5]", 443).is_ok());
        assert!(p.check_name("::ffff:192.0.2.10", 8080).is_ok());
    }

    #[test]
    fn an_allowed_name_never_reaches_inside_through_what_it_resolves_to() {
        let p = policy(
            &[
                "pypi.org",
                "*.example.com",
                "localhost:8000",
                "10.9.9.9:5000",
            ],
            &[],
        );
        let pypi = p.check_name("pypi.org", 443).unwrap().clone();
        assert!(p
            .check_address("pypi.org", &pypi, ip("151.101.0.223"))
            .is_ok());
        for inside in [
            "127.0.0.1",
            "127.8.8.8",
            "169.254.169.254",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2001:0:4136:e378::1",
            "100::1",
            // The host's own public address.
            "203.0.113.7",
        ] {
            assert!(
                matches!(
                    p.check_address("pypi.org", &pypi, ip(inside)),
                    Err(Refusal::Inside { .. })
                ),
                "{inside} was let through"
            );
        }
        let wildcard = p.check_name("a.example.com", 443).unwrap().clone();
        assert!(p
            .check_address("a.example.com", &wildcard, ip("127.0.0.1"))
            .is_err());
        let local = p.check_name("localhost", 8000).unwrap().clone();
        assert!(p
            .check_address("localhost", &local, ip("127.0.0.1"))
            .is_ok());
        assert!(p
            .check_address("localhost", &local, ip("169.254.169.254"))
            .is_err());
        let literal = p.check_name("10.9.9.9", 5000).unwrap().clone();
        assert!(p
            .check_address("10.9.9.9", &literal, ip("10.9.9.9"))
            .is_ok());
        assert!(p
            .check_address("10.9.9.9", &literal, ip("10.9.9.8"))
            .is_err());
    }

    #[test]
    fn entries_that_cannot_be_read_are_errors_naming_them() {
        let bad =
            |entry: &str| EgressPolicy::new(&[entry.to_string()], &[], Vec::new()).unwrap_err();
        assert!(bad("*.com").contains("two labels"), "{}", bad("*.com"));
        assert!(bad("git*hub.com").contains("only `*.` at the start"));
        assert!(bad("github.com:0").contains("not a port"));
        assert!(bad("github.com:https").contains("not a port"));
        assert!(bad("git hub.com").contains("not a host name"));
        assert!(bad("[::1").contains("unclosed"));
        assert!(!EgressPolicy::default().allows_any());
    }
}
