//! The dashboard's entry point: trunk builds this binary for wasm32 and loads it in the page.

#[cfg(target_arch = "wasm32")]
fn main() {
    sluice_dashboard::app::start();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!(
        "sluice-dashboard runs in a browser: build it with scripts/build-dashboard.sh (trunk)"
    );
    std::process::exit(2);
}
