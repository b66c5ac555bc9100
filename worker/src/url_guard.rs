//! The one judge of which addresses the worker's outside-world tools may
//! reach (the browser, `web_extract`, `vision_analyze`): hermes'
//! `is_safe_url` and its always-blocked floor, decided on the worker where
//! the request leaves.
//!
//! A URL is judged by what its host *resolves to*, not by its text: a name
//! whose DNS answer is private is as private as `127.0.0.1`. For the HTTP
//! fetches the judgement happens inside the client's DNS resolver
//! ([`GuardedResolver`]), so the address judged is the address connected to
//! (no window for a DNS answer that changes between check and connect), and
//! redirects are followed by hand with every hop judged again ([`fetch`]).
//! Cloud metadata endpoints are refused even when private URLs are allowed
//! (hermes #16234: a tool on a cloud VM reaches the host's IAM credentials
//! there).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use std::borrow::Cow;

use caduceus_common::redact::{RedactMode, redact};
use futures::StreamExt;

/// Why a URL may not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Loopback, private, link-local, CGNAT, unspecified or multicast.
    #[error("Blocked: URL targets a private or internal address")]
    Private,
    /// A cloud metadata endpoint (refused whatever the configuration says).
    #[error("Blocked: URL targets a cloud metadata endpoint")]
    Metadata,
    /// Not http(s) (a `file:` URL would read the worker's disk).
    #[error("Blocked: '{0}:' URLs cannot be opened; use an http(s) URL")]
    Scheme(String),
    /// The URL holds a credential's shape (hermes: an exfiltration attempt).
    #[error(
        "Blocked: URL contains what appears to be an API key or token. Secrets must not be sent in URLs."
    )]
    Secret,
    /// The host did not resolve: nothing to judge it by.
    #[error("Blocked: the host '{0}' does not resolve, so its address cannot be checked")]
    Unresolved(String),
}

/// Names of metadata services that resolve to link-local addresses on
/// their clouds (GCP, AWS's `instance-data`); refused before any lookup.
const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Judges `url` for the browser, which also opens `about:`, `data:` and
/// `blob:` pages; `Ok` when it may be opened.
pub async fn check(url: &str, allow_private: bool) -> Result<(), Refusal> {
    let Ok(parsed) = url::Url::parse(url) else {
        // Chromium reports an unparsable URL itself.
        return Ok(());
    };
    match parsed.scheme() {
        "http" | "https" | "ws" | "wss" => {}
        "about" | "data" | "blob" => return Ok(()),
        other => return Err(Refusal::Scheme(other.to_owned())),
    }
    let Some(host) = parsed.host() else {
        return Ok(());
    };
    let addresses = match host {
        url::Host::Ipv4(ip) => vec![IpAddr::V4(ip)],
        url::Host::Ipv6(ip) => vec![IpAddr::V6(ip)],
        url::Host::Domain(name) => {
            let port = parsed.port_or_known_default().unwrap_or(80);
            resolve(name, port)
                .await?
                .into_iter()
                .map(|a| a.ip())
                .collect()
        }
    };
    judge(&addresses, allow_private)
}

/// The addresses `name` resolves to, or the refusal of a metadata name or
/// one that does not resolve. `localhost` names are loopback without asking
/// DNS (RFC 6761; resolvers differ on `*.localhost`).
async fn resolve(name: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if METADATA_HOSTS.contains(&name.as_str()) {
        return Err(Refusal::Metadata);
    }
    if name == "localhost" || name.ends_with(".localhost") {
        return Ok(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]);
    }
    let found: Vec<SocketAddr> = match tokio::net::lookup_host((name.as_str(), port)).await {
        Ok(found) => found.collect(),
        Err(_) => Vec::new(),
    };
    if found.is_empty() {
        Err(Refusal::Unresolved(name))
    } else {
        Ok(found)
    }
}

/// Resolves `host` (a URL host: a name, an IPv4 address in any spelling a
/// URL allows, or a bracketed IPv6 address) and judges every answer: the
/// addresses to connect to, which are then the only ones that may be
/// connected to (the browser's proxy connects to these and nothing else,
/// so a second DNS answer never reaches a socket).
pub async fn resolve_judged(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, Refusal> {
    let parsed = url::Host::parse(host).map_err(|_| Refusal::Unresolved(host.to_owned()))?;
    let found = match parsed {
        url::Host::Ipv4(ip) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
        url::Host::Ipv6(ip) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
        url::Host::Domain(name) => resolve(&name, port).await?,
    };
    let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
    judge(&ips, allow_private)?;
    Ok(found)
}

/// Refuses the set when any address is a metadata endpoint, or (unless
/// allowed) private: one private answer among public ones is enough for a
/// client to connect to it.
pub fn judge(addresses: &[IpAddr], allow_private: bool) -> Result<(), Refusal> {
    if addresses.iter().any(is_metadata) {
        return Err(Refusal::Metadata);
    }
    if !allow_private && addresses.iter().any(is_private) {
        return Err(Refusal::Private);
    }
    Ok(())
}

/// The always-refused floor: all of IPv4 link-local 169.254.0.0/16 (AWS,
/// GCP, Azure, OCI at .169.254, ECS at .170.2, and whatever a cloud puts
/// next to them: nothing public lives there), Alibaba's 100.100.100.200,
/// OCI's legacy 192.0.0.192 and AWS's IPv6 fd00:ec2::254 — also when the
/// IPv4 address is carried inside an IPv6 one ([`embedded_v4`]).
fn is_metadata(ip: &IpAddr) -> bool {
    let v4_is_metadata = |v4: Ipv4Addr| {
        v4.is_link_local()
            || v4 == Ipv4Addr::new(100, 100, 100, 200)
            || v4 == Ipv4Addr::new(192, 0, 0, 192)
    };
    match ip {
        IpAddr::V4(v4) => v4_is_metadata(*v4),
        IpAddr::V6(v6) => {
            *v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
                || embedded_v4(v6).into_iter().any(v4_is_metadata)
        }
    }
}

/// The IPv4 addresses an IPv6 address carries and that a host or relay on
/// the path may turn it into: IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d`, SIIT `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4
/// `2002:aabb:ccdd::` and Teredo `2001:0:server:…:client^ffff`. Each is
/// judged as the IPv4 address it leads to.
fn embedded_v4(v6: &Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo]
        | [0, 0, 0, 0, 0xffff, 0, hi, lo]
        | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => vec![v4(hi, lo)],
        // `::` and `::1` are judged as IPv6 (unspecified, loopback).
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) > (0, 1) => vec![v4(hi, lo)],
        [0x2002, hi, lo, ..] => vec![v4(hi, lo)],
        [0x2001, 0, server_hi, server_lo, _, _, hi, lo] => {
            vec![v4(server_hi, server_lo), v4(!hi, !lo)]
        }
        _ => Vec::new(),
    }
}

/// Not a public unicast address.
pub fn is_private(ip: &IpAddr) -> bool {
    let v4_is_private = |v4: Ipv4Addr| {
        let [a, b, c, _] = v4.octets();
        v4.is_loopback()
            || v4.is_private()
            || v4.is_link_local()
            || v4.is_unspecified()
            || v4.is_broadcast()
            || v4.is_multicast()
            || v4.is_documentation()
            || a == 0
            // reserved 240.0.0.0/4
            || a >= 240
            // CGNAT 100.64.0.0/10 and benchmarking 198.18.0.0/15
            || (a == 100 && (64..128).contains(&b))
            || (a == 198 && (b == 18 || b == 19))
            // IETF protocol assignments 192.0.0.0/24 (DS-Lite, NAT64 discovery, OCI)
            || (a == 192 && b == 0 && c == 0)
    };
    match ip {
        IpAddr::V4(v4) => v4_is_private(*v4),
        IpAddr::V6(v6) => {
            let [first, second, third, ..] = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // unique local fc00::/7, link-local fe80::/10, site-local fec0::/10
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                // NAT64 local-use 64:ff9b:1::/48 (its IPv4 may sit anywhere in it)
                || (first == 0x64 && second == 0xff9b && third == 1)
                // discard-only 100::/64, documentation 2001:db8::/32
                || (first == 0x100 && v6.segments()[1..4] == [0, 0, 0])
                || (first == 0x2001 && second == 0xdb8)
                || embedded_v4(v6).into_iter().any(v4_is_private)
        }
    }
}

/// reqwest's resolver for the guarded client: every name it connects to is
/// resolved here and refused (the connection never starts) when an answer
/// is private or a metadata address.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let name = name.as_str().to_owned();
        Box::pin(async move {
            // reqwest puts the URL's port on the addresses itself.
            let found = resolve(&name, 0).await?;
            let ips: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
            judge(&ips, allow_private)?;
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(addrs)
        })
    }
}

/// Why a guarded fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Refused(Refusal),
    /// A redirect led to a refused address (the first URL passed).
    #[error("Blocked: redirect landed on {}", redirect_target(.0))]
    RedirectRefused(Refusal),
    #[error("Invalid URL '{0}'")]
    InvalidUrl(String),
    #[error("Too many redirects (more than {0})")]
    TooManyRedirects(usize),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("the response is larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    Http(String),
}

fn redirect_target(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Metadata => "a cloud metadata endpoint",
        _ => "a private/internal address",
    }
}

/// Limits of one fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    pub allow_private: bool,
    /// The whole exchange, redirects included.
    pub timeout: Duration,
    /// Longest body read; a longer one fails the fetch.
    pub max_bytes: usize,
}

/// What a fetch brought back.
#[derive(Debug)]
pub struct Fetched {
    /// The URL after redirects.
    pub url: String,
    /// The `content-type` header, lower case, without parameters.
    pub content_type: String,
    /// The `charset` parameter of the content type, if any.
    pub charset: Option<String>,
    pub body: Vec<u8>,
}

/// hermes caps redirects at 10 hops, as browsers do roughly.
const MAX_REDIRECTS: usize = 10;

/// The client every guarded fetch uses: our resolver, no automatic
/// redirects (each hop is judged here), and no proxy (a proxy would resolve
/// the name itself, out of the judge's sight).
pub fn client(allow_private: bool, timeout: Duration) -> Result<reqwest::Client, FetchError> {
    ensure_crypto_provider();
    reqwest::Client::builder()
        .dns_resolver(GuardedResolver { allow_private })
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10).min(timeout))
        .user_agent(concat!("caduceus/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| FetchError::Http(err.to_string()))
}

/// reqwest is built without a default crypto provider; the first client in
/// the process installs ring's (as the Daytona client does).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// GETs `url`, following up to ten redirects, each hop judged (scheme,
/// literal addresses here; names in the resolver) before it is requested.
pub async fn fetch(url: &str, limits: FetchLimits) -> Result<Fetched, FetchError> {
    if carries_secret(url) {
        return Err(FetchError::Refused(Refusal::Secret));
    }
    let client = client(limits.allow_private, limits.timeout)?;
    let run = async {
        let mut current =
            url::Url::parse(url).map_err(|_| FetchError::InvalidUrl(url.to_owned()))?;
        for hop in 0..=MAX_REDIRECTS {
            let refused = |refusal| {
                if hop == 0 {
                    FetchError::Refused(refusal)
                } else {
                    FetchError::RedirectRefused(refusal)
                }
            };
            judge_url(&current, limits.allow_private).map_err(refused)?;
            let response = match client.get(current.clone()).send().await {
                Ok(response) => response,
                Err(err) => {
                    return Err(match refusal_in(&err) {
                        Some(refusal) => refused(refusal),
                        None => FetchError::Http(describe(&err)),
                    });
                }
            };
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
            {
                current = current
                    .join(location)
                    .map_err(|_| FetchError::InvalidUrl(location.to_owned()))?;
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status(status.as_u16()));
            }
            let (content_type, charset) = content_type_of(&response);
            let body = read_capped(response, limits.max_bytes).await?;
            return Ok(Fetched {
                url: current.to_string(),
                content_type,
                charset,
                body,
            });
        }
        Err(FetchError::TooManyRedirects(MAX_REDIRECTS))
    };
    match tokio::time::timeout(limits.timeout, run).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::Http(format!(
            "timed out after {} s",
            limits.timeout.as_secs()
        ))),
    }
}

/// The checks a URL's text allows: the scheme, and a literal address
/// (which never reaches the resolver).
fn judge_url(url: &url::Url, allow_private: bool) -> Result<(), Refusal> {
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(Refusal::Scheme(other.to_owned())),
    }
    match url.host() {
        Some(url::Host::Ipv4(ip)) => judge(&[IpAddr::V4(ip)], allow_private),
        Some(url::Host::Ipv6(ip)) => judge(&[IpAddr::V6(ip)], allow_private),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if METADATA_HOSTS.contains(&name.as_str()) {
                Err(Refusal::Metadata)
            } else {
                Ok(())
            }
        }
        None => Err(Refusal::Unresolved(String::new())),
    }
}

/// Our resolver's refusal, found among the causes of reqwest's error.
fn refusal_in(err: &reqwest::Error) -> Option<Refusal> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<Refusal>() {
            return Some(refusal.clone());
        }
        source = cause.source();
    }
    None
}

/// reqwest's error with its causes (its own text is only "error sending request").
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn content_type_of(response: &reqwest::Response) -> (String, Option<String>) {
    let raw = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut parts = raw.split(';');
    let kind = parts.next().unwrap_or_default().trim().to_owned();
    let charset = parts
        .filter_map(|p| p.trim().strip_prefix("charset="))
        .map(|c| c.trim_matches('"').to_owned())
        .next();
    (kind, charset)
}

async fn read_capped(response: reqwest::Response, max: usize) -> Result<Vec<u8>, FetchError> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(FetchError::TooLarge(max));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| FetchError::Http(describe(&err)))?;
        if body.len() + chunk.len() > max {
            return Err(FetchError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A URL (or its percent-decoded form) that holds a credential's shape:
/// refused by every outside-world tool that takes a URL (the browser's
/// navigations, `web_extract`, `vision_analyze`), before any request.
pub fn carries_secret(url: &str) -> bool {
    let decoded = percent_decode(url);
    [url, decoded.as_str()]
        .iter()
        .any(|text| matches!(redact(text, RedactMode::General), Cow::Owned(_)))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "url_guard_tests.rs"]
mod tests;
