//! Last-seen tracking without a write per request: an in-memory map of the UTC day each key
//! was last noted on. A key's first sighting of a day queues one `(key, day)` row; the rows go
//! to the store together every [`FLUSH_EVERY`] (one atomic operation), so each live host costs
//! at most one last-seen write a day. Lost on a crash: a host then looks up to a few seconds
//! older, at day resolution, which the idle expiry (weeks) cannot notice.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use relay_store::{utc_day, Key32};

use super::{Relay, RelayError};

/// How often queued sightings are written.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// Most keys remembered (the map is cleared when full: at worst one extra write per host).
const MAP_CAP: usize = 200_000;

/// Keys' last noted day and the sightings not yet written.
#[derive(Default)]
pub(crate) struct Seen {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    day_of: HashMap<Key32, u32>,
    pending: Vec<(Key32, u32)>,
}

impl Seen {
    /// Note that `pk` was seen at `now_ms`: an in-memory lookup; true when this queued a write
    /// (the key's first sighting of the day).
    pub(crate) fn note(&self, pk: &Key32, now_ms: u64) -> bool {
        let day = utc_day(now_ms);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.day_of.get(pk) == Some(&day) {
            return false;
        }
        if g.day_of.len() >= MAP_CAP {
            g.day_of.clear();
        }
        g.day_of.insert(*pk, day);
        if g.pending.len() < MAP_CAP {
            g.pending.push((*pk, day));
        }
        true
    }

    /// Take the queued sightings.
    pub(crate) fn take(&self) -> Vec<(Key32, u32)> {
        std::mem::take(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()).pending)
    }
}

impl Relay {
    /// Note a sighting of `pk` (a hop by it, a push to it); no store access.
    pub fn note_seen(&self, pk: &Key32) {
        self.seen.note(pk, self.now_ms());
    }

    /// Write the queued sightings in one store operation (nothing when none are queued).
    /// Returns the rows written.
    ///
    /// # Errors
    /// 503-class error when the store fails (those sightings are dropped; the next ones of the
    /// same day are not re-queued, which costs at most a day of last-seen resolution).
    pub(crate) async fn flush_seen(&self) -> Result<u64, RelayError> {
        let rows = self.seen.take();
        if rows.is_empty() {
            return Ok(0);
        }
        self.write(self.store.record_seen(rows)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::config::Limits;
    use relay_keyspace::{Clock, EnrolRequest, OpenOptions, Store, DAY_MS};
    use relay_wire::keys::SigningKey;

    const T0: u64 = 1_700_000_000_000;

    struct TestClock(AtomicU64);
    impl Clock for TestClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn relay_on(dir: &std::path::Path, clock: Arc<TestClock>) -> Relay {
        let opts = OpenOptions {
            clock: clock.clone(),
            ..OpenOptions::default()
        };
        let store = Arc::new(Store::open(dir, opts).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(crate::startup::start(
            store,
            SigningKey::generate(),
            Limits::default(),
            clock,
        ))
        .unwrap()
    }

    fn enrol(relay: &Relay, pk: Key32, name: &str) {
        relay
            .store()
            .enrol(EnrolRequest {
                host_pubkey: pk,
                host_name: name.into(),
                owner_fp: String::new(),
                account: None,
                authorized_by: "host-key".into(),
                authority_rank: 0,
                max_live: 100,
                invite: relay_store::InviteClaim::NotNeeded,
                org: None,
                client_id: None,
                denied_if: Vec::new(),
            })
            .wait()
            .unwrap();
    }

    fn block<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn many_sightings_on_one_day_cost_one_store_write() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(TestClock(AtomicU64::new(T0)));
        let relay = relay_on(dir.path(), clock.clone());
        let a = [7u8; 32];
        enrol(&relay, a, "alpha");
        let ops_before = relay.store().commit_stats().ops;
        for _ in 0..500 {
            relay.note_seen(&a);
            clock.0.fetch_add(1000, Ordering::SeqCst);
        }
        assert_eq!(block(relay.flush_seen()).unwrap(), 1, "one row written");
        assert_eq!(block(relay.flush_seen()).unwrap(), 0, "nothing queued");
        for _ in 0..500 {
            relay.note_seen(&a);
        }
        assert_eq!(block(relay.flush_seen()).unwrap(), 0);
        assert_eq!(
            relay.store().commit_stats().ops - ops_before,
            1,
            "1,000 sightings on one day: one store operation"
        );
        clock.0.fetch_add(DAY_MS, Ordering::SeqCst);
        relay.note_seen(&a);
        assert_eq!(
            block(relay.flush_seen()).unwrap(),
            1,
            "the next day: one more"
        );
    }

    #[test]
    fn the_idle_sweep_counts_sightings_still_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(TestClock(AtomicU64::new(T0)));
        let relay = relay_on(dir.path(), clock.clone());
        let (idle, active) = ([1u8; 32], [2u8; 32]);
        enrol(&relay, idle, "idle");
        enrol(&relay, active, "active");
        clock.0.fetch_add(91 * DAY_MS, Ordering::SeqCst);
        relay.note_seen(&active); // not yet written: the sweep writes it first
        assert_eq!(block(relay.expire_idle_enrolments()).unwrap(), 1);
        assert!(relay.store().enrolment(&idle).unwrap().is_none());
        assert!(relay.store().enrolment(&active).unwrap().is_some());
    }

    #[test]
    fn one_write_per_key_per_day() {
        let seen = Seen::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let t = 1_700_000_000_000;
        assert!(seen.note(&a, t));
        for i in 0..1000 {
            assert!(!seen.note(&a, t + i), "same day: no new write");
        }
        assert!(seen.note(&b, t));
        assert_eq!(seen.take().len(), 2);
        assert!(seen.take().is_empty());
        assert!(seen.note(&a, t + DAY_MS), "next day: one write");
        assert_eq!(seen.take(), vec![(a, utc_day(t + DAY_MS))]);
    }

    #[test]
    fn the_map_stays_bounded() {
        let seen = Seen::default();
        for n in 0..(MAP_CAP as u64 + 10) {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&n.to_be_bytes());
            seen.note(&k, 0);
        }
        let g = seen.inner.lock().unwrap();
        assert!(g.day_of.len() <= MAP_CAP);
        assert!(g.pending.len() <= MAP_CAP);
    }
}
