//! Human-readable output shared by the commands (JSON output goes straight from the admin report).

use relay_store::{BackupSummary, LogVerdict};
use relay_wire::keys::fingerprint;
use relay_wire::time::iso_ms;

/// Counts per partition, total, checksum and header facts of a backup file.
pub(crate) fn summary(s: &BackupSummary) -> String {
    let mut out = String::new();
    let total: u64 = s.counts.iter().map(|(_, n)| n).sum();
    for (p, n) in &s.counts {
        out.push_str(&format!("  {p:<14} {n:>12}\n"));
    }
    out.push_str(&format!("  {:<14} {total:>12}\n", "total"));
    out.push_str(&format!("checksum        {}\n", s.checksum));
    out.push_str(&format!(
        "size            {} ({} bytes)\n",
        human_bytes(s.file_bytes),
        s.file_bytes
    ));
    out.push_str(&format!("epoch           {}\n", s.epoch));
    let key = s
        .relay_pubkey
        .as_ref()
        .map(fingerprint)
        .unwrap_or_else(|| "(none pinned)".into());
    out.push_str(&format!("relay key       {key}\n"));
    out.push_str(&format!("created         {}\n", iso_ms(s.created_ms)));
    out.push_str(&format!(
        "format/schema   {}/{}\n",
        s.format_version, s.schema_version
    ));
    out.push_str(&format!("relay log       {}\n", log_line(&s.log)));
    out
}

/// [`summary`] as one JSON object (`--json`).
pub(crate) fn summary_json(s: &BackupSummary) -> serde_json::Value {
    let counts: serde_json::Map<String, serde_json::Value> = s
        .counts
        .iter()
        .map(|(p, n)| (p.clone(), (*n).into()))
        .collect();
    serde_json::json!({
        "counts": counts,
        "total": s.counts.iter().map(|(_, n)| n).sum::<u64>(),
        "checksum": s.checksum,
        "file_bytes": s.file_bytes,
        "epoch": s.epoch,
        "relay_key_fingerprint": s.relay_pubkey.as_ref().map(fingerprint),
        "created": iso_ms(s.created_ms),
        "format_version": s.format_version,
        "schema_version": s.schema_version,
        "relay_log": mbx_relay::admin::report::log_verdict_json(&s.log),
    })
}

/// One line on a relay log's chain.
pub(crate) fn log_line(v: &LogVerdict) -> String {
    match v {
        LogVerdict::Intact {
            entries,
            checkpoint: Some(c),
        } => format!(
            "chain verified: {entries} entries from the checkpoint after entry {}",
            c.seq
        ),
        LogVerdict::Intact { entries, .. } => format!("chain verified: {entries} entries"),
        LogVerdict::Broken { seq, why } => format!("CHAIN BROKEN at entry {seq}: {why}"),
        LogVerdict::Unchained => "not hash-chained (schema < 4; chained when restored)".into(),
    }
}

/// `1.5 MiB`-style sizes.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `3d 4h`, `2h 5m`, `12m 3s`, `45s` for ages.
pub(crate) fn human_age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {sec}s")
    } else {
        format!("{sec}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_well() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(human_age(45_000), "45s");
        assert_eq!(human_age(3_723_000), "1h 2m");
        assert_eq!(human_age(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
    }
}
