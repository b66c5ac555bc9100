//! Measures how long `check_command` takes per command.
//!
//! `cargo run --release -p caduceus-guard --example guard_bench [COMMAND…]` prints the
//! verdict and mean time for each command (a built-in corpus when none are given).
#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

const CORPUS: &[&str] = &[
    "git status",
    "ls -la /tmp",
    "cargo test -p caduceus-guard -- --nocapture 2>&1 | tail -20",
    "rm -rf build && npm run build",
    "python3 -c 'print(1)'",
    "git branch -D feat",
    "rm${IFS}-rf${IFS}/",
    "cd /srv/app && git pull && docker compose -f prod.yml up -d --build && docker compose logs --tail=50",
    "find . -name '*.py' -not -path './.venv/*' | xargs grep -n 'TODO' | sort | uniq -c | sort -rn | head -20",
    "bash -c \"for f in *.log; do gzip \\\"$f\\\"; done\"",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let commands: Vec<&str> = if args.is_empty() {
        CORPUS.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    let rounds = 2_000u32;
    for command in commands {
        let verdict = caduceus_guard::check_command(command);
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(caduceus_guard::check_command(black_box(command)));
        }
        let mean = start.elapsed() / rounds;
        println!(
            "{:>8.1} µs  {}  {command:?}",
            mean.as_secs_f64() * 1e6,
            verdict.to_json()
        );
    }
}
