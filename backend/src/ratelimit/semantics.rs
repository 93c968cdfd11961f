//! Whose answers a ratelimit-config domain gives: envoyproxy/ratelimit's (the default, so a team
//! switching keeps the answers its own checks were written against) or, point by point,
//! sluice's stricter ones (docs/rls.md, "Whose semantics").
//!
//! Set for the whole configuration with `--ratelimit-semantics` and for one domain with the
//! file's top-level `sluice_semantics` (which wins for that domain). Both take `peer`, `sluice`
//! (every point) or a comma-separated list of points ([`Point::NAMES`]).

use std::fmt;

/// One of sluice's choices that differ from the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// A request one descriptor refuses debits none of its descriptors; a counter never passes
    /// its limit (a lone debit larger than what is left takes what is left); so a check
    /// without debit (`hits_addend: 0`) at exactly the limit is over. The peer counts every
    /// descriptor of every request, lets its counters pass the limit, and refuses a check only
    /// when the counter is already over.
    StrictCounting,
    /// A descriptor's per-request `limit` is refused (`INVALID_ARGUMENT`): limits live in the
    /// files. The peer uses it.
    RefuseLimitOverrides,
    /// A domain in no file is answered by sluice's own rules. The peer answers OK.
    OwnRulesForUnknownDomains,
}

impl Point {
    /// Every point, in the order of [`Point::NAMES`].
    pub const ALL: [Point; 3] = [
        Point::StrictCounting,
        Point::RefuseLimitOverrides,
        Point::OwnRulesForUnknownDomains,
    ];

    /// The points' names in settings and files.
    pub const NAMES: [&'static str; 3] = [
        "strict_counting",
        "refuse_limit_overrides",
        "own_rules_for_unknown_domains",
    ];

    fn bit(self) -> u8 {
        match self {
            Point::StrictCounting => 1,
            Point::RefuseLimitOverrides => 2,
            Point::OwnRulesForUnknownDomains => 4,
        }
    }

    /// The point's name.
    pub fn name(self) -> &'static str {
        let index = Point::ALL.iter().position(|p| *p == self).unwrap_or(0);
        Point::NAMES[index]
    }
}

/// The points of sluice's semantics turned on; none is the peer's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Semantics(u8);

impl Semantics {
    /// envoyproxy/ratelimit's answers everywhere (the default).
    pub const PEER: Semantics = Semantics(0);
    /// Every point of sluice's.
    pub const SLUICE: Semantics = Semantics(7);

    /// Whether `point` is turned on.
    pub fn has(self, point: Point) -> bool {
        self.0 & point.bit() != 0
    }

    /// Parses `peer`, `sluice` or a comma-separated list of point names (spaces around names are
    /// ignored); the error says which name is unknown and lists the valid ones.
    pub fn parse(text: &str) -> Result<Semantics, String> {
        match text.trim() {
            "peer" => return Ok(Semantics::PEER),
            "sluice" => return Ok(Semantics::SLUICE),
            "" => return Err(Semantics::expected("an empty value")),
            _ => {}
        }
        let mut bits = 0;
        for name in text.split(',').map(str::trim) {
            let point = Point::NAMES
                .iter()
                .position(|n| *n == name)
                .and_then(|i| Point::ALL.get(i))
                .ok_or_else(|| Semantics::expected(&format!("unknown point '{name}'")))?;
            bits |= point.bit();
        }
        Ok(Semantics(bits))
    }

    fn expected(what: &str) -> String {
        format!(
            "{what}: expected peer, sluice, or a comma-separated list of {}",
            Point::NAMES.join(", ")
        )
    }
}

impl fmt::Display for Semantics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Semantics::PEER => f.write_str("peer"),
            Semantics::SLUICE => f.write_str("sluice"),
            s => {
                let on: Vec<&str> = Point::ALL
                    .iter()
                    .filter(|p| s.has(**p))
                    .map(|p| p.name())
                    .collect();
                f.write_str(&on.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_all_and_points() {
        assert_eq!(Semantics::parse("peer"), Ok(Semantics::PEER));
        assert_eq!(Semantics::parse(" sluice "), Ok(Semantics::SLUICE));
        let one = Semantics::parse("refuse_limit_overrides").expect("a point");
        assert!(one.has(Point::RefuseLimitOverrides));
        assert!(!one.has(Point::StrictCounting));
        let all = Semantics::parse(
            "strict_counting, refuse_limit_overrides,own_rules_for_unknown_domains",
        )
        .expect("every point");
        assert_eq!(all, Semantics::SLUICE);
        assert_eq!(all.to_string(), "sluice");
        assert_eq!(one.to_string(), "refuse_limit_overrides");
        for p in Point::ALL {
            assert!(!Semantics::PEER.has(p) && Semantics::SLUICE.has(p));
            assert_eq!(Semantics::parse(p.name()).map(|s| s.has(p)), Ok(true));
        }
    }

    #[test]
    fn refusals_name_the_bad_point() {
        let e = Semantics::parse("strict_counting,strictest").expect_err("unknown");
        assert!(
            e.starts_with("unknown point 'strictest': expected peer, sluice"),
            "{e}"
        );
        assert!(Semantics::parse("").is_err());
        assert!(Semantics::parse("peer,sluice").is_err());
    }
}
