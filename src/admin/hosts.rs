//! `hosts`: the enrolment listing shared by the admin socket and an offline `relay-tool hosts`,
//! so both answer the same JSON lines (one per enrolment, written as the store hands them on).

use std::io::Write;

use relay_store::{HostFilter, HostRow, RelayStore, StoreError};
use serde_json::{json, Value};

use relay_wire::keys::{b64, fingerprint};
use relay_wire::names::is_host_name;

/// What to list (the request's filters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostsQuery {
    /// Only this host name (case-insensitive).
    pub name: Option<String>,
    /// Only revoked keys.
    pub revoked: bool,
    /// Only keys last seen this long ago or longer (ms).
    pub idle_for_ms: Option<u64>,
}

impl HostsQuery {
    /// The request words after `hosts` ([`HostsQuery::parse`] reads them back).
    pub(crate) fn to_words(&self) -> String {
        let mut out = String::new();
        if let Some(n) = &self.name {
            out.push_str(" name ");
            out.push_str(n);
        }
        if self.revoked {
            out.push_str(" revoked");
        }
        if let Some(ms) = self.idle_for_ms {
            out.push_str(&format!(" idle-for {ms}"));
        }
        out
    }

    /// Parse the words after `hosts`: `[name NAME] [revoked] [idle-for MS]`.
    ///
    /// # Errors
    /// A short reason; a name must be a valid host name.
    pub fn parse(words: &[&str]) -> Result<HostsQuery, String> {
        const USAGE: &str = "usage: hosts [name NAME] [revoked] [idle-for MS]";
        let mut q = HostsQuery::default();
        let mut i = 0;
        while i < words.len() {
            match (words[i], words.get(i + 1)) {
                ("name", Some(n)) if q.name.is_none() => {
                    q.name = Some(check_name(n)?);
                    i += 2;
                }
                ("revoked", _) if !q.revoked => {
                    q.revoked = true;
                    i += 1;
                }
                ("idle-for", Some(ms)) if q.idle_for_ms.is_none() => {
                    q.idle_for_ms = Some(ms.parse().map_err(|_| USAGE.to_string())?);
                    i += 2;
                }
                _ => return Err(USAGE.to_string()),
            }
        }
        Ok(q)
    }

    /// The store filter at `now_ms`.
    pub fn filter(&self, now_ms: u64) -> HostFilter {
        HostFilter {
            name: self.name.clone(),
            revoked_only: self.revoked,
            seen_at_or_before_ms: self.idle_for_ms.map(|d| now_ms.saturating_sub(d)),
        }
    }
}

/// A `--name` argument: a host name as enrolment accepts it.
///
/// # Errors
/// Says what a host name looks like.
pub fn check_name(name: &str) -> Result<String, String> {
    if is_host_name(name) {
        Ok(name.to_string())
    } else {
        Err("a host name is 1-63 of A-Z a-z 0-9 . _ - (starting with a letter or digit)".into())
    }
}

/// One enrolment as a JSON object; `now_ms` dates the enc ad's age.
pub(crate) fn host_json(r: &HostRow, now_ms: u64) -> Value {
    let e = &r.enrolment;
    let newest_ad = r.enc_ad_v1_at_ms.max(r.enc_ad_v2_at_ms);
    let ad = match (r.enc_ad_v1_at_ms, r.enc_ad_v2_at_ms) {
        (Some(_), Some(_)) => Some("v1+v2"),
        (Some(_), None) => Some("v1"),
        (None, Some(_)) => Some("v2"),
        (None, None) => None,
    };
    json!({
        "fingerprint": fingerprint(&e.host_pubkey),
        "host_pubkey": b64(&e.host_pubkey),
        "name": e.host_name,
        "account": e.account,
        "authorized_by": e.authorized_by,
        "enrolled_ms": e.enrolled_at_ms,
        "last_seen_ms": r.last_seen_ms(),
        "last_seen_recorded": r.last_seen_day.is_some(),
        "queue_items": r.queue.items,
        "queue_bytes": r.queue.bytes,
        "enc_ad": ad,
        "enc_ad_v1_ms": r.enc_ad_v1_at_ms,
        "enc_ad_v2_ms": r.enc_ad_v2_at_ms,
        "enc_ad_age_ms": newest_ad.map(|t| now_ms.saturating_sub(t)),
        "revoked_ms": e.revoked_at_ms,
    })
}

/// Write the listing as JSON lines, each as soon as the store hands its row on. Returns the
/// `done` summary (`{"hosts": N}`).
///
/// # Errors
/// The store's error, or `out` failing (the listing stops there).
pub fn write_hosts(
    store: &dyn RelayStore,
    q: &HostsQuery,
    now_ms: u64,
    out: &mut dyn Write,
) -> Result<Value, StoreError> {
    let n = store.hosts(&q.filter(now_ms), &mut |r| {
        writeln!(out, "{}", host_json(r, now_ms)).map_err(|source| StoreError::Io {
            context: "writing the host listing".into(),
            source,
        })
    })?;
    Ok(json!({ "hosts": n }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_round_trip_and_bad_ones_are_refused() {
        let q = HostsQuery {
            name: Some("Alpha".into()),
            revoked: true,
            idle_for_ms: Some(5),
        };
        let words = q.to_words();
        let w: Vec<&str> = words.split(' ').skip(1).collect();
        assert_eq!(HostsQuery::parse(&w), Ok(q));
        assert_eq!(HostsQuery::parse(&[]), Ok(HostsQuery::default()));
        for bad in [
            &["name"][..],
            &["name", "a b"],
            &["name", "-x"],
            &["revoked", "revoked"],
            &["idle-for", "x"],
            &["idle-for"],
            &["other"],
        ] {
            assert!(HostsQuery::parse(bad).is_err(), "{bad:?}");
        }
    }
}
