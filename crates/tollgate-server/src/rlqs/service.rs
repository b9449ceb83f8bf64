//! [`RlqsService`]: the gRPC method `StreamRateLimitQuotas`, one task per Envoy stream feeding the [`QuotaBook`]; what changes is paid for ([`super::budget`]) before it is sent.

use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_core::Clock;
use tonic::{Request, Response, Status, Streaming};

use super::book::QuotaBook;
use super::budget::pay_and_apply;
use crate::reload::LiveEngine;

/// Responses queued for one stream before pushes to it are dropped (it catches up at its next report).
const OUTBOX: usize = 64;

/// Envoy's `RateLimitQuotaService`, answering from the rules in service and one [`QuotaBook`].
pub struct RlqsService<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    book: Arc<QuotaBook>,
}

impl<C: Clock> RlqsService<C> {
    /// The service over `engine`'s rules (reloads included) and `book`.
    pub fn new(engine: Arc<LiveEngine<C>>, book: Arc<QuotaBook>) -> Self {
        RlqsService { engine, book }
    }
}

#[tonic::async_trait]
impl<C: Clock + 'static> RateLimitQuotaService for RlqsService<C> {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let (outbox, responses) = mpsc::channel(OUTBOX);
        let id = self.book.open(outbox)?;
        let mut reports = request.into_inner();
        let (engine, book) = (Arc::clone(&self.engine), Arc::clone(&self.book));
        tokio::spawn(async move {
            loop {
                match reports.message().await {
                    Ok(Some(report)) => {
                        let rules = Arc::clone(engine.engine().rules());
                        match book.report(id, report, &rules) {
                            Ok(changes) => pay_and_apply(&engine, &book, changes).await,
                            Err(status) => {
                                tracing::warn!(error = %status.message(), "a rate limit quota stream was refused");
                                let changes = book.fail(id, status);
                                pay_and_apply(&engine, &book, changes).await;
                                return;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(error = %status, "a rate limit quota stream failed");
                        break;
                    }
                }
            }
            let changes = book.close(id);
            pay_and_apply(&engine, &book, changes).await;
        });
        Ok(Response::new(ReceiverStream::new(responses)))
    }
}
