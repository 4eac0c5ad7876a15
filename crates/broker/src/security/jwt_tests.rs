//! Unit tests of `jwt`: tokens signed here with throw-away keys (aws-lc-rs), checked against
//! a JWKS file in a temp dir.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;

pub(crate) struct Signer {
    key: EncodingKey,
    alg: Algorithm,
    kid: Option<String>,
}

impl Signer {
    pub(crate) fn es256(kid: &str) -> Signer {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        Signer {
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            alg: Algorithm::ES256,
            kid: Some(kid.to_string()),
        }
    }

    fn eddsa() -> Signer {
        let pkcs8 = Ed25519KeyPair::generate().unwrap().to_pkcs8v1().unwrap();
        Signer {
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
            alg: Algorithm::EdDSA,
            kid: None,
        }
    }

    fn jwk(&self) -> Value {
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&self.key, self.alg).unwrap()).unwrap();
        if let Some(kid) = &self.kid {
            jwk["kid"] = json!(kid);
        }
        jwk
    }

    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

pub(crate) fn claims(sub: &str, exp_in_s: i64) -> Value {
    let now = unix_now_s();
    json!({"sub": sub, "iat": now, "exp": now + exp_in_s, "iss": "https://idp.test", "aud": ["kafka"]})
}

pub(crate) fn write_jwks(dir: &Path, signers: &[&Signer]) -> PathBuf {
    let path = dir.join("jwks.json");
    let keys: Vec<Value> = signers.iter().map(|s| s.jwk()).collect();
    std::fs::write(&path, json!({ "keys": keys }).to_string()).unwrap();
    path
}

pub(crate) fn validator(path: PathBuf, tweak: impl FnOnce(&mut OAuthConfig)) -> Arc<JwtValidator> {
    let mut c = OAuthConfig {
        jwks_file: Some(path),
        ..OAuthConfig::default()
    };
    tweak(&mut c);
    JwtValidator::load(&c).unwrap()
}

fn kind(r: Result<ValidToken, TokenError>) -> ErrorKind {
    match r {
        Err(TokenError::Invalid(e)) => e.into_kind(),
        other => panic!("want a validation error, got {other:?}"),
    }
}

#[test]
fn a_good_token_names_its_subject_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let s = Signer::es256("k1");
    let v = validator(write_jwks(dir.path(), &[&s]), |c| {
        c.expected_issuer = Some("https://idp.test".into());
        c.expected_audience = vec!["other".into(), "kafka".into()];
    });
    let c = claims("alice", 60);
    let t = v.validate(&s.sign(&c)).unwrap();
    assert_eq!(t.principal, "alice");
    assert_eq!(t.expires_at_ms, c["exp"].as_i64().unwrap() * 1000);
    // EdDSA without a kid: the only key of its family is tried.
    let e = Signer::eddsa();
    let v = validator(write_jwks(dir.path(), &[&s, &e]), |_| {});
    assert_eq!(
        v.validate(&e.sign(&claims("bob", 60))).unwrap().principal,
        "bob"
    );
}

#[test]
fn expired_and_not_yet_valid_tokens_are_refused_outside_the_clock_skew() {
    let dir = tempfile::tempdir().unwrap();
    let s = Signer::es256("k1");
    let v = validator(write_jwks(dir.path(), &[&s]), |_| {});
    assert!(matches!(
        kind(v.validate(&s.sign(&claims("alice", -120)))),
        ErrorKind::ExpiredSignature
    ));
    // 10 s past exp is inside the default 30 s skew.
    assert!(v.validate(&s.sign(&claims("alice", -10))).is_ok());
    let mut c = claims("alice", 600);
    c["nbf"] = json!(unix_now_s() + 300);
    assert!(matches!(
        kind(v.validate(&s.sign(&c))),
        ErrorKind::ImmatureSignature
    ));
    c["nbf"] = json!(unix_now_s() + 10);
    assert!(v.validate(&s.sign(&c)).is_ok());
    c["iat"] = json!(unix_now_s() + 300);
    assert!(matches!(
        v.validate(&s.sign(&c)),
        Err(TokenError::IssuedInFuture(_))
    ));
    let strict = validator(write_jwks(dir.path(), &[&s]), |c| c.clock_skew_seconds = 0);
    assert!(strict.validate(&s.sign(&claims("alice", -10))).is_err());
}

#[test]
fn a_bad_signature_or_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Signer::es256("k1");
    let v = validator(write_jwks(dir.path(), &[&s]), |_| {});
    let impostor = Signer::es256("k1");
    assert!(matches!(
        kind(v.validate(&impostor.sign(&claims("alice", 60)))),
        ErrorKind::InvalidSignature
    ));
    let good = s.sign(&claims("alice", 60));
    let (rest, sig) = good.rsplit_once('.').unwrap();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    let tampered = format!("{rest}.{flipped}{}", &sig[1..]);
    assert!(v.validate(&tampered).is_err());
    let other = Signer::es256("k2");
    assert!(matches!(
        v.validate(&other.sign(&claims("alice", 60))),
        Err(TokenError::UnknownKey(Some(_), Algorithm::ES256))
    ));
}

#[test]
fn issuer_audience_subject_and_iat_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = Signer::es256("k1");
    let path = write_jwks(dir.path(), &[&s]);
    let v = validator(path.clone(), |c| {
        c.expected_issuer = Some("https://other".into())
    });
    assert!(matches!(
        kind(v.validate(&s.sign(&claims("a", 60)))),
        ErrorKind::InvalidIssuer
    ));
    let v = validator(path.clone(), |c| {
        c.expected_audience = vec!["not-kafka".into()]
    });
    assert!(matches!(
        kind(v.validate(&s.sign(&claims("a", 60)))),
        ErrorKind::InvalidAudience
    ));
    let mut c = claims("a", 60);
    c.as_object_mut().unwrap().remove("aud");
    assert!(matches!(
        kind(v.validate(&s.sign(&c))),
        ErrorKind::MissingRequiredClaim(_)
    ));
    let v = validator(path.clone(), |_| {});
    for (claim, replacement) in [("sub", None), ("sub", Some(json!("  "))), ("iat", None)] {
        let mut c = claims("a", 60);
        match replacement {
            Some(r) => c[claim] = r,
            None => drop(c.as_object_mut().unwrap().remove(claim)),
        }
        assert!(matches!(v.validate(&s.sign(&c)), Err(TokenError::Claim(n)) if n == claim));
    }
    let mut c = claims("a", 60);
    c.as_object_mut().unwrap().remove("exp");
    assert!(matches!(
        kind(v.validate(&s.sign(&c))),
        ErrorKind::MissingRequiredClaim(_)
    ));
    let v = validator(path, |c| c.sub_claim_name = "client_id".into());
    let mut c = claims("a", 60);
    c["client_id"] = json!("svc-1");
    assert_eq!(v.validate(&s.sign(&c)).unwrap().principal, "svc-1");
}

#[test]
fn garbage_symmetric_and_oversized_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Signer::es256("k1");
    let v = validator(write_jwks(dir.path(), &[&s]), |_| {});
    for bad in ["", "abc", "a.b.c", "...", "eyJhbGciOiJub25lIn0.e30."] {
        assert!(v.validate(bad).is_err(), "{bad}");
    }
    let hs = EncodingKey::from_secret(b"shared-secret").unwrap();
    let token =
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims("a", 60), &hs).unwrap();
    assert!(matches!(
        v.validate(&token),
        Err(TokenError::Algorithm(Algorithm::HS256))
    ));
    let huge = "a".repeat(SASL_RECEIVE_BYTES_MAX + 1);
    assert!(matches!(v.validate(&huge), Err(TokenError::TooLarge(_))));
}

#[test]
fn a_new_key_in_the_file_is_found_without_restart_and_a_broken_file_keeps_the_old_keys() {
    let dir = tempfile::tempdir().unwrap();
    let s1 = Signer::es256("k1");
    let path = write_jwks(dir.path(), &[&s1]);
    let v = validator(path.clone(), |_| {});
    let s2 = Signer::es256("k2");
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_jwks(dir.path(), &[&s1, &s2]);
    // The unknown kid makes the validator look at the file again.
    assert_eq!(
        v.validate(&s2.sign(&claims("b", 60))).unwrap().principal,
        "b"
    );
    std::fs::write(&path, "{not json").unwrap();
    assert!(v.reload_if_changed().is_err());
    assert!(v.validate(&s1.sign(&claims("a", 60))).is_ok());
    assert!(
        !v.reload_if_changed().unwrap(),
        "a broken file is reported once"
    );
}

#[test]
fn jwks_urls_must_be_files() {
    assert_eq!(
        jwks_path_from_url("file:///etc/kafka/jwks.json").unwrap(),
        PathBuf::from("/etc/kafka/jwks.json")
    );
    assert!(jwks_path_from_url("https://idp.example/jwks").is_err());
    assert!(jwks_path_from_url("not a url").is_err());
    let missing = OAuthConfig::default();
    assert!(matches!(
        JwtValidator::load(&missing),
        Err(JwksError::MissingFile)
    ));
}
