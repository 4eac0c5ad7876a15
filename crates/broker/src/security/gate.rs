//! The connection's SASL gate: every frame on a SASL listener passes here before routing.
//! SaslHandshake and SaslAuthenticate (and v0's raw tokens) are answered here, from the
//! connection's `SaslSession`; ApiVersions passes at any time; anything else passes only on
//! an authenticated, unexpired session and otherwise closes the connection.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::frame::HeaderPrefix;
use streamforge_protocol::{RequestFrame, ResponseError, ResponseFrame};

use super::sasl::{HandshakeOutcome, SaslSession, Step};

/// What the connection does with a frame.
pub enum Gate {
    /// Route it as usual.
    Pass,
    /// Send this and read the next frame.
    Reply(ResponseFrame),
    /// Send this, then close.
    ReplyAndClose(ResponseFrame, String),
    /// Close without an answer.
    Close(String),
}

/// Check one frame against the session. `session` is `Some` on SASL listeners only; it is
/// taken while a token is checked off the async threads and put back after.
pub async fn check(session: &mut Option<SaslSession>, frame: &Bytes, peer: SocketAddr) -> Gate {
    let Some(s) = session.as_mut() else {
        return Gate::Pass;
    };
    if s.expects_raw_token() {
        return raw_token(session, frame.clone(), peer).await;
    }
    let Ok(prefix) = HeaderPrefix::parse(frame) else {
        return Gate::Pass; // the router closes it with the reason
    };
    match ApiKey::try_from(prefix.api_key) {
        Ok(ApiKey::ApiVersions) => Gate::Pass,
        Ok(ApiKey::SaslHandshake) => handshake(s, frame.clone()),
        Ok(ApiKey::SaslAuthenticate) => authenticate(session, frame.clone(), peer).await,
        _ if !s.is_authenticated() => Gate::Close(format!(
            "api key {} before SASL authentication",
            prefix.api_key
        )),
        _ if s.expired(Instant::now()) => Gate::Close(
            "SASL session expired (connections.max.reauth.ms) without re-authentication".into(),
        ),
        _ => Gate::Pass,
    }
}

fn parse(frame: Bytes) -> Result<RequestFrame, Gate> {
    RequestFrame::parse(frame).map_err(|e| Gate::Close(format!("bad SASL request: {e}")))
}

fn handshake(s: &mut SaslSession, frame: Bytes) -> Gate {
    let req = match parse(frame) {
        Ok(r) => r,
        Err(g) => return g,
    };
    let body: SaslHandshakeRequest = match req.decode() {
        Ok(b) => b,
        Err(e) => return Gate::Close(format!("bad SaslHandshake: {e}")),
    };
    let mut resp = SaslHandshakeResponse::default();
    resp.mechanisms = s
        .enabled_names()
        .into_iter()
        .map(StrBytes::from_static_str)
        .collect();
    let outcome = s.handshake(body.mechanism.as_str(), req.api_version);
    resp.error_code = match outcome {
        HandshakeOutcome::Accepted => 0,
        HandshakeOutcome::Unsupported => ResponseError::UnsupportedSaslMechanism.code(),
        HandshakeOutcome::IllegalState => ResponseError::IllegalSaslState.code(),
    };
    let Ok(frame) = req.respond(&resp) else {
        return Gate::Close("cannot encode SaslHandshake response".into());
    };
    match outcome {
        HandshakeOutcome::Accepted => Gate::Reply(frame),
        HandshakeOutcome::Unsupported => Gate::ReplyAndClose(
            frame,
            format!("unsupported SASL mechanism {}", body.mechanism.as_str()),
        ),
        HandshakeOutcome::IllegalState => {
            Gate::ReplyAndClose(frame, "SaslHandshake in the wrong SASL state".into())
        }
    }
}

async fn authenticate(session: &mut Option<SaslSession>, frame: Bytes, peer: SocketAddr) -> Gate {
    let req = match parse(frame) {
        Ok(r) => r,
        Err(g) => return g,
    };
    let body: SaslAuthenticateRequest = match req.decode() {
        Ok(b) => b,
        Err(e) => return Gate::Close(format!("bad SaslAuthenticate: {e}")),
    };
    let mut resp = SaslAuthenticateResponse::default();
    let expected = session
        .as_ref()
        .is_some_and(SaslSession::expects_authenticate);
    let step = if expected {
        step_blocking(session, body.auth_bytes, peer).await
    } else {
        Step::Failed("SaslAuthenticate in the wrong SASL state".into())
    };
    let now = Instant::now();
    let close = match step {
        Step::Challenge(bytes) => {
            resp.auth_bytes = bytes.into();
            None
        }
        Step::Done(bytes, principal) => {
            tracing::debug!(%peer, %principal, "SASL authentication succeeded");
            resp.auth_bytes = bytes.into();
            if req.api_version >= 1 {
                resp.session_lifetime_ms =
                    session.as_ref().map_or(0, |s| s.session_lifetime_ms(now));
            }
            None
        }
        Step::Failed(message) => {
            resp.error_code = if expected {
                ResponseError::SaslAuthenticationFailed.code()
            } else {
                ResponseError::IllegalSaslState.code()
            };
            resp.error_message = Some(StrBytes::from_string(message.clone()));
            Some(message)
        }
    };
    let Ok(frame) = req.respond(&resp) else {
        return Gate::Close("cannot encode SaslAuthenticate response".into());
    };
    match close {
        None => Gate::Reply(frame),
        Some(reason) => Gate::ReplyAndClose(frame, reason),
    }
}

/// SaslHandshake v0: the token is the whole frame, answered with a bare length-prefixed token;
/// a failure closes the connection without an answer (as Kafka does).
async fn raw_token(session: &mut Option<SaslSession>, frame: Bytes, peer: SocketAddr) -> Gate {
    match step_blocking(session, frame, peer).await {
        Step::Challenge(bytes) | Step::Done(bytes, _) => {
            let mut out = BytesMut::with_capacity(4 + bytes.len());
            out.put_i32(bytes.len() as i32);
            out.put_slice(&bytes);
            Gate::Reply(ResponseFrame {
                chunks: vec![out.freeze()],
                error_codes: Vec::new(),
                throttle_ms: 0,
            })
        }
        Step::Failed(message) => Gate::Close(message),
    }
}

/// Run one token through the session on the blocking pool (PLAIN runs PBKDF2, OAUTHBEARER a
/// signature check).
async fn step_blocking(session: &mut Option<SaslSession>, token: Bytes, peer: SocketAddr) -> Step {
    let Some(mut s) = session.take() else {
        return Step::Failed("no SASL session".into());
    };
    match tokio::task::spawn_blocking(move || {
        let step = s.authenticate(&token, Instant::now());
        (s, step)
    })
    .await
    {
        Ok((mut s, step)) => {
            if let Some(reason) = s.take_refusal() {
                tracing::warn!(%peer, reason, "OAUTHBEARER token refused");
            }
            *session = Some(s);
            step
        }
        Err(e) => Step::Failed(format!("authentication task failed: {e}")),
    }
}
