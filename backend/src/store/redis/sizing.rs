//! What Redis's memory settings mean for sluice, as words an operator can act on. Pure: the
//! readings come from [`super::health`], which asks every node; this file only judges them.
//!
//! A key spray (a flood of fresh subjects) writes one throttle key per subject. What happens when
//! Redis fills up is its `maxmemory-policy`'s choice, and only some choices keep limiting on:
//!
//! - `maxmemory 0`: no limit; Redis grows until the machine runs out and the OOM killer (or a
//!   failed allocation) takes Redis down: every decision fails.
//! - `noeviction`: at `maxmemory` every write is refused (`OOM`, 503 `store_full`); every request
//!   that would be admitted fails and the filter's failure mode applies (fail open by default).
//! - `allkeys-*`: evicts keys without a TTL too, and the rules hash is sluice's only such key.
//!   Running replicas publish their cached rules again within a poll, but a replica that starts
//!   in between finds no rules and lets every action through as unknown.
//! - `volatile-ttl`: evicts the keys nearest their expiry first. A throttle key's TTL is reset
//!   only when a request is admitted, so the key of a subject being denied (the one holding the
//!   most information) ages towards eviction while the spray's fresh keys look younger.
//! - `volatile-random`: evicts throttle state at random, limited keys as readily as fresh ones.
//! - `volatile-lru`: keeps keys used recently, but Redis's LRU clock ticks once a second: a spray
//!   that fills memory within a few seconds cannot be told apart from a key in use.
//! - `volatile-lfu` (recommended, with `lfu-log-factor 0` so that Redis counts small numbers of
//!   accesses exactly): keeps keys used often. A sprayed key is used once; a key being limited is
//!   read on every attempt, so it outlives the spray. Only keys with a TTL are evicted: throttle
//!   state and activity, never the rules.
//!
//! `backend/tests/it/redis_sizing.rs` measures these claims on a real redis-server (see
//! docs/storage.md, "Sizing Redis").

use std::collections::BTreeMap;

/// The policy sluice recommends, named in every warning.
pub const RECOMMENDED_POLICY: &str = "volatile-lfu";

/// One node's memory settings as `CONFIG GET maxmemory*` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemorySettings {
    /// `maxmemory` in bytes; 0 means no limit.
    pub maxmemory: u64,
    /// `maxmemory-policy`, as Redis spells it.
    pub policy: String,
}

/// What one node told us: its settings (or why CONFIG GET was refused) and its eviction count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeReading {
    /// `host:port` on a Cluster; empty for the one node of a single-node deployment.
    pub node: String,
    /// The settings, or what Redis said when it refused `CONFIG GET` (renamed, ACL, a managed
    /// service that hides it).
    pub settings: Result<MemorySettings, String>,
    /// `evicted_keys` from `INFO stats` (since Redis started or `CONFIG RESETSTAT`); `None` when
    /// INFO was refused.
    pub evicted_keys: Option<u64>,
}

/// Reads the flat name/value list of `CONFIG GET maxmemory*`. `None` when either setting is
/// missing or `maxmemory` is not a number (a Redis sluice does not understand).
pub(crate) fn parse_settings(pairs: &[(String, String)]) -> Option<MemorySettings> {
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    Some(MemorySettings {
        maxmemory: get("maxmemory")?.parse().ok()?,
        policy: get("maxmemory-policy")?.to_ascii_lowercase(),
    })
}

/// `evicted_keys` from the text of `INFO stats`.
pub(crate) fn parse_evicted_keys(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("evicted_keys:"))
        .and_then(|v| v.trim().parse().ok())
}

/// What a policy does to sluice's keys under a spray, when it is not what sluice recommends.
fn policy_problem(policy: &str) -> Option<String> {
    let advice = format!(
        "use {RECOMMENDED_POLICY}, which evicts only keys with a TTL (throttle state, never the \
         rules) and keeps the keys being limited"
    );
    let problem = match policy {
        // volatile-lru: no warning; its 1 s clock only hurts when memory holds seconds of spray.
        "volatile-lfu" | "volatile-lru" => return None,
        "noeviction" => "once maxmemory is reached Redis refuses every write, so every request \
                         that would be admitted fails (503 store_full) and the filter's failure \
                         mode applies: fail open (the default) lets everybody through"
            .to_owned(),
        "allkeys-lru" | "allkeys-lfu" | "allkeys-random" => {
            "it may evict the rules hash (sluice's only key without a TTL): running replicas \
             publish their cached rules again, but a replica started meanwhile has no rules and \
             lets every action through as unknown"
                .to_owned()
        }
        "volatile-ttl" => "it evicts the keys nearest their expiry first, and a key being denied \
                           is not rewritten, so a spray evicts the limited keys before its own \
                           fresh ones and their owners get a fresh allowance"
            .to_owned(),
        "volatile-random" => "it evicts throttle state at random, so a spray resets limited keys \
                              as readily as its own"
            .to_owned(),
        other => format!("sluice does not know the policy {other:?}"),
    };
    Some(format!(
        "Redis maxmemory-policy is {policy}: {problem}; {advice}"
    ))
}

/// The problems of one node's settings, each a sentence without the node's name.
fn problems(settings: &MemorySettings) -> Vec<String> {
    let mut out = Vec::new();
    if settings.maxmemory == 0 {
        out.push(format!(
            "Redis maxmemory is 0 (no limit): a spray of fresh keys grows Redis until the machine \
             runs out of memory, and then no decision can be made; set maxmemory (docs/storage.md, \
             Sizing Redis) with maxmemory-policy {RECOMMENDED_POLICY}"
        ));
    }
    out.extend(policy_problem(&settings.policy));
    out
}

/// Every warning the readings call for, one per distinct problem, naming the Cluster nodes it
/// applies to (a single node is not named). `evicting` says Redis evicted keys since the last
/// reading: memory is full, so limited keys may be reset.
pub(crate) fn warnings(readings: &[NodeReading], evicting: bool) -> Vec<String> {
    // problem -> nodes, in a stable order.
    let mut by_problem: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for reading in readings {
        let found = match &reading.settings {
            Ok(settings) => problems(settings),
            Err(refusal) => vec![format!(
                "cannot read the Redis memory settings (CONFIG GET maxmemory* was refused: \
                 {refusal}); check by hand that maxmemory is set and maxmemory-policy is \
                 {RECOMMENDED_POLICY} (docs/storage.md, Sizing Redis)"
            )],
        };
        for problem in found {
            by_problem.entry(problem).or_default().push(&reading.node);
        }
    }
    let mut out: Vec<String> = by_problem
        .into_iter()
        .map(|(problem, nodes)| {
            let named: Vec<&str> = nodes.into_iter().filter(|n| !n.is_empty()).collect();
            if named.is_empty() {
                problem
            } else {
                format!("{problem} [nodes {}]", named.join(", "))
            }
        })
        .collect();
    if evicting {
        out.push(
            "Redis is evicting keys (maxmemory reached): throttle state is being dropped, so \
             limited keys may start afresh; raise maxmemory if this is not a key spray"
                .to_owned(),
        );
    }
    out
}

/// The sum of every node's `evicted_keys` that could be read.
pub(crate) fn total_evictions(readings: &[NodeReading]) -> u64 {
    readings
        .iter()
        .filter_map(|r| r.evicted_keys)
        .fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, maxmemory: u64, policy: &str) -> NodeReading {
        NodeReading {
            node: name.to_owned(),
            settings: Ok(MemorySettings {
                maxmemory,
                policy: policy.to_owned(),
            }),
            evicted_keys: Some(0),
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn config_get_replies_are_read_whatever_else_they_hold() {
        let reply = pairs(&[
            ("maxmemory-samples", "5"),
            ("maxmemory", "20971520"),
            ("maxmemory-policy", "noeviction"),
            ("maxmemory-clients", "0"),
        ]);
        assert_eq!(
            parse_settings(&reply),
            Some(MemorySettings {
                maxmemory: 20_971_520,
                policy: "noeviction".into()
            })
        );
        assert_eq!(parse_settings(&pairs(&[("maxmemory", "0")])), None);
        assert_eq!(
            parse_settings(&pairs(&[
                ("maxmemory", "lots"),
                ("maxmemory-policy", "noeviction")
            ])),
            None
        );
    }

    #[test]
    fn evicted_keys_is_read_from_info_stats() {
        let info = "# Stats\r\ntotal_connections_received:3\r\nevicted_keys:76749\r\nevicted_clients:0\r\n";
        assert_eq!(parse_evicted_keys(info), Some(76_749));
        assert_eq!(parse_evicted_keys("# Stats\r\n"), None);
    }

    #[test]
    fn the_recommended_setting_and_volatile_lru_warn_of_nothing() {
        assert!(warnings(&[node("", 1 << 30, "volatile-lfu")], false).is_empty());
        assert!(warnings(&[node("", 1 << 30, "volatile-lru")], false).is_empty());
    }

    #[test]
    fn every_policy_that_lets_a_spray_in_is_named_with_the_fix() {
        for (policy, says) in [
            ("noeviction", "503 store_full"),
            ("allkeys-lru", "rules hash"),
            ("allkeys-lfu", "rules hash"),
            ("allkeys-random", "rules hash"),
            ("volatile-ttl", "nearest their expiry"),
            ("volatile-random", "at random"),
            ("some-future-policy", "does not know"),
        ] {
            let found = warnings(&[node("", 1 << 30, policy)], false);
            assert_eq!(found.len(), 1, "{policy}: {found:?}");
            assert!(
                found[0].starts_with(&format!("Redis maxmemory-policy is {policy}: ")),
                "{found:?}"
            );
            assert!(found[0].contains(says), "{policy}: {found:?}");
            assert!(found[0].contains("use volatile-lfu"), "{found:?}");
        }
    }

    #[test]
    fn no_maxmemory_is_a_warning_of_its_own() {
        let found = warnings(&[node("", 0, "noeviction")], false);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found
            .iter()
            .any(|w| w.starts_with("Redis maxmemory is 0 (no limit)")));
        let found = warnings(&[node("", 0, "volatile-lfu")], false);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn cluster_nodes_sharing_a_problem_share_one_warning_naming_them() {
        let readings = [
            node("10.0.0.1:7000", 1 << 30, "noeviction"),
            node("10.0.0.2:7000", 1 << 30, "volatile-lfu"),
            node("10.0.0.3:7000", 1 << 30, "noeviction"),
        ];
        let found = warnings(&readings, false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].ends_with("[nodes 10.0.0.1:7000, 10.0.0.3:7000]"),
            "{found:?}"
        );
    }

    #[test]
    fn a_refused_config_get_is_a_warning_not_a_failure() {
        let readings = [NodeReading {
            node: String::new(),
            settings: Err(
                "NOPERM this user has no permissions to run the 'config|get' command".into(),
            ),
            evicted_keys: None,
        }];
        let found = warnings(&readings, false);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].contains("CONFIG GET maxmemory* was refused: NOPERM"),
            "{found:?}"
        );
        assert_eq!(total_evictions(&readings), 0);
    }

    #[test]
    fn evictions_are_summed_and_evicting_is_said() {
        let mut a = node("a:1", 1 << 30, "volatile-lfu");
        a.evicted_keys = Some(7);
        let mut b = node("b:1", 1 << 30, "volatile-lfu");
        b.evicted_keys = Some(5);
        assert_eq!(total_evictions(&[a.clone(), b]), 12);
        let found = warnings(&[a], true);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("Redis is evicting keys"), "{found:?}");
    }
}
