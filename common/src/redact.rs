//! Secret redaction for tool output, logs and file contents — hermes'
//! `agent/redact.py` (`redact_sensitive_text`, `redact_terminal_output`).
//!
//! Text runs through a fixed sequence of passes, each gated behind a cheap
//! substring check so that ordinary text costs a few scans. Later passes see
//! the output of earlier ones, exactly as in hermes.

use std::borrow::Cow;

use regex::{Captures, Regex};

mod env_dump;
pub mod known;
mod mask;
mod patterns;
mod prefix;
mod words;

pub use env_dump::is_env_dump_command;
pub use known::{mask_known_secrets, register_scrubbed_env, register_secret};

use mask::{mask_phone, mask_token, mask_token_nonreusable};
use patterns::{
    AUTH_HEADER, AUTHORIZATION_WORD, CFG_ANCHORED, CFG_DOTTED, CFG_WORDS, CREDENTIAL_ASSIGN,
    CREDENTIAL_WORDS, DB_CONNSTR, ENV_ASSIGN, ENV_WORDS, FORM_BODY, JSON_FIELD, JSON_KEYS, JWT,
    PHONE, PRIVATE_KEY, PRIVATE_KEY_BEGIN, SECRET_HEADER, SENSITIVE_QUERY_PARAMS, TELEGRAM,
    URL_BARE_TOKEN, YAML_ASSIGN,
};

/// Where the text is going, which decides how aggressively it is redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedactMode<'a> {
    /// Logs, model-facing prose and anything else: every pass.
    General,
    /// Output of a terminal command (foreground or background). When the
    /// command dumps the environment (see [`is_env_dump_command`]) every pass
    /// runs; otherwise the output is treated as code (see `CodeOutput`).
    TerminalOutput { command: Option<&'a str> },
    /// Output of code or a source/config dump (`execute_code`): skips the
    /// `KEY=value`, config-key, JSON-field and YAML passes, which misfire on
    /// code (`MAX_TOKENS=100`, `"apiKey": "test"` fixtures), and keeps
    /// `postgresql://{user}:{password}@` f-string templates intact. Vendor
    /// keys, auth headers, private keys, literal DB passwords and JWTs are
    /// still masked.
    CodeOutput,
    /// File content returned by read_file/search_files: as `CodeOutput`, and
    /// vendor keys become the sentinel `«redacted:ghp_…»`, which cannot be
    /// mistaken for a key and written back into the file (hermes #35519).
    FileRead,
}

impl RedactMode<'_> {
    /// hermes' `code_file` flag.
    fn skips_assignment_passes(self) -> bool {
        match self {
            RedactMode::General => false,
            RedactMode::TerminalOutput { command } => !command.is_some_and(is_env_dump_command),
            RedactMode::CodeOutput | RedactMode::FileRead => true,
        }
    }
}

/// Masks secrets in `text`. Borrows when nothing was found.
///
/// ```
/// use caduceus_common::redact::{redact, RedactMode};
/// assert_eq!(
///     redact("found OPENAI_API_KEY=abc123def456ghi789jkl", RedactMode::General),
///     "found OPENAI_API_KEY=abc123...9jkl"
/// );
/// assert_eq!(
///     redact("token: ghp_abcdefghijklmnopqrstuvwx", RedactMode::FileRead),
///     "token: «redacted:ghp_…»"
/// );
/// ```
pub fn redact<'t>(text: &'t str, mode: RedactMode<'_>) -> Cow<'t, str> {
    let mut text = Cow::Borrowed(text);
    if text.is_empty() {
        return text;
    }
    let code_file = mode.skips_assignment_passes();

    // The exact values this process knows first: the shape passes below
    // rewrite parts of a match and would leave the rest unrecognisable.
    apply(&mut text, |t| match mask_known_secrets(t) {
        Cow::Owned(masked) => Some(masked),
        Cow::Borrowed(_) => None,
    });

    // Vendor prefixes. The literal search inside is its own pre-check.
    if mode == RedactMode::FileRead {
        apply(&mut text, |t| {
            prefix::replace_prefixed_keys(t, mask_token_nonreusable)
        });
    } else {
        apply(&mut text, |t| prefix::replace_prefixed_keys(t, mask_token));
    }

    if !code_file {
        if text.contains('=') {
            apply(&mut text, redact_env_assignments);
            // Config keys are skipped whenever a URL is present: web-URL query
            // parameters pass through by design.
            if !text.contains("://") {
                apply(&mut text, |t| redact_config_keys(t, &CFG_DOTTED));
                apply(&mut text, |t| redact_config_keys(t, &CFG_ANCHORED));
            }
        }
        if text.contains(':') && text.contains('"') {
            apply(&mut text, redact_json_fields);
        }
        if text.contains(':') && !text.contains("://") {
            apply(&mut text, redact_yaml_values);
        }
    }

    // hermes gates this on "uthorization"/"UTHORIZATION" and so misses
    // mixed casings its own pattern accepts ("AUTHorization:"); the
    // case-insensitive word scan does not.
    if let Some(at) = AUTHORIZATION_WORD.find(&text) {
        // A match may start with "Proxy-", six ASCII bytes earlier.
        let from = floor_char_boundary(&text, at.saturating_sub("Proxy-".len()));
        apply(&mut text, |t| redact_auth_headers(t, from));
    }
    if text.contains(':') {
        apply(&mut text, redact_secret_headers);
        apply(&mut text, redact_telegram_tokens);
    }
    if text.contains("BEGIN") && text.contains("-----") {
        apply(&mut text, redact_private_keys);
    }
    if text.contains("://") {
        apply(&mut text, |t| redact_db_passwords(t, code_file));
        apply(&mut text, redact_url_bare_tokens);
    }
    if text.contains("eyJ") {
        apply(&mut text, redact_jwts);
    }
    if text.contains('&') && text.contains('=') {
        apply(&mut text, redact_form_body);
    }
    if text.contains('+') {
        apply(&mut text, redact_phone_numbers);
    }
    // Not in hermes, and last so that every earlier pass gives hermes'
    // answer: credentials its key passes miss (`aws_secret_access_key = …`,
    // `password=…` in a file or command output) and private keys cut off
    // before their END line.
    if let Some(at) = CREDENTIAL_WORDS.find(&text) {
        let from = line_start(&text, at);
        apply(&mut text, |t| redact_credential_assignments(t, from));
    }
    if text.contains("PRIVATE KEY-----") {
        apply(&mut text, redact_unterminated_private_keys);
    }
    text
}

/// hermes' `redact_terminal_output`: shorthand for
/// `redact(output, RedactMode::TerminalOutput { command })`.
pub fn redact_terminal_output<'t>(output: &'t str, command: Option<&str>) -> Cow<'t, str> {
    redact(output, RedactMode::TerminalOutput { command })
}

fn apply<'t>(text: &mut Cow<'t, str>, pass: impl FnOnce(&str) -> Option<String>) {
    if let Some(rewritten) = pass(text) {
        *text = Cow::Owned(rewritten);
    }
}

/// What a pass decides about one regex match.
enum Verdict {
    /// Replace `match.start()..end` with the string.
    Replace { end: usize, with: String },
    /// Python's pattern matches here but the value is left as it is; resume
    /// after `end`.
    Keep { end: usize },
    /// Python's pattern (with its look-around) would not match at this
    /// start; try the next start.
    NotAMatch,
}

/// `re.sub` with a callback that may also move the match end and reject a
/// match, which is how look-arounds and back-references are re-applied.
/// Matching starts at byte `from`, which callers only set when no match can
/// start earlier. Returns `None` when nothing was replaced.
fn rewrite(
    text: &str,
    from: usize,
    re: &Regex,
    mut decide: impl FnMut(&Captures<'_>) -> Verdict,
) -> Option<String> {
    let mut out: Option<String> = None;
    let mut copied_to = 0;
    let mut search_from = from;
    while search_from <= text.len() {
        let Some(caps) = re.captures_at(text, search_from) else {
            break;
        };
        let Some(whole) = caps.get(0) else {
            break;
        };
        let start = whole.start();
        let next_start = start + text[start..].chars().next().map_or(1, char::len_utf8);
        match decide(&caps) {
            Verdict::Replace { end, with } => {
                let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
                buf.push_str(&text[copied_to..start]);
                buf.push_str(&with);
                copied_to = end;
                search_from = end.max(next_start);
            }
            Verdict::Keep { end } => search_from = end.max(next_start),
            Verdict::NotAMatch => search_from = next_start,
        }
    }
    let mut buf = out?;
    buf.push_str(&text[copied_to..]);
    Some(buf)
}

/// The start of the line holding byte `at`. The key/value passes need a
/// secret word inside a key, and a key never spans lines, so no match of
/// theirs starts before the line of the first such word: a fast word scan
/// replaces most of the slow one.
fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |newline| newline + 1)
}

/// The largest char boundary at or before `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

fn group<'c>(caps: &'c Captures<'_>, index: usize) -> &'c str {
    caps.get(index).map_or("", |m| m.as_str())
}

fn group_end(caps: &Captures<'_>, index: usize) -> usize {
    caps.get(index).map_or(0, |m| m.end())
}

/// Code that reads a variable (`os.getenv("X")`, `process.env.X`) names a
/// secret rather than containing one (hermes #2852).
fn is_env_lookup(value: &str) -> bool {
    ["os.getenv", "os.environ", "process.env", "$ENV{"]
        .iter()
        .any(|lookup| value.starts_with(lookup))
}

/// A value split into its optional surrounding quote and its body.
struct QuotedValue<'a> {
    quote: &'a str,
    body: &'a str,
    /// Absolute end of the matched value, closing quote included.
    end: usize,
}

/// hermes' `(['"]?)(\S+)\2` over `run`, the whole non-space run after `=`:
/// with an opening quote, the body reaches the last matching quote of the
/// run (greedy backtracking); without a closing quote the quote is part of
/// the body.
fn split_greedy_quotes(run: &str, run_start: usize) -> QuotedValue<'_> {
    if let Some(quote @ ('"' | '\'')) = run.chars().next()
        && let Some(close) = run.rfind(quote)
        && close >= 2
    {
        return QuotedValue {
            quote: &run[..1],
            body: &run[1..close],
            end: run_start + close + 1,
        };
    }
    QuotedValue {
        quote: "",
        body: run,
        end: run_start + run.len(),
    }
}

/// hermes' `(['"]?)([^\s&]+?)\2(?=[\s&]|$)` over `run`, the whole `[^\s&]`
/// run after `=`: quoted only when the run both starts and ends with the
/// same quote around a non-empty body.
fn split_run_quotes(run: &str, run_start: usize) -> QuotedValue<'_> {
    let bytes = run.as_bytes();
    if bytes.len() >= 3 && matches!(bytes[0], b'"' | b'\'') && bytes[bytes.len() - 1] == bytes[0] {
        return QuotedValue {
            quote: &run[..1],
            body: &run[1..run.len() - 1],
            end: run_start + run.len(),
        };
    }
    QuotedValue {
        quote: "",
        body: run,
        end: run_start + run.len(),
    }
}

fn masked_assignment(name: &str, value: &QuotedValue<'_>) -> Verdict {
    if is_env_lookup(value.body) {
        return Verdict::Keep { end: value.end };
    }
    Verdict::Replace {
        end: value.end,
        with: format!("{name}={q}{}{q}", mask_token(value.body), q = value.quote),
    }
}

/// `OPENAI_API_KEY=…`, `MY_TOKEN = "…"`.
fn redact_env_assignments(text: &str) -> Option<String> {
    let from = line_start(text, ENV_WORDS.find(text)?.start());
    rewrite(text, from, &ENV_ASSIGN, |caps| {
        let Some(run) = caps.get(2) else {
            return Verdict::NotAMatch;
        };
        let value = split_greedy_quotes(run.as_str(), run.start());
        masked_assignment(group(caps, 1), &value)
    })
}

/// `spring.datasource.password=…` and line-anchored `password=…`.
fn redact_config_keys(text: &str, re: &Regex) -> Option<String> {
    let from = line_start(text, CFG_WORDS.find(text)?);
    rewrite(text, from, re, |caps| {
        let Some(run) = caps.get(2) else {
            return Verdict::NotAMatch;
        };
        let value = split_run_quotes(run.as_str(), run.start());
        masked_assignment(group(caps, 1), &value)
    })
}

/// `"apiKey": "…"` → `"apiKey": "***"`.
fn redact_json_fields(text: &str) -> Option<String> {
    // A match starts with its quoted key, so none starts before the first.
    let from = JSON_KEYS.find(text)?;
    rewrite(text, from, &JSON_FIELD, |caps| {
        let end = group_end(caps, 0);
        let value = group(caps, 2);
        if is_env_lookup(value) {
            return Verdict::Keep { end };
        }
        Verdict::Replace {
            end,
            with: format!("{}: \"{}\"", group(caps, 1), mask_token(value)),
        }
    })
}

/// `password: hunter2` at the start of a line; quoted values are left to
/// the JSON pass.
fn redact_yaml_values(text: &str) -> Option<String> {
    let from = line_start(text, CFG_WORDS.find(text)?);
    rewrite(text, from, &YAML_ASSIGN, |caps| {
        let value = group(caps, 3);
        if value.starts_with(['"', '\'']) {
            return Verdict::NotAMatch;
        }
        let end = group_end(caps, 0);
        if is_env_lookup(value) {
            return Verdict::Keep { end };
        }
        Verdict::Replace {
            end,
            with: format!("{}{}{}", group(caps, 1), group(caps, 2), mask_token(value)),
        }
    })
}

/// `Authorization: Bearer …` keeps the header name and scheme word. No match
/// starts before `from`.
fn redact_auth_headers(text: &str, from: usize) -> Option<String> {
    rewrite(text, from, &AUTH_HEADER, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: format!(
            "{}{}{}",
            group(caps, 1),
            group(caps, 2),
            mask_token(group(caps, 3))
        ),
    })
}

/// `x-api-key: …`.
fn redact_secret_headers(text: &str) -> Option<String> {
    rewrite(text, 0, &SECRET_HEADER, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: format!("{}{}", group(caps, 1), mask_token(group(caps, 2))),
    })
}

/// `bot123456789:AA…` → `bot123456789:***`.
fn redact_telegram_tokens(text: &str) -> Option<String> {
    rewrite(text, 0, &TELEGRAM, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: format!("{}{}:***", group(caps, 1), group(caps, 2)),
    })
}

fn redact_private_keys(text: &str) -> Option<String> {
    rewrite(text, 0, &PRIVATE_KEY, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: "[REDACTED PRIVATE KEY]".to_owned(),
    })
}

/// A private key cut off before its `-----END` line: the base64 body lines
/// (and `Proc-Type:`-style headers) after the BEGIN line. A read_file line
/// number prefix (`   12|`) is allowed on each line.
fn redact_unterminated_private_keys(text: &str) -> Option<String> {
    let begin = PRIVATE_KEY_BEGIN.find(text)?;
    // The BEGIN line ends right after its marker, and the body starts on
    // the next line.
    let after = &text[begin.end()..];
    let newline = after.find('\n')?;
    if !after[..newline].trim().is_empty() {
        return None;
    }
    let mut end = begin.end() + newline + 1;
    let body_start = end;
    let mut rest = &text[end..];
    while let Some(line) = rest.split_inclusive('\n').next() {
        if !is_key_body_line(line) {
            break;
        }
        end += line.len();
        rest = &text[end..];
    }
    if end == body_start {
        return None;
    }
    let body_end = text[..end].trim_end_matches(['\n', '\r']).len();
    Some(format!(
        "{}[REDACTED PRIVATE KEY]{}",
        &text[..begin.start()],
        &text[body_end..]
    ))
}

fn is_key_body_line(line: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    let line = match line.split_once('|') {
        Some((number, body)) if number.trim().bytes().all(|b| b.is_ascii_digit()) => body,
        _ => line,
    };
    let line = line.trim();
    if line.starts_with("-----") {
        return false;
    }
    let header = line.split_once(": ").is_some_and(|(name, _)| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    header
        || line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// `password=…`, `aws_secret_access_key = …`, `"client_secret": "…"` at the
/// start of a line become `***`. Values that are code rather than a
/// credential (`os.getenv(…)`, `$VAR`, `{template}`, `None`, `get_pw()`, a
/// keyword argument `password=pw,`) and values an earlier pass already
/// masked are kept. No match starts before `from`.
fn redact_credential_assignments(text: &str, from: usize) -> Option<String> {
    rewrite(text, from, &CREDENTIAL_ASSIGN, |caps| {
        let Some(value) = caps.get(2) else {
            return Verdict::NotAMatch;
        };
        let head = group(caps, 1);
        let raw = value.as_str();
        if let Some(quote @ ('"' | '\'')) = raw.chars().next() {
            let body_len = raw[1..].find(quote).unwrap_or(raw.len() - 1);
            let body = &raw[1..1 + body_len];
            let after_body = value.start() + 1 + body_len;
            if body.is_empty() || is_code_value(body) || is_masked(body) {
                return Verdict::Keep { end: value.end() };
            }
            return Verdict::Replace {
                end: after_body,
                with: format!("{head}{quote}***"),
            };
        }
        if is_code_value(raw) || is_masked(raw) {
            return Verdict::Keep { end: value.end() };
        }
        Verdict::Replace {
            end: value.end(),
            with: format!("{head}***"),
        }
    })
}

/// A value that is an expression of a program rather than a credential.
fn is_code_value(value: &str) -> bool {
    is_env_lookup(value)
        || value.starts_with(['$', '{', '(', '[', '<', '%'])
        || value.contains('(')
        || value.ends_with([',', ';', ')'])
        || [
            "none",
            "null",
            "nil",
            "true",
            "false",
            "undefined",
            "\"\"",
            "''",
        ]
        .iter()
        .any(|word| value.eq_ignore_ascii_case(word))
}

/// Output of an earlier pass: `***` or hermes' `abc123...wxyz`.
fn is_masked(value: &str) -> bool {
    value.starts_with("***") || value.contains("...") || value.starts_with('«')
}

/// `postgres://user:PASSWORD@host` → `postgres://user:***@host`. In code, a
/// password that is a `{…}` template reference is kept (hermes #33801).
fn redact_db_passwords(text: &str, code_file: bool) -> Option<String> {
    rewrite(text, 0, &DB_CONNSTR, |caps| {
        let end = group_end(caps, 0);
        let password = group(caps, 2);
        if code_file && password.starts_with('{') && password.ends_with('}') {
            return Verdict::Keep { end };
        }
        Verdict::Replace {
            end,
            with: format!("{}***{}", group(caps, 1), group(caps, 3)),
        }
    })
}

/// `https://TOKEN@host` (no colon in the userinfo).
fn redact_url_bare_tokens(text: &str) -> Option<String> {
    rewrite(text, 0, &URL_BARE_TOKEN, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: format!(
            "{}{}{}",
            group(caps, 1),
            mask_token(group(caps, 2)),
            group(caps, 3)
        ),
    })
}

fn redact_jwts(text: &str) -> Option<String> {
    rewrite(text, 0, &JWT, |caps| Verdict::Replace {
        end: group_end(caps, 0),
        with: mask_token(group(caps, 0)),
    })
}

/// A text that is nothing but `k=v&k=v` (one line): credential-named
/// parameters get `***`. Unlike hermes, surrounding whitespace is kept.
fn redact_form_body(text: &str) -> Option<String> {
    if text.contains('\n') {
        return None;
    }
    let body = text.trim_matches(is_python_space);
    if !FORM_BODY.is_match(body) {
        return None;
    }
    let mut changed = false;
    let pairs: Vec<Cow<'_, str>> = body
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_sensitive_param(key) => {
                changed = true;
                Cow::Owned(format!("{key}=***"))
            }
            _ => Cow::Borrowed(pair),
        })
        .collect();
    if !changed {
        return None;
    }
    let leading = text.len() - text.trim_start_matches(is_python_space).len();
    let trailing = leading + body.len();
    Some(format!(
        "{}{}{}",
        &text[..leading],
        pairs.join("&"),
        &text[trailing..]
    ))
}

fn is_sensitive_param(key: &str) -> bool {
    SENSITIVE_QUERY_PARAMS
        .iter()
        .any(|name| name.eq_ignore_ascii_case(key))
}

/// Characters Python's `str.strip()` removes.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `+14155552671` → `+141****2671`. hermes' pattern ends in
/// `(?![A-Za-z0-9])`; its backtracking is replayed by shortening the match
/// one digit at a time.
fn redact_phone_numbers(text: &str) -> Option<String> {
    rewrite(text, 0, &PHONE, |caps| {
        let Some(whole) = caps.get(0) else {
            return Verdict::NotAMatch;
        };
        let start = whole.start();
        // Candidate ends: after each digit, longest first; at least `+` and
        // seven digits.
        let ends: Vec<usize> = whole
            .as_str()
            .char_indices()
            .skip(7)
            .map(|(i, c)| start + i + c.len_utf8())
            .collect();
        for &end in ends.iter().rev() {
            let next = text[end..].chars().next();
            if !next.is_some_and(|c| c.is_ascii_alphanumeric()) {
                return Verdict::Replace {
                    end,
                    with: mask_phone(&text[start..end]),
                };
            }
        }
        Verdict::NotAMatch
    })
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
