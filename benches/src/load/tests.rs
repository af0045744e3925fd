//! The bench against a real relay (the `mbx-relay` library's `run_serve`, default limits, a
//! temporary store): every item accepted with a valid accept statement and drained exactly once.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use clap::Parser;
use mbx_relay::serve::args::ServeArgs;

use super::{measure, BenchArgs};

#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    args: ServeArgs,
}

#[derive(Parser)]
struct Bench {
    #[command(flatten)]
    args: BenchArgs,
}

/// Start a relay with default limits on a free port in a background thread; its base URL. The
/// thread ends with the test process (the relay stops on a signal only).
fn start_relay(dir: &std::path::Path) -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let serve = Serve::parse_from([
        "serve",
        "--listen",
        &listen,
        "--store-dir",
        dir.to_str().unwrap(),
    ]);
    let config = serve.args.into_config();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let _ = rt.block_on(mbx_relay::serve::run_serve(config));
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "relay did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    format!("http://{listen}")
}

#[test]
fn bench_pushes_checks_and_drains_against_a_real_relay() {
    let dir = tempfile::tempdir().unwrap();
    let url = start_relay(&dir.path().join("store"));
    // Small enough for the default limits (enrolment calls and pushes per minute).
    let bench = Bench::parse_from([
        "bench",
        "--url",
        &url,
        "--senders",
        "1,2",
        "--targets",
        "2",
        "--items",
        "21",
        "--batch",
        "5",
        "--item-bytes",
        "900",
        "--drain",
    ]);
    let report = measure(&bench.args).unwrap();
    assert_eq!(report.points.len(), 2);
    assert!(
        report.item_bytes <= 900 && report.item_bytes > 850,
        "{}",
        report.item_bytes
    );
    for p in &report.points {
        assert!(p.push.errors.is_empty(), "{:?}", p.push.errors);
        assert_eq!(p.push.items, 21);
        // 21 items in batches of 5: 5 requests from one sender, 3 + 2 from two (11 + 10 items).
        assert_eq!(p.push.requests, 5);
        assert!(p.push.items_per_s > 0.0 && p.push.latency_ms.max >= p.push.latency_ms.p50);
        let d = p.drain.as_ref().unwrap();
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        assert_eq!(d.items, 21);
    }
}

#[test]
fn batch_over_the_relays_max_batch_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = start_relay(&dir.path().join("store"));
    let max = relay_core::defaults::MAX_BATCH;
    let over = (max + 1).to_string();
    let bench = Bench::parse_from(["bench", "--url", &url, "--batch", &over, "--items", "1"]);
    let err = measure(&bench.args).err().unwrap();
    assert!(err.msg.contains(&format!("max_batch {max}")), "{}", err.msg);
}
