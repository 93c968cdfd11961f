//! The `sluice` binary: flags and environment in, [`sluice_backend`] does the rest.

fn main() {
    println!("sluice: under construction");
}
