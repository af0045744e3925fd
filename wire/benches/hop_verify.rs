//! Hop verification CPU, before and after the projective R check (`strict_stream`), side by
//! side in one process: ed25519-dalek's strict stream verifier (what the relay ran before:
//! decompress R, check small orders, recompute R', compress it, compare bytes) against
//! `strict_stream::verify_stream_with` on a memoised `HopKey`, over the same hop payload.
//! Alternating rounds; medians of µs per verify.
//!
//! Run: `cargo bench -p relay-wire --bench hop_verify`. MBX_HOPV_ROUNDS (default 5),
//! MBX_HOPV_N (verifies per round of the small body, default 20000; a tenth for the large one).
//! Thread CPU time from /proc/thread-self/stat (10 ms ticks), so rounds are long.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark: a panic aborts the measurement, nothing to recover"
)]

use std::hint::black_box;

use curve25519_dalek::edwards::CompressedEdwardsY;
use ed25519_dalek::{Signature, VerifyingKey};
use relay_wire::hop::{hop_payload, sign_hop};
use relay_wire::keys::{unb64, SigningKey};
use relay_wire::strict_stream::{verify_stream_with, HopKey};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The verification the relay ran before `strict_stream` (its former `verify_stream_with`).
fn before(key: &VerifyingKey, sig_b64: &str, payload: &[u8]) -> bool {
    let Some(sig_bytes) = unb64(sig_b64) else {
        return false;
    };
    let Ok(sig_arr) = <[u8; 64]>::try_from(sig_bytes.as_slice()) else {
        return false;
    };
    let mut r = [0u8; 32];
    r.copy_from_slice(&sig_arr[..32]);
    let r_strict = CompressedEdwardsY(r)
        .decompress()
        .is_some_and(|p| !p.is_small_order());
    if !r_strict || key.is_weak() {
        return false;
    }
    let Ok(mut verifier) = key.verify_stream(&Signature::from_bytes(&sig_arr)) else {
        return false;
    };
    verifier.update(payload);
    verifier.finalize_and_verify().is_ok()
}

/// This thread's CPU time (utime + stime of /proc/thread-self/stat), in µs: on a shared
/// machine the wall clock counts other processes' time slices too.
fn thread_cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    let after = stat.rsplit(')').next().expect("stat fields");
    let f: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().expect("a tick count"))
        .collect();
    (f[0] + f[1]) * 10_000.0 // USER_HZ 100
}

fn us_per(n: usize, mut f: impl FnMut() -> bool) -> f64 {
    let t = thread_cpu_us();
    for _ in 0..n {
        assert!(black_box(f()));
    }
    (thread_cpu_us() - t) / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds = env_usize("MBX_HOPV_ROUNDS", 5);
    let n = env_usize("MBX_HOPV_N", 20_000);
    let key = SigningKey::from_seed(&[3u8; 32]);
    let ts = "1764633600000";
    for (body_len, n) in [(1_400usize, n), (140_000, n / 10)] {
        let body = format!("{{\"items\":\"{}\"}}", "x".repeat(body_len));
        let sig = sign_hop(&key, "POST", "/v2/relay/items", ts, &body);
        let payload = hop_payload("POST", "/v2/relay/items", ts, &body).into_bytes();
        let old_key = VerifyingKey::from_bytes(&key.public()).expect("a point");
        let new_key = HopKey::decode(&key.public()).expect("a point");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            a.push(us_per(n, || before(&old_key, &sig, &payload)));
            b.push(us_per(n, || {
                verify_stream_with(&new_key, &sig, |u| u(&payload))
            }));
        }
        println!(
            "body {body_len} B: before {:.2} µs, after {:.2} µs per verify (thread CPU, medians of {rounds} alternating rounds of {n})",
            median(a),
            median(b)
        );
    }
}
