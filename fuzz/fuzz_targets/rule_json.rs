//! Any bytes as a rule document: parsing never panics, and an accepted rule survives a JSON
//! round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::Rule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rule) = Rule::from_json_str(text) {
        let again = Rule::from_json(&rule.to_json()).expect("a valid rule re-parses");
        assert_eq!(rule, again);
        // Deciding with it never panics either.
        let params = rule.params();
        let (_, state) = params.decide(&Default::default(), 1_800_000_000_000_000_000, 1);
        let _ = params.decide(&state, u64::MAX / 2, u64::from(data.len() as u32));
    }
});
