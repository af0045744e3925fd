//! Signed HTTP calls to the relay, exactly as an agentmbx host makes them (docs/protocol.md §2):
//! `x-mbx-host`, `x-mbx-key`, `x-mbx-ts`, `x-mbx-sig` over the method, the path (with its query
//! for `/v2/`), the timestamp and the exact body. Any transport failure, including a response lost
//! mid-body, is [`HostError::Network`]: the caller must treat the outcome as unknown.

use std::time::Duration;

use serde_json::Value;

use super::{now_ms, HostError};
use relay_wire::hop::{sign_hop, signed_path};
use relay_wire::keys::SigningKey;

/// Largest response body read (a full pull page is at most ~8 MiB of wire bytes as base64 + JSON).
const MAX_RESPONSE: u64 = 32 * 1024 * 1024;

/// An HTTP answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
}

impl Answer {
    /// The `error` string of an error answer, or the status.
    pub fn error(&self) -> String {
        match self.body.get("error").and_then(Value::as_str) {
            Some(e) => format!("HTTP {}: {e}", self.status),
            None => format!("HTTP {}", self.status),
        }
    }
}

/// Where and how this host reaches its relay: the URL and the private CA (PEM) `relay set --ca`
/// stored (none: the bundled web roots). Every request of the host (sync, run and its watcher,
/// rotate, doctor, a `send` the daemon seals) goes through a [`RelayClient`] built from the
/// stored one ([`super::store::HostStore::endpoint_of`]): there is no other way to build a client.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The relay's base URL.
    pub url: String,
    /// The private CA (PEM) to trust instead of the bundled web roots.
    pub ca: Option<String>,
}

/// A client for one relay, signing as one host.
pub struct RelayClient<'a> {
    agent: ureq::Agent,
    base: String,
    host: String,
    key: &'a SigningKey,
}

impl<'a> RelayClient<'a> {
    /// A client for the relay at `to` (scheme, host and port; a trailing `/` is ignored); https
    /// is checked against its CA alone when it has one, else against the bundled web roots.
    ///
    /// # Errors
    /// [`HostError::Store`] when the CA is not a PEM certificate.
    pub fn new(
        to: &Endpoint,
        host: &str,
        key: &'a SigningKey,
        timeout: Duration,
    ) -> Result<Self, HostError> {
        let tls = super::trust::tls_config(to.ca.as_deref())
            .map_err(|e| HostError::Store(format!("the relay CA kept by `relay set --ca`: {e}")))?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .tls_config(tls)
            .build();
        Ok(RelayClient {
            agent: config.into(),
            base: to.url.trim_end_matches('/').to_string(),
            host: host.to_string(),
            key,
        })
    }

    /// The HTTP agent (its pool of keep-alive connections), for the next client of this relay.
    pub fn agent(&self) -> ureq::Agent {
        self.agent.clone()
    }

    /// This client on `agent` (an earlier client's, built for the same relay, CA and timeout)
    /// instead of its own: the daemon's passes reuse one connection instead of opening one each.
    #[must_use]
    pub(crate) fn reusing(mut self, agent: ureq::Agent) -> Self {
        self.agent = agent;
        self
    }

    fn headers(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        body: &str,
    ) -> [(&'static str, String); 4] {
        let ts = now_ms().to_string();
        let sig = sign_hop(self.key, method, &signed_path(path, query), &ts, body);
        [
            ("x-mbx-host", self.host.clone()),
            ("x-mbx-key", self.key.public_b64()),
            ("x-mbx-ts", ts),
            ("x-mbx-sig", sig),
        ]
    }

    fn answer(
        res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, HostError> {
        let res = res.map_err(|e| HostError::Network(e.to_string()))?;
        let status = res.status().as_u16();
        let text = res
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| HostError::Network(format!("response lost: {e}")))?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Answer { status, body })
    }

    /// GET `path?query`, with a signed hop when `signed`.
    ///
    /// # Errors
    /// [`HostError::Network`] when no complete answer arrived.
    pub fn get(&self, path: &str, query: Option<&str>, signed: bool) -> Result<Answer, HostError> {
        Self::answer(self.get_request(path, query, signed).call())
    }

    /// A signed GET like [`Self::get`] that also returns the response header `name` (the host
    /// daemon learns from `x-mbx-wait-max` whether the relay holds pulls).
    ///
    /// # Errors
    /// [`HostError::Network`] when no complete answer arrived.
    pub(crate) fn get_with_header(
        &self,
        path: &str,
        query: Option<&str>,
        name: &str,
    ) -> Result<(Answer, Option<String>), HostError> {
        let res = self
            .get_request(path, query, true)
            .call()
            .map_err(|e| HostError::Network(e.to_string()))?;
        let header = res
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Self::answer(Ok(res)).map(|a| (a, header))
    }

    fn get_request(
        &self,
        path: &str,
        query: Option<&str>,
        signed: bool,
    ) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let url = match query {
            Some(q) => format!("{}{path}?{q}", self.base),
            None => format!("{}{path}", self.base),
        };
        let mut req = self.agent.get(&url);
        if signed {
            for (k, v) in self.headers("GET", path, query, "") {
                req = req.header(k, v);
            }
        }
        req
    }

    /// POST a JSON body to `path`, with a signed hop when `signed`.
    ///
    /// # Errors
    /// [`HostError::Network`] when no complete answer arrived.
    pub fn post(&self, path: &str, body: &Value, signed: bool) -> Result<Answer, HostError> {
        let text = body.to_string();
        let mut req = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        if signed {
            for (k, v) in self.headers("POST", path, None, &text) {
                req = req.header(k, v);
            }
        }
        Self::answer(req.send(text.as_bytes()))
    }

    /// The relay's `Date` header on an unsigned info call (`host doctor`'s clock check).
    ///
    /// # Errors
    /// [`HostError::Network`] when no answer arrived.
    pub(crate) fn server_date(&self) -> Result<Option<String>, HostError> {
        let res = self
            .agent
            .get(format!("{}/v2/relay/info", self.base))
            .call()
            .map_err(|e| HostError::Network(e.to_string()))?;
        let date = res.headers().get("date").and_then(|v| v.to_str().ok());
        Ok(date.map(str::to_string))
    }
}
