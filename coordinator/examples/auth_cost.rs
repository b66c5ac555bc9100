//! Measures what checking a request's token and role costs (every RPC of
//! both services pays it): the shared token, a scoped token among many, and
//! a refused one.
//! `cargo run --release -p caduceus-coordinator --example auth_cost`
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)] // a measurement program

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use caduceus_coordinator::auth::{Authenticator, Role, TokenStore};

const CALL: &str = "/caduceus.v1.Control/CallTool";

fn measure(label: &str, auth: &Authenticator, header: &str) {
    let rounds = 200_000;
    let start = Instant::now();
    for _ in 0..rounds {
        let _ = black_box(auth.authorize(black_box(CALL), Some(black_box(header)), false));
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / f64::from(rounds);
    println!("{label:<34} {ns:>7.0} ns/request");
}

fn main() {
    let store = Arc::new(TokenStore::open(None).expect("an in-memory token table"));
    let mut client = String::new();
    for i in 0..1000 {
        let (_, secret) = store
            .create(Role::Client, &format!("client-{i}"), None)
            .expect("a token");
        client = secret;
    }
    let auth = Authenticator::new("0123456789abcdef0123456789abcdef", store);
    let bearer = caduceus_proto::bearer;
    measure(
        "shared token",
        &auth,
        &bearer("0123456789abcdef0123456789abcdef"),
    );
    measure("scoped token (1000 in the table)", &auth, &bearer(&client));
    measure("unknown token (refused)", &auth, &bearer("cdt_nope"));
}
