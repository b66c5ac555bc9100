use super::bind;
use std::time::Duration;
use tokio::net::TcpStream;

/// A thousand workers reconnecting at once must all get through even while
/// the accept loop is busy: the kernel queues their handshakes. With the
/// default queue of 128 the 130th connection waits on dropped SYNs and then
/// fails, which is what a 1,000-worker fleet saw as "connection reset".
#[tokio::test]
async fn connections_queue_beyond_128_before_any_is_accepted() {
    let listener = bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for n in 0..600 {
        // Generous: a queued connection completes at once; one the kernel
        // dropped would wait for SYN retries (1 s, 3 s, ...) and time out.
        let connected = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(address))
            .await
            .unwrap_or_else(|_| panic!("connection {n} was not queued"));
        held.push(connected.unwrap());
    }
    // Nothing was accepted while they queued; the first is there to take.
    let (_, peer) = listener.accept().await.unwrap();
    assert_eq!(peer, held[0].local_addr().unwrap());
}

#[tokio::test]
async fn an_address_in_use_is_an_error_not_a_second_listener() {
    let first = bind("127.0.0.1:0").await.unwrap();
    let taken = first.local_addr().unwrap().to_string();
    let error = bind(&taken).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
}
