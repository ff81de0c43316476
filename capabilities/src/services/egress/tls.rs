//! TLS where the egress proxy terminates it (only for hosts an `[[egress.inject]]` rule
//! names): dsh's own CA, kept in the state directory (`egress/ca-key.pem` 0600 and
//! `egress/ca.pem`), which no confined run can read, a certificate minted per host from it
//! and kept in memory, and the client configuration dsh verifies upstreams with (the
//! system's roots and `[egress] upstream_ca`).
//!
//! A run trusts dsh's CA through a bundle written into its own `TMPDIR`: the system's
//! roots, `upstream_ca` and dsh's CA certificate (never its key), named by every variable
//! tools read ([`CA_VARIABLES`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The variables that name the run's CA bundle, one per family of tools (OpenSSL and
/// Python's `ssl`, requests and pip, Node.js, git, curl).
pub const CA_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
];

/// Where the system keeps its roots as one PEM file (Debian's, then Fedora's).
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Why the proxy's TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot keep the egress CA in {path}: {source}")]
    Store {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make or read the egress CA: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot read [egress] upstream_ca {path}: {why}")]
    UpstreamCa { path: PathBuf, why: String },
    #[error("cannot set up TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// dsh's CA and what is made from it.
pub struct Authority {
    /// Its certificate as the runs' bundle carries it.
    certificate_pem: String,
    /// The issuer leaf certificates are signed by (the CA's parameters and key).
    issuer: rcgen::Certificate,
    key: KeyPair,
    /// Server configurations minted so far, by host.
    minted: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    /// How dsh connects to upstreams whose TLS it terminates.
    client: Arc<rustls::ClientConfig>,
    /// The PEM the runs trust: the system's roots, `upstream_ca`, and the CA.
    bundle: Arc<str>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("minted", &self.minted.lock().map(|m| m.len()).unwrap_or(0))
            .finish_non_exhaustive()
    }
}

/// The CA's subject: the same every time, so a leaf made after a restart chains to the
/// certificate made at the first start (the issuer is made again from the kept key).
fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "dsh egress proxy CA");
    name.push(DnType::OrganizationName, "dsh");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let year = this_year();
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
    Ok(params)
}

/// The current year by the system clock.
fn this_year() -> i32 {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    1970 + (seconds / 31_556_952) as i32
}

impl Authority {
    /// The CA kept in `dir` (made there at first use), and the upstream configuration
    /// with `upstream_ca`'s certificates added to the system's roots.
    pub fn open(dir: &Path, upstream_ca: &[PathBuf]) -> Result<Authority, TlsSetupError> {
        let store = |path: &Path| {
            let path = path.to_path_buf();
            move |source| TlsSetupError::Store { path, source }
        };
        std::fs::create_dir_all(dir).map_err(store(dir))?;
        let key_path = dir.join("ca-key.pem");
        let cert_path = dir.join("ca.pem");
        let (key, certificate_pem) = match std::fs::read_to_string(&key_path) {
            Ok(key_pem) => {
                let key = KeyPair::from_pem(&key_pem)?;
                let pem = std::fs::read_to_string(&cert_path).map_err(store(&cert_path))?;
                (key, pem)
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate()?;
                let certificate = ca_params()?.self_signed(&key)?;
                write_private(&key_path, key.serialize_pem().as_bytes())
                    .map_err(store(&key_path))?;
                std::fs::write(&cert_path, certificate.pem()).map_err(store(&cert_path))?;
                (key, certificate.pem())
            }
            Err(error) => return Err(store(&key_path)(error)),
        };
        let issuer = ca_params()?.self_signed(&key)?;

        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        let mut bundle = SYSTEM_BUNDLES
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        for path in upstream_ca {
            let text = std::fs::read_to_string(path).map_err(|e| TlsSetupError::UpstreamCa {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
            let certificates: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(text.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| TlsSetupError::UpstreamCa {
                        path: path.to_path_buf(),
                        why: e.to_string(),
                    })?;
            if certificates.is_empty() {
                return Err(TlsSetupError::UpstreamCa {
                    path: path.to_path_buf(),
                    why: "it holds no PEM certificate".into(),
                });
            }
            roots.add_parsable_certificates(certificates);
            push_pem(&mut bundle, &text);
        }
        push_pem(&mut bundle, &certificate_pem);
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Authority {
            certificate_pem,
            issuer,
            key,
            minted: Mutex::new(HashMap::new()),
            client: Arc::new(client),
            bundle: bundle.into(),
        })
    }

    /// The CA's certificate (PEM).
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The PEM bundle a run trusts.
    pub fn bundle(&self) -> &str {
        &self.bundle
    }

    /// How dsh connects to an upstream whose TLS it terminates.
    pub fn client(&self) -> Arc<rustls::ClientConfig> {
        self.client.clone()
    }

    /// The server configuration that answers a run's TLS for `host` (minted once).
    pub fn server_for(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, TlsSetupError> {
        let mut minted = self.minted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(config) = minted.get(host) {
            return Ok(config.clone());
        }
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let year = this_year();
        params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
        params.not_after = rcgen::date_time_ymd(year + 1, 12, 31);
        let leaf_key = KeyPair::generate()?;
        let leaf = params.signed_by(&leaf_key, &self.issuer, &self.key)?;
        let chain = vec![leaf.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        minted.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// The process's provider (ring), as every TLS of dsh's uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    crate::tls::install_provider();
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| {
            #[allow(deprecated)]
            Arc::new(rustls::crypto::ring::default_provider())
        })
}

fn push_pem(bundle: &mut String, pem: &str) {
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(pem);
}

/// Writes `bytes` to a new file only its owner may read (0600), replacing none.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_kept_and_a_host_certificate_chains_to_it_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let first = Authority::open(dir.path(), &[]).unwrap();
        let key_mode = std::fs::metadata(dir.path().join("ca-key.pem")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(key_mode.permissions().mode() & 0o777, 0o600);
        let again = Authority::open(dir.path(), &[]).unwrap();
        assert_eq!(first.certificate_pem(), again.certificate_pem());
        assert!(again.bundle().ends_with(again.certificate_pem()));
        assert!(!again.bundle().contains("PRIVATE KEY"));
        // A leaf minted by the second opening verifies against the first's certificate,
        // in a real handshake.
        let server = again.server_for("api.example").unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(first.certificate_pem().as_bytes()) {
            roots.add(certificate.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (near, far) = tokio::io::duplex(64 * 1024);
            let accept = tokio::spawn(async move {
                let mut stream = tokio_rustls::TlsAcceptor::from(server)
                    .accept(far)
                    .await
                    .unwrap();
                stream.write_all(b"hello").await.unwrap();
                stream.shutdown().await.unwrap();
            });
            let name = rustls::pki_types::ServerName::try_from("api.example").unwrap();
            let mut stream = tokio_rustls::TlsConnector::from(Arc::new(client))
                .connect(name.clone(), near)
                .await
                .unwrap();
            let mut got = Vec::new();
            stream.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"hello");
            accept.await.unwrap();
        });
    }
}
