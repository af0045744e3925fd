//! Why an outbox row waits, in words a person can act on (`host status`, `host sync`): the state
//! name alone (`draft`, `pending`) says nothing about what is missing or when the next try is.

use super::enc_ad::Refusal;
use super::store::{ItemKind, OutRow, RowState};
use relay_wire::time::iso_ms;

/// Push refusals the relay names (docs/protocol.md §3 "Push"), as this host stores them.
const QUOTA: &str = "rejected:quota:";
const NOT_ACCEPTED: &str = "rejected:sender not accepted by target";
const NOT_ENROLLED: &str = "rejected:target not enrolled";
const RATE: &str = "rejected:rate";
/// How [`super::HostError::Network`] prints.
const UNREACHABLE: &str = "relay unreachable";

/// `HH:MM:SS` (UTC) when `at` is within a day of `now`, else the full ISO time.
fn when(at: u64, now: u64) -> String {
    let iso = iso_ms(at);
    if at.abs_diff(now) < 86_400_000 {
        iso.get(11..19).map_or(iso.clone(), |t| format!("{t} UTC"))
    } else {
        iso
    }
}

/// The next try: "at the next sync" when due, else when.
fn next_try(r: &OutRow, now: u64) -> String {
    if r.next_at <= now {
        "next try at the next sync".to_string()
    } else {
        format!("next try {}", when(r.next_at, now))
    }
}

/// Why an active row waits (`None` for settled rows).
pub(crate) fn why(r: &OutRow, now: u64) -> Option<String> {
    let peer = &r.target_name;
    let err = r.last_error.as_deref();
    let text = match (r.state, err) {
        (RowState::Draft, None) => {
            format!("waiting to be sealed: the next sync looks up {peer}'s enc ad on the relay")
        }
        (RowState::Draft, Some(e)) if e == Refusal::NoAd.to_string() => format!(
            "waiting for {peer}'s enc ad: {peer} has not published one on this relay yet \
             ({peer} publishes it on its first `host sync`); {}",
            next_try(r, now)
        ),
        (RowState::Draft, Some(e)) if e.starts_with(UNREACHABLE) => format!(
            "waiting for {peer}'s enc ad: the relay could not be reached ({e}); {}",
            next_try(r, now)
        ),
        (RowState::Draft, Some(e)) => {
            format!("waiting for {peer}'s enc ad: {e}; {}", next_try(r, now))
        }
        (RowState::Pending, None) => "sealed; the next sync pushes it to the relay".to_string(),
        (RowState::Pending, Some(e)) => {
            let retry = if r.next_at <= now {
                "retry at the next sync".to_string()
            } else {
                format!("retry at {}", when(r.next_at, now))
            };
            let cause = if let Some(which) = e.strip_prefix(QUOTA) {
                format!(
                    "the relay is full for now ({e}: {which} reached; it frees up as {peer} pulls \
                     or items expire)"
                )
            } else if e == NOT_ACCEPTED {
                format!(
                    "{peer}'s allowlist on the relay does not name this host ({e}): {peer} must pin \
                     this host's key (`host peer add`) and sync"
                )
            } else if e == NOT_ENROLLED {
                format!("{peer} is not enrolled on this relay ({e}): {peer} must run `host sync`")
            } else if e == RATE {
                format!("this host pushed too much this minute ({e})")
            } else if e.starts_with(UNREACHABLE) {
                format!("the relay could not be reached ({e})")
            } else {
                format!("the last push failed ({e})")
            };
            format!("{cause}; {retry}")
        }
        (RowState::RelayAccepted, _) if r.kind == ItemKind::Envelope => {
            let seq = r.acceptance.as_ref().map_or(0, |a| a.seq);
            let deadline = r.deadline.map_or("unknown".to_string(), |d| when(d, now));
            format!(
                "on the relay (seq {seq}); waiting for {peer} to pull it and send a delivery \
                 receipt; unconfirmed after {deadline}"
            )
        }
        (RowState::RelayAccepted, _) => "on the relay".to_string(),
        _ => return None,
    };
    Some(text)
}

/// One line per waiting row (at most `limit`): `<item> to <peer>: <why>`.
pub(crate) fn waiting_lines(rows: &[OutRow], now: u64, limit: usize) -> Vec<String> {
    rows.iter()
        .filter_map(|r| why(r, now).map(|w| format!("{} to {}: {w}", r.item_id, r.target_name)))
        .take(limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Peer;

    const NOW: u64 = 1_795_960_800_000; // 2026-11-29T14:00:00.000Z

    fn draft() -> OutRow {
        let peer = Peer {
            name: "bob".into(),
            pubkey: "K".into(),
        };
        OutRow::draft_envelope(1, "ID".into(), &peer, "s", "{}".into(), NOW)
    }

    #[test]
    fn a_row_waiting_for_an_enc_ad_says_whose_and_when_it_retries() {
        let mut r = draft();
        r.last_error = Some(Refusal::NoAd.to_string());
        r.next_at = NOW + 65_000;
        assert_eq!(
            why(&r, NOW).unwrap(),
            "waiting for bob's enc ad: bob has not published one on this relay yet (bob publishes \
             it on its first `host sync`); next try 14:01:05 UTC"
        );
    }

    #[test]
    fn a_refused_push_names_the_reason_and_the_retry_time() {
        let mut r = draft();
        r.state = RowState::Pending;
        r.last_error = Some("rejected:quota:target queue items".into());
        r.next_at = NOW + 1_000;
        let w = why(&r, NOW).unwrap();
        assert!(w.contains("rejected:quota:target queue items"), "{w}");
        assert!(w.ends_with("retry at 14:00:01 UTC"), "{w}");
        r.state = RowState::Done;
        assert_eq!(why(&r, NOW), None, "settled rows do not wait");
    }
}
