//! `listeners` / `advertised.listeners` in Kafka's form:
//! `PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094`. The listener name is its security
//! protocol (Kafka's `listener.security.protocol.map` with custom names is not served), so a
//! broker has at most one listener per protocol.

use std::net::SocketAddr;

/// Kafka's `SecurityProtocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Kafka's `SecurityProtocol.id` (DescribeCluster and the broker registration carry it).
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(format!(
                "security protocol '{s}': want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            )),
        }
    }
}

/// One bound listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub protocol: SecurityProtocol,
    pub addr: SocketAddr,
}

/// One advertised endpoint: what Metadata tells clients that came in on `protocol`'s listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedListener {
    pub protocol: SecurityProtocol,
    pub host: String,
    pub port: u16,
}

/// Parse `listeners`: comma-separated `PROTOCOL://HOST:PORT`, HOST empty for every interface,
/// a name (resolved now, IPv4 preferred) or an IP (`[::1]` for IPv6).
pub fn parse_listeners(text: &str) -> Result<Vec<ListenerSpec>, String> {
    let mut out: Vec<ListenerSpec> = Vec::new();
    for item in split_list(text) {
        let (protocol, host, port) = split_item(item)?;
        let addr = resolve(&host, port)?;
        if out.iter().any(|l| l.protocol == protocol) {
            return Err(format!("{item}: listener {} given twice", protocol.name()));
        }
        if out.iter().any(|l| l.addr == addr && addr.port() != 0) {
            return Err(format!("{item}: address {addr} used by two listeners"));
        }
        out.push(ListenerSpec { protocol, addr });
    }
    if out.is_empty() {
        return Err("no listener given".into());
    }
    Ok(out)
}

/// Parse `advertised.listeners` (same form; HOST is kept as given, not resolved). A bare
/// `HOST:PORT` is a PLAINTEXT entry (the old `--advertised-listener`).
pub fn parse_advertised(text: &str) -> Result<Vec<AdvertisedListener>, String> {
    let mut out: Vec<AdvertisedListener> = Vec::new();
    for item in split_list(text) {
        let (protocol, host, port) = split_item(item)?;
        if host.is_empty() {
            return Err(format!("{item}: an advertised listener needs a host"));
        }
        if out.iter().any(|l| l.protocol == protocol) {
            return Err(format!("{item}: listener {} given twice", protocol.name()));
        }
        out.push(AdvertisedListener {
            protocol,
            host,
            port,
        });
    }
    Ok(out)
}

fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn split_item(item: &str) -> Result<(SecurityProtocol, String, u16), String> {
    let (protocol, rest) = match item.split_once("://") {
        Some((p, rest)) => (p.parse::<SecurityProtocol>()?, rest),
        None => (SecurityProtocol::Plaintext, item),
    };
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{item}: want PROTOCOL://HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{item}: port '{port}' is not a number from 0 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((protocol, host.to_string(), port))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("cannot resolve host '{host}': {e}"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("host '{host}' has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_listener_lists() {
        let l = parse_listeners("PLAINTEXT://127.0.0.1:9092, SASL_SSL://:9094,ssl://[::1]:9093")
            .unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[1].addr.to_string(), "0.0.0.0:9094");
        assert_eq!(l[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[2].addr.to_string(), "[::1]:9093");
        assert!(
            parse_listeners("SSL://:1,SSL://:2")
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse_listeners("TLS://:1").unwrap_err().contains("TLS"));
        assert!(
            parse_listeners("SSL://h")
                .unwrap_err()
                .contains("HOST:PORT")
        );
        assert!(parse_listeners("").is_err());
    }

    #[test]
    fn advertised_keeps_host_names() {
        let a = parse_advertised("SASL_SSL://kafka.example:9094,broker:9092").unwrap();
        assert_eq!(a[0].host, "kafka.example");
        assert_eq!(a[1].protocol, SecurityProtocol::Plaintext);
        assert!(parse_advertised("SSL://:9093").is_err());
    }
}
