//! Finds the program each simple command actually runs.
//!
//! Walks past assignments (`X=1`), reserved words (`if`, `then`, `!`, `{`), and wrappers
//! that run another program (`sudo -u root`, `env -i`, `nohup`, `timeout 5`, `xargs -0`,
//! `nice -n 5`, …), and follows `find … -exec CMD … ;` into the command it runs.

use crate::lexer::{Parsed, SimpleCommand, Word, is_reserved_word, split_assignment};

/// How deep `find -exec find -exec …` nesting is followed.
const MAX_NESTING: usize = 16;

/// What a sudo option list asks for that lets sudo work without a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SudoPrivilegeFlag {
    /// `-S`, `-s`, `-A`, `-a`, `--stdin`, `--askpass`, `--shell` on their own.
    Standalone,
    /// The same letters packed into a bundle such as `-nS`.
    Combined,
}

/// One program the shell would run, after unwrapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// Index of the simple command in [`Parsed::commands`].
    pub command: usize,
    /// The program word as written (after quote removal).
    pub program: String,
    /// Lower-cased basename of the program (`/usr/bin/RM` → `rm`).
    pub name: String,
    /// Argument values after the program.
    pub args: Vec<String>,
    /// Indices (into the command's words) of the arguments.
    pub arg_words: Vec<usize>,
    /// Indices of the words in command position: assignments, reserved words, wrappers
    /// and the program itself.
    pub position_words: Vec<usize>,
    /// A `sudo` wrapper asked for a password-less / shell flag.
    pub sudo_flag: Option<SudoPrivilegeFlag>,
    /// A `sudo` wrapper reads the password from standard input (`-S`, `--stdin`).
    pub sudo_stdin: bool,
    /// Shell text a wrapper runs (`env -S 'cmd args'`).
    pub payloads: Vec<String>,
}

/// Every program invocation in `parsed`, in reading order.
pub(crate) fn invocations(parsed: &Parsed) -> Vec<Invocation> {
    let mut out = Vec::new();
    for (index, command) in parsed.commands.iter().enumerate() {
        let all: Vec<usize> = (0..command.words.len()).collect();
        resolve_into(index, command, &all, &mut out, 0);
    }
    out
}

/// Lower-cased basename of a program word.
pub(crate) fn program_name(word: &str) -> String {
    let base = word.rsplit('/').next().unwrap_or(word);
    base.to_lowercase()
}

fn resolve_into(
    index: usize,
    command: &SimpleCommand,
    words: &[usize],
    out: &mut Vec<Invocation>,
    depth: usize,
) {
    if depth > MAX_NESTING {
        return;
    }
    let Some(invocation) = resolve(index, command, words) else {
        return;
    };
    let nested = if invocation.name == "find" {
        find_exec_commands(&command.words, &invocation.arg_words)
    } else {
        Vec::new()
    };
    out.push(invocation);
    for inner in nested {
        resolve_into(index, command, &inner, out, depth + 1);
    }
}

/// `find … -exec CMD ARGS ;` (also `-execdir`, `-ok`, `-okdir`, terminated by `+`).
fn find_exec_commands(words: &[Word], args: &[usize]) -> Vec<Vec<usize>> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let value = words[args[i]].value.as_str();
        if matches!(value, "-exec" | "-execdir" | "-ok" | "-okdir") {
            let start = i + 1;
            let mut end = start;
            while end < args.len() && !matches!(words[args[end]].value.as_str(), ";" | "+") {
                end += 1;
            }
            if end > start {
                found.push(args[start..end].to_vec());
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    found
}

enum Unwrapped {
    /// Not a wrapper: this word is the program.
    Program,
    /// A wrapper whose wrapped program starts this many words after it.
    Command(usize),
    /// A wrapper with no program after it (`sudo -v`, `command -v ls`).
    NoCommand,
}

fn resolve(index: usize, command: &SimpleCommand, words: &[usize]) -> Option<Invocation> {
    let all = &command.words;
    let mut i = 0;
    let mut position_words = Vec::new();
    let mut sudo_flag = None;
    let mut sudo_stdin = false;
    let mut payloads = Vec::new();
    let values: Vec<&str> = words.iter().map(|w| all[*w].value.as_str()).collect();
    // Every round consumes at least one word, so any number of wrapper layers
    // (`sudo sudo … rm`) is followed to the program.
    loop {
        while i < words.len() && is_assignment(&all[words[i]]) {
            position_words.push(words[i]);
            i += 1;
        }
        let word = all.get(*words.get(i)?)?;
        let value = word.value.as_str();
        if !word.quoted && is_reserved_word(value) {
            position_words.push(words[i]);
            i += 1;
            continue;
        }
        if !word.quoted && value == "function" {
            i += 2;
            continue;
        }
        if !word.quoted && matches!(value, "case" | "for" | "select" | "[[" | "((") {
            return None;
        }
        let name = program_name(value);
        position_words.push(words[i]);
        let rest = &values[i + 1..];
        let unwrapped = if name == "sudo" {
            let sudo = unwrap_sudo(rest);
            sudo_flag = sudo_flag.or(sudo.flag);
            sudo_stdin |= sudo.stdin;
            sudo.unwrapped
        } else {
            unwrap(&name, rest, &mut payloads)
        };
        match unwrapped {
            Unwrapped::Command(offset) if i + 1 + offset < words.len() => {
                i += 1 + offset;
            }
            Unwrapped::Program | Unwrapped::Command(_) | Unwrapped::NoCommand => {
                let arg_words = words[i + 1..].to_vec();
                return Some(Invocation {
                    command: index,
                    program: value.to_string(),
                    name,
                    args: rest.iter().map(|a| (*a).to_string()).collect(),
                    arg_words,
                    position_words,
                    sudo_flag,
                    sudo_stdin,
                    payloads,
                });
            }
        }
    }
}

fn is_assignment(word: &Word) -> bool {
    !word.fully_quoted && !word.value.starts_with('=') && split_assignment(&word.value).is_some()
}

/// Skips wrapper options; returns where the wrapped command starts.
fn unwrap(name: &str, args: &[&str], payloads: &mut Vec<String>) -> Unwrapped {
    match name {
        "doas" => skip_options(args, &["-u", "-C"], &[], 0),
        "pkexec" => skip_options(args, &["--user"], &[], 0),
        "env" => unwrap_env(args, payloads),
        "exec" => skip_options(args, &["-a"], &[], 0),
        "nohup" | "builtin" | "nocorrect" | "noglob" | "chronic" | "unbuffer" | "torsocks"
        | "coproc" | "busybox" => skip_options(args, &[], &[], 0),
        "setsid" => skip_options(args, &[], &[], 0),
        "time" => skip_options(args, &["-f", "-o", "--format", "--output"], &[], 0),
        "command" => {
            if args
                .iter()
                .take_while(|a| a.starts_with('-'))
                .any(|a| a.contains('v') || a.contains('V'))
            {
                Unwrapped::NoCommand
            } else {
                skip_options(args, &[], &[], 0)
            }
        }
        "nice" => skip_options(args, &["-n", "--adjustment"], &['n'], 0),
        "ionice" => {
            if args
                .iter()
                .any(|a| matches!(*a, "-p" | "-P" | "-u" | "--pid" | "--pgid" | "--uid"))
            {
                Unwrapped::NoCommand
            } else {
                skip_options(
                    args,
                    &["-c", "-n", "--class", "--classdata"],
                    &['c', 'n'],
                    0,
                )
            }
        }
        "timeout" => skip_options(
            args,
            &["-s", "-k", "--signal", "--kill-after"],
            &['s', 'k'],
            1,
        ),
        "stdbuf" => skip_options(
            args,
            &["-i", "-o", "-e", "--input", "--output", "--error"],
            &['i', 'o', 'e'],
            0,
        ),
        "xargs" => skip_options(
            args,
            &[
                "-a",
                "-d",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            &['a', 'd', 'E', 'I', 'L', 'n', 'P', 's', 'e', 'i', 'l'],
            0,
        ),
        "caffeinate" => skip_options(args, &["-t", "-w"], &['t', 'w'], 0),
        _ => Unwrapped::Program,
    }
}

/// Generic option skipper: `with_arg` options take the next word (long ones also
/// `--opt=value`), `attached` letters take the rest of their bundle (`-n5`), and
/// `positionals` plain words are skipped after the options (the duration of `timeout`).
fn skip_options(
    args: &[&str],
    with_arg: &[&str],
    attached: &[char],
    positionals: usize,
) -> Unwrapped {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        if with_arg.contains(&arg) {
            i += 2;
            continue;
        }
        if !arg.starts_with("--")
            && let Some(first) = arg[1..].chars().next()
            && attached.contains(&first)
        {
            // `-n5`, `-I{}`: the value is attached.
            i += 1;
            continue;
        }
        i += 1;
    }
    i += positionals;
    if i < args.len() {
        Unwrapped::Command(i)
    } else {
        Unwrapped::NoCommand
    }
}

fn unwrap_env(args: &[&str], payloads: &mut Vec<String>) -> Unwrapped {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') {
            break;
        }
        if matches!(arg, "-S" | "--split-string") {
            if let Some(payload) = args.get(i + 1) {
                payloads.push((*payload).to_string());
            }
            i += 2;
            continue;
        }
        if let Some(payload) = arg
            .strip_prefix("--split-string=")
            .or_else(|| arg.strip_prefix("-S").filter(|p| !p.is_empty()))
        {
            payloads.push(payload.to_string());
            i += 1;
            continue;
        }
        if matches!(arg, "-u" | "-C" | "--unset" | "--chdir") {
            i += 2;
            continue;
        }
        i += 1;
    }
    while i < args.len() && split_assignment(args[i]).is_some() {
        i += 1;
    }
    if i < args.len() {
        Unwrapped::Command(i)
    } else {
        Unwrapped::NoCommand
    }
}

/// sudo short options that take a value.
const SUDO_SHORT_WITH_ARG: &[char] = &['u', 'g', 'h', 'p', 'C', 'c', 'D', 'r', 't', 'T', 'U', 'R'];
/// sudo long options that take a value.
const SUDO_LONG_WITH_ARG: &[&str] = &[
    "--user",
    "--group",
    "--host",
    "--prompt",
    "--close-from",
    "--chdir",
    "--role",
    "--type",
    "--command-timeout",
    "--other-user",
    "--chroot",
];

struct SudoOptions {
    unwrapped: Unwrapped,
    flag: Option<SudoPrivilegeFlag>,
    stdin: bool,
}

/// Parses sudo's own options (not those of the command it runs). Option letters are
/// case-sensitive: `-S` reads the password from stdin, `-s` runs a shell.
fn unwrap_sudo(args: &[&str]) -> SudoOptions {
    let mut flag = None;
    let mut stdin = false;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (option, value) = match long.split_once('=') {
                Some((option, value)) => (option, Some(value)),
                None => (long, None),
            };
            // sudo accepts unambiguous prefixes: `--st` is `--stdin`, `--a` is `--askpass`,
            // `--sh` is `--shell`.
            let is_stdin = option.len() >= 2 && "stdin".starts_with(option);
            stdin |= is_stdin;
            if is_stdin
                || (!option.is_empty() && "askpass".starts_with(option))
                || (option.len() >= 2 && "shell".starts_with(option))
            {
                flag = flag.or(Some(SudoPrivilegeFlag::Standalone));
            }
            let takes_value = SUDO_LONG_WITH_ARG.contains(&arg) && value.is_none();
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        let letters: Vec<char> = arg[1..].chars().collect();
        let mut consumes_next = false;
        for (k, letter) in letters.iter().enumerate() {
            stdin |= *letter == 'S';
            if matches!(letter, 'S' | 's' | 'A' | 'a') {
                let found = if letters.len() == 1 {
                    SudoPrivilegeFlag::Standalone
                } else {
                    SudoPrivilegeFlag::Combined
                };
                flag = flag.or(Some(found));
            }
            if SUDO_SHORT_WITH_ARG.contains(letter) {
                consumes_next = k == letters.len() - 1;
                break;
            }
        }
        i += if consumes_next { 2 } else { 1 };
    }
    let unwrapped = if i < args.len() {
        Unwrapped::Command(i)
    } else {
        Unwrapped::NoCommand
    };
    SudoOptions {
        unwrapped,
        flag,
        stdin,
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
