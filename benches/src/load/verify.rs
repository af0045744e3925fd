//! Checking push answers off the timed path: one result per item, in order, and for each accepted
//! item an accept statement that names this relay, epoch, sender, item, target, seq and the exact
//! wire hash, signed by the relay key from `/v2/relay/info`.

use serde_json::Value;

use super::client::{Host, Resp};
use super::hosts::RelayInfo;
use super::payload::{Item, Target};
use super::stats::Errors;
use relay_wire::canonical::canonical_bytes;
use relay_wire::keys::verify_with;

/// What one sender's answers add up to.
#[derive(Default)]
pub(super) struct Tally {
    pub accepted: u64,
    pub accepted_bytes: u64,
    /// Accepted items per target index (what each receiver should drain).
    pub per_target: Vec<u64>,
    pub errors: Errors,
}

impl Tally {
    pub(super) fn new(targets: usize) -> Self {
        Tally {
            per_target: vec![0; targets],
            ..Tally::default()
        }
    }

    pub(super) fn merge(&mut self, o: &Tally) {
        self.accepted += o.accepted;
        self.accepted_bytes += o.accepted_bytes;
        for (a, b) in self.per_target.iter_mut().zip(&o.per_target) {
            *a += b;
        }
        self.errors.merge(&o.errors);
    }
}

/// Whether `s` is the lowercase hex of `b` (no string built per check).
fn is_hex_of(s: &str, b: &[u8; 32]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    s.len() == 64
        && s.as_bytes().chunks_exact(2).zip(b).all(|(c, x)| {
            c[0] == DIGITS[usize::from(x >> 4)] && c[1] == DIGITS[usize::from(x & 15)]
        })
}

/// Why an accepted result's statement is not the one we expect, if it is not.
fn accept_problem(
    info: &RelayInfo,
    sender: &Host,
    target: &Target,
    item: &Item,
    res: &Value,
) -> Option<&'static str> {
    let a = res.get("accept")?;
    let s = |k: &str| a.get(k).and_then(Value::as_str);
    if a.get("v").and_then(Value::as_u64) != Some(1) || s("type") != Some("relay-accept") {
        return Some("accept: not a relay-accept v1");
    }
    if s("relay_pubkey") != Some(info.relay_pubkey_b64.as_str()) {
        return Some("accept: wrong relay_pubkey");
    }
    if s("epoch") != Some(info.epoch.as_str()) {
        return Some("accept: wrong epoch");
    }
    if s("sender_pubkey") != Some(sender.pub_b64.as_str()) || s("item_id") != Some(item.id.as_str())
    {
        return Some("accept: wrong sender or item");
    }
    let (Some([t]), Some([brief])) = (
        a.get("targets")
            .and_then(Value::as_array)
            .map(Vec::as_slice),
        res.get("targets")
            .and_then(Value::as_array)
            .map(Vec::as_slice),
    ) else {
        return Some("accept: wrong targets");
    };
    let seq = t.get("seq").and_then(Value::as_u64);
    if t.get("host_pubkey").and_then(Value::as_str) != Some(target.host.pub_b64.as_str())
        || seq.is_none()
        || seq != brief.get("seq").and_then(Value::as_u64)
        || brief.get("host_pubkey") != t.get("host_pubkey")
    {
        return Some("accept: wrong targets");
    }
    if !t
        .get("wire_hash")
        .and_then(Value::as_str)
        .is_some_and(|h| is_hex_of(h, &item.hash))
    {
        return Some("accept: wrong wire_hash");
    }
    if s("at").is_none() {
        return Some("accept: no at");
    }
    let sig = res.get("sig").and_then(Value::as_str).unwrap_or("");
    // Strict single verification with the key decoded once.
    if !verify_with(&info.relay_key, &canonical_bytes(a), sig) {
        return Some("accept: bad signature");
    }
    None
}

/// Tally one request's answer for the `items` it carried.
pub(super) fn check_answer(
    info: &RelayInfo,
    sender: &Host,
    targets: &[Target],
    items: &[Item],
    answer: &Result<Resp, String>,
    tally: &mut Tally,
) {
    let n = items.len() as u64;
    let resp = match answer {
        Err(kind) => return tally.errors.add(kind, n),
        Ok(r) if r.status != 200 => return tally.errors.add(&r.error_kind(), n),
        Ok(r) => r,
    };
    let parsed: Option<Value> = serde_json::from_str(&resp.body).ok();
    let results = match parsed
        .as_ref()
        .and_then(|v| v.get("results"))
        .and_then(Value::as_array)
    {
        Some(r) if r.len() == items.len() => r,
        _ => return tally.errors.add("bad response: not one result per item", n),
    };
    for (res, item) in results.iter().zip(items) {
        if res.get("item_id").and_then(Value::as_str) != Some(item.id.as_str()) {
            tally.errors.add("bad response: results out of order", 1);
            continue;
        }
        match res.get("status").and_then(Value::as_str) {
            Some("accepted") => {
                match accept_problem(info, sender, &targets[item.target], item, res) {
                    None => {
                        tally.accepted += 1;
                        tally.accepted_bytes += u64::from(item.bytes);
                        tally.per_target[item.target] += 1;
                    }
                    Some(why) => tally.errors.add(why, 1),
                }
            }
            // A fresh ULID is never a duplicate: the relay mixed items up.
            Some("duplicate") => tally.errors.add("duplicate", 1),
            Some(s) => tally.errors.add(&super::client::truncate(s, 80), 1),
            None => tally.errors.add("bad response: no status", 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::defaults;
    use relay_wire::accept::{accept_statement, AcceptTarget};
    use relay_wire::keys::SigningKey;
    use serde_json::json;

    fn setup() -> (SigningKey, RelayInfo, Host, Vec<Target>, Item) {
        let relay = SigningKey::generate();
        let info = RelayInfo {
            relay_pubkey_b64: relay.public_b64(),
            relay_key: relay_wire::keys::verifying_key(&relay.public()).unwrap(),
            epoch: "e".into(),
            version: String::new(),
            max_batch: defaults::MAX_BATCH,
            max_pull: defaults::MAX_PULL,
            max_item_bytes: defaults::MAX_ITEM_BYTES,
        };
        let sender = Host::generate("s".into());
        let targets = vec![Target::new(Host::generate("t".into()))];
        let item = Item {
            id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            target: 0,
            hash: [7; 32],
            bytes: 10,
        };
        (relay, info, sender, targets, item)
    }

    fn result(
        relay: &SigningKey,
        info: &RelayInfo,
        sender: &Host,
        t: &Target,
        item: &Item,
        hash: [u8; 32],
    ) -> Value {
        let tgt = AcceptTarget {
            host_pubkey: t.host.pub_b64.clone(),
            seq: 5,
            wire_hash: hash.iter().map(|x| format!("{x:02x}")).collect(),
        };
        let a = accept_statement(
            &info.relay_pubkey_b64,
            &info.epoch,
            &sender.pub_b64,
            &item.id,
            &[tgt],
            1,
        );
        let sig = relay.sign_canonical(&a);
        json!({"item_id": item.id, "status": "accepted", "targets": [{"host_pubkey": t.host.pub_b64, "seq": 5}], "accept": a, "sig": sig})
    }

    fn run(res: Value, info: &RelayInfo, sender: &Host, targets: &[Target], item: &Item) -> Tally {
        let mut tally = Tally::new(1);
        let body = json!({"results": [res]}).to_string();
        let items = [Item {
            id: item.id.clone(),
            ..*item
        }];
        check_answer(
            info,
            sender,
            targets,
            &items,
            &Ok(Resp { status: 200, body }),
            &mut tally,
        );
        tally
    }

    #[test]
    fn good_accept_counts_and_bad_ones_are_errors() {
        let (relay, info, sender, targets, item) = setup();
        let ok = run(
            result(&relay, &info, &sender, &targets[0], &item, item.hash),
            &info,
            &sender,
            &targets,
            &item,
        );
        assert_eq!(
            (
                ok.accepted,
                ok.accepted_bytes,
                ok.per_target[0],
                ok.errors.0.len() as u64
            ),
            (1, 10, 1, 0)
        );

        let wrong_hash = run(
            result(&relay, &info, &sender, &targets[0], &item, [8; 32]),
            &info,
            &sender,
            &targets,
            &item,
        );
        assert_eq!(wrong_hash.accepted, 0);
        assert_eq!(wrong_hash.errors.0["accept: wrong wire_hash"], 1);

        let other = SigningKey::generate();
        let forged = run(
            result(&other, &info, &sender, &targets[0], &item, item.hash),
            &info,
            &sender,
            &targets,
            &item,
        );
        assert_eq!(forged.errors.0["accept: bad signature"], 1);

        let rejected = run(
            json!({"item_id": item.id, "status": "rejected:rate", "targets": []}),
            &info,
            &sender,
            &targets,
            &item,
        );
        assert_eq!(rejected.errors.0["rejected:rate"], 1);
    }

    #[test]
    fn hex_check_is_exact() {
        let mut b = [0u8; 32];
        b[0] = 0xab;
        b[31] = 0x0f;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        assert!(is_hex_of(&h, &b));
        assert!(!is_hex_of(&h.to_uppercase(), &b));
        assert!(!is_hex_of(&h[..62], &b));
        assert!(!is_hex_of(&format!("{h}00"), &b));
        b[31] = 0x0e;
        assert!(!is_hex_of(&h, &b));
    }

    #[test]
    fn transport_and_http_errors_count_every_item() {
        let (_, info, sender, targets, item) = setup();
        let items = [Item {
            id: item.id.clone(),
            ..item
        }];
        let mut t = Tally::new(1);
        check_answer(
            &info,
            &sender,
            &targets,
            &items,
            &Err("transport: refused".into()),
            &mut t,
        );
        let body = "{\"error\":\"bad relay hop\"}".to_string();
        check_answer(
            &info,
            &sender,
            &targets,
            &items,
            &Ok(Resp { status: 401, body }),
            &mut t,
        );
        assert_eq!(t.errors.0["transport: refused"], 1);
        assert_eq!(t.errors.0["http 401: bad relay hop"], 1);
    }
}
