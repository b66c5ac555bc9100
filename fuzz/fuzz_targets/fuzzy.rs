//! The fuzzy matcher behind `patch`: content, old and new text separated by NUL bytes.
//! Every strategy runs on arbitrary text without panicking; an exact replacement is
//! text that contains the new string (unless the new string spells out `\t` or `\r`,
//! which become real ones where the matched text has them: by design, on every
//! strategy).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\0');
    let (Some(content), Some(old), Some(new)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    for replace_all in [false, true] {
        if let Ok(replaced) =
            caduceus_files::fuzzy::fuzzy_find_and_replace(content, old, new, replace_all)
            && replaced.strategy == caduceus_files::fuzzy::Strategy::Exact
            && !new.contains("\\t")
            && !new.contains("\\r")
        {
            assert!(replaced.content.contains(new), "replacement lost the new text");
        }
    }
    caduceus_files::fuzzy::similarity(old, new);
    caduceus_files::fuzzy::closest_lines(old, content);
});
