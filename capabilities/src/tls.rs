//! The process's one TLS crypto provider (rustls with ring's primitives), installed before
//! any HTTPS client is built: the operator's model endpoints and the traces' exporter
//! share reqwest, whose rustls needs a provider chosen once per process.
//!
//! rustls marks ring's provider deprecated for its lack of post-quantum key exchange;
//! aws-lc-rs, which has it, would add a large C build to every build of dsh.
//!
//! Its key exchange offers X25519 first (then P-256, then P-384), as curl and OpenSSL do:
//! ring's default order puts P-384 first, whose exchange cost 3.4 ms of CPU a handshake
//! here against 0.6 ms for X25519 (`cargo bench --bench egress`), on every connection dsh
//! opens to a model endpoint or an upstream of its egress proxy.

/// Installs the provider unless one already is (a second install is refused, harmlessly).
pub fn install_provider() {
    #[allow(deprecated)]
    let mut provider = rustls::crypto::ring::default_provider();
    use rustls::crypto::ring::kx_group;
    provider.kx_groups = vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1];
    let _ = provider.install_default();
}
