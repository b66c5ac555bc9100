//! One pass over a command: its parsed sources and the text variants the rules read.
//!
//! A *source* is shell text that will run: the command itself, and every payload it hands
//! to a shell — `bash -c '…'`, `eval …`, `su -c …`, `env -S …`, `watch …`, a here-document
//! or here-string fed to a shell, and the program of `rg --pre`/`sort --compress-program`/
//! `man -P`/`ag --pager`. Payloads are parsed in turn (to a bounded depth).
//!
//! The *text variants* are, for each source: the detection text (backslashes, empty quotes
//! and `$'…'` resolved), the same with absolute home paths folded to `~/`, and — when the
//! shell would read some words differently — a copy with command words, spliced words
//! (`kick"start"`) and resolved expansions (`${x:-rm}`, `$(echo rm)`, `x=rm; $x`) written
//! out plainly, also folded.

use std::collections::HashSet;

use crate::GuardContext;
use crate::computed;
use crate::lexer::{self, Parsed};
use crate::normalize;
use crate::resolve::{self, Invocation};
use crate::structural;

/// How many payload levels (`bash -c "bash -c '…'"`) are followed.
const MAX_PAYLOAD_DEPTH: usize = 6;
/// Upper bound on sources analysed for one command.
const MAX_SOURCES: usize = 64;

pub(crate) struct Source {
    /// Prepared text (see [`normalize::prepare`]).
    pub text: String,
    pub parsed: Parsed,
    pub invocations: Vec<Invocation>,
}

pub(crate) struct Analysis {
    pub sources: Vec<Source>,
    pub variants: Vec<String>,
    /// Some shell text was left uninspected (payloads nested or numerous beyond the
    /// limits, substitutions nested too deep). The hardline floor refuses such commands.
    pub truncated: bool,
}

pub(crate) fn analyze(command: &str, context: &GuardContext) -> Analysis {
    let mut sources: Vec<Source> = Vec::new();
    let mut queue = std::collections::VecDeque::from([(normalize::prepare(command), 0usize)]);
    let mut seen: HashSet<String> = HashSet::new();
    let mut truncated = false;
    while let Some((text, depth)) = queue.pop_front() {
        if sources.len() >= MAX_SOURCES {
            truncated = true;
            break;
        }
        let parsed = lexer::parse(&text);
        truncated |= parsed.too_deep;
        let invocations = resolve::invocations(&parsed);
        for payload in payloads(&parsed, &invocations) {
            if payload.trim().is_empty() || payload == text || !seen.insert(payload.clone()) {
                continue;
            }
            if depth < MAX_PAYLOAD_DEPTH {
                queue.push_back((payload, depth + 1));
            } else {
                truncated = true;
            }
        }
        sources.push(Source {
            text,
            parsed,
            invocations,
        });
    }
    let variants = text_variants(&sources, context);
    Analysis {
        sources,
        variants,
        truncated,
    }
}

/// Shell text handed on by the invocations of one source.
fn payloads(parsed: &Parsed, invocations: &[Invocation]) -> Vec<String> {
    let mut out = Vec::new();
    // The invocation of each simple command (first one; `find -exec` adds more).
    let mut by_command: Vec<Option<&Invocation>> = vec![None; parsed.commands.len()];
    for invocation in invocations.iter().rev() {
        if let Some(slot) = by_command.get_mut(invocation.command) {
            *slot = Some(invocation);
        }
    }
    for invocation in invocations {
        out.extend(invocation.payloads.iter().cloned());
        let name = invocation.name.as_str();
        let args = &invocation.args;
        if structural::is_shell(name) {
            if let Some(Some(payload)) = structural::shell_command_payload(name, args) {
                out.push(payload);
            }
            if let Some(command) = parsed.commands.get(invocation.command) {
                if command.piped {
                    let previous = invocation.command.checked_sub(1);
                    let feeder =
                        previous.and_then(|index| by_command.get(index).copied().flatten());
                    out.extend(feeder.and_then(echoed_text));
                }
                out.extend(command.heredocs.iter().cloned());
                out.extend(
                    command
                        .redirects
                        .iter()
                        .filter(|r| r.op == "<<<")
                        .filter_map(|r| r.target.as_ref().map(|t| t.value.clone())),
                );
            }
        }
        match name {
            "eval" => out.push(args.join(" ")),
            "su" | "runuser" => out.extend(su_command(args)),
            "watch" => out.extend(watch_command(args)),
            _ => {}
        }
        if let Some((_, program)) = structural::read_tool_exec_flag(name, args) {
            out.push(program);
        }
    }
    // A script the command writes and then runs, when its content is spelled out.
    out.extend(computed::run_script_payloads(parsed, invocations));
    out
}

/// The text a literal `echo`/`printf` writes (and pipes into a shell: `echo reboot | sh`).
fn echoed_text(feeder: &Invocation) -> Option<String> {
    let args = &feeder.args;
    match feeder.name.as_str() {
        "echo" => {
            let start = args
                .iter()
                .take_while(|a| {
                    a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| "neE".contains(c))
                })
                .count();
            Some(args[start..].join(" "))
        }
        "printf" => Some(args.join(" ").replace("\\n", "\n")),
        _ => None,
    }
}

fn su_command(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if arg == "-c" || arg == "--command" {
            args.get(i + 1).cloned()
        } else {
            arg.strip_prefix("--command=").map(str::to_string)
        }
    })
}

/// `watch [options] command…` runs the joined words with `sh -c`.
fn watch_command(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        i += if matches!(args[i].as_str(), "-n" | "--interval" | "-q" | "--equexit") {
            2
        } else {
            1
        };
    }
    (i < args.len()).then(|| args[i..].join(" "))
}

fn text_variants(sources: &[Source], context: &GuardContext) -> Vec<String> {
    let mut variants: Vec<String> = Vec::new();
    let mut push = |text: String| {
        let folded = normalize::fold_home(&text, context).into_owned();
        if !variants.contains(&text) {
            variants.push(text);
        }
        if !variants.contains(&folded) {
            variants.push(folded);
        }
    };
    for source in sources {
        push(normalize::detection_text(&source.text));
        if let Some(plain) = plain_words_text(source) {
            push(normalize::detection_text(&plain));
        }
    }
    variants
}

/// A quoted word that is an option to the shell all the same (`git branch "-D"`).
fn is_quoted_option(word: &lexer::Word) -> bool {
    word.fully_quoted && word.value.starts_with('-') && !word.value.contains(char::is_whitespace)
}

/// The source with command words, spliced words and resolved expansions written plainly,
/// or `None` when that changes nothing.
fn plain_words_text<'s>(source: &'s Source) -> Option<String> {
    let text = source.text.as_str();
    let mut replacements: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    let mut consider = |word: &'s lexer::Word| {
        if text.get(word.span.clone()) != Some(word.value.as_str()) {
            replacements.push((word.span.clone(), word.value.as_str()));
        }
    };
    for invocation in &source.invocations {
        if let Some(command) = source.parsed.commands.get(invocation.command) {
            invocation
                .position_words
                .iter()
                .filter_map(|index| command.words.get(*index))
                .for_each(&mut consider);
        }
    }
    for command in &source.parsed.commands {
        command
            .words
            .iter()
            .chain(command.redirects.iter().filter_map(|r| r.target.as_ref()))
            .filter(|word| word.is_spliced() || word.expanded || is_quoted_option(word))
            .for_each(&mut consider);
    }
    if replacements.is_empty() {
        return None;
    }
    replacements.sort_by(|a, b| a.0.start.cmp(&b.0.start).then(b.0.end.cmp(&a.0.end)));
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for (span, value) in replacements {
        if span.start < cursor {
            // Inside a word already replaced (an inner substitution): the outer wins.
            continue;
        }
        out.push_str(text.get(cursor..span.start)?);
        out.push_str(value);
        cursor = span.end;
    }
    out.push_str(text.get(cursor..)?);
    Some(out)
}
