//! NRI's socket multiplexer (`pkg/net/multiplex`): one unix socket carries several logical
//! connections. Every frame is an 8-byte header (connection ID, payload length; both u32
//! big-endian) followed by the payload. Connection 0 is reserved; the plugin serves its ttrpc
//! service on [`PLUGIN_SERVICE_CONN`] and calls the runtime on [`RUNTIME_SERVICE_CONN`].
//!
//! A frame carries bytes of one connection's stream, not whole messages: a peer may split a
//! ttrpc message over several frames, so the reader reassembles per connection (see
//! [`super::ttrpc::MessageBuffer`]). When writing, [`ttrpc_frames`] splits a message the way
//! Go's ttrpc (through a 4 KiB `bufio.Writer`) does, because the Go reader hands each frame to
//! a 4 KiB `bufio.Reader` and fails a frame that neither fits that buffer nor is read directly
//! into the message body.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::NriError;
use super::ttrpc;

/// Frame header length: connection ID and payload length.
pub const FRAME_HEADER_LEN: usize = 8;
/// The logical connection of the plugin's ttrpc service (the runtime calls us here).
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The logical connection of the runtime's ttrpc service (we call it here).
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// The largest payload a frame may carry: one whole ttrpc message (NRI's `maxPayloadSize`).
pub const MAX_FRAME_PAYLOAD: usize = ttrpc::HEADER_LEN + ttrpc::MAX_MESSAGE_LEN;
/// The Go side's read and write buffer size (`bufio` default).
const GO_BUFIO_SIZE: usize = 4096;

/// Encodes one frame.
pub fn encode_frame(conn: u32, payload: &[u8]) -> Result<Vec<u8>, NriError> {
    if conn == 0 {
        return Err(NriError::ReservedConnection);
    }
    if payload.len() > MAX_FRAME_PAYLOAD {
        return Err(NriError::Oversized {
            what: "mux frame",
            len: payload.len(),
            max: MAX_FRAME_PAYLOAD,
        });
    }
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    frame.extend_from_slice(&conn.to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// The frames of one encoded ttrpc message (header and body) on `conn`: the first 4 KiB, then
/// the rest in one frame, exactly as Go's ttrpc writes it through its 4 KiB `bufio.Writer`.
pub fn ttrpc_frames(conn: u32, message: &[u8]) -> Result<Vec<Vec<u8>>, NriError> {
    let split = message.len().min(GO_BUFIO_SIZE);
    let (first, rest) = message.split_at(split);
    let mut frames = vec![encode_frame(conn, first)?];
    if !rest.is_empty() {
        frames.push(encode_frame(conn, rest)?);
    }
    Ok(frames)
}

/// Reads one frame: `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<(u32, Vec<u8>)>, NriError> {
    let mut header = [0u8; FRAME_HEADER_LEN];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(NriError::Io(e)),
    }
    let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_FRAME_PAYLOAD {
        return Err(NriError::Oversized {
            what: "mux frame",
            len,
            max: MAX_FRAME_PAYLOAD,
        });
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            NriError::Truncated("mux frame payload")
        } else {
            NriError::Io(e)
        }
    })?;
    Ok(Some((conn, payload)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frame_header_is_conn_then_length_big_endian() {
        let frame = encode_frame(2, b"abc").unwrap();
        assert_eq!(frame, [0, 0, 0, 2, 0, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn connection_zero_is_reserved() {
        assert!(matches!(encode_frame(0, b"x"), Err(NriError::ReservedConnection)));
    }

    #[test]
    fn oversized_payload_is_refused_on_write() {
        let big = vec![0u8; MAX_FRAME_PAYLOAD + 1];
        assert!(matches!(encode_frame(1, &big), Err(NriError::Oversized { .. })));
    }

    #[test]
    fn long_messages_split_like_go_bufio() {
        let small = ttrpc_frames(1, &[7u8; 100]).unwrap();
        assert_eq!(small.len(), 1);
        let exact = ttrpc_frames(1, &[7u8; 4096]).unwrap();
        assert_eq!(exact.len(), 1);
        let big = ttrpc_frames(1, &[7u8; 10_000]).unwrap();
        assert_eq!(big.len(), 2);
        assert_eq!(big[0].len(), FRAME_HEADER_LEN + 4096);
        assert_eq!(big[1].len(), FRAME_HEADER_LEN + 10_000 - 4096);
    }

    #[tokio::test]
    async fn reads_back_frames_and_detects_truncation() {
        let mut bytes = encode_frame(1, b"hello").unwrap();
        bytes.extend(encode_frame(2, b"").unwrap());
        let mut reader = &bytes[..];
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Some((1, b"hello".to_vec()))
        );
        assert_eq!(read_frame(&mut reader).await.unwrap(), Some((2, vec![])));
        assert_eq!(read_frame(&mut reader).await.unwrap(), None);

        let cut = &encode_frame(1, b"hello").unwrap()[..10];
        let mut reader = cut;
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(NriError::Truncated(_))
        ));
    }

    #[tokio::test]
    async fn oversized_length_header_is_an_error_not_an_allocation() {
        let mut bytes = 1u32.to_be_bytes().to_vec();
        bytes.extend(u32::MAX.to_be_bytes());
        let mut reader = &bytes[..];
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(NriError::Oversized { .. })
        ));
    }
}
