//! The V4A patch parser: any text parses or is refused with a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(patch) = std::str::from_utf8(data) {
        let _ = caduceus_files::v4a::parse(patch);
    }
});
