//! Every error text the protocol quotes (docs/protocol.md, from the reference relay), compared
//! with what the relay sends: status and the whole body, each row provoking its error through
//! real HTTP against the real binary. Push rejections are compared as the item's whole result.
//!
//! `publish_and_oversize_texts_are_the_references` holds the enc-key publish (v1 and v2),
//! sender-list and 413-drain rows, on a relay of their own.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{b64, SigningKey};
use serde_json::{json, Value};

/// The reference's text for a pull or an ack of another epoch.
const EPOCH_CHANGED: &str = "relay epoch changed: pull again from 0";

/// What a row expects back.
enum Expect {
    /// Exactly this status and JSON body.
    Body(u16, Value),
    /// This status and a body that is an object with a non-empty `error` string and no other
    /// field (texts the protocol leaves free, like a JSON parser's message).
    AnyError(u16),
    /// This status, exactly these fields, and these of them with these values.
    Fields(u16, &'static [&'static str], Value),
    /// A push answered 200 whose only result is `{"item_id","status","targets":[]}` with this
    /// `status`.
    Rejected(String),
}

/// One row: a label, how to provoke the answer, what must come back.
struct Row<'a> {
    label: String,
    provoke: Box<dyn Fn() -> Response + 'a>,
    expect: Expect,
}

fn row<'a>(
    label: impl Into<String>,
    expect: Expect,
    provoke: impl Fn() -> Response + 'a,
) -> Row<'a> {
    Row {
        label: label.into(),
        provoke: Box::new(provoke),
        expect,
    }
}

/// Run every row, then fail once listing every mismatch.
fn check(rows: Vec<Row<'_>>) {
    let mut bad = Vec::new();
    let n = rows.len();
    for r in rows {
        // A row whose set-up fails is reported like a mismatch, and the others still run.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (r.provoke)())) {
            Ok(got) => {
                if let Err(why) = matches(&got, &r.expect) {
                    bad.push(format!("{}: {why}", r.label));
                }
            }
            Err(_) => bad.push(format!(
                "{}: its set-up failed (see the panic above)",
                r.label
            )),
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {n} rows differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

fn matches(got: &Response, expect: &Expect) -> Result<(), String> {
    let body: Value = serde_json::from_slice(&got.body)
        .map_err(|_| format!("{} with a non-JSON body {:?}", got.status, got.text()))?;
    let status_is = |want: u16| {
        if got.status == want {
            Ok(())
        } else {
            Err(format!("status {} (want {want}), body {body}", got.status))
        }
    };
    match expect {
        Expect::Body(status, want) => {
            status_is(*status)?;
            if &body != want {
                return Err(format!("body {body}\n    want {want}"));
            }
        }
        Expect::AnyError(status) => {
            status_is(*status)?;
            let ok = body.as_object().is_some_and(|o| o.len() == 1)
                && body["error"].as_str().is_some_and(|e| !e.is_empty());
            if !ok {
                return Err(format!("body {body}, want only a non-empty error string"));
            }
        }
        Expect::Fields(status, fields, values) => {
            status_is(*status)?;
            let mut have: Vec<&str> = body
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            have.sort_unstable();
            let mut want: Vec<&str> = fields.to_vec();
            want.sort_unstable();
            if have != want {
                return Err(format!("fields {have:?}, want {want:?}: {body}"));
            }
            for (k, v) in values.as_object().into_iter().flatten() {
                if &body[k] != v {
                    return Err(format!("{k} = {}, want {v}: {body}", body[k]));
                }
            }
        }
        Expect::Rejected(status) => {
            status_is(200)?;
            let results = body["results"].as_array().cloned().unwrap_or_default();
            let [r] = &results[..] else {
                return Err(format!("want one result: {body}"));
            };
            let ok = r.as_object().is_some_and(|o| o.len() == 3)
                && r["status"] == json!(status.as_str())
                && r["targets"] == json!([])
                && r.get("item_id").is_some();
            if !ok {
                return Err(format!("result {r}, want status {status:?} and targets []"));
            }
        }
    }
    Ok(())
}

/// A fresh challenge for `h` on `relay` (asserted 200).
fn challenge_of(relay: &Relay, h: &Host) -> String {
    h.challenge(relay).ok()["challenge"]
        .as_str()
        .expect("challenge")
        .to_string()
}

/// Challenge, then enrol `h` with this extra `proof`.
fn enrol_proof(relay: &Relay, h: &Host, proof: Value) -> Response {
    let ch = challenge_of(relay, h);
    let mut body = h.enrol_body(&ch, "", None);
    body["proof"] = proof;
    relay.post_json("/v1/relay/enrol", &body)
}

fn push(relay: &Relay, from: &Host, item: &Value) -> Response {
    from.post_json(relay, "/v2/relay/items", &json!({ "items": [item] }))
}

fn v1_push(relay: &Relay, from: &Host, envs: &[Value]) -> Response {
    let body = json!({ "envelopes": envs }).to_string();
    from.call_v1(relay, "POST", "/v1/relay/messages", body.as_bytes())
}

/// A sealed envelope `from` → `agent@<to>` for each name, fresh ULID.
fn envelope_to(from: &Host, to: &[&str]) -> Value {
    let to: Vec<String> = to.iter().map(|n| format!("agent@{n}")).collect();
    sealed_envelope(&ulid(), &format!("agent@{}", from.name), &to)
}

/// An `envelope` item from `from` to `to` whose wire is `env` (compact JSON).
fn envelope_item_of(env: &Value, to: &Host) -> Value {
    let id = env["id"].as_str().unwrap_or("01KB5Z2X3Y4Z5A6B7C8D9E0F1G");
    item(
        "envelope",
        id,
        &[(to.pubkey(), serde_json::to_vec(env).expect("json"))],
    )
}

/// `v` with the value at `path` replaced (or removed with `None`).
fn edit(v: &Value, path: &[&str], new: Option<Value>) -> Value {
    let mut v = v.clone();
    let (last, parents) = path.split_last().expect("path");
    let mut at = &mut v;
    for p in parents {
        at = &mut at[*p];
    }
    match new {
        Some(n) => at[*last] = n,
        None => {
            at.as_object_mut().expect("object").remove(*last);
        }
    }
    v
}

/// Every `bad envelope: <why>` of the shape check, one change to a valid envelope each.
fn envelope_whys() -> Vec<(&'static [&'static str], Option<Value>, &'static str)> {
    let big = |n: usize| json!("é".repeat(n));
    vec![
        (&["v"], None, "unsupported version"),
        (&["id"], Some(json!(5)), "bad id"),
        (&["from"], Some(json!("no-at-sign")), "bad from"),
        (
            &["from"],
            Some(json!(format!("@{}", "f".repeat(300)))),
            "from over 300 characters",
        ),
        (&["to"], Some(json!(["a@b", 1])), "bad to"),
        (
            &["to"],
            Some(json!(vec!["a@b"; 101])),
            "more than 100 recipients",
        ),
        (
            &["to"],
            Some(json!([format!("a@{}", "h".repeat(299))])),
            "recipient over 300 characters",
        ),
        (&["kind"], Some(json!("letter")), "bad kind"),
        (&["enc"], None, "bad enc"),
        (&["body"], None, "bad body"),
        (&["subject"], Some(json!(["x"])), "bad subject"),
        (
            &["subject"],
            Some(json!("s".repeat(201))),
            "subject over 200 characters",
        ),
        (
            &["subject"],
            Some(json!("a\u{2028}b")),
            "subject contains control characters",
        ),
        (&["ts"], Some(json!("not a date")), "bad ts"),
        (&["thread"], None, "bad thread"),
        (&["reply_to"], Some(json!(7)), "bad reply_to"),
        (&["needs_reply"], Some(json!("no")), "bad needs_reply"),
        (&["refs"], Some(json!("r")), "bad refs"),
        (
            &["refs"],
            Some(json!(["r".repeat(2049)])),
            "more than 100 refs or a ref over 2048 characters",
        ),
        (&["enc"], Some(json!("sealed")), "bad enc"),
        (&["enc", "v"], Some(json!(2)), "unsupported enc version"),
        (
            &["enc", "alg"],
            Some(json!("rot13")),
            "unsupported enc algorithm",
        ),
        (&["enc", "epk"], Some(json!("not base64!")), "bad enc epk"),
        (
            &["enc", "nonce"],
            Some(json!(b64(&[0u8; 32]))),
            "bad enc nonce",
        ),
        (&["enc", "body"], Some(json!(7)), "bad enc body"),
        (&["authority"], Some(json!("owner")), "bad authority"),
        (
            &["authority"],
            Some(json!({"owner_sig": "s"})),
            "bad owner authority",
        ),
        (
            &["authority"],
            Some(json!({"grant": "g", "session_sig": "x"})),
            "bad grant authority",
        ),
        (
            &["authority"],
            Some(json!({"grant": {"v": 2}, "session_sig": "x"})),
            "bad grant.id",
        ),
        (&["meta"], Some(json!([])), "bad meta"),
        (&["meta", "tags"], Some(json!([1])), "bad meta.tags"),
        (
            &["meta", "sender_verification"],
            Some(json!("trusted")),
            "bad sender verification",
        ),
        (&["meta", "hop"], Some(json!(1001)), "bad hop"),
        (&["meta", "origin"], Some(json!("robot")), "bad origin"),
        (&["meta", "project"], Some(json!(1)), "bad project"),
        (
            &["meta", "project_key"],
            Some(json!("k".repeat(301))),
            "bad project key",
        ),
        (
            &["meta", "local_names"],
            Some(json!(["Not-Lower"])),
            "bad local names",
        ),
        // Body caps: plain over 262,144 bytes; sealed over 349,548 (checked on `body` first).
        (&["enc"], Some(json!(null)), "__plain_body__"),
        (&["body"], Some(big(174_775)), "body over 349548 bytes"),
    ]
}

fn quoted_texts_are_the_references(backend: Backend) {
    let relay = backend.start_generous(&["--max-queue-items", "3"]);
    let a = Host::enrolled(&relay, "txt-a");
    let b = Host::enrolled(&relay, "txt-b");
    let epoch = relay.epoch();
    // A relay with room for one enrolment, one open challenge and one push a minute.
    let small = backend.start(&[
        "--max-enrolments",
        "1",
        "--max-challenges",
        "1",
        "--pushes-per-minute",
        "1",
        "--enrol-per-minute",
        "1000",
    ]);
    let solo = Host::enrolled(&small, "solo");
    // A relay that takes two enrolment calls a minute per address.
    let one_call = backend.start(&["--enrol-per-minute", "2"]);
    // A relay whose enrolment authority decides by `proof` (feature `failpoints`).
    let stub = Relay::launch(
        backend
            .opts(GENEROUS)
            .env("MBX_RELAY_TEST_AUTHORITY", "proof-stub"),
    )
    .expect("relay with the test authority");
    let pk = random_pubkey();

    let mut rows = vec![
        // §2 and §3 generalities.
        row(
            "bad relay hop",
            Expect::Body(401, json!({"error": "bad relay hop"})),
            || {
                let hop = Hop {
                    signer: Some(SigningKey::generate()),
                    ..Hop::default()
                };
                a.call_with(&relay, "GET", "/v2/relay/items", b"", &hop, &[])
            },
        ),
        row(
            "not found, unsigned",
            Expect::Body(404, json!({"error": "not found"})),
            || relay.get("/v2/relay/nothing"),
        ),
        row(
            "not found, signed",
            Expect::Body(404, json!({"error": "not found"})),
            || a.get(&relay, "/v2/relay/nothing"),
        ),
        row(
            "request body too large (enrol cap 8,192 bytes)",
            Expect::Body(413, json!({"error": "request body too large"})),
            || relay.post("/v1/relay/enrol", &vec![b' '; 8_193]),
        ),
        row("malformed JSON", Expect::AnyError(400), || {
            relay.post("/v1/relay/enrol", b"{nope")
        }),
        // Challenge (the reference's texts; no `code` on this route).
        row(
            "challenge: host and pubkey required",
            Expect::Body(400, json!({"error": "host and pubkey required"})),
            || relay.post_json("/v1/relay/challenge", &json!({"pubkey": pk})),
        ),
        row(
            "challenge: bad host name",
            Expect::Body(400, json!({"error": "bad host name"})),
            || {
                relay.post_json(
                    "/v1/relay/challenge",
                    &json!({"host": "no spaces", "pubkey": pk}),
                )
            },
        ),
        row(
            "challenge: bad host key",
            Expect::Body(400, json!({"error": "bad host key"})),
            || {
                relay.post_json(
                    "/v1/relay/challenge",
                    &json!({"host": "ok", "pubkey": "abc"}),
                )
            },
        ),
        row(
            "capacity",
            Expect::Body(
                503,
                json!({"error": "relay enrolment capacity reached", "code": "FULL"}),
            ),
            || Host::new("one-too-many").try_enrol(&small, ""),
        ),
        row(
            "challenge: too many open",
            Expect::Body(
                503,
                json!({"error": "too many open enrolment challenges; retry later"}),
            ),
            || {
                Host::new("first").challenge(&small).ok();
                Host::new("second").challenge(&small)
            },
        ),
        // Enrolment.
        row(
            "incomplete enrolment",
            Expect::Body(400, json!({"error": "incomplete enrolment"})),
            || {
                let h = Host::new("inc");
                let mut body = h.enrol_body(&challenge_of(&relay, &h), "", None);
                body.as_object_mut().unwrap().remove("owner_fp");
                relay.post_json("/v1/relay/enrol", &body)
            },
        ),
        row(
            "bad enrolment fields",
            Expect::Body(
                400,
                json!({"error": "bad enrolment fields", "code": "BAD_REQUEST"}),
            ),
            || {
                let h = Host::new("badf");
                let ch = challenge_of(&relay, &h);
                relay.post_json("/v1/relay/enrol", &h.enrol_body(&ch, "has space", None))
            },
        ),
        row(
            "no pending enrolment challenge",
            Expect::Body(401, json!({"error": "no pending enrolment challenge"})),
            || {
                let h = Host::new("nochal");
                relay.post_json(
                    "/v1/relay/enrol",
                    &h.enrol_body("AAAAAAAAAAAAAAAAAAAAAA", "", None),
                )
            },
        ),
        row(
            "bad enrolment signature",
            Expect::Body(401, json!({"error": "bad enrolment signature"})),
            || {
                let h = Host::new("badsig");
                let ch = challenge_of(&relay, &h);
                let other = SigningKey::generate();
                relay.post_json("/v1/relay/enrol", &h.enrol_body(&ch, "", Some(&other)))
            },
        ),
        row(
            "revoked",
            Expect::Body(
                403,
                json!({"error": "this host key was revoked on this relay", "code": "REVOKED"}),
            ),
            || {
                let old = Host::enrolled(&relay, "rot");
                let new = Host::new("rot");
                relay
                    .post_json(
                        "/v2/relay/rotate",
                        &rotation("rot", &old.key, &new.key, None, None),
                    )
                    .ok();
                old.try_enrol(&relay, "")
            },
        ),
        // Rotation (each refusal as the reference words it).
        row(
            "rotation: no rotation",
            Expect::Body(
                404,
                json!({"error": "the rotated key is not enrolled here"}),
            ),
            || relay.post_json("/v2/relay/rotate", &json!({})),
        ),
        row(
            "rotation: old key unknown",
            Expect::Body(
                404,
                json!({"error": "the rotated key is not enrolled here"}),
            ),
            || {
                let (old, new) = (Host::new("rx"), Host::new("rx"));
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("rx", &old.key, &new.key, None, None),
                )
            },
        ),
        row(
            "rotation: not a rotation record",
            Expect::Body(400, json!({"error": "not a rotation record"})),
            || {
                let (old, new) = (Host::enrolled(&relay, "r1"), Host::new("r1"));
                let mut body = rotation("r1", &old.key, &new.key, None, None);
                let rec = body["rotation"]["rec"].as_object_mut().unwrap();
                rec.remove("new_enc_pub");
                let rec = Value::Object(rec.clone());
                body = rotation_from_rec(&rec, &old.key, &new.key);
                relay.post_json("/v2/relay/rotate", &body)
            },
        ),
        row(
            "rotation: same key",
            Expect::Body(400, json!({"error": "rotation keeps the same host key"})),
            || {
                let old = Host::enrolled(&relay, "r2");
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("r2", &old.key, &old.key, None, None),
                )
            },
        ),
        row(
            "rotation: old signature",
            Expect::Body(
                400,
                json!({"error": "rotation is not signed by the pinned host key"}),
            ),
            || {
                let (old, new) = (Host::enrolled(&relay, "r3"), Host::new("r3"));
                let forger = SigningKey::generate();
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("r3", &old.key, &new.key, Some(&forger), None),
                )
            },
        ),
        row(
            "rotation: new signature",
            Expect::Body(
                400,
                json!({"error": "rotation is not signed by the new host key"}),
            ),
            || {
                let (old, new) = (Host::enrolled(&relay, "r4"), Host::new("r4"));
                let forger = SigningKey::generate();
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("r4", &old.key, &new.key, None, Some(&forger)),
                )
            },
        ),
        row(
            "rotation: another host",
            Expect::Body(400, json!({"error": "rotation names another host"})),
            || {
                let (old, new) = (Host::enrolled(&relay, "r5"), Host::new("r5"));
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("r5-other", &old.key, &new.key, None, None),
                )
            },
        ),
        row(
            "rotation: new key revoked",
            Expect::Body(409, json!({"error": "the new key was revoked here"})),
            || {
                let (old, new) = (Host::enrolled(&relay, "r6"), Host::new("r6"));
                relay
                    .post_json(
                        "/v2/relay/rotate",
                        &rotation("r6", &old.key, &new.key, None, None),
                    )
                    .ok();
                let m = Host::enrolled(&relay, "r7");
                relay.post_json(
                    "/v2/relay/rotate",
                    &rotation("r7", &m.key, &old.key, None, None),
                )
            },
        ),
        row(
            "enrolment calls over the window",
            Expect::Body(
                429,
                json!({"error": "too many enrolment calls; retry in a minute"}),
            ),
            || {
                let h = Host::new("rate");
                for _ in 0..2 {
                    h.challenge(&one_call).ok();
                }
                h.challenge(&one_call)
            },
        ),
        row(
            "denied without a reason",
            Expect::Body(
                403,
                json!({"error": "enrolment not authorized", "code": "DENIED"}),
            ),
            || enrol_proof(&stub, &Host::new("d1"), json!({"deny": null})),
        ),
        row(
            "denied with a reason",
            Expect::Body(
                403,
                json!({"error": "enrolment not authorized: not on the list", "code": "DENIED"}),
            ),
            || enrol_proof(&stub, &Host::new("d2"), json!({"deny": "not on the list"})),
        ),
        row(
            "denied, reason cut to 200 characters",
            Expect::Body(
                403,
                json!({
                    "error": format!("enrolment not authorized: {}", "x".repeat(200)),
                    "code": "DENIED"
                }),
            ),
            || enrol_proof(&stub, &Host::new("d3"), json!({"deny": "x".repeat(201)})),
        ),
        row(
            "denied, authority unavailable",
            Expect::Body(
                403,
                json!({
                    "error": "enrolment not authorized: the enrolment authority is unavailable",
                    "code": "DENIED"
                }),
            ),
            || enrol_proof(&stub, &Host::new("d4"), json!({"fail": true})),
        ),
        row(
            "name taken inside the account",
            Expect::Body(
                409,
                json!({
                    "error": "host name twin is already enrolled in this account with another key",
                    "code": "NAME_TAKEN"
                }),
            ),
            || {
                enrol_proof(&stub, &Host::new("twin"), json!({"account": "acme"})).ok();
                enrol_proof(&stub, &Host::new("twin"), json!({"account": "acme"}))
            },
        ),
        // Encryption-key fetch.
        row(
            "unknown host, by key",
            Expect::Body(404, json!({"error": "unknown host"})),
            || {
                a.get(
                    &relay,
                    &format!("/v2/relay/enc-key?pubkey={}", urlenc(&b.pubkey())),
                )
            },
        ),
        row(
            "unknown host, by name",
            Expect::Body(404, json!({"error": "unknown host"})),
            || a.get(&relay, "/v1/relay/enc-key?host=nobody"),
        ),
        // Pull and ack.
        row(
            "pull with another epoch",
            Expect::Body(409, json!({"error": EPOCH_CHANGED, "epoch": epoch})),
            || a.pull(&relay, "?epoch=not-the-epoch"),
        ),
        row(
            "pull with an empty epoch",
            Expect::Body(409, json!({"error": EPOCH_CHANGED, "epoch": epoch})),
            || a.pull(&relay, "?after=0&epoch="),
        ),
        row(
            "ack with another epoch",
            Expect::Fields(
                409,
                &["error", "code", "epoch", "head_seq"],
                json!({"error": EPOCH_CHANGED, "code": "EPOCH", "epoch": epoch}),
            ),
            || a.ack(&relay, "not-the-epoch", json!(0)),
        ),
        row(
            "ack without an epoch",
            Expect::Fields(
                409,
                &["error", "code", "epoch", "head_seq"],
                json!({"error": EPOCH_CHANGED, "code": "EPOCH", "epoch": epoch}),
            ),
            || a.post_json(&relay, "/v2/relay/ack", &json!({"through": 0})),
        ),
        row(
            "ack past the head",
            Expect::Fields(
                400,
                &["error", "code", "epoch", "head_seq"],
                json!({
                    "error": "ack beyond the last allocated seq: treat as an epoch change",
                    "code": "BAD_ACK",
                    "epoch": epoch,
                }),
            ),
            || a.ack(&relay, &epoch, json!(u64::MAX >> 12)),
        ),
        row(
            "ack through not an integer",
            Expect::Fields(
                400,
                &["error", "code", "epoch", "head_seq"],
                json!({
                    "error": "ack through is not a non-negative integer",
                    "code": "BAD_ACK",
                    "epoch": epoch,
                    "head_seq": 0,
                }),
            ),
            || a.ack(&relay, &epoch, json!(1.5)),
        ),
        row(
            "push: not an array",
            Expect::Body(
                400,
                json!({"error": "batch must be an array of at most 200"}),
            ),
            || a.post_json(&relay, "/v2/relay/items", &json!({"items": {}})),
        ),
        row(
            "push: over max_batch",
            Expect::Body(
                400,
                json!({"error": "batch must be an array of at most 200"}),
            ),
            || {
                let it = envelope_item(&a, &[&b]);
                a.post_json(
                    &relay,
                    "/v2/relay/items",
                    &json!({ "items": vec![it; 201] }),
                )
            },
        ),
        // Push rejections (§3 "Push", §5, §7), in the protocol's order.
        row(
            "rejected:rate",
            Expect::Rejected("rejected:rate".into()),
            || {
                let it = || envelope_item(&solo, &[&solo]);
                push(&small, &solo, &it());
                push(&small, &solo, &it())
            },
        ),
        row(
            "rejected:bad item id",
            Expect::Rejected("rejected:bad item id".into()),
            || {
                push(
                    &relay,
                    &a,
                    &edit(&envelope_item(&a, &[&b]), &["item_id"], Some(json!(""))),
                )
            },
        ),
        row(
            "rejected:bad kind",
            Expect::Rejected("rejected:bad kind".into()),
            || {
                push(
                    &relay,
                    &a,
                    &edit(&envelope_item(&a, &[&b]), &["kind"], Some(json!("letter"))),
                )
            },
        ),
        row(
            "rejected:bad targets",
            Expect::Rejected("rejected:bad targets".into()),
            || {
                push(
                    &relay,
                    &a,
                    &edit(&envelope_item(&a, &[&b]), &["targets"], Some(json!([]))),
                )
            },
        ),
        row(
            "rejected:target not enrolled",
            Expect::Rejected("rejected:target not enrolled".into()),
            || push(&relay, &a, &envelope_item(&a, &[&Host::new("stranger")])),
        ),
        row(
            "rejected:sender not accepted by target",
            Expect::Rejected("rejected:sender not accepted by target".into()),
            || {
                let picky = Host::enrolled(&relay, "picky");
                picky.publish_senders(&relay, &[b.pubkey()], now_ms()).ok();
                push(&relay, &a, &envelope_item(&a, &[&picky]))
            },
        ),
        row(
            "rejected:duplicate target",
            Expect::Rejected("rejected:duplicate target".into()),
            || push(&relay, &a, &envelope_item(&a, &[&b, &b])),
        ),
        row(
            "rejected:bad wire",
            Expect::Rejected("rejected:bad wire".into()),
            || {
                let it = envelope_item(&a, &[&b]);
                push(
                    &relay,
                    &a,
                    &edit(
                        &it,
                        &["targets"],
                        Some(json!([{"host_pubkey": b.pubkey(), "wire_b64": "!!!"}])),
                    ),
                )
            },
        ),
        row(
            "rejected:bad wire (not JSON)",
            Expect::Rejected("rejected:bad wire".into()),
            || {
                let id = ulid();
                push(
                    &relay,
                    &a,
                    &item("envelope", &id, &[(b.pubkey(), b"not json".to_vec())]),
                )
            },
        ),
        row(
            "rejected:bad wire (receipt not JSON)",
            Expect::Rejected("rejected:bad wire".into()),
            || {
                push(
                    &relay,
                    &a,
                    &item("receipt", "receipt:x:y@z:1", &[(b.pubkey(), b"{".to_vec())]),
                )
            },
        ),
        row(
            "rejected:item over size limit",
            Expect::Rejected("rejected:item over size limit".into()),
            || push(&relay, &a, &envelope_item_sized(&a, &[&b], 524_289)),
        ),
        row(
            "rejected:conflict",
            Expect::Rejected("rejected:conflict".into()),
            || {
                let q = Host::enrolled(&relay, "conflicted");
                let first = envelope_item(&a, &[&q]);
                push(&relay, &a, &first).ok();
                let id = first["item_id"].as_str().unwrap();
                let other = envelope_wire(id, &a, &[&q]);
                push(&relay, &a, &item("envelope", id, &[(q.pubkey(), other)]))
            },
        ),
        row(
            "rejected:quota:<which>",
            Expect::Rejected("rejected:quota:target queue items".into()),
            || {
                let q = Host::enrolled(&relay, "full-queue");
                for _ in 0..3 {
                    push(&relay, &a, &envelope_item(&a, &[&q])).ok();
                }
                push(&relay, &a, &envelope_item(&a, &[&q]))
            },
        ),
        row(
            "rejected:item id is not the envelope id",
            Expect::Rejected("rejected:item id is not the envelope id".into()),
            || {
                let env = envelope_to(&a, &[b.name.as_str()]);
                let mut it = envelope_item_of(&env, &b);
                it["item_id"] = json!(ulid());
                push(&relay, &a, &it)
            },
        ),
        row(
            "rejected:envelope body is not sealed",
            Expect::Rejected("rejected:envelope body is not sealed".into()),
            || {
                let env = edit(
                    &envelope_to(&a, &[b.name.as_str()]),
                    &["enc"],
                    Some(Value::Null),
                );
                push(&relay, &a, &envelope_item_of(&env, &b))
            },
        ),
        row(
            "rejected:bad receipt",
            Expect::Rejected("rejected:bad receipt".into()),
            || {
                let rec = edit(
                    &receipt_record(&ulid(), "agent@txt-a", 1),
                    &["state"],
                    Some(json!("eaten")),
                );
                let wire = receipt_wire(&rec, &a.key);
                push(
                    &relay,
                    &a,
                    &item("receipt", &receipt_item_id(&rec), &[(b.pubkey(), wire)]),
                )
            },
        ),
        row(
            "rejected:item id is not the receipt id",
            Expect::Rejected("rejected:item id is not the receipt id".into()),
            || {
                let rec = receipt_record(&ulid(), "agent@txt-a", 1);
                let wire = receipt_wire(&rec, &a.key);
                push(
                    &relay,
                    &a,
                    &item("receipt", "receipt:other", &[(b.pubkey(), wire)]),
                )
            },
        ),
        row(
            "rejected:receipt is not signed by the sending host",
            Expect::Rejected("rejected:receipt is not signed by the sending host".into()),
            || {
                let rec = receipt_record(&ulid(), "agent@txt-a", 1);
                let wire = receipt_wire(&rec, &SigningKey::generate());
                push(
                    &relay,
                    &a,
                    &item("receipt", &receipt_item_id(&rec), &[(b.pubkey(), wire)]),
                )
            },
        ),
        // Legacy v1 mail: the reference's texts, byte for byte.
        row(
            "v1: recipient host not enrolled",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "recipient host not enrolled: nowhere"}),
            ),
            || v1_push(&relay, &a, &[envelope_to(&a, &["nowhere"])]),
        ),
        row(
            "v1: recipient host ambiguous",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "recipient host ambiguous: pair (several hosts use that name here; upgrade to address hosts by key)"}),
            ),
            || {
                Host::enrolled(&relay, "pair");
                Host::enrolled(&relay, "PAIR");
                v1_push(&relay, &a, &[envelope_to(&a, &["pair"])])
            },
        ),
        row(
            "v1: ambiguous after one stored",
            Expect::Body(
                200,
                json!({"stored": 1, "error": "recipient host ambiguous: pair (several hosts use that name here; upgrade to address hosts by key)"}),
            ),
            || {
                v1_push(
                    &relay,
                    &a,
                    &[envelope_to(&a, &["txt-b"]), envelope_to(&a, &["pair"])],
                )
            },
        ),
        row(
            "v1: sender not accepted by <host>",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "sender not accepted by v1-picky"}),
            ),
            || {
                let picky = Host::enrolled(&relay, "v1-picky");
                picky.publish_senders(&relay, &[b.pubkey()], now_ms()).ok();
                v1_push(&relay, &a, &[envelope_to(&a, &["v1-picky"])])
            },
        ),
        row(
            "v1: envelope over size limit",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "envelope over size limit"}),
            ),
            || {
                let env = envelope_to(&a, &["txt-b"]);
                let padded: Value = serde_json::from_slice(&pad_json_to(&env, 524_289)).unwrap();
                v1_push(&relay, &a, &[padded])
            },
        ),
        row(
            "v1: bad envelope",
            Expect::Body(413, json!({"stored": 0, "error": "bad envelope: bad kind"})),
            || {
                v1_push(
                    &relay,
                    &a,
                    &[edit(
                        &envelope_to(&a, &["txt-b"]),
                        &["kind"],
                        Some(json!("x")),
                    )],
                )
            },
        ),
        row(
            "v1: batch over limit",
            Expect::Body(413, json!({"stored": 0, "error": "batch over limit 200"})),
            || {
                let env = envelope_to(&a, &["txt-b"]);
                v1_push(&relay, &a, &vec![env; 201])
            },
        ),
        row(
            "v1: queue depth exceeded",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "queue depth exceeded for v1-Full"}),
            ),
            || {
                Host::enrolled(&relay, "v1-Full");
                for _ in 0..3 {
                    v1_push(&relay, &a, &[envelope_to(&a, &["v1-Full"])]).ok();
                }
                v1_push(&relay, &a, &[envelope_to(&a, &["v1-full"])])
            },
        ),
        row(
            "v1: bad batch",
            Expect::Body(400, json!({"error": "bad batch"})),
            || a.call_v1(&relay, "POST", "/v1/relay/messages", br#"{"envelopes":{}}"#),
        ),
        row(
            "v1: push rate exceeded",
            Expect::Body(
                413,
                json!({"stored": 0, "error": "push rate exceeded (1/min)"}),
            ),
            || v1_push(&small, &solo, &[envelope_to(&solo, &["solo"])]),
        ),
    ];
    for (path, new, why) in envelope_whys() {
        let (env, why) = if why == "__plain_body__" {
            // Without `enc`, the plain body cap applies (and then the item is not sealed).
            let env = edit(&envelope_to(&a, &[b.name.as_str()]), &["enc"], new.clone());
            (
                edit(&env, &["body"], Some(json!("é".repeat(131_073)))),
                "body over 262144 bytes",
            )
        } else {
            (
                edit(&envelope_to(&a, &[b.name.as_str()]), path, new.clone()),
                why,
            )
        };
        let status = format!("rejected:bad envelope: {why}");
        let to = &b;
        let relay = &relay;
        let a = &a;
        rows.push(row(
            format!("§5 {status}"),
            Expect::Rejected(status),
            move || push(relay, a, &envelope_item_of(&env, to)),
        ));
    }
    check(rows);
}

/// Percent-encode a base64 key for a query string.
fn urlenc(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// A v2 enc-key ad of `h` (valid unless changed), lifetime `iat`..`exp` in ms.
fn enc_ad(h: &Host, iat: i64, exp: i64) -> Value {
    json!({
        "v": 2, "type": "enc-ad", "host": h.name, "host_pubkey": h.pubkey(),
        "enc_pub": b64(&random_bytes(32)), "iat": iso(iat), "exp": iso(exp),
    })
}

fn publish_ad(relay: &Relay, h: &Host, ad: &Value, signer: &SigningKey) -> Response {
    let sig = signer.sign(canonical_json(ad).as_bytes());
    h.post_json(relay, "/v2/relay/enc-key", &json!({"ad": ad, "sig": sig}))
}

/// The enc-key publish (v1 and v2), sender-list and 413-drain texts.
fn publish_and_oversize_texts_are_the_references(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "other-a");
    let b = Host::enrolled(&relay, "other-b");
    let now = now_ms();
    const DAY: i64 = 86_400_000;
    let refused = |why: &str| {
        Expect::Body(
            400,
            json!({ "error": format!("enc-key ad refused: {why}") }),
        )
    };
    let mut rows = vec![
        // v1 enc-key publish.
        row(
            "v1 enc-key: enc_pub and sig required",
            Expect::Body(400, json!({"error": "enc_pub and sig required"})),
            || {
                a.post_json(
                    &relay,
                    "/v1/relay/enc-key",
                    &json!({"enc_pub": b64(&[1u8; 32])}),
                )
            },
        ),
        row(
            "v1 enc-key: bad enc-key signature",
            Expect::Body(401, json!({"error": "bad enc-key signature"})),
            || {
                a.post_json(
                    &relay,
                    "/v1/relay/enc-key",
                    &json!({"enc_pub": b64(&[1u8; 32]), "sig": b64(&[0u8; 64])}),
                )
            },
        ),
        // v2 enc-key ads, each reason in the protocol's order.
        row("v2 ad: unsigned", refused("unsigned"), || {
            a.post_json(
                &relay,
                "/v2/relay/enc-key",
                &json!({"ad": enc_ad(&a, now, now + 30 * DAY)}),
            )
        }),
        row("v2 ad: malformed", refused("malformed"), || {
            publish_ad(
                &relay,
                &a,
                &edit(&enc_ad(&a, now, now + 30 * DAY), &["v"], Some(json!(1))),
                &a.key,
            )
        }),
        row("v2 ad: wrong peer", refused("wrong peer"), || {
            publish_ad(&relay, &a, &enc_ad(&b, now, now + 30 * DAY), &b.key)
        }),
        row("v2 ad: bad signature", refused("bad signature"), || {
            publish_ad(&relay, &a, &enc_ad(&a, now, now + 30 * DAY), &b.key)
        }),
        row("v2 ad: malformed date", refused("malformed"), || {
            let ad = edit(
                &enc_ad(&a, now, now + DAY),
                &["iat"],
                Some(json!("not a date")),
            );
            publish_ad(&relay, &a, &ad, &a.key)
        }),
        row("v2 ad: not yet valid", refused("not yet valid"), || {
            publish_ad(&relay, &a, &enc_ad(&a, now + 600_000, now + DAY), &a.key)
        }),
        row("v2 ad: expired", refused("expired"), || {
            publish_ad(&relay, &a, &enc_ad(&a, now - 2 * DAY, now - 1_000), &a.key)
        }),
        row(
            "v2 ad: lifetime over the maximum",
            refused("lifetime over the maximum"),
            || publish_ad(&relay, &a, &enc_ad(&a, now, now + 91 * DAY), &a.key),
        ),
        // Sender lists.
        row(
            "sender list: malformed",
            Expect::Body(400, json!({"error": "bad sender list"})),
            || {
                let mut body = a.sender_list(&[b.pubkey()], now);
                body["list"]["senders"] = json!("everyone");
                a.post_json(&relay, "/v2/relay/senders", &body)
            },
        ),
        row(
            "sender list: for another key, validly signed by it",
            Expect::Body(400, json!({"error": "bad sender list"})),
            || {
                a.post_json(
                    &relay,
                    "/v2/relay/senders",
                    &b.sender_list(&[a.pubkey()], now),
                )
            },
        ),
        row(
            "sender list: iat in the future",
            Expect::Body(400, json!({"error": "sender list iat is in the future"})),
            || a.publish_senders(&relay, &[b.pubkey()], now + 600_000),
        ),
        row(
            "sender list: not signed by the target",
            Expect::Body(
                401,
                json!({"error": "sender list is not signed by the target"}),
            ),
            || {
                let mut body = a.sender_list(&[b.pubkey()], now);
                body["sig"] = json!(b.key.sign(b"something else"));
                a.post_json(&relay, "/v2/relay/senders", &body)
            },
        ),
        row(
            "sender list: no sig",
            Expect::Body(
                401,
                json!({"error": "sender list is not signed by the target"}),
            ),
            || {
                let body = json!({ "list": a.sender_list(&[b.pubkey()], now)["list"] });
                a.post_json(&relay, "/v2/relay/senders", &body)
            },
        ),
        row(
            "sender list: a newer one is stored",
            Expect::Body(
                409,
                json!({"error": "a newer sender list is already stored"}),
            ),
            || {
                a.publish_senders(&relay, &[b.pubkey()], now).ok();
                a.publish_senders(&relay, &[b.pubkey()], now - 60_000)
            },
        ),
    ];
    // The 413 is read by a client that writes its whole oversized body before reading.
    for chunked in [false, true] {
        let relay = &relay;
        rows.push(row(
            format!("413 then drain (chunked: {chunked})"),
            Expect::Body(413, json!({"error": "request body too large"})),
            move || {
                let body = vec![b' '; 1 << 20];
                let mut raw = if chunked {
                    b"POST /v1/relay/enrol HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n".to_vec()
                } else {
                    format!("POST /v1/relay/enrol HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\r\n", body.len()).into_bytes()
                };
                if chunked {
                    for c in body.chunks(64 * 1024) {
                        raw.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                        raw.extend_from_slice(c);
                        raw.extend_from_slice(b"\r\n");
                    }
                    raw.extend_from_slice(b"0\r\n\r\n");
                } else {
                    raw.extend_from_slice(&body);
                }
                let got = send_raw(relay.addr(), &raw).expect("the client reads an answer");
                parse_response(&got).expect("an HTTP answer")
            },
        ));
    }
    check(rows);
}

backend_tests! {
    ;
    postgres ignored:
    quoted_texts_are_the_references,
    publish_and_oversize_texts_are_the_references,
}
