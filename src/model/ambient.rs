//! The ambient inputs of otherwise deterministic code: where new IDs and
//! the current time come from.
//!
//! The planner (and the executor) take them as values rather than reading
//! the system themselves, so tests can fix them: [`IdSource`] gives the IDs
//! the engine makes up (a new provider resource's), [`Clock`] the
//! timestamps it writes. Each has a system implementation, the default,
//! and a deterministic one for tests; [`SharedIds`] and [`SharedClock`]
//! carry either in options that are `Clone` and `Debug`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::urn::Urn;

/// Where the IDs the engine makes up come from.
pub trait IdSource: Send + Sync + fmt::Debug {
    /// A new ID for the resource `urn`, never given before by this source.
    fn next_id(&self, urn: &Urn) -> String;
}

/// Random-looking UUID-shaped IDs from the URN, the system time and a
/// sequence number (unique within one source, and across processes unless
/// two hit the same nanosecond with the same sequence number).
#[derive(Debug, Default)]
pub struct SystemIds {
    seq: AtomicU64,
}

impl IdSource for SystemIds {
    fn next_id(&self, urn: &Urn) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let h = fnv1a(format!("{urn}#{nanos}#{seq}").as_bytes());
        let l = fnv1a(format!("{h}").as_bytes());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            h >> 32,
            (h >> 16) & 0xffff,
            h & 0xfff,
            l >> 52,
            l & 0xffff_ffff_ffff
        )
    }
}

/// Deterministic UUID-shaped IDs for tests: the `n`-th ID given is
/// `00000000-0000-4000-8000-<n as 12 hex digits>`, whatever the URN.
#[derive(Debug, Default)]
pub struct CountingIds {
    seq: AtomicU64,
}

impl IdSource for CountingIds {
    fn next_id(&self, _urn: &Urn) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        format!("00000000-0000-4000-8000-{n:012x}")
    }
}

/// An [`IdSource`] to carry in options: cloning shares the source (and so
/// its sequence). The default is [`SystemIds`].
#[derive(Clone, Debug)]
pub struct SharedIds(Arc<dyn IdSource>);

impl SharedIds {
    /// Shares `source`.
    pub fn new(source: impl IdSource + 'static) -> Self {
        Self(Arc::new(source))
    }

    /// The system source ([`SystemIds`]).
    pub fn system() -> Self {
        Self::new(SystemIds::default())
    }

    /// A fresh deterministic source ([`CountingIds`]).
    pub fn counting() -> Self {
        Self::new(CountingIds::default())
    }

    /// A new ID for the resource `urn`.
    pub fn next_id(&self, urn: &Urn) -> String {
        self.0.next_id(urn)
    }
}

impl Default for SharedIds {
    fn default() -> Self {
        Self::system()
    }
}

/// Where the timestamps the engine writes come from.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time as RFC 3339 in UTC, to the second
    /// (`2024-05-01T12:00:00Z`), as checkpoints record it.
    fn now_rfc3339(&self) -> String;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_rfc3339(&self) -> String {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
    }
}

/// A clock that always tells the same time, for tests.
#[derive(Debug, Clone)]
pub struct FixedClock {
    now: String,
}

impl FixedClock {
    /// A clock stopped at `now` (RFC 3339, e.g. `2024-05-01T12:00:00Z`).
    pub fn new(now: impl Into<String>) -> Self {
        Self { now: now.into() }
    }
}

impl Clock for FixedClock {
    fn now_rfc3339(&self) -> String {
        self.now.clone()
    }
}

/// A [`Clock`] to carry in options; the default is [`SystemClock`].
#[derive(Clone, Debug)]
pub struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    /// Shares `clock`.
    pub fn new(clock: impl Clock + 'static) -> Self {
        Self(Arc::new(clock))
    }

    /// The system clock.
    pub fn system() -> Self {
        Self::new(SystemClock)
    }

    /// A clock stopped at `now` ([`FixedClock`]).
    pub fn fixed(now: impl Into<String>) -> Self {
        Self::new(FixedClock::new(now))
    }

    /// The current time as RFC 3339 in UTC, to the second.
    pub fn now_rfc3339(&self) -> String {
        self.0.now_rfc3339()
    }
}

impl Default for SharedClock {
    fn default() -> Self {
        Self::system()
    }
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn urn() -> Urn {
        Urn::parse("urn:pulumi:dev::proj::pulumi:providers:aws::default").expect("urn")
    }

    #[test]
    fn system_ids_are_uuid_shaped_and_distinct() {
        let ids = SharedIds::system();
        let got: HashSet<String> = (0..100).map(|_| ids.next_id(&urn())).collect();
        assert_eq!(got.len(), 100);
        for id in &got {
            let parts: Vec<&str> = id.split('-').collect();
            let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            assert_eq!(lens, [8, 4, 4, 4, 12], "{id}");
            assert!(
                parts[2].starts_with('4') && parts[3].starts_with('8'),
                "{id}"
            );
            assert!(
                id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
                "{id}"
            );
        }
    }

    #[test]
    fn counting_ids_count_and_clones_share_the_sequence() {
        let a = SharedIds::counting();
        let b = a.clone();
        assert_eq!(a.next_id(&urn()), "00000000-0000-4000-8000-000000000001");
        assert_eq!(b.next_id(&urn()), "00000000-0000-4000-8000-000000000002");
        // A fresh source starts again.
        assert_eq!(
            SharedIds::counting().next_id(&urn()),
            "00000000-0000-4000-8000-000000000001"
        );
    }

    #[test]
    fn clocks_tell_rfc3339_seconds() {
        assert_eq!(
            SharedClock::fixed("2024-05-01T12:00:00Z").now_rfc3339(),
            "2024-05-01T12:00:00Z"
        );
        let now = SharedClock::default().now_rfc3339();
        assert!(humantime::parse_rfc3339(&now).is_ok(), "{now}");
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
    }
}
