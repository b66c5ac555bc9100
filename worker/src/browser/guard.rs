//! Which addresses the browser may open: hermes' `is_safe_url` and its
//! always-blocked floor, decided on the worker where the browser runs.
//!
//! A URL is judged by what its host *resolves to*, not by its text: a name
//! whose DNS answer is private is as private as `127.0.0.1`. Cloud metadata
//! endpoints are refused even when private URLs are allowed (hermes #16234:
//! a browser on a cloud VM reaches the host's IAM credentials there).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a URL may not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Loopback, private, link-local, CGNAT, unspecified or multicast.
    Private,
    /// A cloud metadata endpoint (refused whatever the configuration says).
    Metadata,
    /// Not http(s), `about:` or `data:` (a `file:` URL would read the worker's disk).
    Scheme(String),
    /// The host did not resolve: nothing to judge it by.
    Unresolved(String),
}

/// Names of metadata services that resolve to link-local addresses on their clouds.
const METADATA_HOSTS: &[&str] = &["metadata.google.internal", "metadata.goog", "metadata"];

/// Judges `url`; `Ok` when the browser may open it.
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
    let addresses: Vec<IpAddr> = match host {
        url::Host::Ipv4(ip) => vec![IpAddr::V4(ip)],
        url::Host::Ipv6(ip) => vec![IpAddr::V6(ip)],
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if METADATA_HOSTS.contains(&name.as_str()) {
                return Err(Refusal::Metadata);
            }
            if name == "localhost" || name.ends_with(".localhost") {
                vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
            } else {
                let port = parsed.port_or_known_default().unwrap_or(80);
                let found = tokio::net::lookup_host((name.as_str(), port))
                    .await
                    .map(|found| found.map(|a| a.ip()).collect::<Vec<_>>());
                match found {
                    Ok(found) => found,
                    Err(_) => return Err(Refusal::Unresolved(name)),
                }
            }
        }
    };
    if addresses.iter().any(is_metadata) {
        return Err(Refusal::Metadata);
    }
    if !allow_private && addresses.iter().any(is_private) {
        return Err(Refusal::Private);
    }
    Ok(())
}

/// The AWS/GCP/Azure (169.254.169.254), ECS (169.254.170.2), Alibaba
/// (100.100.100.200) and AWS IPv6 (fd00:ec2::254) metadata addresses.
fn is_metadata(ip: &IpAddr) -> bool {
    match canonical(*ip) {
        IpAddr::V4(v4) => [
            Ipv4Addr::new(169, 254, 169, 254),
            Ipv4Addr::new(169, 254, 170, 2),
            Ipv4Addr::new(100, 100, 100, 200),
        ]
        .contains(&v4),
        IpAddr::V6(v6) => v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    }
}

/// An IPv4 address wrapped in IPv6 (`::ffff:127.0.0.1`) is judged as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Not a public unicast address.
pub fn is_private(ip: &IpAddr) -> bool {
    match canonical(*ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                // CGNAT 100.64.0.0/10 and benchmarking 198.18.0.0/15
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // unique local fc00::/7, link-local fe80::/10
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
