//! Read-only commands: `stats`, `status`, `log`, `dump`, `verify` of a store (through the running relay or
//! the store opened here, same output either way) and `verify` of a backup file (offline).

use std::cell::Cell;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::rc::Rc;

use mbx_relay::admin::proto::{check_partition, Request, MAX_LOG_LIMIT};
use mbx_relay::admin::report::{
    log_verdict_from_json, log_verdict_json, op_json, process_json, stats_json,
};
use mbx_relay::store_open::verify_backup_file as verify_backup;
use relay_store::{Clock, DumpOptions, LogVerdict, SystemClock};
use relay_wire::time::iso_ms;
use serde_json::Value;

use crate::access::{self, Target, Via};
use crate::fail::{Code, Failure};
use crate::progress;
use crate::show::{self, human_age, human_bytes};

/// Longest JSON line accepted from the relay for stats and log entries.
const MAX_JSON_LINE: u64 = 1 << 20;

/// `relay-tool stats`.
///
/// # Errors
/// Store access or the relay's refusal.
pub(crate) fn stats(dir: &Target, json: bool) -> Result<(), Failure> {
    let v = match access::relay_or_store(dir, &Request::Stats)? {
        Via::Relay(reply) => {
            let mut lines = json_lines(reply, 1)?;
            lines
                .pop()
                .ok_or_else(|| Failure::new(Code::Store, "the relay sent no stats"))?
        }
        Via::Local(store) => {
            let s = store.stats()?;
            access::close(store)?;
            stats_json(&s, None, SystemClock.now_ms())
        }
    };
    if json {
        println!("{v}");
    } else {
        print!("{}", stats_text(&v));
    }
    Ok(())
}

/// `relay-tool status`: the relay processes serving the store, stale ones flagged.
///
/// # Errors
/// Store access or the relay's refusal.
pub(crate) fn status(dir: &Target, json: bool) -> Result<(), Failure> {
    let rows = match access::relay_or_store(dir, &Request::Processes)? {
        Via::Relay(reply) => json_lines(reply, relay_store::MAX_PROCESSES)?,
        Via::Local(store) => {
            let rows = store.processes()?;
            access::close(store)?;
            let now = SystemClock.now_ms();
            rows.iter().map(|r| process_json(r, now)).collect()
        }
    };
    let mut out = io::stdout().lock();
    if rows.is_empty() && !json {
        let _ = writeln!(
            out,
            "no process rows (a directory store is served by one process)"
        );
    }
    for r in &rows {
        let line = if json {
            r.to_string()
        } else {
            let ms = |k: &str| iso_ms(r[k].as_u64().unwrap_or(0));
            format!(
                "{}  {}  version {}  started {}  heartbeat {}{}",
                r["id"].as_str().unwrap_or("?"),
                r["address"].as_str().unwrap_or("?"),
                r["version"].as_str().unwrap_or("?"),
                ms("started_ms"),
                ms("heartbeat_ms"),
                if r["stale"] == Value::Bool(true) {
                    "  STALE"
                } else {
                    ""
                },
            )
        };
        if writeln!(out, "{line}").is_err() {
            break; // stdout closed
        }
    }
    Ok(())
}

/// `relay-tool log`: the relay log, newest first.
///
/// # Errors
/// Store access or the relay's refusal.
pub(crate) fn log(dir: &Target, limit: usize, json: bool) -> Result<(), Failure> {
    let limit = limit.clamp(1, MAX_LOG_LIMIT);
    let entries = match access::relay_or_store(dir, &Request::Log { limit })? {
        Via::Relay(reply) => json_lines(reply, limit)?,
        Via::Local(store) => {
            let ops = store.ops(limit)?;
            access::close(store)?;
            ops.iter().map(op_json).collect()
        }
    };
    let mut out = io::stdout().lock();
    for e in &entries {
        let line = if json {
            e.to_string()
        } else {
            let at = e["at_ms"].as_u64().map(iso_ms).unwrap_or_default();
            format!(
                "{:>6}  {at}  {:<14} {}",
                e["seq"].as_u64().unwrap_or(0),
                e["kind"].as_str().unwrap_or("?"),
                e["detail"].as_str().unwrap_or("")
            )
        };
        if writeln!(out, "{line}").is_err() {
            break; // stdout closed (e.g. piped into head)
        }
    }
    Ok(())
}

/// `relay-tool log --verify`: recompute the relay log's hash chain (through the running relay or
/// on the store opened here).
///
/// # Errors
/// Store access, the relay's refusal, or `Backup` (exit 3) naming the first entry that does not
/// match.
pub(crate) fn log_verify(dir: &Target, json: bool) -> Result<(), Failure> {
    let verdict = match access::relay_or_store(dir, &Request::LogVerify)? {
        Via::Relay(reply) => verdict_of(reply)?,
        Via::Local(store) => {
            let v = store.verify_log();
            access::close(store)?;
            v?
        }
    };
    if json {
        println!("{}", log_verdict_json(&verdict));
    }
    log_outcome(&verdict, "relay log", !json)
}

/// The relay's answer to `LogVerify`.
fn verdict_of(reply: mbx_relay::admin::client::Reply) -> Result<LogVerdict, Failure> {
    let done = reply.finish()?;
    log_verdict_from_json(&done).ok_or_else(|| {
        Failure::new(
            Code::Store,
            "the relay sent a log verdict this tool cannot read",
        )
    })
}

/// `relay-tool verify` without a file: the store itself opens (its schema is not newer than
/// this tool), its figures read, and its relay log's hash chain verifies. Through the running
/// relay when one answers, else on the store opened here (a PostgreSQL store beside its relays).
///
/// # Errors
/// Store access, the relay's refusal, or `Backup` (exit 3) naming the first relay-log entry
/// that does not match.
pub(crate) fn verify_store(t: &Target, json: bool) -> Result<(), Failure> {
    let (v, verdict) = match access::relay_or_store(t, &Request::Stats)? {
        Via::Relay(reply) => {
            let v = json_lines(reply, 1)?
                .pop()
                .ok_or_else(|| Failure::new(Code::Store, "the relay sent no stats"))?;
            let reply = t.ask_relay(&Request::LogVerify)?.ok_or_else(|| {
                Failure::new(
                    Code::Store,
                    "the relay stopped answering on its admin socket",
                )
            })?;
            (v, verdict_of(reply)?)
        }
        Via::Local(store) => {
            let stats = store.stats();
            let verdict = store.verify_log();
            access::close(store)?;
            (stats_json(&stats?, None, SystemClock.now_ms()), verdict?)
        }
    };
    log_outcome(&verdict, &format!("{}: relay log", t.spec), false)?;
    if json {
        let out = serde_json::json!({
            "store": t.spec.to_string(),
            "ok": true,
            "schema_version": v["schema_version"],
            "epoch": v["epoch"],
            "relay_key_fingerprint": v["relay_key_fingerprint"],
            "relay_log": log_verdict_json(&verdict),
        });
        println!("{out}");
        return Ok(());
    }
    println!("store OK: {}", t.spec);
    println!(
        "  schema {}, epoch {}, relay key {}",
        v["schema_version"].as_u64().unwrap_or(0),
        v["epoch"].as_str().unwrap_or("?"),
        v["relay_key_fingerprint"]
            .as_str()
            .unwrap_or("(none pinned yet)")
    );
    println!("  relay log: {}", show::log_line(&verdict));
    Ok(())
}

/// Print (when `print`) or fail with a verdict on a relay log: exit 3 when it does not verify.
///
/// # Errors
/// `Backup` naming the first entry that does not match.
pub(crate) fn log_outcome(v: &LogVerdict, what: &str, print: bool) -> Result<(), Failure> {
    match v {
        LogVerdict::Intact {
            entries,
            checkpoint,
        } => {
            if print {
                let from = match checkpoint {
                    Some(c) => format!(
                        "from the checkpoint after entry {} (hash {})",
                        c.seq,
                        hex_short(&c.hash)
                    ),
                    None => "from its first entry".to_string(),
                };
                println!("{what} OK: {entries} entries verified, {from}");
            }
            Ok(())
        }
        LogVerdict::Broken { seq, why } => Err(Failure::new(
            Code::Backup,
            format!("{what} does not verify: first bad entry {seq}: {why}"),
        )),
        LogVerdict::Unchained => {
            if print {
                println!("{what}: not hash-chained (written before schema 4); nothing to verify");
            }
            Ok(())
        }
    }
}

fn hex_short(h: &[u8; 32]) -> String {
    h.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// `relay-tool dump`: JSON lines (`--json`) or one readable line per record.
///
/// # Errors
/// Unknown partition, store access, the relay's refusal, or a failed write to stdout.
pub(crate) fn dump(
    dir: &Target,
    partition: Option<&str>,
    with_wire: bool,
    json: bool,
) -> Result<(), Failure> {
    let partition = partition
        .map(check_partition)
        .transpose()
        .map_err(|e| Failure::new(Code::Usage, e))?;
    let request = Request::Dump {
        partition: partition.clone(),
        with_wire,
    };
    let closed = Rc::new(Cell::new(false));
    let stdout = PipeWatch {
        inner: io::stdout().lock(),
        closed: closed.clone(),
    };
    let mut sink: Box<dyn Write> = if json {
        Box::new(io::BufWriter::new(stdout))
    } else {
        Box::new(Readable {
            out: io::BufWriter::new(stdout),
            line: Vec::new(),
        })
    };
    let result = match access::relay_or_store(dir, &request)? {
        Via::Relay(mut reply) => io::copy(&mut reply, &mut sink)
            .map_err(|e| Failure::new(Code::Store, format!("dump: {e}")))
            .and_then(|_| Ok(reply.finish()?))
            .map(|done| serde_json::from_value(done["counts"].clone()).unwrap_or_default()),
        Via::Local(store) => {
            let opts = DumpOptions {
                partition,
                with_wire,
            };
            let counts = store.dump(&mut sink, &opts);
            access::close(store)?;
            counts.map_err(Failure::from)
        }
    };
    let flushed = sink.flush();
    drop(sink);
    if closed.get() {
        return Ok(()); // stdout went away (`relay-tool dump | head`): not an error
    }
    let counts: Vec<(String, u64)> = result?;
    flushed.map_err(|e| Failure::new(Code::Store, format!("writing the dump: {e}")))?;
    if !json {
        let parts: Vec<String> = counts.iter().map(|(p, n)| format!("{p} {n}")).collect();
        println!("-- records: {}", parts.join(", "));
    }
    Ok(())
}

/// `relay-tool verify`: every checksum and count of a backup file, offline.
///
/// # Errors
/// `Backup` with the precise reason (damaged at byte offset X, truncated, newer format, ...).
pub(crate) fn verify(file: &std::path::Path, json: bool) -> Result<(), Failure> {
    let bar = progress::step(format!("verifying {}", file.display()));
    let result = verify_backup(file);
    bar.finish_and_clear();
    let summary = result.map_err(|e| {
        Failure::from(e).context(&format!("{} failed verification", file.display()))
    })?;
    log_outcome(
        &summary.log,
        &format!("{}: relay log", file.display()),
        false,
    )?;
    if json {
        let mut v = show::summary_json(&summary);
        v["file"] = file.display().to_string().into();
        v["ok"] = true.into();
        println!("{v}");
        return Ok(());
    }
    println!("backup OK: {}", file.display());
    print!("{}", show::summary(&summary));
    Ok(())
}

/// Stdout that remembers it was closed by the reader (a broken pipe), so `dump | head` ends quietly.
struct PipeWatch<W: Write> {
    inner: W,
    closed: Rc<Cell<bool>>,
}

impl<W: Write> PipeWatch<W> {
    fn watch<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::BrokenPipe) {
            self.closed.set(true);
        }
        r
    }
}

impl<W: Write> Write for PipeWatch<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(buf);
        self.watch(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.watch(r)
    }
}

/// Read up to `max` JSON lines from the relay's stream, then its final line.
fn json_lines(reply: mbx_relay::admin::client::Reply, max: usize) -> Result<Vec<Value>, Failure> {
    let mut reader = BufReader::new(reply);
    let mut out = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = (&mut reader)
            .take(MAX_JSON_LINE)
            .read_until(b'\n', &mut line)
            .map_err(|e| Failure::new(Code::Store, format!("reading from the relay: {e}")))?;
        if n == 0 {
            break;
        }
        if out.len() >= max {
            return Err(Failure::new(
                Code::Store,
                "the relay sent more lines than asked for",
            ));
        }
        let v = serde_json::from_slice(&line).map_err(|e| {
            Failure::new(
                Code::Store,
                format!("the relay sent a line that is not JSON: {e}"),
            )
        })?;
        out.push(v);
    }
    reader.into_inner().finish()?;
    Ok(out)
}

/// Stats as aligned text.
fn stats_text(v: &Value) -> String {
    let num = |k: &str| v[k].as_u64().unwrap_or(0);
    let mut s = String::new();
    s.push_str(&format!(
        "epoch               {}\n",
        v["epoch"].as_str().unwrap_or("?")
    ));
    match (
        v["relay_key_fingerprint"].as_str(),
        v["relay_pubkey"].as_str(),
    ) {
        (Some(fp), Some(pk)) => s.push_str(&format!("relay key           {fp} ({pk})\n")),
        _ => s.push_str("relay key           (none pinned yet)\n"),
    }
    s.push_str(&format!("schema version      {}\n", num("schema_version")));
    let live = num("live_enrolments");
    match v["max_enrolments"].as_u64().filter(|m| *m > 0) {
        Some(max) => s.push_str(&format!(
            "enrolments          {live} live of {max} max ({:.1}%), {} revoked\n",
            live as f64 * 100.0 / max as f64,
            num("revoked_enrolments")
        )),
        None => s.push_str(&format!(
            "enrolments          {live} live, {} revoked\n",
            num("revoked_enrolments")
        )),
    }
    s.push_str(&format!(
        "queued              {} items, {}\n",
        num("queued_items"),
        human_bytes(num("queued_bytes"))
    ));
    match (
        v["oldest_queued_ms"].as_u64(),
        v["oldest_queued_age_ms"].as_u64(),
    ) {
        (Some(at), Some(age)) => s.push_str(&format!(
            "oldest queued item  {} ago ({})\n",
            human_age(age),
            iso_ms(at)
        )),
        _ => s.push_str("oldest queued item  (queue empty)\n"),
    }
    s.push_str(&format!("dedup rows          {}\n", num("dedup_rows")));
    s.push_str(&format!(
        "enc ads             {} v1, {} v2\n",
        num("enc_ads_v1"),
        num("enc_ads_v2")
    ));
    s.push_str(&format!(
        "size on disk        {}\n",
        human_bytes(num("disk_bytes"))
    ));
    let top = v["top_targets"].as_array().cloned().unwrap_or_default();
    if !top.is_empty() {
        s.push_str("top targets by queued items:\n");
        for t in &top {
            s.push_str(&format!(
                "  {}  {:>8} items  {:>10}  {}\n",
                t["fingerprint"].as_str().unwrap_or("?"),
                t["items"].as_u64().unwrap_or(0),
                human_bytes(t["bytes"].as_u64().unwrap_or(0)),
                t["host_pubkey"].as_str().unwrap_or("?"),
            ));
        }
    }
    s
}

/// Turns the store's JSON-lines dump into one `field=value` line per record.
struct Readable<W: Write> {
    out: W,
    line: Vec<u8>,
}

/// A line longer than this is passed through as it is rather than buffered further.
const MAX_READABLE_LINE: usize = 64 << 20;

impl<W: Write> Readable<W> {
    fn emit(&mut self) -> io::Result<()> {
        let text = match serde_json::from_slice::<Value>(&self.line) {
            Ok(v) => readable_record(&v),
            Err(_) => String::from_utf8_lossy(&self.line).trim_end().to_string(),
        };
        self.line.clear();
        writeln!(self.out, "{text}")
    }
}

impl<W: Write> Write for Readable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for chunk in buf.split_inclusive(|&b| b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") || self.line.len() > MAX_READABLE_LINE {
                self.emit()?;
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        if !self.line.is_empty() {
            self.emit()?;
        }
        self.out.flush()
    }
}

/// One record: `partition  key fields -> value fields` (the keyspace dumps
/// `{"partition","key","value"}`); any other JSON is shown as `field=value` pairs.
fn readable_record(v: &Value) -> String {
    let Some(obj) = v.as_object() else {
        return v.to_string();
    };
    match (
        obj.get("partition").and_then(Value::as_str),
        obj.get("key"),
        obj.get("value"),
    ) {
        (Some(p), Some(k), Some(val)) if obj.len() == 3 => {
            let mut line = format!("{p:<12}  {}", flat(k));
            if !val.is_null() {
                line.push_str(" -> ");
                line.push_str(&flat(val));
            }
            line
        }
        _ => flat(v),
    }
}

/// Objects as `field=value` pairs, strings bare unless they hold spaces, the rest as JSON.
fn flat(v: &Value) -> String {
    match v {
        Value::Object(obj) => obj
            .iter()
            .map(|(k, val)| format!("{k}={}", scalar(val)))
            .collect::<Vec<_>>()
            .join(" "),
        other => scalar(other),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_lines_become_readable() {
        let mut r = Readable {
            out: Vec::new(),
            line: Vec::new(),
        };
        let input = concat!(
            "{\"partition\":\"items\",\"key\":{\"seq\":5,\"target\":\"ab\"},\"value\":{\"item_id\":\"a b\"}}\n",
            "{\"partition\":\"meta\",\"key\":{\"name\":\"epoch\"},\"value\":\"e1\"}\n",
            "{\"partition\":\"enrolments\",\"key\":{\"name_index\":\"x\"},\"value\":null}\n",
            "{\"a\":[1]}\nnot json\n",
        );
        // Split mid-line: records may arrive in any chunking.
        let (a, b) = input.as_bytes().split_at(40);
        r.write_all(a).unwrap();
        r.write_all(b).unwrap();
        r.flush().unwrap();
        let text = String::from_utf8(r.out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "items         seq=5 target=ab -> item_id=\"a b\"");
        assert_eq!(lines[1], "meta          name=epoch -> e1");
        assert_eq!(lines[2], "enrolments    name_index=x");
        assert_eq!(lines[3], "a=[1]");
        assert_eq!(lines[4], "not json");
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn stats_text_names_every_figure() {
        let v = serde_json::json!({
            "epoch": "e-1", "relay_pubkey": "PK", "relay_key_fingerprint": "ab12-cd34-ef56-7890",
            "schema_version": 1, "live_enrolments": 3, "revoked_enrolments": 1,
            "queued_items": 10, "queued_bytes": 2048, "dedup_rows": 12,
            "enc_ads_v1": 4, "enc_ads_v2": 5,
            "oldest_queued_ms": 1_000, "oldest_queued_age_ms": 90_000, "disk_bytes": 4096,
            "top_targets": [{"fingerprint": "ffff-0000-1111-2222", "items": 10, "bytes": 2048, "host_pubkey": "HK"}],
        });
        let t = stats_text(&v);
        for want in [
            "e-1",
            "ab12-cd34-ef56-7890",
            "3 live, 1 revoked",
            "10 items, 2.0 KiB",
            "1m 30s ago",
            "dedup rows          12",
            "enc ads             4 v1, 5 v2",
            "4.0 KiB",
            "ffff-0000-1111-2222",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
        let mut online = v.clone();
        online["max_enrolments"] = serde_json::json!(4);
        let t = stats_text(&online);
        assert!(t.contains("3 live of 4 max (75.0%), 1 revoked"), "{t}");
    }
}
