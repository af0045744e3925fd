//! `relay-tool hosts`: one line per enrolment (through the running relay or the store opened
//! here, same output either way), streamed as the store hands the rows on.

use std::io::{self, Write};
use std::time::Duration;

use mbx_relay::admin::hosts::{write_hosts, HostsQuery};
use mbx_relay::admin::proto::Request;
use relay_store::{Clock, StoreError, SystemClock};
use relay_wire::time::iso_ms;
use serde_json::Value;

use crate::access::{self, Target, Via};
use crate::fail::{Code, Failure};
use crate::show::{human_age, human_bytes};

/// Longest JSON line a host row may take.
const MAX_LINE: usize = 64 * 1024;

/// The column titles of the readable listing.
const HEADER: &str = "FINGERPRINT          NAME                 ACCOUNT          ENROLLED    LAST SEEN   QUEUE                ENC AD            REVOKED";

/// `relay-tool hosts`.
///
/// # Errors
/// A bad `--name`, store access, the relay's refusal, or a failed write to stdout.
pub(crate) fn run(
    dir: &Target,
    name: Option<&str>,
    revoked: bool,
    idle_for: Option<Duration>,
    json: bool,
) -> Result<(), Failure> {
    let q = HostsQuery {
        name: name
            .map(mbx_relay::admin::hosts::check_name)
            .transpose()
            .map_err(|e| Failure::new(Code::Usage, format!("--name: {e}")))?,
        revoked,
        idle_for_ms: idle_for.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    let stdout = io::stdout().lock();
    let mut sink: Box<dyn Write> = if json {
        Box::new(io::BufWriter::new(stdout))
    } else {
        let mut out = io::BufWriter::new(stdout);
        writeln!(out, "{HEADER}").map_err(write_failed)?;
        Box::new(Readable {
            out,
            line: Vec::new(),
        })
    };
    let broken = |e: &io::Error| e.kind() == io::ErrorKind::BrokenPipe;
    let result = match access::relay_or_store(dir, &Request::Hosts(q.clone()))? {
        Via::Relay(mut reply) => match io::copy(&mut reply, &mut sink) {
            Err(e) if broken(&e) => return Ok(()), // `hosts | head`: not an error
            Err(e) => Err(write_failed(e)),
            Ok(_) => reply.finish().map(drop).map_err(Failure::from),
        },
        Via::Local(store) => {
            let listed = write_hosts(store.as_ref(), &q, SystemClock.now_ms(), &mut sink);
            access::close(store)?;
            match listed {
                Err(StoreError::Io { source, .. }) if broken(&source) => return Ok(()),
                r => r.map(drop).map_err(Failure::from),
            }
        }
    };
    result?;
    match sink.flush() {
        Err(e) if broken(&e) => Ok(()),
        r => r.map_err(write_failed),
    }
}

fn write_failed(e: io::Error) -> Failure {
    Failure::new(Code::Store, format!("writing the host listing: {e}"))
}

/// Turns the JSON lines written into it into readable lines, one per host.
struct Readable<W: Write> {
    out: W,
    line: Vec<u8>,
}

impl<W: Write> Write for Readable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &b in buf {
            if b != b'\n' {
                if self.line.len() >= MAX_LINE {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "host row too long",
                    ));
                }
                self.line.push(b);
                continue;
            }
            let v: Value = serde_json::from_slice(&self.line)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.line.clear();
            writeln!(self.out, "{}", host_line(&v))?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// One host as a readable line (the columns of [`HEADER`]).
fn host_line(v: &Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("-").to_string();
    let day = |k: &str| {
        v[k].as_u64()
            .map_or("-".to_string(), |t| iso_ms(t)[..10].to_string())
    };
    let queue = format!(
        "{} items/{}",
        v["queue_items"].as_u64().unwrap_or(0),
        human_bytes(v["queue_bytes"].as_u64().unwrap_or(0))
    );
    let ad = match (v["enc_ad"].as_str(), v["enc_ad_age_ms"].as_u64()) {
        (Some(kind), Some(age)) => format!("{kind} ({})", human_age(age)),
        _ => "-".to_string(),
    };
    format!(
        "{:<20} {:<20} {:<16} {:<11} {:<11} {:<20} {:<17} {}",
        s("fingerprint"),
        s("name"),
        s("account"),
        day("enrolled_ms"),
        day("last_seen_ms"),
        queue,
        ad,
        day("revoked_ms"),
    )
}
