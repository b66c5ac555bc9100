//! The guard's lexer and normaliser through its public entry points: any text gives a
//! verdict of the documented shape, the same one every time, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(command) = std::str::from_utf8(data) else {
        return;
    };
    let verdict = caduceus_guard::check_command(command);
    assert!(matches!(verdict.kind(), "allow" | "approve" | "hardline"));
    assert_eq!(verdict, caduceus_guard::check_command(command));
    caduceus_guard::normalized_variants(command);
    caduceus_guard::policy::deny_rule_match(command, &["*rm -rf*".to_string()]);
    caduceus_guard::policy::allowlisted(command, &["git *".to_string()]);
    caduceus_guard::policy::sudo_stdin_guard(command);
    caduceus_guard::hints::long_lived_foreground(command);
    caduceus_guard::hints::exit_code_meaning(command, 1);
});
