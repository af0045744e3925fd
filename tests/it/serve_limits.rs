//! Limits that cannot contradict each other (issue 14), against the real `mbx-relay serve`: a
//! limit of 0 that would switch a protection off, and a `--max-item-bytes` whose base64 form
//! cannot fit the request body cap, are refused at start-up with an error naming the flag and
//! exit code 2, before the store is opened (no store directory appears).
use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;
use mbx_relay::http::body::{MAX_BODY, MAX_ITEM_BYTES_IN_BODY};
use serde_json::json;

/// Run `serve` on a free loopback port over `store` with these extra flags, the
/// environment's `MBX_RELAY_*` variables removed; the process must end by itself (a refusal).
fn serve_refused(store: &Path, args: &[&str]) -> Output {
    let store = store.to_str().expect("utf-8 path");
    let all = [
        &["serve", "--listen", "127.0.0.1:0", "--store-dir", store][..],
        args,
    ]
    .concat();
    relay_exits(&all, &[])
}

/// Every flag whose 0 would disable a protection (a cap, a rate window, a timeout, a sweep or
/// heartbeat period): why 0 is refused is in the comment of each group.
const ZERO_REFUSED: &[&str] = &[
    // Item, batch, target and pull bounds: 0 would refuse every item, or (pull) serve nothing.
    "--max-item-bytes",
    "--max-batch",
    "--max-targets",
    "--max-pull",
    "--max-pull-bytes",
    // Rate windows: 0 would lock every sender or enrolling client out for good.
    "--pushes-per-minute",
    "--enrol-per-minute",
    "--enrol-per-minute-v4-24",
    "--enrol-per-minute-v6-48",
    "--public-per-minute",
    "--auth-failures-per-minute",
    "--tls-handshakes-per-minute",
    // Retention 0: every item would expire as it is stored.
    "--retention",
    // Quotas and caps: 0 refuses every item, enrolment, challenge or connection.
    "--max-queue-items",
    "--max-queue-bytes",
    "--max-sender-items",
    "--max-sender-bytes",
    "--max-account-items",
    "--max-account-bytes",
    "--max-enrolments",
    "--max-challenges",
    "--max-per-name",
    "--max-connections",
    "--max-connections-per-address",
    "--max-body-bytes-per-address",
    "--max-body-bytes-per-key",
    // A minimum body rate of 0 would let a stalled body hold its memory to the body timeout.
    "--body-min-rate",
    // Periods: a zero sweep interval or staleness bound would spin or rotate on every start.
    "--sweep-interval",
    "--heartbeat-stale",
    // Timeouts: 0 would cut every client off at once.
    "--header-timeout",
    "--body-timeout",
    "--idle-timeout",
    "--body-first-byte-timeout",
    // A stream lifetime of 0 would end every event stream as it starts.
    "--max-stream-lifetime",
    // A zero budget wait would refuse every body arriving while the budget is busy.
    "--body-budget-wait",
];

/// Check a refusal: exit code 2, the flag named on stderr, no store directory created.
fn assert_refused(out: &Output, store: &Path, flag: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
    assert!(stderr.contains(flag), "{flag} is named: {stderr}");
    assert!(
        !store.exists(),
        "{flag}: the store was opened before the refusal"
    );
}

#[test]
fn a_zero_that_disables_a_protection_is_refused_at_start_up_naming_the_flag() {
    let work = tempfile::tempdir().unwrap();
    for (i, flag) in ZERO_REFUSED.iter().enumerate() {
        let store = work.path().join(format!("store-{i}"));
        let out = serve_refused(&store, &[flag, "0"]);
        assert_refused(&out, &store, flag);
    }
    // The same through the environment.
    let store = work.path().join("store-env");
    let out = {
        let mut cmd = Command::new(relay_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--store-dir"])
            .arg(&store)
            .env("MBX_RELAY_MAX_BATCH", "0")
            .stdin(Stdio::null());
        cmd.output().expect("run serve")
    };
    assert_refused(&out, &store, "--max-batch");
    // A non-zero idle period under a day is refused too (last seen has day resolution).
    let store = work.path().join("store-idle");
    let out = serve_refused(&store, &["--enrolment-idle", "1h"]);
    assert_refused(&out, &store, "--enrolment-idle");
}

/// `--enrolment-idle 0` (never) and `--log-retention 0` (no age bound, the count cap stays)
/// switch nothing off: the relay starts.
#[test]
fn zeros_that_mean_never_are_accepted() {
    let relay = Relay::start(&["--enrolment-idle", "0", "--log-retention", "0"]);
    assert_eq!(relay.get("/health").status, 200);
}

/// The largest accepted `--max-item-bytes` is one whose item really fits a push body: an item
/// of exactly that size is accepted over HTTP; one byte more is refused at start-up.
#[test]
fn max_item_bytes_must_fit_the_request_body_cap_in_base64() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let over = (MAX_ITEM_BYTES_IN_BODY + 1).to_string();
    let out = serve_refused(&store, &["--max-item-bytes", &over]);
    assert_refused(&out, &store, "--max-item-bytes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&MAX_ITEM_BYTES_IN_BODY.to_string()),
        "says the largest allowed: {stderr}"
    );

    let most = MAX_ITEM_BYTES_IN_BODY.to_string();
    let relay = Relay::start(&["--max-item-bytes", &most]);
    let s = Host::enrolled(&relay, "big-s");
    let t = Host::enrolled(&relay, "big-t");
    let item = envelope_item_sized(&s, &[&t], MAX_ITEM_BYTES_IN_BODY as usize);
    let body = serde_json::to_vec(&json!({ "items": [item] })).unwrap();
    assert!(body.len() <= MAX_BODY, "{} bytes", body.len());
    let r = s.push_one(&relay, &item);
    assert_eq!(r["status"], json!("accepted"), "{r}");
}
