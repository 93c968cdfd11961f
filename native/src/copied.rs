//! What Envoy handed over, copied out of its buffers: a request's headers ([`HeaderSnapshot`])
//! and a callout's answer ([`CalloutAnswer`]). Plain data at the crate's ground: the bindings
//! (`abi/`) fill them, the glue, the reports and the gRPC reader read them, and none of those
//! is imported here.

#![forbid(unsafe_code)]

use std::cell::RefCell;

/// Which request headers a snapshot copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pseudo {
    /// Regular headers only (the host reads `:path` and `:method` as attributes).
    Skipped,
    /// Pseudo-headers (`:authority`, ...) too.
    Included,
}

/// A copy of a header map: every name and value in one buffer.
#[derive(Debug, Clone)]
pub struct HeaderSnapshot {
    /// Whether pseudo-headers were copied too.
    pseudo: Pseudo,
    bytes: Vec<u8>,
    /// (name start, name end, value end) in `bytes`; the value starts at the name's end.
    spans: Vec<(usize, usize, usize)>,
}

impl Default for HeaderSnapshot {
    fn default() -> HeaderSnapshot {
        HeaderSnapshot {
            pseudo: Pseudo::Skipped,
            bytes: Vec::new(),
            spans: Vec::new(),
        }
    }
}

/// Bytes a snapshot may keep for reuse (a larger one is freed).
const REUSED_SNAPSHOT_BYTES: usize = 16 * 1024;

thread_local! {
    /// One finished request's snapshot buffers, reused by the worker's next request (a snapshot
    /// per request, without two allocations and frees each time).
    static SPARE_SNAPSHOT: RefCell<Option<HeaderSnapshot>> = const { RefCell::new(None) };
}

impl HeaderSnapshot {
    /// An empty snapshot of the headers `pseudo` says, on the worker's spare buffers when it has
    /// them.
    pub fn reused(pseudo: Pseudo) -> HeaderSnapshot {
        let mut snapshot = SPARE_SNAPSHOT
            .with(|spare| spare.try_borrow_mut().ok().and_then(|mut s| s.take()))
            .unwrap_or_default();
        snapshot.pseudo = pseudo;
        snapshot
    }

    /// Gives the buffers back for the worker's next request (emptied; dropped if large).
    pub fn recycle(mut self) {
        if self.bytes.capacity() > REUSED_SNAPSHOT_BYTES {
            return;
        }
        self.bytes.clear();
        self.spans.clear();
        SPARE_SNAPSHOT.with(|spare| {
            if let Ok(mut spare) = spare.try_borrow_mut() {
                *spare = Some(self);
            }
        });
    }

    /// Room for `headers` headers of `bytes` bytes in all.
    pub fn reserve(&mut self, headers: usize, bytes: usize) {
        self.bytes.reserve(bytes);
        self.spans.reserve(headers);
    }

    /// Appends one header, copied.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans.push((start, name_end, self.bytes.len()));
    }

    /// Whether the snapshot has the pseudo-headers (else only regular headers were copied).
    pub fn has_pseudo(&self) -> bool {
        self.pseudo == Pseudo::Included
    }

    /// Calls `each` with every value of `name` (ASCII case-insensitive), in order, borrowed.
    pub fn each(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for &(start, name_end, end) in &self.spans {
            let Some(n) = self.bytes.get(start..name_end) else {
                continue;
            };
            if n.len() == name.len() && n.eq_ignore_ascii_case(name.as_bytes()) {
                if let Some(v) = self.bytes.get(name_end..end) {
                    each(v);
                }
            }
        }
    }

    /// Every value of `name`, copied (tests).
    #[cfg(test)]
    pub fn values(&self, name: &str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.each(name, &mut |v| out.push(v.to_vec()));
        out
    }

    /// Whether `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.spans.iter().any(|&(start, name_end, _)| {
            self.bytes
                .get(start..name_end)
                .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
        })
    }
}

/// A callout's answer, copied out of Envoy's buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalloutAnswer {
    /// Whether the callout completed (false: reset, or over the buffer limit).
    pub completed: bool,
    /// Response headers, `:status` included.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body (bounded by the reader's limit, `glue::MAX_ANSWER`).
    pub body: Vec<u8>,
}

impl CalloutAnswer {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_snapshot_finds_values_by_name() {
        let mut s = HeaderSnapshot::default();
        assert!(!s.has_pseudo());
        s.push(b"x-user", b"alice");
        s.push(b"X-Multi", b"1");
        s.push(b"x-multi", b"2");
        s.push(b"x-empty", b"");
        assert_eq!(s.values("x-user"), vec![b"alice".to_vec()]);
        assert_eq!(s.values("x-multi"), vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(s.values("x-empty"), vec![Vec::<u8>::new()]);
        assert!(s.values("x-use").is_empty());
        assert!(s.has("X-USER") && !s.has("x-sluice-shadow"));
        assert!(HeaderSnapshot::reused(Pseudo::Included).has_pseudo());
    }

    #[test]
    fn a_recycled_snapshot_comes_back_empty_and_a_large_one_is_dropped() {
        let mut s = HeaderSnapshot::default();
        s.push(b"x-user", b"alice");
        let room = s.bytes.capacity();
        s.recycle();
        let again = HeaderSnapshot::reused(Pseudo::Skipped);
        assert!(again.values("x-user").is_empty() && !again.has("x-user"));
        assert_eq!(again.bytes.capacity(), room);
        let mut big = HeaderSnapshot::default();
        big.push(b"x-big", &vec![b'a'; REUSED_SNAPSHOT_BYTES + 1]);
        big.recycle();
        assert_eq!(HeaderSnapshot::reused(Pseudo::Skipped).bytes.capacity(), 0);
    }

    #[test]
    fn an_answer_header_is_found_by_name() {
        let answer = CalloutAnswer {
            completed: true,
            headers: vec![(b":status".to_vec(), b"200".to_vec())],
            body: Vec::new(),
        };
        assert_eq!(answer.header(":STATUS"), Some(&b"200"[..]));
        assert_eq!(answer.header("grpc-status"), None);
    }
}
