//! `--ratelimit-config PATH` read whole: a YAML file, or a directory of them (searched
//! recursively; every file is a configuration whatever its name, as in the peer's runtime
//! directory; entries starting with `.` are skipped, which also skips a Kubernetes ConfigMap's
//! `..data` links while following the files' own links). All files are checked and every refusal returned, so one
//! run lists everything wrong.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use sluice_core::Rule;

use super::config::{self, ConfigError};
use super::matcher::{Level, Limit};
use super::semantics::Semantics;
use super::translate::translate;

/// A whole configuration, ready to serve.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Each domain's top level.
    pub domains: HashMap<String, Level>,
    /// Every counted limit's rule, across domains.
    pub rules: Vec<Rule>,
    /// Every limit, across domains, in file order.
    pub limits: Vec<Arc<Limit>>,
    /// The files read, sorted.
    pub files: Vec<PathBuf>,
    /// A digest of the files' names and contents: what the watcher compares.
    pub fingerprint: [u8; 32],
    /// The domains whose file says whose answers they give (`sluice_semantics`).
    pub semantics: HashMap<String, Semantics>,
}

impl Loaded {
    /// Whose answers `domain` gives: its file's `sluice_semantics`, else `default` (the
    /// `--ratelimit-semantics` setting).
    pub fn semantics_of(&self, domain: &str, default: Semantics) -> Semantics {
        self.semantics.get(domain).copied().unwrap_or(default)
    }
}

/// The files under `path` (itself, if a file), sorted; refused when none can be read.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| ConfigError::new(path, "(path)", format!("cannot read: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    walk(path, 0, &mut out)?;
    out.sort();
    Ok(out)
}

/// How deep directories nest under PATH: deeper is refused (a directory link to itself would
/// otherwise recurse without end).
const MAX_DEPTH: usize = 8;

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    if depth > MAX_DEPTH {
        return Err(ConfigError::new(
            dir,
            "(path)",
            format!("directories nest more than {MAX_DEPTH} deep (a link to a parent directory?)"),
        ));
    }
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ConfigError::new(dir, "(path)", format!("cannot list: {e}")))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            walk(&path, depth + 1, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// The largest file read (the watcher reads every file every poll).
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The files' names and contents, read once: what [`load`] parses and the watcher compares.
pub fn read(path: &Path) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    files(path)?
        .into_iter()
        .map(|f| {
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            if len > MAX_FILE_BYTES {
                return Err(ConfigError::new(
                    &f,
                    "(file)",
                    format!("{len} bytes; at most {MAX_FILE_BYTES}"),
                ));
            }
            std::fs::read_to_string(&f)
                .map(|text| (f.clone(), text))
                .map_err(|e| ConfigError::new(&f, "(file)", format!("cannot read: {e}")))
        })
        .collect()
}

/// A digest of files as [`read`] returns them.
pub fn fingerprint(files: &[(PathBuf, String)]) -> [u8; 32] {
    let mut h = Sha256::new();
    for (path, text) in files {
        h.update(path.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// Whether several files may hold one domain (the peer's `MERGE_DOMAIN_CONFIG`): their top-level
/// descriptors are then put side by side (a key repeated across them is refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeDomains(pub bool);

/// Reads, parses and translates everything under `path`.
pub fn load(path: &Path, merge: MergeDomains) -> Result<Loaded, Vec<ConfigError>> {
    let files = read(path).map_err(|e| vec![e])?;
    build(&files, merge)
}

/// Parses and translates files already read. Two files for one domain are refused unless
/// `merge` (the peer's default, without `MERGE_DOMAIN_CONFIG`).
pub fn build(files: &[(PathBuf, String)], merge: MergeDomains) -> Result<Loaded, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut loaded = Loaded {
        files: files.iter().map(|(p, _)| p.clone()).collect(),
        fingerprint: fingerprint(files),
        ..Loaded::default()
    };
    let mut owners: HashMap<String, PathBuf> = HashMap::new();
    for (file, text) in files {
        let parsed = match config::parse(file, text) {
            Ok(p) => p,
            Err(e) => {
                errors.extend(e);
                continue;
            }
        };
        let first = owners.get(&parsed.domain).cloned();
        if let (Some(first), false) = (&first, merge.0) {
            errors.push(ConfigError::new(
                file,
                "domain",
                format!(
                    "duplicate domain '{}' (also in {})",
                    parsed.domain,
                    first.display()
                ),
            ));
            continue;
        }
        owners
            .entry(parsed.domain.clone())
            .or_insert_with(|| file.clone());
        if let Some(semantics) = parsed.semantics {
            match loaded.semantics.insert(parsed.domain.clone(), semantics) {
                Some(other) if other != semantics => errors.push(ConfigError::new(
                    file,
                    super::config::SEMANTICS_KEY,
                    format!(
                        "'{semantics}' for domain '{}', which another file sets to '{other}'",
                        parsed.domain
                    ),
                )),
                _ => {}
            }
        }
        match translate(&parsed) {
            Ok(t) => {
                loaded.rules.extend(t.rules);
                loaded.limits.extend(t.limits);
                let level = loaded.domains.entry(parsed.domain.clone()).or_default();
                for repeated in level.merge(t.level) {
                    let at = parsed
                        .descriptors
                        .iter()
                        .position(|d| d.composite() == repeated)
                        .unwrap_or(0);
                    let also = first.as_deref().unwrap_or(file.as_path());
                    errors.push(ConfigError::new(
                        file,
                        format!("descriptors[{at}].key"),
                        format!(
                            "duplicate descriptor composite key '{repeated}' in domain '{}' (also in {})",
                            parsed.domain,
                            also.display()
                        ),
                    ));
                }
            }
            Err(e) => errors.extend(e),
        }
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(name), text.to_owned())
    }

    #[test]
    fn several_domains_side_by_side_and_a_repeated_domain_refused() {
        let a = file("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
        let b = file("b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
        let loaded = build(&[a.clone(), b], MergeDomains(false)).expect("two domains");
        assert_eq!(loaded.domains.len(), 2);
        assert_eq!(loaded.rules.len(), 2);
        let again = file("c.yaml", "domain: a\ndescriptors: []\n");
        let e = build(&[a.clone(), again], MergeDomains(false)).expect_err("duplicate");
        assert_eq!(
            e[0].to_string(),
            "c.yaml: domain: duplicate domain 'a' (also in a.yaml)"
        );
        // MERGE_DOMAIN_CONFIG: side by side, a repeated key refused.
        let more = file("m.yaml", "domain: a\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 2}\n");
        let merged = build(&[a.clone(), more], MergeDomains(true)).expect("merged");
        let level = &merged.domains["a"];
        assert!(level.children.contains_key("k") && level.children.contains_key("other"));
        let same = file(
            "s.yaml",
            "domain: a\ndescriptors:\n  - key: x\n  - key: k\n",
        );
        let e = build(&[a, same], MergeDomains(true)).expect_err("repeated key");
        assert_eq!(
            e[0].to_string(),
            "s.yaml: descriptors[1].key: duplicate descriptor composite key 'k' in domain 'a' (also in a.yaml)"
        );
    }

    #[test]
    fn errors_of_every_file_are_listed() {
        let a = file("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: nope, requests_per_unit: 1}\n");
        let b = file("b.yaml", "domain: ''\n");
        let e = build(&[a, b], MergeDomains(false)).expect_err("both");
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn a_directory_is_read_recursively_skipping_dotfiles() {
        let dir = std::env::temp_dir().join(format!("sluice-rl-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::create_dir_all(dir.join("..data")).expect("dir");
        let text = "domain: x\ndescriptors: []\n";
        std::fs::write(dir.join("a.yaml"), text).expect("write");
        std::fs::write(dir.join("sub/b.yml"), text.replace('x', "y")).expect("write");
        std::fs::write(dir.join("..data/c.yaml"), "broken: [").expect("write");
        std::fs::write(dir.join(".hidden.yaml"), "broken: [").expect("write");
        std::fs::write(dir.join("z.conf"), text.replace('x', "z")).expect("write");
        let loaded = load(&dir, MergeDomains(false)).expect("loads");
        assert_eq!(loaded.files.len(), 3, "{:?}", loaded.files);
        assert!(loaded.domains.contains_key("x") && loaded.domains.contains_key("y"));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&dir, dir.join("sub/loop")).expect("link");
            let e = load(&dir, MergeDomains(false)).expect_err("a loop");
            assert!(e[0].to_string().contains("nest more than"), "{e:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_merged_domain_takes_one_semantics() {
        let body = "descriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
        let other = "descriptors:\n  - key: j\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
        let a = file(
            "a.yaml",
            &format!("domain: d\nsluice_semantics: sluice\n{body}"),
        );
        let b = file(
            "b.yaml",
            &format!("domain: d\nsluice_semantics: peer\n{other}"),
        );
        let e = build(&[a.clone(), b], MergeDomains(true)).expect_err("two semantics");
        assert!(e[0].to_string().starts_with("b.yaml: sluice_semantics: 'peer' for domain 'd', which another file sets to 'sluice'"), "{e:?}");
        let same = file("c.yaml", &format!("domain: d\n{other}"));
        let loaded = build(&[a, same], MergeDomains(true)).expect("one says, the other is silent");
        assert_eq!(loaded.semantics_of("d", Semantics::PEER), Semantics::SLUICE);
        assert_eq!(
            loaded.semantics_of("elsewhere", Semantics::PEER),
            Semantics::PEER
        );
    }
}
