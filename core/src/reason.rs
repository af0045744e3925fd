//! Why a pushed item (v2) or envelope (v1) was refused: one variant per docs/protocol.md reason
//! (§3 Push, §3 Legacy v1 mail, §5). [`Reason::wire_text`] is the answer's exact text;
//! [`Reason::as_wire_str`] its fixed part, the only thing `/metrics` ever uses as a label, so
//! nothing a client sent (a host name, an item id) can become a label.

use std::borrow::Cow;

use relay_store::QuotaKind;

use relay_wire::envelope::NOT_JSON;

/// The reasons of docs/protocol.md, with the free parts some of them carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `rate`: the sender's pushes this minute.
    Rate,
    /// `bad item id`.
    BadItemId,
    /// `bad kind`.
    BadKind,
    /// `bad targets`.
    BadTargets,
    /// `target not enrolled` (unknown or revoked).
    TargetNotEnrolled,
    /// `sender not accepted by target`.
    SenderNotAccepted,
    /// `duplicate target`.
    DuplicateTarget,
    /// `bad wire`: not base64, or wire bytes that are not JSON.
    BadWire,
    /// `item over size limit`.
    ItemOverSizeLimit,
    /// `bad envelope: <why>` (§5 shape check; `why` is the relay's own text).
    BadEnvelope(String),
    /// `item id is not the envelope id`.
    ItemIdNotEnvelopeId,
    /// `envelope body is not sealed`.
    EnvelopeNotSealed,
    /// `bad receipt`.
    BadReceipt,
    /// `item id is not the receipt id`.
    ItemIdNotReceiptId,
    /// `receipt is not signed by the sending host`.
    ReceiptNotSigned,
    /// `conflict`: same sender, item id and target stored with another wire hash.
    Conflict,
    /// `quota:<which>` (v2).
    Quota(QuotaKind),
    /// v1 `envelope over size limit`.
    EnvelopeOverSizeLimit,
    /// v1 `no recipient host`.
    NoRecipientHost,
    /// v1 `recipient host not enrolled: <host>`.
    RecipientHostNotEnrolled(String),
    /// v1 `recipient host ambiguous: <host> (several hosts use that name here; ...)`.
    RecipientHostAmbiguous(String),
    /// v1 `sender not accepted by <host>`.
    SenderNotAcceptedBy(String),
    /// v1 quota texts (`queue depth exceeded for <host>`, ...), in the reference relay's words.
    QuotaV1 { which: QuotaKind, host: String },
    /// v1 `push rate exceeded (<N>/min)` (the whole request).
    PushRateV1(u32),
    /// v1 `batch over limit <N>` (the whole request).
    BatchOverLimitV1(usize),
}

/// The wire texts the §5 checks of `relay_wire` produce, with their reasons (the wire layer
/// answers plain texts; this table is where they become reasons).
const WIRE_CHECK_TEXTS: &[(&str, Reason)] = &[
    (NOT_JSON, Reason::BadWire),
    (
        "item id is not the envelope id",
        Reason::ItemIdNotEnvelopeId,
    ),
    ("envelope body is not sealed", Reason::EnvelopeNotSealed),
    ("bad receipt", Reason::BadReceipt),
    ("item id is not the receipt id", Reason::ItemIdNotReceiptId),
    (
        "receipt is not signed by the sending host",
        Reason::ReceiptNotSigned,
    ),
];

/// The prefix of a §5 envelope shape failure.
const BAD_ENVELOPE: &str = "bad envelope: ";

impl Reason {
    /// The reason's fixed text: the whole wire text for fixed reasons, the class for texts with
    /// a free part (`bad envelope`, `quota`, `recipient host not enrolled`, ...).
    pub(crate) fn as_wire_str(&self) -> &'static str {
        match self {
            Reason::Rate => "rate",
            Reason::BadItemId => "bad item id",
            Reason::BadKind => "bad kind",
            Reason::BadTargets => "bad targets",
            Reason::TargetNotEnrolled => "target not enrolled",
            Reason::SenderNotAccepted => "sender not accepted by target",
            Reason::DuplicateTarget => "duplicate target",
            Reason::BadWire => NOT_JSON,
            Reason::ItemOverSizeLimit => "item over size limit",
            Reason::BadEnvelope(_) => "bad envelope",
            Reason::ItemIdNotEnvelopeId => "item id is not the envelope id",
            Reason::EnvelopeNotSealed => "envelope body is not sealed",
            Reason::BadReceipt => "bad receipt",
            Reason::ItemIdNotReceiptId => "item id is not the receipt id",
            Reason::ReceiptNotSigned => "receipt is not signed by the sending host",
            Reason::Conflict => "conflict",
            Reason::Quota(_) => "quota",
            Reason::EnvelopeOverSizeLimit => "envelope over size limit",
            Reason::NoRecipientHost => "no recipient host",
            Reason::RecipientHostNotEnrolled(_) => "recipient host not enrolled",
            Reason::RecipientHostAmbiguous(_) => "recipient host ambiguous",
            Reason::SenderNotAcceptedBy(_) => "sender not accepted by",
            Reason::QuotaV1 { which, .. } => v1_quota_prefix(*which),
            Reason::PushRateV1(_) => "push rate exceeded",
            Reason::BatchOverLimitV1(_) => "batch over limit",
        }
    }

    /// The exact text the relay answers (after `rejected:` in v2, as `error` in v1).
    pub(crate) fn wire_text(&self) -> Cow<'static, str> {
        match self {
            Reason::BadEnvelope(why) => format!("{BAD_ENVELOPE}{why}").into(),
            Reason::Quota(which) => format!("quota:{}", which.describe()).into(),
            Reason::RecipientHostNotEnrolled(host) => {
                format!("recipient host not enrolled: {host}").into()
            }
            Reason::RecipientHostAmbiguous(host) => format!(
                "recipient host ambiguous: {host} (several hosts use that name here; upgrade to address hosts by key)"
            )
            .into(),
            Reason::SenderNotAcceptedBy(host) => format!("sender not accepted by {host}").into(),
            Reason::QuotaV1 { which, host } => {
                format!("{} {host}", v1_quota_prefix(*which)).into()
            }
            Reason::PushRateV1(n) => format!("push rate exceeded ({n}/min)").into(),
            Reason::BatchOverLimitV1(n) => format!("batch over limit {n}").into(),
            fixed => fixed.as_wire_str().into(),
        }
    }
}

/// A refusal: its reason and, for a wire-check text the reason table does not know yet, the
/// text as the wire layer wrote it (answered unchanged, counted under its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    text: Option<String>,
}

impl Rejection {
    /// The reason of a §5 wire-check text from `relay_wire` (envelope or receipt). A text the
    /// table does not know (a new check added there without a reason here) counts as `bad wire`
    /// but keeps its own text on the wire.
    pub(crate) fn of_wire_check(text: String) -> Self {
        if let Some(why) = text.strip_prefix(BAD_ENVELOPE) {
            return Self::from(Reason::BadEnvelope(why.to_owned()));
        }
        match WIRE_CHECK_TEXTS.iter().find(|(t, _)| *t == text) {
            Some((_, r)) => Self::from(r.clone()),
            None => Self {
                reason: Reason::BadWire,
                text: Some(text),
            },
        }
    }
    /// The exact text to answer.
    pub(crate) fn wire_text(&self) -> Cow<'_, str> {
        match &self.text {
            Some(t) => Cow::Borrowed(t),
            None => self.reason.wire_text(),
        }
    }
}

impl From<Reason> for Rejection {
    fn from(reason: Reason) -> Self {
        Rejection { reason, text: None }
    }
}

/// The fixed start of a v1 quota text (the enrolled host name follows).
fn v1_quota_prefix(which: QuotaKind) -> &'static str {
    match which {
        QuotaKind::QueueItems => "queue depth exceeded for",
        QuotaKind::QueueBytes => "queue bytes exceeded for",
        QuotaKind::SenderItems | QuotaKind::SenderBytes => "sender share exceeded for",
        QuotaKind::AccountItems => "owner queue depth exceeded for",
        QuotaKind::AccountBytes => "owner queue bytes exceeded for",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTAS: [QuotaKind; 6] = [
        QuotaKind::QueueItems,
        QuotaKind::QueueBytes,
        QuotaKind::SenderItems,
        QuotaKind::SenderBytes,
        QuotaKind::AccountItems,
        QuotaKind::AccountBytes,
    ];

    fn every_reason(free: &str) -> Vec<Reason> {
        let mut all = vec![
            Reason::Rate,
            Reason::BadItemId,
            Reason::BadKind,
            Reason::BadTargets,
            Reason::TargetNotEnrolled,
            Reason::SenderNotAccepted,
            Reason::DuplicateTarget,
            Reason::BadWire,
            Reason::ItemOverSizeLimit,
            Reason::BadEnvelope(free.into()),
            Reason::ItemIdNotEnvelopeId,
            Reason::EnvelopeNotSealed,
            Reason::BadReceipt,
            Reason::ItemIdNotReceiptId,
            Reason::ReceiptNotSigned,
            Reason::Conflict,
            Reason::EnvelopeOverSizeLimit,
            Reason::NoRecipientHost,
            Reason::RecipientHostNotEnrolled(free.into()),
            Reason::RecipientHostAmbiguous(free.into()),
            Reason::SenderNotAcceptedBy(free.into()),
            Reason::PushRateV1(7),
            Reason::BatchOverLimitV1(9),
        ];
        for which in QUOTAS {
            all.push(Reason::Quota(which));
            all.push(Reason::QuotaV1 {
                which,
                host: free.into(),
            });
        }
        all
    }

    #[test]
    fn every_wire_text_starts_with_its_label_and_the_label_never_holds_client_text() {
        let free = "evil\"host\n{}";
        for r in every_reason(free) {
            let label = r.as_wire_str();
            assert!(r.wire_text().starts_with(label), "{r:?}");
            assert!(!label.contains("evil"), "{r:?}");
        }
    }

    #[test]
    fn wire_texts_are_the_protocol_texts() {
        assert_eq!(
            Reason::Quota(QuotaKind::SenderBytes).wire_text(),
            "quota:sender share bytes"
        );
        assert_eq!(
            Reason::RecipientHostAmbiguous("h".into()).wire_text(),
            "recipient host ambiguous: h (several hosts use that name here; upgrade to address hosts by key)"
        );
        assert_eq!(
            Reason::QuotaV1 {
                which: QuotaKind::AccountBytes,
                host: "h".into()
            }
            .wire_text(),
            "owner queue bytes exceeded for h"
        );
        assert_eq!(
            Reason::PushRateV1(120).wire_text(),
            "push rate exceeded (120/min)"
        );
        assert_eq!(
            Reason::BatchOverLimitV1(200).wire_text(),
            "batch over limit 200"
        );
        assert_eq!(Reason::BadWire.wire_text(), "bad wire");
    }

    #[test]
    fn wire_check_texts_map_to_their_reasons_and_keep_their_text() {
        for (text, reason) in WIRE_CHECK_TEXTS {
            let r = Rejection::of_wire_check((*text).to_owned());
            assert_eq!(&r.reason, reason);
            assert_eq!(r.wire_text(), *text);
        }
        let r = Rejection::of_wire_check("bad envelope: bad ts".into());
        assert_eq!(r.reason, Reason::BadEnvelope("bad ts".into()));
        assert_eq!(r.wire_text(), "bad envelope: bad ts");
        let r = Rejection::of_wire_check("some new check".into());
        assert_eq!(r.reason.as_wire_str(), "bad wire");
        assert_eq!(r.wire_text(), "some new check");
    }
}
