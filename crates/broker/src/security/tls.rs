//! TLS for SSL and SASL_SSL listeners: rustls (TLS 1.2 and 1.3, aws-lc-rs) with a PEM
//! certificate chain and key, optional client certificates checked against a PEM CA bundle,
//! and reload without restart: the files are checked every `ssl_reload_interval_ms`, and new
//! connections get the new certificate (a broken file is logged and the old one kept).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::RwLock;
use rustls::RootCertStore;
use rustls::client::ClientConfig;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::{ClientAuth, SecurityConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("a TLS listener needs --ssl-cert and --ssl-key (PEM files)")]
    MissingFiles,
    #[error("--ssl-client-auth {0:?} needs --ssl-ca (a PEM CA bundle)")]
    MissingCa(ClientAuth),
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// Modification time and length per file (`None`: unreadable).
type Fingerprint = Vec<Option<(SystemTime, u64)>>;

/// The PEM files a TLS listener serves with.
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    client_auth: ClientAuth,
}

impl TlsFiles {
    /// Modification time and length of each file: a change of either triggers a reload.
    fn fingerprint(&self) -> Fingerprint {
        [Some(&self.cert), Some(&self.key), self.ca.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| {
                std::fs::metadata(p)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())))
            })
            .collect()
    }
}

/// The current acceptor of every TLS listener, replaced on reload.
pub struct TlsSource {
    files: TlsFiles,
    current: RwLock<(TlsAcceptor, Fingerprint)>,
}

impl TlsSource {
    pub fn load(config: &SecurityConfig) -> Result<Arc<TlsSource>, TlsError> {
        let (Some(cert), Some(key)) = (&config.ssl_cert, &config.ssl_key) else {
            return Err(TlsError::MissingFiles);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            ca: config.ssl_ca.clone(),
            client_auth: config.ssl_client_auth,
        };
        if files.client_auth != ClientAuth::None && files.ca.is_none() {
            return Err(TlsError::MissingCa(files.client_auth));
        }
        let fingerprint = files.fingerprint();
        let acceptor = build_acceptor(&files)?;
        Ok(Arc::new(TlsSource {
            files,
            current: RwLock::new((acceptor, fingerprint)),
        }))
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.current.read().0.clone()
    }

    /// Rebuild the acceptor if a file changed. `Ok(true)` = reloaded.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let fingerprint = self.files.fingerprint();
        if self.current.read().1 == fingerprint {
            return Ok(false);
        }
        let result = build_acceptor(&self.files);
        let mut current = self.current.write();
        // A broken file is reported once per change, not on every tick.
        current.1 = fingerprint;
        current.0 = result?;
        Ok(true)
    }
}

/// Check the PEM files every `interval_ms` until shutdown.
pub async fn run_reloader(
    source: Arc<TlsSource>,
    interval_ms: u64,
    shutdown: watch::Receiver<bool>,
) {
    let messages = super::reload::ReloadMessages {
        file: source.files.cert.display().to_string(),
        reloaded: "TLS certificate reloaded",
        failed: "TLS certificate reload failed; serving the previous one",
        task_failed: "TLS reload task failed",
    };
    super::reload::run_file_reloader(interval_ms, shutdown, messages, move || {
        source.reload_if_changed()
    })
    .await;
}

fn build_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::File {
        path: files.key.clone(),
        message: format!("no private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let rustls_err = |e: rustls::Error| TlsError::Rustls(e.to_string());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(rustls_err)?;
    let verifier = match (&files.ca, files.client_auth) {
        (_, ClientAuth::None) | (None, _) => WebPkiClientVerifier::no_client_auth(),
        (Some(ca), auth) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(rustls_err)?;
            }
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let b = if auth == ClientAuth::Requested {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(|e| TlsError::Rustls(e.to_string()))?
        }
    };
    let config = builder
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(rustls_err)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The client side of inter-broker TLS: peers' certificates must chain to `ca`; `cert_key`
/// (this broker's own, as Kafka's listener keystore serves both sides) is presented when the
/// peer asks for a client certificate.
pub fn client_config(
    ca: &Path,
    cert_key: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let rustls_err = |e: rustls::Error| TlsError::Rustls(e.to_string());
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots.add(cert).map_err(rustls_err)?;
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(rustls_err)?
        .with_root_certificates(roots);
    match cert_key {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                path: key.to_path_buf(),
                message: format!("no private key: {e}"),
            })?;
            builder
                .with_client_auth_cert(read_certs(cert)?, key)
                .map_err(rustls_err)
        }
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |message: String| TlsError::File {
        path: path.to_path_buf(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in the file".into()));
    }
    Ok(certs)
}
