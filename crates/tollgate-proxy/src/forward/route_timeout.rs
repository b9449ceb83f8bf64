//! The route's timeout on an HTTP/1 client connection's own [`LazyDeadline`], so a proxied request inserts no timer into tokio's wheel and takes none out.
//!
//! An HTTP/1 client connection has one request in flight at a time, so its
//! requests can share one timer for the route's timeout: each request
//! takes it from the connection's scope, starts it at its own deadline and
//! puts it back, stopped, when the response's head has come (or the
//! upstream failed). The timer stays registered at an earlier deadline
//! while the deadlines move later, as the connection's other timeouts do.
//! A request cut off on the way (its client gone) drops the timer with it,
//! and the next request makes a new one.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::context::ConnectionScope;
use crate::lazy_deadline::{LazyDeadline, deadline_after};

/// A client connection's timer for its requests' route timeouts (none running between them).
pub type RouteTimer = parking_lot::Mutex<LazyDeadline>;

/// `sent`'s outcome, or `None` once `limit` has passed, timed on `connection`'s route timer (`sent` pinned where it is: not moved, so not copied).
pub(super) async fn within<T>(
    connection: &ConnectionScope,
    limit: Duration,
    mut sent: Pin<&mut impl Future<Output = T>>,
) -> Option<T> {
    let mut timer = std::mem::take(&mut *connection.route_timer().lock());
    timer.start(deadline_after(limit));
    let outcome = std::future::poll_fn(|cx| {
        if let Poll::Ready(outcome) = sent.as_mut().poll(cx) {
            return Poll::Ready(Some(outcome));
        }
        timer.poll_expired(cx).map(|()| None)
    })
    .await;
    timer.stop();
    *connection.route_timer().lock() = timer;
    outcome
}
