//! The one way the binary opens a TCP listener.
//!
//! `tokio::net::TcpListener::bind` leaves the accept queue at 128 entries. A
//! fleet whose workers reconnect together (a coordinator restart, a Slurm
//! array starting) overflows that: the kernel drops the handshakes it cannot
//! queue and some clients see their connection reset instead of a slow
//! accept. 4096 is what the kernel allows by default (`net.core.somaxconn`
//! caps it where it is lower).

use std::io;
use tokio::net::{TcpListener, TcpSocket, lookup_host};

/// Backlog asked of the kernel for every listener.
const ACCEPT_BACKLOG: u32 = 4096;

/// Binds `address` (`host:port`, port 0 for any) with a deep accept queue,
/// trying each resolved address in turn as `TcpListener::bind` does.
pub(crate) async fn bind(address: &str) -> io::Result<TcpListener> {
    let mut last = None;
    for candidate in lookup_host(address).await? {
        let socket = if candidate.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As std's bind does, so that a restarted coordinator can take its
        // port back while old connections sit in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        match socket
            .bind(candidate)
            .and_then(|()| socket.listen(ACCEPT_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{address} resolves to no address"),
        )
    }))
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
