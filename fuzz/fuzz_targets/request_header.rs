//! Frame length prefix and request header (v0/v1/v2) parsing: never panics, and a re-encoded
//! header parses back to the same fields with the same body.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::requests::encode_frame;
use streamforge_protocol::RequestFrame;
use streamforge_protocol::frame::{HeaderPrefix, frame_len};

fuzz_target!(|data: &[u8]| {
    if data.len() >= 4 {
        let prefix = [data[0], data[1], data[2], data[3]];
        if let Ok(n) = frame_len(prefix, 100 << 20) {
            assert!(n > 0 && n <= 100 << 20);
        }
    }
    let Ok(prefix) = HeaderPrefix::parse(data) else {
        return;
    };
    let Ok(req) = RequestFrame::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    assert_eq!(req.api_key as i16, prefix.api_key);
    assert_eq!(req.api_version, prefix.api_version);
    assert_eq!(req.correlation_id, prefix.correlation_id);
    let header_version = req.api_key.request_header_version(req.api_version);
    if header_version < 1 {
        assert!(req.client_id.is_none());
        return;
    }
    // Re-encode (client ids are read lossily as UTF-8, so only valid ones compare exactly).
    let client_id = req.client_id.as_deref();
    if client_id.is_some_and(|c| c.len() > i16::MAX as usize) {
        return;
    }
    let frame = encode_frame(req.api_key, req.api_version, client_id, &req.body);
    let mut frame = frame;
    frame[4..8].copy_from_slice(&req.correlation_id.to_be_bytes());
    let back = RequestFrame::parse(Bytes::from(frame)).expect("our own header parses");
    assert_eq!(back.api_key, req.api_key);
    assert_eq!(back.correlation_id, req.correlation_id);
    assert_eq!(back.client_id, req.client_id);
    assert_eq!(back.body, req.body);
});
