//! How a found secret is replaced.

use super::patterns::PREFIX_PATTERNS;

/// Tokens shorter than this (in characters) are replaced by `***` whole.
const FULL_MASK_BELOW_CHARS: usize = 18;
const KEEP_HEAD_CHARS: usize = 6;
const KEEP_TAIL_CHARS: usize = 4;

/// hermes' `_mask_token`: short tokens become `***`; longer ones keep their
/// first 6 and last 4 characters (`sk-pro...wxyz`) so logs stay debuggable.
pub(crate) fn mask_token(token: &str) -> String {
    let chars = token.chars().count();
    if chars < FULL_MASK_BELOW_CHARS {
        return "***".to_owned();
    }
    let head_end = token
        .char_indices()
        .nth(KEEP_HEAD_CHARS)
        .map_or(token.len(), |(i, _)| i);
    let tail_start = token
        .char_indices()
        .nth(chars - KEEP_TAIL_CHARS)
        .map_or(token.len(), |(i, _)| i);
    format!("{}...{}", &token[..head_end], &token[tail_start..])
}

/// hermes' `_mask_token_nonreusable` (issue #35519): a sentinel that names the
/// vendor prefix but cannot be mistaken for — or written back as — a key.
pub(crate) fn mask_token_nonreusable(token: &str) -> String {
    if token.is_empty() {
        return "«redacted-secret»".to_owned();
    }
    match PREFIX_PATTERNS
        .iter()
        .map(|(literal, _)| *literal)
        .find(|literal| token.starts_with(literal))
    {
        Some(label) => format!("«redacted:{label}…»"),
        None => "«redacted-secret»".to_owned(),
    }
}

/// hermes' phone masking: keep `+` and a few digits at each end.
pub(crate) fn mask_phone(phone: &str) -> String {
    // A phone match is ASCII `+` followed by Unicode decimal digits, so work
    // on characters to stay on boundaries.
    let chars: Vec<char> = phone.chars().collect();
    let keep = if chars.len() <= 8 { 2 } else { 4 };
    let head: String = chars[..keep].iter().collect();
    let tail: String = chars[chars.len() - keep..].iter().collect();
    format!("{head}****{tail}")
}
