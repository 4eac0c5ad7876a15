//! The controller listener's security (Kafka: the protocol `listener.security.protocol.map`
//! gives the listener of `controller.listener.names`): the Raft RPCs, broker registrations,
//! heartbeats, forwarded controller events and observer joins travel on it.
//!
//! `PLAINTEXT` (the default) is plain TCP. `SSL` is mutual TLS: each node presents its own
//! certificate (`--ssl-cert`/`--ssl-key`, the one its Kafka listeners serve) on both sides and
//! accepts only peers whose certificate chains to `--ssl-ca`; a connecting node also checks
//! that the voter's certificate names the host of its `--controller-quorum-voters` entry.
//! Every node of a cluster must use the same protocol: a mismatched peer is refused with a
//! logged reason (see `streamforge_metadata::quorum::raft::transport`).
//!
//! SASL on the controller listener is not served: Kafka's KRaft controllers take PLAIN there
//! (SCRAM credentials live in the metadata log, which a controller must reach first), and we
//! refuse SASL_PLAINTEXT / SASL_SSL with that reason rather than run them unauthenticated.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use streamforge_metadata::quorum::raft::transport::{
    Handshake, QuorumSecurity, QuorumStream, Transport, security_failure,
};
use tokio::net::TcpStream;

use super::tls::{TlsError, TlsSource};
use super::{ClientAuth, SecurityConfig, SecurityProtocol};

/// What the controller listener speaks, with the files TLS needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ControllerSecurity {
    #[default]
    Plaintext,
    /// Mutual TLS with this node's certificate, trusting `ca`.
    Ssl {
        cert: PathBuf,
        key: PathBuf,
        ca: PathBuf,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControllerSecurityError {
    #[error(
        "--controller-listener-security-protocol {0} is not served: the controller listener speaks PLAINTEXT or SSL (mutual TLS)"
    )]
    NotServed(&'static str),
    #[error(
        "--controller-listener-security-protocol SSL needs --ssl-cert, --ssl-key (this node's certificate, presented to the other controllers) and --ssl-ca (what theirs must chain to)"
    )]
    MissingFiles,
}

impl ControllerSecurity {
    /// The controller listener's security for `protocol`, with the node's TLS files.
    pub fn from_config(
        protocol: SecurityProtocol,
        cfg: &SecurityConfig,
    ) -> Result<ControllerSecurity, ControllerSecurityError> {
        match protocol {
            SecurityProtocol::Plaintext => Ok(ControllerSecurity::Plaintext),
            SecurityProtocol::Ssl => {
                let (Some(cert), Some(key), Some(ca)) = (
                    cfg.ssl_cert.clone(),
                    cfg.ssl_key.clone(),
                    cfg.ssl_ca.clone(),
                ) else {
                    return Err(ControllerSecurityError::MissingFiles);
                };
                Ok(ControllerSecurity::Ssl { cert, key, ca })
            }
            p @ (SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl) => {
                Err(ControllerSecurityError::NotServed(p.name()))
            }
        }
    }

    pub fn protocol(&self) -> SecurityProtocol {
        match self {
            ControllerSecurity::Plaintext => SecurityProtocol::Plaintext,
            ControllerSecurity::Ssl { .. } => SecurityProtocol::Ssl,
        }
    }

    /// The transport the quorum listener runs over (the files are read now: a broken one
    /// stops the node at startup).
    pub fn transport(&self) -> Result<Transport, TlsError> {
        match self {
            ControllerSecurity::Plaintext => Ok(Transport::default()),
            ControllerSecurity::Ssl { cert, key, ca } => {
                let server = SecurityConfig {
                    ssl_cert: Some(cert.clone()),
                    ssl_key: Some(key.clone()),
                    ssl_ca: Some(ca.clone()),
                    ssl_client_auth: ClientAuth::Required,
                    ..SecurityConfig::default()
                };
                let client = super::tls::client_config(ca, Some((cert, key)))?;
                Ok(Transport::new(Arc::new(MutualTls {
                    server: TlsSource::load(&server)?,
                    ca: ca.clone(),
                    cert_key: (cert.clone(), key.clone()),
                    client: RwLock::new(Arc::new(client)),
                })))
            }
        }
    }
}

/// Mutual TLS on the controller listener.
struct MutualTls {
    /// The acceptor (client certificates required), reloaded when the PEM files change.
    server: Arc<TlsSource>,
    ca: PathBuf,
    cert_key: (PathBuf, PathBuf),
    /// The last good client configuration (rebuilt on each connect: connections are few and
    /// long-lived, and a renewed certificate is then used without restart).
    client: RwLock<Arc<ClientConfig>>,
}

impl MutualTls {
    fn client_config(&self) -> Arc<ClientConfig> {
        let (cert, key) = (&self.cert_key.0, &self.cert_key.1);
        match super::tls::client_config(&self.ca, Some((cert, key))) {
            Ok(config) => {
                let config = Arc::new(config);
                *self.client.write() = config.clone();
                config
            }
            Err(error) => {
                tracing::warn!(%error, "controller listener TLS files unreadable; using the last good ones");
                self.client.read().clone()
            }
        }
    }
}

/// Whether a handshake error is the peer closing the connection.
fn is_closed(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        kind,
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
    )
}

/// The host part of `host:port` (an IPv6 literal without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

impl QuorumSecurity for MutualTls {
    fn protocol_name(&self) -> &'static str {
        "SSL"
    }

    fn is_tls(&self) -> bool {
        true
    }

    fn connect<'a>(&'a self, tcp: TcpStream, addr: &'a str) -> Handshake<'a> {
        Box::pin(async move {
            let host = host_of(addr);
            let name = ServerName::try_from(host.to_string())
                .map_err(|e| security_failure(format!("controller address {addr}: {e}")))?;
            let connector = tokio_rustls::TlsConnector::from(self.client_config());
            match connector.connect(name, tcp).await {
                Ok(stream) => Ok(Box::new(stream) as QuorumStream),
                // Closed in the handshake: a PLAINTEXT listener closes a TLS peer at its first
                // byte (a reset, as the ClientHello is left unread), a TLS one refusing this
                // node's certificate closes after its alert.
                Err(e) if is_closed(e.kind()) => Err(security_failure(format!(
                    "TLS handshake with the controller listener at {addr}: the peer closed the connection (its controller listener security protocol is not SSL, or it refused this node's certificate)"
                ))),
                Err(e) => Err(security_failure(format!(
                    "TLS handshake with the controller listener at {addr}: {e}"
                ))),
            }
        })
    }

    fn accept(&self, tcp: TcpStream) -> Handshake<'_> {
        Box::pin(async move {
            if let Err(error) = self.server.reload_if_changed() {
                tracing::warn!(%error, "controller listener TLS files unreadable; serving the previous certificate");
            }
            let peer = tcp
                .peer_addr()
                .map_or_else(|e| e.to_string(), |a| a.to_string());
            match self.server.acceptor().accept(tcp).await {
                Ok(stream) => Ok(Box::new(stream) as QuorumStream),
                Err(e) => Err(security_failure(format!(
                    "TLS handshake from {peer} on the SSL controller listener: {e}"
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_files() -> SecurityConfig {
        SecurityConfig {
            ssl_cert: Some("/c.pem".into()),
            ssl_key: Some("/k.pem".into()),
            ssl_ca: Some("/ca.pem".into()),
            ..SecurityConfig::default()
        }
    }

    #[test]
    fn plaintext_is_the_default_and_ssl_takes_the_nodes_files() {
        assert_eq!(ControllerSecurity::default(), ControllerSecurity::Plaintext);
        let plain = ControllerSecurity::from_config(SecurityProtocol::Plaintext, &with_files());
        assert_eq!(plain, Ok(ControllerSecurity::Plaintext));
        let ssl = ControllerSecurity::from_config(SecurityProtocol::Ssl, &with_files()).unwrap();
        assert_eq!(
            ssl,
            ControllerSecurity::Ssl {
                cert: "/c.pem".into(),
                key: "/k.pem".into(),
                ca: "/ca.pem".into(),
            }
        );
        assert_eq!(ssl.protocol(), SecurityProtocol::Ssl);
        let t = ControllerSecurity::Plaintext.transport().unwrap();
        assert_eq!(t.protocol_name(), "PLAINTEXT");
    }

    #[test]
    fn ssl_without_its_files_and_sasl_are_refused() {
        for missing in 0..3 {
            let mut cfg = with_files();
            match missing {
                0 => cfg.ssl_cert = None,
                1 => cfg.ssl_key = None,
                _ => cfg.ssl_ca = None,
            }
            let r = ControllerSecurity::from_config(SecurityProtocol::Ssl, &cfg);
            assert_eq!(r, Err(ControllerSecurityError::MissingFiles));
        }
        for sasl in [SecurityProtocol::SaslSsl, SecurityProtocol::SaslPlaintext] {
            let r = ControllerSecurity::from_config(sasl, &with_files());
            assert_eq!(r, Err(ControllerSecurityError::NotServed(sasl.name())));
        }
    }

    #[test]
    fn unreadable_files_stop_the_node_at_startup() {
        let ssl = ControllerSecurity::from_config(SecurityProtocol::Ssl, &with_files()).unwrap();
        assert!(ssl.transport().is_err());
    }

    #[test]
    fn the_certificate_must_name_the_voters_host() {
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("ctrl-1.example:9093"), "ctrl-1.example");
        assert_eq!(host_of("[::1]:9093"), "::1");
    }
}
