//! SyncGroup (with its consumer-protocol assignments) requests through the broker's request path: the input is a request frame whose api
//! key is forced to SyncGroup and whose version is folded into the served range.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::requests::{force_api, serve_frame};

fuzz_target!(|data: &[u8]| {
    if let Some(frame) = force_api(data, ApiKey::SyncGroup) {
        serve_frame(&frame);
    }
});
