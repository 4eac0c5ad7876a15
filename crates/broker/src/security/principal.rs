//! Who a connection is: Kafka's `KafkaPrincipal` (`User:name`), from SASL or from the TLS
//! client certificate's subject through `ssl.principal.mapping.rules`.

use regex::Regex;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Kafka's principal for unauthenticated connections (PLAINTEXT, SSL without a certificate).
pub const ANONYMOUS: &str = "ANONYMOUS";

/// `User:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    pub fn user(name: impl Into<String>) -> Self {
        Principal { name: name.into() }
    }

    pub fn anonymous() -> Self {
        Principal::user(ANONYMOUS)
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    #[error("client certificate is not valid DER: {0}")]
    Certificate(String),
    #[error("no ssl.principal.mapping.rules rule matches '{0}'")]
    NoRuleMatches(String),
    #[error("ssl.principal.mapping.rules: {0}")]
    BadRules(String),
}

/// One rule of `ssl.principal.mapping.rules`: `RULE:pattern/replacement/[L|U]` or `DEFAULT`.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: Regex,
        replacement: String,
        case: Option<char>,
    },
}

/// Kafka's `SslPrincipalMapper`: the first rule whose pattern matches the whole distinguished
/// name gives the user name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    pub fn parse(text: &str) -> Result<Self, PrincipalError> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            rest = rest.trim_start_matches([',', ' ', '\n', '\t']);
            if let Some(r) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("RULE:") {
                let (rule, r) = parse_rule(r)?;
                rules.push(rule);
                rest = r;
            } else if !rest.is_empty() {
                return Err(PrincipalError::BadRules(format!(
                    "expected DEFAULT or RULE:pattern/replacement/ at '{rest}'"
                )));
            }
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMapper { rules })
    }

    /// The user name for a certificate subject in RFC 2253 form.
    pub fn map(&self, dn: &str) -> Result<String, PrincipalError> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    let Some(m) = pattern.captures(dn) else {
                        continue;
                    };
                    let mut out = String::new();
                    m.expand(replacement, &mut out);
                    return Ok(match case {
                        Some('L') => out.to_lowercase(),
                        Some('U') => out.to_uppercase(),
                        _ => out,
                    });
                }
            }
        }
        Err(PrincipalError::NoRuleMatches(dn.to_string()))
    }

    /// The principal of a TLS client presenting `cert_der` (its leaf certificate).
    pub fn principal(&self, cert_der: &[u8]) -> Result<Principal, PrincipalError> {
        Ok(Principal::user(self.map(&subject_rfc2253(cert_der)?)?))
    }
}

/// `pattern/replacement/flags` up to the next rule: the pattern may not contain `/`.
fn parse_rule(text: &str) -> Result<(Rule, &str), PrincipalError> {
    let bad = |m: &str| PrincipalError::BadRules(format!("RULE:{text}: {m}"));
    let (pattern, rest) = text.split_once('/').ok_or_else(|| bad("missing '/'"))?;
    let (replacement, rest) = rest
        .split_once('/')
        .ok_or_else(|| bad("missing second '/'"))?;
    let (case, rest) = match rest.chars().next() {
        Some(c @ ('L' | 'U')) => (Some(c), &rest[1..]),
        _ => (None, rest),
    };
    // Kafka matches the whole name (`Matcher.matches`).
    let pattern = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| bad(&e.to_string()))?;
    Ok((
        Rule::Replace {
            pattern,
            replacement: replacement.to_string(),
            case,
        },
        rest,
    ))
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` (RFC 2253) writes it:
/// the last RDN first, `,` between RDNs, `+` inside one.
pub fn subject_rfc2253(cert_der: &[u8]) -> Result<String, PrincipalError> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| PrincipalError::Certificate(e.to_string()))?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let key = short_name(&oid).unwrap_or(&oid).to_string();
                    let value = atv.as_str().map(escape).unwrap_or_default();
                    format!("{key}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// The keywords RFC 2253 (and Java) name; other attributes keep their dotted OID.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let edge = (i == 0 && (c == '#' || c == ' ')) || (i + 1 == v.chars().count() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_follow_kafkas_syntax() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=([a-zA-Z0-9.]*),OU=(.*)$/$1@$2/L, RULE:^CN=(.*?),.*$/$1/, DEFAULT",
        )
        .unwrap();
        assert_eq!(m.map("CN=Alice,OU=Eng").unwrap(), "alice@eng");
        assert_eq!(m.map("CN=bob x,O=Org,C=US").unwrap(), "bob x");
        assert_eq!(m.map("O=Org").unwrap(), "O=Org");
        let strict = PrincipalMapper::parse("RULE:^CN=(.*)$/$1/U").unwrap();
        assert_eq!(strict.map("CN=carol").unwrap(), "CAROL");
        assert!(strict.map("O=x").is_err());
        assert!(PrincipalMapper::parse("RULE:(/x").is_err());
        assert!(PrincipalMapper::parse("nonsense").is_err());
        assert_eq!(
            PrincipalMapper::parse("").unwrap().map("CN=a").unwrap(),
            "CN=a"
        );
    }

    #[test]
    fn escapes_special_characters() {
        assert_eq!(escape("a,b"), "a\\,b");
        assert_eq!(escape(" x "), "\\ x\\ ");
    }
}
