//! Checks that need the parsed command rather than its text: interpreters running inline
//! code (`python -c`, `node -e`, heredocs), shells running a command string (`bash -c`),
//! read-only tools with an option that runs a program (`rg --pre`, `man -P`), and sudo's
//! password-less flags.

use std::sync::LazyLock;

use crate::analysis::{Analysis, Source};
use crate::pattern::Pattern;
use crate::resolve::{Invocation, SudoPrivilegeFlag};
use crate::{computed, system_paths};

pub(crate) const SCRIPT_EXEC_FLAG: &str = "script execution via -e/-c flag";
pub(crate) const SCRIPT_HEREDOC: &str = "script execution via heredoc";
pub(crate) const SHELL_COMMAND_FLAG: &str = "shell command via -c/-lc flag";
pub(crate) const SHELL_HEREDOC: &str = "shell execution via heredoc";
pub(crate) const MALFORMED_PAYLOAD: &str = "command parser limit or malformed executable payload";
pub(crate) const SUDO_PRIVILEGE_FLAG: &str = "sudo with privilege flag (stdin/askpass/shell/list)";
pub(crate) const SUDO_COMBINED_FLAG: &str = "sudo with combined-flag privilege escalation";

/// Interpreter families hermes recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interpreter {
    Python,
    Node,
    Perl,
    Ruby,
    Php,
    PowerShell,
}

static INTERPRETERS: LazyLock<[(Pattern, Interpreter); 6]> = LazyLock::new(|| {
    [
        (
            Pattern::new(r"^(?:py(?:\.exe)?|python[23]?(?:\.\d+)*(?:\.exe)?)$"),
            Interpreter::Python,
        ),
        (Pattern::new(r"^node(?:js)?(?:\.exe)?$"), Interpreter::Node),
        (
            Pattern::new(r"^perl[0-9]*(?:\.\d+)*(?:\.exe)?$"),
            Interpreter::Perl,
        ),
        (Pattern::new(r"^ruby[0-9.]*(?:\.exe)?$"), Interpreter::Ruby),
        (Pattern::new(r"^php[0-9.]*(?:\.exe)?$"), Interpreter::Php),
        (
            Pattern::new(r"^(?:powershell|pwsh)(?:\.exe)?$"),
            Interpreter::PowerShell,
        ),
    ]
});

/// The interpreter family of a lower-cased program name.
pub(crate) fn interpreter(name: &str) -> Option<Interpreter> {
    let first = name.as_bytes().first()?;
    if !b"pnr".contains(first) {
        return None;
    }
    INTERPRETERS
        .iter()
        .find(|(pattern, _)| pattern.regex().is_some_and(|regex| regex.is_match(name)))
        .map(|(_, family)| *family)
}

impl Interpreter {
    /// Options that run inline code. PowerShell's `-File`/`-f` run a script file (like
    /// `python script.py`) and are deliberately not here (hermes #102847).
    fn exec_flags(self) -> &'static [&'static str] {
        match self {
            Self::Python => &["-c"],
            Self::Node => &["-e", "--eval", "-p", "--print"],
            Self::Perl => &["-e", "-E", "--eval"],
            Self::Ruby => &["-e"],
            Self::Php => &["-r"],
            Self::PowerShell => &["-command", "-c"],
        }
    }

    /// Options that take the next word as their value.
    fn options_with_arg(self) -> &'static [&'static str] {
        match self {
            Self::Python => &["-W", "-X", "--check-hash-based-pycs"],
            Self::Node => &[
                "-C",
                "--conditions",
                "--cpu-prof-dir",
                "--diagnostic-dir",
                "--icu-data-dir",
                "--import",
                "--loader",
                "--openssl-config",
                "--require",
                "--title",
                "-r",
            ],
            Self::Perl => &["-0", "-F", "-I", "-M", "-m", "-x"],
            Self::Ruby => &["-C", "-E", "-F", "-I", "-K", "-r"],
            Self::Php => &["-c", "-d", "-z"],
            Self::PowerShell => &[
                "-configurationname",
                "-custompipename",
                "-executionpolicy",
                "-inputformat",
                "-outputformat",
                "-settingsfile",
                "-version",
                "-windowstyle",
                "-workingdirectory",
            ],
        }
    }
}

/// The inline-code option an interpreter invocation uses, if any.
pub(crate) fn interpreter_exec_flag(family: Interpreter, args: &[String]) -> Option<String> {
    let flags = family.exec_flags();
    let with_arg = family.options_with_arg();
    let powershell = family == Interpreter::PowerShell;
    let mut skip_value = false;
    for token in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        if token == "--" {
            break;
        }
        if !powershell && !token.starts_with('-') {
            break;
        }
        let (option, attached) = match token.split_once('=') {
            Some((option, value)) => (option, Some(value)),
            None => (token.as_str(), None),
        };
        let comparable = if powershell {
            option.to_ascii_lowercase()
        } else {
            option.to_string()
        };
        if flags.contains(&comparable.as_str()) {
            return Some(comparable);
        }
        // `-Wonce`, `ruby -rjson`: an attached option value, not a bundle.
        let has_attached_value = with_arg.iter().any(|short| {
            !short.starts_with("--") && option.starts_with(short) && option.len() > short.len()
        });
        if !powershell && !option.starts_with("--") && option.len() > 2 && !has_attached_value {
            for letter in option[1..].chars() {
                let short = format!("-{letter}");
                if flags.contains(&short.as_str()) {
                    return Some(short);
                }
            }
        }
        if with_arg.contains(&comparable.as_str()) && attached.is_none() {
            skip_value = true;
        }
    }
    None
}

/// Shells whose `-c` runs a command string.
pub(crate) fn is_shell(name: &str) -> bool {
    let name = name.strip_suffix(".exe").unwrap_or(name);
    matches!(
        name,
        "bash" | "sh" | "zsh" | "ksh" | "dash" | "ash" | "mksh" | "fish"
    )
}

const BASH_OPTIONS_WITH_ARG: &[&str] = &["-O", "+O", "-o", "+o", "--init-file", "--rcfile"];
const BASH_SHORT_OPTION_LETTERS: &str = "ilrsDcabefhkmnptuvxBCEHPTOo";

/// Whether a shell invocation runs a command string, and that string.
///
/// `-O`/`-o` take a value even inside a bundle (`-oc errexit 'cmd'`), and `--rcfile` /
/// `--init-file` take one too, so they are skipped before looking for `-c`.
pub(crate) fn shell_command_payload(name: &str, args: &[String]) -> Option<Option<String>> {
    if name.strip_suffix(".exe").unwrap_or(name) == "fish" {
        return fish_command_payload(args);
    }
    let mut index = 0;
    while index < args.len() {
        let token = args[index].as_str();
        if token == "--" || !(token.starts_with('-') || token.starts_with('+')) {
            break;
        }
        if BASH_OPTIONS_WITH_ARG.contains(&token) {
            index += 2;
            continue;
        }
        if token.starts_with("--") {
            index += 1;
            continue;
        }
        let letters = &token[1..];
        if !letters
            .chars()
            .all(|c| BASH_SHORT_OPTION_LETTERS.contains(c))
        {
            index += 1;
            continue;
        }
        let consumes_value = usize::from(letters.contains(['O', 'o']));
        if !letters.contains('c') {
            index += 1 + consumes_value;
            continue;
        }
        return Some(args.get(index + 1 + consumes_value).cloned());
    }
    None
}

fn fish_command_payload(args: &[String]) -> Option<Option<String>> {
    let mut index = 0;
    while index < args.len() {
        let token = args[index].as_str();
        if !token.starts_with('-') || token == "--" {
            break;
        }
        if matches!(token, "-c" | "--command" | "-C" | "--init-command") {
            return Some(args.get(index + 1).cloned());
        }
        if let Some(value) = token
            .strip_prefix("--command=")
            .or_else(|| token.strip_prefix("--init-command="))
        {
            return Some(Some(value.to_string()));
        }
        index += 1;
    }
    None
}

/// Read-only tools and their options that run another program.
fn read_tool_exec_flags(tool: &str) -> Option<&'static [&'static str]> {
    match tool {
        "sort" => Some(&["--compress-program"]),
        "rg" => Some(&["--pre", "--hostname-bin"]),
        "ag" => Some(&["--pager"]),
        "man" => Some(&["--pager", "--html", "-P", "-H"]),
        _ => None,
    }
}

/// Long options that own the next word (so it is data, not another option).
fn read_tool_long_options_with_arg(tool: &str) -> &'static [&'static str] {
    match tool {
        "rg" => &[
            "--after-context",
            "--before-context",
            "--color",
            "--colors",
            "--context",
            "--context-separator",
            "--dfa-size-limit",
            "--encoding",
            "--engine",
            "--field-context-separator",
            "--field-match-separator",
            "--file",
            "--generate",
            "--glob",
            "--hostname-bin",
            "--hyperlink-format",
            "--iglob",
            "--ignore-file",
            "--max-columns",
            "--max-count",
            "--max-depth",
            "--max-filesize",
            "--path-separator",
            "--pre",
            "--pre-glob",
            "--regex-size-limit",
            "--regexp",
            "--replace",
            "--sort",
            "--sortr",
            "--threads",
            "--type",
            "--type-add",
            "--type-clear",
            "--type-not",
        ],
        "sort" => &[
            "--batch-size",
            "--buffer-size",
            "--compress-program",
            "--field-separator",
            "--files0-from",
            "--key",
            "--output",
            "--parallel",
            "--random-source",
            "--sort",
            "--temporary-directory",
        ],
        "man" => &[
            "--config-file",
            "--encoding",
            "--extension",
            "--locale",
            "--manpath",
            "--pager",
            "--preprocessor",
            "--prompt",
            "--recode",
            "--sections",
            "--systems",
        ],
        "ag" => &[
            "--ackmate-dir-filter",
            "--color-line-number",
            "--color-match",
            "--color-path",
            "--depth",
            "--filename-pattern",
            "--file-search-regex",
            "--ignore",
            "--ignore-dir",
            "--max-count",
            "--pager",
            "--path-to-ignore",
            "--width",
            "--workers",
        ],
        _ => &[],
    }
}

/// Short options that own the rest of their bundle or the next word.
fn read_tool_short_options_with_arg(tool: &str) -> &'static str {
    match tool {
        "rg" => "efEmjgdtTABCMr",
        "sort" => "koStT",
        "man" => "CRLmMSserEPp",
        "ag" => "gGmpW",
        _ => "",
    }
}

/// `(option, program)` when a read-only tool is told to run a program.
pub(crate) fn read_tool_exec_flag(tool: &str, args: &[String]) -> Option<(String, String)> {
    let flags = read_tool_exec_flags(tool)?;
    let long_with_arg = read_tool_long_options_with_arg(tool);
    let short_with_arg = read_tool_short_options_with_arg(tool);
    let mut index = 0;
    while index < args.len() {
        let token = args[index].as_str();
        if token == "--" {
            break;
        }
        let (option, mut payload) = match token.split_once('=') {
            Some((option, value)) => (option, Some(value.to_string())),
            None => (token, None),
        };
        let mut matched = flags.contains(&option).then(|| option.to_string());
        if tool == "man" && (token.starts_with("-P") || token.starts_with("-H")) && token.len() > 2
        {
            matched = Some(token[..2].to_string());
            payload = Some(token[2..].to_string());
        }
        if let Some(matched) = matched {
            let had_payload = payload.is_some();
            let payload = payload.or_else(|| args.get(index + 1).cloned());
            // The option owns its program even when it looks like an option.
            if let Some(program) = payload.filter(|p| !p.is_empty()) {
                return Some((matched, program));
            }
            index += if !had_payload && !token.contains('=') {
                2
            } else {
                1
            };
            continue;
        }
        if long_with_arg.contains(&option) && payload.is_none() {
            index += 2;
            continue;
        }
        if token.starts_with('-') && !token.starts_with("--") && token.len() > 1 {
            let letters: Vec<char> = token[1..].chars().collect();
            let owner = letters.iter().position(|c| short_with_arg.contains(*c));
            index += match owner {
                Some(position) if position == letters.len() - 1 => 2,
                _ => 1,
            };
            continue;
        }
        index += 1;
    }
    None
}

/// The first structural finding in `analysis`.
pub(crate) fn detect(analysis: &Analysis) -> Option<String> {
    let sudo = analysis
        .sources
        .iter()
        .flat_map(|source| &source.invocations)
        .find_map(|invocation| {
            invocation.sudo_flag.map(|flag| match flag {
                SudoPrivilegeFlag::Standalone => SUDO_PRIVILEGE_FLAG,
                SudoPrivilegeFlag::Combined => SUDO_COMBINED_FLAG,
            })
        });
    if let Some(description) = sudo {
        return Some(description.to_string());
    }
    analysis.sources.iter().find_map(detect_in_source)
}

fn detect_in_source(source: &Source) -> Option<String> {
    source
        .invocations
        .iter()
        .find_map(|invocation| detect_in_invocation(source, invocation))
        .or_else(|| {
            source
                .invocations
                .iter()
                .find_map(system_paths::detect)
                .or_else(|| computed::detect(source))
                .map(str::to_string)
        })
}

fn detect_in_invocation(source: &Source, invocation: &Invocation) -> Option<String> {
    let family = interpreter(&invocation.name);
    let shell = is_shell(&invocation.name);
    let read_tool = read_tool_exec_flags(&invocation.name).is_some();
    if source.parsed.unterminated && (family.is_some() || shell || read_tool) {
        return Some(MALFORMED_PAYLOAD.to_string());
    }
    let has_heredoc = source
        .parsed
        .commands
        .get(invocation.command)
        .is_some_and(|command| command.redirects.iter().any(|r| r.is_heredoc()));
    if let Some(family) = family {
        if interpreter_exec_flag(family, &invocation.args).is_some() {
            return Some(SCRIPT_EXEC_FLAG.to_string());
        }
        if has_heredoc {
            return Some(SCRIPT_HEREDOC.to_string());
        }
    }
    if shell {
        if shell_command_payload(&invocation.name, &invocation.args).is_some() {
            return Some(SHELL_COMMAND_FLAG.to_string());
        }
        if has_heredoc {
            return Some(SHELL_HEREDOC.to_string());
        }
    }
    if read_tool && let Some((option, _)) = read_tool_exec_flag(&invocation.name, &invocation.args)
    {
        return Some(format!(
            "arbitrary program execution via {} {option}",
            invocation.name
        ));
    }
    None
}

#[cfg(test)]
pub(crate) fn all_patterns_compile() -> bool {
    INTERPRETERS.iter().all(|(pattern, _)| pattern.compiled())
}

#[cfg(test)]
#[path = "structural_tests.rs"]
mod tests;
