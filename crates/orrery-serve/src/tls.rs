//! TLS for the live service (issue 70, item 4): rustls on ring.
//!
//! `orrery serve --tls-cert --tls-key` serves HTTPS; clients and agents
//! given `--ca FILE` trust that CA only (a cluster's own CA, not the web's).
//! `orrery certs` makes a CA and a server certificate for a test cluster
//! ([`make_test_certs`]). Without TLS the service listens on loopback only,
//! unless asked for plain HTTP elsewhere (`--insecure-http`).

use anyhow::{Context, Result, bail};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The server identity [`server_config`] loads (rustls').
pub use rustls::ServerConfig;

/// A TLS handshake not done in this long is dropped (a client that opens a
/// connection and sends nothing holds no task for ever).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Makes ring the process's rustls provider (once; later calls do nothing).
/// Every HTTP client of the workspace is built through [`client_builder`],
/// which calls it.
pub fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder with the provider installed; with `ca`, it
/// trusts only that CA's certificates (PEM).
pub fn client_builder(ca: Option<&Path>) -> Result<reqwest::ClientBuilder> {
    install_provider();
    let b = reqwest::Client::builder();
    let Some(ca) = ca else { return Ok(b) };
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots.add(cert).with_context(|| format!("{}: not a CA certificate rustls accepts", ca.display()))?;
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(b.tls_backend_preconfigured(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: expected PEM certificates", path.display()))?;
    if certs.is_empty() {
        bail!("{}: expected at least one PEM certificate (-----BEGIN CERTIFICATE-----), found none", path.display());
    }
    Ok(certs)
}

/// The server's TLS configuration from a PEM certificate chain and key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    install_provider();
    let chain = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("{}: expected a PEM private key (PKCS#8, PKCS#1 or SEC1)", key.display()))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and the key do not make a TLS identity (do they belong together?)")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` over TLS on `listener` until the listener fails: one task
/// per connection, HTTP/1.1 (what axum's own `serve` speaks here).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    config: Arc<rustls::ServerConfig>,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Replies go out at once: a TLS record split over two writes would
        // otherwise wait on the peer's delayed ACK (Nagle's algorithm; 57 ms
        // at p99 in `orrery bench serve --tls` before this).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, "TCP_NODELAY: {e}");
        }
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, "TLS handshake: {e}"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let io = hyper_util::rt::TokioIo::new(tls);
            let service = hyper_util::service::TowerToHyperService::new(app);
            // One buffer per response, so one TLS record (and one write).
            let mut http = hyper::server::conn::http1::Builder::new();
            http.writev(false);
            if let Err(e) = http.serve_connection(io, service).await {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
}

/// The files [`make_test_certs`] writes.
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// The CA's certificate (give it to clients and agents: `--ca`).
    pub ca: PathBuf,
    /// The service's certificate, signed by the CA (`--tls-cert`).
    pub cert: PathBuf,
    /// Its key (`--tls-key`, mode 0600).
    pub key: PathBuf,
}

/// A self-signed CA and a service certificate it signs, for `names` (DNS
/// names or IP addresses; `localhost` and `127.0.0.1` always), written to
/// `dir` (`ca.pem`, `server.pem`, `server-key.pem`). The CA's key is not
/// kept: a test cluster's CA signs once. For production, use your own CA.
pub fn make_test_certs(dir: &Path, names: &[String]) -> Result<TestCerts> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "orrery test cluster CA");
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let mut all: Vec<String> = vec!["localhost".into(), "127.0.0.1".into()];
    for n in names {
        if n.is_empty() || n.contains(char::is_whitespace) {
            bail!("--names: expected DNS names or IP addresses, found {n:?}");
        }
        if !all.contains(n) {
            all.push(n.clone());
        }
    }
    let mut params = CertificateParams::new(all)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "orrery serve");
    let key = KeyPair::generate()?;
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer)?;
    let out = TestCerts { ca: dir.join("ca.pem"), cert: dir.join("server.pem"), key: dir.join("server-key.pem") };
    std::fs::write(&out.ca, ca_cert.pem()).with_context(|| format!("writing {}", out.ca.display()))?;
    std::fs::write(&out.cert, cert.pem()).with_context(|| format!("writing {}", out.cert.display()))?;
    orrery_model::files::write_private(&out.key, key.serialize_pem())
        .with_context(|| format!("writing {}", out.key.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_certs_make_a_server_identity_a_client_of_the_ca_accepts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = make_test_certs(dir.path(), &["h0.example".into(), "10.0.0.5".into()]).expect("certs");
        server_config(&c.cert, &c.key).expect("a server identity");
        client_builder(Some(&c.ca)).expect("a client of the CA").build().expect("client");
        // The key is private; a file of no certificate is refused by name.
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&c.key).expect("key").permissions().mode() & 0o777, 0o600);
        let err = format!("{:#}", client_builder(Some(&c.key)).expect_err("a key is no CA"));
        assert!(err.contains("server-key.pem"), "{err}");
        let err = format!("{:#}", server_config(&c.ca, &c.key).expect_err("the CA certificate is not the key's"));
        assert!(err.contains("belong together"), "{err}");
    }
}
