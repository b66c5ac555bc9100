//! The exact values of the secrets this process knows — its fleet token, the
//! configured API keys, the sudo password, the variables it scrubbed from
//! sandboxes — masked wherever they appear in tool output.
//!
//! Patterns find secrets by their shape; a sandbox that prints a known value
//! reversed, base64-encoded or inside a longer word defeats every shape. So the
//! process registers each value once at start ([`register_secret`],
//! [`register_scrubbed_env`]) and [`mask_known_secrets`] looks for these
//! *forms* of each value:
//!
//! * the value itself, and the value reversed (`| rev`);
//! * its base64 encodings (standard and URL-safe alphabet) at each of the three
//!   byte alignments, so a value inside a longer encoded stream is found too
//!   (`| base64`, `base64 file`), with line breaks (`base64`'s 76-column
//!   wrapping, or `\n` escapes in JSON) allowed anywhere inside.
//!
//! A form is searched as overlapping 16-character tiles (every 8 characters), so
//! a fragment of at least 23 characters, or one holding a whole tile, is found;
//! the match is then widened character by character as far as the text agrees
//! with the form, and that whole stretch becomes `***`.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};

use crate::env_hygiene;

/// Values shorter than this are not registered: masking every `abc` would
/// wreck output and hide nothing.
pub const MIN_SECRET_CHARS: usize = 6;
/// Length of the pieces a long form is searched by, and their spacing.
const TILE: usize = 16;
const STRIDE: usize = 8;

const MASK: &str = "***";

/// One searched piece of a form.
struct Needle {
    form: usize,
    offset: usize,
}

struct Matcher {
    forms: Vec<Vec<u8>>,
    needles: Vec<Needle>,
    automaton: AhoCorasick,
}

#[derive(Default)]
struct Registry {
    secrets: BTreeSet<String>,
    matcher: Option<Arc<Matcher>>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(RwLock::default);

/// Adds one secret value (surrounding whitespace ignored). Values shorter than
/// [`MIN_SECRET_CHARS`] are ignored. Returns whether the value is now masked.
pub fn register_secret(value: &str) -> bool {
    register_all([value]) > 0
}

/// Adds the values of the variables of `vars` that the sandbox environment
/// withholds under `passthrough` (see [`env_hygiene::may_pass`]): values that
/// look like file paths, numbers or booleans are not secrets and are skipped.
/// Returns how many values are masked from now on.
pub fn register_scrubbed_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
) -> usize {
    let values: Vec<String> = vars
        .into_iter()
        .filter(|(name, value)| {
            !env_hygiene::may_pass(name, passthrough)
                && env_hygiene::is_secret_env_name(name)
                && looks_secret(value)
        })
        .map(|(_, value)| value)
        .collect();
    register_all(values.iter().map(String::as_str))
}

fn looks_secret(value: &str) -> bool {
    let value = value.trim();
    !(value.starts_with('/')
        || value.starts_with('~')
        || value.bytes().all(|b| b.is_ascii_digit() || b == b'-')
        || value.eq_ignore_ascii_case("true")
        || value.eq_ignore_ascii_case("false"))
}

fn register_all<'v>(values: impl IntoIterator<Item = &'v str>) -> usize {
    let Ok(mut registry) = REGISTRY.write() else {
        return 0;
    };
    let mut added = 0;
    for value in values {
        let value = value.trim();
        if value.chars().count() >= MIN_SECRET_CHARS {
            registry.secrets.insert(value.to_owned());
            added += 1;
        }
    }
    if added > 0 {
        registry.matcher = build(&registry.secrets).map(Arc::new);
    }
    added
}

/// Whether any secret is registered (for tests and start-up logs).
pub fn known_secret_count() -> usize {
    REGISTRY.read().map_or(0, |r| r.secrets.len())
}

/// Replaces every registered secret (in any of its forms, see the module
/// documentation) in `text` with `***`. Borrows when nothing was found.
pub fn mask_known_secrets(text: &str) -> Cow<'_, str> {
    let matcher = match REGISTRY.read() {
        Ok(registry) => registry.matcher.clone(),
        Err(_) => None,
    };
    match matcher {
        Some(matcher) if !text.is_empty() => match matcher.mask(text) {
            Some(masked) => Cow::Owned(masked),
            None => Cow::Borrowed(text),
        },
        _ => Cow::Borrowed(text),
    }
}

fn build(secrets: &BTreeSet<String>) -> Option<Matcher> {
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for secret in secrets {
        for form in forms_of(secret) {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    let mut needles = Vec::new();
    let mut patterns: Vec<&[u8]> = Vec::new();
    for (index, form) in forms.iter().enumerate() {
        for offset in tile_offsets(form.len()) {
            let end = (offset + TILE).min(form.len());
            patterns.push(&form[offset..end]);
            needles.push(Needle {
                form: index,
                offset,
            });
        }
    }
    let automaton = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(&patterns)
        .ok()?;
    Some(Matcher {
        forms,
        needles,
        automaton,
    })
}

/// The value, reversed, and its base64 cores.
fn forms_of(secret: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![secret.as_bytes().to_vec()];
    forms.push(secret.chars().rev().collect::<String>().into_bytes());
    let bytes = secret.as_bytes();
    for align in 0..3usize {
        let mut padded = vec![0u8; align];
        padded.extend_from_slice(bytes);
        // The characters whose six bits all come from the secret: from
        // ceil(8·align/6) to floor(8·(align+n)/6).
        let start = (8 * align).div_ceil(6);
        let end = 8 * (align + bytes.len()) / 6;
        for engine in [&STANDARD, &URL_SAFE] {
            let encoded = engine.encode(&padded);
            if let Some(core) = encoded.as_bytes().get(start..end) {
                forms.push(core.to_vec());
            }
        }
    }
    forms
}

/// Where the tiles of a form of `len` bytes start: one piece when short, else
/// every [`STRIDE`] bytes and one flush with the end.
fn tile_offsets(len: usize) -> Vec<usize> {
    if len <= TILE {
        return vec![0];
    }
    let mut offsets: Vec<usize> = (0..=len - TILE).step_by(STRIDE).collect();
    if offsets.last() != Some(&(len - TILE)) {
        offsets.push(len - TILE);
    }
    offsets
}

impl Matcher {
    fn mask(&self, text: &str) -> Option<String> {
        let bytes = text.as_bytes();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for found in self.automaton.find_iter(bytes) {
            let needle = &self.needles[found.pattern().as_usize()];
            let form = &self.forms[needle.form];
            let start = widen_left(bytes, found.start(), &form[..needle.offset]);
            let end = widen_right(bytes, found.end(), &form[needle.offset + found.len()..]);
            spans.push((start, end));
        }
        if spans.is_empty() {
            return None;
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut copied_to = 0;
        for (start, end) in spans {
            let start = ceil_char_boundary(text, start.max(copied_to));
            let end = floor_char_boundary(text, end);
            if end <= start {
                continue;
            }
            out.push_str(&text[copied_to..start]);
            out.push_str(MASK);
            copied_to = end;
        }
        out.push_str(&text[copied_to..]);
        Some(out)
    }
}

/// A line break inside encoded output: a newline, CR LF, or the JSON escapes
/// `\n` / `\r\n`. Returns its length when `bytes[at..]` starts with one.
fn break_at(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at..)?;
    ["\r\n", "\n", "\\r\\n", "\\n"]
        .iter()
        .find(|b| rest.starts_with(b.as_bytes()))
        .map(|b| b.len())
}

/// Walks left from `at` while the text agrees with the end of `before`,
/// skipping line breaks; returns where the last agreeing byte starts.
fn widen_left(bytes: &[u8], at: usize, before: &[u8]) -> usize {
    let mut start = at;
    let mut cursor = at;
    let mut remaining = before.len();
    while remaining > 0 && cursor > 0 {
        if bytes[cursor - 1] == before[remaining - 1] {
            cursor -= 1;
            remaining -= 1;
            start = cursor;
            continue;
        }
        let skipped = (1..=4).find(|&n| cursor >= n && break_at(bytes, cursor - n) == Some(n));
        match skipped {
            Some(n) => cursor -= n,
            None => break,
        }
    }
    start
}

/// Walks right from `at` while the text agrees with `after`, skipping line
/// breaks; returns the end of the last agreeing byte.
fn widen_right(bytes: &[u8], at: usize, after: &[u8]) -> usize {
    let mut end = at;
    let mut cursor = at;
    let mut matched = 0;
    while matched < after.len() && cursor < bytes.len() {
        if bytes[cursor] == after[matched] {
            cursor += 1;
            matched += 1;
            end = cursor;
            continue;
        }
        match break_at(bytes, cursor) {
            Some(n) => cursor += n,
            None => break,
        }
    }
    end
}

fn ceil_char_boundary(text: &str, at: usize) -> usize {
    (at..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len())
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "known_tests.rs"]
mod tests;
