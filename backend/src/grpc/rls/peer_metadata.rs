//! The peer's response metadata (`RESPONSE_DYNAMIC_METADATA=true` there; always here): the
//! request's `domain`, its `descriptors` (`entries` as `key=value`, `hitsAddend` and `limit`
//! when set), the
//! request's `hitsAddend` when not 0, and `metadata`: the configured `metadata` of every
//! descriptor that passed, merged (the first value of a key wins; maps merge recursively), as
//! its `ratelimitToMetadata` builds them. Envoy stores the struct as the filter's dynamic
//! metadata, beside sluice's own `sluice` list.

use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{self as pb, value::Kind};
use serde_json::{Map, Value};

use super::response::to_proto;

/// Adds the peer's fields to `out`.
pub fn add_peer_fields(
    out: &mut pb::Struct,
    request: &RateLimitRequest,
    passed: &[&Map<String, Value>],
) {
    let text = |s: &str| pb::Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    };
    let number = |n: u64| pb::Value {
        kind: Some(Kind::NumberValue(n as f64)),
    };
    out.fields
        .insert("domain".to_owned(), text(&request.domain));
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut fields = std::collections::HashMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| text(&format!("{}={}", e.key, e.value)))
                .collect();
            fields.insert(
                "entries".to_owned(),
                pb::Value {
                    kind: Some(Kind::ListValue(pb::ListValue { values: entries })),
                },
            );
            if let Some(h) = &d.hits_addend {
                fields.insert("hitsAddend".to_owned(), number(h.value));
            }
            if let Some(limit) = &d.limit {
                // The peer writes Go's text form of the override (whose spacing Go varies on
                // purpose); this is its stable shape.
                let unit = RateLimitUnit::try_from(limit.unit)
                    .map_or_else(|_| limit.unit.to_string(), |u| u.as_str_name().to_owned());
                fields.insert(
                    "limit".to_owned(),
                    text(&format!(
                        "requests_per_unit:{} unit:{unit}",
                        limit.requests_per_unit
                    )),
                );
            }
            pb::Value {
                kind: Some(Kind::StructValue(pb::Struct { fields })),
            }
        })
        .collect();
    out.fields.insert(
        "descriptors".to_owned(),
        pb::Value {
            kind: Some(Kind::ListValue(pb::ListValue {
                values: descriptors,
            })),
        },
    );
    if request.hits_addend != 0 {
        out.fields.insert(
            "hitsAddend".to_owned(),
            number(u64::from(request.hits_addend)),
        );
    }
    let mut merged = Map::new();
    for m in passed {
        merge(&mut merged, m);
    }
    if !merged.is_empty() {
        out.fields
            .insert("metadata".to_owned(), to_proto(&Value::Object(merged)));
    }
}

/// Adds `src`'s keys missing from `dest`; maps present in both merge recursively.
fn merge(dest: &mut Map<String, Value>, src: &Map<String, Value>) {
    for (k, v) in src {
        match (dest.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(s)) => merge(d, s),
            (Some(_), _) => {}
            (None, _) => {
                dest.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn passed_metadata_merges_first_wins_maps_recursively() {
        let a = json!({"team": "a", "tier": {"x": 1}});
        let b = json!({"team": "b", "tier": {"y": 2}, "extra": true});
        let mut merged = Map::new();
        merge(&mut merged, a.as_object().expect("map"));
        merge(&mut merged, b.as_object().expect("map"));
        assert_eq!(
            Value::Object(merged),
            json!({"team": "a", "tier": {"x": 1, "y": 2}, "extra": true})
        );
    }
}
