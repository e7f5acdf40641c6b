//! How many chains that call a provider may be in the executor at once:
//! the pending-operation window, sized by how long provider calls take.
//!
//! Two costs pull the window in opposite directions:
//! - **Throughput.** A provider call starts only once its `begin` is
//!   durable. With a window of exactly `parallel`, a permit freed by a call
//!   that returned has no operation with a durable `begin` waiting for it:
//!   the next one's `begin` is queued only now and costs a group commit
//!   first. When calls are short (a simulated 2 ms call against a 2 ms
//!   fsync) that idles the permits half the time (P3 of `performance.md`).
//! - **The quiesce.** A migration waits for every chain already in the
//!   executor (`migrations.md` §7). A window of `k x parallel` is up to `k`
//!   rounds of calls before a migration can run; P8 allows the longest
//!   in-flight step plus [`QUIESCE_SLACK`].
//!
//! The rule takes both: extra rounds of `parallel` chains beyond the first,
//! only as many as fit in [`QUIESCE_SLACK`] at the observed call latency,
//! never above the configured ceiling. Calls of 50 ms (or a real cloud's
//! seconds) get a window of `parallel`, as Pulumi's `--parallel`; calls of
//! 2 ms get three rounds (two extra rounds cost a quiesce 4 ms); calls that
//! take no time get the ceiling. Before any call returned the window is
//! `parallel`.
//!
//! The observed latency is deliberately pessimistic: a slower call raises
//! it at once, faster ones lower it an eighth of the way per call, so one
//! slow operation narrows the window before a quiesce can be caught behind
//! several rounds of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a quiesce may wait beyond the calls in flight for the extra rounds
/// of a window wider than `parallel` (`performance.md` P8: the longest
/// in-flight step plus 5 ms).
pub(crate) const QUIESCE_SLACK: Duration = Duration::from_millis(5);

/// The window for `parallel` permits under a `ceiling` (the configured
/// window, at least `parallel`), given the observed call latency (`None`
/// before any call returned).
pub(crate) fn window(parallel: usize, ceiling: usize, latency: Option<Duration>) -> usize {
    let parallel = parallel.max(1);
    let ceiling = ceiling.max(parallel);
    let Some(latency) = latency else {
        return parallel;
    };
    let extra = match QUIESCE_SLACK.as_nanos().checked_div(latency.as_nanos()) {
        Some(rounds) => usize::try_from(rounds).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    parallel
        .saturating_mul(extra.saturating_add(1))
        .min(ceiling)
}

/// The observed provider-call latency, shared by the executor's tasks
/// (which record each call) and the generator (which sizes the window).
#[derive(Debug)]
pub(crate) struct CallLatency {
    /// Microseconds; `u64::MAX` before the first call returned.
    micros: AtomicU64,
    /// Every call's time, summed (microseconds).
    total_micros: AtomicU64,
}

impl Default for CallLatency {
    fn default() -> Self {
        Self {
            micros: AtomicU64::new(u64::MAX),
            total_micros: AtomicU64::new(0),
        }
    }
}

impl CallLatency {
    /// The estimate, if any call returned.
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.micros.load(Ordering::Relaxed) {
            u64::MAX => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// The time of every call recorded, summed.
    pub(crate) fn total(&self) -> Duration {
        Duration::from_micros(self.total_micros.load(Ordering::Relaxed))
    }

    /// Records a call that took `took`: a slower one raises the estimate to
    /// it, a faster one lowers it by an eighth of the difference.
    pub(crate) fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_micros())
            .unwrap_or(u64::MAX - 1)
            .min(u64::MAX - 1);
        self.total_micros.fetch_add(took, Ordering::Relaxed);
        // `fetch_update` retries on a race; the closure always answers.
        let _ = self
            .micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == u64::MAX || took >= old {
                    took
                } else {
                    old - (old - took) / 8
                })
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check() {
        let ms = Duration::from_millis;
        // (parallel, ceiling, latency) -> window
        let cases: &[(usize, usize, Option<Duration>, usize)] = &[
            // Nothing observed yet: the permits only.
            (64, 256, None, 64),
            // Calls longer than the slack: no extra round (P8).
            (64, 256, Some(ms(50)), 64),
            (64, 256, Some(Duration::from_secs(30)), 64),
            (64, 256, Some(ms(6)), 64),
            // Exactly the slack: one extra round costs it.
            (64, 256, Some(ms(5)), 128),
            // 2 ms calls (P3): two extra rounds, 4 ms of quiesce.
            (64, 256, Some(ms(2)), 192),
            (64, 256, Some(Duration::from_micros(2_050)), 192),
            // Fast calls: the ceiling.
            (64, 256, Some(ms(1)), 256),
            (8, 64, Some(Duration::ZERO), 64),
            (8, 64, Some(Duration::from_micros(3)), 64),
            // A ceiling below parallel is raised to it; parallel 0 is 1.
            (64, 10, Some(Duration::ZERO), 64),
            (0, 0, None, 1),
            (0, 0, Some(Duration::ZERO), 1),
        ];
        for &(parallel, ceiling, latency, want) in cases {
            assert_eq!(
                window(parallel, ceiling, latency),
                want,
                "parallel {parallel}, ceiling {ceiling}, latency {latency:?}"
            );
        }
    }

    #[test]
    fn the_estimate_rises_at_once_and_falls_slowly() {
        let latency = CallLatency::default();
        assert_eq!(latency.get(), None);
        assert_eq!(latency.total(), Duration::ZERO);
        latency.record(Duration::from_millis(2));
        assert_eq!(latency.get(), Some(Duration::from_millis(2)));
        // One slow call: the window narrows before the next submission.
        latency.record(Duration::from_millis(50));
        assert_eq!(latency.get(), Some(Duration::from_millis(50)));
        assert_eq!(window(64, 256, latency.get()), 64);
        // Fast calls bring it down an eighth of the way each.
        latency.record(Duration::from_millis(2));
        assert_eq!(latency.get(), Some(Duration::from_millis(44)));
        assert_eq!(latency.total(), Duration::from_millis(54));
        for _ in 0..40 {
            latency.record(Duration::from_millis(2));
        }
        let settled = latency.get().expect("observed");
        assert!(settled < Duration::from_millis(3), "{settled:?}");
        assert_eq!(window(64, 256, latency.get()), 192);
    }
}
