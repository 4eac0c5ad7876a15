//! Listener security: Kafka's four security protocols per listener (`listeners`,
//! `advertised.listeners`), TLS with rustls (optionally mutual, `tls`), SASL PLAIN and
//! SCRAM-SHA-256/512 (`sasl`, `scram`) with salted credentials in the data dir (`credentials`),
//! OAUTHBEARER (`oauthbearer`) with JWTs checked against a JWKS file (`jwt`).
//! See docs/SECURITY.md.

pub mod acl;
pub mod controller;
pub mod credentials;
pub mod gate;
pub mod jwt;
pub mod listeners;
pub mod oauthbearer;
pub mod principal;
pub mod reload;
pub mod sasl;
pub mod scram;
pub mod scram_client;
pub mod tls;

use std::path::PathBuf;

pub use listeners::{AdvertisedListener, ListenerSpec, SecurityProtocol};

/// Kafka's `sasl.server.max.receive.size`: the largest SASL token (a SaslAuthenticate body or a
/// v0 raw token) read before authentication; a larger frame closes the connection unread.
pub const SASL_RECEIVE_BYTES_MAX: usize = 524_288;

/// `ssl.client.auth`: whether a TLS client must present a certificate signed by `ssl.ca`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    #[default]
    None,
    Requested,
    Required,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!(
                "ssl client auth '{s}': want none, requested or required"
            )),
        }
    }
}

/// A SASL mechanism this broker can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    OAuthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The SCRAM mechanism with Kafka's `ScramMechanism` type (1 = SHA-256, 2 = SHA-512).
    pub fn scram_from_type(t: i8) -> Option<Mechanism> {
        match t {
            1 => Some(Mechanism::ScramSha256),
            2 => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    pub fn scram_type(self) -> i8 {
        match self {
            Mechanism::ScramSha256 => 1,
            Mechanism::ScramSha512 => 2,
            Mechanism::Plain | Mechanism::OAuthBearer => 0,
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| match s.to_ascii_uppercase().as_str() {
                "GSSAPI" => {
                    format!("SASL mechanism {s} is not served yet (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER are)")
                }
                _ => format!("unknown SASL mechanism '{s}' (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"),
            })
    }
}

/// Every security setting of the broker.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// `listeners`. Empty = one PLAINTEXT listener on `BrokerConfig::listen`.
    pub listeners: Vec<ListenerSpec>,
    /// `advertised.listeners`, matched to `listeners` by name. A listener without an entry
    /// advertises its bound address.
    pub advertised_listeners: Vec<AdvertisedListener>,
    /// `ssl.certificate.location` / `ssl.key.location` / `ssl.ca.location` (PEM files).
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
    pub ssl_ca: Option<PathBuf>,
    pub ssl_client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules` (Kafka's syntax; `DEFAULT` = the subject's RFC 2253 name).
    pub ssl_principal_mapping_rules: String,
    /// How often the PEM files are checked for changes (reloaded without restart); 0 = never.
    pub ssl_reload_interval_ms: u64,
    /// Longest time a TLS handshake may take before the connection is closed.
    pub ssl_handshake_timeout_ms: u64,
    /// `sasl.enabled.mechanisms`.
    pub sasl_mechanisms: Vec<Mechanism>,
    /// From accept to a successful SaslAuthenticate, at most this long.
    pub sasl_handshake_timeout_ms: u64,
    /// `connections.max.reauth.ms` (KIP-368): sessions last this long, then the client must
    /// re-authenticate on the same connection; 0 = forever.
    pub connections_max_reauth_ms: u64,
    /// PBKDF2 iterations of the credentials `streamforge users create` writes.
    pub scram_iterations: u32,
    /// `sasl.oauthbearer.*`: how OAUTHBEARER tokens are checked.
    pub oauthbearer: jwt::OAuthConfig,
    /// `authorizer.class.name`: no authorizer (everything allowed) or ACLs.
    pub authorizer: acl::AuthorizerKind,
    /// `super.users` (`User:name` each) and `allow.everyone.if.no.acl.found`.
    pub acl: acl::AuthorizerConfig,
    /// `inter.broker.listener.name` / `security.inter.broker.protocol` (one of them; our
    /// listener names are their protocols): the listener brokers reach each other on.
    /// Neither = this broker's first listener.
    pub inter_broker_listener: Option<SecurityProtocol>,
    pub security_inter_broker_protocol: Option<SecurityProtocol>,
    /// `sasl.mechanism.inter.broker.protocol` [default: the first of `sasl_mechanisms`].
    pub sasl_mechanism_inter_broker: Option<Mechanism>,
    /// The broker's own SASL user on a SASL inter-broker listener (Kafka: the listener's
    /// `sasl.jaas.config` username/password).
    pub inter_broker_sasl_username: Option<String>,
    pub inter_broker_sasl_password: Option<Secret>,
}

/// A password in the settings: `Debug` does not show it (the settings are `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            listeners: Vec::new(),
            advertised_listeners: Vec::new(),
            ssl_cert: None,
            ssl_key: None,
            ssl_ca: None,
            ssl_client_auth: ClientAuth::None,
            ssl_principal_mapping_rules: "DEFAULT".to_string(),
            ssl_reload_interval_ms: 10_000,
            ssl_handshake_timeout_ms: 10_000,
            sasl_mechanisms: vec![Mechanism::ScramSha256, Mechanism::ScramSha512],
            sasl_handshake_timeout_ms: 10_000,
            connections_max_reauth_ms: 0,
            scram_iterations: scram::ITERATIONS_DEFAULT,
            oauthbearer: jwt::OAuthConfig::default(),
            authorizer: Default::default(),
            acl: Default::default(),
            inter_broker_listener: None,
            security_inter_broker_protocol: None,
            sasl_mechanism_inter_broker: None,
            inter_broker_sasl_username: None,
            inter_broker_sasl_password: None,
        }
    }
}

impl SecurityConfig {
    /// Whether any listener speaks SASL (ApiVersions then advertises SaslHandshake and
    /// SaslAuthenticate).
    pub fn serves_sasl(&self) -> bool {
        self.listeners.iter().any(|l| l.protocol.is_sasl())
    }

    /// Whether OAUTHBEARER tokens will be checked (a SASL listener with it enabled).
    pub fn serves_oauthbearer(&self) -> bool {
        self.serves_sasl() && self.sasl_mechanisms.contains(&Mechanism::OAuthBearer)
    }
}

/// One listener as clients see it: what it speaks, where it is bound and what Metadata
/// advertises for it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub protocol: SecurityProtocol,
    pub bound: std::net::SocketAddr,
    pub host: String,
    pub port: i32,
}

/// The security state every connection shares.
pub struct SecurityState {
    pub endpoints: Vec<Endpoint>,
    pub credentials: std::sync::Arc<credentials::CredentialStore>,
    /// The acceptor of TLS listeners (`None` when no listener speaks TLS).
    pub tls: Option<std::sync::Arc<tls::TlsSource>>,
    pub principal_mapper: principal::PrincipalMapper,
    /// The OAUTHBEARER token checker (`None` unless OAUTHBEARER is enabled on a SASL listener).
    pub oauthbearer: Option<std::sync::Arc<jwt::JwtValidator>>,
    /// The ACL authorizer (`--authorizer acl`); `None` = every request is allowed.
    pub authorizer: Option<std::sync::Arc<acl::Authorizer>>,
}

impl SecurityState {
    /// The endpoint of listener `index` (the first one for an index out of range).
    pub fn endpoint(&self, index: usize) -> &Endpoint {
        self.endpoints
            .get(index)
            .unwrap_or_else(|| &self.endpoints[0])
    }
}

/// The listeners to bind: `listeners`, or one PLAINTEXT listener on `listen`.
pub fn listener_specs(config: &SecurityConfig, listen: std::net::SocketAddr) -> Vec<ListenerSpec> {
    if config.listeners.is_empty() {
        vec![ListenerSpec {
            protocol: SecurityProtocol::Plaintext,
            addr: listen,
        }]
    } else {
        config.listeners.clone()
    }
}

/// Advertised endpoints for the bound listeners: the `advertised.listeners` entry of the same
/// protocol, else `legacy` (the old single `--advertised-listener`)
/// for the first listener,
/// else the bound address (loopback for an unspecified one).
pub fn endpoints(
    config: &SecurityConfig,
    bound: &[(SecurityProtocol, std::net::SocketAddr)],
    legacy: Option<(String, i32)>,
) -> Vec<Endpoint> {
    bound
        .iter()
        .enumerate()
        .map(|(i, (protocol, addr))| {
            let advertised = config
                .advertised_listeners
                .iter()
                .find(|a| a.protocol == *protocol)
                .map(|a| (a.host.clone(), a.port as i32))
                .or_else(|| if i == 0 { legacy.clone() } else { None });
            let (host, port) = advertised.unwrap_or_else(|| {
                let host = if addr.ip().is_unspecified() {
                    "127.0.0.1".to_string()
                } else {
                    addr.ip().to_string()
                };
                (host, addr.port() as i32)
            });
            Endpoint {
                protocol: *protocol,
                bound: *addr,
                host,
                port,
            }
        })
        .collect()
}
