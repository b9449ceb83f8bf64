//! [`HeaderTimer`]: the hyper timer of one HTTP/1 client connection, whose request-header timeout runs on one [`LazyDeadline`] for the connection's life.
//!
//! hyper's HTTP/1 server starts its header-read timeout each time it
//! waits for a request head and drops it once the head is in: a fresh
//! timer per request, which tokio registered and removed every time and
//! which, on a proxied request, woke the runtime through its eventfd (see
//! [`crate::lazy_deadline`]). This timer hands hyper sleeps that all share
//! the connection's one lazily re-armed deadline. hyper uses a server
//! connection's timer for that timeout alone, and has at most one such
//! sleep at a time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::lazy_deadline::{LazyDeadline, deadline_after};

/// One connection's timer for hyper (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub struct HeaderTimer {
    shared: Arc<Mutex<Shared>>,
}

/// The connection's deadline, and which sleep owns it (the latest one handed out).
#[derive(Debug, Default)]
struct Shared {
    deadline: LazyDeadline,
    owner: u64,
}

impl HeaderTimer {
    /// A timer for one new connection.
    pub fn new() -> Self {
        HeaderTimer::default()
    }
}

impl hyper::rt::Timer for HeaderTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.start(deadline_after(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.start(deadline.into())
    }

    fn now(&self) -> Instant {
        deadline_after(Duration::ZERO).into_std()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        *sleep = self.start(new_deadline.into());
    }
}

impl HeaderTimer {
    fn start(&self, deadline: tokio::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let mut shared = self.shared.lock();
        shared.deadline.start(deadline);
        shared.owner = shared.owner.wrapping_add(1);
        Box::pin(HeaderSleep {
            shared: Arc::clone(&self.shared),
            id: shared.owner,
        })
    }
}

/// A sleep hyper holds while it waits for a request head; dropping it stops the timeout, unless a later sleep has taken it over.
struct HeaderSleep {
    shared: Arc<Mutex<Shared>>,
    id: u64,
}

impl Future for HeaderSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut shared = self.shared.lock();
        if shared.owner != self.id {
            // Replaced by a later sleep: this one never ends.
            return Poll::Pending;
        }
        shared.deadline.poll_expired(cx)
    }
}

impl hyper::rt::Sleep for HeaderSleep {}

impl Drop for HeaderSleep {
    fn drop(&mut self) {
        let mut shared = self.shared.lock();
        if shared.owner == self.id {
            shared.deadline.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use hyper::rt::Timer;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_sleep_ends_at_its_own_deadline_though_they_share_one_timer() {
        let timer = HeaderTimer::new();
        let first = timer.sleep(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(6)).await;
        // hyper drops the sleep once a head is in, and takes a new one for the next.
        drop(first);
        let started = timer.now();
        timer.sleep(Duration::from_secs(10)).await;
        assert_eq!(timer.now() - started, Duration::from_secs(10));
        // A dropped sleep's deadline no longer runs: a sleep after it gets its whole time.
        drop(timer.sleep(Duration::from_secs(1)));
        let started = timer.now();
        let mut later = timer.sleep(Duration::from_secs(3));
        poll_fn(|cx| later.as_mut().poll(cx)).await;
        assert_eq!(timer.now() - started, Duration::from_secs(3));
        // hyper's reset replaces a sleep; dropping the old one leaves the new one running.
        let mut replaced = timer.sleep(Duration::from_secs(1));
        let started = timer.now();
        timer.reset(&mut replaced, started + Duration::from_secs(5));
        replaced.await;
        assert_eq!(timer.now() - started, Duration::from_secs(5));
    }
}
