//! The process's one TLS crypto provider (rustls with ring's primitives), installed before
//! any HTTPS client is built: the operator's model endpoints and the traces' exporter
//! share reqwest, whose rustls needs a provider chosen once per process.
//!
//! rustls marks ring's provider deprecated for its lack of post-quantum key exchange;
//! aws-lc-rs, which has it, would add a large C build to every build of dsh.

/// Installs the provider unless one already is (a second install is refused, harmlessly).
pub fn install_provider() {
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
}
