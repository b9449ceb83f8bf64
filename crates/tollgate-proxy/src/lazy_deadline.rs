//! [`LazyDeadline`]: a connection's timeout kept in one tokio timer for the connection's life, moved in the timer wheel only when it fires early, so a timeout started again on every request costs no timer-wheel work.
//!
//! A connection's timeouts (the header time, the idle time, the stream idle
//! time, and on HTTP/1 the route's timeout) start again on every request. With a fresh `tokio::time::Sleep`
//! each time, every request inserted a timer into tokio's wheel and took
//! it out again, and a new timer due before the one the runtime last went
//! to sleep on also wrote to the runtime's wake-up eventfd (one system call
//! a proxied request). Here the timer stays registered at its first
//! deadline while the deadline moves later; when it fires before the
//! current deadline it is set to that deadline and waits again. A
//! deadline is never missed: the registered one is never later than the
//! current one, and only a firing at or past the current one ends the wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The instant `after` from now on tokio's clock (paused in tests).
pub fn deadline_after(after: Duration) -> Instant {
    #[expect(
        clippy::disallowed_methods,
        reason = "a connection timeout's deadline, on tokio's clock as tokio's timers are; no rate-limit decision reads it"
    )]
    let now = Instant::now();
    now + after
}

/// One timeout of a connection, re-armed lazily (see the module's documentation).
#[derive(Debug, Default)]
pub struct LazyDeadline {
    /// The tokio timer, created at the first deadline.
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether `timer` is registered and has not been seen to fire.
    armed: bool,
    /// The waker `timer` holds since its last poll, once armed: polling it
    /// again for the same task before it fires would change nothing.
    waker: Option<Waker>,
    /// The current deadline (`None`: no timeout running).
    deadline: Option<Instant>,
}

impl LazyDeadline {
    /// No timeout running.
    pub fn new() -> Self {
        LazyDeadline::default()
    }

    /// Whether a timeout is running.
    pub fn is_running(&self) -> bool {
        self.deadline.is_some()
    }

    /// Runs the timeout until `deadline` (replacing any running one).
    pub fn start(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        match &mut self.timer {
            // The registered timer fires no later than the deadline: leave it.
            Some(timer) if self.armed && timer.deadline() <= deadline => {}
            Some(timer) => {
                timer.as_mut().reset(deadline);
                self.armed = true;
                self.waker = None;
            }
            None => {
                self.timer = Some(Box::pin(tokio::time::sleep_until(deadline)));
                self.armed = true;
                self.waker = None;
            }
        }
    }

    /// Stops the timeout; the timer stays registered for the next one.
    pub fn stop(&mut self) {
        self.deadline = None;
    }

    /// Ready once the running timeout has passed; pending (and `cx` to be
    /// woken by then) before, and always pending with no timeout running.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(deadline) = self.deadline else {
            return Poll::Pending;
        };
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            if !self.armed {
                timer.as_mut().reset(deadline);
                self.armed = true;
                self.waker = None;
            }
            if !timer.is_elapsed() && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                // The timer has not fired and will wake this task when it does.
                return Poll::Pending;
            }
            // Unconstrained: a pending answer then always means the timer holds `cx`'s waker
            // (a task out of budget would get pending without it).
            match Pin::new(&mut tokio::task::coop::unconstrained(timer.as_mut())).poll(cx) {
                Poll::Pending => {
                    self.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Poll::Ready(()) => {
                    self.armed = false;
                    self.waker = None;
                    if timer.deadline() >= deadline {
                        return Poll::Ready(());
                    }
                    // It fired at an earlier deadline: wait again for this one.
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    /// Polls `deadline` until it expires; the tokio time it took.
    async fn time_to_expiry(deadline: &mut LazyDeadline) -> Duration {
        let started = deadline_after(Duration::ZERO);
        poll_fn(|cx| deadline.poll_expired(cx)).await;
        deadline_after(Duration::ZERO) - started
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_expires_at_the_later_one_not_the_first() {
        let mut deadline = LazyDeadline::new();
        deadline.start(deadline_after(Duration::from_secs(10)));
        tokio::time::sleep(Duration::from_secs(4)).await;
        // Started again 4 s in: due at 14 s, though the timer was registered for 10 s.
        deadline.start(deadline_after(Duration::from_secs(10)));
        assert_eq!(time_to_expiry(&mut deadline).await, Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_polled_from_another_task_wakes_that_task() {
        let mut deadline = LazyDeadline::new();
        deadline.start(deadline_after(Duration::from_secs(5)));
        // Polled once here (this task's waker registered), then handed to another task.
        assert!(
            poll_fn(|cx| Poll::Ready(deadline.poll_expired(cx)))
                .await
                .is_pending()
        );
        let other = tokio::spawn(async move { time_to_expiry(&mut deadline).await });
        let waited = tokio::time::timeout(Duration::from_secs(60), other)
            .await
            .expect("the other task is woken when the timeout ends")
            .expect("the task ran");
        assert_eq!(waited, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_expires_at_the_earlier_one() {
        let mut deadline = LazyDeadline::new();
        deadline.start(deadline_after(Duration::from_secs(300)));
        deadline.start(deadline_after(Duration::from_secs(2)));
        assert_eq!(time_to_expiry(&mut deadline).await, Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_timeout_never_expires_and_a_new_one_runs_from_its_start() {
        let mut deadline = LazyDeadline::new();
        deadline.start(deadline_after(Duration::from_secs(1)));
        deadline.stop();
        assert!(!deadline.is_running());
        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| deadline.poll_expired(cx)),
        )
        .await;
        assert!(waited.is_err(), "a stopped timeout expired");
        // The old timer fired meanwhile; the new timeout still gets its full time.
        deadline.start(deadline_after(Duration::from_secs(3)));
        assert_eq!(time_to_expiry(&mut deadline).await, Duration::from_secs(3));
        // And once expired it stays expired until started again.
        assert!(
            poll_fn(|cx| Poll::Ready(deadline.poll_expired(cx)))
                .await
                .is_ready()
        );
    }
}
