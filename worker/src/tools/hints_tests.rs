use super::*;

#[test]
fn exit_codes_that_are_not_errors() {
    assert_eq!(
        exit_code_meaning("grep foo file.txt", 1),
        Some("No matches found (not an error)")
    );
    assert_eq!(
        exit_code_meaning("cat x | LC_ALL=C /usr/bin/rg foo", 1),
        Some("No matches found (not an error)")
    );
    assert_eq!(exit_code_meaning("grep foo file.txt", 2), None);
    assert_eq!(
        exit_code_meaning("diff a b", 1),
        Some("Files differ (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("[ -f x ]", 1),
        Some("Condition evaluated to false (expected, not an error)")
    );
    assert_eq!(
        exit_code_meaning("curl -f https://x", 22),
        Some("HTTP response code indicated error (e.g. 404, 500)")
    );
    assert_eq!(
        exit_code_meaning("make && git diff --exit-code", 1)
            .map(|m| m.starts_with("Non-zero exit")),
        Some(true)
    );
    assert_eq!(
        exit_code_meaning("grep foo; ls", 1),
        None,
        "the last command decides"
    );
    assert_eq!(exit_code_meaning("grep foo", 0), None);
}

#[test]
fn the_foreground_guard() {
    assert_eq!(
        long_lived_foreground("npm run dev"),
        Some(LONG_LIVED_GUIDANCE)
    );
    assert_eq!(
        long_lived_foreground("cd app && uvicorn main:app --reload"),
        Some(LONG_LIVED_GUIDANCE)
    );
    assert_eq!(
        long_lived_foreground("python3 -m http.server 8000"),
        Some(LONG_LIVED_GUIDANCE)
    );
    assert_eq!(
        long_lived_foreground("nohup ./server"),
        Some(BACKGROUND_WRAPPER_GUIDANCE)
    );
    assert_eq!(
        long_lived_foreground("make; setsid ./daemon"),
        Some(BACKGROUND_WRAPPER_GUIDANCE)
    );
    assert_eq!(
        long_lived_foreground("./server &"),
        Some(AMPERSAND_GUIDANCE)
    );
    assert_eq!(long_lived_foreground("./a & ./b"), Some(AMPERSAND_GUIDANCE));
    // Not long-lived: quoted text, && chains, help and version.
    assert_eq!(
        long_lived_foreground("git commit -m 'use nohup & setsid'"),
        None
    );
    assert_eq!(
        long_lived_foreground("python3 -c \"import os; os.setsid()\""),
        None
    );
    assert_eq!(long_lived_foreground("make && make test"), None);
    assert_eq!(long_lived_foreground("vite --version"), None);
    assert_eq!(long_lived_foreground("uvicorn --help"), None);
    assert_eq!(long_lived_foreground("ls -la"), None);
}
