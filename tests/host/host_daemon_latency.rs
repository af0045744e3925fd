//! Delivery latency between two `host run` daemons on a relay that holds pulls (long-poll): from
//! the moment the sender's daemon queued a message (the envelope's `ts`) to the moment the
//! receiver's daemon committed it to its inbox (`received_at`), same machine, same clock.
//!
//! Prints p50/p99/max (run with `--nocapture` to see them). The assertion is deliberately
//! generous so it holds on a loaded 2-core machine; it still fails if the daemons fell back to
//! polling (the default poll interval is 5 s). The figure that counts is the release bench
//! (`cargo bench -p relay-bench --bench daemon_latency`, docs/performance.md).
//! `MBX_LATENCY_N` sets the number of messages (default 60).

use crate::daemon_util;
use crate::host_util;

use std::time::Duration;

use daemon_util::{delivery_latencies, wait_until, Daemon};
use host_util::{pair, RelayProc};
use mbx_host::trace::TRACE_ENV;

#[test]
fn daemons_on_a_long_poll_relay_deliver_in_milliseconds_not_at_the_next_poll_sealed_at_send() {
    let n: usize = std::env::var("MBX_LATENCY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .clamp(10, 2_000);
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (mut a, mut b) = pair(tmp.path(), &relay);
    let trace = tmp.path().join("alpha.trace");
    a.env.push((TRACE_ENV.into(), trace.display().to_string()));
    b.env.push((
        TRACE_ENV.into(),
        tmp.path().join("beta.trace").display().to_string(),
    ));
    a.sync();
    b.sync();
    let _da = Daemon::start(&a, &[]);
    let _db = Daemon::start(&b, &[]);
    // Let both watchers settle into their held pulls.
    std::thread::sleep(Duration::from_millis(500));

    for i in 0..n {
        a.send("beta", "latency", &format!("m{i}"));
        // Spaced so each delivery is measured on its own, not behind a queue.
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        wait_until(Duration::from_secs(60), || b.inbox_ids().len() == n),
        "beta {}",
        b.status()
    );
    // `send` sealed each message before its one commit: the pass that pushed it sealed nothing.
    let marks = std::fs::read_to_string(&trace).unwrap();
    let count = |stage: &str| marks.lines().filter(|l| l.starts_with(stage)).count();
    assert_eq!(
        (count("sealed-at-queue "), count("seal-durable ")),
        (n, 0),
        "{marks}"
    );
    let lat = delivery_latencies(&b);
    let pct = |p: usize| lat[(lat.len() * p / 100).min(lat.len() - 1)];
    let (p50, p99, max) = (pct(50), pct(99), lat[lat.len() - 1]);
    eprintln!(
        "daemon-to-daemon delivery over long-poll, n={n}: p50 {p50} ms, p99 {p99} ms, max {max} ms"
    );
    assert!(
        p50 < 1_000 && p99 < 2_500,
        "p50 {p50} ms p99 {p99} ms: not live delivery"
    );
}
