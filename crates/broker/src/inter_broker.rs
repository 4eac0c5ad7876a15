//! How this broker connects to the others (Kafka's inter-broker listener): the follower
//! fetchers, the transaction marker and AddPartitionsToTxn verification senders and the
//! DescribeQuorum forwarding all open their connections here. Each peer is reached on its
//! endpoint of `inter.broker.listener.name` (our listener names are their security
//! protocols; default: this broker's first listener), with that listener's protocol: TCP, then
//! TLS (trusting `--ssl-ca`, presenting this broker's own certificate when the peer asks,
//! checking the peer's advertised host against its certificate), then SASL
//! (`sasl.mechanism.inter.broker.protocol`, PLAIN or SCRAM, as the broker's own user).
//!
//! The Raft RPCs and forwarded controller events travel on the controller listener, not here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use parking_lot::RwLock;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::fetcher::connection::{FetcherError, LeaderConnection};
use crate::security::scram_client::ScramClient;
use crate::security::{Mechanism, SecurityConfig, SecurityProtocol};

/// SaslHandshake v1: the tokens then travel in SaslAuthenticate (KIP-152).
const SASL_HANDSHAKE_VERSION: i16 = 1;
const SASL_AUTHENTICATE_VERSION: i16 = 2;

/// A byte stream to a peer: TCP, or TLS over TCP.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}

/// Where a peer broker listens: the resolved address, and the host it advertised (what its
/// TLS certificate must name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    pub addr: SocketAddr,
    pub host: String,
}

impl From<SocketAddr> for PeerAddr {
    fn from(addr: SocketAddr) -> PeerAddr {
        PeerAddr {
            addr,
            host: addr.ip().to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InterBrokerError {
    #[error(
        "only one of --inter-broker-listener-name and --security-inter-broker-protocol may be set"
    )]
    BothNamed,
    #[error("the inter-broker listener {0} is not one of this broker's listeners")]
    NoSuchListener(&'static str),
    #[error(
        "the inter-broker listener {0} speaks TLS: it needs --ssl-ca (the CA peers' certificates chain to)"
    )]
    NoTrustedCa(&'static str),
    #[error(
        "the inter-broker listener {0} speaks SASL: it needs --inter-broker-sasl-username and --inter-broker-sasl-password"
    )]
    NoCredentials(&'static str),
    #[error("--sasl-mechanism-inter-broker-protocol {0} must be one of --sasl-mechanisms")]
    MechanismNotEnabled(&'static str),
    #[error("inter-broker SASL speaks PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not {0}")]
    MechanismNotSpoken(&'static str),
    #[error("inter-broker TLS: {0}")]
    Tls(String),
}

/// The broker's own login on SASL inter-broker listeners.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The TLS client side: rebuilt from the PEM files on every connect (connections are few and
/// long-lived), so a renewed certificate is used without restart; a broken file keeps the
/// last good configuration.
struct TlsClient {
    ca: PathBuf,
    cert_key: Option<(PathBuf, PathBuf)>,
    current: RwLock<Arc<ClientConfig>>,
}

impl TlsClient {
    fn build(&self) -> Result<Arc<ClientConfig>, InterBrokerError> {
        build_tls(&self.ca, self.cert_key.as_ref())
    }

    fn config(&self) -> Arc<ClientConfig> {
        match self.build() {
            Ok(c) => {
                *self.current.write() = c.clone();
                c
            }
            Err(error) => {
                tracing::warn!(%error, "inter-broker TLS files unreadable; using the last good ones");
                self.current.read().clone()
            }
        }
    }
}

fn build_tls(
    ca: &std::path::Path,
    cert_key: Option<&(PathBuf, PathBuf)>,
) -> Result<Arc<ClientConfig>, InterBrokerError> {
    let cert_key = cert_key.map(|(c, k)| (c.as_path(), k.as_path()));
    crate::security::tls::client_config(ca, cert_key)
        .map(Arc::new)
        .map_err(|e| InterBrokerError::Tls(e.to_string()))
}

/// How to reach and log in to peer brokers.
pub struct InterBroker {
    protocol: SecurityProtocol,
    tls: Option<TlsClient>,
    sasl: Option<SaslLogin>,
    /// Why peers cannot be reached (a broker alone, without the inter-broker settings its
    /// listener would need: it has no peers, so that is no reason not to start).
    unusable: Option<String>,
}

impl std::fmt::Debug for InterBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBroker")
            .field("protocol", &self.protocol)
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .field("unusable", &self.unusable)
            .finish()
    }
}

impl InterBroker {
    /// PLAINTEXT, no login (brokers with one PLAINTEXT listener, and tests).
    pub fn plaintext() -> InterBroker {
        InterBroker {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
            unusable: None,
        }
    }

    /// [`InterBroker::from_config`] for a broker that is `alone` (no metadata quorum of
    /// others) or not: alone, a missing CA or login is not an error (there are no peers to
    /// reach); connecting then fails with the reason.
    pub fn for_broker(
        cfg: &SecurityConfig,
        listeners: &[SecurityProtocol],
        alone: bool,
    ) -> Result<InterBroker, InterBrokerError> {
        match InterBroker::from_config(cfg, listeners) {
            Err(
                e @ (InterBrokerError::NoTrustedCa(_)
                | InterBrokerError::NoCredentials(_)
                | InterBrokerError::MechanismNotSpoken(_)
                | InterBrokerError::Tls(_)),
            ) if alone => Ok(InterBroker {
                protocol: InterBroker::protocol_of(cfg, listeners)?,
                tls: None,
                sasl: None,
                unusable: Some(e.to_string()),
            }),
            other => other,
        }
    }

    fn protocol_of(
        cfg: &SecurityConfig,
        listeners: &[SecurityProtocol],
    ) -> Result<SecurityProtocol, InterBrokerError> {
        let protocol = match (
            cfg.inter_broker_listener,
            cfg.security_inter_broker_protocol,
        ) {
            (Some(_), Some(_)) => return Err(InterBrokerError::BothNamed),
            (Some(p), None) | (None, Some(p)) => p,
            (None, None) => listeners
                .first()
                .copied()
                .unwrap_or(SecurityProtocol::Plaintext),
        };
        if !listeners.contains(&protocol) {
            return Err(InterBrokerError::NoSuchListener(protocol.name()));
        }
        Ok(protocol)
    }

    /// From the settings and the listeners this broker bound (in order), checked as Kafka
    /// checks them at startup.
    pub fn from_config(
        cfg: &SecurityConfig,
        listeners: &[SecurityProtocol],
    ) -> Result<InterBroker, InterBrokerError> {
        let protocol = Self::protocol_of(cfg, listeners)?;
        let tls = if protocol.is_tls() {
            let ca = cfg
                .ssl_ca
                .clone()
                .ok_or(InterBrokerError::NoTrustedCa(protocol.name()))?;
            let cert_key = cfg.ssl_cert.clone().zip(cfg.ssl_key.clone());
            let current = RwLock::new(build_tls(&ca, cert_key.as_ref())?);
            let client = TlsClient {
                ca,
                cert_key,
                current,
            };
            Some(client)
        } else {
            None
        };
        let sasl = if protocol.is_sasl() {
            let mechanism = cfg
                .sasl_mechanism_inter_broker
                .or_else(|| cfg.sasl_mechanisms.first().copied())
                .unwrap_or(Mechanism::ScramSha256);
            if !cfg.sasl_mechanisms.contains(&mechanism) {
                return Err(InterBrokerError::MechanismNotEnabled(mechanism.name()));
            }
            if mechanism == Mechanism::OAuthBearer {
                return Err(InterBrokerError::MechanismNotSpoken(mechanism.name()));
            }
            let (Some(username), Some(password)) = (
                cfg.inter_broker_sasl_username.clone(),
                cfg.inter_broker_sasl_password.clone().map(|p| p.0),
            ) else {
                return Err(InterBrokerError::NoCredentials(protocol.name()));
            };
            Some(SaslLogin {
                mechanism,
                username,
                password,
            })
        } else {
            None
        };
        Ok(InterBroker {
            protocol,
            tls,
            sasl,
            unusable: None,
        })
    }

    /// The listener (= protocol) name peers are reached on.
    pub fn listener_name(&self) -> &'static str {
        self.protocol.name()
    }

    /// A connection to `peer`, encrypted and logged in as this listener requires.
    pub(crate) async fn connect(
        &self,
        peer: &PeerAddr,
        response_max_bytes: usize,
        timeout: Duration,
    ) -> Result<LeaderConnection, FetcherError> {
        if let Some(reason) = &self.unusable {
            return Err(FetcherError::NotConfigured(reason.clone()));
        }
        let stream = tokio::time::timeout(timeout, self.open(peer))
            .await
            .map_err(|_| FetcherError::Timeout(timeout))??;
        let mut conn = LeaderConnection::over(stream, response_max_bytes);
        if let Some(login) = &self.sasl {
            authenticate(&mut conn, login, timeout).await?;
        }
        Ok(conn)
    }

    async fn open(&self, peer: &PeerAddr) -> Result<Box<dyn PeerIo>, FetcherError> {
        let tcp = TcpStream::connect(peer.addr).await?;
        tcp.set_nodelay(true)?;
        let Some(tls) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let name = ServerName::try_from(peer.host.clone())
            .map_err(|e| FetcherError::Tls(format!("host {:?}: {e}", peer.host)))?;
        let stream = tokio_rustls::TlsConnector::from(tls.config())
            .connect(name, tcp)
            .await
            .map_err(|e| FetcherError::Tls(e.to_string()))?;
        Ok(Box::new(stream))
    }
}

/// SaslHandshake, then SaslAuthenticate until the server accepts (or refuses) the login.
async fn authenticate(
    conn: &mut LeaderConnection,
    login: &SaslLogin,
    timeout: Duration,
) -> Result<(), FetcherError> {
    let mut handshake = SaslHandshakeRequest::default();
    handshake.mechanism = StrBytes::from_static_str(login.mechanism.name());
    let resp: SaslHandshakeResponse = conn
        .call(
            ApiKey::SaslHandshake,
            SASL_HANDSHAKE_VERSION,
            &handshake,
            timeout,
        )
        .await?;
    if resp.error_code != 0 {
        let enabled: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(FetcherError::Sasl(format!(
            "the peer does not serve {} (error {}; it serves {enabled:?})",
            login.mechanism.name(),
            resp.error_code
        )));
    }
    match login.mechanism {
        Mechanism::Plain => {
            let token = format!("\0{}\0{}", login.username, login.password);
            sasl_step(conn, token.into_bytes(), timeout).await?;
            Ok(())
        }
        Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
            let mut scram = ScramClient::new(login.mechanism, &login.username, &login.password)
                .map_err(|e| FetcherError::Sasl(e.to_string()))?;
            let server_first = sasl_step(conn, scram.client_first(), timeout).await?;
            // PBKDF2: thousands of HMACs, off the async threads.
            let (mut scram, client_final) = tokio::task::spawn_blocking(move || {
                let client_final = scram.server_first(&server_first);
                (scram, client_final)
            })
            .await
            .map_err(|e| FetcherError::Sasl(format!("SCRAM task failed: {e}")))?;
            let client_final = client_final.map_err(|e| FetcherError::Sasl(e.to_string()))?;
            let server_final = sasl_step(conn, client_final, timeout).await?;
            scram
                .server_final(&server_final)
                .map_err(|e| FetcherError::Sasl(e.to_string()))
        }
        Mechanism::OAuthBearer => Err(FetcherError::Sasl(
            "OAUTHBEARER is not spoken between brokers".into(),
        )),
    }
}

/// One SaslAuthenticate: our token out, the server's back (a refusal is an error).
async fn sasl_step(
    conn: &mut LeaderConnection,
    token: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, FetcherError> {
    let mut req = SaslAuthenticateRequest::default();
    req.auth_bytes = token.into();
    let resp: SaslAuthenticateResponse = conn
        .call(
            ApiKey::SaslAuthenticate,
            SASL_AUTHENTICATE_VERSION,
            &req,
            timeout,
        )
        .await?;
    if resp.error_code != 0 {
        return Err(FetcherError::Sasl(format!(
            "the peer refused the login (error {}): {}",
            resp.error_code,
            resp.error_message.as_ref().map_or("", |m| m.as_str())
        )));
    }
    Ok(resp.auth_bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::SecurityProtocol::*;

    #[test]
    fn the_listener_is_the_first_unless_named_and_must_exist() {
        let cfg = SecurityConfig::default();
        let ib = InterBroker::from_config(&cfg, &[Plaintext, Ssl]).unwrap();
        assert_eq!(ib.listener_name(), "PLAINTEXT");
        let named = SecurityConfig {
            inter_broker_listener: Some(SaslPlaintext),
            ..SecurityConfig::default()
        };
        assert!(matches!(
            InterBroker::from_config(&named, &[Plaintext]),
            Err(InterBrokerError::NoSuchListener("SASL_PLAINTEXT"))
        ));
        assert!(matches!(
            InterBroker::from_config(&named, &[Plaintext, SaslPlaintext]),
            Err(InterBrokerError::NoCredentials("SASL_PLAINTEXT"))
        ));
        let both = SecurityConfig {
            security_inter_broker_protocol: Some(Plaintext),
            ..named.clone()
        };
        assert!(matches!(
            InterBroker::from_config(&both, &[Plaintext, SaslPlaintext]),
            Err(InterBrokerError::BothNamed)
        ));
        let ssl = SecurityConfig {
            security_inter_broker_protocol: Some(Ssl),
            ..SecurityConfig::default()
        };
        assert!(matches!(
            InterBroker::from_config(&ssl, &[Plaintext, Ssl]),
            Err(InterBrokerError::NoTrustedCa("SSL"))
        ));
        // A broker alone has no peers: what only reaching them needs is not asked for.
        let alone = InterBroker::for_broker(&ssl, &[Plaintext, Ssl], true).unwrap();
        assert_eq!(alone.listener_name(), "SSL");
        assert!(alone.unusable.as_deref().unwrap().contains("--ssl-ca"));
        assert!(InterBroker::for_broker(&ssl, &[Plaintext, Ssl], false).is_err());
        assert!(InterBroker::for_broker(&named, &[Plaintext], true).is_err());
    }

    #[test]
    fn the_sasl_mechanism_defaults_to_the_first_enabled_and_must_be_enabled() {
        let login = SecurityConfig {
            inter_broker_listener: Some(SaslPlaintext),
            inter_broker_sasl_username: Some("broker".into()),
            inter_broker_sasl_password: Some(crate::security::Secret("pw".into())),
            sasl_mechanisms: vec![Mechanism::ScramSha512, Mechanism::Plain],
            ..SecurityConfig::default()
        };
        let ib = InterBroker::from_config(&login, &[SaslPlaintext]).unwrap();
        assert_eq!(ib.sasl.as_ref().unwrap().mechanism, Mechanism::ScramSha512);
        assert!(
            !format!("{ib:?}").contains("pw"),
            "the password is not logged"
        );
        let not_enabled = SecurityConfig {
            sasl_mechanism_inter_broker: Some(Mechanism::ScramSha256),
            ..login.clone()
        };
        assert!(matches!(
            InterBroker::from_config(&not_enabled, &[SaslPlaintext]),
            Err(InterBrokerError::MechanismNotEnabled("SCRAM-SHA-256"))
        ));
        let oauth = SecurityConfig {
            sasl_mechanisms: vec![Mechanism::OAuthBearer],
            ..login
        };
        assert!(matches!(
            InterBroker::from_config(&oauth, &[SaslPlaintext]),
            Err(InterBrokerError::MechanismNotSpoken("OAUTHBEARER"))
        ));
    }
}
