//! The capacity all services of one priority layer share: the slots in flight, the waiting line, and the slot a request holds.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tollgate_core::{Clock, Timestamp};

use super::config::{ClassLimits, Priority, PriorityConfig, PriorityConfigError, QueueConfig};
use super::queue::{Pushed, Ticket, WaitQueue};
use crate::error::{Shed, ShedReason};

/// The clock the line's order and deadlines read.
pub type SharedClock = Arc<dyn Clock>;

/// What the slots and the line hold, under one lock.
struct State {
    in_flight: usize,
    queue: WaitQueue<oneshot::Sender<PrioritySlot>>,
}

/// The capacity all services of one layer share.
pub(crate) struct SharedSlots {
    pub(crate) header: HeaderName,
    limits: ClassLimits,
    retry_after: Duration,
    queue: Option<QueueConfig>,
    clock: SharedClock,
    state: Mutex<State>,
}

impl std::fmt::Debug for SharedSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSlots")
            .field("limits", &self.limits)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// How a request got in.
pub(crate) enum Entry {
    Admitted(PrioritySlot),
    Waiting(Waiting),
}

/// A request in line: its ticket, when it arrived, and where its slot will come.
pub(crate) struct Waiting {
    ticket: Ticket,
    priority: Priority,
    arrived: Timestamp,
    slot: oneshot::Receiver<PrioritySlot>,
}

impl SharedSlots {
    pub(crate) fn new(
        config: &PriorityConfig,
        clock: SharedClock,
    ) -> Result<Self, PriorityConfigError> {
        let queue = config.queue.clone();
        let (max_queued, aging) = queue
            .as_ref()
            .map_or((0, Duration::from_secs(1)), |q| (q.max_queued, q.aging));
        Ok(SharedSlots {
            header: config.header_name()?,
            limits: config.limits()?,
            retry_after: config.retry_after,
            queue,
            clock,
            state: Mutex::new(State {
                in_flight: 0,
                queue: WaitQueue::new(max_queued, aging),
            }),
        })
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.state.lock().in_flight
    }

    pub(crate) fn queued(&self) -> usize {
        self.state.lock().queue.len()
    }

    fn shed(&self, reason: ShedReason) -> Shed {
        Shed::new(reason, self.retry_after)
    }

    /// Gives free slots to waiters that may use them; the grants are sent after the lock is let go.
    fn grant(
        self: &Arc<Self>,
        state: &mut State,
        now: Timestamp,
    ) -> Vec<(oneshot::Sender<PrioritySlot>, PrioritySlot)> {
        let mut grants = Vec::new();
        while let Some(sender) = state
            .queue
            .pop_admissible(now, state.in_flight, &self.limits)
        {
            state.in_flight += 1;
            grants.push((
                sender,
                PrioritySlot {
                    slots: Arc::clone(self),
                },
            ));
        }
        grants
    }

    /// Sends grants; a slot whose waiter is gone is dropped, which frees it again.
    fn deliver(grants: Vec<(oneshot::Sender<PrioritySlot>, PrioritySlot)>) {
        for (sender, slot) in grants {
            let _unused = sender.send(slot);
        }
    }

    /// Re-examines the line (a waiter's class rose with age).
    fn dispatch(self: &Arc<Self>) {
        let now = self.clock.now();
        let grants = self.grant(&mut self.state.lock(), now);
        Self::deliver(grants);
    }

    /// A slot for a request of `priority` at once, a place in line, or the shed error.
    pub(crate) fn enter(self: &Arc<Self>, priority: Priority) -> Result<Entry, Shed> {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let grants = self.grant(&mut state, now);
        let limit = self.limits.of(priority);
        let result = if state.in_flight < limit {
            state.in_flight += 1;
            Ok(Entry::Admitted(PrioritySlot {
                slots: Arc::clone(self),
            }))
        } else {
            let (sender, receiver) = oneshot::channel();
            match (&self.queue, state.queue.push(priority, now, sender)) {
                (Some(_), Pushed::Queued { ticket, displaced }) => {
                    // A displaced waiter's sender is dropped: it wakes up shed.
                    drop(displaced);
                    Ok(Entry::Waiting(Waiting {
                        ticket,
                        priority,
                        arrived: now,
                        slot: receiver,
                    }))
                }
                (Some(queue), _) => Err(self.shed(ShedReason::QueueFull {
                    priority,
                    max_queued: queue.max_queued,
                })),
                (None, _) => Err(self.shed(ShedReason::PriorityCapacity { priority, limit })),
            }
        };
        drop(state);
        Self::deliver(grants);
        result
    }

    /// Waits for a slot until the line's deadline; the place in line is given up if this future is dropped.
    pub(crate) async fn wait(self: Arc<Self>, waiting: Waiting) -> Result<PrioritySlot, Shed> {
        let Some(queue) = self.queue.clone() else {
            return Err(self.shed(ShedReason::QueueFull {
                priority: waiting.priority,
                max_queued: 0,
            }));
        };
        let mut guard = LeaveLine {
            slots: Arc::clone(&self),
            ticket: Some(waiting.ticket),
        };
        let mut receiver = waiting.slot;
        let deadline = waiting.arrived.saturating_add(queue.max_wait);
        loop {
            let now = self.clock.now();
            let waited = now.saturating_since(waiting.arrived);
            let to_deadline = deadline.saturating_since(now);
            let aging_nanos = queue.aging.as_nanos().max(1);
            let to_next_class = Duration::from_nanos(
                u64::try_from(aging_nanos - waited.as_nanos() % aging_nanos).unwrap_or(u64::MAX),
            );
            tokio::select! {
                biased;
                granted = &mut receiver => {
                    guard.ticket = None;
                    return granted.map_err(|_| self.shed(ShedReason::QueueFull {
                        priority: waiting.priority,
                        max_queued: queue.max_queued,
                    }));
                }
                () = tokio::time::sleep(to_deadline.min(to_next_class)) => {
                    if self.clock.now() >= deadline {
                        let removed = self.state.lock().queue.remove(waiting.ticket);
                        if removed.is_some() {
                            guard.ticket = None;
                            return Err(self.shed(ShedReason::QueueTimeout {
                                priority: waiting.priority,
                                max_wait: queue.max_wait,
                            }));
                        }
                        // Granted meanwhile: the slot is in the channel.
                    } else {
                        self.dispatch();
                    }
                }
            }
        }
    }
}

/// Takes a waiter out of line when its future is dropped before it got a slot.
struct LeaveLine {
    slots: Arc<SharedSlots>,
    ticket: Option<Ticket>,
}

impl Drop for LeaveLine {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let removed = self.slots.state.lock().queue.remove(ticket);
            drop(removed);
        }
    }
}

/// One admitted request's slot; dropping it frees the slot for the first waiter that may use it.
pub struct PrioritySlot {
    slots: Arc<SharedSlots>,
}

impl std::fmt::Debug for PrioritySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrioritySlot")
    }
}

impl Drop for PrioritySlot {
    fn drop(&mut self) {
        let now = self.slots.clock.now();
        let grants = {
            let mut state = self.slots.state.lock();
            state.in_flight -= 1;
            self.slots.grant(&mut state, now)
        };
        SharedSlots::deliver(grants);
    }
}
