//! [`RlqsService`]: the gRPC method `StreamRateLimitQuotas`, one task per Envoy stream feeding the [`QuotaBook`]; what changes is paid for ([`super::budget`]) before it is sent.
//!
//! The book's work runs off the runtime's workers ([`with_book`]). A
//! stream whose client goes away is closed in the book at once, even in the
//! middle of paying for a report: its buckets stop costing anything.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_core::{Clock, MonotonicClock};
use tonic::{Request, Response, Status, Streaming};

use super::book::{QuotaBook, StreamId};
use super::budget::pay_and_apply;
use super::off_runtime::with_book;
use crate::reload::LiveEngine;

/// Responses queued for one stream before pushes to it are dropped (it catches up at its next report).
const OUTBOX: usize = 64;

/// Envoy's `RateLimitQuotaService`, answering from the rules in service and one [`QuotaBook`].
pub struct RlqsService<C: Clock> {
    engine: Arc<LiveEngine<C>>,
    book: Arc<QuotaBook>,
    clock: MonotonicClock,
}

impl<C: Clock> RlqsService<C> {
    /// The service over `engine`'s rules (reloads included) and `book`,
    /// reading reports at the time `clock` gives: the clock the payment
    /// rounds run on ([`super::pay_every`]), real elapsed time.
    pub fn new(engine: Arc<LiveEngine<C>>, book: Arc<QuotaBook>, clock: MonotonicClock) -> Self {
        RlqsService {
            engine,
            book,
            clock,
        }
    }
}

/// One stream's responses; dropped (the client went away, or the server
/// ends the call), it tells the stream's task to stop.
pub struct Responses {
    queue: ReceiverStream<Result<RateLimitQuotaResponse, Status>>,
    _gone: oneshot::Sender<()>,
}

impl Stream for Responses {
    type Item = Result<RateLimitQuotaResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.queue).poll_next(cx)
    }
}

#[tonic::async_trait]
impl<C: Clock + 'static> RateLimitQuotaService for RlqsService<C> {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let (outbox, queue) = mpsc::channel(OUTBOX);
        let id = with_book(&self.book, move |book| book.open(outbox)).await?;
        let (gone, client_gone) = oneshot::channel();
        let reports = request.into_inner();
        let (engine, book) = (Arc::clone(&self.engine), Arc::clone(&self.book));
        let clock = self.clock.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = follow(&engine, &book, &clock, id, reports) => {}
                _ = client_gone => {}
            }
            let now = clock.now();
            let changes = with_book(&book, move |book| book.close(id, now)).await;
            pay_and_apply(&engine, &book, changes).await;
        });
        Ok(Response::new(Responses {
            queue: ReceiverStream::new(queue),
            _gone: gone,
        }))
    }
}

/// Takes stream `id`'s reports until it ends or one is refused (the
/// stream then ends with the refusal's status).
async fn follow<C: Clock>(
    engine: &LiveEngine<C>,
    book: &Arc<QuotaBook>,
    clock: &MonotonicClock,
    id: StreamId,
    mut reports: Streaming<RateLimitQuotaUsageReports>,
) {
    loop {
        match reports.message().await {
            Ok(Some(report)) => {
                let rules = Arc::clone(engine.engine().rules());
                let now = clock.now();
                match with_book(book, move |book| book.report(id, report, &rules, now)).await {
                    Ok(changes) => pay_and_apply(engine, book, changes).await,
                    Err(status) => {
                        tracing::warn!(error = %status.message(), "a rate limit quota stream was refused");
                        let now = clock.now();
                        let changes = with_book(book, move |book| book.fail(id, status, now)).await;
                        pay_and_apply(engine, book, changes).await;
                        return;
                    }
                }
            }
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(error = %status, "a rate limit quota stream failed");
                return;
            }
        }
    }
}
