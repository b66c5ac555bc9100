//! Measures how long `check_command` takes per command.
//!
//! `cargo run --release -p caduceus-guard --example guard_bench [COMMAND…]` prints the
//! verdict and mean time for each command (a built-in corpus when none are given), then
//! the time of one check of each large input (a long commit message, a here-document,
//! and inputs at the 1 MiB size limit).
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
    "cat > /tmp/script <<'EOF'\necho hi\nEOF\nbash /tmp/script",
    "cp build/app /usr/local/bin/app && rsync -a --delete dist/ /srv/www/",
];

fn large_inputs() -> Vec<(&'static str, String)> {
    let message = "x".repeat(6_500);
    vec![
        (
            "6.5 KB commit message",
            format!("git commit -m \"{message}\""),
        ),
        (
            "120 KB here-document",
            format!("cat > f <<'EOF'\n{}\nEOF", "line of text\n".repeat(9_000)),
        ),
        (
            "1 MiB single word",
            format!("echo {}", "a".repeat((1 << 20) - 5)),
        ),
        ("1 MiB of `\"$(`", format!("{};", "\"$(".repeat(349_000))),
        ("1 MiB of `rm `", format!("{};", "rm ".repeat(349_000))),
        ("1 MiB of commands", "echo a; ".repeat(131_000)),
    ]
}

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
    if args.is_empty() {
        for (label, command) in large_inputs() {
            let start = Instant::now();
            let verdict = caduceus_guard::check_command(&command);
            println!(
                "{:>8.1} ms  {}  {label}",
                start.elapsed().as_secs_f64() * 1e3,
                verdict.kind()
            );
        }
    }
}
