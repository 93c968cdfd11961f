//! Which proxy-wasm callbacks the built module exports.
//!
//! Envoy's wasm host calls a callback only if the module exports it, and each call into V8
//! costs Envoy instructions on every request. The proxy-wasm SDK exports every callback of the
//! ABI, so Envoy would call `proxy_on_response_body`, `proxy_on_log` and `proxy_on_done` on
//! every request although the filter does nothing there. `scripts/build-filter.sh` removes the
//! exports in [`UNUSED_CALLBACKS`] from the built module (the `trim_exports` example, with
//! [`drop_exports`]); measured with `benches/envoy/callgrind.sh`: ~7.5k fewer Envoy
//! instructions per request on every path (~4k `proxy_on_response_body`, ~2k `proxy_on_done`,
//! ~1.5k `proxy_on_log`). A callback missing from the module is what the host treats as "does
//! nothing": body and trailer callbacks continue, `on_done` counts as done.
//!
//! `proxy_on_response_trailers` is kept (cost routes may read their actual cost from a
//! trailer): Envoy calls it only for responses that carry trailers, so it costs nothing on the
//! others.
//!
//! Every callback the filter implements (in `abi.rs`) must stay out of [`UNUSED_CALLBACKS`].

use thiserror::Error;

/// Callbacks of the proxy-wasm ABI that the filter does not implement (the SDK's defaults do
/// nothing), removed from the module's exports.
pub const UNUSED_CALLBACKS: [&str; 14] = [
    "proxy_on_request_body",
    "proxy_on_request_trailers",
    "proxy_on_request_metadata",
    "proxy_on_response_body",
    "proxy_on_response_metadata",
    "proxy_on_log",
    "proxy_on_done",
    "proxy_on_new_connection",
    "proxy_on_downstream_data",
    "proxy_on_upstream_data",
    "proxy_on_downstream_connection_close",
    "proxy_on_upstream_connection_close",
    "proxy_on_queue_ready",
    "proxy_on_foreign_function",
];

/// Why a module could not be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TrimError {
    /// The bytes do not start with the wasm magic number and version 1.
    #[error("not a wasm module (version 1)")]
    NotWasm,
    /// A section, or an entry of the export section, runs past the end of the bytes.
    #[error("truncated at byte {0}")]
    Truncated(usize),
    /// A number does not fit 32 bits.
    #[error("a LEB128 number at byte {0} is too long")]
    BadNumber(usize),
}

const MAGIC_AND_VERSION: [u8; 8] = [0, b'a', b's', b'm', 1, 0, 0, 0];
const EXPORT_SECTION: u8 = 7;

/// Reads an unsigned LEB128 u32 at `*at`, moving `*at` past it.
fn read_u32(bytes: &[u8], at: &mut usize) -> Result<u32, TrimError> {
    let start = *at;
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*at).ok_or(TrimError::Truncated(*at))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return u32::try_from(value).map_err(|_| TrimError::BadNumber(start));
        }
    }
    Err(TrimError::BadNumber(start))
}

fn write_u32(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `n` bytes at `*at`, moving `*at` past them.
fn take<'a>(bytes: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], TrimError> {
    let end = at.checked_add(n).ok_or(TrimError::Truncated(*at))?;
    let slice = bytes.get(*at..end).ok_or(TrimError::Truncated(*at))?;
    *at = end;
    Ok(slice)
}

/// The module's sections in order: `(id, payload)`.
fn sections(module: &[u8]) -> Result<Vec<(u8, &[u8])>, TrimError> {
    if !module.starts_with(&MAGIC_AND_VERSION) {
        return Err(TrimError::NotWasm);
    }
    let mut found = Vec::new();
    let mut at = MAGIC_AND_VERSION.len();
    while at < module.len() {
        let id = module[at];
        at += 1;
        let size = read_u32(module, &mut at)? as usize;
        found.push((id, take(module, &mut at, size)?));
    }
    Ok(found)
}

/// The export section's entries: each export's name and its whole encoded entry.
fn exports(payload: &[u8]) -> Result<Vec<(String, &[u8])>, TrimError> {
    let mut at = 0;
    let count = read_u32(payload, &mut at)?;
    let mut entries = Vec::new();
    for _ in 0..count {
        let entry_start = at;
        let name_len = read_u32(payload, &mut at)? as usize;
        let name = String::from_utf8_lossy(take(payload, &mut at, name_len)?).into_owned();
        take(payload, &mut at, 1)?; // kind
        read_u32(payload, &mut at)?; // index
        entries.push((name, &payload[entry_start..at]));
    }
    if at != payload.len() {
        return Err(TrimError::Truncated(at));
    }
    Ok(entries)
}

fn write_section(out: &mut Vec<u8>, id: u8, payload: &[u8]) {
    out.push(id);
    write_u32(out, u32::try_from(payload.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(payload);
}

/// `module` with the exports named in `drop` removed (every other byte as it was), and the
/// names actually removed. The functions stay in the module, unexported.
pub fn drop_exports(module: &[u8], drop: &[&str]) -> Result<(Vec<u8>, Vec<String>), TrimError> {
    let mut out = Vec::with_capacity(module.len());
    out.extend_from_slice(&MAGIC_AND_VERSION);
    let mut dropped = Vec::new();
    for (id, payload) in sections(module)? {
        if id != EXPORT_SECTION {
            write_section(&mut out, id, payload);
            continue;
        }
        let (gone, kept): (Vec<_>, Vec<_>) = exports(payload)?
            .into_iter()
            .partition(|(name, _)| drop.contains(&name.as_str()));
        let mut rewritten = Vec::with_capacity(payload.len());
        write_u32(
            &mut rewritten,
            u32::try_from(kept.len()).unwrap_or(u32::MAX),
        );
        for (_, entry) in &kept {
            rewritten.extend_from_slice(entry);
        }
        write_section(&mut out, id, &rewritten);
        dropped.extend(gone.into_iter().map(|(name, _)| name));
    }
    Ok((out, dropped))
}

/// The names a module exports (for checks and tests).
pub fn export_names(module: &[u8]) -> Result<Vec<String>, TrimError> {
    let mut names = Vec::new();
    for (id, payload) in sections(module)? {
        if id == EXPORT_SECTION {
            names.extend(exports(payload)?.into_iter().map(|(name, _)| name));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(name: &str, kind: u8, index: u32) -> Vec<u8> {
        let mut e = Vec::new();
        write_u32(&mut e, name.len() as u32);
        e.extend_from_slice(name.as_bytes());
        e.push(kind);
        write_u32(&mut e, index);
        e
    }

    fn section(id: u8, payload: &[u8]) -> Vec<u8> {
        let mut s = vec![id];
        write_u32(&mut s, payload.len() as u32);
        s.extend_from_slice(payload);
        s
    }

    /// A module with a custom section, an export section of `(name, function index)` (indices
    /// of 200 and more take two LEB bytes) and a trailing code-like section.
    fn module(entries: &[(&str, u32)]) -> Vec<u8> {
        let mut exports = Vec::new();
        write_u32(&mut exports, entries.len() as u32);
        for (name, index) in entries {
            exports.extend(export(name, 0, *index));
        }
        let mut m = MAGIC_AND_VERSION.to_vec();
        m.extend(section(0, b"\x04nameabc"));
        m.extend(section(EXPORT_SECTION, &exports));
        m.extend(section(10, &[1, 2, 3, 4, 5]));
        m
    }

    /// Byte offsets where the export section starts and ends in [`module`]'s output.
    fn export_section_span(m: &[u8]) -> (usize, usize) {
        let start = MAGIC_AND_VERSION.len() + 2 + 8;
        assert_eq!(m[start], EXPORT_SECTION);
        let mut at = start + 1;
        let size = read_u32(m, &mut at).unwrap() as usize;
        (start, at + size)
    }

    #[test]
    fn named_exports_go_and_every_other_byte_stays() {
        let m = module(&[
            ("memory", 0),
            ("proxy_on_log", 201),
            ("proxy_on_request_headers", 202),
            ("proxy_on_done", 203),
        ]);
        let (out, dropped) = drop_exports(&m, &UNUSED_CALLBACKS).unwrap();
        assert_eq!(dropped, ["proxy_on_log", "proxy_on_done"]);
        assert_eq!(
            out,
            module(&[("memory", 0), ("proxy_on_request_headers", 202)])
        );
        assert_eq!(
            export_names(&out).unwrap(),
            ["memory", "proxy_on_request_headers"]
        );
        // Nothing to drop: the same bytes.
        let (same, none) = drop_exports(&m, &[]).unwrap();
        assert_eq!((same, none.len()), (m, 0));
    }

    #[test]
    fn long_export_sections_keep_their_index_encoding() {
        let names: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
        let entries: Vec<(&str, u32)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), 100 + i as u32))
            .collect();
        let m = module(&entries);
        let (out, dropped) = drop_exports(&m, &["f0", "f299"]).unwrap();
        assert_eq!(dropped.len(), 2);
        assert_eq!(out, module(&entries[1..299]));
    }

    #[test]
    fn malformed_modules_are_refused_not_misread() {
        assert_eq!(
            drop_exports(b"\0asm\x02\0\0\0", &[]),
            Err(TrimError::NotWasm)
        );
        assert_eq!(drop_exports(b"hello", &[]), Err(TrimError::NotWasm));
        let m = module(&[("memory", 0), ("proxy_on_tick", 300)]);
        let (start, end) = export_section_span(&m);
        for cut in start + 1..end {
            assert!(drop_exports(&m[..cut], &[]).is_err(), "cut at {cut}");
        }
        // A section size past the end, and a LEB128 number of six bytes.
        let mut big = MAGIC_AND_VERSION.to_vec();
        big.extend([7, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            drop_exports(&big, &[]),
            Err(TrimError::Truncated(_))
        ));
        let mut long = MAGIC_AND_VERSION.to_vec();
        long.extend([7, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert!(matches!(
            drop_exports(&long, &[]),
            Err(TrimError::BadNumber(_))
        ));
    }

    #[test]
    fn the_filters_own_callbacks_are_never_dropped() {
        for used in [
            "proxy_on_vm_start",
            "proxy_on_configure",
            "proxy_on_context_create",
            "proxy_on_request_headers",
            "proxy_on_response_headers",
            "proxy_on_response_trailers",
            "proxy_on_delete",
            "proxy_on_tick",
            "proxy_on_http_call_response",
            "proxy_on_grpc_receive",
            "proxy_on_grpc_close",
            "proxy_on_memory_allocate",
        ] {
            assert!(!UNUSED_CALLBACKS.contains(&used), "{used}");
        }
    }
}
