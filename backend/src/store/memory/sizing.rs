//! The memory store's default bound: a fixed share of this machine's memory (or of the cgroup's
//! limit, in a container) divided by what one throttle key costs, between a floor and a cap.

use std::sync::OnceLock;

/// Resident memory one throttle key may cost in a full store: the unit of `--max-keys`, so a
/// full store holds at most `max_keys × 256` bytes of state. Measured
/// (`backend/examples/bench_spray.rs`, see docs/backend.md) per key of the bound: 173–199 bytes
/// for one O(1) algorithm with 20-byte names (`<tag><action>/<key>`), 221–248 for one-timestamp
/// sliding logs, 252 for all six algorithms mixed with 25–35-byte names (the allocator keeps
/// freed blocks of each size for reuse). A key with a longer name or a longer sliding log weighs
/// more (see `table.rs`), never less.
pub const BYTES_PER_KEY: u64 = 256;
/// The part of [`BYTES_PER_KEY`] that is not the name: the row (state, expiry, eviction worth:
/// 72 bytes), its index slot (24 bytes at a hash table's 57–87% load), and the allocator's and
/// the tables' share besides; 256 minus the 48-byte block of a 20-byte name.
pub const ROW_BYTES: u64 = 208;
/// Share of the machine's memory the default bound lets throttle state take, as a divisor: a
/// quarter leaves the rest to Envoy, the OS and anything sharing the machine, and a spray at the
/// bound costs at most that.
pub const MEMORY_SHARE_DIVISOR: u64 = 4;
/// The default bound never goes below this (26 MB of state), so a tiny or unreadable limit
/// still leaves room for a normal working set.
pub const MIN_DEFAULT_MAX_KEYS: usize = 100_000;
/// Nor above this (2.6 GB of state): more is a choice to make explicitly (`--max-keys`), or a
/// case for Redis, which shares state across replicas too.
pub const MAX_DEFAULT_MAX_KEYS: usize = 10_000_000;

/// The bound used when `--max-keys` is not given, computed once per process.
pub fn default_max_keys() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| max_keys_for(machine_memory()))
}

/// The default bound for `memory` bytes (`None`: unknown, the floor).
pub fn max_keys_for(memory: Option<u64>) -> usize {
    let Some(memory) = memory else {
        return MIN_DEFAULT_MAX_KEYS;
    };
    let keys = memory / MEMORY_SHARE_DIVISOR / BYTES_PER_KEY;
    usize::try_from(keys)
        .unwrap_or(usize::MAX)
        .clamp(MIN_DEFAULT_MAX_KEYS, MAX_DEFAULT_MAX_KEYS)
}

/// The memory this process may use: the smaller of `MemTotal` and the cgroup's limit (v2
/// `memory.max`, or v1 `memory.limit_in_bytes`), whichever are known.
pub fn machine_memory() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let total = read("/proc/meminfo").as_deref().and_then(mem_total);
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .as_deref()
        .and_then(cgroup_limit);
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// `MemTotal` from /proc/meminfo, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// A cgroup memory limit in bytes: `max` (v2) or a huge v1 sentinel mean none.
fn cgroup_limit(text: &str) -> Option<u64> {
    let limit: u64 = text.trim().parse().ok()?;
    // cgroup v1 reports "no limit" as a page-rounded i64::MAX.
    (limit < (1 << 60)).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       24684084 kB\nMemFree:        18398784 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_684_084 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn cgroup_limits_and_their_absence() {
        assert_eq!(cgroup_limit("536870912\n"), Some(536_870_912));
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit("9223372036854771712\n"), None);
    }

    #[test]
    fn the_default_is_a_quarter_of_memory_between_the_floor_and_the_cap() {
        const GB: u64 = 1 << 30;
        assert_eq!(max_keys_for(None), MIN_DEFAULT_MAX_KEYS);
        assert_eq!(max_keys_for(Some(64 << 20)), MIN_DEFAULT_MAX_KEYS);
        assert_eq!(
            max_keys_for(Some(2 * GB)),
            (2 * GB / 4 / BYTES_PER_KEY) as usize
        );
        assert_eq!(max_keys_for(Some(1 << 50)), MAX_DEFAULT_MAX_KEYS);
        let default = default_max_keys();
        assert!((MIN_DEFAULT_MAX_KEYS..=MAX_DEFAULT_MAX_KEYS).contains(&default));
    }
}
