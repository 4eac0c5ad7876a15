//! SASL/OAUTHBEARER's client initial response (RFC 7628 section 3.1, as Kafka's
//! `OAuthBearerClientInitialResponse` reads it, KIP-255 / KIP-342):
//!
//! ```text
//! n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01]...\x01
//! ```
//!
//! The token is checked by `jwt`; this module only takes the message apart, strictly: a GS2
//! header without channel binding, `auth` with the `Bearer` scheme, extension keys of letters
//! and values of printable ASCII, nothing after the final separator.

use std::collections::BTreeMap;

use super::scram;

/// RFC 7628's `kvsep`.
pub const KVSEP: u8 = 0x01;
/// What the server answers a refused token with (RFC 7628 section 3.2.2, Kafka's
/// `OAuthBearerSaslServer.jsonErrorResponse` with status `invalid_token` and no scope): the
/// client then sends a lone `KVSEP` and gets SASL_AUTHENTICATION_FAILED.
pub const INVALID_TOKEN_CHALLENGE: &str = r#"{"status":"invalid_token"}"#;
/// The extension key reserved for the token itself.
const AUTH_KEY: &str = "auth";

/// The parsed client initial response.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientResponse {
    /// The GS2 authorization id (empty when absent); if given it must be the token's principal.
    pub authzid: String,
    /// The bearer token (a JWT).
    pub token: String,
    /// SASL extensions (KIP-342), accepted and kept for logging only.
    pub extensions: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("invalid OAUTHBEARER client response: {0}")]
    Malformed(&'static str),
    #[error("invalid scheme in OAuth token: {0}")]
    Scheme(String),
}

/// Parse an OAUTHBEARER client initial response.
pub fn parse_client_response(msg: &[u8]) -> Result<ClientResponse, ParseError> {
    let msg = std::str::from_utf8(msg).map_err(|_| ParseError::Malformed("not UTF-8"))?;
    let rest = msg
        .strip_prefix("n,")
        .ok_or(ParseError::Malformed("GS2 header must start with 'n,'"))?;
    let (authzid, rest) = rest
        .split_once(',')
        .ok_or(ParseError::Malformed("no end of the GS2 header"))?;
    let authzid = match authzid {
        "" => String::new(),
        a => {
            let name = a
                .strip_prefix("a=")
                .filter(|n| !n.is_empty())
                .ok_or(ParseError::Malformed("bad authzid"))?;
            scram::decode_saslname(name).map_err(|_| ParseError::Malformed("bad authzid"))?
        }
    };
    let sep = char::from(KVSEP);
    // `kvsep *kvpair kvsep`, each kvpair ending with its own kvsep.
    let pairs = rest
        .strip_prefix(sep)
        .and_then(|r| r.strip_suffix(sep))
        .and_then(|r| r.strip_suffix(sep))
        .ok_or(ParseError::Malformed("missing separators"))?;
    let mut token = None;
    let mut extensions = BTreeMap::new();
    for pair in pairs.split(sep) {
        let (key, value) = pair
            .split_once('=')
            .ok_or(ParseError::Malformed("key without '='"))?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(ParseError::Malformed("extension key must be letters"));
        }
        if value.is_empty() || !value.bytes().all(valid_value_byte) {
            return Err(ParseError::Malformed(
                "extension value has invalid characters",
            ));
        }
        if key == AUTH_KEY {
            if token.is_some() {
                return Err(ParseError::Malformed("'auth' given twice"));
            }
            token = Some(bearer_token(value)?);
        } else if extensions
            .insert(key.to_string(), value.to_string())
            .is_some()
        {
            return Err(ParseError::Malformed("extension given twice"));
        }
    }
    let token = token.ok_or(ParseError::Malformed("no 'auth' key"))?;
    Ok(ClientResponse {
        authzid,
        token,
        extensions,
    })
}

/// RFC 7628's `value`: `%x21-7E` plus space, tab, CR and LF.
fn valid_value_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// `auth=Bearer <b64token>`: RFC 6750's `b64token` as Kafka matches it (`[-_.a-zA-Z0-9]+`).
fn bearer_token(value: &str) -> Result<String, ParseError> {
    let (scheme, token) = value.split_once(' ').ok_or(ParseError::Malformed(
        "auth value is not '<scheme> <token>'",
    ))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ParseError::Scheme(scheme.to_string()));
    }
    let token = token.trim_start_matches(' ');
    let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if token.is_empty() || !token.bytes().all(ok) {
        return Err(ParseError::Malformed("token is not a b64token"));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_librdkafka_kafkajs_and_java_send() {
        let r = parse_client_response(b"n,,\x01auth=Bearer a.b.c\x01\x01").unwrap();
        assert_eq!(r.token, "a.b.c");
        assert_eq!(r.authzid, "");
        let r = parse_client_response(
            b"n,a=alice=2Cx,\x01auth=bearer  x-y_z.1\x01traceId=abc 1\x01logicalCluster=lc\x01\x01",
        )
        .unwrap();
        assert_eq!(r.authzid, "alice,x");
        assert_eq!(r.token, "x-y_z.1");
        assert_eq!(r.extensions["traceId"], "abc 1");
        assert_eq!(r.extensions.len(), 2);
    }

    #[test]
    fn refuses_malformed_responses() {
        for bad in [
            &b""[..],
            b"\xff",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"p=tls-unique,,\x01auth=Bearer t\x01\x01",
            b"n,,auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01\x01",
            b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
            b"n,,\x01auth=Bearer t\x01k1=v\x01\x01",
            b"n,,\x01auth=Bearer t\x01k=\x01\x01",
            b"n,,\x01auth=Bearer t\x01k=\x02\x01\x01",
            b"n,,\x01auth=Bearer t!\x01\x01",
            b"n,,\x01auth=Bearer\x01\x01",
            b"n,a=,\x01auth=Bearer t\x01\x01",
            b"n,a=x=zz,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01\x01trailing",
            b"n,,\x01auth=Bearer t\x01\x01\x01",
            b"n,,\x01\x01auth=Bearer t\x01\x01",
        ] {
            assert!(parse_client_response(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_client_response(b"n,,\x01auth=Basic dXNlcg\x01\x01").unwrap_err(),
            ParseError::Scheme("Basic".into())
        );
    }
}
