//! Usage reports read without failing on a bucket id that is not UTF-8.
//!
//! A quota filter builds bucket ids from request headers, and Envoy sends a header's bytes as
//! they came: a client sending `x-user-id: \xff` makes Envoy put bytes that are not UTF-8 in a
//! proto `string`. Decoded as envoy-types' `RateLimitQuotaUsageReports`, that whole message
//! fails, and tonic ends the stream: every bucket of that Envoy then loses its assignment at its
//! TTL (`no_assignment_behavior`, a free pass on an `ALLOW_ALL` listener), and Envoy's next
//! report carries the same bucket again. Here the bucket id's entries are read as bytes (the same
//! wire encoding: a proto map is a repeated entry message), and a bucket that is not UTF-8 is
//! left out of the report and counted. sluice cannot assign it anything (Envoy could not parse an
//! answer naming it), so it stays on the listener's `no_assignment_behavior`; envoy/rlqs.yaml's
//! matcher keeps such values out of bucket ids in the first place (docs/rlqs.md, "Client values").

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::google::protobuf::Duration as PbDuration;

/// `RateLimitQuotaUsageReports`, every string as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LenientReports {
    /// `string domain = 1`.
    #[prost(bytes = "vec", tag = "1")]
    pub domain: Vec<u8>,
    /// `repeated BucketQuotaUsage bucket_quota_usages = 2`.
    #[prost(message, repeated, tag = "2")]
    pub bucket_quota_usages: Vec<LenientUsage>,
}

/// `BucketQuotaUsage`, its bucket id's entries as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LenientUsage {
    /// `BucketId bucket_id = 1`.
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<LenientBucketId>,
    /// `google.protobuf.Duration time_elapsed = 2`.
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<PbDuration>,
    /// `uint64 num_requests_allowed = 3`.
    #[prost(uint64, tag = "3")]
    pub num_requests_allowed: u64,
    /// `uint64 num_requests_denied = 4`.
    #[prost(uint64, tag = "4")]
    pub num_requests_denied: u64,
}

/// `BucketId { map<string, string> bucket = 1 }` as the repeated entries a map is on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LenientBucketId {
    /// The map's entries.
    #[prost(message, repeated, tag = "1")]
    pub bucket: Vec<LenientEntry>,
}

/// One map entry: `key = 1`, `value = 2`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LenientEntry {
    /// The entry's name.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Its value.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// A report as the ledger reads it, and how many buckets were left out (not UTF-8).
pub struct Checked {
    /// The report, every string UTF-8.
    pub reports: RateLimitQuotaUsageReports,
    /// Buckets left out.
    pub not_utf8: u64,
}

impl LenientReports {
    /// The report with its UTF-8 buckets; a domain that is not UTF-8 is read lossily (it only
    /// binds the stream: a changed domain is refused either way).
    pub fn checked(self) -> Checked {
        let mut not_utf8 = 0;
        let usages = self
            .bucket_quota_usages
            .into_iter()
            .filter_map(|u| {
                let bucket_id = match u.bucket_id.map(LenientBucketId::utf8) {
                    Some(Some(id)) => Some(id),
                    Some(None) => {
                        not_utf8 += 1;
                        return None;
                    }
                    None => None,
                };
                Some(BucketQuotaUsage {
                    bucket_id,
                    time_elapsed: u.time_elapsed,
                    num_requests_allowed: u.num_requests_allowed,
                    num_requests_denied: u.num_requests_denied,
                })
            })
            .collect();
        Checked {
            reports: RateLimitQuotaUsageReports {
                domain: String::from_utf8_lossy(&self.domain).into_owned(),
                bucket_quota_usages: usages,
            },
            not_utf8,
        }
    }
}

impl LenientBucketId {
    /// The bucket id, or `None` when an entry is not UTF-8 (a repeated name keeps the last, as
    /// a proto map does).
    fn utf8(self) -> Option<BucketId> {
        let mut id = BucketId::default();
        for e in self.bucket {
            id.bucket.insert(
                String::from_utf8(e.key).ok()?,
                String::from_utf8(e.value).ok()?,
            );
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn usage(entries: &[(&str, &str)], allowed: u64) -> BucketQuotaUsage {
        BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            time_elapsed: Some(PbDuration {
                seconds: 5,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: 2,
        }
    }

    #[test]
    fn a_report_reads_as_envoy_types_reads_it() {
        let sent = RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![
                usage(&[("name", "user"), ("user", "alice")], 3),
                usage(&[], 0),
            ],
        };
        let read = LenientReports::decode(sent.encode_to_vec().as_slice()).unwrap();
        let checked = read.checked();
        assert_eq!(checked.reports, sent);
        assert_eq!(checked.not_utf8, 0);
    }

    #[test]
    fn a_bucket_that_is_not_utf8_is_left_out_and_the_rest_kept() {
        // The wire form of a report whose second bucket's value is the byte 0xff: what Envoy
        // sends for `x-user-id: \xff`, and what envoy-types cannot decode at all.
        let good = usage(&[("name", "user"), ("user", "alice")], 3);
        let bad = LenientUsage {
            bucket_id: Some(LenientBucketId {
                bucket: vec![
                    LenientEntry {
                        key: b"name".to_vec(),
                        value: b"user".to_vec(),
                    },
                    LenientEntry {
                        key: b"user".to_vec(),
                        value: vec![0xff],
                    },
                ],
            }),
            time_elapsed: None,
            num_requests_allowed: 1,
            num_requests_denied: 0,
        };
        let good_wire = RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![good.clone()],
        };
        let mut lenient = LenientReports::decode(good_wire.encode_to_vec().as_slice()).unwrap();
        lenient.bucket_quota_usages.push(bad);
        let bytes = lenient.encode_to_vec();
        assert!(
            RateLimitQuotaUsageReports::decode(bytes.as_slice()).is_err(),
            "envoy-types refuses the whole report"
        );
        let checked = LenientReports::decode(bytes.as_slice()).unwrap().checked();
        assert_eq!(checked.reports.bucket_quota_usages, vec![good]);
        assert_eq!(checked.not_utf8, 1);
    }
}
