//! Serving on a non-loopback address: HTTPS with a certificate authority of the instance's own
//! and a bearer token, as a cluster's API server requires credentials of its clients.
//!
//! The CA (`ca.crt`, `ca.key`) and the token (`token`) are kept in `DATA_DIR/pki` so that a
//! kubeconfig stays valid across restarts; the server certificate is signed anew at each start
//! for the names and addresses the server is reached at.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TOKEN: &str = "token";
/// A client that connects and never completes its handshake is dropped after this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What serving over TLS needs: the server's TLS configuration, the CA clients trust (PEM),
/// and the bearer token they present.
pub struct Credentials {
    pub server: Arc<rustls::ServerConfig>,
    pub ca_pem: String,
    pub token: String,
}

/// The CA's subject. The CA is recreated from it and its stored key to sign server
/// certificates: rcgen needs no parsed certificate for that.
fn ca_params() -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kbatch-ca");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    // Ten years, as kubeadm's CA.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(3650);
    Ok(params)
}

/// The names and addresses a server listening on `listen` is reached at.
pub fn server_names(listen: IpAddr) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        Ipv4Addr::LOCALHOST.to_string(),
        Ipv6Addr::LOCALHOST.to_string(),
    ];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    if !listen.is_unspecified() {
        names.push(listen.to_string());
    }
    names.sort();
    names.dedup();
    names
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

fn read(dir: &Path, name: &str) -> anyhow::Result<Option<String>> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Loads the CA and token from `dir` (creating them the first time) and signs a server
/// certificate for `names`.
pub fn load_or_create(dir: &Path, names: &[String]) -> anyhow::Result<Credentials> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ca_pem, ca_key) = match (read(dir, CA_CERT)?, read(dir, CA_KEY)?) {
        (Some(cert), Some(key)) => {
            let key = KeyPair::from_pem(&key)
                .with_context(|| format!("reading the CA key {}", dir.join(CA_KEY).display()))?;
            (cert, key)
        }
        _ => {
            let key = KeyPair::generate().context("generating the CA key")?;
            let cert = ca_params()?
                .self_signed(&key)
                .context("signing the CA certificate")?;
            write_private(&dir.join(CA_KEY), &key.serialize_pem())?;
            write_private(&dir.join(CA_CERT), &cert.pem())?;
            (cert.pem(), key)
        }
    };
    let token = match read(dir, TOKEN)? {
        Some(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            // Two v4 UUIDs: 244 random bits from the OS.
            let t = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            write_private(&dir.join(TOKEN), &t)?;
            t
        }
    };

    let issuer = Issuer::new(ca_params()?, ca_key);
    let mut params = CertificateParams::new(names.to_vec()).context("the server's names")?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kbatch-apiserver");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(365);
    let key = KeyPair::generate().context("generating the server key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the server certificate")?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .context("the server certificate")?;
    Ok(Credentials {
        server: Arc::new(server),
        ca_pem,
        token,
    })
}

/// The pki directory of a data dir.
pub fn pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("pki")
}

/// TLS connections accepted on a TCP listener. Handshakes run on tasks of their own, so a
/// slow or silent client holds up no one else.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = tcp.accept() => a,
                    // The server stopped: stop accepting.
                    () = tx.closed() => return,
                };
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off briefly.
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task only ends once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_and_token_persist_and_the_server_certificate_is_signed_by_the_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = server_names("0.0.0.0".parse().expect("ip"));
        assert!(names.contains(&"127.0.0.1".to_string()), "{names:?}");
        let first = load_or_create(dir.path(), &names).expect("first");
        assert_eq!(first.token.len(), 64);
        assert!(first.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let second = load_or_create(dir.path(), &names).expect("second");
        assert_eq!(first.token, second.token);
        assert_eq!(first.ca_pem, second.ca_pem);
        let mode = |n: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.path().join(n))
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(CA_KEY), 0o600);
        assert_eq!(mode(TOKEN), 0o600);
    }

    #[test]
    fn a_specific_listen_address_is_among_the_names() {
        let names = server_names("10.1.2.3".parse().expect("ip"));
        assert!(names.contains(&"10.1.2.3".to_string()), "{names:?}");
        assert!(names.contains(&"localhost".to_string()), "{names:?}");
    }
}
