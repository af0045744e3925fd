//! The timed push phase. Work goes in rounds bounded by a memory budget: build the round's
//! payloads and sign their hops (untimed, all senders in parallel), push them from every sender
//! at once behind a barrier (timed: HTTP, reading the answer, and signing again any hop that has
//! grown older than [`PRESIGN_MAX_AGE_MS`]), then check the answers (untimed). Signing a
//! 100-item body hashes it twice; done in the window it was most of the generator's CPU there,
//! which the relay under test then could not use.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::client::{Conn, Hop, Host, Resp};
use super::hosts::RelayInfo;
use super::payload::{build_batches, Batch, Item, Target};
use super::stats::{micros, process_cpu};
use super::verify::{check_answer, Tally};

/// Where pushes go.
const PUSH_PATH: &str = "/v2/relay/items";
/// A hop signed while building is used only this fresh; older ones are signed again at send
/// time (the relay accepts five minutes of skew either way).
const PRESIGN_MAX_AGE_MS: u64 = 60_000;

/// Memory the payloads and answers of one round may use.
const ROUND_BUDGET_BYTES: usize = 384 * 1024 * 1024;
/// Bytes an answer takes per item (result + accept statement), roughly.
const ANSWER_BYTES_PER_ITEM: usize = 800;

/// What to push in one sweep point.
pub(super) struct Plan<'a> {
    pub info: &'a RelayInfo,
    pub conns: &'a [Conn],
    pub senders: &'a [Host],
    pub targets: &'a [Target],
    pub items: u64,
    /// Items each sender pushed before this plan (its round robin over the targets goes on
    /// from there: the growth bench pushes round after round).
    pub first: u64,
    pub batch: usize,
    pub plain_len: usize,
    pub item_bytes: usize,
}

/// What the push phase measured.
pub(super) struct Outcome {
    pub tally: Tally,
    pub requests: u64,
    /// Sum of the timed windows (payload building and checking excluded).
    pub timed: Duration,
    /// Request latencies in microseconds.
    pub lat_us: Vec<u32>,
    /// CPU this process used inside the timed windows.
    pub cpu: Duration,
}

/// Items sender `i` of `n` pushes out of `total` (as even as possible).
fn share(total: u64, n: usize, i: usize) -> u64 {
    total / n as u64 + u64::from((i as u64) < total % n as u64)
}

/// Items per sender per round, a whole number of batches, within the memory budget.
fn round_items(item_bytes: usize, batch: usize, senders: usize) -> u64 {
    let per_item = item_bytes * 4 / 3 + 200 + ANSWER_BYTES_PER_ITEM;
    let per_sender = ROUND_BUDGET_BYTES / per_item / senders.max(1);
    (per_sender / batch.max(1)).max(1) as u64 * batch as u64
}

type Sent = Vec<(Vec<Item>, Result<Resp, String>)>;
/// A built batch and its hop, signed when it was built.
type Signed = (Batch, Hop);

/// Push every sender's batches at once; returns the window and each sender's answers.
fn timed_round(
    plan: &Plan,
    built: Vec<Vec<Signed>>,
    lat_us: &mut Vec<u32>,
) -> (Duration, Duration, Vec<Sent>) {
    let n = built.len();
    let barrier = Barrier::new(n + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = built
            .into_iter()
            .enumerate()
            .map(|(i, batches)| {
                let (barrier, conn, host) = (&barrier, &plan.conns[i], &plan.senders[i]);
                s.spawn(move || {
                    let mut sent = Vec::with_capacity(batches.len());
                    let mut lat = Vec::with_capacity(batches.len());
                    barrier.wait();
                    for (Batch { body, items }, hop) in batches {
                        let t = Instant::now();
                        let answer = if hop.fresh(PRESIGN_MAX_AGE_MS) {
                            conn.post_with(PUSH_PATH, &body, Some(&hop))
                        } else {
                            conn.post(PUSH_PATH, &body, Some(host))
                        };
                        lat.push(micros(t.elapsed()));
                        drop(body);
                        sent.push((items, answer));
                    }
                    (sent, lat)
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let cpu0 = process_cpu();
        let mut all = Vec::with_capacity(n);
        for h in handles {
            match h.join() {
                Ok((sent, lat)) => {
                    lat_us.extend(lat);
                    all.push(sent);
                }
                Err(_) => all.push(Vec::new()),
            }
        }
        (t0.elapsed(), process_cpu().saturating_sub(cpu0), all)
    })
}

/// Build and sign the round's payloads in parallel (one thread per sender, untimed).
fn build_round(plan: &Plan, done: &[u64], this_round: &[u64]) -> Result<Vec<Vec<Signed>>, String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..done.len())
            .map(|i| {
                let (first, n) = (plan.first + done[i], this_round[i]);
                s.spawn(move || {
                    build_batches(
                        &plan.senders[i],
                        plan.targets,
                        i,
                        first,
                        n,
                        plan.batch,
                        plan.plain_len,
                    )
                    .map(|batches| {
                        let host = &plan.senders[i];
                        batches
                            .into_iter()
                            .map(|b| {
                                let hop = Conn::sign(host, "POST", PUSH_PATH, &b.body);
                                (b, hop)
                            })
                            .collect()
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("payload builder panicked".into()))
            })
            .collect()
    })
}

/// Check every answer of the round, spread over the machine's cores (untimed).
fn check_round(plan: &Plan, sent: Vec<Sent>, tally: &mut Tally) {
    let work: Vec<(usize, Vec<Item>, Result<Resp, String>)> = sent
        .into_iter()
        .enumerate()
        .flat_map(|(i, v)| v.into_iter().map(move |(items, a)| (i, items, a)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(1);
    let chunk = work.len().div_ceil(threads).max(1);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = work
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let mut t = Tally::new(plan.targets.len());
                    for (i, items, answer) in part {
                        check_answer(
                            plan.info,
                            &plan.senders[*i],
                            plan.targets,
                            items,
                            answer,
                            &mut t,
                        );
                    }
                    t
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    let mut t = Tally::new(plan.targets.len());
                    t.errors.add("answer checker panicked", 1);
                    t
                })
            })
            .collect()
    });
    for t in &tallies {
        tally.merge(t);
    }
}

/// Run the push phase of one sweep point.
///
/// # Errors
/// Only when payloads cannot be built; relay failures are counted, not returned.
pub(super) fn run(plan: &Plan) -> Result<Outcome, String> {
    let n = plan.senders.len();
    let totals: Vec<u64> = (0..n).map(|i| share(plan.items, n, i)).collect();
    let per_round = round_items(plan.item_bytes, plan.batch, n);
    let mut done = vec![0u64; n];
    let mut out = Outcome {
        tally: Tally::new(plan.targets.len()),
        requests: 0,
        timed: Duration::ZERO,
        lat_us: Vec::new(),
        cpu: Duration::ZERO,
    };
    // Each round moves every unfinished sender forward by at least one item: bounded.
    while done.iter().zip(&totals).any(|(d, t)| d < t) {
        let this_round: Vec<u64> = done
            .iter()
            .zip(&totals)
            .map(|(d, t)| (t - d).min(per_round))
            .collect();
        let built = build_round(plan, &done, &this_round)?;
        out.requests += built.iter().map(|b| b.len() as u64).sum::<u64>();
        let (window, cpu, sent) = timed_round(plan, built, &mut out.lat_us);
        out.timed += window;
        out.cpu += cpu;
        check_round(plan, sent, &mut out.tally);
        for (d, r) in done.iter_mut().zip(&this_round) {
            *d += r;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_rounds_are_whole_batches() {
        let s: u64 = (0..7).map(|i| share(100, 7, i)).sum();
        assert_eq!(s, 100);
        assert_eq!(share(100, 7, 0), 15);
        assert_eq!(share(100, 7, 6), 14);
        let r = round_items(1024, 100, 8);
        assert_eq!(r % 100, 0);
        assert!(r >= 100);
        assert_eq!(round_items(500_000, 200, 64), 200);
    }
}
