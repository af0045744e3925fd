//! `/metrics` is private and its labels are closed, against real `mbx-relay serve` processes:
//! served only on `--metrics-listen` (the public port answers 404), stopped with the relay;
//! rejection reasons are labelled by their fixed text only, so a v1 push naming a made-up host
//! adds no label; live enrolments are reported against the cap, with one warning in the relay's
//! log when they reach 90 % of it and one when they fall back under.

use crate::common;

use std::time::Duration;

use common::{sealed_envelope, ulid, Host, Relay, RelayOpts, Response, GENEROUS};
use serde_json::{json, Value};

const METRICS: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];

fn start(extra: &[&str]) -> Relay {
    let mut args = GENEROUS.to_vec();
    args.extend(METRICS);
    args.extend_from_slice(extra);
    Relay::start(&args)
}

/// The value of the sample line starting with `prefix` (`None` when absent).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(prefix)
            .filter(|v| v.starts_with(' '))
            .map(|v| v.trim().parse().expect("a number"))
    })
}

/// Every `reason` label of rejected items.
fn rejection_labels(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("mbx_relay_items_total{status=\"rejected\",reason=\""))
        .map(|l| l.split("\"}").next().unwrap_or("").to_owned())
        .collect()
}

fn v1_push(relay: &Relay, from: &Host, to_hosts: &[&str]) -> Response {
    let to: Vec<String> = to_hosts.iter().map(|h| format!("agent@{h}")).collect();
    let env = sealed_envelope(&ulid(), &format!("agent@{}", from.name), &to);
    let body = json!({ "envelopes": [env] }).to_string();
    from.call_v1(relay, "POST", "/v1/relay/messages", body.as_bytes())
}

#[test]
fn metrics_are_served_on_the_metrics_listener_only() {
    let relay = start(&[]);
    let public = relay.get("/metrics");
    public.assert_error(404, "not found");
    let m = relay.metrics();
    assert_eq!(m.status, 200, "{}", m.text());
    assert!(m
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain")));
    assert_eq!(m.header("cache-control"), Some("no-store"));
    assert!(m.text().contains("mbx_relay_items_total"));
    // The metrics listener serves nothing else.
    let at = relay.metrics_addr();
    for (method, path) in [
        ("GET", "/health"),
        ("GET", "/v2/relay/info"),
        ("POST", "/metrics"),
        ("GET", "/metrics/"),
    ] {
        let r = common::send(at, method, path, &[], b"");
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        assert_eq!(r.json(), json!({ "error": "not found" }));
    }
}

#[test]
fn metrics_are_off_by_default_and_the_variable_turns_them_on() {
    let relay = Relay::start(&[]);
    relay.get("/metrics").assert_error(404, "not found");
    assert!(relay.get("/health").status == 200);
    let relay = Relay::launch(RelayOpts::default().env("MBX_RELAY_METRICS_LISTEN", "127.0.0.1:0"))
        .expect("relay starts");
    assert_eq!(relay.metrics().status, 200);
    relay.get("/metrics").assert_error(404, "not found");
}

#[test]
fn the_metrics_listener_stops_with_the_relay() {
    let mut relay = start(&[]);
    let at = relay.metrics_addr();
    assert_eq!(relay.metrics().status, 200);
    // A public answer first: the relay handles SIGTERM once its public accept loop runs.
    assert_eq!(relay.get("/health").status, 200);
    assert_eq!(relay.terminate(Duration::from_secs(20)), Some(0));
    assert!(
        std::net::TcpStream::connect_timeout(&at, Duration::from_secs(2)).is_err(),
        "metrics port still open after the relay exited"
    );
}

#[test]
fn a_v1_push_naming_a_made_up_host_never_adds_a_label() {
    let relay = start(&[]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    // One refusal of each v1 kind that names a host, so each fixed label exists once.
    let r = v1_push(&relay, &alice, &["made-up-host-1"]);
    assert_eq!(
        r.json()["error"],
        json!("recipient host not enrolled: made-up-host-1")
    );
    let before = rejection_labels(&relay.metrics().text());
    assert_eq!(before, ["recipient host not enrolled"], "{before:?}");
    // Many more made-up hosts, with text that would break or bloat a label.
    for i in 2..40 {
        let host = format!("made-up-host-{i}-\"}}x{}", "y".repeat(i * 5));
        let r = v1_push(&relay, &alice, &[&host]);
        assert_eq!(r.status, 413, "{}", r.text());
        assert_eq!(
            r.json()["error"],
            Value::from(format!("recipient host not enrolled: {host}"))
        );
    }
    // And a v2 refusal with a free part: labelled by its class.
    let mut bad = common::envelope_item(&alice, &[&bob]);
    let id = bad["item_id"].as_str().unwrap().to_owned();
    let wire = serde_json::to_vec(&json!({"v": 3, "id": id, "made-up": "made-up-host-x"})).unwrap();
    bad["targets"][0]["wire_b64"] = Value::from(relay_wire::keys::b64(&wire));
    let res = alice.push_one(&relay, &bad);
    assert!(
        res["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("rejected:bad envelope: ")),
        "{res}"
    );
    let text = relay.metrics().text();
    assert!(!text.contains("made-up"), "client text in a label:\n{text}");
    let mut after = rejection_labels(&text);
    after.sort();
    assert_eq!(after, ["bad envelope", "recipient host not enrolled"]);
    assert_eq!(
        sample(
            &text,
            "mbx_relay_items_total{status=\"rejected\",reason=\"recipient host not enrolled\"}"
        ),
        Some(39.0)
    );
}

#[test]
fn live_enrolments_are_reported_against_the_cap() {
    let relay = start(&["--max-enrolments", "50"]);
    for name in ["a1", "a2", "a3"] {
        Host::enrolled(&relay, name);
    }
    let text = relay.metrics().text();
    assert_eq!(
        sample(&text, "mbx_relay_enrolments_live"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mbx_relay_enrolments_max"),
        Some(50.0),
        "{text}"
    );
}

/// Lines of the relay's log that carry the cap warnings: (reached, back under).
fn cap_warnings(relay: &Relay) -> (usize, usize) {
    let log = relay.stderr_log();
    let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    (
        count("live enrolments reached 90% of --max-enrolments"),
        count("live enrolments back under 90% of --max-enrolments"),
    )
}

#[test]
fn crossing_ninety_percent_of_the_enrolment_cap_warns_once_each_way() {
    let relay = start(&["--max-enrolments", "10"]);
    let hosts: Vec<Host> = (0..8)
        .map(|i| Host::enrolled(&relay, &format!("h{i}")))
        .collect();
    assert_eq!(cap_warnings(&relay), (0, 0), "8 of 10 is under 90 %");
    Host::enrolled(&relay, "h8");
    assert_eq!(cap_warnings(&relay), (1, 0), "9 of 10 reaches 90 %");
    Host::enrolled(&relay, "h9");
    let full = Host::new("h10");
    assert_eq!(full.try_enrol(&relay, "").status, 503, "at the cap");
    assert_eq!(relay.metrics().status, 200);
    assert_eq!(cap_warnings(&relay), (1, 0), "one warning while above");
    // Rotating a key onto a key enrolled already frees one live enrolment each time.
    let rotate_onto = |old: &Host, new: &Host| {
        let body = common::rotation(&old.name, &old.key, &new.key, None, None);
        let r = relay.post_json("/v2/relay/rotate", &body);
        assert_eq!(r.status, 200, "rotate: {}", r.text());
    };
    rotate_onto(&hosts[0], &hosts[1]);
    assert_eq!(cap_warnings(&relay), (1, 0), "9 of 10 is still at 90 %");
    rotate_onto(&hosts[2], &hosts[3]);
    assert_eq!(cap_warnings(&relay), (1, 1), "8 of 10 is back under");
    let text = relay.metrics().text();
    assert_eq!(
        sample(&text, "mbx_relay_enrolments_live"),
        Some(8.0),
        "{text}"
    );
    assert_eq!(cap_warnings(&relay), (1, 1));
    // The warnings carry figures, never keys.
    let log = relay.stderr_log();
    let warning = log
        .lines()
        .find(|l| l.contains("reached 90%"))
        .expect("warning line");
    println!("{warning}");
    assert!(warning.contains("live=9 max=10"), "{warning}");
    let key_b64 = hosts[0].key.public_b64();
    assert!(!warning.contains(&key_b64), "{warning}");
}
