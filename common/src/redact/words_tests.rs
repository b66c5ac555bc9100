use super::*;

#[test]
fn finds_words_in_any_ascii_casing() {
    let words = CaseInsensitiveWords::new("token|api_?key");
    assert_eq!(words.find("a ToKeN b"), Some(2));
    assert_eq!(words.find("APIKEY"), Some(0));
    assert_eq!(words.find("nothing here"), None);
    assert_eq!(words.find(""), None);
}

#[test]
fn finds_words_cut_by_chunk_boundaries() {
    let words = CaseInsensitiveWords::new("password");
    for offset in CHUNK - 10..CHUNK + 10 {
        let text = format!("{}PassWord{}", "x".repeat(offset), "y".repeat(5000));
        assert_eq!(words.find(&text), Some(offset), "offset {offset}");
    }
    let far = format!("{}token password", "é".repeat(10_000));
    assert_eq!(CaseInsensitiveWords::new("token").find(&far), Some(20_000));
}

#[test]
fn non_ascii_case_folds_are_a_conservative_yes() {
    // KELVIN SIGN folds to `k` under `(?i)`, so `to\u{212A}en` is "token".
    let words = CaseInsensitiveWords::new("token");
    assert_eq!(words.find("my to\u{212A}en"), Some(0));
    assert_eq!(words.find("ſecret"), Some(0));
}
