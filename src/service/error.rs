//! The one mapping from engine errors to the wire.

use tonic::Status;

use crate::engine::ServiceError;

/// The gRPC status for a failed `ShouldRateLimit`.
///
/// The original answers every failure — service errors and store errors
/// alike — with code UNKNOWN and the error text, and Envoy only looks at
/// "error or not" (`failure_mode_deny` decides what passes). A more precise
/// code (UNAVAILABLE for a store outage, as Limitador uses) would change
/// what existing dashboards and tests see, so UNKNOWN stays. The exceptions
/// are the caller's mistakes, reported as INVALID_ARGUMENT: a descriptor the
/// original would crash on, and a request over the size caps.
pub fn to_status(e: &ServiceError) -> Status {
    match e {
        ServiceError::InvalidDescriptor { .. } | ServiceError::RequestTooLarge { .. } => {
            Status::invalid_argument(e.to_string())
        }
        _ => Status::unknown(e.to_string()),
    }
}

/// The HTTP status of `/json` for a failed call: 400, as the original
/// (which also answers 400 for store failures).
pub fn to_http_status(_: &ServiceError) -> u16 {
    400
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreError, StoreErrorKind};

    #[test]
    fn codes_and_messages() {
        let s = to_status(&ServiceError::EmptyDomain);
        assert_eq!(s.code(), tonic::Code::Unknown);
        assert_eq!(s.message(), "rate limit domain must not be empty");
        let s = to_status(&ServiceError::Store(StoreError::new(
            StoreErrorKind::Unavailable,
            "connection refused",
        )));
        assert_eq!(
            (s.code(), s.message()),
            (tonic::Code::Unknown, "connection refused")
        );
        let s = to_status(&ServiceError::InvalidDescriptor {
            index: 0,
            reason: "descriptor limit override has invalid unit 0".into(),
        });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
    }
}
