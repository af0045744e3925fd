//! docs/protocol.md §3 "Legacy v1 mail" and v1 hops (§2): name routing, ambiguity, stored counts,
//! 413, bounded pages whose cursor never skips, against the real binary.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::unb64;
use serde_json::{json, Value};

/// A sealed envelope object from `from` to these `name@host` recipients, with a fresh ULID.
fn env_to(from: &Host, to: &[&str]) -> Value {
    let to: Vec<String> = to.iter().map(|s| s.to_string()).collect();
    sealed_envelope(&ulid(), &format!("agent@{}", from.name), &to)
}

fn v1_push(relay: &Relay, from: &Host, envs: &[Value]) -> Response {
    let body = json!({ "envelopes": envs }).to_string();
    from.call_v1(relay, "POST", "/v1/relay/messages", body.as_bytes())
}

fn v1_pull(relay: &Relay, h: &Host, after: u64) -> Value {
    h.call_v1(
        relay,
        "GET",
        &format!("/v1/relay/messages?after={after}"),
        b"",
    )
    .ok()
}

/// Every envelope for `h` by following the v1 cursor (bounded to 1,000 pages).
fn v1_pull_all(relay: &Relay, h: &Host, max_page: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    for _ in 0..1000 {
        let p = v1_pull(relay, h, after);
        assert_keys(&p, &["items", "cursor"]);
        let items = p["items"].as_array().unwrap().clone();
        assert!(
            items.len() <= max_page,
            "page of {} > bound {max_page}",
            items.len()
        );
        if items.is_empty() {
            return out;
        }
        let cursor = p["cursor"].as_u64().expect("cursor");
        let last = items.last().unwrap()["seq"].as_u64().unwrap();
        assert!(
            cursor <= last,
            "cursor {cursor} skips past the last returned seq {last}"
        );
        assert!(cursor > after, "cursor does not advance");
        out.extend(items);
        after = cursor;
    }
    panic!("v1 pull did not finish");
}

fn v1_push_pull_ack_round_trip(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "v1-s");
    let a = Host::enrolled(&relay, "v1-a");
    let e1 = env_to(&s, &["bob@v1-a"]);
    let e2 = env_to(&s, &["carol@V1-A"]); // host names match case-insensitively
    let r = v1_push(&relay, &s, &[e1.clone(), e2.clone()]);
    assert_eq!(r.ok(), json!({"stored": 2}));
    let p = v1_pull(&relay, &a, 0);
    assert_keys(&p, &["items", "cursor"]);
    let items = p["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (it, e) in items.iter().zip([&e1, &e2]) {
        assert_keys(it, &["seq", "envelope", "from"]);
        assert_eq!(&it["envelope"], e);
        assert_eq!(it["from"], json!("v1-s"));
    }
    let cursor = p["cursor"].as_u64().unwrap();
    assert_eq!(cursor, items[1]["seq"].as_u64().unwrap());
    // The same items are visible to a v2 pull, as envelopes from the sender's key.
    let v2 = a.pull_all(&relay, 0);
    assert_eq!(v2.len(), 2);
    assert_eq!(v2[0]["kind"], json!("envelope"));
    assert_eq!(v2[0]["item_id"], e1["id"]);
    assert_eq!(v2[0]["sender_pubkey"], json!(s.pubkey()));
    // Ack.
    let body = json!({"cursor": cursor}).to_string();
    let r = a.call_v1(&relay, "POST", "/v1/relay/ack", body.as_bytes());
    assert_eq!(r.ok(), json!({"ok": true}));
    assert_eq!(v1_pull(&relay, &a, 0)["items"], json!([]));
    assert!(a.pull_all(&relay, 0).is_empty());
}

fn v1_push_dedups_by_sender_envelope_and_target(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "d-s");
    let a = Host::enrolled(&relay, "d-a");
    let b = Host::enrolled(&relay, "d-b");
    // One envelope to two hosts (and two agents on one host): one item per host.
    let e = env_to(&s, &["x@d-a", "y@d-b", "z@d-a"]);
    let r = v1_push(&relay, &s, std::slice::from_ref(&e));
    assert_eq!(r.status, 200, "{}", r.text());
    v1_push(&relay, &s, std::slice::from_ref(&e)).ok();
    assert_eq!(v1_pull_all(&relay, &a, 500).len(), 1);
    assert_eq!(v1_pull_all(&relay, &b, 500).len(), 1);
}

fn v1_ambiguous_recipient_host_stores_nothing(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "amb-s");
    let a = Host::enrolled(&relay, "amb-a");
    let _t1 = Host::enrolled(&relay, "twin");
    let _t2 = Host::enrolled(&relay, "Twin");
    let r = v1_push(&relay, &s, &[env_to(&s, &["bob@twin"])]);
    assert_eq!(r.status, 413, "nothing stored with an error: {}", r.text());
    let v = r.json();
    assert_keys(&v, &["stored", "error"]);
    assert_eq!(v["stored"], json!(0));
    let err = v["error"].as_str().unwrap();
    assert!(err.starts_with("recipient host ambiguous: twin"), "{err}");
    // Atomic per envelope: a clean host in the same envelope gets nothing either.
    let r = v1_push(&relay, &s, &[env_to(&s, &["x@amb-a", "bob@twin"])]);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(a.pull_all(&relay, 0).is_empty());
    // Some stored and an error: 200 with both.
    let r = v1_push(
        &relay,
        &s,
        &[env_to(&s, &["x@amb-a"]), env_to(&s, &["bob@twin"])],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["stored"], json!(1));
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("recipient host ambiguous: twin"),
        "{v}"
    );
    assert_eq!(a.pull_all(&relay, 0).len(), 1);
}

fn v1_unknown_host_and_too_large_are_errors(backend: Backend) {
    let relay = backend.start_generous(&["--max-item-bytes", "2000"]);
    let s = Host::enrolled(&relay, "big-s");
    let a = Host::enrolled(&relay, "big-a");
    let r = v1_push(&relay, &s, &[env_to(&s, &["x@nowhere"])]);
    let v = r.assert_some_error(413);
    assert_eq!(v["stored"], json!(0));
    // max_item_bytes applies to v1 pushes too.
    let mut big = env_to(&s, &["x@big-a"]);
    big["pad"] = json!("p".repeat(4000));
    let r = v1_push(&relay, &s, std::slice::from_ref(&big));
    let v = r.assert_some_error(413);
    assert_eq!(v["stored"], json!(0));
    let mut small = env_to(&s, &["x@big-a"]);
    small["pad"] = json!("p".repeat(500));
    assert_eq!(v1_push(&relay, &s, &[small]).ok(), json!({"stored": 1}));
    assert_eq!(a.pull_all(&relay, 0).len(), 1);
}

fn v1_push_respects_sender_allowlists(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "al-s");
    let t = Host::enrolled(&relay, "al-t");
    t.publish_senders(&relay, &[random_pubkey()], now_ms()).ok();
    let r = v1_push(&relay, &s, &[env_to(&s, &["x@al-t"])]);
    let v = r.assert_some_error(413);
    assert_eq!(v["stored"], json!(0));
    assert!(t.pull_all(&relay, 0).is_empty());
}

fn v1_bad_bodies_are_400(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "bb-s");
    for body in [
        r#"{"envelopes":{}}"#,
        r#"{}"#,
        r#"[]"#,
        r#"{"envelopes":"x"}"#,
        "{nope",
    ] {
        s.call_v1(&relay, "POST", "/v1/relay/messages", body.as_bytes())
            .assert_some_error(400);
    }
}

fn v1_page_is_bounded_and_cursor_never_skips(backend: Backend) {
    let relay = backend.start_generous(&["--max-pull", "2"]);
    let s = Host::enrolled(&relay, "pg-s");
    let a = Host::enrolled(&relay, "pg-a");
    let envs: Vec<Value> = (0..5).map(|_| env_to(&s, &["x@pg-a"])).collect();
    assert_eq!(v1_push(&relay, &s, &envs).ok(), json!({"stored": 5}));
    let got = v1_pull_all(&relay, &a, 2);
    let ids: Vec<&Value> = got.iter().map(|i| &i["envelope"]["id"]).collect();
    let want: Vec<&Value> = envs.iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, want);
}

fn v1_page_is_bounded_by_bytes_and_cursor_never_skips(backend: Backend) {
    let relay = backend.start_generous(&["--max-pull-bytes", "2500"]);
    let s = Host::enrolled(&relay, "pb-s");
    let a = Host::enrolled(&relay, "pb-a");
    let envs: Vec<Value> = (0..5)
        .map(|_| {
            let mut e = env_to(&s, &["x@pb-a"]);
            e["pad"] = json!("p".repeat(1000));
            e
        })
        .collect();
    assert_eq!(v1_push(&relay, &s, &envs).ok(), json!({"stored": 5}));
    let first = v1_pull(&relay, &a, 0);
    let n = first["items"].as_array().unwrap().len();
    assert!((1..5).contains(&n), "a byte-bounded page: {n}");
    let got = v1_pull_all(&relay, &a, 5);
    let ids: Vec<&Value> = got.iter().map(|i| &i["envelope"]["id"]).collect();
    let want: Vec<&Value> = envs.iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, want);
}

fn v1_pull_returns_envelopes_only(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "eo-s");
    let a = Host::enrolled(&relay, "eo-a");
    let r = receipt_item(&s, &a);
    let e = envelope_item(&s, &[&a]);
    s.push_results(&relay, &[r, e.clone()]);
    let got = v1_pull_all(&relay, &a, 500);
    assert_eq!(got.len(), 1);
    let wire: Value = serde_json::from_slice(&item_wire(&e)).unwrap();
    assert_eq!(got[0]["envelope"], wire);
}

fn v1_hop_is_by_name_and_signs_the_bare_path(backend: Backend) {
    let relay = backend.start_generous(&["--max-per-name", "2"]);
    let a = Host::enrolled(&relay, "solo");
    // Signed over the path with its query: refused for /v1 paths.
    let hop = Hop {
        v1: true,
        signed_path: Some("/v1/relay/messages?after=0".into()),
        ..Hop::default()
    };
    a.call_with(&relay, "GET", "/v1/relay/messages?after=0", b"", &hop, &[])
        .assert_error(401, "bad relay hop");
    // The bare path works, with and without x-mbx-key.
    a.call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .ok();
    a.call(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .ok();
    // Unknown name.
    let ghost = Host::new("ghost");
    ghost
        .call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .assert_error(401, "bad relay hop");
    // Two live hosts share a name: the one whose key verifies is the caller.
    let b = Host::enrolled(&relay, "pair");
    let c = Host::enrolled(&relay, "PAIR");
    let s = Host::enrolled(&relay, "pair-s");
    s.push_one(&relay, &envelope_item(&s, &[&c]));
    assert_eq!(v1_pull(&relay, &c, 0)["items"].as_array().unwrap().len(), 1);
    assert_eq!(v1_pull(&relay, &b, 0)["items"], json!([]));
    // More than max_per_name share it: v1 hops by that name fail.
    let _d = Host::enrolled(&relay, "pair");
    b.call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .assert_error(401, "bad relay hop");
    // v2 hops by key still work.
    assert_eq!(c.pull_all(&relay, 0).len(), 1);
}

fn v1_push_to_a_crowded_name_is_ambiguous(backend: Backend) {
    let relay = backend.start_generous(&["--max-per-name", "2"]);
    let s = Host::enrolled(&relay, "cr-s");
    for _ in 0..3 {
        Host::enrolled(&relay, "crowd");
    }
    let r = v1_push(&relay, &s, &[env_to(&s, &["x@crowd"])]);
    let v = r.assert_some_error(413);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("recipient host ambiguous: crowd"),
        "{v}"
    );
}

fn v1_items_never_expire_nor_notify_while_v2_items_keep_their_retention(backend: Backend) {
    let relay = backend.start_generous(&["--retention", "2s", "--sweep-interval", "1s"]);
    let s = Host::enrolled(&relay, "ne-s");
    let t = Host::enrolled(&relay, "ne-t");
    let v1 = env_to(&s, &["x@ne-t"]);
    assert_eq!(
        v1_push(&relay, &s, std::slice::from_ref(&v1)).ok(),
        json!({"stored": 1})
    );
    let v2 = envelope_item(&s, &[&t]);
    assert_eq!(s.push_one(&relay, &v2)["status"], json!("accepted"));
    // The v2 item expires (its sender is told); the sweep runs every second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let notices = loop {
        let mine = s.pull_all(&relay, 0);
        if !mine.is_empty() {
            break mine;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the v2 item never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Two more sweeps, well past the v1 item's retention too.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let notices: Vec<Value> = notices
        .into_iter()
        .chain(s.pull_all(&relay, 0))
        .map(|n| n["item_id"].clone())
        .collect();
    let v2_notice = format!("expired:{}:{}", v2["item_id"].as_str().unwrap(), t.pubkey());
    assert!(
        notices.iter().all(|n| n == &json!(v2_notice)),
        "the only notice is the v2 item's: {notices:?}"
    );
    let left = t.pull_all(&relay, 0);
    assert_eq!(left.len(), 1, "only the v1 item is left: {left:?}");
    assert_eq!(left[0]["item_id"], v1["id"]);
    assert_eq!(v1_pull_all(&relay, &t, 500)[0]["envelope"], v1);
}

fn v1_dedup_is_by_envelope_id_so_a_resealed_retry_counts_as_stored(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "rs-s");
    let t = Host::enrolled(&relay, "rs-t");
    let u = Host::enrolled(&relay, "rs-u");
    let first = env_to(&s, &["x@rs-t"]);
    let id = first["id"].as_str().unwrap().to_string();
    assert_eq!(
        v1_push(&relay, &s, std::slice::from_ref(&first)).ok(),
        json!({"stored": 1})
    );
    // The retry is sealed again (other bytes, same id): stored, not a conflict, not a copy.
    let resealed = sealed_envelope(&id, "agent@rs-s", &["x@rs-t".to_string()]);
    assert_ne!(resealed, first);
    assert_eq!(
        v1_push(&relay, &s, std::slice::from_ref(&resealed)).ok(),
        json!({"stored": 1})
    );
    // A retry that adds a recipient host reaches only the new one.
    let wider = sealed_envelope(
        &id,
        "agent@rs-s",
        &["x@rs-t".to_string(), "y@rs-u".to_string()],
    );
    assert_eq!(
        v1_push(&relay, &s, std::slice::from_ref(&wider)).ok(),
        json!({"stored": 1})
    );
    let at_t = v1_pull_all(&relay, &t, 500);
    assert_eq!(at_t.len(), 1, "{at_t:?}");
    assert_eq!(at_t[0]["envelope"], first, "the first bytes stay");
    let at_u = v1_pull_all(&relay, &u, 500);
    assert_eq!(at_u.len(), 1);
    assert_eq!(at_u[0]["envelope"], wider);
}

/// agentmbx T344 (issue 25): a malformed `meta.external_since` / `external_source` is a 413
/// naming the reason, and nothing is stored for it; a well-formed pair is stored.
fn v1_external_since_and_source_are_checked(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "ext-s");
    let a = Host::enrolled(&relay, "ext-a");
    let with_meta = |members: Value| {
        let mut e = env_to(&s, &["x@ext-a"]);
        e["meta"]
            .as_object_mut()
            .unwrap()
            .extend(members.as_object().unwrap().clone());
        e
    };
    for (members, why) in [
        (
            json!({"origin": "external", "external_since": "2026-13-01T00:00:00Z"}),
            "bad external_since",
        ),
        (
            json!({"origin": "agent", "external_since": "2026-11-29T14:00:00Z"}),
            "bad external_since",
        ),
        (
            json!({"origin": "external", "external_source": "declared"}),
            "bad external_source",
        ),
    ] {
        let r = v1_push(&relay, &s, &[with_meta(members)]);
        assert_eq!(r.status, 413, "{}", r.text());
        assert_eq!(
            r.json(),
            json!({"stored": 0, "error": format!("bad envelope: {why}")})
        );
    }
    assert!(
        a.pull_all(&relay, 0).is_empty(),
        "a refused envelope was stored"
    );
    let good = with_meta(json!({"origin": "external",
        "external_since": "2026-11-29T14:00:00.123Z", "external_source": "inherited"}));
    assert_eq!(v1_push(&relay, &s, &[good]).ok(), json!({"stored": 1}));
    assert_eq!(a.pull_all(&relay, 0).len(), 1);
}

/// `env` as a JavaScript sender's `JSON.stringify` may list it: its keys in an order of their
/// own (here reverse sorted, so not canonical), nested values compact.
fn js_order_text(env: &Value) -> String {
    let members: Vec<String> = env
        .as_object()
        .unwrap()
        .iter()
        .rev()
        .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// A v1 envelope is stored as sent (`JSON.stringify` of the parsed object: the sender's key
/// order, no white space; never re-canonicalised), so a v2 push of the very bytes a v1 host
/// sent is a `duplicate` at the v1 seq.
fn v1_envelope_is_stored_as_sent_so_a_v2_push_of_its_bytes_is_a_duplicate(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "as-s");
    let a = Host::enrolled(&relay, "as-a");
    let env = env_to(&s, &["x@as-a"]);
    let sent = js_order_text(&env);
    assert_ne!(
        sent,
        canonical_json(&env),
        "the test needs a non-canonical order"
    );
    // White space in the body is not part of the envelope as `JSON.parse` read it.
    let body = format!("{{ \"envelopes\" : [ {sent} ]\n}}");
    let r = s.call_v1(&relay, "POST", "/v1/relay/messages", body.as_bytes());
    assert_eq!(r.ok(), json!({"stored": 1}));
    let got = a.pull_all(&relay, 0);
    assert_eq!(got.len(), 1);
    let wire = unb64(got[0]["wire_b64"].as_str().unwrap()).unwrap();
    assert_eq!(String::from_utf8(wire).unwrap(), sent, "stored as sent");
    let seq = got[0]["seq"].clone();
    let id = env["id"].as_str().unwrap();
    let r = s.push_one(
        &relay,
        &item("envelope", id, &[(a.pubkey(), sent.clone().into_bytes())]),
    );
    assert_eq!(r["status"], json!("duplicate"), "{r}");
    assert_eq!(
        r["targets"],
        json!([{"host_pubkey": a.pubkey(), "seq": seq}])
    );
    assert_eq!(
        r["accept"]["targets"][0]["wire_hash"],
        json!(sha256_hex(sent.as_bytes()))
    );
    assert_eq!(a.pull_all(&relay, 0).len(), 1, "no second copy");
    // The v1 pull serves the same envelope.
    assert_eq!(v1_pull(&relay, &a, 0)["items"][0]["envelope"], env);
}

/// `POST /v1/relay/ack {"cursor"}` reads the cursor as the reference does (`Number(cursor)`,
/// floored, clamped to 0..=head_seq): one that is not a number answers `{"ok":true}` and
/// deletes nothing; one beyond head_seq acks the head.
fn v1_ack_cursor_is_read_as_a_number_and_clamped_to_the_head(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "ac-s");
    let a = Host::enrolled(&relay, "ac-a");
    let envs: Vec<Value> = (0..3).map(|_| env_to(&s, &["x@ac-a"])).collect();
    assert_eq!(v1_push(&relay, &s, &envs).ok(), json!({"stored": 3}));
    let seqs: Vec<u64> = a
        .pull_all(&relay, 0)
        .iter()
        .map(|i| i["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 3);
    let ack = |body: Value| {
        let r = a.call_v1(&relay, "POST", "/v1/relay/ack", body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        assert_eq!(r.json(), json!({"ok": true}), "{body}");
    };
    let left = || a.pull_all(&relay, 0).len();
    for body in [
        json!({"cursor": "abc"}),
        json!({}),
        json!({"cursor": null}),
        json!({"cursor": {}}),
        json!({"cursor": [1, 2]}),
        json!({"cursor": -5}),
        json!({"cursor": "-1"}),
        json!({"cursor": false}),
    ] {
        ack(body.clone());
        assert_eq!(left(), 3, "{body} deleted something");
    }
    // A fractional cursor is floored; a numeric string is a number.
    ack(json!({"cursor": seqs[0] as f64 + 0.5}));
    assert_eq!(left(), 2);
    ack(json!({ "cursor": seqs[1].to_string() }));
    assert_eq!(left(), 1);
    // Beyond head_seq: clamped to it (everything goes; the head stays).
    ack(json!({ "cursor": seqs[2] + 1_000_000 }));
    assert_eq!(left(), 0);
    assert_eq!(a.info(&relay)["you"]["head_seq"], json!(seqs[2]));
    assert_eq!(a.info(&relay)["you"]["acked_through"], json!(seqs[2]));
}

backend_tests! {
    v1_push_pull_ack_round_trip,
    v1_push_dedups_by_sender_envelope_and_target,
    v1_ambiguous_recipient_host_stores_nothing,
    v1_page_is_bounded_and_cursor_never_skips,
    v1_dedup_is_by_envelope_id_so_a_resealed_retry_counts_as_stored,
    v1_external_since_and_source_are_checked,
    v1_envelope_is_stored_as_sent_so_a_v2_push_of_its_bytes_is_a_duplicate,
    v1_ack_cursor_is_read_as_a_number_and_clamped_to_the_head,
    ;
    postgres ignored:
    v1_unknown_host_and_too_large_are_errors,
    v1_push_respects_sender_allowlists,
    v1_bad_bodies_are_400,
    v1_page_is_bounded_by_bytes_and_cursor_never_skips,
    v1_pull_returns_envelopes_only,
    v1_hop_is_by_name_and_signs_the_bare_path,
    v1_push_to_a_crowded_name_is_ambiguous,
    v1_items_never_expire_nor_notify_while_v2_items_keep_their_retention,
}
