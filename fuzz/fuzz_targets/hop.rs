//! The signed-hop header set (`wire::hop` and `Relay::authenticate`), with arbitrary header
//! values, methods, paths, queries and bodies.
//!
//! Input fields (split at 0xFF): flags, host, key, ts, sig, method, path, query, body.
//! Oracles: no panic; a hop the harness signs correctly with an enrolled key and a fresh ts
//! authenticates as that key, whatever the method, path and (UTF-8) body; the same hop with a
//! different signature is refused; `verify_hop(sign_hop(x)) == true` for any fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mbx_relay_fuzz::{fields, now_ms, text, Fixture};
use relay_core::HopHeaders;
use relay_wire::hop::{hop_payload, sign_hop, signed_path, ts_fresh, verify_hop};
use relay_wire::keys::parse_pubkey;

fuzz_target!(|data: &[u8]| {
    let p = fields(data, 9);
    let flags = p[0].first().copied().unwrap_or(0);
    let (host, key, ts, sig) = (text(p[1]), text(p[2]), text(p[3]), text(p[4]));
    let (method, path, query) = (text(p[5]), text(p[6]), text(p[7]));
    let body_bytes = p[8];
    let body = text(body_bytes);
    let query = (flags & 1 == 1).then_some(query.as_str());
    let signed = signed_path(&path, query);
    let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);

    // Pure functions on arbitrary text.
    let _ = hop_payload(&method, &signed, &ts, &body);
    let _ = ts_fresh(&ts, now);
    let _ = ts_fresh(&ts, i64::MIN);
    let _ = ts_fresh(&ts, i64::MAX);
    if let Some(pk) = parse_pubkey(&key) {
        let _ = verify_hop(&pk, &method, &signed, &ts, &body, &sig);
    }

    let f = Fixture::get();
    let opt = |bit: u8, s: &str| -> Option<String> { (flags & bit != 0).then(|| s.to_owned()) };
    let (h, k, t, s) = (opt(2, &host), opt(4, &key), opt(8, &ts), opt(16, &sig));
    // Arbitrary headers: any answer but a panic.
    let _ = f.rt.block_on(f.relay.authenticate(&HopHeaders {
        host: h.as_deref(),
        key: k.as_deref(),
        ts: t.as_deref(),
        sig: s.as_deref(),
        method: &method,
        path: &signed,
        body: body_bytes,
    }));

    // A correctly signed hop by `alpha` over the fuzzed method, path and body.
    let fresh = now_ms().to_string();
    let good = sign_hop(&f.a, &method, &signed, &fresh, &body);
    assert!(verify_hop(
        &f.a.public(),
        &method,
        &signed,
        &fresh,
        &body,
        &good
    ));
    let a_pub = f.a.public_b64();
    let by_key = flags & 32 == 0;
    let hop = HopHeaders {
        host: Some("alpha"),
        key: by_key.then_some(a_pub.as_str()),
        ts: Some(&fresh),
        sig: Some(&good),
        method: &method,
        path: &signed,
        body: body.as_bytes(),
    };
    let caller = f.rt.block_on(f.relay.authenticate(&hop));
    assert!(
        caller.as_ref().is_ok_and(|c| c.key == f.a.public()),
        "a correct hop was refused: {caller:?}"
    );
    // Any other signature string is refused.
    if sig != good {
        let bad = HopHeaders {
            sig: Some(&sig),
            ..hop
        };
        assert!(
            f.rt.block_on(f.relay.authenticate(&bad)).is_err(),
            "a wrong signature was accepted"
        );
    }
});
