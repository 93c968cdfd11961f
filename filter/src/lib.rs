//! sluice-filter: the proxy-wasm filter (under construction).
