//! The serving certificate's validity, said at start (and when a rotated one is loaded): rustls
//! serves whatever certificate it is given, so an expired one (or one not valid yet) would only
//! show as clients refusing the handshake (Envoy's `ssl.fail_verify_*`, the backend's
//! `client_alert` refusals). Here it is a WARN naming the flag and the file, and a certificate
//! that expires within [`EXPIRY_NOTICE`] says when.
//!
//! Only the validity of the leaf is read, from its DER by hand (the few fields before it are
//! skipped, not interpreted): no X.509 parser is needed for two dates, and nothing here decides
//! whether the certificate is served.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::files::{TlsFiles, TlsSetting};

/// A serving certificate that expires within this long is warned about at start.
pub const EXPIRY_NOTICE: Duration = Duration::from_secs(14 * 24 * 60 * 60);

/// A moment of a certificate's validity: seconds since the Unix epoch and as written (UTC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moment {
    /// Seconds since the epoch (negative before 1970).
    pub unix: i64,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub text: String,
}

/// A certificate's `notBefore` and `notAfter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validity {
    /// Valid from.
    pub not_before: Moment,
    /// Valid until (inclusive).
    pub not_after: Moment,
}

/// What is worth saying about a validity at `now` (seconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Not valid yet (a clock, or a certificate issued for later).
    NotYetValid,
    /// Expired.
    Expired,
    /// Expires within [`EXPIRY_NOTICE`]: in this many whole days (0: within the day).
    ExpiresSoon(u64),
}

impl Validity {
    /// The notice due at `now` (seconds since the epoch), if any.
    pub fn notice(&self, now: i64) -> Option<Notice> {
        if now < self.not_before.unix {
            return Some(Notice::NotYetValid);
        }
        if now > self.not_after.unix {
            return Some(Notice::Expired);
        }
        let left = u64::try_from(self.not_after.unix - now).unwrap_or(0);
        (left <= EXPIRY_NOTICE.as_secs()).then_some(Notice::ExpiresSoon(left / 86_400))
    }
}

/// Logs a WARN when the first certificate of `pem` (the leaf of `files`) is expired, not valid
/// yet, or expires within [`EXPIRY_NOTICE`]. Silent when it cannot be read: loading the files
/// ([`super::load`]) is what refuses a bad certificate.
pub fn warn_if_due(files: &TlsFiles, pem: &[u8]) {
    let Some(validity) = CertificateDer::pem_slice_iter(pem)
        .next()
        .and_then(Result::ok)
        .and_then(|leaf| validity(&leaf))
    else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let listener = files.listener.as_str();
    let flag = files.listener.flag(TlsSetting::Cert);
    let file = files.cert.display();
    let (from, until) = (&validity.not_before.text, &validity.not_after.text);
    match validity.notice(now) {
        None => {}
        Some(Notice::Expired) => tracing::warn!(
            listener,
            not_after = %until,
            "the {listener} listener's certificate ({flag} {file}) expired at {until}: clients that check it refuse every connection; replace it (it is re-read within a second)"
        ),
        Some(Notice::NotYetValid) => tracing::warn!(
            listener,
            not_before = %from,
            "the {listener} listener's certificate ({flag} {file}) is not valid until {from}: clients that check it refuse every connection until then (is this host's clock right?)"
        ),
        Some(Notice::ExpiresSoon(days)) => {
            let when = match days {
                0 => "within a day".to_owned(),
                1 => "in 1 day".to_owned(),
                n => format!("in {n} days"),
            };
            tracing::warn!(
                listener,
                not_after = %until,
                days,
                "the {listener} listener's certificate ({flag} {file}) expires at {until} ({when}): renew it (it is re-read within a second)"
            )
        }
    }
}

/// The validity of a DER certificate, `None` when it cannot be read.
pub fn validity(der: &[u8]) -> Option<Validity> {
    let (tag, certificate, _) = tlv(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, mut tbs, _) = tlv(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    // version [0] EXPLICIT (optional), serialNumber, signature, issuer: skipped.
    if tbs.first() == Some(&VERSION) {
        tbs = tlv(tbs)?.2;
    }
    for _ in 0..3 {
        tbs = tlv(tbs)?.2;
    }
    let (tag, dates, _) = tlv(tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, before, rest) = tlv(dates)?;
    let not_before = time(tag, before)?;
    let (tag, after, _) = tlv(rest)?;
    let not_after = time(tag, after)?;
    Some(Validity {
        not_before,
        not_after,
    })
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER item: its tag, its content and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

/// A UTCTime (`YYMMDDHHMMSSZ`, 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as RFC 5280
/// has certificates write them.
fn time(tag: u8, content: &[u8]) -> Option<Moment> {
    let text = std::str::from_utf8(content).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let unix = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(Moment {
        unix,
        text: format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER item with a short length.
    fn item(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }

    /// The outline of a certificate: what `validity` reads, with filler where it skips.
    fn certificate(before: Vec<u8>, after: Vec<u8>) -> Vec<u8> {
        let mut tbs = item(VERSION, &item(0x02, &[2]));
        tbs.extend(item(0x02, &[0x01, 0x23]));
        tbs.extend(item(SEQUENCE, &item(0x06, &[1, 2, 3])));
        tbs.extend(item(SEQUENCE, &[0u8; 200]));
        tbs.extend(item(SEQUENCE, &[before, after].concat()));
        tbs.extend(item(SEQUENCE, b"subject and key"));
        let mut cert = item(SEQUENCE, &tbs);
        cert.extend(item(SEQUENCE, b"algorithm"));
        item(SEQUENCE, &cert)
    }

    #[test]
    fn reads_both_time_forms() {
        let der = certificate(
            item(UTC_TIME, b"491231235959Z"),
            item(GENERALIZED_TIME, b"20500101000000Z"),
        );
        let v = validity(&der).unwrap();
        assert_eq!(v.not_before.text, "2049-12-31T23:59:59Z");
        assert_eq!(v.not_before.unix, 2_524_607_999);
        assert_eq!(v.not_after.text, "2050-01-01T00:00:00Z");
        assert_eq!(v.not_after.unix, 2_524_608_000);
        let old = certificate(
            item(UTC_TIME, b"700101000000Z"),
            item(UTC_TIME, b"500101000000Z"),
        );
        let v = validity(&old).unwrap();
        assert_eq!(v.not_before.unix, 0);
        assert_eq!(v.not_after.unix, -631_152_000);
    }

    #[test]
    fn notices_at_the_edges() {
        let der = certificate(
            item(GENERALIZED_TIME, b"20260101000000Z"),
            item(GENERALIZED_TIME, b"20270101000000Z"),
        );
        let v = validity(&der).unwrap();
        let (from, until) = (v.not_before.unix, v.not_after.unix);
        assert_eq!(v.notice(from - 1), Some(Notice::NotYetValid));
        assert_eq!(v.notice(from), None);
        assert_eq!(v.notice(until - 15 * 86_400), None);
        assert_eq!(v.notice(until - 14 * 86_400), Some(Notice::ExpiresSoon(14)));
        assert_eq!(v.notice(until - 3_600), Some(Notice::ExpiresSoon(0)));
        assert_eq!(v.notice(until), Some(Notice::ExpiresSoon(0)));
        assert_eq!(v.notice(until + 1), Some(Notice::Expired));
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&[0x30, 0x82, 0xff]), None);
        let bad_time = certificate(item(UTC_TIME, b"99123Z"), item(UTC_TIME, b"991231235959Z"));
        assert_eq!(validity(&bad_time), None);
    }
}
