//! The caduceus wire protocol, package `caduceus.v1`. See `README.md` beside this
//! crate for the guarantees the protocol makes.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod v1 {
    tonic::include_proto!("caduceus.v1");
}

pub use v1::*;

pub mod trace;

impl From<caduceus_common::result::CallStatus> for CallStatus {
    fn from(status: caduceus_common::result::CallStatus) -> Self {
        use caduceus_common::result::CallStatus as S;
        match status {
            S::Ok => CallStatus::Ok,
            S::Error => CallStatus::Error,
            S::Blocked => CallStatus::Blocked,
            S::PendingApproval => CallStatus::PendingApproval,
            S::Cancelled => CallStatus::Cancelled,
            S::Timeout => CallStatus::Timeout,
        }
    }
}

/// A status as sent on the wire (`CallResult.status`,
/// `CallToolResponse.status`); a missing or unknown one is an error, so a
/// result is never taken for a success by default.
pub fn call_status(wire: i32) -> caduceus_common::result::CallStatus {
    use caduceus_common::result::CallStatus as S;
    match CallStatus::try_from(wire).unwrap_or(CallStatus::Unspecified) {
        CallStatus::Ok => S::Ok,
        CallStatus::Blocked => S::Blocked,
        CallStatus::PendingApproval => S::PendingApproval,
        CallStatus::Cancelled => S::Cancelled,
        CallStatus::Timeout => S::Timeout,
        CallStatus::Error | CallStatus::Unspecified => S::Error,
    }
}

/// Largest message either side of a connection sends or accepts.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Why a coordinator address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("invalid coordinator address '{url}': {reason}")]
    BadAddress { url: String, reason: String },
    #[error("cannot read the CA certificate {}: {source}", path.display())]
    CaFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the client certificate or key {}: {source}", path.display())]
    IdentityFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// How a client proves who it is over TLS, besides its token: a certificate
/// and its key (PEM files), for a coordinator that asks for them.
pub type ClientIdentity<'a> = (&'a std::path::Path, &'a std::path::Path);

/// The channel every client of a coordinator uses, workers and the CLI alike:
/// `http://` added to a bare `host:port`, TCP_NODELAY, HTTP/2 keep-alive pings
/// every 10 s (20 s timeout), and for `https://` TLS trusting `ca` (PEM) or
/// the public roots, presenting `identity` when given (which needs
/// `https://`).
pub fn coordinator_endpoint(
    url: &str,
    ca: Option<&std::path::Path>,
    identity: Option<ClientIdentity<'_>>,
    connect_timeout: std::time::Duration,
) -> Result<tonic::transport::Endpoint, EndpointError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let full = if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    let bad = |reason: String| EndpointError::BadAddress {
        url: url.to_owned(),
        reason,
    };
    let mut endpoint = Endpoint::from_shared(full.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(std::time::Duration::from_secs(10))
        .keep_alive_timeout(std::time::Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if full.starts_with("https://") {
        let mut tls = match ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| EndpointError::CaFile {
                    path: path.to_owned(),
                    source,
                })?;
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => ClientTlsConfig::new().with_webpki_roots(),
        };
        if let Some((cert, key)) = identity {
            let read = |path: &std::path::Path| {
                std::fs::read(path).map_err(|source| EndpointError::IdentityFile {
                    path: path.to_owned(),
                    source,
                })
            };
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
    } else if identity.is_some() {
        return Err(bad(
            "a client certificate needs an https:// coordinator".to_owned()
        ));
    }
    Ok(endpoint)
}

/// Metadata key that carries the shared token on every RPC.
pub const AUTHORIZATION: &str = "authorization";

/// Formats the value of the `authorization` metadata for a token.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Extracts the token from an `authorization` metadata value, if it is a
/// well-formed bearer value.
pub fn token_from_authorization(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        let token = token.trim();
        (!token.is_empty()).then_some(token)
    } else {
        None
    }
}

/// Compares two tokens in time that does not depend on where they differ.
pub fn tokens_match(expected: &str, presented: &str) -> bool {
    let (a, b) = (expected.as_bytes(), presented.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_round_trip() {
        assert_eq!(token_from_authorization(&bearer("s3cret")), Some("s3cret"));
        assert_eq!(token_from_authorization("Basic abc"), None);
        assert_eq!(token_from_authorization("Bearer "), None);
        assert_eq!(token_from_authorization("bearer  x "), Some("x"));
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", "abcd"));
        assert!(!tokens_match("abc", ""));
        assert!(!tokens_match("", "x"));
    }
}
