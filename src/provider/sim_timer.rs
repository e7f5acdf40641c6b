//! The simulated cloud's clock: latencies as long as configured.
//!
//! `tokio::time::sleep` rounds every deadline up to its timer wheel's
//! millisecond tick and then to the driver's millisecond `epoll` timeout:
//! on this project's 2-core machine a 2 ms sleep lasts 3.1 ms on average
//! (BENCHMARKS.md, "Issue 20, tenth slice"). A simulated operation of 2 ms
//! that takes 3.1 ms makes every measurement built on the configured
//! latency (the scale harness's lower bound, P3) wrong by half, so the
//! simulated cloud keeps its own timer: one thread per [`SimCloud`] that
//! sleeps on a condition variable until the earliest deadline (the kernel's
//! timer slack, tens of microseconds, is the error) and wakes each waiting
//! operation through a oneshot channel.
//!
//! A waiting operation holds no lock; dropping its future (a cancelled
//! call) leaves an entry whose wake-up goes nowhere. Dropping the timer
//! stops its thread and releases every waiter at once.
//!
//! [`SimCloud`]: super::sim::SimCloud

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::locks::{CondvarExt, MutexExt};

/// One waiting operation: its deadline, its arrival order (so that equal
/// deadlines wake in order) and the channel that wakes it.
struct Entry {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// The timer thread and its queue of deadlines.
pub(crate) struct SimTimer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SimTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = self.shared.queue.locked().heap.len();
        f.debug_struct("SimTimer")
            .field("waiting", &waiting)
            .finish()
    }
}

impl SimTimer {
    /// Starts the timer's thread.
    ///
    /// # Panics
    ///
    /// Panics if the operating system cannot start a thread.
    pub(crate) fn start() -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("keel-sim-timer".into())
            .spawn(move || run(&worker))
            .expect("the simulated cloud's timer thread starts");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// Waits `duration` (returns at once for zero).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped wait leaves only a wake-up that goes nowhere.
    pub(crate) async fn sleep(&self, duration: Duration) {
        if duration.is_zero() {
            return;
        }
        let at = Instant::now() + duration;
        let (wake, woken) = oneshot::channel();
        {
            let mut queue = self.shared.queue.locked();
            if queue.stop {
                return;
            }
            let seq = queue.next_seq;
            queue.next_seq += 1;
            let earliest = queue.heap.peek().is_none_or(|Reverse(e)| at < e.at);
            queue.heap.push(Reverse(Entry { at, seq, wake }));
            if earliest {
                self.shared.changed.notify_one();
            }
        }
        // An error means the timer stopped: the wait is over either way.
        let _ = woken.await;
    }
}

impl SimTimer {
    /// Stops the thread's work: every waiter is released now, and later
    /// waits return at once.
    fn stop(&self) {
        {
            let mut queue = self.shared.queue.locked();
            queue.stop = true;
            // Dropping the senders wakes their receivers.
            queue.heap.clear();
        }
        self.shared.changed.notify_one();
    }
}

impl Drop for SimTimer {
    fn drop(&mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            // The thread only waits and sends; it does not panic.
            let _ = thread.join();
        }
    }
}

/// The timer thread: wakes every due entry, then sleeps until the earliest
/// deadline or until an earlier one arrives.
fn run(shared: &Shared) {
    let mut due = Vec::new();
    let mut queue = shared.queue.locked();
    loop {
        if queue.stop {
            return;
        }
        let now = Instant::now();
        while queue.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(entry)) = queue.heap.pop() {
                due.push(entry.wake);
            }
        }
        if !due.is_empty() {
            // Woken without the lock: a wake-up may enter the kernel to
            // unpark a runtime worker, and the workers take this lock to
            // start their own waits.
            drop(queue);
            for wake in due.drain(..) {
                // A dropped receiver is a cancelled operation.
                let _ = wake.send(());
            }
            queue = shared.queue.locked();
            continue;
        }
        queue = match queue.heap.peek() {
            Some(Reverse(next)) => {
                let wait = next.at.saturating_duration_since(now);
                shared.changed.wait_timeout_locked(queue, wait)
            }
            None => shared.changed.wait_locked(queue),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_at_least_the_duration_and_wakes_in_deadline_order() {
        let timer = Arc::new(SimTimer::start());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Spawned longest first: a later, earlier deadline must wake the
        // thread out of its longer wait.
        for ms in [30u64, 20, 10, 1] {
            let (timer, order) = (Arc::clone(&timer), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let start = Instant::now();
                timer.sleep(Duration::from_millis(ms)).await;
                let waited = start.elapsed();
                order.locked().push(ms);
                (ms, waited)
            }));
        }
        for task in tasks {
            let (ms, waited) = task.await.expect("the sleeper finishes");
            assert!(
                waited >= Duration::from_millis(ms),
                "a {ms} ms sleep returned after {waited:?}"
            );
        }
        assert_eq!(*order.locked(), vec![1, 10, 20, 30]);
        assert!(timer.shared.queue.locked().heap.is_empty());
    }

    #[tokio::test]
    async fn stopping_the_timer_releases_its_waiters() {
        let timer = Arc::new(SimTimer::start());
        let sleeper = {
            let timer = Arc::clone(&timer);
            tokio::spawn(async move { timer.sleep(Duration::from_secs(3600)).await })
        };
        // Let the sleeper enqueue, then stop the timer under it.
        while timer.shared.queue.locked().heap.is_empty() {
            tokio::task::yield_now().await;
        }
        timer.stop();
        tokio::time::timeout(Duration::from_secs(10), sleeper)
            .await
            .expect("the sleeper is released, not left for an hour")
            .expect("the sleeper does not panic");
    }
}
