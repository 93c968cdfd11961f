//! Any string as a duration: never panics; an accepted span prints and re-parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::Span;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(span) = Span::parse(text) {
        assert_eq!(Span::parse(&span.to_string()), Ok(span));
    }
});
