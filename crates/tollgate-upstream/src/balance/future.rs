//! The balancer's response future: the inner call, then the outcome reported to the picked endpoint.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use crate::cluster::{PickError, PickedEndpoint};
use crate::outlier::Outcome;

pin_project! {
    /// The response of [`Balance`](super::Balance): the inner call with its picked endpoint, or the pick's error.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
        picked: Option<PickedEndpoint>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Called { #[pin] future: F },
        Refused { error: Option<PickError> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn called(future: F, picked: PickedEndpoint) -> Self {
        ResponseFuture {
            kind: Kind::Called { future },
            picked: Some(picked),
        }
    }

    pub(crate) fn refused(error: PickError) -> Self {
        ResponseFuture {
            kind: Kind::Refused { error: Some(error) },
            picked: None,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: From<PickError>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Called { future } => {
                let result = ready!(future.poll(cx));
                if let Some(picked) = this.picked.take() {
                    picked.finish(match &result {
                        Ok(response) => Outcome::from_status(response.status().as_u16()),
                        Err(_) => Outcome::GatewayFailure,
                    });
                }
                Poll::Ready(result)
            }
            KindProj::Refused { error } => {
                Poll::Ready(Err(E::from(error.take().expect(
                    "a refused response future is polled once after it completed",
                ))))
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("picked", &self.picked)
            .finish()
    }
}
