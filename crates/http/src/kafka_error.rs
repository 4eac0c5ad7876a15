//! Kafka's errors as the dashboard shows them: the name Kafka's tools print
//! (`INVALID_CONFIG`) and the HTTP status that fits.

use axum::http::StatusCode;
use kafka_protocol::ResponseError;

/// `InvalidConfig` -> `INVALID_CONFIG`, the name in Kafka's `Errors` enum and its tools.
pub fn name(error: ResponseError) -> String {
    let camel = error.to_string();
    if let ResponseError::Unknown(code) = error {
        return format!("UNKNOWN_ERROR_CODE_{code}");
    }
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The HTTP status for an action Kafka refused with `error`.
pub fn http_status(error: ResponseError) -> StatusCode {
    use ResponseError as E;
    match error {
        E::UnknownTopicOrPartition
        | E::UnknownTopicId
        | E::GroupIdNotFound
        | E::TransactionalIdNotFound => StatusCode::NOT_FOUND,
        E::TopicAlreadyExists
        | E::NonEmptyGroup
        | E::GroupSubscribedToTopic
        | E::InvalidTxnState
        | E::ConcurrentTransactions => StatusCode::CONFLICT,
        E::TopicAuthorizationFailed
        | E::GroupAuthorizationFailed
        | E::ClusterAuthorizationFailed
        | E::TransactionalIdAuthorizationFailed => StatusCode::FORBIDDEN,
        E::KafkaStorageError
        | E::CoordinatorNotAvailable
        | E::CoordinatorLoadInProgress
        | E::NotCoordinator
        | E::NotLeaderOrFollower => StatusCode::SERVICE_UNAVAILABLE,
        E::UnknownServerError | E::Unknown(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(name(ResponseError::InvalidConfig), "INVALID_CONFIG");
        assert_eq!(
            name(ResponseError::UnknownTopicOrPartition),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(name(ResponseError::NonEmptyGroup), "NON_EMPTY_GROUP");
        assert_eq!(
            http_status(ResponseError::NonEmptyGroup),
            StatusCode::CONFLICT
        );
        assert_eq!(
            http_status(ResponseError::InvalidConfig),
            StatusCode::BAD_REQUEST
        );
    }
}
