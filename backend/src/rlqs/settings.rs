//! The RLQS server's settings (`--rlqs-ttl`, `--rlqs-max-buckets`, `--rlqs-mapping`), checked
//! at start: a bad value or mapping file stops the start naming the flag and the field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_core::rlqs::mapping_rules::Mapping;
use sluice_core::rlqs::{
    validate_max_buckets, validate_ttl_s, DEFAULT_MAX_BUCKETS_PER_STREAM, DEFAULT_TTL_S,
};

/// What the ledger runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Every assignment's TTL, whole seconds.
    pub ttl_s: u64,
    /// Most buckets one stream holds; past it no assignment (the listener's own behaviour).
    pub max_buckets: usize,
    /// Bucket id → (action, key).
    pub mapping: Mapping,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ttl_s: DEFAULT_TTL_S,
            max_buckets: DEFAULT_MAX_BUCKETS_PER_STREAM,
            mapping: Mapping::default(),
        }
    }
}

/// Why the RLQS settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `--rlqs-ttl` or `--rlqs-max-buckets` out of bounds.
    #[error("--{flag}: {reason}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
    /// The mapping file could not be read.
    #[error("cannot read --rlqs-mapping file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML or JSON.
    #[error("--rlqs-mapping file {}: not valid YAML or JSON: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A rule of the file is wrong.
    #[error("--rlqs-mapping file {}: {field}: {reason}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field (`mappings[2].key[0]`).
        field: String,
        /// Why.
        reason: String,
    },
}

impl Settings {
    /// Checks the flags and reads the mapping file, if any.
    pub fn from_flags(
        ttl_s: u64,
        max_buckets: usize,
        mapping: Option<&Path>,
    ) -> Result<Settings, SettingsError> {
        let ttl_s = validate_ttl_s(ttl_s).map_err(|e| SettingsError::Flag {
            flag: "rlqs-ttl",
            reason: e.reason,
        })?;
        let max_buckets = validate_max_buckets(max_buckets).map_err(|e| SettingsError::Flag {
            flag: "rlqs-max-buckets",
            reason: e.reason,
        })?;
        let mapping = match mapping {
            Some(path) => read_mapping(path)?,
            None => Mapping::default(),
        };
        Ok(Settings {
            ttl_s,
            max_buckets,
            mapping,
        })
    }

    /// The TTL as a duration.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_s)
    }
}

/// Reads a mapping file (YAML or JSON: JSON is YAML).
pub fn read_mapping(path: &Path) -> Result<Mapping, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let value: serde_json::Value =
        serde_norway::from_str(&text).map_err(|e| SettingsError::Syntax {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    // An empty file is YAML null: the default mapping.
    let value = if value.is_null() {
        serde_json::json!({})
    } else {
        value
    };
    Mapping::from_value(&value).map_err(|e| SettingsError::Field {
        path: path.to_owned(),
        field: e.field,
        reason: e.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file holding `text`, removed when dropped.
    struct File(PathBuf);

    impl File {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file(text: &str) -> File {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "sluice-rlqs-mapping-{}-{n}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        File(path)
    }

    #[test]
    fn defaults_and_bounds_name_the_flag() {
        let s = Settings::from_flags(DEFAULT_TTL_S, DEFAULT_MAX_BUCKETS_PER_STREAM, None).unwrap();
        assert_eq!(s, Settings::default());
        let e = Settings::from_flags(1, 10, None).unwrap_err().to_string();
        assert!(e.starts_with("--rlqs-ttl: must be 6 to 300"), "{e}");
        let e = Settings::from_flags(12, 0, None).unwrap_err().to_string();
        assert!(e.starts_with("--rlqs-max-buckets: must be 1"), "{e}");
    }

    #[test]
    fn a_mapping_file_is_read_and_its_faults_name_file_and_field() {
        let ok = file("mappings:\n  - when: {route: api}\n    action: api\n    key: [user]\n");
        let s = Settings::from_flags(12, 10, Some(ok.path())).unwrap();
        assert_eq!(s.mapping.len(), 1);
        let empty = file("");
        assert!(Settings::from_flags(12, 10, Some(empty.path()))
            .unwrap()
            .mapping
            .is_empty());
        let bad = file("mappings:\n  - key: [user]\n");
        let e = Settings::from_flags(12, 10, Some(bad.path()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(": mappings[0].action: required"), "{e}");
        let syntax = file("mappings: [");
        let e = Settings::from_flags(12, 10, Some(syntax.path()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid YAML or JSON"), "{e}");
        let e = Settings::from_flags(12, 10, Some(Path::new("/nonexistent/m.yaml")))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read --rlqs-mapping file"), "{e}");
    }
}
