use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};

use super::*;

// The registry is process-wide and other tests of this crate run in the same
// process, so each test registers values no other test's text contains.

#[test]
fn exact_value_is_masked_inside_longer_strings() {
    let secret = "Xq7tokVALUEfrTsts0001Qz";
    assert!(register_secret(secret));
    assert_eq!(
        mask_known_secrets(&format!("a={secret}; url=https://h/?t={secret}&x")),
        "a=***; url=https://h/?t=***&x"
    );
    assert_eq!(
        mask_known_secrets(&format!("glued{secret}glued")),
        "glued***glued"
    );
    let untouched = "nothing secret here";
    assert!(matches!(mask_known_secrets(untouched), Cow::Borrowed(_)));
}

#[test]
fn reversed_and_base64_forms_are_masked() {
    let secret = "sk-Rev3rseAndB64-check-0002-Qw9Zp7Lm";
    register_secret(secret);
    let reversed: String = secret.chars().rev().collect();
    assert_eq!(mask_known_secrets(&format!("[{reversed}]")), "[***]");
    for engine in [&STANDARD, &URL_SAFE] {
        // `echo $X | base64` encodes the value and a newline.
        let encoded = engine.encode(format!("{secret}\n"));
        let masked = mask_known_secrets(&encoded).into_owned();
        assert!(masked.starts_with("***"), "{encoded} -> {masked}");
        assert!(masked.len() <= 8, "{encoded} -> {masked}");
        // Inside a longer encoded stream, at every alignment.
        for prefix in ["", "a", "ab", "abc", "PREFIX: "] {
            let encoded = engine.encode(format!("{prefix}{secret} and more text"));
            let masked = mask_known_secrets(&encoded).into_owned();
            assert!(masked.contains("***"), "{prefix:?}: {encoded} -> {masked}");
            assert!(masked.len() < encoded.len() - 30, "{encoded} -> {masked}");
        }
    }
}

#[test]
fn wrapped_base64_and_json_escaped_breaks_are_masked() {
    let secret = "wr4pped-s3cr3t-0003-Kq".repeat(5);
    register_secret(&secret);
    let encoded = STANDARD.encode(&secret);
    let wrapped: Vec<String> = encoded
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    // What is left is the last character or two, whose bits the secret
    // shares with the padding, and the `=` padding itself.
    let masked = mask_known_secrets(&wrapped.join("\n")).into_owned();
    assert!(masked.starts_with("***") && masked.len() <= 6, "{masked}");
    let json = serde_json::json!({"output": wrapped.join("\n")}).to_string();
    let masked = mask_known_secrets(&json).into_owned();
    assert!(
        masked.starts_with(r#"{"output":"***"#) && masked.len() <= 18,
        "{masked}"
    );
}

#[test]
fn fragments_of_a_long_secret_are_masked() {
    let secret = "Fr4gm3ntS3cr3t0004Qj8Vx2Mn5Kb7Wc1Zr9Tg6Yd";
    register_secret(secret);
    // `cut -c5-30`: 26 characters from the middle.
    let fragment = &secret[4..30];
    assert_eq!(mask_known_secrets(&format!("<{fragment}>")), "<***>");
}

#[test]
fn short_values_paths_and_numbers_are_not_registered() {
    assert!(!register_secret("abc"));
    let before = known_secret_count();
    let vars = [
        (
            "GOOGLE_APPLICATION_CREDENTIALS",
            "/etc/creds/service-0005.json",
        ),
        ("GITHUB_APP_INSTALLATION_ID", "123456789"),
        ("PATH", "/usr/bin:/bin-not-a-secret-0005"),
        ("MY_SERVICE_TOKEN", "tok-env-0005-Kd8Wq2Zm7X"),
        ("PASSED_TOKEN", "passed-thr0ugh-0005-Vb3Nq"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let added = register_scrubbed_env(vars, &["PASSED_TOKEN".to_owned()]);
    assert_eq!(added, 1);
    assert!(known_secret_count() > before);
    assert_eq!(
        mask_known_secrets(
            "tok-env-0005-Kd8Wq2Zm7X /etc/creds/service-0005.json passed-thr0ugh-0005-Vb3Nq"
        ),
        "*** /etc/creds/service-0005.json passed-thr0ugh-0005-Vb3Nq"
    );
}

#[test]
fn multibyte_text_stays_valid() {
    let secret = "pässwörd-0006-ünïcödé-Zq";
    register_secret(secret);
    assert_eq!(mask_known_secrets(&format!("é{secret}é")), "é***é");
    // A partial agreement that ends inside a character is not cut there.
    let text = format!("{}ö", &secret[..secret.len() - 3]);
    assert!(mask_known_secrets(&text).is_char_boundary(0));
}
