//! docs/protocol.md §3 "Pull" and "Ack": paging by count and bytes, limit/after parsing, epochs,
//! BAD_ACK, against the real binary.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use serde_json::{json, Value};

fn seqs(items: &[Value]) -> Vec<u64> {
    items.iter().map(|i| i["seq"].as_u64().unwrap()).collect()
}

/// A relay with sender `s` and target `a`, and `n` envelopes queued for `a`; returns their seqs.
fn queued(
    backend: Backend,
    args: &[&str],
    n: usize,
    size: Option<usize>,
) -> (Relay, Host, Host, Vec<u64>) {
    let relay = backend.start_generous(args);
    let s = Host::enrolled(&relay, "puller-s");
    let a = Host::enrolled(&relay, "puller-a");
    let items: Vec<Value> = (0..n)
        .map(|_| match size {
            Some(len) => envelope_item_sized(&s, &[&a], len),
            None => envelope_item(&s, &[&a]),
        })
        .collect();
    let mut out = Vec::new();
    for chunk in items.chunks(50) {
        for r in s.push_results(&relay, chunk) {
            assert_eq!(r["status"], json!("accepted"), "{r}");
            out.push(r["targets"][0]["seq"].as_u64().unwrap());
        }
    }
    (relay, s, a, out)
}

fn empty_pull_has_exact_fields(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "empty");
    let epoch = relay.epoch();
    let p = a.pull(&relay, "").ok();
    assert_keys(&p, &["epoch", "head_seq", "items", "last_seq", "more"]);
    assert_eq!(
        p,
        json!({"epoch": epoch, "head_seq": 0, "items": [], "last_seq": 0, "more": false})
    );
    // last_seq is `after` when the page is empty.
    let p = a.pull(&relay, "?after=12345&limit=10").ok();
    assert_eq!(p["last_seq"], json!(12345));
    assert_eq!(p["items"], json!([]));
    assert_eq!(p["more"], json!(false));
}

fn seqs_are_increasing_millisecond_like_and_unique(backend: Backend) {
    let before = now_ms() as u64;
    let (relay, _s, a, pushed) = queued(backend, &[], 30, None);
    let after = now_ms() as u64;
    assert!(
        pushed.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {pushed:?}"
    );
    assert!(
        pushed[0] >= before,
        "seq {} is at least now_ms at push {}",
        pushed[0],
        before
    );
    assert!(*pushed.last().unwrap() < after + 10_000);
    let got = a.pull_all(&relay, 0);
    assert_eq!(seqs(&got), pushed);
    let p = a.pull(&relay, "").ok();
    assert_eq!(p["head_seq"], json!(*pushed.last().unwrap()));
}

fn limit_parsing_and_clamping(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &["--max-pull", "3"], 5, None);
    let page = |q: &str| a.pull(&relay, q).ok();
    for q in [
        "",
        "?after=0",
        "?after=0&limit=0",
        "?after=0&limit=abc",
        "?limit=",
        "?after=0&limit=100",
    ] {
        let p = page(q);
        assert_eq!(
            seqs(p["items"].as_array().unwrap()),
            pushed[..3].to_vec(),
            "query {q:?}"
        );
        assert_eq!(p["more"], json!(true), "query {q:?}");
        assert_eq!(p["last_seq"], json!(pushed[2]), "query {q:?}");
        assert_eq!(p["head_seq"], json!(pushed[4]), "query {q:?}");
    }
    let p = page("?after=0&limit=2");
    assert_eq!(seqs(p["items"].as_array().unwrap()), pushed[..2].to_vec());
    assert_eq!(p["last_seq"], json!(pushed[1]));
    let p = page("?after=0&limit=1");
    assert_eq!(seqs(p["items"].as_array().unwrap()), pushed[..1].to_vec());
    // A negative limit is numeric and not zero: clamped to 1.
    let p = page("?after=0&limit=-5");
    assert_eq!(seqs(p["items"].as_array().unwrap()), pushed[..1].to_vec());
    // after
    let p = page(&format!("?after={}", pushed[1]));
    assert_eq!(seqs(p["items"].as_array().unwrap()), pushed[2..5].to_vec());
    assert_eq!(p["more"], json!(false));
    assert_eq!(p["last_seq"], json!(pushed[4]));
    let p = page(&format!("?after={}&limit=3", pushed[4]));
    assert_eq!(p["items"], json!([]));
    assert_eq!(p["last_seq"], json!(pushed[4]));
    assert_eq!(p["more"], json!(false));
    // after is exclusive
    let p = page(&format!("?after={}", pushed[0]));
    assert_eq!(p["items"][0]["seq"], json!(pushed[1]));
}

fn default_max_pull_is_500(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &[], 501, None);
    let p = a.pull(&relay, "?after=0&limit=1000").ok();
    assert_eq!(p["items"].as_array().unwrap().len(), 500);
    assert_eq!(p["more"], json!(true));
    assert_eq!(p["last_seq"], json!(pushed[499]));
    let p = a.pull(&relay, &format!("?after={}", pushed[499])).ok();
    assert_eq!(seqs(p["items"].as_array().unwrap()), vec![pushed[500]]);
    assert_eq!(p["more"], json!(false));
}

fn page_stops_at_the_byte_budget_but_holds_at_least_one_item(backend: Backend) {
    let (relay, s, a, pushed) = queued(backend, &["--max-pull-bytes", "2500"], 5, Some(1000));
    let p = a.pull(&relay, "?after=0").ok();
    let n = p["items"].as_array().unwrap().len();
    assert!(
        (1..=3).contains(&n),
        "about 2500 bytes of 1000-byte items: got {n}"
    );
    assert_eq!(p["more"], json!(true));
    // Following last_seq never skips anything.
    assert_eq!(seqs(&a.pull_all(&relay, 0)), pushed);
    // An item larger than the whole budget still comes, alone.
    let b = Host::enrolled(&relay, "big-b");
    for _ in 0..2 {
        let r = s.push_one(&relay, &envelope_item_sized(&s, &[&b], 4000));
        assert_eq!(r["status"], json!("accepted"));
    }
    let p = b.pull(&relay, "?after=0").ok();
    assert_eq!(p["items"].as_array().unwrap().len(), 1);
    assert_eq!(p["more"], json!(true));
    assert_eq!(b.pull_all(&relay, 0).len(), 2);
}

/// The reference's text for a pull or an ack of another epoch.
const EPOCH_CHANGED: &str = "relay epoch changed: pull again from 0";

fn pull_epoch_must_be_current(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &[], 2, None);
    let epoch = relay.epoch();
    let p = a
        .pull(&relay, &format!("?after=0&limit=10&epoch={epoch}"))
        .ok();
    assert_eq!(seqs(p["items"].as_array().unwrap()), pushed);
    // A stale epoch and an empty `epoch=` answer the same 409, without a `code`.
    let wrong = "2cdde67d-cd82-4ea8-b716-a09865c0adeb";
    for q in [
        format!("?after=0&limit=10&epoch={wrong}"),
        "?after=0&epoch=".to_string(),
        "?epoch".to_string(),
    ] {
        let r = a.pull(&relay, &q);
        assert_eq!(r.status, 409, "{q}: {}", r.text());
        assert_eq!(
            r.json(),
            json!({"error": EPOCH_CHANGED, "epoch": epoch}),
            "{q}"
        );
    }
}

/// A fractional `limit` is floored; `after` that is not a number is 0, a fractional one is
/// compared as a number (floored: `<seq>.5` starts at the next seq), as the reference reads
/// them (`Number(x)`).
fn fractional_limit_is_floored_and_non_numeric_after_is_0(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &["--max-pull", "3"], 5, None);
    let page = |q: &str| {
        let p = a.pull(&relay, q).ok();
        (seqs(p["items"].as_array().unwrap()), p)
    };
    assert_eq!(page("?limit=1.9").0, pushed[..1].to_vec());
    assert_eq!(page("?limit=2.5").0, pushed[..2].to_vec());
    assert_eq!(
        page("?limit=0.5").0,
        pushed[..3].to_vec(),
        "0 means max_pull"
    );
    assert_eq!(page("?limit=1e1").0, pushed[..3].to_vec());
    for q in [
        "?after=abc",
        "?after=-1",
        "?after=",
        "?after=12abc",
        "?after=-0.5",
    ] {
        let (got, p) = page(q);
        assert_eq!(got, pushed[..3].to_vec(), "{q}");
        assert_eq!(p["more"], json!(true), "{q}");
    }
    let (got, _) = page(&format!("?after={}.5", pushed[1]));
    assert_eq!(
        got,
        pushed[2..5].to_vec(),
        "after=<seq>.5 starts at the next seq"
    );
    let (got, p) = page(&format!("?after={}.5", pushed[4]));
    assert!(got.is_empty());
    assert_eq!(
        p["last_seq"],
        json!(pushed[4]),
        "an empty page's last_seq is after, floored"
    );
    let (got, _) = page(&format!("?after={}e0&limit=1", pushed[0]));
    assert_eq!(got, pushed[1..2].to_vec());
}

fn ack_deletes_through_and_reports(backend: Backend) {
    let (relay, s, a, pushed) = queued(backend, &[], 4, None);
    let epoch = relay.epoch();
    let r = a.ack(&relay, &epoch, json!(pushed[1])).ok();
    assert_keys(&r, &["acked_through", "deleted", "head_seq"]);
    assert_eq!(
        r,
        json!({"acked_through": pushed[1], "deleted": 2, "head_seq": pushed[3]})
    );
    assert_eq!(seqs(&a.pull_all(&relay, 0)), pushed[2..].to_vec());
    // Acking the same point again deletes nothing.
    let r = a.ack(&relay, &epoch, json!(pushed[1])).ok();
    assert_eq!(r["deleted"], json!(0));
    assert_eq!(r["head_seq"], json!(pushed[3]));
    // Through the head deletes the rest.
    let r = a.ack(&relay, &epoch, json!(pushed[3])).ok();
    assert_eq!(
        r,
        json!({"acked_through": pushed[3], "deleted": 2, "head_seq": pushed[3]})
    );
    assert!(a.pull_all(&relay, 0).is_empty());
    // The head stays; new items get higher seqs.
    let res = s.push_one(&relay, &envelope_item(&s, &[&a]));
    assert!(res["targets"][0]["seq"].as_u64().unwrap() > pushed[3]);
}

fn ack_only_touches_the_callers_queue(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "ao-s");
    let a = Host::enrolled(&relay, "ao-a");
    let b = Host::enrolled(&relay, "ao-b");
    let r = s.push_one(&relay, &envelope_item(&s, &[&a, &b]));
    let seq_b = r["targets"][1]["seq"].as_u64().unwrap();
    // a acks a seq as high as b's: b's item stays.
    let seq_a = r["targets"][0]["seq"].as_u64().unwrap();
    a.ack(&relay, &relay.epoch(), json!(seq_a)).ok();
    assert_eq!(seqs(&b.pull_all(&relay, 0)), vec![seq_b]);
}

/// A missing or wrong epoch: 409 with the reference's text, `code` `EPOCH` (0.5.7+ hosts
/// decide by it), the current epoch and the caller's head; nothing is deleted.
fn ack_with_a_missing_or_wrong_epoch_is_409_epoch_with_the_head(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &[], 2, None);
    let epoch = relay.epoch();
    let want = json!({
        "error": EPOCH_CHANGED,
        "code": "EPOCH",
        "epoch": epoch,
        "head_seq": pushed[1],
    });
    for body in [
        json!({"epoch": "2cdde67d-cd82-4ea8-b716-a09865c0adeb", "through": pushed[0]}),
        json!({"through": pushed[0]}),
        json!({"epoch": "", "through": pushed[0]}),
        json!({"epoch": null, "through": pushed[0]}),
        json!({"epoch": 5, "through": pushed[0]}),
    ] {
        let r = a.post_json(&relay, "/v2/relay/ack", &body);
        assert_eq!(r.status, 409, "{body}: {}", r.text());
        assert_eq!(r.json(), want, "{body}");
    }
    assert_eq!(a.pull_all(&relay, 0).len(), 2, "nothing deleted");
}

/// Above the head: the reference's text (hosts treat it as an epoch change). Not a
/// non-negative integer: mbx-relay's own text (stricter: the reference floors it). Both 400
/// `BAD_ACK` with the epoch and head, deleting nothing.
fn bad_ack_through_is_400_bad_ack(backend: Backend) {
    let (relay, _s, a, pushed) = queued(backend, &[], 2, None);
    let epoch = relay.epoch();
    let head = pushed[1];
    let bad_ack = |text: &str, head_seq: u64| json!({"error": text, "code": "BAD_ACK", "epoch": epoch, "head_seq": head_seq});
    let beyond = "ack beyond the last allocated seq: treat as an epoch change";
    let not_a_seq = "ack through is not a non-negative integer";
    for (through, text) in [
        (json!("5"), not_a_seq),
        (json!(1.5), not_a_seq),
        (json!(-1), not_a_seq),
        (json!(null), not_a_seq),
        (json!(true), not_a_seq),
        (json!([1]), not_a_seq),
        (json!(head + 1), beyond),
        (json!(u64::MAX), beyond),
    ] {
        let r = a.ack(&relay, &epoch, through.clone());
        assert_eq!(r.status, 400, "through {through}: {}", r.text());
        assert_eq!(r.json(), bad_ack(text, head), "through {through}");
    }
    let r = a.post_json(&relay, "/v2/relay/ack", &json!({ "epoch": epoch }));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json(), bad_ack(not_a_seq, head));
    assert_eq!(a.pull_all(&relay, 0).len(), 2, "nothing deleted");
    // For a host with nothing allocated, anything above 0 is beyond the head.
    let fresh = Host::enrolled(&relay, "fresh");
    let r = fresh.ack(&relay, &epoch, json!(1));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json(), bad_ack(beyond, 0));
    // 0 is fine.
    let r = fresh.ack(&relay, &epoch, json!(0)).ok();
    assert_eq!(r, json!({"acked_through": 0, "deleted": 0, "head_seq": 0}));
}

fn pull_and_ack_need_a_hop(backend: Backend) {
    let (relay, _s, _a, pushed) = queued(backend, &[], 1, None);
    relay
        .get("/v2/relay/items?after=0")
        .assert_error(401, "bad relay hop");
    relay
        .post_json(
            "/v2/relay/ack",
            &json!({"epoch": relay.epoch(), "through": pushed[0]}),
        )
        .assert_error(401, "bad relay hop");
    relay
        .post_json("/v2/relay/items", &json!({"items": []}))
        .assert_error(401, "bad relay hop");
}

backend_tests! {
    empty_pull_has_exact_fields,
    seqs_are_increasing_millisecond_like_and_unique,
    limit_parsing_and_clamping,
    default_max_pull_is_500,
    page_stops_at_the_byte_budget_but_holds_at_least_one_item,
    pull_epoch_must_be_current,
    fractional_limit_is_floored_and_non_numeric_after_is_0,
    ack_deletes_through_and_reports,
    ack_only_touches_the_callers_queue,
    ack_with_a_missing_or_wrong_epoch_is_409_epoch_with_the_head,
    bad_ack_through_is_400_bad_ack,
    pull_and_ack_need_a_hop,
}
