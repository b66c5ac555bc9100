//! Measures what redaction costs on ordinary (secret-free) output.
//! `cargo run --release -p caduceus-common --example redact_cost`
#![allow(clippy::print_stdout)] // a measurement program: printing is its output

use std::hint::black_box;
use std::time::Instant;

use caduceus_common::redact::{RedactMode, mask_known_secrets, redact, register_secret};
use caduceus_common::text::strip_ansi;

const PROSE: &str = "The build finished without errors and all tests passed in the usual \
time. Nothing in this paragraph looks like a credential, a header or an address; it is \
plain text of the kind a model writes in a summary or a tool prints as a progress report.\n";

const LS: &str = "drwxr-xr-x  2 root root  4096 Nov 30 00:49 testdata\n\
-rw-r--r--  1 root root 17585 Nov 30 00:49 gen_redact_cases.py\n\
-rw-r--r--  1 root root   512 Nov 30 00:49 Cargo.toml\n";

const PYTHON: &str = "def handler(request, limit=10):\n    \"\"\"Return the first items.\"\"\"\n    \
items = [x for x in request.items if x.ok]\n    result = {\"count\": len(items), \"items\": items[:limit]}\n    \
logger.info(\"handled %d items\", len(items))\n    return json.dumps(result, indent=2)\n\n";

const JSON: &str = "{\"name\": \"caduceus\", \"version\": \"0.1.0\", \"deps\": [\"serde\", \"regex\"], \
\"count\": 3, \"nested\": {\"a\": 1, \"b\": [1, 2, 3]}}\n";

fn measure(label: &str, unit: &str, mode: RedactMode<'_>) {
    let text = unit.repeat(64 * 1024 / unit.len() + 1);
    let kib = text.len() as f64 / 1024.0;
    let rounds = 200;
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(redact(black_box(&text), mode));
    }
    let per_kib = start.elapsed().as_secs_f64() * 1e6 / (rounds as f64 * kib);
    println!("{label:<28} {per_kib:>6.2} µs/KiB");
}

fn main() {
    for (label, unit) in [
        ("prose", PROSE),
        ("ls -l", LS),
        ("python source", PYTHON),
        ("json", JSON),
    ] {
        measure(&format!("{label} / General"), unit, RedactMode::General);
        measure(
            &format!("{label} / CodeOutput"),
            unit,
            RedactMode::CodeOutput,
        );
    }
    // What every result pays once a process knows its secrets: a fleet token, two API
    // keys, a sudo password and an AWS secret, each in seven forms.
    for secret in [
        "tok-9f8e7d6c5b4a39281706",
        "sk-proj-Zq8vK2mW9pL4xR7nT3bY5cJ6",
        "ghp_Qm7Zx2Kp9Wv4Lr8Tb3NdQm7Zx2Kp9Wv4Lr8T",
        "correct horse",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzz8Kq2Vn5",
    ] {
        register_secret(secret);
    }
    for (label, unit) in [("prose", PROSE), ("python source", PYTHON), ("json", JSON)] {
        let text = unit.repeat(64 * 1024 / unit.len() + 1);
        let kib = text.len() as f64 / 1024.0;
        let start = Instant::now();
        for _ in 0..200 {
            black_box(mask_known_secrets(black_box(&text)));
        }
        let per_kib = start.elapsed().as_secs_f64() * 1e6 / (200.0 * kib);
        println!(
            "{:<28} {per_kib:>6.2} µs/KiB",
            format!("{label} / known secrets")
        );
        measure(
            &format!("{label} / General + known"),
            unit,
            RedactMode::General,
        );
    }
    let text = PYTHON.repeat(1000);
    let start = Instant::now();
    for _ in 0..200 {
        black_box(strip_ansi(black_box(&text)));
    }
    let per_kib = start.elapsed().as_secs_f64() * 1e6 / (200.0 * text.len() as f64 / 1024.0);
    println!("{:<28} {per_kib:>6.2} µs/KiB", "strip_ansi (no escapes)");
}
