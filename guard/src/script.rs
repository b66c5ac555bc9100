//! The shell commands a Python script spells out: what `execute_code`'s
//! whole-script approval reads. A script is not shell text — read as one,
//! its parentheses and attribute names look like computed command words —
//! so the guard reads its string literals instead, where the commands it
//! hands to `os.system`, `subprocess.run(…, shell=True)` or `Popen` are:
//! each literal, and each run of literals separated only by commas (an
//! argument list, `["rm", "-rf", "/"]`), joined with spaces — against the
//! hardline rules and the dangerous patterns. The structural checks (`bash
//! -c`, a heredoc to an interpreter, computed command words) are left out:
//! they ask about shell text that hides a program, and a script's
//! `["bash", "-c", "…"]` hides nothing — its payload is a literal read on
//! its own.
//!
//! A command the script composes at run time (decoded, concatenated from
//! variables) is not in its text; the script's own `terminal` calls still
//! meet the guard one by one.

use crate::{GuardContext, Verdict, check_patterns_in};

/// Literals longer than this are not commands worth reading (a file body).
const MAX_LITERAL: usize = 64 * 1024;
/// At most this many candidates are checked (a data table of strings).
const MAX_CANDIDATES: usize = 4096;

/// The string literals of Python source `code`, grouped: each inner vector
/// is a run of literals separated only by commas and whitespace (or, as
/// Python concatenates them, nothing but whitespace).
pub(crate) fn literal_runs(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut runs: Vec<Vec<String>> = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut i = 0;
    // Whether only commas/whitespace came since the last literal.
    let mut joined = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let quote_at = if c == '\'' || c == '"' {
            Some(i)
        } else if c.is_ascii_alphabetic() {
            // A string prefix (r, b, f, rb, …) directly before a quote,
            // not the end of a longer name.
            let start = i;
            let mut j = i;
            while j < chars.len() && j - start < 2 && "rRbBfFuU".contains(chars[j]) {
                j += 1;
            }
            let standalone =
                start == 0 || !(chars[start - 1].is_alphanumeric() || chars[start - 1] == '_');
            if standalone && j > start && j < chars.len() && (chars[j] == '\'' || chars[j] == '"') {
                Some(j)
            } else {
                None
            }
        } else {
            None
        };
        let Some(q) = quote_at else {
            if c == ',' || c.is_whitespace() {
                i += 1;
                continue;
            }
            if !current.is_empty() {
                runs.push(std::mem::take(&mut current));
            }
            joined = false;
            // Skip the rest of a name so that its letters are not prefixes.
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            continue;
        };
        let raw = chars[i..q].iter().any(|p| *p == 'r' || *p == 'R');
        let quote = chars[q];
        let triple = q + 2 < chars.len() && chars[q + 1] == quote && chars[q + 2] == quote;
        let mut j = if triple { q + 3 } else { q + 1 };
        let mut text = String::new();
        loop {
            if j >= chars.len() {
                break;
            }
            let d = chars[j];
            if d == '\\' && j + 1 < chars.len() {
                if raw {
                    text.push(d);
                    text.push(chars[j + 1]);
                } else {
                    match chars[j + 1] {
                        'n' => text.push('\n'),
                        't' => text.push('\t'),
                        '\n' => {}
                        other => text.push(other),
                    }
                }
                j += 2;
                continue;
            }
            if triple {
                if d == quote
                    && j + 2 < chars.len()
                    && chars[j + 1] == quote
                    && chars[j + 2] == quote
                {
                    j += 3;
                    break;
                }
            } else if d == quote || d == '\n' {
                j += 1;
                break;
            }
            text.push(d);
            j += 1;
        }
        if !joined && !current.is_empty() {
            runs.push(std::mem::take(&mut current));
        }
        current.push(text);
        joined = true;
        i = j;
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

/// The guard's verdict on the commands a Python script spells out: the
/// first hardline one, else the first dangerous one, else allow.
pub fn check_script_in(code: &str, context: &GuardContext) -> Verdict {
    let mut flagged = None;
    let mut checked = 0;
    for run in literal_runs(code) {
        let joined = (run.len() > 1).then(|| run.join(" "));
        for candidate in run.iter().chain(joined.iter()) {
            if candidate.trim().is_empty() || candidate.len() > MAX_LITERAL {
                continue;
            }
            checked += 1;
            if checked > MAX_CANDIDATES {
                return flagged.unwrap_or(Verdict::Allow);
            }
            match check_patterns_in(candidate, context) {
                Verdict::Allow => {}
                hardline @ Verdict::Hardline { .. } => return hardline,
                approve => {
                    flagged.get_or_insert(approve);
                }
            }
        }
    }
    flagged.unwrap_or(Verdict::Allow)
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
