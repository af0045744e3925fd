//! docs/protocol.md §7 defaults that `info` does not show: enrolment calls 30 per address per
//! minute, pushes 120 per sender per minute, hosts per name 16, open challenges 10,000.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use serde_json::json;

fn default_enrolment_rate_is_30_per_minute(backend: Backend) {
    let relay = backend.start(&[]);
    for i in 0..30 {
        Host::new(&format!("r{i}")).challenge(&relay).ok();
    }
    Host::new("r30").challenge(&relay).assert_some_error(429);
}

fn default_push_rate_is_120_per_minute(backend: Backend) {
    let relay = backend.start(&[]);
    let s = Host::enrolled(&relay, "pr-s");
    let a = Host::enrolled(&relay, "pr-a");
    for i in 0..120 {
        let r = s.push(&relay, &[]);
        assert_eq!(r.status, 200, "push {i}: {}", r.text());
    }
    assert_rejected(&s.push_one(&relay, &envelope_item(&s, &[&a])), "rate");
    // Per sender: the target may still push.
    assert_eq!(
        a.push_one(&relay, &envelope_item(&a, &[&s]))["status"],
        json!("accepted")
    );
}

fn default_hosts_per_name_is_16(backend: Backend) {
    let relay = backend.start(&[
        "--enrol-per-minute",
        "1000",
        "--enrol-per-minute-v4-24",
        "1000",
        "--enrol-per-minute-v6-48",
        "1000",
    ]);
    let first = Host::enrolled(&relay, "common");
    for _ in 1..16 {
        Host::enrolled(&relay, "common");
    }
    // 16 share it: a v1 hop by that name still works.
    first
        .call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .ok();
    // A 17th enrolment is never refused, but the name is now crowded for v1 lookups.
    Host::enrolled(&relay, "common");
    first
        .call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .assert_error(401, "bad relay hop");
    first.pull(&relay, "").ok();
}

fn default_open_challenge_cap_is_10000(backend: Backend) {
    let relay = backend.start(&[
        "--enrol-per-minute",
        "100000",
        "--enrol-per-minute-v4-24",
        "100000",
        "--enrol-per-minute-v6-48",
        "100000",
    ]);
    let addr = relay.addr();
    // Ten threads open 1,000 challenges each, then one more is refused.
    std::thread::scope(|sc| {
        for t in 0..10 {
            sc.spawn(move || {
                for i in 0..1000 {
                    let body = json!({"host": format!("h{t}-{i}"), "pubkey": random_pubkey()});
                    let r = send(
                        addr,
                        "POST",
                        "/v1/relay/challenge",
                        &[],
                        body.to_string().as_bytes(),
                    );
                    assert_eq!(r.status, 200, "challenge {t}/{i}: {}", r.text());
                }
            });
        }
    });
    Host::new("one-more")
        .challenge(&relay)
        .assert_some_error(503);
}

fn default_max_targets_is_64_inclusive(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "mt-s");
    let targets: Vec<Host> = (0..64)
        .map(|i| Host::enrolled(&relay, &format!("mt-{i}")))
        .collect();
    let refs: Vec<&Host> = targets.iter().collect();
    let r = s.push_one(&relay, &envelope_item(&s, &refs));
    assert_eq!(r["status"], json!("accepted"), "{r}");
    assert_eq!(r["targets"].as_array().unwrap().len(), 64);
    let mut it = envelope_item(&s, &refs);
    let extra = it["targets"][0].clone();
    it["targets"].as_array_mut().unwrap().push(extra);
    assert_rejected(&s.push_one(&relay, &it), "bad targets");
}

fn default_pull_page_stops_at_about_8_mib(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "pb-s");
    let a = Host::enrolled(&relay, "pb-a");
    for _ in 0..20 {
        let r = s.push_one(&relay, &envelope_item_sized(&s, &[&a], 524_288));
        assert_eq!(r["status"], json!("accepted"));
    }
    let p = a.pull(&relay, "?after=0").ok();
    let n = p["items"].as_array().unwrap().len();
    // 16 items of 512 KiB are 8 MiB of wire bytes.
    assert!(
        (10..=17).contains(&n),
        "a page of about 8 MiB: {n} items of 512 KiB"
    );
    assert_eq!(p["more"], json!(true));
    assert_eq!(a.pull_all(&relay, 0).len(), 20);
}

backend_tests! {
    ;
    postgres ignored:
    default_enrolment_rate_is_30_per_minute,
    default_push_rate_is_120_per_minute,
    default_hosts_per_name_is_16,
    default_open_challenge_cap_is_10000,
    default_max_targets_is_64_inclusive,
    default_pull_page_stops_at_about_8_mib,
}
