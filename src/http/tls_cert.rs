//! What the operator is told about the served TLS certificate: its subject and expiry (for the
//! start-up line, `/status` and `mbx_relay_tls_cert_not_after_seconds`), and a warning when it
//! expires within [`EXPIRY_WARNING`] (at start-up, on each reload, and again once a day while
//! it stays so close).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

/// A certificate expiring within this long is warned about.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);
/// Least time between two warnings about the same close expiry.
const WARN_AGAIN: Duration = Duration::from_secs(86_400);

/// The leaf certificate's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The subject, as RFC 4514 text (`CN=relay.example`).
    pub subject: String,
    /// notAfter, seconds since the Unix epoch.
    pub not_after_unix: i64,
}

impl CertInfo {
    /// The facts of a DER certificate, if it parses.
    pub(crate) fn of(der: &CertificateDer<'_>) -> Option<CertInfo> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        Some(CertInfo {
            subject: cert.subject().to_string(),
            not_after_unix: cert.validity().not_after.timestamp(),
        })
    }

    /// notAfter as ISO 8601 UTC text.
    pub(crate) fn not_after_text(&self) -> String {
        let ms = u64::try_from(self.not_after_unix)
            .unwrap_or(0)
            .saturating_mul(1000);
        relay_wire::time::iso_ms(ms)
    }

    /// Seconds until notAfter from `now_unix` (negative once expired).
    pub(crate) fn seconds_left(&self, now_unix: i64) -> i64 {
        self.not_after_unix.saturating_sub(now_unix)
    }
}

/// Seconds since the Unix epoch now.
pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The expiry warnings of one TLS listener.
#[derive(Default)]
pub(crate) struct ExpiryWatch {
    last: Mutex<Option<Instant>>,
}

impl ExpiryWatch {
    /// Warn when `cert` expires within [`EXPIRY_WARNING`] (or has expired), unless warned within
    /// the last day; `fresh` (a new certificate) always warns. True when it warned.
    pub(crate) fn check(&self, cert: &CertInfo, now_unix: i64, fresh: bool) -> bool {
        let left = cert.seconds_left(now_unix);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if left > EXPIRY_WARNING.as_secs() as i64 {
            *last = None;
            return false;
        }
        if !fresh && last.is_some_and(|t| t.elapsed() < WARN_AGAIN) {
            return false;
        }
        *last = Some(Instant::now());
        if left <= 0 {
            tracing::warn!(
                subject = %cert.subject,
                not_after = %cert.not_after_text(),
                "the TLS certificate has EXPIRED: clients refuse it; renew it and send SIGHUP"
            );
        } else {
            tracing::warn!(
                subject = %cert.subject,
                not_after = %cert.not_after_text(),
                days_left = left / 86_400,
                "the TLS certificate expires within 14 days: renew it (a renewed pair is loaded on SIGHUP or within 30 s)"
            );
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(not_after_unix: i64) -> CertInfo {
        CertInfo {
            subject: "CN=x".into(),
            not_after_unix,
        }
    }

    #[test]
    fn warns_within_fourteen_days_once_a_day_and_for_each_new_certificate() {
        let w = ExpiryWatch::default();
        let now = 1_000_000_000;
        assert!(
            !w.check(&cert(now + 15 * 86_400), now, true),
            "15 days left"
        );
        assert!(w.check(&cert(now + 13 * 86_400), now, true), "13 days left");
        assert!(
            !w.check(&cert(now + 13 * 86_400), now, false),
            "again the same day"
        );
        assert!(w.check(&cert(now + 12 * 86_400), now, true), "a new pair");
        assert!(!w.check(&cert(now + 90 * 86_400), now, true), "renewed");
        assert!(
            w.check(&cert(now - 1), now, false),
            "expired, after a renewal"
        );
        assert_eq!(cert(0).not_after_text(), "1970-01-01T00:00:00.000Z");
    }
}
