//! hermes' cut of long command output: the first 40 % and the last 60 % of
//! the allowed size around a notice. The notice is the one the model sees for
//! a hermes terminal command (`_BoundedOutputCollector.render`,
//! `tools/environments/base.py`): numbers have thousands separators and the
//! notice counts against the limit, so the result is never longer than
//! `max_chars`.
//!
//! For a 10,000,070-character output and the default 50,000 limit:
//! `… 19,968 chars …\n\n... [OUTPUT TRUNCATED - 9,950,150 chars omitted out
//! of 10,000,070 total] ...\n\n… 29,952 chars …`, 50,000 characters in all.

use std::borrow::Cow;

/// Keeps the head and tail of `text` so that the result has at most
/// `max_chars` characters (not bytes; a character is never split). Borrows
/// when `text` already fits. A `max_chars` of 0 is treated as 1, as hermes
/// does.
///
/// ```
/// use caduceus_common::text::truncate_head_tail;
/// let text = "x".repeat(10_000_070);
/// let out = truncate_head_tail(&text, 50_000);
/// assert_eq!(out.chars().count(), 50_000);
/// assert!(out.contains(
///     "\n\n... [OUTPUT TRUNCATED - 9,950,150 chars omitted out of 10,000,070 total] ...\n\n"
/// ));
/// assert_eq!(truncate_head_tail("short", 50_000), "short");
/// ```
pub fn truncate_head_tail(text: &str, max_chars: usize) -> Cow<'_, str> {
    let max_chars = max_chars.max(1);
    // Cheap exits before counting: bytes bound characters from above.
    if text.len() <= max_chars {
        return Cow::Borrowed(text);
    }
    let total = text.chars().count();
    if total <= max_chars {
        return Cow::Borrowed(text);
    }
    Cow::Owned(render_cut(text, text, total, max_chars))
}

/// As [`truncate_head_tail`], with a status line (`"\n[Command timed out
/// after 5s]"`) that must survive the cut: the suffix is always appended in
/// full and the text is cut to the room left (hermes `render(suffix=…)`).
pub fn truncate_head_tail_with_suffix(text: &str, max_chars: usize, suffix: &str) -> String {
    let max_chars = max_chars.max(1);
    render(text, text, text.chars().count(), max_chars, suffix)
}

/// hermes' render. `head` must start with the first `floor(0.4 · max_chars)`
/// characters of the text (or be all of it) and `tail` must end with its
/// last `max_chars − floor(0.4 · max_chars)` characters; when the whole text
/// fits, `full` gives it.
pub(super) fn render_parts(
    head: &str,
    tail: &str,
    full: impl FnOnce() -> String,
    total: usize,
    max_chars: usize,
    suffix: &str,
) -> String {
    let suffix_chars = suffix.chars().count();
    if suffix_chars >= max_chars {
        return last_chars(suffix, max_chars).to_owned();
    }
    let available = max_chars - suffix_chars;
    if total <= available {
        return full() + suffix;
    }
    render_cut(head, tail, total, available) + suffix
}

fn render(head: &str, tail: &str, total: usize, max_chars: usize, suffix: &str) -> String {
    render_parts(head, tail, || head.to_owned(), total, max_chars, suffix)
}

/// The cut itself, for `total > available`.
fn render_cut(head: &str, tail: &str, total: usize, available: usize) -> String {
    // The notice's length depends on the numbers in it, which depend on the
    // room left by the notice; iterate to the fixed point as hermes does.
    let mut notice = String::new();
    for _ in 0..4 {
        let (head_chars, tail_chars) = split_budget(available.saturating_sub(notice.len()));
        let omitted = total.saturating_sub(head_chars + tail_chars);
        let updated = notice_text(omitted, total);
        if updated == notice {
            break;
        }
        notice = updated;
    }
    let (head_chars, tail_chars) = split_budget(available.saturating_sub(notice.len()));
    // The notice is ASCII, so byte and character counts agree.
    let notice = &notice[..notice.len().min(available)];
    let head = first_chars(head, head_chars);
    let tail = if tail_chars == 0 {
        ""
    } else {
        last_chars(tail, tail_chars)
    };
    let mut out = String::with_capacity(head.len() + notice.len() + tail.len());
    out.push_str(head);
    out.push_str(notice);
    out.push_str(tail);
    out
}

/// `(floor(0.4 · budget), rest)` in exact integer arithmetic.
pub(super) fn split_budget(budget: usize) -> (usize, usize) {
    let head = budget / 5 * 2 + budget % 5 * 2 / 5;
    (head, budget - head)
}

fn notice_text(omitted: usize, total: usize) -> String {
    format!(
        "\n\n... [OUTPUT TRUNCATED - {} chars omitted out of {} total] ...\n\n",
        group_thousands(omitted as u64),
        group_thousands(total as u64)
    )
}

/// The first `n` characters of `s` (all of it if shorter).
pub(super) fn first_chars(s: &str, n: usize) -> &str {
    // A character has at least one byte: fewer than n bytes are fewer than
    // n characters.
    let Some(prefix) = s.as_bytes().get(..n) else {
        return s;
    };
    // n ASCII bytes are n characters, and the byte after an ASCII byte
    // starts a character.
    if prefix.is_ascii() {
        return &s[..n];
    }
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The last `n` characters of `s` (all of it if shorter).
pub fn last_chars(s: &str, n: usize) -> &str {
    // A character has at least one byte: n bytes or fewer are n characters
    // or fewer.
    let Some(start) = s.len().checked_sub(n) else {
        return s;
    };
    // n ASCII bytes are n characters, and an ASCII byte starts one.
    if s.as_bytes()[start..].is_ascii() {
        return &s[start..];
    }
    // Every byte that is not a continuation byte (10xxxxxx) starts a
    // character: counting them from the end is cheaper than decoding.
    let mut remaining = n;
    for (i, &byte) in s.as_bytes().iter().enumerate().rev() {
        if byte & 0xC0 != 0x80 {
            remaining -= 1;
            if remaining == 0 {
                return &s[i..];
            }
        }
    }
    s
}

/// `9950150` → `"9,950,150"` (Python's `f"{n:,}"`).
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
#[path = "truncate_tests.rs"]
mod tests;
