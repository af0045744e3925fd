//! The timed drain phase: every target, as the receiver, pulls its queue page by page
//! (`GET /v2/relay/items`) and acks each page (`POST /v2/relay/ack`), all targets at once.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::client::{Conn, Host};
use super::stats::{micros, process_cpu, Errors};

/// Consecutive failed calls after which a receiver gives up.
const MAX_CONSECUTIVE_ERRORS: u32 = 3;

/// What the drain measured.
pub(super) struct Outcome {
    pub items: u64,
    /// Decoded wire bytes drained.
    pub bytes: u64,
    pub pages: u64,
    pub timed: Duration,
    /// Latency of each page's pull + ack, in microseconds.
    pub lat_us: Vec<u32>,
    pub errors: Errors,
    /// CPU this process used inside the timed window.
    pub cpu: Duration,
}

#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    items: Vec<PageItem<'a>>,
    last_seq: u64,
    more: bool,
}

#[derive(Deserialize)]
struct PageItem<'a> {
    #[serde(borrow)]
    wire_b64: Cow<'a, str>,
}

/// Decoded length of standard padded base64 text (no decoding needed to count bytes).
fn b64_len(s: &str) -> u64 {
    let pad = s.bytes().rev().take_while(|b| *b == b'=').count();
    (s.len() / 4 * 3).saturating_sub(pad) as u64
}

/// One receiver's drain.
struct One {
    items: u64,
    bytes: u64,
    pages: u64,
    lat: Vec<u32>,
    errors: Errors,
}

/// Pull and ack `host`'s queue until the relay says there is no more (bounded by `expected`).
fn drain_one(conn: &Conn, host: &Host, epoch: &str, limit: usize, expected: u64) -> One {
    let mut one = One {
        items: 0,
        bytes: 0,
        pages: 0,
        lat: Vec::new(),
        errors: Errors::default(),
    };
    let mut after = 0u64;
    let mut failures = 0u32;
    // Every successful page holds at least one item, so this bounds the loop.
    let max_calls = expected + u64::from(MAX_CONSECUTIVE_ERRORS) + 2;
    for _ in 0..max_calls {
        let t = Instant::now();
        let path = format!("/v2/relay/items?after={after}&limit={limit}&epoch={epoch}");
        let page = match conn.get(&path, Some(host)) {
            Ok(r) if r.status == 200 => r,
            Ok(r) => {
                one.errors.add(&format!("pull: {}", r.error_kind()), 1);
                failures += 1;
                if failures >= MAX_CONSECUTIVE_ERRORS {
                    break;
                } else {
                    continue;
                }
            }
            Err(e) => {
                one.errors.add(&format!("pull: {e}"), 1);
                failures += 1;
                if failures >= MAX_CONSECUTIVE_ERRORS {
                    break;
                } else {
                    continue;
                }
            }
        };
        let Ok(p) = serde_json::from_str::<Page>(&page.body) else {
            one.errors.add("pull: bad page", 1);
            break;
        };
        if p.items.is_empty() {
            break;
        }
        let body = format!("{{\"epoch\":\"{epoch}\",\"through\":{}}}", p.last_seq);
        match conn.post("/v2/relay/ack", &body, Some(host)) {
            Ok(r) if r.status == 200 => failures = 0,
            Ok(r) => {
                one.errors.add(&format!("ack: {}", r.error_kind()), 1);
                failures += 1;
            }
            Err(e) => {
                one.errors.add(&format!("ack: {e}"), 1);
                failures += 1;
            }
        }
        if failures > 0 {
            if failures >= MAX_CONSECUTIVE_ERRORS {
                break;
            }
            continue;
        }
        one.lat.push(micros(t.elapsed()));
        one.pages += 1;
        one.items += p.items.len() as u64;
        one.bytes += p.items.iter().map(|i| b64_len(&i.wire_b64)).sum::<u64>();
        after = p.last_seq;
        if !p.more {
            break;
        }
    }
    if one.items < expected {
        one.errors
            .add("drain: accepted items missing", expected - one.items);
    } else if one.items > expected {
        one.errors
            .add("drain: items this run did not push", one.items - expected);
    }
    one
}

/// Receivers draining at once: a thread each up to this many (the growth bench drains
/// 100,000 queues; a thread per queue would be 100,000 threads).
const MAX_DRAINERS: usize = 256;

/// Drain every receiver, up to [`MAX_DRAINERS`] at once; `expected[i]` is what receiver `i` was
/// accepted.
pub(super) fn run(
    like: &Conn,
    receivers: &[&Host],
    epoch: &str,
    limit: usize,
    expected: &[u64],
) -> Outcome {
    let workers = receivers.len().clamp(1, MAX_DRAINERS);
    let barrier = Barrier::new(workers + 1);
    let next = AtomicUsize::new(0);
    // Fresh connections: the relay may have been restarted since the push phase.
    let conns: Vec<Conn> = (0..workers).map(|_| like.fresh()).collect();
    let (timed, cpu, ones) = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter()
            .map(|conn| {
                let (barrier, next) = (&barrier, &next);
                s.spawn(move || {
                    barrier.wait();
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let (Some(host), Some(exp)) = (receivers.get(i), expected.get(i)) else {
                            return mine;
                        };
                        mine.push(drain_one(conn, host, epoch, limit, *exp));
                    }
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let cpu0 = process_cpu();
        let ones: Vec<Option<Vec<One>>> = handles.into_iter().map(|h| h.join().ok()).collect();
        (t0.elapsed(), process_cpu().saturating_sub(cpu0), ones)
    });
    let mut out = Outcome {
        items: 0,
        bytes: 0,
        pages: 0,
        timed,
        lat_us: Vec::new(),
        errors: Errors::default(),
        cpu,
    };
    for worker in ones {
        let Some(worker) = worker else {
            out.errors.add("receiver panicked", 1);
            continue;
        };
        for o in worker {
            out.items += o.items;
            out.bytes += o.bytes;
            out.pages += o.pages;
            out.lat_us.extend(o.lat);
            out.errors.merge(&o.errors);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decoded_length() {
        assert_eq!(b64_len(""), 0);
        assert_eq!(b64_len("YQ=="), 1);
        assert_eq!(b64_len("YWI="), 2);
        assert_eq!(b64_len("YWJj"), 3);
    }

    #[test]
    fn pages_parse_without_copying_the_wire() {
        let p: Page = serde_json::from_str(
            r#"{"epoch":"e","head_seq":9,"items":[{"seq":9,"kind":"envelope","item_id":"x","sender_pubkey":"k","wire_b64":"YWJj"}],"last_seq":9,"more":false}"#,
        )
        .unwrap();
        assert_eq!((p.items.len(), p.last_seq, p.more), (1, 9, false));
        assert!(matches!(p.items[0].wire_b64, Cow::Borrowed(_)));
    }
}
