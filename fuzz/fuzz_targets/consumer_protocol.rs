//! The consumer protocol carried inside JoinGroup (subscription) and SyncGroup (assignment):
//! the coordinator's subscription reader against kafka-protocol's decoder, and the round trip.
//! First byte: 0 = subscription, 1 = assignment; the rest is the metadata bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::requests::{check_assignment, check_subscription};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let bytes = Bytes::copy_from_slice(rest);
    if which & 1 == 0 {
        check_subscription(&bytes);
    } else {
        check_assignment(&bytes);
    }
});
