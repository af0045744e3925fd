//! The client side of the admin socket (blocking, for `relay-tool`).

use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::proto::{frame_len, Request, MAX_STATUS_LINE, SOCKET_NAME};

/// How long one read may wait for the relay before the request is abandoned.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Why an admin request failed.
#[derive(Debug)]
pub enum ClientError {
    /// Talking to the socket failed (`context` says what we were doing).
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        source: io::Error,
    },
    /// The relay answered `error <reason>`.
    Refused(String),
    /// The relay's answer did not follow the admin protocol.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io { context, source } => write!(f, "{context}: {source}"),
            ClientError::Refused(why) => write!(f, "the running relay refused: {why}"),
            ClientError::Protocol(why) => write!(f, "unexpected answer on the admin socket: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Send `request` to the relay serving `store_dir`, if one is.
///
/// `Ok(None)` means no relay listens there (no socket file, or a stale one nobody accepts on).
///
/// # Errors
/// Permission denied on the socket, a refusal by the relay (`Refused`), or a broken answer.
pub fn request(store_dir: &Path, request: &Request) -> Result<Option<Reply>, ClientError> {
    let path = store_dir.join(SOCKET_NAME);
    let stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(source) => {
            return Err(ClientError::Io {
                context: format!("connecting to the relay's admin socket {}", path.display()),
                source,
            })
        }
    };
    let io_err = |what: &str| {
        let context = format!("{what} the relay's admin socket {}", path.display());
        move |source| ClientError::Io { context, source }
    };
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(io_err("configuring"))?;
    stream
        .set_write_timeout(Some(READ_TIMEOUT))
        .map_err(io_err("configuring"))?;
    let line = format!("{}\n", request.to_line());
    send_all(&stream, line.as_bytes()).map_err(io_err("writing to"))?;
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let status = read_line(&mut reader).map_err(io_err("reading from"))?;
    match status.as_str() {
        "ok" => Ok(Some(Reply {
            reader,
            remaining: 0,
            ended: false,
        })),
        s => match s.strip_prefix("error ") {
            Some(why) => Err(ClientError::Refused(why.to_string())),
            None => Err(ClientError::Protocol(format!(
                "status line {:?}",
                truncate(s)
            ))),
        },
    }
}

/// Write all of `bytes` to `stream` with `MSG_NOSIGNAL`: a relay that closed the socket is an
/// error here, never a SIGPIPE (relay-tool lets SIGPIPE end it quietly when its stdout closes,
/// [`crate::exit::quiet_broken_pipe`]).
fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, alive for the call; the fd is open
        // while `stream` is borrowed.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match usize::try_from(n) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// A relay's streamed answer: read the data with [`Read`], then call [`Reply::finish`].
pub struct Reply {
    reader: BufReader<UnixStream>,
    remaining: usize,
    ended: bool,
}

impl Read for Reply {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.remaining == 0 {
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            let mut header = [0u8; 4];
            self.reader.read_exact(&mut header).map_err(cut_short)?;
            self.remaining =
                frame_len(header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.ended = self.remaining == 0;
        }
        let want = buf.len().min(self.remaining);
        let n = self.reader.read(&mut buf[..want])?;
        if n == 0 {
            return Err(cut_short(io::ErrorKind::UnexpectedEof.into()));
        }
        self.remaining -= n;
        Ok(n)
    }
}

impl Reply {
    /// Drain what is left of the data and read the final line: the relay's JSON on success.
    ///
    /// # Errors
    /// `Refused` when the relay reports the request failed part-way (the data is incomplete).
    pub fn finish(mut self) -> Result<Value, ClientError> {
        let io_err = |source| ClientError::Io {
            context: "reading the admin stream".into(),
            source,
        };
        io::copy(&mut self, &mut io::sink()).map_err(io_err)?;
        let last = read_line(&mut self.reader).map_err(io_err)?;
        if let Some(json) = last.strip_prefix("done ") {
            serde_json::from_str(json)
                .map_err(|e| ClientError::Protocol(format!("final line: {e}")))
        } else if let Some(why) = last.strip_prefix("error ") {
            Err(ClientError::Refused(why.to_string()))
        } else {
            Err(ClientError::Protocol(format!(
                "final line {:?}",
                truncate(&last)
            )))
        }
    }
}

fn cut_short(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the relay closed the admin stream early",
        )
    } else {
        e
    }
}

/// One `\n`-terminated line of at most [`MAX_STATUS_LINE`] bytes, without its newline.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    let n = reader
        .take(MAX_STATUS_LINE as u64)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the relay closed the admin socket without answering",
        ));
    }
    if line.pop() != Some(b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "admin status line too long or cut short",
        ));
    }
    String::from_utf8(line)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "admin status line is not UTF-8"))
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}
