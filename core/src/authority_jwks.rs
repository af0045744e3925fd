//! The accounts issuer's key set (JWKS) as the account-token authority holds it (spec §8): keys
//! cached by `kid`; fetched at start, every [`JwksTiming::refresh_every`] (10 minutes), and when
//! a token names an unknown `kid` (at most once per [`JwksTiming::unknown_kid_every`], a minute);
//! each fetch replaces the whole set, so a key that leaves the issuer's set stops verifying at
//! once. A failed fetch keeps the cached set until [`JwksTiming::cache_life`] (1 hour) after the
//! last good one; then no key verifies and new enrolments fail closed.
//!
//! Lookups never wait for the network (the authority answers on the request task); fetching is
//! the refresher's ([`Jwks::run`]), through a [`JwksSource`] the server supplies (relay-core
//! links no HTTP client). An enrolment whose token names a `kid` the set lacks may first wait
//! for the fetch it asks for ([`Jwks::fetch_now`]), at most [`FETCH_WAIT`], when that fetch is
//! under way or allowed now: so a key the issuer has just rotated in verifies on the first try,
//! and while fetches are rate-limited nobody waits for nothing.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::authority_jwt::PublicJwk;

/// The largest key-set document read.
pub const MAX_JWKS_BYTES: u64 = 256 * 1024;
/// Most keys kept from one set (an issuer publishes a few: current, next, previous).
const MAX_KEYS: usize = 64;
/// The longest an enrolment waits for a key-set fetch its unknown `kid` asked for.
pub(crate) const FETCH_WAIT: Duration = Duration::from_secs(5);

/// Where the key set comes from: the issuer's JWKS URL, fetched by the server's HTTPS client.
pub trait JwksSource: Send + Sync + 'static {
    /// The key-set document (at most [`MAX_JWKS_BYTES`]). Blocking: run on a blocking thread.
    ///
    /// # Errors
    /// The issuer cannot be reached or answers no document (the text is logged).
    fn fetch(&self) -> Result<Vec<u8>, String>;
}

/// The key set's clock (spec §8 values by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JwksTiming {
    /// How long a fetched set verifies without a newer good fetch.
    pub cache_life: Duration,
    /// How often the set is fetched again.
    pub refresh_every: Duration,
    /// Least time between two fetches asked for by unknown `kid`s (or by a failed fetch).
    pub unknown_kid_every: Duration,
}

impl Default for JwksTiming {
    fn default() -> Self {
        JwksTiming {
            cache_life: Duration::from_secs(3600),
            refresh_every: Duration::from_secs(600),
            unknown_kid_every: Duration::from_secs(60),
        }
    }
}

impl JwksTiming {
    /// # Errors
    /// The three are not `unknown_kid_every <= refresh_every <= cache_life`, or one is zero.
    pub fn check(&self) -> Result<(), String> {
        if self.unknown_kid_every.is_zero()
            || self.unknown_kid_every > self.refresh_every
            || self.refresh_every > self.cache_life
        {
            return Err("token key set timing: need 0 < --token-jwks-retry <= \
                 --token-jwks-refresh <= --token-jwks-cache-life"
                .into());
        }
        Ok(())
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The key of that `kid`.
    Key(PublicJwk),
    /// The set holds no such `kid` (a fetch is asked for).
    UnknownKid,
    /// No set is in force: never fetched, or its cache life is over (a fetch is asked for).
    NoKeys,
}

struct Cached {
    keys: HashMap<String, PublicJwk>,
    fetched_at: Instant,
}

/// The cached key set and its refresher's wake-up.
pub struct Jwks {
    timing: JwksTiming,
    cached: RwLock<Option<Cached>>,
    /// A lookup asked for a fetch since the last one began.
    want: AtomicBool,
    wanted: Notify,
    /// When the last fetch began (`None`: none yet) and whether it is still running.
    attempt: Mutex<(Option<Instant>, bool)>,
    /// Counts finished fetches (good or failed): what an enrolment waiting for one watches.
    finished: watch::Sender<u64>,
}

impl Jwks {
    /// An empty set (nothing verifies until the first fetch) with this timing.
    pub fn new(timing: JwksTiming) -> Arc<Jwks> {
        Arc::new(Jwks {
            timing,
            cached: RwLock::new(None),
            want: AtomicBool::new(false),
            wanted: Notify::new(),
            attempt: Mutex::new((None, false)),
            finished: watch::Sender::new(0),
        })
    }

    /// The wait for a fetch, at most [`FETCH_WAIT`]: for the one under way, else for one asked
    /// for now when allowed (the last began at least `unknown_kid_every` ago); `None` when
    /// fetches are rate-limited now (a fetch is asked for all the same, and comes when allowed).
    /// A fetch under way is awaited without asking for another: the lookup after it asks when
    /// the key is still missing.
    pub(crate) fn fetch_now(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        // Subscribed before the check: a fetch running then is awaited even when it finishes
        // before the wait is first polled.
        let mut seen = self.finished.subscribe();
        let (last, running) = *self.attempt.lock().unwrap_or_else(|p| p.into_inner());
        if !running {
            self.want.store(true, Ordering::SeqCst);
            self.wanted.notify_one();
            if last.is_some_and(|t| t.elapsed() < self.timing.unknown_kid_every) {
                return None;
            }
        }
        Some(async move {
            let _ = tokio::time::timeout(FETCH_WAIT, seen.changed()).await;
        })
    }

    /// The key named `kid`, if the set in force holds it (asking for nothing).
    pub(crate) fn peek(&self, kid: &str) -> Lookup {
        let cached = self.cached.read().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some(c) if c.fetched_at.elapsed() < self.timing.cache_life => c
                .keys
                .get(kid)
                .cloned()
                .map_or(Lookup::UnknownKid, Lookup::Key),
            _ => Lookup::NoKeys,
        }
    }

    /// The key named `kid`, if the set in force holds it; otherwise a fetch is asked for.
    pub(crate) fn lookup(&self, kid: &str) -> Lookup {
        let found = self.peek(kid);
        if !matches!(found, Lookup::Key(_)) {
            self.want.store(true, Ordering::SeqCst);
            self.wanted.notify_one();
        }
        found
    }

    /// Put the set in `doc` (`{"keys": [...]}`) in force, replacing the whole cached set.
    /// Keys this relay cannot use (encryption keys, other types) are skipped and named in the
    /// log. Answers the number of keys in force.
    ///
    /// # Errors
    /// The document is not a key set; the cached set stays.
    pub(crate) fn install(&self, doc: &[u8]) -> Result<usize, String> {
        let v: Value = serde_json::from_slice(doc).map_err(|_| "the JWKS is not JSON")?;
        let list = v
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("the JWKS has no keys array")?;
        let mut keys = HashMap::new();
        let (mut skipped, mut first_why) = (0usize, None);
        for jwk in list {
            match PublicJwk::parse(jwk) {
                Ok((kid, key)) if keys.len() < MAX_KEYS => {
                    keys.insert(kid, key);
                }
                Ok((kid, _)) => {
                    skipped += 1;
                    first_why.get_or_insert(format!("key {kid}: more than {MAX_KEYS} keys"));
                }
                Err(why) => {
                    skipped += 1;
                    first_why.get_or_insert(why);
                }
            }
        }
        if let Some(why) = first_why {
            // One line per fetch, however many keys the document holds.
            tracing::warn!(skipped, "JWKS keys skipped, the first: {why}");
        }
        let n = keys.len();
        *self.cached.write().unwrap_or_else(|p| p.into_inner()) = Some(Cached {
            keys,
            fetched_at: Instant::now(),
        });
        Ok(n)
    }

    /// Fetch once and install; the outcome goes to the log.
    async fn refresh(&self, source: &Arc<dyn JwksSource>, why: &'static str) -> bool {
        *self.attempt.lock().unwrap_or_else(|p| p.into_inner()) = (Some(Instant::now()), true);
        self.want.store(false, Ordering::SeqCst);
        let s = source.clone();
        let doc = tokio::task::spawn_blocking(move || s.fetch())
            .await
            .unwrap_or_else(|e| Err(format!("fetch task failed: {e}")));
        let ok = match doc.and_then(|d| self.install(&d)) {
            Ok(n) => {
                tracing::info!(why, keys = n, "token issuer key set fetched");
                true
            }
            Err(e) => {
                tracing::warn!(
                    why,
                    "token issuer key set not fetched, the cached set stays: {e}"
                );
                false
            }
        };
        self.attempt.lock().unwrap_or_else(|p| p.into_inner()).1 = false;
        self.finished.send_modify(|n| *n += 1);
        ok
    }

    /// Until a lookup asks for a fetch (a wake-up left from before the last fetch began is
    /// not one).
    async fn asked(&self) {
        while !self.want.load(Ordering::SeqCst) {
            self.wanted.notified().await;
        }
    }

    /// Keep the set fresh until `stop`: fetch now, then every `refresh_every`, and when a
    /// lookup asked for it no sooner than `unknown_kid_every` after the last attempt (a failed
    /// attempt is retried at that pace too).
    pub async fn run(
        self: Arc<Self>,
        source: Arc<dyn JwksSource>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut why = "start";
        loop {
            let attempt = Instant::now();
            let ok = self.refresh(&source, why).await;
            let periodic = if ok {
                attempt + self.timing.refresh_every
            } else {
                attempt + self.timing.unknown_kid_every
            };
            let allowed = attempt + self.timing.unknown_kid_every;
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep_until(periodic) => why = "periodic",
                () = self.asked() => {
                    why = "unknown kid or no keys";
                    tokio::select! {
                        _ = stop.changed() => return,
                        () = tokio::time::sleep_until(allowed) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use serde_json::json;

    fn jwk(kid: &str, byte: u8) -> Value {
        json!({"kty":"OKP","crv":"Ed25519","kid": kid, "x": URL_SAFE_NO_PAD.encode([byte; 32])})
    }

    fn set(keys: &[Value]) -> Vec<u8> {
        json!({ "keys": keys }).to_string().into_bytes()
    }

    #[test]
    fn timing_must_be_retry_then_refresh_then_cache_life() {
        assert!(JwksTiming::default().check().is_ok());
        let s = Duration::from_secs;
        for (c, r, u) in [(60, 600, 60), (3600, 600, 700), (3600, 600, 0)] {
            let t = JwksTiming {
                cache_life: s(c),
                refresh_every: s(r),
                unknown_kid_every: s(u),
            };
            assert!(t.check().is_err(), "{t:?}");
        }
    }

    #[test]
    fn a_new_set_replaces_the_old_so_a_removed_key_stops_at_once() {
        let jwks = Jwks::new(JwksTiming::default());
        assert_eq!(jwks.lookup("a"), Lookup::NoKeys);
        jwks.install(&set(&[jwk("a", 1), jwk("b", 2)])).unwrap();
        assert!(matches!(jwks.lookup("a"), Lookup::Key(_)));
        assert_eq!(jwks.install(&set(&[jwk("b", 2)])).unwrap(), 1);
        assert_eq!(jwks.lookup("a"), Lookup::UnknownKid);
        assert!(matches!(jwks.lookup("b"), Lookup::Key(_)));
        // A broken document keeps the set in force.
        assert!(jwks.install(b"<html>").is_err());
        assert!(jwks.install(br#"{"nokeys":1}"#).is_err());
        assert!(matches!(jwks.lookup("b"), Lookup::Key(_)));
    }

    #[test]
    fn unusable_keys_are_skipped_and_the_set_is_bounded() {
        let jwks = Jwks::new(JwksTiming::default());
        let mut keys: Vec<Value> = (0..100).map(|i| jwk(&format!("k{i}"), i)).collect();
        keys.push(json!({"kty":"oct","kid":"h","k":"AAAA"}));
        assert_eq!(jwks.install(&set(&keys)).unwrap(), MAX_KEYS);
        assert_eq!(jwks.lookup("h"), Lookup::UnknownKid);
    }
}
