//! The `sluice` binary: flags and environment in, [`sluice_backend::run`] does the rest.

use std::process::ExitCode;

use clap::Parser;
use sluice_backend::cli::{init_logging, main_with, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match main_with(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}
