//! The subset of ttrpc (containerd's gRPC-like RPC over a byte stream) NRI needs: unary
//! requests and responses. A message is a 10-byte header (payload length u32, stream ID u32,
//! both big-endian; message type u8; flags u8) then a protobuf payload of at most 4 MiB.
//! Clients number their streams with odd IDs; a response carries its request's stream ID.
//!
//! Written here rather than taken from the `ttrpc` crate: the crate brings rust-protobuf and
//! its own codegen next to the prost messages we need anyway, and wants to own the socket,
//! while NRI's multiplexer needs the transport in our hands; the unary subset is this file.

use bytes::{Buf, BytesMut};

use super::NriError;

/// Message header length.
pub const HEADER_LEN: usize = 10;
/// ttrpc's largest message payload (`messageLengthMax`, 4 MiB).
pub const MAX_MESSAGE_LEN: usize = 4 << 20;
/// Message type of a request.
pub const TYPE_REQUEST: u8 = 1;
/// Message type of a response.
pub const TYPE_RESPONSE: u8 = 2;

/// gRPC status code "unimplemented" (a method this plugin does not serve).
pub const CODE_UNIMPLEMENTED: i32 = 12;
/// gRPC status code "invalid argument" (a payload that does not decode).
pub const CODE_INVALID_ARGUMENT: i32 = 3;

/// ttrpc's `Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// Fully qualified service name.
    #[prost(string, tag = "1")]
    pub service: String,
    /// Method name.
    #[prost(string, tag = "2")]
    pub method: String,
    /// The encoded request message.
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// The caller's deadline in nanoseconds (0: none).
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's `Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    /// Error status; absent or code 0 on success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The encoded response message.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// gRPC code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Human-readable message.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream ID.
    pub stream_id: u32,
    /// [`TYPE_REQUEST`] or [`TYPE_RESPONSE`] (others are passed up and ignored).
    pub kind: u8,
    /// Flags (unused by unary calls).
    pub flags: u8,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Encodes a message (header and payload).
pub fn encode_message(stream_id: u32, kind: u8, payload: &[u8]) -> Result<Vec<u8>, NriError> {
    if payload.len() > MAX_MESSAGE_LEN {
        return Err(NriError::Oversized {
            what: "ttrpc message",
            len: payload.len(),
            max: MAX_MESSAGE_LEN,
        });
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Reassembles the ttrpc messages of one logical connection from its frames.
#[derive(Debug, Default)]
pub struct MessageBuffer {
    pending: BytesMut,
}

impl MessageBuffer {
    /// Appends a frame's payload.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next complete message, if one is buffered; an oversized length is an error (the
    /// connection is then unusable: the stream cannot be resynchronised).
    pub fn next_message(&mut self) -> Result<Option<Message>, NriError> {
        if self.pending.len() < HEADER_LEN {
            return Ok(None);
        }
        let h = &self.pending[..HEADER_LEN];
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len > MAX_MESSAGE_LEN {
            return Err(NriError::Oversized {
                what: "ttrpc message",
                len,
                max: MAX_MESSAGE_LEN,
            });
        }
        if self.pending.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let stream_id = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let (kind, flags) = (h[8], h[9]);
        self.pending.advance(HEADER_LEN);
        let payload = self.pending.split_to(len).to_vec();
        Ok(Some(Message {
            stream_id,
            kind,
            flags,
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prost::Message as _;

    #[test]
    fn header_layout() {
        let m = encode_message(3, TYPE_RESPONSE, b"xy").unwrap();
        assert_eq!(m, [0, 0, 0, 2, 0, 0, 0, 3, 2, 0, b'x', b'y']);
    }

    #[test]
    fn reassembles_messages_split_across_frames_and_packed_in_one() {
        let a = encode_message(1, TYPE_REQUEST, &[1u8; 5000]).unwrap();
        let b = encode_message(3, TYPE_REQUEST, b"b").unwrap();
        let mut all = a.clone();
        all.extend(&b);
        let mut buffer = MessageBuffer::default();
        buffer.push(&all[..7]);
        assert_eq!(buffer.next_message().unwrap(), None);
        buffer.push(&all[7..4096]);
        assert_eq!(buffer.next_message().unwrap(), None);
        buffer.push(&all[4096..]);
        let first = buffer.next_message().unwrap().unwrap();
        assert_eq!((first.stream_id, first.payload.len()), (1, 5000));
        let second = buffer.next_message().unwrap().unwrap();
        assert_eq!((second.stream_id, second.payload), (3, b"b".to_vec()));
        assert_eq!(buffer.next_message().unwrap(), None);
    }

    #[test]
    fn oversized_message_is_refused_both_ways() {
        assert!(encode_message(1, TYPE_REQUEST, &vec![0; MAX_MESSAGE_LEN + 1]).is_err());
        let mut header = ((MAX_MESSAGE_LEN + 1) as u32).to_be_bytes().to_vec();
        header.extend([0, 0, 0, 1, 1, 0]);
        let mut buffer = MessageBuffer::default();
        buffer.push(&header);
        assert!(matches!(buffer.next_message(), Err(NriError::Oversized { .. })));
    }

    #[test]
    fn request_round_trips_through_prost() {
        let r = Request {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: "Configure".into(),
            payload: vec![1, 2, 3],
            timeout_nano: 2_000_000_000,
        };
        assert_eq!(Request::decode(&r.encode_to_vec()[..]).unwrap(), r);
    }
}
