//! [`Rejection::grpc_status`]: a rejection as the gRPC status a tonic client reads (code, `RetryInfo`, metadata).

use std::time::Duration;

use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::error::Rejection;

impl Rejection {
    /// The default gRPC answer: `RESOURCE_EXHAUSTED` over a limit, with a
    /// `google.rpc.RetryInfo` of the exact wait when the call can ever pass;
    /// `UNAVAILABLE` with a one-second `RetryInfo` when the store failed;
    /// `INTERNAL` without a client address. The message says why; the
    /// [`headers`](Self::headers) (`retry-after`, `ratelimit-*`) become metadata.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_middleware::Rejection;
    /// use tonic_types::StatusExt;
    ///
    /// let rejection = Rejection::OverLimit {
    ///     limits: vec!["per-minute".into()],
    ///     headers: Default::default(),
    ///     retry_after: Some(Duration::from_millis(2_500)),
    /// };
    /// let status = rejection.grpc_status();
    /// assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    /// let retry = status.get_error_details().retry_info().cloned().unwrap();
    /// assert_eq!(retry.retry_delay, Some(Duration::from_millis(2_500)));
    /// ```
    pub fn grpc_status(&self) -> Status {
        let (code, retry_delay) = match self {
            Rejection::OverLimit { retry_after, .. } => (Code::ResourceExhausted, *retry_after),
            Rejection::StoreUnavailable(_) => (Code::Unavailable, Some(Duration::from_secs(1))),
            Rejection::NoClientAddress(_) => (Code::Internal, None),
        };
        let details = match retry_delay {
            Some(delay) => ErrorDetails::with_retry_info(Some(delay)),
            None => ErrorDetails::new(),
        };
        let metadata = MetadataMap::from_headers(self.headers());
        Status::with_error_details_and_metadata(code, self.to_string(), details, metadata)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_store::StoreError;
    use tonic::Code;
    use tonic_types::StatusExt;

    use crate::{NoClientAddress, Rejection};

    #[test]
    fn a_failed_store_is_unavailable_for_a_second_and_no_address_is_internal() {
        let down = Rejection::StoreUnavailable(StoreError::Timeout(Duration::from_millis(50)));
        let status = down.grpc_status();
        assert_eq!(status.code(), Code::Unavailable);
        let retry = status.get_error_details().retry_info().cloned().unwrap();
        assert_eq!(retry.retry_delay, Some(Duration::from_secs(1)));
        assert_eq!(status.metadata().get("retry-after").unwrap(), "1");

        let status = Rejection::NoClientAddress(NoClientAddress).grpc_status();
        assert_eq!(status.code(), Code::Internal);
        assert!(
            status.message().contains("peer address"),
            "{}",
            status.message()
        );
        assert!(status.get_error_details().retry_info().is_none());
    }

    #[test]
    fn a_call_that_can_never_pass_gets_no_retry_info() {
        let never = Rejection::OverLimit {
            limits: vec!["small".into()],
            headers: Default::default(),
            retry_after: None,
        };
        let status = never.grpc_status();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.get_error_details().retry_info().is_none());
    }
}
