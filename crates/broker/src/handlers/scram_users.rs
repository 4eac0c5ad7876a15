//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SCRAM users of
//! `security::credentials` (Kafka's error codes and messages per user), and SaslHandshake (17)
//! / SaslAuthenticate (36) where no SASL exchange is due (a non-SASL listener, or after
//! authentication without re-authentication): ILLEGAL_SASL_STATE, as Kafka answers.
//! SASL listeners answer SaslHandshake/SaslAuthenticate in `security::gate` first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::router::HandlerResult;
use crate::security::Mechanism;
use crate::security::acl::{Access, Operation};
use crate::security::credentials::USER_NAME_BYTES_MAX;
use crate::security::scram::{self, ITERATIONS_MAX, ITERATIONS_MIN, ScramCredential};

pub async fn handle_sasl_handshake(_state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let mut resp = SaslHandshakeResponse::default();
    resp.error_code = ResponseError::IllegalSaslState.code();
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_sasl_authenticate(
    _state: Arc<BrokerState>,
    req: RequestFrame,
) -> HandlerResult {
    let mut resp = SaslAuthenticateResponse::default();
    resp.error_code = ResponseError::IllegalSaslState.code();
    resp.error_message = message("SaslAuthenticate request received when no SASL exchange is due");
    Ok(Some(req.respond(&resp)?))
}

pub async fn handle_describe(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeUserScramCredentialsRequest = req.decode()?;
    let store = &state.security.credentials;
    let mut resp = DescribeUserScramCredentialsResponse::default();
    if !Access::of(&state, &req).cluster(Operation::Describe) {
        // Kafka: CLUSTER_AUTHORIZATION_FAILED for the whole request.
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return Ok(Some(req.respond(&resp)?));
    }
    let result = |user: &str, creds: Vec<(Mechanism, u32)>| {
        let mut r = DescribeUserScramCredentialsResult::default();
        r.user = StrBytes::from_string(user.to_string());
        r.credential_infos = creds
            .into_iter()
            .map(|(m, iterations)| {
                let mut c = CredentialInfo::default();
                c.mechanism = m.scram_type();
                c.iterations = iterations as i32;
                c
            })
            .collect();
        r
    };
    match request.users.filter(|u| !u.is_empty()) {
        None => {
            resp.results = store
                .describe()
                .into_iter()
                .map(|(u, c)| result(&u, c))
                .collect();
        }
        Some(users) => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for u in &users {
                *counts.entry(u.name.as_str()).or_default() += 1;
            }
            for (user, count) in counts {
                let mut r = match store.describe_user(user) {
                    Some(creds) if count == 1 => result(user, creds),
                    _ => result(user, Vec::new()),
                };
                if count > 1 {
                    r.error_code = ResponseError::DuplicateResource.code();
                    r.error_message = message(
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    );
                } else if store.describe_user(user).is_none() {
                    r.error_code = ResponseError::ResourceNotFound.code();
                    r.error_message =
                        message("Attempt to describe a user credential that does not exist");
                }
                resp.results.push(r);
            }
        }
    }
    Ok(Some(req.respond(&resp)?))
}

type Upsert = (String, Mechanism, ScramCredential);

/// Per-user failures of one AlterUserScramCredentials request.
type UserErrors = BTreeMap<String, (ResponseError, String)>;

pub async fn handle_alter(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: AlterUserScramCredentialsRequest = req.decode()?;
    let store = state.security.credentials.clone();
    let mut errors = UserErrors::new();
    if !Access::of(&state, &req).cluster(Operation::Alter) {
        // Kafka: every user CLUSTER_AUTHORIZATION_FAILED.
        let named = request.deletions.iter().map(|d| &d.name);
        for user in named.chain(request.upsertions.iter().map(|u| &u.name)) {
            let e = (ResponseError::ClusterAuthorizationFailed, String::new());
            errors.insert(user.to_string(), e);
        }
    }
    duplicates(&request, &mut errors);
    let mut deletions = Vec::new();
    for d in &request.deletions {
        let user = d.name.to_string();
        match check(&user, d.mechanism) {
            Ok(m) if store.get(&user, m).is_some() => deletions.push((user, m)),
            Ok(_) => {
                errors.entry(user).or_insert((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".into(),
                ));
            }
            Err(e) => {
                errors.entry(user).or_insert(e);
            }
        }
    }
    let mut upserts: Vec<Upsert> = Vec::new();
    for u in &request.upsertions {
        let user = u.name.to_string();
        match upsertion(&user, u) {
            Ok((m, c)) => upserts.push((user, m, c)),
            Err(e) => {
                errors.entry(user).or_insert(e);
            }
        }
    }
    // A user with any error gets none of its changes applied (Kafka's per-user outcome).
    upserts.retain(|(u, _, _)| !errors.contains_key(u));
    deletions.retain(|(u, _)| !errors.contains_key(u));
    let mut users: BTreeSet<String> = upserts.iter().map(|(u, _, _)| u.clone()).collect();
    users.extend(deletions.iter().map(|(u, _)| u.clone()));
    let applied = tokio::task::spawn_blocking(move || store.apply(upserts, deletions))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    if let Err(e) = applied {
        tracing::error!(error = %e, "storing SCRAM credentials failed");
        for u in &users {
            errors.insert(u.clone(), (ResponseError::UnknownServerError, e.clone()));
        }
    }
    let mut resp = AlterUserScramCredentialsResponse::default();
    for user in users.iter().chain(errors.keys()).collect::<BTreeSet<_>>() {
        let mut r = AlterUserScramCredentialsResult::default();
        r.user = StrBytes::from_string(user.clone());
        if let Some((code, msg)) = errors.get(user) {
            r.error_code = code.code();
            r.error_message = message(msg.clone());
        }
        resp.results.push(r);
    }
    Ok(Some(req.respond(&resp)?))
}

/// The same (user, mechanism) twice in one request is DUPLICATE_RESOURCE for that user.
fn duplicates(request: &AlterUserScramCredentialsRequest, errors: &mut UserErrors) {
    let mut seen: BTreeSet<(String, i8)> = BTreeSet::new();
    let pairs = request
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .chain(
            request
                .upsertions
                .iter()
                .map(|u| (u.name.to_string(), u.mechanism)),
        );
    for (user, m) in pairs {
        if !seen.insert((user.clone(), m)) {
            errors.entry(user).or_insert((
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".to_string(),
            ));
        }
    }
}

/// The stored credential for one upsertion (computed from its salted password).
fn upsertion(
    user: &str,
    u: &ScramCredentialUpsertion,
) -> Result<(Mechanism, ScramCredential), (ResponseError, String)> {
    let m = check(user, u.mechanism)?;
    if u.salt.is_empty() || u.salted_password.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Salt and salted password must not be empty".into(),
        ));
    }
    let iterations = u32::try_from(u.iterations).unwrap_or(0);
    let cred = scram::credential_from_salted(m, &u.salted_password, &u.salt, iterations).map_err(
        |_| {
            let which = if iterations < ITERATIONS_MIN {
                "few"
            } else {
                "many"
            };
            (
                ResponseError::UnacceptableCredential,
                format!("Too {which} iterations ({ITERATIONS_MIN}..={ITERATIONS_MAX})"),
            )
        },
    )?;
    Ok((m, cred))
}

fn check(user: &str, mechanism: i8) -> Result<Mechanism, (ResponseError, String)> {
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err((
            ResponseError::UnacceptableCredential,
            format!("Username must be 1 to {USER_NAME_BYTES_MAX} bytes"),
        ));
    }
    Mechanism::scram_from_type(mechanism).ok_or_else(|| {
        (
            ResponseError::UnsupportedSaslMechanism,
            format!("Unknown SCRAM mechanism {mechanism}"),
        )
    })
}
