//! A small, non-executing lexer for POSIX shell command lines.
//!
//! It splits a command line into simple commands (at `;`, `&`, `&&`, `|`, `||`, newlines,
//! subshell parentheses and `case` arms), reads words the way the shell would after quote
//! removal, records redirections and here-document bodies, and parses command substitutions
//! (`$(…)`, backticks, `<(…)`, `>(…)`) as commands of their own.
//!
//! The point is to know which words the shell would *execute* — so the hardline floor can
//! fire on `"r"m -rf /` and `$(reboot)` but not on `git commit -m "rm -rf /"`. It never
//! expands anything it cannot know; the few expansions it does resolve are literal ones an
//! attacker could use to spell a command in pieces (`${x:-rm}`, `$(echo rm)`, `x=rm; $x`).
//!
//! It is tolerant: unterminated quotes run to the end of the input and set
//! [`Parsed::unterminated`]; nothing here fails.

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::Range;

/// Deepest nesting of command substitutions we follow. Deeper text is kept as data.
const MAX_DEPTH: usize = 24;
/// Deepest quote-in-substitution nesting the closing-delimiter scans follow; deeper input
/// is treated as unterminated (it is never a real command).
const MAX_SCAN_NESTING: usize = 64;

/// One shell word after quote removal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word {
    /// Byte range of the word in the parsed text.
    pub span: Range<usize>,
    /// The word as the shell would see it after quote removal. Expansions we cannot
    /// resolve are kept verbatim (`$HOME`, `$(ls)`).
    pub value: String,
    /// Any quoting (`'…'`, `"…"`, `$'…'`, backslash) occurred in the word.
    pub quoted: bool,
    /// The whole word is one quoted string (`"rm -rf /"`): shell data, not a splice.
    pub fully_quoted: bool,
    /// A literal expansion was resolved (`${x:-rm}`, `$(echo rm)`, a known variable).
    pub expanded: bool,
}

impl Word {
    /// Quotes or escapes inside the word (`r''m`, `kick"start"`, `r\m`): the usual way to
    /// spell a word in pieces.
    pub(crate) fn is_spliced(&self) -> bool {
        self.quoted && !self.fully_quoted
    }
}

/// A redirection such as `> file`, `2>>log`, `<<EOF`, `<<<"text"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    pub op: &'static str,
    pub target: Option<Word>,
}

impl Redirect {
    /// `<<`, `<<-` and `<<<` feed text to the command's standard input.
    pub(crate) fn is_heredoc(&self) -> bool {
        self.op.starts_with("<<")
    }

    /// The redirection opens its target for writing.
    pub(crate) fn writes(&self) -> bool {
        self.op.contains('>')
    }
}

/// One simple command: its words, redirections and here-document bodies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    pub heredocs: Vec<String>,
    /// Standard input comes from the previous command through `|` or `|&`.
    pub piped: bool,
}

impl SimpleCommand {
    fn is_empty(&self) -> bool {
        self.words.is_empty() && self.redirects.is_empty()
    }
}

/// The result of lexing one command line.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// Every simple command, including those inside substitutions, in reading order.
    pub commands: Vec<SimpleCommand>,
    /// A quote or substitution was never closed.
    pub unterminated: bool,
    /// Substitutions or quotes were nested deeper than the lexer follows; the innermost
    /// text was not inspected.
    pub too_deep: bool,
    /// The input with quoted text, comments and here-document bodies blanked out: what the
    /// shell reads as code rather than data.
    pub code_text: String,
}

/// Lexes `src` into simple commands.
pub(crate) fn parse(src: &str) -> Parsed {
    parse_at_depth(src, 0)
}

fn parse_at_depth(src: &str, depth: usize) -> Parsed {
    let mut lexer = Lexer {
        src,
        bytes: src.as_bytes(),
        code: src.as_bytes().to_vec(),
        commands: Vec::new(),
        vars: HashMap::new(),
        unterminated: false,
        too_deep: Cell::new(false),
    };
    lexer.parse_range(0, src.len(), depth);
    Parsed {
        commands: lexer.commands,
        unterminated: lexer.unterminated,
        too_deep: lexer.too_deep.get(),
        code_text: String::from_utf8_lossy(&lexer.code).into_owned(),
    }
}

/// Decodes the body of an ANSI-C quoted string (`$'…'`) the way bash does.
pub(crate) fn decode_ansi_c(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(esc) = chars.next() else {
            out.push('\\');
            break;
        };
        match esc {
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(esc),
            '0'..='7' => {
                let mut value = esc.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                push_code_point(&mut out, value);
            }
            'x' | 'u' | 'U' => {
                let max = match esc {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut value = 0u32;
                let mut digits = 0;
                while digits < max {
                    match chars.peek().and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            value = value.saturating_mul(16).saturating_add(d);
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push('\\');
                    out.push(esc);
                } else {
                    push_code_point(&mut out, value);
                }
            }
            'c' => match chars.next() {
                Some(ctl) => push_code_point(&mut out, u32::from(ctl) & 0x1f),
                None => out.push_str("\\c"),
            },
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

fn push_code_point(out: &mut String, value: u32) {
    if let Some(c) = char::from_u32(value) {
        out.push(c);
    }
}

/// `[A-Za-z0-9_./:@%+=,-]+`: text that a literal `echo`/`printf` passes through unchanged.
fn is_simple_literal(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:@%+=,-".contains(&b))
}

/// `NAME=…` (also `NAME+=…` and `NAME[i]=…`): returns the name and the assigned text.
pub(crate) fn split_assignment(word: &str) -> Option<(&str, &str)> {
    let eq = word.find('=')?;
    let name = word[..eq].trim_end_matches('+');
    let name = match name.find('[') {
        Some(bracket) if name.ends_with(']') => &name[..bracket],
        _ => name,
    };
    let mut bytes = name.bytes();
    let first = bytes.next()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    Some((name, &word[eq + 1..]))
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Characters that end an unquoted word.
fn is_word_break(b: u8) -> bool {
    matches!(
        b,
        b' ' | b'\t' | b'\r' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>'
    )
}

struct HeredocRequest {
    delimiter: String,
    strip_tabs: bool,
    expands: bool,
}

struct PendingHeredoc {
    request: HeredocRequest,
    command: usize,
}

enum CaseMode {
    /// Reading `pattern)` words: they are data.
    Patterns,
    /// Reading the commands of one arm.
    Body,
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    code: Vec<u8>,
    commands: Vec<SimpleCommand>,
    /// Literal assignments seen so far (`x=rm`), used to resolve `$x` in later words.
    vars: HashMap<String, String>,
    unterminated: bool,
    too_deep: Cell<bool>,
}

impl Lexer<'_> {
    fn char_at(&self, pos: usize) -> Option<char> {
        self.src.get(pos..).and_then(|rest| rest.chars().next())
    }

    fn byte(&self, pos: usize, end: usize) -> Option<u8> {
        if pos < end {
            self.bytes.get(pos).copied()
        } else {
            None
        }
    }

    /// Marks `range` as data (not code) in [`Parsed::code_text`].
    fn blank(&mut self, range: Range<usize>) {
        for b in &mut self.code[range] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }

    fn skip_blanks(&self, mut pos: usize, end: usize) -> usize {
        while matches!(self.byte(pos, end), Some(b' ' | b'\t' | b'\r')) {
            pos += 1;
        }
        pos
    }

    fn parse_range(&mut self, start: usize, end: usize, depth: usize) {
        if depth > MAX_DEPTH {
            if !self.src[start..end].trim().is_empty() {
                self.too_deep.set(true);
            }
            return;
        }
        let mut pos = start;
        let mut current = SimpleCommand::default();
        let mut requests: Vec<HeredocRequest> = Vec::new();
        let mut pending: Vec<PendingHeredoc> = Vec::new();
        let mut cases: Vec<CaseMode> = Vec::new();

        while pos < end {
            let b = self.bytes[pos];
            let next = self.byte(pos + 1, end);
            let in_patterns = matches!(cases.last(), Some(CaseMode::Patterns));
            match b {
                b' ' | b'\t' | b'\r' => pos += 1,
                b'\n' => {
                    self.finish(&mut current, &mut requests, &mut pending);
                    pos = self.read_heredoc_bodies(pos + 1, end, &mut pending, depth);
                }
                b';' => {
                    self.finish(&mut current, &mut requests, &mut pending);
                    pos += 1;
                    if matches!(self.byte(pos, end), Some(b';' | b'&')) {
                        pos += 1;
                        if self.byte(pos, end) == Some(b'&') {
                            pos += 1;
                        }
                        if let Some(mode) = cases.last_mut() {
                            *mode = CaseMode::Patterns;
                        }
                    }
                }
                _ if in_patterns => {
                    pos = self.skip_case_pattern_token(pos, end, &mut cases, depth);
                }
                b'&' if next == Some(b'>') => {
                    pos = self.read_redirect(pos, end, &mut current, &mut requests, depth);
                }
                b'&' | b'|' => {
                    self.finish(&mut current, &mut requests, &mut pending);
                    pos += 1;
                    if next == Some(b) || (b == b'|' && next == Some(b'&')) {
                        pos += 1;
                    }
                    current.piped = b == b'|' && next != Some(b'|');
                }
                b'(' => {
                    let after = self.skip_blanks(pos + 1, end);
                    if current.words.len() == 1
                        && current.redirects.is_empty()
                        && self.byte(after, end) == Some(b')')
                    {
                        // `name() { …; }` defines a function: `name` is not executed here.
                        current.words.clear();
                        pos = after + 1;
                    } else {
                        self.finish(&mut current, &mut requests, &mut pending);
                        pos += 1;
                    }
                }
                b')' => {
                    self.finish(&mut current, &mut requests, &mut pending);
                    pos += 1;
                }
                b'<' | b'>' if next == Some(b'(') => {
                    let (word, after) = self.read_process_substitution(pos, end, depth);
                    current.words.push(word);
                    pos = after;
                }
                b'<' | b'>' => {
                    pos = self.read_redirect(pos, end, &mut current, &mut requests, depth);
                }
                b'#' => {
                    let line_end = self.src[pos..end]
                        .find('\n')
                        .map_or(end, |offset| pos + offset);
                    self.blank(pos..line_end);
                    pos = line_end;
                }
                _ => {
                    if let Some(op_pos) = self.fd_redirect_start(pos, end) {
                        pos = self.read_redirect(op_pos, end, &mut current, &mut requests, depth);
                        continue;
                    }
                    let (word, after) = self.read_word(pos, end, depth);
                    pos = after;
                    let is_command_start = current.words.is_empty();
                    if is_command_start
                        && word.value == "esac"
                        && !word.quoted
                        && matches!(cases.last(), Some(CaseMode::Body))
                    {
                        cases.pop();
                        continue;
                    }
                    current.words.push(word);
                    if is_case_header(&current.words) {
                        // `case WORD in`: what follows are patterns, not commands.
                        current.words.clear();
                        cases.push(CaseMode::Patterns);
                    }
                }
            }
        }
        self.finish(&mut current, &mut requests, &mut pending);
        // A here-document whose body never arrived (no newline) has nothing to attach.
    }

    /// In a `case` pattern list: skips one token, switching to the arm body at `)`.
    fn skip_case_pattern_token(
        &mut self,
        pos: usize,
        end: usize,
        cases: &mut Vec<CaseMode>,
        depth: usize,
    ) -> usize {
        match self.bytes[pos] {
            b')' => {
                if let Some(mode) = cases.last_mut() {
                    *mode = CaseMode::Body;
                }
                pos + 1
            }
            b'(' | b'|' | b'&' | b'<' | b'>' | b'#' => pos + 1,
            _ => {
                let (word, after) = self.read_word(pos, end, depth);
                if word.value == "esac" && !word.quoted {
                    cases.pop();
                }
                after.max(pos + 1)
            }
        }
    }

    /// `2>file`, `10<&0`: digits immediately followed by a redirection operator.
    fn fd_redirect_start(&self, pos: usize, end: usize) -> Option<usize> {
        let mut p = pos;
        while matches!(self.byte(p, end), Some(b'0'..=b'9')) {
            p += 1;
        }
        if p > pos && matches!(self.byte(p, end), Some(b'<' | b'>')) {
            Some(p)
        } else {
            None
        }
    }

    fn finish(
        &mut self,
        current: &mut SimpleCommand,
        requests: &mut Vec<HeredocRequest>,
        pending: &mut Vec<PendingHeredoc>,
    ) {
        if current.is_empty() {
            requests.clear();
            current.piped = false;
            return;
        }
        let command = std::mem::take(current);
        self.record_assignments(&command);
        let index = self.commands.len();
        self.commands.push(command);
        pending.extend(requests.drain(..).map(|request| PendingHeredoc {
            request,
            command: index,
        }));
    }

    /// Remembers `x=value` (also under `export`/`declare`/`local`/`readonly`) so later
    /// `$x` can be resolved.
    fn record_assignments(&mut self, command: &SimpleCommand) {
        let mut words = command.words.iter().peekable();
        if let Some(first) = words.peek()
            && matches!(
                first.value.as_str(),
                "export" | "declare" | "local" | "readonly" | "typeset"
            )
        {
            words.next();
            while words.peek().is_some_and(|w| w.value.starts_with('-')) {
                words.next();
            }
        }
        let assignments: Vec<(String, String)> = words
            .map(|w| split_assignment(&w.value).map(|(n, v)| (n.to_string(), v.to_string())))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        self.vars.extend(assignments);
    }

    fn read_heredoc_bodies(
        &mut self,
        mut pos: usize,
        end: usize,
        pending: &mut Vec<PendingHeredoc>,
        depth: usize,
    ) -> usize {
        for PendingHeredoc { request, command } in pending.drain(..) {
            let mut body = String::new();
            let body_start = pos;
            while pos < end {
                let line_end = self.src[pos..end]
                    .find('\n')
                    .map_or(end, |offset| pos + offset);
                let line = &self.src[pos..line_end];
                let line = line.strip_suffix('\r').unwrap_or(line);
                let candidate = if request.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line
                };
                if candidate == request.delimiter {
                    self.blank(body_start..line_end);
                    pos = (line_end + 1).min(end);
                    break;
                }
                body.push_str(line);
                body.push('\n');
                pos = (line_end + 1).min(end);
                if line_end >= end {
                    self.blank(body_start..end);
                }
            }
            if request.expands {
                // An unquoted delimiter means `$(…)` and backticks in the body run.
                self.parse_substitutions_in(body_start, pos.min(end), depth);
            }
            if let Some(target) = self.commands.get_mut(command) {
                target.heredocs.push(body);
            }
        }
        pos
    }

    /// Parses the command substitutions inside expanding text (a here-document body).
    fn parse_substitutions_in(&mut self, start: usize, end: usize, depth: usize) {
        let mut pos = start;
        while pos < end {
            match self.bytes[pos] {
                b'\\' => pos += 2,
                b'$' if self.byte(pos + 1, end) == Some(b'(') => {
                    match self.scan_paren_close(pos + 2, end) {
                        Some(close) => {
                            self.parse_range(pos + 2, close, depth + 1);
                            pos = close + 1;
                        }
                        None => pos += 2,
                    }
                }
                b'`' => match self.scan_backtick_close(pos + 1, end) {
                    Some(close) => {
                        self.parse_range(pos + 1, close, depth + 1);
                        pos = close + 1;
                    }
                    None => pos += 1,
                },
                _ => pos += 1,
            }
        }
    }

    fn read_redirect(
        &mut self,
        pos: usize,
        end: usize,
        current: &mut SimpleCommand,
        requests: &mut Vec<HeredocRequest>,
        depth: usize,
    ) -> usize {
        const OPS: [&str; 12] = [
            "&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">>", ">|", ">&", "<", ">",
        ];
        let rest = &self.src[pos..end];
        let op = OPS
            .iter()
            .copied()
            .find(|op| rest.starts_with(op))
            .unwrap_or(">");
        let mut after = self.skip_blanks(pos + op.len(), end);
        let target = match self.byte(after, end) {
            Some(b) if !is_word_break(b) => {
                let (word, next) = self.read_word(after, end, depth);
                after = next;
                Some(word)
            }
            _ => None,
        };
        if matches!(op, "<<" | "<<-")
            && let Some(word) = &target
        {
            requests.push(HeredocRequest {
                delimiter: word.value.clone(),
                strip_tabs: op == "<<-",
                expands: !word.quoted,
            });
        }
        current.redirects.push(Redirect { op, target });
        after
    }

    fn read_process_substitution(&mut self, pos: usize, end: usize, depth: usize) -> (Word, usize) {
        let close = self.scan_paren_close(pos + 2, end);
        let inner_end = close.unwrap_or(end);
        if close.is_none() {
            self.unterminated = true;
        }
        self.parse_range(pos + 2, inner_end, depth + 1);
        let after = close.map_or(end, |c| c + 1);
        let word = Word {
            span: pos..after,
            value: self.src[pos..after].to_string(),
            ..Word::default()
        };
        (word, after)
    }

    fn read_word(&mut self, start: usize, end: usize, depth: usize) -> (Word, usize) {
        let mut word = Word::default();
        let mut pos = start;
        let starts_quoted = matches!(self.byte(pos, end), Some(b'\'' | b'"'))
            || (self.byte(pos, end) == Some(b'$')
                && matches!(self.byte(pos + 1, end), Some(b'\'' | b'"')));
        let mut first_segment_end: Option<usize> = None;

        while pos < end {
            let b = self.bytes[pos];
            if is_word_break(b) {
                break;
            }
            match b {
                b'\\' => {
                    word.quoted = true;
                    match self.char_at(pos + 1) {
                        Some('\n') => pos += 2,
                        Some(c) if pos + 1 < end => {
                            word.value.push(c);
                            pos += 1 + c.len_utf8();
                        }
                        _ => pos += 1,
                    }
                }
                b'\'' => {
                    word.quoted = true;
                    pos = self.read_single_quoted(pos, end, &mut word.value);
                }
                b'"' => {
                    word.quoted = true;
                    pos = self.read_double_quoted(pos, end, &mut word, depth);
                }
                b'$' if self.byte(pos + 1, end) == Some(b'\'') => {
                    word.quoted = true;
                    pos = self.read_ansi_c(pos, end, &mut word.value);
                }
                b'$' if self.byte(pos + 1, end) == Some(b'"') => {
                    word.quoted = true;
                    pos = self.read_double_quoted(pos + 1, end, &mut word, depth);
                }
                b'$' => pos = self.read_dollar(pos, end, &mut word, depth),
                b'`' => pos = self.read_backtick(pos, end, &mut word, depth),
                _ => match self.char_at(pos) {
                    Some(c) => {
                        word.value.push(c);
                        pos += c.len_utf8();
                    }
                    None => pos += 1,
                },
            }
            if starts_quoted && first_segment_end.is_none() {
                first_segment_end = Some(pos);
            }
        }
        word.span = start..pos;
        word.fully_quoted = starts_quoted && first_segment_end == Some(pos);
        // Callers only start a word on a non-breaking byte, so `pos > start` here; the
        // guard keeps a malformed call from looping (break bytes are all ASCII).
        let after = if pos == start { start + 1 } else { pos };
        (word, after)
    }

    fn read_single_quoted(&mut self, pos: usize, end: usize, value: &mut String) -> usize {
        let body_start = pos + 1;
        let close = self.src[body_start.min(end)..end]
            .find('\'')
            .map(|offset| body_start + offset);
        let body_end = close.unwrap_or(end);
        if close.is_none() {
            self.unterminated = true;
        }
        value.push_str(&self.src[body_start.min(body_end)..body_end]);
        let after = close.map_or(end, |c| c + 1);
        self.blank(pos..after);
        after
    }

    fn read_ansi_c(&mut self, pos: usize, end: usize, value: &mut String) -> usize {
        let body_start = pos + 2;
        let mut p = body_start;
        let mut close = None;
        while p < end {
            match self.bytes[p] {
                b'\\' => p += 2,
                b'\'' => {
                    close = Some(p);
                    break;
                }
                _ => p += 1,
            }
        }
        let body_end = close.unwrap_or(end);
        if close.is_none() {
            self.unterminated = true;
        }
        value.push_str(&decode_ansi_c(
            &self.src[body_start.min(body_end)..body_end],
        ));
        let after = close.map_or(end, |c| c + 1);
        self.blank(pos..after);
        after
    }

    /// Reads `"…"` starting at the opening quote; returns the position after the closing one.
    fn read_double_quoted(
        &mut self,
        pos: usize,
        end: usize,
        word: &mut Word,
        depth: usize,
    ) -> usize {
        let mut p = pos + 1;
        self.blank(pos..pos + 1);
        while p < end {
            match self.bytes[p] {
                b'"' => {
                    self.blank(p..p + 1);
                    return p + 1;
                }
                b'\\' => {
                    let escaped = self.char_at(p + 1).filter(|_| p + 1 < end);
                    match escaped {
                        Some('\n') => p += 2,
                        Some(c @ ('$' | '`' | '"' | '\\')) => {
                            word.value.push(c);
                            self.blank(p..p + 2);
                            p += 2;
                        }
                        _ => {
                            word.value.push('\\');
                            self.blank(p..p + 1);
                            p += 1;
                        }
                    }
                }
                b'$' => p = self.read_dollar(p, end, word, depth),
                b'`' => p = self.read_backtick(p, end, word, depth),
                _ => {
                    let c = self.char_at(p).unwrap_or(' ');
                    word.value.push(c);
                    let next = p + c.len_utf8();
                    self.blank(p..next.min(end));
                    p = next;
                }
            }
        }
        self.unterminated = true;
        end
    }

    fn read_backtick(&mut self, pos: usize, end: usize, word: &mut Word, depth: usize) -> usize {
        let close = self.scan_backtick_close(pos + 1, end);
        let inner_end = close.unwrap_or(end);
        if close.is_none() {
            self.unterminated = true;
        }
        self.substitute(
            pos + 1..inner_end,
            pos..close.map_or(end, |c| c + 1),
            word,
            depth,
        );
        close.map_or(end, |c| c + 1)
    }

    /// Handles a `$…` expansion starting at `pos`; returns the position after it.
    fn read_dollar(&mut self, pos: usize, end: usize, word: &mut Word, depth: usize) -> usize {
        match self.byte(pos + 1, end) {
            Some(b'(') if self.byte(pos + 2, end) == Some(b'(') => {
                // Arithmetic expansion: data for our purposes. The scan from the inner
                // `(` ends at the second closing parenthesis.
                let close = self.scan_paren_close(pos + 2, end);
                let after = close.map_or(end, |c| c + 1);
                word.value.push_str(&self.src[pos..after]);
                after
            }
            Some(b'(') => {
                let close = self.scan_paren_close(pos + 2, end);
                if close.is_none() {
                    self.unterminated = true;
                }
                let inner_end = close.unwrap_or(end);
                let after = close.map_or(end, |c| c + 1);
                self.substitute(pos + 2..inner_end, pos..after, word, depth);
                after
            }
            Some(b'{') => {
                let close = self.scan_brace_close(pos + 2, end);
                if close.is_none() {
                    self.unterminated = true;
                }
                let inner_end = close.unwrap_or(end);
                let after = close.map_or(end, |c| c + 1);
                let inner = &self.src[pos + 2..inner_end];
                match self.resolve_parameter(inner) {
                    Some(resolved) => {
                        word.value.push_str(&resolved);
                        word.expanded = true;
                    }
                    None => word.value.push_str(&self.src[pos..after]),
                }
                if inner.contains("$(") || inner.contains('`') {
                    self.parse_substitutions_in(pos + 2, inner_end, depth);
                }
                after
            }
            Some(b) if is_name_start(b) => {
                let mut p = pos + 1;
                while matches!(self.byte(p, end), Some(b) if is_name_byte(b)) {
                    p += 1;
                }
                let name = &self.src[pos + 1..p];
                match self.vars.get(name) {
                    Some(value) => {
                        word.value.push_str(value);
                        word.expanded = true;
                    }
                    None => word.value.push_str(&self.src[pos..p]),
                }
                p
            }
            Some(b) if b.is_ascii_digit() || b"@*#?$!-".contains(&b) => {
                word.value.push_str(&self.src[pos..pos + 2]);
                pos + 2
            }
            _ => {
                word.value.push('$');
                pos + 1
            }
        }
    }

    /// A command substitution: parse its commands, and substitute its output when it is a
    /// literal `echo`/`printf` (the usual way to spell a command word in pieces).
    fn substitute(
        &mut self,
        inner: Range<usize>,
        whole: Range<usize>,
        word: &mut Word,
        depth: usize,
    ) {
        let script = &self.src[inner.clone()];
        match literal_command_output(script, depth + 1) {
            Some(output) => {
                word.value.push_str(&output);
                word.expanded = true;
            }
            None => word.value.push_str(&self.src[whole]),
        }
        self.parse_range(inner.start, inner.end, depth + 1);
    }

    /// Resolves `${NAME}`, `${NAME:-default}`, `${NAME/pattern/replacement}` when the result
    /// is knowable without running anything.
    fn resolve_parameter(&self, inner: &str) -> Option<String> {
        // A positional parameter (`${1:-r}`, `${0/x/r}`) is one digit; in a command
        // typed at the tool none is set, so its default or replacement is what runs.
        let name_len = match inner.bytes().next() {
            Some(b) if b.is_ascii_digit() => 1,
            Some(b) if is_name_start(b) => inner.bytes().take_while(|b| is_name_byte(*b)).count(),
            _ => return None,
        };
        let name = &inner[..name_len];
        let rest = &inner[name_len..];
        let known = self.vars.get(name);
        if rest.is_empty() {
            return known.cloned();
        }
        for op in [":-", ":=", "-", "="] {
            if let Some(default) = rest.strip_prefix(op) {
                let use_known = known.is_some_and(|v| !(op.starts_with(':') && v.is_empty()));
                return Some(match known {
                    Some(value) if use_known => value.clone(),
                    _ => strip_quotes(default),
                });
            }
        }
        if rest.starts_with(":?") || rest.starts_with('?') {
            // `${HOME:?}` is `$HOME` or an error: keep the variable visible.
            return Some(known.cloned().unwrap_or_else(|| format!("${{{name}}}")));
        }
        if let Some(pattern_and_replacement) = rest.strip_prefix('/') {
            let all = pattern_and_replacement.starts_with('/');
            let body = pattern_and_replacement.trim_start_matches('/');
            let (pattern, replacement) = body.split_once('/')?;
            return Some(match known {
                Some(value) if all => value.replace(pattern, replacement),
                Some(value) => value.replacen(pattern, replacement, 1),
                None => strip_quotes(replacement),
            });
        }
        None
    }

    /// Position of the `)` closing a substitution whose body starts at `pos`.
    fn scan_paren_close(&self, pos: usize, end: usize) -> Option<usize> {
        self.scan_paren_close_nested(pos, end, 0)
    }

    fn scan_paren_close_nested(&self, mut pos: usize, end: usize, nesting: usize) -> Option<usize> {
        if nesting > MAX_SCAN_NESTING {
            self.too_deep.set(true);
            return None;
        }
        let mut depth = 1usize;
        while pos < end {
            match self.bytes[pos] {
                b'\\' => pos += 2,
                b'\'' => pos = self.src[pos + 1..end].find('\'').map(|o| pos + 1 + o + 1)?,
                b'"' => pos = self.scan_double_quote_close_nested(pos + 1, end, nesting + 1)? + 1,
                b'`' => pos = self.scan_backtick_close(pos + 1, end)? + 1,
                b'(' => {
                    depth += 1;
                    pos += 1;
                }
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(pos);
                    }
                    pos += 1;
                }
                _ => pos += 1,
            }
        }
        None
    }

    fn scan_double_quote_close(&self, pos: usize, end: usize) -> Option<usize> {
        self.scan_double_quote_close_nested(pos, end, 0)
    }

    fn scan_double_quote_close_nested(
        &self,
        mut pos: usize,
        end: usize,
        nesting: usize,
    ) -> Option<usize> {
        if nesting > MAX_SCAN_NESTING {
            return None;
        }
        while pos < end {
            match self.bytes[pos] {
                b'\\' => pos += 2,
                b'"' => return Some(pos),
                b'$' if self.byte(pos + 1, end) == Some(b'(') => {
                    pos = self.scan_paren_close_nested(pos + 2, end, nesting + 1)? + 1;
                }
                _ => pos += 1,
            }
        }
        None
    }

    fn scan_backtick_close(&self, mut pos: usize, end: usize) -> Option<usize> {
        while pos < end {
            match self.bytes[pos] {
                b'\\' => pos += 2,
                b'`' => return Some(pos),
                _ => pos += 1,
            }
        }
        None
    }

    fn scan_brace_close(&self, mut pos: usize, end: usize) -> Option<usize> {
        let mut depth = 1usize;
        while pos < end {
            match self.bytes[pos] {
                b'\\' => pos += 2,
                b'\'' => pos = self.src[pos + 1..end].find('\'').map(|o| pos + 1 + o + 1)?,
                b'"' => pos = self.scan_double_quote_close(pos + 1, end)? + 1,
                b'{' => {
                    depth += 1;
                    pos += 1;
                }
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(pos);
                    }
                    pos += 1;
                }
                _ => pos += 1,
            }
        }
        None
    }
}

/// `case WORD in` just completed.
fn is_case_header(words: &[Word]) -> bool {
    let n = words.len();
    n >= 3
        && words[n - 1].value == "in"
        && !words[n - 1].quoted
        && words[n - 3].value == "case"
        && !words[n - 3].quoted
        && words[..n - 3].iter().all(|w| is_reserved_word(&w.value))
}

/// Shell reserved words that may precede a command in the same simple command.
pub(crate) fn is_reserved_word(word: &str) -> bool {
    matches!(
        word,
        "!" | "{"
            | "}"
            | "if"
            | "then"
            | "else"
            | "elif"
            | "fi"
            | "do"
            | "done"
            | "while"
            | "until"
            | "esac"
    )
}

/// Removes one level of surrounding quotes, as in a `${x:-"default"}` operand.
fn strip_quotes(text: &str) -> String {
    let trimmed = text.trim();
    for quote in ['"', '\''] {
        if let Some(inner) = trimmed
            .strip_prefix(quote)
            .and_then(|t| t.strip_suffix(quote))
        {
            return inner.to_string();
        }
    }
    trimmed.to_string()
}

/// The output of a substitution that only echoes a literal (`echo rm`, `printf %s rm`).
fn literal_command_output(script: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH || script.len() > 256 {
        return None;
    }
    let parsed = parse_at_depth(script, MAX_DEPTH);
    let [command] = parsed.commands.as_slice() else {
        return None;
    };
    if !command.redirects.is_empty() || parsed.unterminated {
        return None;
    }
    let values: Vec<&str> = command.words.iter().map(|w| w.value.as_str()).collect();
    let (program, mut args) = values.split_first()?;
    match *program {
        "echo" => {
            while args.first().is_some_and(|a| {
                a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| "nEe".contains(c))
            }) {
                args = &args[1..];
            }
            match args {
                [only] if is_simple_literal(only) => Some((*only).to_string()),
                _ => None,
            }
        }
        "printf" => match args {
            [only] if is_simple_literal(only) => Some((*only).to_string()),
            // `printf '\162\155'`: the format's escapes are the output.
            [only] if only.contains('\\') && !only.contains('%') => {
                Some(decode_ansi_c(only)).filter(|decoded| is_simple_literal(decoded))
            }
            ["%s", only] if is_simple_literal(only) => Some((*only).to_string()),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
#[path = "lexer_tests.rs"]
mod tests;
