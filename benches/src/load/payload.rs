//! Pre-built push payloads: valid sealed agentmbx v3 envelopes (ULID ids, body sealed for the
//! target's enc key, host-signed) of about the requested size, already laid out as the JSON body
//! of `POST /v2/relay/items`. Built before the timed phase; only the hop is signed at send time.

use mbx_host::message::{draft_envelope, ulid};
use relay_wire::accept::sha256;
use relay_wire::keys::b64;
use relay_wire::seal::{seal_envelope, EncSecret};

use super::client::{now_ms, Host};

/// Largest plaintext tried when sizing items (agentmbx bodies are at most 256 KiB).
const MAX_PLAIN: usize = 256 * 1024 - 16;

/// A push target: its host key (for `targets[].host_pubkey`) and enc key (to seal for it).
pub(super) struct Target {
    pub host: Host,
    pub enc_pub: [u8; 32],
}

impl Target {
    /// Wrap an enrolled host with a fresh enc key (the relay never sees the secret).
    pub(super) fn new(host: Host) -> Self {
        let enc_pub = EncSecret::generate().public();
        Target { host, enc_pub }
    }
}

/// One pushed item, remembered to check its accept statement.
pub(super) struct Item {
    pub id: String,
    pub target: usize,
    pub hash: [u8; 32],
    pub bytes: u32,
}

/// One request body and the items in it, in order.
pub(super) struct Batch {
    pub body: String,
    pub items: Vec<Item>,
}

/// The wire bytes of one sealed envelope from `sender` to `target` with `plain_len` bytes of body.
///
/// # Errors
/// Only if the host helpers refuse the draft (never for the sizes used here).
pub(super) fn envelope_wire(
    sender: &Host,
    target: &Target,
    plain_len: usize,
) -> Result<(String, Vec<u8>), String> {
    let now = now_ms();
    let id = ulid(now);
    let body = "x".repeat(plain_len);
    let draft = draft_envelope(&id, &sender.name, &target.host.name, "bench", &body, now)
        .map_err(|e| format!("cannot draft an envelope: {e}"))?;
    let sealed = seal_envelope(draft, &target.enc_pub, &sender.name, &sender.key)
        .map_err(|e| format!("cannot seal an envelope: {e}"))?;
    let wire =
        serde_json::to_vec(&sealed).map_err(|e| format!("cannot encode an envelope: {e}"))?;
    Ok((id, wire))
}

/// The plaintext length whose sealed envelope is closest to `want` wire bytes without going over
/// (at least 1 byte of body), and the wire size it gives. Wire size grows with the plaintext, so
/// a binary search over a few real seals finds it.
///
/// # Errors
/// From [`envelope_wire`].
pub(super) fn calibrate(
    sender: &Host,
    target: &Target,
    want: usize,
) -> Result<(usize, usize), String> {
    let size = |p: usize| envelope_wire(sender, target, p).map(|(_, w)| w.len());
    let (mut lo, mut hi) = (1usize, MAX_PLAIN);
    if size(lo)? >= want {
        return Ok((lo, size(lo)?));
    }
    // Invariant: size(lo) < want; find the largest lo with size(lo) <= want.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if size(mid)? <= want {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, size(lo)?))
}

/// `n` items from `sender` in batches of `batch`, item `j` (counting from `first`) going to
/// target `(offset + j) % targets.len()` — round robin, each sender starting elsewhere.
///
/// # Errors
/// From [`envelope_wire`].
pub(super) fn build_batches(
    sender: &Host,
    targets: &[Target],
    offset: usize,
    first: u64,
    n: u64,
    batch: usize,
    plain_len: usize,
) -> Result<Vec<Batch>, String> {
    let mut out = Vec::with_capacity((n as usize).div_ceil(batch.max(1)));
    let mut j = first;
    let end = first + n;
    while j < end {
        let k = (end - j).min(batch as u64);
        let mut body = String::from("{\"items\":[");
        let mut items = Vec::with_capacity(k as usize);
        for i in 0..k {
            let t = (offset + (j + i) as usize) % targets.len();
            let (id, wire) = envelope_wire(sender, &targets[t], plain_len)?;
            if i > 0 {
                body.push(',');
            }
            // ULIDs and base64 need no JSON escaping.
            body.push_str("{\"kind\":\"envelope\",\"item_id\":\"");
            body.push_str(&id);
            body.push_str("\",\"targets\":[{\"host_pubkey\":\"");
            body.push_str(&targets[t].host.pub_b64);
            body.push_str("\",\"wire_b64\":\"");
            body.push_str(&b64(&wire));
            body.push_str("\"}]}");
            items.push(Item {
                id,
                target: t,
                hash: sha256(&wire),
                bytes: wire.len() as u32,
            });
        }
        body.push_str("]}");
        out.push(Batch { body, items });
        j += k;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::envelope::check_envelope_wire;

    #[test]
    fn items_are_valid_sealed_envelopes_of_about_the_asked_size() {
        let sender = Host::generate("s0".into());
        let targets = vec![
            Target::new(Host::generate("t0".into())),
            Target::new(Host::generate("t1".into())),
        ];
        let (plain, size) = calibrate(&sender, &targets[0], 1024).unwrap();
        assert!(size <= 1024 && size > 1000, "size {size} plain {plain}");
        let batches = build_batches(&sender, &targets, 1, 0, 5, 2, plain).unwrap();
        assert_eq!(batches.len(), 3);
        assert_eq!(batches[2].items.len(), 1);
        let v: serde_json::Value = serde_json::from_str(&batches[0].body).unwrap();
        let items = v["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        for (it, meta) in items.iter().zip(&batches[0].items) {
            let wire =
                relay_wire::keys::unb64(it["targets"][0]["wire_b64"].as_str().unwrap()).unwrap();
            assert_eq!(sha256(&wire), meta.hash);
            assert!(check_envelope_wire(&wire, &meta.id).is_ok());
        }
        // Round robin from the offset: items 0, 1 go to targets 1, 0.
        assert_eq!(batches[0].items[0].target, 1);
        assert_eq!(batches[0].items[1].target, 0);
    }
}
