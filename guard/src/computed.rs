//! Programs the command text does not show: a command word computed at run time
//! (`$cmd`, `$(… | base64 -d)`, IFS word splitting) and a script file written and then
//! run in the same command. Neither can be judged statically, so both need approval —
//! except a script whose content the command spells out (a here-document or a literal
//! `echo`/`printf` redirected into the file): that content is analysed as a payload.

use std::collections::HashMap;

use crate::analysis::Source;
use crate::lexer::{Parsed, SimpleCommand, Word};
use crate::resolve::Invocation;
use crate::structural::{interpreter, is_shell};

pub(crate) const COMPUTED_COMMAND_WORD: &str = "command word computed at run time";
pub(crate) const SCRIPT_WRITTEN_AND_RUN: &str = "script written and run in the same command";

/// Expansions that only lead a path (`$HOME/bin/tool`): the program is the path's
/// basename, which the rules read as usual.
const PATH_PREFIXES: &[&str] = &[
    "$HOME/",
    "${HOME}/",
    "$PWD/",
    "${PWD}/",
    "$VIRTUAL_ENV/",
    "${VIRTUAL_ENV}/",
    "$CONDA_PREFIX/",
    "${CONDA_PREFIX}/",
];

/// The first description that applies to a source's invocations.
pub(crate) fn detect(source: &Source) -> Option<&'static str> {
    let assigns_ifs = source.text.contains("IFS=");
    for invocation in &source.invocations {
        if let Some(word) = program_word(&source.parsed, invocation)
            && is_computed(word, assigns_ifs)
        {
            return Some(COMPUTED_COMMAND_WORD);
        }
    }
    let written = written_files(&source.parsed, &source.invocations);
    source
        .invocations
        .iter()
        .filter_map(|invocation| run_script(invocation, &written))
        .any(|content| content.is_none())
        .then_some(SCRIPT_WRITTEN_AND_RUN)
}

/// The content of every script the source writes and then runs, when the command spells
/// it out (the analysis lexes it as a payload).
pub(crate) fn run_script_payloads(parsed: &Parsed, invocations: &[Invocation]) -> Vec<String> {
    let written = written_files(parsed, invocations);
    invocations
        .iter()
        .filter_map(|invocation| run_script(invocation, &written).flatten())
        .map(str::to_string)
        .collect()
}

fn program_word<'p>(parsed: &'p Parsed, invocation: &Invocation) -> Option<&'p Word> {
    let command = parsed.commands.get(invocation.command)?;
    command.words.get(*invocation.position_words.last()?)
}

fn is_computed(word: &Word, assigns_ifs: bool) -> bool {
    let value = word.value.as_str();
    let rest = PATH_PREFIXES
        .iter()
        .find_map(|prefix| value.strip_prefix(prefix))
        .unwrap_or(value);
    if rest.contains('$') || rest.contains('`') {
        // An expansion the lexer could not resolve stays verbatim in the value.
        return true;
    }
    // A resolved expansion is split into words by the shell unless quoted.
    word.expanded && !word.fully_quoted && (assigns_ifs || value.contains(char::is_whitespace))
}

/// Files written by the source, with their content when the command spells it out.
fn written_files(parsed: &Parsed, invocations: &[Invocation]) -> HashMap<String, Option<String>> {
    let mut written: HashMap<String, Option<String>> = HashMap::new();
    for (index, command) in parsed.commands.iter().enumerate() {
        let invocation = invocations.iter().find(|i| i.command == index);
        for redirect in command.redirects.iter().filter(|r| r.writes()) {
            let Some(target) = redirect.target.as_ref() else {
                continue;
            };
            let path = target.value.as_str();
            if path.starts_with('&') || path.starts_with("/dev/") || path.is_empty() {
                continue;
            }
            let content = invocation.and_then(|i| spelled_content(command, i));
            // Appending to a file written before keeps nothing known.
            let known = match (redirect.op, written.get(&key(path))) {
                (">>", Some(_)) => None,
                _ => content,
            };
            written.insert(key(path), known);
        }
        if let Some(invocation) = invocation
            && invocation.name == "tee"
        {
            for file in invocation.args.iter().filter(|a| !a.starts_with('-')) {
                written.insert(key(file), None);
            }
        }
    }
    written
}

/// `cat <<EOF … EOF`, `echo literal`, `printf literal`: what the command writes, when the
/// text shows it.
fn spelled_content(command: &SimpleCommand, invocation: &Invocation) -> Option<String> {
    if command.piped {
        return None;
    }
    match invocation.name.as_str() {
        "cat" if invocation.args.is_empty() => command.heredocs.first().cloned(),
        "echo" | "printf" if !invocation.args.iter().any(|a| a.contains('$')) => {
            Some(invocation.args.join(" ").replace("\\n", "\n"))
        }
        _ => None,
    }
}

/// `sh f`, `bash f`, `source f`, `. f`, `python f`, `./f`: the script this invocation runs,
/// if the source wrote it. `Some(None)` when its content is unknown.
fn run_script<'w>(
    invocation: &Invocation,
    written: &'w HashMap<String, Option<String>>,
) -> Option<Option<&'w str>> {
    let runner = is_shell(&invocation.name)
        || interpreter(&invocation.name).is_some()
        || matches!(invocation.name.as_str(), "source" | ".");
    let script = if runner {
        invocation.args.iter().find(|a| !a.starts_with('-'))?
    } else {
        &invocation.program
    };
    written.get(&key(script)).map(Option::as_deref)
}

/// `./x` and `x` name the same file.
fn key(path: &str) -> String {
    path.trim_start_matches("./").to_string()
}

#[cfg(test)]
#[path = "computed_tests.rs"]
mod tests;
