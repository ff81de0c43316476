//! Which browser origins may reach the HTTP server (`Origin`, checked as the MCP spec
//! requires against DNS rebinding). A request without `Origin` (not from a browser) and
//! one from a loopback origin (`http://127.0.0.1:*`, `http://localhost:*`,
//! `http://[::1]:*`, and `https` likewise) pass; any other needs an entry in `[serve]
//! http_allowed_origins`: `scheme://host` (the scheme's default port), `scheme://host:PORT`,
//! `scheme://host:*` (any port), or `null`.

use std::net::IpAddr;

/// An origin as compared: scheme and host lower-cased, host without IPv6 brackets,
/// the port made explicit when the scheme implies one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// `Origin: null` (sandboxed frames, `file:` pages, redirects).
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

/// Which ports an allowed entry matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ports {
    Any,
    Exactly(Option<u16>),
}

/// One entry of `http_allowed_origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    scheme: Option<String>,
    host: String,
    ports: Ports,
}

impl AllowedOrigin {
    /// Parses an entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<AllowedOrigin, String> {
        let entry = entry.trim();
        if entry.eq_ignore_ascii_case("null") {
            return Ok(AllowedOrigin {
                scheme: None,
                host: String::new(),
                ports: Ports::Exactly(None),
            });
        }
        let (base, ports) = match entry.strip_suffix(":*") {
            Some(base) => (base, Ports::Any),
            None => (entry, Ports::Exactly(None)),
        };
        let explicit_port = base
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|uri| uri.port_u16())
            .is_some();
        match parse_origin(base)? {
            Origin::Tuple { .. } if explicit_port && ports == Ports::Any => {
                Err(format!("{entry:?}: give a port or `:*`, not both"))
            }
            Origin::Tuple { scheme, host, port } => Ok(AllowedOrigin {
                scheme: Some(scheme),
                host,
                ports: match ports {
                    Ports::Any => Ports::Any,
                    Ports::Exactly(_) => Ports::Exactly(port),
                },
            }),
            Origin::Null => Err(format!("{entry:?}: `null` takes no port")),
        }
    }

    fn matches(&self, origin: &Origin) -> bool {
        match (origin, &self.scheme) {
            (Origin::Null, None) => true,
            (Origin::Tuple { scheme, host, port }, Some(allowed)) => {
                allowed == scheme
                    && &self.host == host
                    && match self.ports {
                        Ports::Any => true,
                        Ports::Exactly(allowed) => allowed == *port,
                    }
            }
            _ => false,
        }
    }
}

/// Parses an `Origin` value (`scheme://host[:port]`, or `null`).
fn parse_origin(value: &str) -> Result<Origin, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("null") {
        return Ok(Origin::Null);
    }
    let uri: hyper::Uri = value
        .parse()
        .map_err(|e| format!("{value:?} is not an origin (scheme://host[:port]): {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("{value:?} is not an origin (scheme://host[:port])"));
    };
    if uri
        .path_and_query()
        .is_some_and(|p| !p.as_str().is_empty() && p.as_str() != "/")
        || authority.as_str().contains('@')
    {
        return Err(format!(
            "{value:?} is not an origin: an origin has no path, query or user"
        ));
    }
    let scheme = scheme.to_ascii_lowercase();
    let port = authority.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    });
    Ok(Origin::Tuple {
        host: authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        scheme,
        port,
    })
}

/// True for a loopback origin over http or https, any port.
fn is_loopback(origin: &Origin) -> bool {
    match origin {
        Origin::Tuple { scheme, host, .. } => {
            (scheme == "http" || scheme == "https")
                && (host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
        }
        Origin::Null => false,
    }
}

/// The origin policy: loopback origins and the configured ones.
#[derive(Debug, Clone, Default)]
pub struct OriginPolicy {
    allowed: Vec<AllowedOrigin>,
}

impl OriginPolicy {
    /// The policy with `entries` allowed besides loopback (entries already checked at
    /// config load; one that does not parse allows nothing).
    pub fn new(entries: &[String]) -> Self {
        OriginPolicy {
            allowed: entries
                .iter()
                .filter_map(|entry| AllowedOrigin::parse(entry).ok())
                .collect(),
        }
    }

    /// Whether a request with this `Origin` header value (None: no header) may proceed.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(value) = origin else {
            return true;
        };
        match parse_origin(value) {
            Ok(origin) => is_loopback(&origin) || self.allowed.iter().any(|a| a.matches(&origin)),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_origin_and_loopback_origins_pass_by_default() {
        let policy = OriginPolicy::default();
        for origin in [
            None,
            Some("http://127.0.0.1:8765"),
            Some("http://localhost:3000"),
            Some("http://[::1]:9"),
            Some("https://LOCALHOST"),
            Some("http://127.0.0.1"),
        ] {
            assert!(policy.allows(origin), "{origin:?} was refused");
        }
    }

    #[test]
    fn other_origins_are_refused_by_default() {
        let policy = OriginPolicy::default();
        for origin in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example:80",
            "null",
            "file://",
            "not an origin",
            "ftp://localhost",
        ] {
            assert!(!policy.allows(Some(origin)), "{origin:?} was let through");
        }
    }

    #[test]
    fn allowlisted_origins_pass_on_their_port() {
        let policy = OriginPolicy::new(&[
            "https://app.example".into(),
            "http://dev.example:*".into(),
            "http://ops.example:8080".into(),
        ]);
        assert!(policy.allows(Some("https://app.example")));
        assert!(policy.allows(Some("https://APP.example:443")));
        assert!(!policy.allows(Some("https://app.example:8443")));
        assert!(!policy.allows(Some("http://app.example")));
        assert!(policy.allows(Some("http://dev.example:1234")));
        assert!(policy.allows(Some("http://ops.example:8080")));
        assert!(!policy.allows(Some("http://ops.example")));
        assert!(!policy.allows(Some("https://evil.example")));
    }

    #[test]
    fn bad_entries_are_rejected_saying_why() {
        for entry in [
            "app.example",
            "https://app.example/path",
            "https://a.example:443:*",
            "null:*",
        ] {
            assert!(AllowedOrigin::parse(entry).is_err(), "{entry:?} parsed");
        }
        assert!(AllowedOrigin::parse("null").is_ok());
    }
}
