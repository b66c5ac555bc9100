use super::*;

#[test]
fn background_wrappers_get_the_wrapper_guidance() {
    // `disown` right after `&` is at a command start, so the wrapper message wins.
    for command in [
        "nohup python app.py",
        "cd app && nohup ./run",
        "  setsid ./server",
        "./server & disown",
        "x=$(setsid foo)",
    ] {
        assert_eq!(
            long_lived_foreground(command),
            Some(BACKGROUND_WRAPPER_GUIDANCE),
            "{command}"
        );
    }
}

#[test]
fn ampersands_get_the_ampersand_guidance() {
    for command in [
        "python -m app &",
        "./server & sleep 1",
        "./server &  # start",
    ] {
        assert_eq!(
            long_lived_foreground(command),
            Some(AMPERSAND_GUIDANCE),
            "{command}"
        );
    }
    for command in ["make 2>&1 | tee log", "a && b", "cmd &> log"] {
        assert_eq!(long_lived_foreground(command), None, "{command}");
    }
}

#[test]
fn servers_and_watchers_get_the_long_lived_guidance() {
    for command in [
        "npm run dev",
        "pnpm start",
        "yarn serve",
        "bun run watch",
        "docker compose up",
        "npx next dev",
        "vite",
        "nodemon app.js",
        "uvicorn app:app --reload",
        "gunicorn app:app",
        "python3 -m http.server 8000",
    ] {
        assert_eq!(
            long_lived_foreground(command),
            Some(LONG_LIVED_GUIDANCE),
            "{command}"
        );
    }
}

#[test]
fn quoted_text_help_and_ordinary_commands_are_not_flagged() {
    for command in [
        "git commit -m 'use setsid and nohup'",
        "python3 -c \"import os; os.setsid()\"",
        "echo \"npm run dev\"",
        "uvicorn --help",
        "vite --version",
        "npm run dev -h",
        "npm run build",
        "npm test",
        "vitest run",
        "ls -la",
    ] {
        assert_eq!(long_lived_foreground(command), None, "{command}");
    }
}

#[test]
fn exit_codes_are_explained_for_the_last_command() {
    assert_eq!(
        exit_code_meaning("grep foo file", 1),
        Some("No matches found (not an error)")
    );
    assert_eq!(
        exit_code_meaning("cat x | /usr/bin/rg foo", 1),
        Some("No matches found (not an error)")
    );
    assert_eq!(
        exit_code_meaning("LC_ALL=C ack foo", 1),
        Some("No matches found (not an error)")
    );
    assert_eq!(
        exit_code_meaning("diff a b", 1),
        Some("Files differ (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("colordiff a b", 1),
        Some("Files differ (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("find / -name x", 1),
        Some("Some directories were inaccessible (partial results may still be valid)")
    );
    assert_eq!(
        exit_code_meaning("[ -f x ]", 1),
        Some("Condition evaluated to false (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("test -d y", 1),
        Some("Condition evaluated to false (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("curl http://x", 6),
        Some("Could not resolve host")
    );
    assert_eq!(
        exit_code_meaning("curl http://x", 7),
        Some("Failed to connect to host")
    );
    assert_eq!(
        exit_code_meaning("curl -f http://x", 22),
        Some("HTTP response code indicated error (e.g. 404, 500)")
    );
    assert_eq!(
        exit_code_meaning("curl http://x", 28),
        Some("Operation timed out")
    );
    assert_eq!(
        exit_code_meaning("git diff --quiet", 1),
        Some("Non-zero exit (often normal — e.g. 'git diff' returns 1 when files differ)")
    );
}

#[test]
fn other_exit_codes_and_commands_get_no_note() {
    assert_eq!(exit_code_meaning("grep foo file", 0), None);
    assert_eq!(exit_code_meaning("grep foo file", 2), None);
    assert_eq!(exit_code_meaning("grep foo file; echo done", 1), None);
    assert_eq!(exit_code_meaning("curl http://x", 1), None);
    assert_eq!(exit_code_meaning("make", 1), None);
    assert_eq!(exit_code_meaning("", 1), None);
}
