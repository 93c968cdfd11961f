//! Removes the proxy-wasm callbacks the filter does not implement from a built filter module
//! (`sluice_filter_wasm::exports`: Envoy then skips those calls into the VM on every request).
//!
//!     cargo run -p sluice-filter-wasm --example trim_exports -- IN.wasm OUT.wasm

use std::process::ExitCode;

use sluice_filter_wasm::exports::{drop_exports, export_names, UNUSED_CALLBACKS};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: trim_exports IN.wasm OUT.wasm");
        return ExitCode::from(2);
    };
    let module = match std::fs::read(input) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("trim_exports: cannot read {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (trimmed, dropped) = match drop_exports(&module, &UNUSED_CALLBACKS) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trim_exports: {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Read back what was written: a module this tool cannot parse again is not written.
    if let Err(e) = export_names(&trimmed) {
        eprintln!("trim_exports: the rewritten module does not parse ({e}); not written");
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::write(output, &trimmed) {
        eprintln!("trim_exports: cannot write {output}: {e}");
        return ExitCode::FAILURE;
    }
    println!("trim_exports: {} unused callbacks removed", dropped.len());
    ExitCode::SUCCESS
}
