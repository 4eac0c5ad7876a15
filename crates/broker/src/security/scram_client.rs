//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), client side, as a broker logs in to
//! another broker's SASL listener (Kafka's `ScramSaslClient`): no channel binding (`n,,`), no
//! extensions. Sans-io: the caller carries each message in a SaslAuthenticate.
//!
//! client-first `n,,n=<user>,r=<cnonce>` → server-first `r=<cnonce><snonce>,s=<salt>,i=<n>` →
//! client-final `c=biws,r=<nonce>,p=<proof>` → server-final `v=<signature>` (checked: the server
//! knew the credential) or `e=<error>`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use super::Mechanism;
use super::scram::{
    ITERATIONS_MAX, ITERATIONS_MIN, constant_time_eq, hash, hmac_sign, salted_password,
};

/// Random bytes of the client nonce (base64url, 32 characters).
const CLIENT_NONCE_BYTES: usize = 24;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramClientError {
    #[error("{0} is not a SCRAM mechanism")]
    NotScram(&'static str),
    #[error("malformed server message: {0}")]
    Malformed(&'static str),
    #[error("the server's nonce does not extend ours")]
    BadNonce,
    #[error("iterations {0} outside {ITERATIONS_MIN}..={ITERATIONS_MAX}")]
    Iterations(u32),
    #[error("the server sent extensions, which are not supported")]
    Unsupported,
    #[error("the server refused the login: {0}")]
    Refused(String),
    #[error("the server's signature is wrong (it does not know the credential)")]
    BadServerSignature,
    #[error("message out of order")]
    OutOfOrder,
}

#[derive(Debug)]
enum Phase {
    /// client-first sent; the server-first is next.
    First,
    /// client-final sent; the server-final must carry this signature.
    Final {
        server_signature: Vec<u8>,
    },
    Done,
}

/// One client login.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: Mechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    phase: Phase,
}

impl ScramClient {
    /// A login as `user` with a fresh random nonce.
    pub fn new(
        mechanism: Mechanism,
        user: &str,
        password: &str,
    ) -> Result<ScramClient, ScramClientError> {
        let nonce: [u8; CLIENT_NONCE_BYTES] = rand::random();
        let nonce = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(nonce);
        ScramClient::with_nonce(mechanism, user, password, &nonce)
    }

    /// A login with the given nonce (printable, no `,`): the RFC's test vectors.
    pub fn with_nonce(
        mechanism: Mechanism,
        user: &str,
        password: &str,
        nonce: &str,
    ) -> Result<ScramClient, ScramClientError> {
        if !matches!(mechanism, Mechanism::ScramSha256 | Mechanism::ScramSha512) {
            return Err(ScramClientError::NotScram(mechanism.name()));
        }
        Ok(ScramClient {
            mechanism,
            password: password.to_string(),
            client_first_bare: format!("n={},r={nonce}", encode_saslname(user)),
            client_nonce: nonce.to_string(),
            phase: Phase::First,
        })
    }

    /// The `client-first-message` (no channel binding, no authzid).
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Take the `server-first-message`; the `client-final-message` with the proof. Runs
    /// PBKDF2 (thousands of HMACs): call it off the async threads when that matters.
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramClientError> {
        if !matches!(self.phase, Phase::First) {
            return Err(ScramClientError::OutOfOrder);
        }
        let server_first =
            std::str::from_utf8(msg).map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        if let Some(e) = server_first.strip_prefix("e=") {
            return Err(ScramClientError::Refused(e.to_string()));
        }
        let mut attrs = server_first.split(',');
        let first = attrs.next();
        if first.is_some_and(|a| a.starts_with("m=")) {
            return Err(ScramClientError::Unsupported);
        }
        let nonce = attr(first, "r=")?;
        let salt = B64
            .decode(attr(attrs.next(), "s=")?)
            .map_err(|_| ScramClientError::Malformed("salt is not base64"))?;
        let iterations: u32 = attr(attrs.next(), "i=")?
            .parse()
            .map_err(|_| ScramClientError::Malformed("iterations are not a number"))?;
        // RFC 5802: the server's nonce starts with ours and adds its own.
        if nonce.len() <= self.client_nonce.len() || !nonce.starts_with(&self.client_nonce) {
            return Err(ScramClientError::BadNonce);
        }
        // Kafka's client refuses fewer than the mechanism's minimum; the maximum bounds the
        // PBKDF2 work a hostile server can ask of us.
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(ScramClientError::Iterations(iterations));
        }
        let m = self.mechanism;
        let salted = salted_password(m, self.password.as_bytes(), &salt, iterations);
        let client_key = hmac_sign(m, &salted, b"Client Key");
        let stored_key = hash(m, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac_sign(m, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac_sign(m, &salted, b"Server Key");
        self.phase = Phase::Final {
            server_signature: hmac_sign(m, &server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Take the `server-final-message`: `Ok` once the server proved it knows the credential.
    pub fn server_final(&mut self, msg: &[u8]) -> Result<(), ScramClientError> {
        let Phase::Final { server_signature } = std::mem::replace(&mut self.phase, Phase::Done)
        else {
            return Err(ScramClientError::OutOfOrder);
        };
        let msg = std::str::from_utf8(msg).map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(ScramClientError::Refused(e.to_string()));
        }
        let verifier = msg
            .split(',')
            .next()
            .and_then(|a| a.strip_prefix("v="))
            .ok_or(ScramClientError::Malformed("v="))?;
        let verifier = B64
            .decode(verifier)
            .map_err(|_| ScramClientError::Malformed("signature is not base64"))?;
        if constant_time_eq(&verifier, &server_signature) {
            Ok(())
        } else {
            Err(ScramClientError::BadServerSignature)
        }
    }
}

/// The value of attribute `key` (`r=`, `s=`, `i=`) in `a`.
fn attr<'a>(a: Option<&'a str>, key: &'static str) -> Result<&'a str, ScramClientError> {
    a.and_then(|a| a.strip_prefix(key))
        .ok_or(ScramClientError::Malformed(key))
}

/// RFC 5802 `saslname`: `,` is `=2C` and `=` is `=3D`.
fn encode_saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{ServerExchange, new_credential, parse_client_first};

    /// RFC 7677's SCRAM-SHA-256 example, byte for byte.
    #[test]
    fn rfc7677_example() {
        let mut c = ScramClient::with_nonce(
            Mechanism::ScramSha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        )
        .unwrap();
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = c.server_first(server_first.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert_eq!(
            c.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramClientError::OutOfOrder)
        );
    }

    /// A whole login against our server side; `Err` carries the server's refusal.
    fn login(
        m: Mechanism,
        user: &str,
        password: &str,
        stored_password: &str,
    ) -> Result<(), String> {
        let cred = new_credential(m, stored_password, 4096).unwrap();
        let mut c = ScramClient::new(m, user, password).unwrap();
        let first = parse_client_first(&c.client_first()).map_err(|e| e.to_string())?;
        assert_eq!(first.user, user);
        let server = ServerExchange::new(m, cred, first);
        let client_final = c.server_first(server.server_first()).unwrap();
        let server_final = server.finish(&client_final).map_err(|e| e.to_string())?;
        c.server_final(&server_final).map_err(|e| e.to_string())
    }

    #[test]
    fn logs_in_to_our_server_with_both_mechanisms() {
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            login(m, "broker", "secret", "secret").unwrap();
            login(m, "a,b=c", "secret", "secret").unwrap();
            assert!(login(m, "broker", "wrong", "secret").is_err(), "{m:?}");
        }
    }

    #[test]
    fn a_server_without_the_credential_is_caught() {
        let m = Mechanism::ScramSha512;
        let real = new_credential(m, "secret", 4096).unwrap();
        // An impostor that knows the salt and StoredKey (enough to check the proof) but not
        // the ServerKey cannot sign.
        let impostor = crate::security::scram::ScramCredential {
            server_key: vec![0; real.server_key.len()],
            ..real.clone()
        };
        let mut c = ScramClient::new(m, "broker", "secret").unwrap();
        let server =
            ServerExchange::new(m, impostor, parse_client_first(&c.client_first()).unwrap());
        let client_final = c.server_first(server.server_first()).unwrap();
        let server_final = server.finish(&client_final).unwrap();
        assert_eq!(
            c.server_final(&server_final),
            Err(ScramClientError::BadServerSignature)
        );
    }

    #[test]
    fn bad_server_messages_are_refused() {
        let m = Mechanism::ScramSha256;
        let first = |msg: &str| {
            ScramClient::with_nonce(m, "u", "p", "abc")
                .unwrap()
                .server_first(msg.as_bytes())
        };
        assert_eq!(
            first("r=abc,s=AAAA,i=4096").unwrap_err(),
            ScramClientError::BadNonce
        );
        assert_eq!(
            first("r=xyzdef,s=AAAA,i=4096").unwrap_err(),
            ScramClientError::BadNonce
        );
        assert_eq!(
            first("r=abcdef,s=AAAA,i=1000").unwrap_err(),
            ScramClientError::Iterations(1000)
        );
        assert_eq!(
            first("r=abcdef,s=AAAA,i=1000000").unwrap_err(),
            ScramClientError::Iterations(1_000_000)
        );
        assert_eq!(
            first("m=ext,r=abcdef,s=AAAA,i=4096").unwrap_err(),
            ScramClientError::Unsupported
        );
        assert_eq!(
            first("e=unknown-user").unwrap_err(),
            ScramClientError::Refused("unknown-user".into())
        );
        for bad in [
            "r=abcdef",
            "r=abcdef,s=!!,i=4096",
            "r=abcdef,s=AAAA,i=x",
            "\u{0}",
        ] {
            assert!(
                matches!(first(bad), Err(ScramClientError::Malformed(_))),
                "{bad}"
            );
        }
        let mut c = ScramClient::with_nonce(m, "u", "p", "abc").unwrap();
        assert_eq!(c.server_final(b"v=AAAA"), Err(ScramClientError::OutOfOrder));
        let mut c = ScramClient::with_nonce(m, "u", "p", "abc").unwrap();
        c.server_first(b"r=abcdef,s=AAAA,i=4096").unwrap();
        assert_eq!(
            c.server_final(b"e=invalid-proof"),
            Err(ScramClientError::Refused("invalid-proof".into()))
        );
        assert!(ScramClient::new(Mechanism::Plain, "u", "p").is_err());
    }
}
