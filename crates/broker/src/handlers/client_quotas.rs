//! DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: the quotas of
//! `crate::quota`, with Kafka's filters (exact / default / any, strict) and Kafka's validation
//! and messages (`ClientQuotaControlManager`, `ClientQuotasImage.describe`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_request::EntryData as AlterEntry;
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntityOut, EntryData as AlterResult,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use streamforge_protocol::{RequestFrame, ResponseError};

use crate::BrokerState;
use crate::handlers::message;
use crate::quota::AlterError;
use crate::quota::entity::{
    CLIENT_ID, ClientQuotaRecord, ENTITY_NAME_BYTES_MAX, EntityName, IP, QuotaEntity, QuotaKey,
    USER,
};
use crate::router::HandlerResult;

const MATCH_TYPE_EXACT: i8 = 0;
const MATCH_TYPE_DEFAULT: i8 = 1;
const MATCH_TYPE_SPECIFIED: i8 = 2;

type Failure = (ResponseError, String);

fn invalid(msg: impl Into<String>) -> Failure {
    (ResponseError::InvalidRequest, msg.into())
}

/// A DescribeClientQuotas filter: entity types with an exact name (`None` = the default), and
/// entity types that must merely be present.
struct Filter {
    exact: BTreeMap<String, Option<String>>,
    specified: BTreeSet<String>,
    strict: bool,
}

impl Filter {
    fn parse(request: &DescribeClientQuotasRequest) -> Result<Filter, Failure> {
        let mut f = Filter {
            exact: BTreeMap::new(),
            specified: BTreeSet::new(),
            strict: request.strict,
        };
        for c in &request.components {
            let t = c.entity_type.to_string();
            if t.is_empty() {
                return Err(invalid("Invalid empty entity type."));
            }
            if f.exact.contains_key(&t) || f.specified.contains(&t) {
                return Err(invalid(format!(
                    "Entity type {t} cannot appear more than once in the filter."
                )));
            }
            if ![IP, USER, CLIENT_ID].contains(&t.as_str()) {
                return Err((
                    ResponseError::UnsupportedVersion,
                    format!("Unsupported entity type {t}"),
                ));
            }
            let name = c._match.as_ref().map(|m| m.to_string());
            match (c.match_type, name) {
                (MATCH_TYPE_EXACT, Some(n)) => drop(f.exact.insert(t, Some(n))),
                (MATCH_TYPE_EXACT, None) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ));
                }
                (MATCH_TYPE_DEFAULT, None) => drop(f.exact.insert(t, None)),
                (MATCH_TYPE_SPECIFIED, None) => drop(f.specified.insert(t)),
                (MATCH_TYPE_DEFAULT, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    ));
                }
                (MATCH_TYPE_SPECIFIED, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                    ));
                }
                (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
            }
        }
        let has = |t: &str| f.exact.contains_key(t) || f.specified.contains(t);
        if has(IP) && (has(USER) || has(CLIENT_ID)) {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.",
            ));
        }
        Ok(f)
    }

    fn matches(&self, entity: &QuotaEntity) -> bool {
        let parts: BTreeMap<&str, Option<&str>> = entity
            .parts()
            .into_iter()
            .map(|(t, n)| (t, n.to_wire()))
            .collect();
        if self.strict && parts.len() != self.exact.len() + self.specified.len() {
            return false;
        }
        self.exact
            .iter()
            .all(|(t, name)| parts.get(t.as_str()) == Some(&name.as_deref()))
            && self
                .specified
                .iter()
                .all(|t| parts.contains_key(t.as_str()))
    }
}

pub async fn handle_describe(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: DescribeClientQuotasRequest = req.decode()?;
    let mut resp = DescribeClientQuotasResponse::default();
    match Filter::parse(&request) {
        Err((code, msg)) => {
            resp.error_code = code.code();
            resp.error_message = message(msg);
            resp.entries = None;
        }
        Ok(filter) => {
            let configs = state.quotas.configs();
            let entries = configs
                .iter()
                .filter(|(entity, _)| filter.matches(entity))
                .map(|(entity, values)| {
                    let mut e = EntryData::default();
                    e.entity = entity
                        .parts()
                        .into_iter()
                        .map(|(t, n)| {
                            let mut d = EntityData::default();
                            d.entity_type = StrBytes::from_static_str(t);
                            d.entity_name = n.to_wire().map(|s| StrBytes::from_string(s.into()));
                            d
                        })
                        .collect();
                    e.values = values
                        .iter()
                        .map(|(k, v)| {
                            let mut d = ValueData::default();
                            d.key = StrBytes::from_static_str(k.name());
                            d.value = *v;
                            d
                        })
                        .collect();
                    e
                })
                .collect();
            resp.entries = Some(entries);
        }
    }
    Ok(Some(req.respond(&resp)?))
}

/// Kafka's `validateEntity` and `configKeysForEntityType` for a user / client-id entity.
fn parse_entity(entry: &AlterEntry) -> Result<QuotaEntity, Failure> {
    if entry.entity.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let mut e = QuotaEntity {
        user: None,
        client_id: None,
    };
    let mut ip = false;
    let mut seen = BTreeSet::new();
    for part in &entry.entity {
        let t = part.entity_type.as_str();
        if !seen.insert(t) {
            return Err(invalid(format!(
                "Invalid client quota entity, duplicate entity entry {t}"
            )));
        }
        let name = part.entity_name.as_ref().map(|n| n.as_str());
        if name.is_some_and(str::is_empty) {
            return Err(invalid(format!("Empty {t} not supported")));
        }
        if name.is_some_and(|n| n.len() > ENTITY_NAME_BYTES_MAX) {
            return Err(invalid(format!(
                "{t} names are at most {ENTITY_NAME_BYTES_MAX} bytes"
            )));
        }
        let name = EntityName::from_wire(name);
        match t {
            USER => e.user = Some(name),
            CLIENT_ID => e.client_id = Some(name),
            IP => ip = true,
            other => {
                return Err(invalid(format!(
                    "Unhandled client quota entity type: {other}"
                )));
            }
        }
    }
    if ip && (e.user.is_some() || e.client_id.is_some()) {
        return Err(invalid(
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ));
    }
    if ip {
        return Err(invalid(
            "IP quotas (connection_creation_rate) are not supported by this broker",
        ));
    }
    Ok(e)
}

/// The records one entry asks for, or why it is refused (nothing of it is applied then).
fn entry_records(entry: &AlterEntry) -> Result<(QuotaEntity, Vec<ClientQuotaRecord>), Failure> {
    let entity = parse_entity(entry)?;
    let mut keys = BTreeSet::new();
    let mut records = Vec::new();
    for op in &entry.ops {
        let key_name = op.key.as_str();
        if !keys.insert(key_name) {
            return Err(invalid(format!(
                "Duplicate quota key {key_name} not updating quota for this entity {entity}"
            )));
        }
        let Some(key) = QuotaKey::parse(key_name) else {
            if op.remove {
                continue; // removing what cannot be set is a no-op, as in Kafka
            }
            return Err(invalid(unknown_key_message(key_name)));
        };
        let value = if op.remove {
            None
        } else {
            key.check_value(op.value).map_err(invalid)?;
            Some(op.value)
        };
        records.push(ClientQuotaRecord {
            entity: entity.clone(),
            key,
            value,
        });
    }
    Ok((entity, records))
}

fn unknown_key_message(key: &str) -> String {
    if key == "controller_mutation_rate" {
        format!("Invalid configuration key {key} (not enforced by this broker)")
    } else {
        format!("Invalid configuration key {key}")
    }
}

pub async fn handle_alter(state: Arc<BrokerState>, req: RequestFrame) -> HandlerResult {
    let request: AlterClientQuotasRequest = req.decode()?;
    let mut outcomes: Vec<Result<(), Failure>> = Vec::with_capacity(request.entries.len());
    let mut records = Vec::new();
    let mut applied = Vec::new();
    for (i, entry) in request.entries.iter().enumerate() {
        match entry_records(entry) {
            Ok((_, r)) => {
                records.extend(r);
                applied.push(i);
                outcomes.push(Ok(()));
            }
            Err(f) => outcomes.push(Err(f)),
        }
    }
    if !request.validate_only && !records.is_empty() {
        let quotas = state.quotas.clone();
        let stored = tokio::task::spawn_blocking(move || quotas.alter(&records))
            .await
            .map_err(|e| (ResponseError::UnknownServerError, e.to_string()))
            .and_then(|r| {
                r.map_err(|e| match e {
                    // A bound of ours (Kafka has none): the request, not the broker, is at fault.
                    AlterError::TooManyEntities => (ResponseError::InvalidRequest, e.to_string()),
                    AlterError::Store(_) => {
                        tracing::error!(error = %e, "storing client quotas failed");
                        (ResponseError::UnknownServerError, e.to_string())
                    }
                })
            });
        if let Err(failure) = stored {
            for i in applied {
                outcomes[i] = Err(failure.clone());
            }
        }
    }
    let mut resp = AlterClientQuotasResponse::default();
    resp.entries = request
        .entries
        .iter()
        .zip(outcomes)
        .map(|(entry, outcome)| {
            let mut r = AlterResult::default();
            r.entity = entry
                .entity
                .iter()
                .map(|p| {
                    let mut d = AlterEntityOut::default();
                    d.entity_type = p.entity_type.clone();
                    d.entity_name = p.entity_name.clone();
                    d
                })
                .collect();
            if let Err((code, msg)) = outcome {
                r.error_code = code.code();
                r.error_message = message(msg);
            }
            r
        })
        .collect();
    Ok(Some(req.respond(&resp)?))
}
