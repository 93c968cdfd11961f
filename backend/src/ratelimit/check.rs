//! `sluice rules check PATH`: validates a ratelimit configuration (a file or a directory) as
//! `--ratelimit-config` would load it, without starting anything: every refusal on its own line
//! (`file: path.to.field: reason`), and the outcome as the exit status, for CI.

use std::io::Write;
use std::path::Path;

use super::load::{self, MergeDomains};

/// Checks `path`, writing a summary or every refusal to `out`; true when it loads.
pub fn run(path: &Path, merge: MergeDomains, out: &mut impl Write) -> std::io::Result<bool> {
    match load::load(path, merge) {
        Ok(loaded) => {
            writeln!(
                out,
                "{}: ok ({} file(s), {} domain(s), {} counted limit(s))",
                path.display(),
                loaded.files.len(),
                loaded.domains.len(),
                loaded.rules.len()
            )?;
            Ok(true)
        }
        Err(errors) => {
            for e in &errors {
                writeln!(out, "{e}")?;
            }
            writeln!(out, "{}: {} error(s)", path.display(), errors.len())?;
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_lists_its_errors_and_fails() {
        let dir = std::env::temp_dir().join(format!("sluice-rl-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: nope, requests_per_unit: 1}\n").expect("write");
        let mut out = Vec::new();
        assert!(!run(&dir, MergeDomains(false), &mut out).expect("runs"));
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("a.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit 'nope'"),
            "{text}"
        );
        std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors: []\n").expect("write");
        let mut out = Vec::new();
        assert!(run(&dir, MergeDomains(false), &mut out).expect("runs"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
