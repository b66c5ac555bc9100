//! Measures what the streaming head/tail capture costs per pushed megabyte,
//! beside a plain `Vec::extend_from_slice` of the same bytes.
//! `cargo run --release -p caduceus-common --example head_tail_cost`
#![allow(clippy::print_stdout)] // a measurement program: printing is its output

use std::hint::black_box;
use std::time::Instant;

use caduceus_common::text::HeadTailBuffer;

const TOTAL: usize = 10_000_000;
const MAX_CHARS: usize = 50_000;
const ROUNDS: u32 = 20;

fn per_round_ms(mut run: impl FnMut()) -> f64 {
    run();
    let start = Instant::now();
    for _ in 0..ROUNDS {
        run();
    }
    start.elapsed().as_secs_f64() * 1e3 / f64::from(ROUNDS)
}

fn main() {
    let ascii = b"a".repeat(TOTAL);
    let mixed = "héllo wörld, 日本 🦀\n".repeat(TOTAL / 28).into_bytes();
    for (label, bytes) in [("ascii", &ascii), ("mixed utf-8", &mixed)] {
        for chunk in [4 * 1024, 64 * 1024] {
            let raw = per_round_ms(|| {
                let mut out = Vec::new();
                for piece in bytes.chunks(chunk) {
                    out.extend_from_slice(black_box(piece));
                }
                black_box(out);
            });
            let capture = per_round_ms(|| {
                let mut buf = HeadTailBuffer::new(MAX_CHARS);
                for piece in bytes.chunks(chunk) {
                    buf.push(black_box(piece));
                }
                black_box(buf.finish());
            });
            println!(
                "{label:<12} {:>3} KiB chunks: HeadTailBuffer {capture:>6.2} ms / 10 MB, Vec {raw:>6.2} ms",
                chunk / 1024
            );
        }
    }
}
