//! Files that hold secrets (an admin token, the admin tokens file, a TLS private key) readable
//! by every user of the host: sluice starts anyway (a container often has no other user, and
//! refusing would break a working deployment), but says so at start, naming the flag, the file
//! and its mode, so that a shared host's operator can tighten it. Group-readable files are not
//! warned about (`0640` with a group for the service is the usual way to share a key).

use std::path::Path;

/// Logs a WARN when `path` (given by `flag`) can be read by every user of the host. Silent when
/// its mode cannot be read (the reader of the file reports that) and on non-Unix hosts.
pub fn warn_if_readable_by_others(flag: &str, path: &Path) {
    let Some(mode) = mode(path) else {
        return;
    };
    if readable_by_others(mode) {
        tracing::warn!(
            file = %path.display(),
            mode = %format!("{:04o}", mode & 0o7777),
            "{flag} {} is readable by every user of this host (mode {:04o}) and holds a secret: chmod 600 it (or 640 with the service's group)",
            path.display(),
            mode & 0o7777,
        );
    }
}

/// Whether a Unix mode lets others (not the owner, not the group) read the file.
pub fn readable_by_others(mode: u32) -> bool {
    mode & 0o004 != 0
}

#[cfg(unix)]
fn mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    // Followed through symlinks: a Kubernetes secret mount's files are links to the data.
    std::fs::metadata(path).ok().map(|m| m.permissions().mode())
}

#[cfg(not(unix))]
fn mode(_path: &Path) -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_others_read_bit_counts() {
        assert!(readable_by_others(0o100644));
        assert!(readable_by_others(0o604));
        assert!(!readable_by_others(0o600));
        assert!(!readable_by_others(0o640));
        assert!(!readable_by_others(0o400));
    }
}
