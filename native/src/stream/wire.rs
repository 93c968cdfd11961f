//! The exchange stream's wire, framed by hand (the ABI has no gRPC client): opening the stream
//! ([`Opener`]), the frames workers append to the outbox ([`Queue`]), and the reply frames read
//! back ([`split_frames`]).

#![forbid(unsafe_code)]

use sluice_core::exchange::STREAM_PATH;
use sluice_filter::exchange::StreamHost;

use crate::abi::ConfigHandle;

/// The longest reply frame read (a longer one is a protocol error: the stream is reset).
pub(super) const MAX_FRAME: usize = sluice_filter::flow::MAX_RESPONSE_BODY + 1024;

/// Frames appended by a worker (`Exchanger::send` writes through this).
pub(super) struct Queue<'a> {
    pub(super) outbox: &'a mut Vec<u8>,
    pub(super) token: &'a mut Option<u32>,
}

impl StreamHost for Queue<'_> {
    fn open_stream(&mut self) -> Result<u32, String> {
        Err("streams open on the main thread".to_owned())
    }

    fn send_message(&mut self, token: u32, message: &[u8]) -> Result<(), String> {
        if *self.token != Some(token) {
            self.outbox.clear();
            *self.token = Some(token);
        }
        let len = u32::try_from(message.len()).map_err(|_| "message too long".to_owned())?;
        self.outbox.push(0);
        self.outbox.extend_from_slice(&len.to_be_bytes());
        self.outbox.extend_from_slice(message);
        Ok(())
    }
}

/// Opens the stream (main thread, from `Exchanger::ensure_open`).
pub(super) struct Opener<'a> {
    pub(super) handle: ConfigHandle,
    pub(super) cluster: &'a str,
    pub(super) authority: &'a str,
}

impl StreamHost for Opener<'_> {
    fn open_stream(&mut self) -> Result<u32, String> {
        let headers = [
            (":method", "POST"),
            (":path", STREAM_PATH),
            (":authority", self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        let id = self
            .handle
            .start_http_stream(self.cluster, &headers, 0)
            .map_err(|code| match code {
                1 => "MissingRequiredHeaders".to_owned(),
                2 => "ClusterNotFound".to_owned(),
                4 => "CannotCreateRequest".to_owned(),
                n => format!("init result {n}"),
            })?;
        u32::try_from(id).map_err(|_| "stream id out of range".to_owned())
    }

    fn send_message(&mut self, _token: u32, _message: &[u8]) -> Result<(), String> {
        Err("frames go through the outbox".to_owned())
    }
}

/// The whole gRPC messages at the start of `bytes`, and the bytes after them (a frame not yet
/// whole); `None` for the rest when a frame is compressed or longer than [`MAX_FRAME`] (the
/// stream cannot be read past it).
pub(super) fn split_frames(bytes: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
    let mut messages = Vec::new();
    let mut at: usize = 0;
    while let Some(&[flag, a, b, c, d]) = bytes.get(at..at.saturating_add(5)) {
        let len = usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
        if flag != 0 || len > MAX_FRAME {
            return (messages, None);
        }
        let Some(message) = bytes.get(at + 5..at + 5 + len) else {
            break;
        };
        messages.push(message);
        at += 5 + len;
    }
    (messages, bytes.get(at..))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    #[test]
    fn frames_split_whole_messages_and_keep_a_partial_one() {
        let mut bytes = frame(b"one");
        bytes.extend(frame(b""));
        bytes.extend(frame(b"three"));
        let partial = frame(b"four");
        bytes.extend_from_slice(&partial[..6]);
        let (messages, rest) = split_frames(&bytes);
        assert_eq!(messages, vec![&b"one"[..], b"", b"three"]);
        assert_eq!(rest, Some(&partial[..6]));
        // The rest, completed, is the next message.
        let mut next = rest.unwrap().to_vec();
        next.extend_from_slice(&partial[6..]);
        assert_eq!(split_frames(&next), (vec![&b"four"[..]], Some(&b""[..])));
        // A header cut short is kept too.
        assert_eq!(split_frames(&[0, 0]), (vec![], Some(&[0u8, 0][..])));
    }

    #[test]
    fn a_compressed_or_oversized_frame_cannot_be_read_past() {
        let mut compressed = frame(b"x");
        compressed[0] = 1;
        assert_eq!(split_frames(&compressed).1, None);
        let mut bytes = frame(b"ok");
        bytes.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff]);
        let (messages, rest) = split_frames(&bytes);
        assert_eq!((messages, rest), (vec![&b"ok"[..]], None));
    }
}
