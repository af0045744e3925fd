//! The host daemon's local socket, `<dir>/daemon.sock` (mode 0600): how `host send`, `status`,
//! `inbox [show]` and `quarantine` reach a running `host run`, which holds the store's lock. One JSON
//! line each way per connection; the daemon answers a send only after its commit is durable.
//!
//! A socket rather than a spool directory: the caller learns the outcome (the message id, or why
//! it was refused, e.g. an unknown peer) synchronously and only after the commit, with no second
//! plaintext copy of the body left on disk, no watcher latency, and read commands route the same
//! way. Only the owner can connect (0600 in the host directory).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::args::{HostCommand, InboxCommand};
use super::mailbox::{message_body, Out};
use super::HostError;
use relay_os::private::{bind_private_socket, remove_stale_socket};

/// The socket's file name in the host directory.
pub(crate) const SOCKET: &str = "daemon.sock";
/// Largest request or reply line (a message body plus JSON; far above any sane mail).
const MAX_LINE: u64 = 16 * 1024 * 1024;
/// How long either side waits for the other to write or the daemon for the request line.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a command waits for the daemon's answer: the daemon answers between passes, and a
/// pass against a relay that stopped answering ends after one HTTP timeout (30 s by default).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// What a command asks the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Is a daemon there, and which pid?
    Ping,
    /// Queue a message (as `host send`).
    Send {
        /// The pinned peer's name.
        to: String,
        /// The subject line.
        subject: String,
        /// The body text.
        body: String,
    },
    /// `status`: outbox, deadlines, epoch, alerts.
    Status,
    /// `inbox`: the received messages.
    Inbox,
    /// `inbox show ID`.
    InboxShow {
        /// The message id.
        id: String,
    },
    /// `quarantine`: the refused items and why.
    Quarantine,
    /// What `host doctor` reads from the store the daemon holds ([`super::doctor::StoreFacts`]).
    DoctorFacts,
}

/// The daemon's answer: its pid and the command's result (`value` and `text`, or `error`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// The daemon's pid (which daemon answered).
    pub pid: u32,
    /// The command's result as JSON (`--json`).
    pub value: Option<Value>,
    /// The command's result as text.
    pub text: Option<String>,
    /// Why the command failed.
    pub error: Option<String>,
    /// The error is bad usage (exit code 2), not a failure.
    pub usage: bool,
}

impl Reply {
    /// The reply carrying a command's outcome.
    pub(crate) fn from_out(out: Out) -> Reply {
        let pid = std::process::id();
        match out {
            Ok((v, t)) => Reply {
                pid,
                value: Some(v),
                text: Some(t),
                error: None,
                usage: false,
            },
            Err(e) => Reply {
                pid,
                value: None,
                text: None,
                usage: matches!(e, HostError::Usage(_)),
                error: Some(e.to_string()),
            },
        }
    }

    fn into_out(self) -> Out {
        match (self.error, self.value) {
            (Some(e), _) if self.usage => Err(HostError::Usage(e)),
            (Some(e), _) => Err(HostError::Store(e)),
            (None, Some(v)) => Ok((v, self.text.unwrap_or_default())),
            (None, None) => Err(HostError::Store(
                "the host daemon sent an empty reply".into(),
            )),
        }
    }
}

/// The socket path for a host directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// When a daemon runs for `dir`, hand it `cmd` (send, status, inbox, quarantine) or refuse `cmd`
/// with a clear error naming its pid; `None` when no daemon answers (the command runs as usual).
pub fn route(dir: &Path, cmd: &HostCommand) -> Option<Out> {
    let req = match cmd {
        HostCommand::Init { .. } => return None,
        HostCommand::Send {
            to,
            subject,
            file,
            body,
        } => match message_body(file.as_deref(), body.as_deref()) {
            Ok(body) => Request::Send {
                to: to.clone(),
                subject: subject.clone(),
                body,
            },
            Err(e) => return Some(Err(e)),
        },
        HostCommand::Status => Request::Status,
        HostCommand::Inbox { show: None } => Request::Inbox,
        HostCommand::Inbox {
            show: Some(InboxCommand::Show { id }),
        } => Request::InboxShow { id: id.clone() },
        HostCommand::Quarantine => Request::Quarantine,
        // Doctor asks for the store's facts itself and checks the rest beside the daemon.
        HostCommand::Doctor => return None,
        _ => Request::Ping,
    };
    let is_send = matches!(req, Request::Send { .. });
    let is_ping = matches!(req, Request::Ping);
    let reply = match ask(dir, &req)? {
        Ok(r) => r,
        Err(e) => {
            let hint = if is_send {
                "; the message may or may not be queued: check `host status`"
            } else {
                ""
            };
            return Some(Err(HostError::Store(format!(
                "the host daemon did not answer ({e}){hint}"
            ))));
        }
    };
    if is_ping {
        return Some(Err(HostError::Usage(format!(
            "a host daemon is running (pid {}); stop it (SIGTERM) to run this command, or use \
             send, status, inbox or quarantine, which the daemon serves",
            reply.pid
        ))));
    }
    Some(reply.into_out())
}

/// Hand `req` to the daemon running for `dir`: `None` when none answers (no socket, or a stale
/// one a killed daemon left; then the store lock decides).
fn ask(dir: &Path, req: &Request) -> Option<Result<Reply, String>> {
    let stream = UnixStream::connect(socket_path(dir)).ok()?;
    Some(exchange(stream, req))
}

/// What `host doctor` reads from the host store, from the daemon running for `dir` (it holds the
/// store's lock): its pid and the facts as JSON; `None` when no daemon answers.
pub(crate) fn doctor_facts(dir: &Path) -> Option<Result<(u32, Value), HostError>> {
    let reply = match ask(dir, &Request::DoctorFacts)? {
        Ok(r) => r,
        Err(e) => {
            return Some(Err(HostError::Store(format!(
                "the host daemon did not answer ({e})"
            ))))
        }
    };
    let pid = reply.pid;
    Some(reply.into_out().map(|(v, _)| (pid, v)))
}

/// Send one request line and read one reply line.
fn exchange(mut stream: UnixStream, req: &Request) -> Result<Reply, String> {
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| e.to_string())?;
    let text = read_line(&stream)?;
    serde_json::from_str(&text).map_err(|e| format!("bad reply: {e}"))
}

/// One line, at most [`MAX_LINE`] bytes.
fn read_line(stream: &UnixStream) -> Result<String, String> {
    let mut text = String::new();
    BufReader::new(stream.take(MAX_LINE))
        .read_line(&mut text)
        .map_err(|e| e.to_string())?;
    if !text.ends_with('\n') {
        return Err("connection closed before a complete line".into());
    }
    Ok(text)
}

/// The daemon's socket: a stale one from a killed daemon is replaced (the caller holds the store
/// lock, so no other daemon runs); it is bound privately and is 0600 before it is reachable.
///
/// # Errors
/// The socket cannot be created (e.g. a path longer than the system's limit), or something
/// other than a socket is in its place.
pub fn bind(dir: &Path) -> Result<UnixListener, HostError> {
    let path = socket_path(dir);
    let err = |e: std::io::Error| {
        HostError::Store(format!(
            "cannot create the daemon socket {}: {e}",
            path.display()
        ))
    };
    remove_stale_socket(&path).map_err(err)?;
    bind_private_socket(dir, &path).map_err(err)
}

/// Serve connections one at a time, forever: each request goes to `handle` (which answers after
/// the daemon did the work) and its reply back. A bad or slow client only loses its own answer.
pub fn serve(listener: UnixListener, handle: impl Fn(Request) -> Reply) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if stream.set_read_timeout(Some(IO_TIMEOUT)).is_err()
            || stream.set_write_timeout(Some(IO_TIMEOUT)).is_err()
        {
            continue;
        }
        let reply = match read_line(&stream)
            .and_then(|t| serde_json::from_str::<Request>(&t).map_err(|e| e.to_string()))
        {
            Ok(req) => handle(req),
            Err(e) => Reply::from_out(Err(HostError::Usage(format!("bad daemon request: {e}")))),
        };
        if let Ok(mut line) = serde_json::to_vec(&reply) {
            line.push(b'\n');
            let _ = stream.write_all(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_tagged_json_line_and_replies_keep_usage_errors_apart() {
        let send = Request::Send {
            to: "bob".into(),
            subject: "s".into(),
            body: "line\nbreak".into(),
        };
        let text = serde_json::to_string(&send).unwrap();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.starts_with(r#"{"op":"send""#), "{text}");
        assert!(matches!(
            serde_json::from_str::<Request>(r#"{"op":"ping"}"#),
            Ok(Request::Ping)
        ));
        assert!(serde_json::from_str::<Request>(r#"{"op":"sync"}"#).is_err());

        let usage = Reply::from_out(Err(HostError::Usage("bad".into())));
        assert_eq!(usage.into_out(), Err(HostError::Usage("bad".into())));
        let fail = Reply::from_out(Err(HostError::Network("down".into())));
        assert_eq!(
            fail.into_out(),
            Err(HostError::Store("relay unreachable: down".into()))
        );
        let ok = Reply::from_out(Ok((serde_json::json!({"id": "X"}), "queued".into())));
        assert_eq!(ok.pid, std::process::id());
        assert_eq!(
            ok.into_out(),
            Ok((serde_json::json!({"id": "X"}), "queued".into()))
        );
    }
}
