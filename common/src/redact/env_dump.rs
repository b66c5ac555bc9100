//! Whether a shell command prints the environment (`env`, `printenv`, …), in
//! which case its output is `KEY=value` lines and gets the assignment pass.

/// The commands whose output is an environment dump (hermes
/// `_ENV_DUMP_COMMANDS`).
const ENV_DUMP_COMMANDS: &[&str] = &["env", "printenv", "set", "export", "declare"];

/// hermes' `is_env_dump_command`: true when `env`, `printenv`, `set`,
/// `export` or `declare` is the first word of any segment of the command
/// (segments split at `|`, `;`, `&`). Words are read with POSIX shell quoting,
/// falling back to plain whitespace splitting when the quoting is broken.
///
/// One deliberate extension: a path to one of those commands
/// (`/usr/bin/env`) counts too — hermes misses it.
pub fn is_env_dump_command(command: &str) -> bool {
    command
        .split(['|', ';', '&'])
        .filter_map(first_word)
        .any(|word| {
            let name = word.rsplit('/').next().unwrap_or(&word);
            ENV_DUMP_COMMANDS.contains(&name)
        })
}

/// The first word of one segment, as `shlex.split(segment)[0]` — or
/// `segment.split()[0]` when shlex would reject the segment.
fn first_word(segment: &str) -> Option<String> {
    let segment = segment.trim_matches(is_python_space);
    match shell_words(segment) {
        Some(words) => words.into_iter().next(),
        None => segment
            .split(is_python_space)
            .find(|w| !w.is_empty())
            .map(str::to_owned),
    }
}

/// Characters `shlex` treats as word separators.
fn is_shlex_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Characters Python's `str.split()` splits on.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// POSIX-mode `shlex.split`: `None` for an unclosed quote or a trailing
/// backslash (where Python raises `ValueError`).
fn shell_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if is_shlex_space(c) => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\\' => {
                word.push(chars.next()?);
                in_word = true;
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            escaped @ ('"' | '\\') => word.push(escaped),
                            other => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        other => word.push(other),
                    }
                }
            }
            other => {
                word.push(other);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
#[path = "env_dump_tests.rs"]
mod tests;
