//! The execution gate: reservations, quiesce, resume.
//!
//! A step chain holds a [`Reservation`] from the moment it is submitted to
//! the executor until its last step finishes (queued chains included). A
//! migration calls [`Gate::quiesce`] (or [`Gate::quiesce_blocking`]): the
//! request is recorded at once, so every reservation asked for afterwards
//! waits, and the call completes when the last reservation in flight is
//! released, yielding a [`Quiesced`] token. [`Quiesced::resume`] (or dropping
//! the token) reopens the gate and wakes every waiter.
//!
//! # Guarantees
//!
//! - **A waiting quiescer is never overtaken**: while any quiesce request is
//!   pending or holds the gate, no reservation is granted, whether it was
//!   asked for through the blocking or the async face.
//! - **Mutual exclusion**: while a [`Quiesced`] token exists, no reservation
//!   exists; at most one token exists at a time. A second quiescer waits for
//!   the first to resume (it then takes the gate before any reservation:
//!   reservations are granted only when no quiesce request is pending, so a
//!   stream of migrations can delay chains but a chain never delays a
//!   migration that asked first).
//! - **No lost wake-ups**: one mutex protects the whole state (active count,
//!   quiesce requests, closed flag, and the wakers of waiting tasks); a
//!   waiter checks its condition and registers (condvar wait or waker) under
//!   that mutex, and every state change that can satisfy a waiter notifies
//!   all waiters of that kind. Wakers are collected under the mutex and
//!   woken after it is released.
//!
//! The blocking face (`*_blocking`) parks the calling thread on a condvar:
//! use it from plain threads, never from an async runtime's worker threads.
//! The async face ([`Gate::reserve`], [`Gate::quiesce`]) is what the executor
//! and the migration coordinator await; it uses plain [`std::task::Waker`]s
//! and needs no particular runtime.
//!
//! # Fault injection
//!
//! Under `--cfg keel_loom --cfg keel_loom_broken="NAME"` (loom twins only)
//! one fault is compiled in: `overtake` (a waiting quiescer is overtaken),
//! `no_drain` (the token is handed out with reservations still active),
//! `double_quiesce` (two tokens at once), `lost_wakeup` (check and wait under
//! separate lock acquisitions), `wake_one` (resume wakes one waiter of each
//! kind), `no_register` (a pending future leaves no waker), `late_reserve`
//! ([`Gate::submit`] leaves the reservation to the receiver).

use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::shim::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A waiting task's waker, tagged with the id of the future that owns it.
type WaiterList = Vec<(u64, Waker)>;

/// Everything the gate knows, under one mutex.
#[derive(Debug, Default)]
struct State {
    /// Reservations granted and not yet released.
    active: usize,
    /// Quiescers that asked and have not resumed (or given up) yet,
    /// including the one holding the gate.
    quiesce_requests: usize,
    /// A [`Quiesced`] token exists.
    closed: bool,
    /// Tasks waiting for a reservation.
    reserve_waiters: WaiterList,
    /// Tasks waiting to quiesce.
    quiesce_waiters: WaiterList,
    /// Next id handed to a waiting future.
    next_waiter_id: u64,
}

impl State {
    /// Whether a reservation may be granted now.
    fn may_reserve(&self) -> bool {
        if fault!("overtake") {
            // FAULT: only a closed gate stops new chains, so a chain asked
            // for after a quiescer started waiting slips in ahead of it.
            !self.closed
        } else {
            self.quiesce_requests == 0
        }
    }

    /// Whether a quiescer (whose request is already counted) may take the
    /// gate now.
    fn may_quiesce(&self) -> bool {
        // FAULT `double_quiesce`: a second quiescer does not wait for the
        // first to resume.
        let gate_free = !self.closed || fault!("double_quiesce");
        // FAULT `no_drain`: the token is handed out without waiting for the
        // reservations in flight, so the commit runs unquiesced.
        let drained = self.active == 0 || fault!("no_drain");
        gate_free && drained
    }

    /// Registers (or refreshes) the waker of the future whose id is in
    /// `slot`, allocating an id on first registration.
    fn register(&mut self, quiesce: bool, slot: &mut Option<u64>, waker: &Waker) {
        if fault!("no_register") {
            // FAULT: the future returns `Pending` without leaving a waker.
            return;
        }
        let list = if quiesce {
            &mut self.quiesce_waiters
        } else {
            &mut self.reserve_waiters
        };
        if let Some(id) = *slot {
            if let Some((_, registered)) = list.iter_mut().find(|(i, _)| *i == id) {
                if !registered.will_wake(waker) {
                    registered.clone_from(waker);
                }
                return;
            }
        }
        let id = self.next_waiter_id;
        self.next_waiter_id = self.next_waiter_id.wrapping_add(1);
        list.push((id, waker.clone()));
        *slot = Some(id);
    }

    /// Removes the waker registered under `slot`, if it is still there.
    fn deregister(&mut self, quiesce: bool, slot: &mut Option<u64>) {
        if let Some(id) = slot.take() {
            let list = if quiesce {
                &mut self.quiesce_waiters
            } else {
                &mut self.reserve_waiters
            };
            list.retain(|(i, _)| *i != id);
        }
    }
}

/// The shared core behind a [`Gate`] and everything it hands out.
#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    /// Threads blocked in [`Gate::reserve_blocking`].
    reserve_cv: Condvar,
    /// Threads blocked in [`Gate::quiesce_blocking`].
    quiesce_cv: Condvar,
}

impl Inner {
    /// Locks the state. Nothing panics while the lock is held (wakers run
    /// after it is released), so a poisoned lock still holds a consistent
    /// state and is recovered.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks on `cv` until notified; see [`Inner::lock`] for poisoning.
    fn wait<'a>(&self, cv: &Condvar, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes reservations possible again after the last quiesce request
    /// went away: notifies every blocked thread and returns every waiting
    /// task's waker.
    fn reopen(&self, state: &mut State) -> WaiterList {
        if fault!("wake_one") {
            // FAULT: only one waiter of each kind is woken.
            self.reserve_cv.notify_one();
            if state.reserve_waiters.is_empty() {
                Vec::new()
            } else {
                vec![state.reserve_waiters.remove(0)]
            }
        } else {
            self.reserve_cv.notify_all();
            mem::take(&mut state.reserve_waiters)
        }
    }

    /// Lets every waiting quiescer re-check the gate.
    fn wake_quiescers(&self, state: &mut State) -> WaiterList {
        self.quiesce_cv.notify_all();
        mem::take(&mut state.quiesce_waiters)
    }

    /// Releases one reservation.
    fn release(&self) {
        let wakers = {
            let mut state = self.lock();
            state.active -= 1;
            if state.active == 0 && state.quiesce_requests > 0 {
                self.wake_quiescers(&mut state)
            } else {
                Vec::new()
            }
        };
        wake(wakers);
    }

    /// Withdraws one quiesce request: the gate's holder resuming
    /// (`held_gate`), or a quiescing future dropped before it got the gate
    /// (its waker, if registered under `waiter`, is removed too).
    fn withdraw_quiesce(&self, held_gate: bool, waiter: &mut Option<u64>) {
        let wakers = {
            let mut state = self.lock();
            state.deregister(true, waiter);
            if held_gate {
                state.closed = false;
            }
            state.quiesce_requests -= 1;
            if state.quiesce_requests == 0 {
                self.reopen(&mut state)
            } else if held_gate {
                // Hand the gate to the next quiescer; reservations stay
                // shut out because a request is still pending.
                self.wake_quiescers(&mut state)
            } else {
                Vec::new()
            }
        };
        wake(wakers);
    }
}

/// Wakes the collected wakers (called with the state mutex released).
fn wake(wakers: WaiterList) {
    for (_, waker) in wakers {
        waker.wake();
    }
}

/// The execution gate. Cloning it gives another handle on the same gate.
#[derive(Clone, Default)]
pub struct Gate {
    inner: Arc<Inner>,
}

/// A snapshot of the gate's counters, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCounters {
    /// Reservations granted and not yet released.
    pub active: usize,
    /// Quiesce requests pending, including the one holding the gate.
    pub quiesce_requests: usize,
    /// Whether a [`Quiesced`] token exists.
    pub closed: bool,
    /// Async tasks with a registered waker (reservers and quiescers).
    pub waiting_tasks: usize,
}

impl Gate {
    /// Creates an open gate with no reservations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Grants a reservation if the gate is open and no quiescer is waiting;
    /// never blocks.
    pub fn try_reserve(&self) -> Option<Reservation> {
        let mut state = self.inner.lock();
        if state.may_reserve() {
            state.active += 1;
            Some(Reservation {
                inner: Arc::clone(&self.inner),
            })
        } else {
            None
        }
    }

    /// Submits `value` (a step chain) under a reservation taken *now*, if
    /// the gate admits one; otherwise hands `value` back. Whoever receives
    /// the [`Reserved`] (the executor, through its mailbox) holds the
    /// reservation from this moment on, so a quiesce asked for after this
    /// call waits for `value`'s work even while it is still in transit.
    /// Never blocks.
    ///
    /// # Errors
    ///
    /// Returns `value` when a quiescer is waiting or holds the gate.
    pub fn submit<T>(&self, value: T) -> Result<Reserved<T>, T> {
        if fault!("late_reserve") {
            // FAULT: the reservation is taken only when the receiver starts
            // the work (as the executor did when it handled its mailbox),
            // so a quiesce asked for in between does not wait for it.
            return if self.inner.lock().may_reserve() {
                Ok(Reserved {
                    value,
                    hold: Hold::Late(self.clone()),
                })
            } else {
                Err(value)
            };
        }
        match self.try_reserve() {
            Some(r) => Ok(Reserved::new(value, r)),
            None => Err(value),
        }
    }

    /// Grants a reservation, blocking the calling thread while the gate is
    /// closed or a quiescer is waiting.
    pub fn reserve_blocking(&self) -> Reservation {
        let inner = &self.inner;
        let mut state = inner.lock();
        while !state.may_reserve() {
            state = inner.wait(&inner.reserve_cv, state);
        }
        state.active += 1;
        drop(state);
        Reservation {
            inner: Arc::clone(inner),
        }
    }

    /// Returns a future that resolves to a reservation once the gate is open
    /// and no quiescer is waiting.
    ///
    /// Nothing is recorded until the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. A reservation is granted only inside the poll that
    /// returns it, so a dropped future never holds one; dropping a waiting
    /// future removes its waker.
    pub fn reserve(&self) -> ReserveFuture {
        ReserveFuture {
            inner: Some(Arc::clone(&self.inner)),
            waiter: None,
        }
    }

    /// Takes the gate, blocking the calling thread: records the quiesce
    /// request at once (reservations asked for from now on wait), then waits
    /// until no reservation is active and no other quiescer holds the gate.
    pub fn quiesce_blocking(&self) -> Quiesced {
        let inner = &self.inner;
        let mut state = inner.lock();
        state.quiesce_requests += 1;
        if fault!("lost_wakeup") {
            // FAULT: the condition is checked under one lock acquisition and
            // the wait starts under another, so a release in between is a
            // lost wake-up.
            drop(state);
            loop {
                let ready = inner.lock().may_quiesce();
                if ready {
                    inner.lock().closed = true;
                    break;
                }
                drop(inner.wait(&inner.quiesce_cv, inner.lock()));
            }
        } else {
            while !state.may_quiesce() {
                state = inner.wait(&inner.quiesce_cv, state);
            }
            state.closed = true;
            drop(state);
        }
        Quiesced {
            inner: Arc::clone(inner),
        }
    }

    /// Returns a future that takes the gate like [`Gate::quiesce_blocking`].
    ///
    /// The quiesce request is recorded by this call, before the future is
    /// polled: from now on no reservation is granted until the returned
    /// future is dropped or its [`Quiesced`] token is. Create it only when
    /// you are about to await it.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropping the future before it completes withdraws the
    /// request (waking the reservers it was holding back) and removes its
    /// waker; once it has returned the token, the token owns the request.
    pub fn quiesce(&self) -> QuiesceFuture {
        self.inner.lock().quiesce_requests += 1;
        QuiesceFuture {
            inner: Some(Arc::clone(&self.inner)),
            waiter: None,
        }
    }

    /// The number of reservations granted and not yet released.
    pub fn active(&self) -> usize {
        self.inner.lock().active
    }

    /// Whether a quiesce request is pending or holds the gate.
    pub fn quiesce_requested(&self) -> bool {
        self.inner.lock().quiesce_requests > 0
    }

    /// A consistent snapshot of all counters.
    pub fn counters(&self) -> GateCounters {
        let state = self.inner.lock();
        GateCounters {
            active: state.active,
            quiesce_requests: state.quiesce_requests,
            closed: state.closed,
            waiting_tasks: state.reserve_waiters.len() + state.quiesce_waiters.len(),
        }
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("counters", &self.counters())
            .finish()
    }
}

/// Proof that a step chain may run: the gate is not quiesced while this
/// exists. Dropping it releases the reservation (waking a quiescer waiting
/// for the last one). It owns a handle on the gate, so it is `Send` and
/// `'static` and can move into spawned tasks.
#[must_use = "dropping a reservation releases it at once"]
pub struct Reservation {
    inner: Arc<Inner>,
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation").finish_non_exhaustive()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.inner.release();
    }
}

/// What a [`Reserved`] holds.
enum Hold {
    /// The reservation taken at submission.
    Taken(Reservation),
    /// The `late_reserve` broken twin only: the reservation is still to be
    /// taken.
    Late(Gate),
}

/// A value submitted under a gate reservation ([`Gate::submit`]), e.g. a
/// step chain in the executor's mailbox: the reservation travels with it.
#[must_use = "dropping it releases its reservation"]
pub struct Reserved<T> {
    value: T,
    hold: Hold,
}

impl<T> Reserved<T> {
    /// Pairs `value` with a reservation already taken for it.
    pub fn new(value: T, reservation: Reservation) -> Self {
        Self {
            value,
            hold: Hold::Taken(reservation),
        }
    }

    /// The value, and the reservation to hold until its work finished.
    /// Never blocks (except in the `late_reserve` broken twin, which is
    /// built only for loom).
    pub fn start(self) -> (T, Reservation) {
        let reservation = match self.hold {
            Hold::Taken(r) => r,
            Hold::Late(gate) => gate.reserve_blocking(),
        };
        (self.value, reservation)
    }

    /// The value, without starting it.
    pub fn value(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Reserved<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved")
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// Proof that the gate is quiesced: no reservation exists and none will be
/// granted while this exists. [`Quiesced::resume`] (or dropping it) reopens
/// the gate.
#[must_use = "dropping the token resumes the gate at once"]
pub struct Quiesced {
    inner: Arc<Inner>,
}

impl Quiesced {
    /// Reopens the gate: the next waiting quiescer (if any) takes it,
    /// otherwise every waiting reserver, blocked thread or task, is woken.
    pub fn resume(self) {
        drop(self);
    }

    /// Whether this token's gate is closed (always true; for assertions).
    pub(super) fn holds_gate(&self) -> bool {
        self.inner.lock().closed
    }
}

impl fmt::Debug for Quiesced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quiesced").finish_non_exhaustive()
    }
}

impl Drop for Quiesced {
    fn drop(&mut self) {
        self.inner.withdraw_quiesce(true, &mut None);
    }
}

/// The future returned by [`Gate::reserve`].
#[must_use = "futures do nothing unless polled"]
pub struct ReserveFuture {
    /// `None` once the reservation has been handed out.
    inner: Option<Arc<Inner>>,
    /// Id of this future's registered waker, if any.
    waiter: Option<u64>,
}

impl Future for ReserveFuture {
    type Output = Reservation;

    /// # Panics
    ///
    /// Panics if polled again after it returned the reservation.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reservation> {
        let this = self.get_mut();
        let inner = this
            .inner
            .as_ref()
            .expect("ReserveFuture polled after completion");
        let mut state = inner.lock();
        if state.may_reserve() {
            state.deregister(false, &mut this.waiter);
            state.active += 1;
            drop(state);
            let inner = this.inner.take().expect("checked above");
            Poll::Ready(Reservation { inner })
        } else {
            state.register(false, &mut this.waiter, cx.waker());
            Poll::Pending
        }
    }
}

impl Drop for ReserveFuture {
    fn drop(&mut self) {
        if let Some(inner) = &self.inner {
            if self.waiter.is_some() {
                inner.lock().deregister(false, &mut self.waiter);
            }
        }
    }
}

impl fmt::Debug for ReserveFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReserveFuture")
            .field("done", &self.inner.is_none())
            .field("registered", &self.waiter.is_some())
            .finish()
    }
}

/// The future returned by [`Gate::quiesce`]; it owns a quiesce request until
/// it completes or is dropped.
#[must_use = "the quiesce request holds back every new reservation until this is dropped"]
pub struct QuiesceFuture {
    /// `None` once the token has been handed out.
    inner: Option<Arc<Inner>>,
    /// Id of this future's registered waker, if any.
    waiter: Option<u64>,
}

impl Future for QuiesceFuture {
    type Output = Quiesced;

    /// # Panics
    ///
    /// Panics if polled again after it returned the token.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Quiesced> {
        let this = self.get_mut();
        let inner = this
            .inner
            .as_ref()
            .expect("QuiesceFuture polled after completion");
        let mut state = inner.lock();
        if state.may_quiesce() {
            state.deregister(true, &mut this.waiter);
            state.closed = true;
            drop(state);
            let inner = this.inner.take().expect("checked above");
            Poll::Ready(Quiesced { inner })
        } else {
            state.register(true, &mut this.waiter, cx.waker());
            Poll::Pending
        }
    }
}

impl Drop for QuiesceFuture {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.withdraw_quiesce(false, &mut self.waiter);
        }
    }
}

impl fmt::Debug for QuiesceFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuiesceFuture")
            .field("done", &self.inner.is_none())
            .field("registered", &self.waiter.is_some())
            .finish()
    }
}

#[cfg(all(test, not(keel_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::thread;
    use std::time::Duration;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (std::sync::Arc<CountingWaker>, Waker) {
        let counter = std::sync::Arc::new(CountingWaker::default());
        let waker = Waker::from(std::sync::Arc::clone(&counter));
        (counter, waker)
    }

    fn poll<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(fut).poll(&mut Context::from_waker(waker))
    }

    /// Waits (bounded) until `cond` holds.
    fn eventually(mut cond: impl FnMut() -> bool) {
        for _ in 0..2000 {
            if cond() {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
        panic!("condition not reached in time");
    }

    #[test]
    fn reservation_is_send_and_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Reservation>();
        check::<Quiesced>();
        check::<Gate>();
        fn check_send<T: Send + 'static>() {}
        check_send::<ReserveFuture>();
        check_send::<QuiesceFuture>();
    }

    #[test]
    fn reservations_count_and_release() {
        let gate = Gate::new();
        let a = gate.try_reserve().expect("open gate");
        let b = gate.reserve_blocking();
        assert_eq!(gate.active(), 2);
        drop(a);
        assert_eq!(gate.active(), 1);
        drop(b);
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn quiesce_waits_for_reservations_and_is_not_overtaken() {
        let gate = Gate::new();
        let running = gate.try_reserve().expect("open gate");
        let queued = gate.try_reserve().expect("open gate");
        let quiescer = {
            let gate = gate.clone();
            thread::spawn(move || {
                let token = gate.quiesce_blocking();
                assert_eq!(gate.active(), 0);
                token
            })
        };
        eventually(|| gate.quiesce_requested());
        // A chain asked for after the quiesce request waits.
        assert!(gate.try_reserve().is_none());
        drop(running);
        assert!(gate.try_reserve().is_none());
        drop(queued);
        let token = quiescer.join().expect("quiescer");
        assert!(gate.counters().closed);
        assert!(gate.try_reserve().is_none());
        token.resume();
        assert!(gate.try_reserve().is_some());
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn resume_wakes_every_blocked_thread() {
        let gate = Gate::new();
        let token = gate.quiesce_blocking();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let gate = gate.clone();
                thread::spawn(move || drop(gate.reserve_blocking()))
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        assert_eq!(gate.active(), 0);
        token.resume();
        for waiter in waiters {
            waiter.join().expect("waiter");
        }
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn second_quiescer_waits_for_first() {
        let gate = Gate::new();
        let first = gate.quiesce_blocking();
        let second = {
            let gate = gate.clone();
            thread::spawn(move || gate.quiesce_blocking().resume())
        };
        eventually(|| gate.counters().quiesce_requests == 2);
        assert!(!second.is_finished());
        first.resume();
        second.join().expect("second quiescer");
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn async_reserve_is_woken_by_resume() {
        let gate = Gate::new();
        let token = gate.quiesce_blocking();
        let (counter, waker) = counting_waker();
        let mut fut = gate.reserve();
        assert!(poll(&mut fut, &waker).is_pending());
        assert!(poll(&mut fut, &waker).is_pending());
        assert_eq!(gate.counters().waiting_tasks, 1, "re-poll keeps one entry");
        token.resume();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let reservation = match poll(&mut fut, &waker) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("gate is open"),
        };
        assert_eq!(gate.active(), 1);
        drop(reservation);
        drop(fut);
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn async_quiesce_is_woken_by_last_release() {
        let gate = Gate::new();
        let reservation = gate.try_reserve().expect("open gate");
        let (counter, waker) = counting_waker();
        let mut fut = gate.quiesce();
        // Recorded before the first poll.
        assert!(gate.try_reserve().is_none());
        assert!(poll(&mut fut, &waker).is_pending());
        drop(reservation);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let token = match poll(&mut fut, &waker) {
            Poll::Ready(t) => t,
            Poll::Pending => panic!("no reservation left"),
        };
        assert!(gate.try_reserve().is_none());
        token.resume();
        assert!(gate.try_reserve().is_some());
    }

    #[test]
    fn dropped_reserve_future_deregisters() {
        let gate = Gate::new();
        let token = gate.quiesce_blocking();
        let (counter, waker) = counting_waker();
        let mut fut = gate.reserve();
        assert!(poll(&mut fut, &waker).is_pending());
        drop(fut);
        assert_eq!(gate.counters().waiting_tasks, 0);
        token.resume();
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn dropped_quiesce_future_withdraws_and_wakes_reservers() {
        let gate = Gate::new();
        let held = gate.try_reserve().expect("open gate");
        let (q_counter, q_waker) = counting_waker();
        let mut quiesce = gate.quiesce();
        assert!(poll(&mut quiesce, &q_waker).is_pending());
        let (r_counter, r_waker) = counting_waker();
        let mut reserve = gate.reserve();
        assert!(poll(&mut reserve, &r_waker).is_pending());
        let blocked = {
            let gate = gate.clone();
            thread::spawn(move || drop(gate.reserve_blocking()))
        };
        drop(quiesce);
        assert_eq!(r_counter.0.load(Ordering::SeqCst), 1);
        assert_eq!(q_counter.0.load(Ordering::SeqCst), 0);
        blocked.join().expect("blocked reserver");
        assert!(matches!(poll(&mut reserve, &r_waker), Poll::Ready(_)));
        drop(held);
        assert_eq!(gate.counters(), GateCounters::default());
    }

    #[test]
    fn never_polled_quiesce_future_still_withdraws() {
        let gate = Gate::new();
        let fut = gate.quiesce();
        assert!(gate.try_reserve().is_none());
        drop(fut);
        assert!(gate.try_reserve().is_some());
    }

    #[test]
    fn many_threads_stress() {
        let gate = Gate::new();
        let inside = std::sync::Arc::new(AtomicUsize::new(0));
        let quiesced = std::sync::Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (gate, inside, quiesced) = (
                    gate.clone(),
                    std::sync::Arc::clone(&inside),
                    std::sync::Arc::clone(&quiesced),
                );
                thread::spawn(move || {
                    for _ in 0..200 {
                        let r = gate.reserve_blocking();
                        inside.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(quiesced.load(Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(r);
                    }
                })
            })
            .collect();
        let migrators: Vec<_> = (0..2)
            .map(|_| {
                let (gate, inside, quiesced) = (
                    gate.clone(),
                    std::sync::Arc::clone(&inside),
                    std::sync::Arc::clone(&quiesced),
                );
                thread::spawn(move || {
                    for _ in 0..50 {
                        let token = gate.quiesce_blocking();
                        assert_eq!(quiesced.fetch_add(1, Ordering::SeqCst), 0);
                        assert_eq!(inside.load(Ordering::SeqCst), 0);
                        quiesced.fetch_sub(1, Ordering::SeqCst);
                        token.resume();
                    }
                })
            })
            .collect();
        for handle in workers.into_iter().chain(migrators) {
            handle.join().expect("thread");
        }
        assert_eq!(gate.counters(), GateCounters::default());
    }
}
