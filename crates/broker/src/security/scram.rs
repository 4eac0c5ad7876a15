//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka speaks it
//! (no channel binding; `tokenauth` extensions refused). The broker keeps only
//! `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`, never the password or SaltedPassword.
//! The primitives (PBKDF2, HMAC, SHA-2) come from aws-lc-rs, the library rustls uses here.

use std::num::NonZeroU32;

use aws_lc_rs::{digest, hmac, pbkdf2};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use super::Mechanism;

/// Kafka's `ScramMechanism` bounds on the PBKDF2 iteration count.
pub const ITERATIONS_MIN: u32 = 4096;
pub const ITERATIONS_MAX: u32 = 16384;
/// What `streamforge users create` uses unless told otherwise (Kafka's CLI default).
pub const ITERATIONS_DEFAULT: u32 = 8192;
/// Bytes of random salt per credential and of the server's nonce.
pub const SALT_BYTES: usize = 32;
const SERVER_NONCE_BYTES: usize = 24;

/// One user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("unknown user or wrong password")]
    BadCredentials,
    #[error("nonce does not match the server's")]
    BadNonce,
    #[error("channel binding or extensions are not supported")]
    Unsupported,
    #[error("iterations {0} outside {ITERATIONS_MIN}..={ITERATIONS_MAX}")]
    Iterations(u32),
}

fn algorithms(
    m: Mechanism,
) -> (
    pbkdf2::Algorithm,
    hmac::Algorithm,
    &'static digest::Algorithm,
) {
    match m {
        Mechanism::ScramSha512 => (
            pbkdf2::PBKDF2_HMAC_SHA512,
            hmac::HMAC_SHA512,
            &digest::SHA512,
        ),
        _ => (
            pbkdf2::PBKDF2_HMAC_SHA256,
            hmac::HMAC_SHA256,
            &digest::SHA256,
        ),
    }
}

pub(super) fn hmac_sign(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(algorithms(m).1, key), data)
        .as_ref()
        .to_vec()
}

pub(super) fn hash(m: Mechanism, data: &[u8]) -> Vec<u8> {
    digest::digest(algorithms(m).2, data).as_ref().to_vec()
}

/// `Hi(password, salt, i)` of RFC 5802 (PBKDF2 with HMAC).
pub fn salted_password(m: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let (alg, _, d) = algorithms(m);
    let mut out = vec![0u8; d.output_len()];
    let i = NonZeroU32::new(iterations.max(1)).expect("max(1) is non-zero");
    pbkdf2::derive(alg, i, salt, password, &mut out);
    out
}

/// The stored credential from `SaltedPassword` (what AlterUserScramCredentials carries).
pub fn credential_from_salted(
    m: Mechanism,
    salted: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<ScramCredential, ScramError> {
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        return Err(ScramError::Iterations(iterations));
    }
    let client_key = hmac_sign(m, salted, b"Client Key");
    Ok(ScramCredential {
        salt: salt.to_vec(),
        iterations,
        stored_key: hash(m, &client_key),
        server_key: hmac_sign(m, salted, b"Server Key"),
    })
}

/// A random salt.
pub fn new_salt() -> [u8; SALT_BYTES] {
    rand::random()
}

/// A new credential with a random salt.
pub fn new_credential(
    m: Mechanism,
    password: &str,
    iterations: u32,
) -> Result<ScramCredential, ScramError> {
    let salt = new_salt();
    let salted = salted_password(m, password.as_bytes(), &salt, iterations);
    credential_from_salted(m, &salted, &salt, iterations)
}

/// Whether `password` is the one `cred` was made from (SASL PLAIN against SCRAM credentials).
pub fn verify_password(m: Mechanism, cred: &ScramCredential, password: &str) -> bool {
    let salted = salted_password(m, password.as_bytes(), &cred.salt, cred.iterations);
    let client_key = hmac_sign(m, &salted, b"Client Key");
    constant_time_eq(&hash(m, &client_key), &cred.stored_key)
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `saslname` decoding: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
pub(super) fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad '=' escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The parsed `client-first-message`.
#[derive(Debug)]
pub struct ClientFirst {
    pub user: String,
    gs2_header: String,
    bare: String,
    nonce: String,
}

pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, ScramError> {
    let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let (cb, rest) = msg
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    match cb {
        "n" | "y" => {}
        _ if cb.starts_with("p=") => return Err(ScramError::Unsupported),
        _ => return Err(ScramError::Malformed("bad channel binding flag")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("no GS2 header"))?;
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(ScramError::Malformed("bad authzid"));
    }
    let mut attrs = bare.split(',');
    let user = attrs
        .next()
        .and_then(|a| a.strip_prefix("n="))
        .ok_or(ScramError::Malformed("no user name"))?;
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or(ScramError::Malformed("no client nonce"))?;
    if attrs.next().is_some() {
        // Kafka's only extension is `tokenauth` (delegation tokens), not served.
        return Err(ScramError::Unsupported);
    }
    let user = decode_saslname(user)?;
    if authzid.len() > 2 && decode_saslname(&authzid[2..])? != user {
        return Err(ScramError::BadCredentials);
    }
    Ok(ClientFirst {
        user,
        gs2_header: format!("{cb},{authzid},"),
        bare: bare.to_string(),
        nonce: nonce.to_string(),
    })
}

/// The server's side of one exchange after `client-first-message`.
#[derive(Debug)]
pub struct ServerExchange {
    mechanism: Mechanism,
    credential: ScramCredential,
    client_first: ClientFirst,
    server_first: String,
    nonce: String,
}

impl ServerExchange {
    pub fn new(
        mechanism: Mechanism,
        credential: ScramCredential,
        client_first: ClientFirst,
    ) -> Self {
        let server_nonce: [u8; SERVER_NONCE_BYTES] = rand::random();
        let nonce = format!(
            "{}{}",
            client_first.nonce,
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(server_nonce)
        );
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        ServerExchange {
            mechanism,
            credential,
            client_first,
            server_first,
            nonce,
        }
    }

    pub fn user(&self) -> &str {
        &self.client_first.user
    }

    pub fn server_first(&self) -> &[u8] {
        self.server_first.as_bytes()
    }

    /// Check `client-final-message`; on success the `server-final-message`.
    pub fn finish(&self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        if B64.decode(binding).ok().as_deref() != Some(self.client_first.gs2_header.as_bytes()) {
            return Err(ScramError::Malformed(
                "channel binding does not match the GS2 header",
            ));
        }
        // Kafka's check is `endsWith`: librdkafka sends its nonce again before the combined
        // one (`r=<cnonce><cnonce><snonce>`), and the proof covers what was sent either way.
        let suffix = nonce
            .len()
            .checked_sub(self.nonce.len())
            .map(|at| &nonce.as_bytes()[at..]);
        if !suffix.is_some_and(|s| constant_time_eq(s, self.nonce.as_bytes())) {
            return Err(ScramError::BadNonce);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let m = self.mechanism;
        let auth_message = format!(
            "{},{},{}",
            self.client_first.bare, self.server_first, without_proof
        );
        let signature = hmac_sign(m, &self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::BadCredentials);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&hash(m, &client_key), &self.credential.stored_key) {
            return Err(ScramError::BadCredentials);
        }
        let server_signature = hmac_sign(m, &self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 test vector, with its server nonce.
    #[test]
    fn rfc7677_example_verifies() {
        let m = Mechanism::ScramSha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(m, b"pencil", &salt, 4096);
        let cred = credential_from_salted(m, &salted, &salt, 4096).unwrap();
        let first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let mut ex = ServerExchange::new(m, cred.clone(), first);
        ex.nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into();
        ex.server_first = format!("r={},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", ex.nonce);
        let final_msg = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                         p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            ex.finish(final_msg.as_bytes()).unwrap(),
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec()
        );
        let wrong_proof = final_msg.replace("p=dH", "p=dI");
        assert_eq!(
            ex.finish(wrong_proof.as_bytes()),
            Err(ScramError::BadCredentials)
        );
        let wrong_nonce = final_msg.replace("k0,", "k1,");
        assert_eq!(ex.finish(wrong_nonce.as_bytes()), Err(ScramError::BadNonce));
        assert!(verify_password(m, &cred, "pencil"));
        assert!(!verify_password(m, &cred, "pen"));
    }

    #[test]
    fn client_first_parsing_is_strict() {
        assert_eq!(parse_client_first(b"n,,n=a=2Cb,r=x").unwrap().user, "a,b");
        for bad in [
            &b"n,,n=u"[..],
            b"p=tls,,n=u,r=x",
            b"x,,n=u,r=x",
            b"n,,n=a=zz,r=x",
            b"\xff",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_client_first(b"n,,n=u,r=x,tokenauth=true").unwrap_err(),
            ScramError::Unsupported
        );
        assert!(credential_from_salted(Mechanism::ScramSha512, b"k", b"s", 100).is_err());
    }
}
