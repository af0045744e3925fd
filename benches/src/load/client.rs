//! A minimal blocking HTTP client that speaks docs/protocol.md §2 signed hops, so the bench can
//! measure any compatible relay. One [`Conn`] per worker thread: its ureq agent keeps one
//! keep-alive connection, like a real host does.

use std::time::Duration;

use relay_wire::hop::{sign_hop, signed_path};
use relay_wire::keys::SigningKey;

/// Largest response body read (a pull page is at most ~8 MiB of wire bytes as base64 + JSON).
const MAX_RESPONSE: u64 = 64 * 1024 * 1024;

/// A host identity the bench enrolled: its name and Ed25519 key.
pub(super) struct Host {
    pub name: String,
    pub key: SigningKey,
    /// `key.public_b64()`, computed once (it goes in every hop).
    pub pub_b64: String,
}

impl Host {
    /// A fresh random identity named `name`.
    pub(super) fn generate(name: String) -> Self {
        let key = SigningKey::generate();
        let pub_b64 = key.public_b64();
        Host { name, key, pub_b64 }
    }
}

/// An HTTP answer: status and raw body text (parsed later, off the timed path).
pub(super) struct Resp {
    pub status: u16,
    pub body: String,
}

impl Resp {
    /// `http <status>: <error string>` for error answers (bounded, no wire bytes).
    pub(super) fn error_kind(&self) -> String {
        let err = serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string));
        match err {
            Some(e) => format!("http {}: {}", self.status, truncate(&e, 80)),
            None => format!("http {}", self.status),
        }
    }
}

/// At most `n` characters of `s`.
pub(super) fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The hop headers of one request and when they were signed. Push bodies are known before the
/// timed window, so their hops can be signed there too (see `push`); the relay accepts a hop
/// whose `x-mbx-ts` is within five minutes of its clock.
pub(super) struct Hop {
    pub headers: [(&'static str, String); 4],
    /// `x-mbx-ts`, as a number.
    pub signed_ms: u64,
}

impl Hop {
    /// Whether the signature is at most `max_age_ms` old now.
    pub(super) fn fresh(&self, max_age_ms: u64) -> bool {
        now_ms().saturating_sub(self.signed_ms) <= max_age_ms
    }
}

/// One connection's worth of client to the relay at `base`.
#[derive(Clone)]
pub(super) struct Conn {
    agent: ureq::Agent,
    base: String,
}

/// Milliseconds since the Unix epoch (the hop `x-mbx-ts`).
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Conn {
    /// A client for `url` (scheme, host and port; a trailing `/` is ignored); https is checked
    /// against `tls` (the host client's trust: bundled web roots or a private CA).
    pub(super) fn new(url: &str, timeout: Duration, tls: ureq::tls::TlsConfig) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            // Payload building between timed rounds can take a while: keep the connection.
            .max_idle_age(Duration::from_secs(3600))
            .tls_config(tls)
            .build();
        Conn {
            agent: config.into(),
            base: url.trim_end_matches('/').to_string(),
        }
    }

    /// Another client like this one, with its own connection.
    pub(super) fn fresh(&self) -> Self {
        Conn {
            agent: ureq::Agent::new_with_config(self.agent.config().clone()),
            base: self.base.clone(),
        }
    }

    /// The four hop headers for `method path_q body`, signed now by `host`.
    pub(super) fn sign(host: &Host, method: &str, path_q: &str, body: &str) -> Hop {
        let signed_ms = now_ms();
        let ts = signed_ms.to_string();
        let (path, query) = match path_q.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_q, None),
        };
        let sig = sign_hop(&host.key, method, &signed_path(path, query), &ts, body);
        Hop {
            headers: [
                ("x-mbx-host", host.name.clone()),
                ("x-mbx-key", host.pub_b64.clone()),
                ("x-mbx-ts", ts),
                ("x-mbx-sig", sig),
            ],
            signed_ms,
        }
    }

    fn finish(res: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Resp, String> {
        let res = res.map_err(|e| format!("transport: {}", truncate(&e.to_string(), 80)))?;
        let status = res.status().as_u16();
        let body = res
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| format!("transport: response lost: {}", truncate(&e.to_string(), 60)))?;
        Ok(Resp { status, body })
    }

    /// GET `path_q` (path with optional `?query`), hop-signed by `host` when given.
    ///
    /// # Errors
    /// `transport: ...` when no complete answer arrived.
    pub(super) fn get(&self, path_q: &str, host: Option<&Host>) -> Result<Resp, String> {
        let mut req = self.agent.get(format!("{}{path_q}", self.base));
        if let Some(h) = host {
            for (k, v) in Self::sign(h, "GET", path_q, "").headers {
                req = req.header(k, v);
            }
        }
        Self::finish(req.call())
    }

    /// GET `path_q` hop-signed by `host` and hand back the status and the body as a stream
    /// (for `text/event-stream`), read at most `limit` bytes.
    ///
    /// # Errors
    /// `transport: ...` when no answer head arrived.
    pub(super) fn get_stream(
        &self,
        path_q: &str,
        host: &Host,
        limit: u64,
    ) -> Result<(u16, ureq::BodyReader<'static>), String> {
        let mut req = self.agent.get(format!("{}{path_q}", self.base));
        for (k, v) in Self::sign(host, "GET", path_q, "").headers {
            req = req.header(k, v);
        }
        let res = req
            .call()
            .map_err(|e| format!("transport: {}", truncate(&e.to_string(), 80)))?;
        let status = res.status().as_u16();
        Ok((
            status,
            res.into_body().into_with_config().limit(limit).reader(),
        ))
    }

    /// POST the JSON text `body` to `path`, hop-signed by `host` when given.
    ///
    /// # Errors
    /// `transport: ...` when no complete answer arrived.
    pub(super) fn post(&self, path: &str, body: &str, host: Option<&Host>) -> Result<Resp, String> {
        let hop = host.map(|h| Self::sign(h, "POST", path, body));
        self.post_with(path, body, hop.as_ref())
    }

    /// POST the JSON text `body` to `path` with hop headers signed earlier for exactly this
    /// method, path and body (see [`Hop`]).
    ///
    /// # Errors
    /// `transport: ...` when no complete answer arrived.
    pub(super) fn post_with(
        &self,
        path: &str,
        body: &str,
        hop: Option<&Hop>,
    ) -> Result<Resp, String> {
        let mut req = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (k, v) in hop.map_or(&[][..], |h| &h.headers[..]) {
            req = req.header(*k, v.as_str());
        }
        Self::finish(req.send(body.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_go_stale_after_their_max_age() {
        let host = Host::generate("h".into());
        let mut hop = Conn::sign(&host, "POST", "/v2/relay/items", "{}");
        assert!(hop.fresh(60_000));
        assert_eq!(hop.headers[2].1, hop.signed_ms.to_string());
        hop.signed_ms -= 60_001;
        assert!(!hop.fresh(60_000));
    }
}
