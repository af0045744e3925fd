//! The host daemon's watcher: a thread that keeps one pull open (long-poll `wait=` when the relay
//! advertises `x-mbx-wait-max`, else a poll every interval) above the daemon's receive position,
//! and wakes the daemon when mail is there, the epoch changed, or the relay came back. It never
//! touches the store: the daemon's sync pass does the receiving, so there is one receive path.
//! It reaches the relay as the passes do, through the stored [`Endpoint`] (URL and CA) the
//! daemon publishes with the position, and logs why a pull failed (once per outage).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

use super::client::{Endpoint, RelayClient};
use super::daemon_log::daemon_log;
use super::identity::Identity;
use super::sync::SyncOptions;
use super::trust::hint_ca;

/// The long-poll wait the daemon asks for, in seconds, unless the relay's `x-mbx-wait-max` is
/// lower (this relay allows 0..=60).
pub(crate) const LONG_POLL_SECS: u64 = 30;
/// The header a relay that holds pulls sends with every pull answer.
pub(crate) const WAIT_MAX_HEADER: &str = "x-mbx-wait-max";
/// Cap on the reconnect backoff (the row backoff's cap can be minutes; a relay restart is not).
pub(crate) const RECONNECT_CAP_MS: u64 = 30_000;
/// An empty long-poll answer sooner than this was cut short; the watcher pauses as long.
const EARLY_EMPTY: Duration = Duration::from_millis(50);
/// How long the watcher waits for the daemon's pass after a wake before it looks again.
const PASS_WAIT: Duration = Duration::from_secs(10);

/// Where the daemon's receiving stands, published after every pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Position {
    /// Bumped by every pass; 0 until the first one.
    pub generation: u64,
    /// The relay as stored (URL and CA): the watcher's client is built from it.
    pub endpoint: Endpoint,
    pub epoch: String,
    pub after: u64,
}

/// The position shared between the daemon (writer) and the watcher (reader).
#[derive(Default)]
pub(crate) struct Shared {
    pos: Mutex<Position>,
    changed: Condvar,
}

impl Shared {
    /// Publish a pass's position and wake a watcher waiting for it.
    pub(crate) fn publish(&self, endpoint: &Endpoint, epoch: &str, after: u64) {
        if let Ok(mut p) = self.pos.lock() {
            p.generation += 1;
            if p.endpoint != *endpoint {
                p.endpoint = endpoint.clone();
            }
            p.epoch = epoch.to_string();
            p.after = after;
        }
        self.changed.notify_all();
    }

    /// The position once its generation is above `seen`, or after `timeout` whatever it is.
    fn newer_than(&self, seen: u64, timeout: Duration) -> Position {
        let Ok(guard) = self.pos.lock() else {
            return Position::default();
        };
        match self
            .changed
            .wait_timeout_while(guard, timeout, |p| p.generation <= seen)
        {
            Ok((p, _)) => p.clone(),
            Err(_) => Position::default(),
        }
    }
}

/// How the watcher pulls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchOptions {
    /// Poll interval when the relay does not hold pulls.
    pub poll: Duration,
    pub sync: SyncOptions,
}

/// The reconnect wait after `failures` failed attempts: the row backoff, capped at
/// [`RECONNECT_CAP_MS`], with jitter in [50 %, 100 %] so restarted relays are not hit in step.
pub(crate) fn reconnect_delay(opts: &SyncOptions, failures: u32) -> Duration {
    let ms = opts
        .backoff(failures.saturating_sub(1))
        .clamp(1, RECONNECT_CAP_MS);
    Duration::from_millis(rand::thread_rng().gen_range(ms / 2..=ms))
}

/// Run the watcher until `wake` fails (the daemon is gone). `wake` asks the daemon for a pass:
/// mail above the position, a 409 or 401 the pass must handle, or a relay back after failures.
pub(crate) fn watch(
    id: &Identity,
    name: &str,
    shared: &Shared,
    opts: WatchOptions,
    wake: impl Fn() -> bool,
) {
    // The HTTP timeout must outlast the longest hold.
    let timeout = opts.sync.timeout + Duration::from_secs(LONG_POLL_SECS);
    // The hold to ask for: 0 until the relay advertised one (never more than it allows).
    let mut hold: u64 = 0;
    let mut failures: u32 = 0;
    // The last pull was refused (logged once until a pull is served again).
    let mut refused = false;
    let mut pos = loop {
        let p = shared.newer_than(0, PASS_WAIT);
        if p.generation > 0 {
            break p;
        }
    };
    // The client and the endpoint it was built for; rebuilt when `relay set` changed it.
    let mut client: Option<(Endpoint, RelayClient<'_>)> = None;
    loop {
        if client.as_ref().is_none_or(|(e, _)| *e != pos.endpoint) {
            match RelayClient::new(&pos.endpoint, name, &id.host, timeout) {
                Ok(c) => client = Some((pos.endpoint.clone(), c)),
                Err(e) => {
                    // The pass fails on the same CA and stops the daemon; wait for it.
                    daemon_log!("watcher: {e}");
                    client = None;
                    pos = shared.newer_than(pos.generation, PASS_WAIT);
                    continue;
                }
            }
        }
        let Some((_, client)) = client.as_ref() else {
            continue;
        };
        let mut q = format!("after={}&limit=1", pos.after);
        if !pos.epoch.is_empty() {
            q.push_str(&format!("&epoch={}", pos.epoch));
        }
        if hold > 0 {
            q.push_str(&format!("&wait={hold}"));
        }
        let started = Instant::now();
        let answer = client.get_with_header("/v2/relay/items", Some(&q), WAIT_MAX_HEADER);
        let mail = match answer {
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures == 1 {
                    daemon_log!("watcher: pull failed, retrying: {}", hint_ca(e));
                }
                std::thread::sleep(reconnect_delay(&opts.sync, failures));
                pos = shared.newer_than(pos.generation, Duration::ZERO);
                continue;
            }
            Ok((a, header)) => {
                if failures > 0 {
                    failures = 0;
                    daemon_log!("watcher: the relay answers again");
                    // The relay is back: pushes that were backed off can go.
                    if !wake() {
                        return;
                    }
                }
                hold = header
                    .and_then(|h| h.trim().parse::<u64>().ok())
                    .map_or(0, |max| max.min(LONG_POLL_SECS));
                if a.status == 200 {
                    refused = false;
                }
                match a.status {
                    200 => {
                        let first = a.body["items"].get(0);
                        if let Some(id) = first.and_then(|i| i["item_id"].as_str()) {
                            super::trace::mark("wake", id);
                        }
                        first.is_some()
                    }
                    // A new epoch, a lost enrolment: the pass handles both.
                    401 | 409 => true,
                    // Busy or refusing: back off like a failure, without counting as one.
                    _ => {
                        if !refused {
                            daemon_log!(
                                "watcher: the relay refused the pull ({}), retrying",
                                a.error()
                            );
                            refused = true;
                        }
                        std::thread::sleep(reconnect_delay(&opts.sync, 1));
                        false
                    }
                }
            }
        };
        let newer = shared.newer_than(pos.generation, Duration::ZERO);
        if mail && newer.generation == pos.generation {
            if !wake() {
                return;
            }
            pos = shared.newer_than(pos.generation, PASS_WAIT);
            continue;
        }
        pos = newer;
        if !mail && hold > 0 && started.elapsed() < EARLY_EMPTY {
            // A hold cut short (the relay's per-key cap, its shutdown): do not spin on it.
            std::thread::sleep(EARLY_EMPTY);
        }
        if !mail && hold == 0 {
            // Polling: the next look at the interval's end (a pass in between moves the position).
            let rest = opts.poll.saturating_sub(started.elapsed());
            pos = shared.newer_than(pos.generation, rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delay_is_jittered_backoff_capped_at_30_s() {
        let o = SyncOptions {
            backoff_base_ms: 100,
            backoff_cap_ms: 300_000,
            ..SyncOptions::default()
        };
        for _ in 0..200 {
            let first = reconnect_delay(&o, 1).as_millis() as u64;
            assert!((50..=100).contains(&first), "{first}");
            let fourth = reconnect_delay(&o, 4).as_millis() as u64;
            assert!((400..=800).contains(&fourth), "{fourth}");
            let late = reconnect_delay(&o, 40).as_millis() as u64;
            assert!(
                (RECONNECT_CAP_MS / 2..=RECONNECT_CAP_MS).contains(&late),
                "{late}"
            );
        }
    }

    #[test]
    fn a_published_position_releases_a_waiting_watcher() {
        let shared = std::sync::Arc::new(Shared::default());
        let s2 = std::sync::Arc::clone(&shared);
        let waiter = std::thread::spawn(move || s2.newer_than(0, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(50));
        let relay = Endpoint {
            url: "http://r".into(),
            ca: None,
        };
        shared.publish(&relay, "E1", 7);
        let p = waiter.join().unwrap();
        assert_eq!((p.generation, p.epoch.as_str(), p.after), (1, "E1", 7));
        assert_eq!(p.endpoint, relay);
        // Nothing newer: the wait ends at its timeout with the current position.
        let t0 = Instant::now();
        assert_eq!(
            shared.newer_than(1, Duration::from_millis(30)).generation,
            1
        );
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }
}
