//! Any request frame through the broker's request path: route by api key and version as the
//! routing table does, parse the header, decode the body with the count-guarded decoder, check
//! the round trip and the API-specific payloads (Produce record batches, consumer-protocol
//! subscriptions and assignments).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    streamforge_fuzz::requests::serve_frame(data);
});
