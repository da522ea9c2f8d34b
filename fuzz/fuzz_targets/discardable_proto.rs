//! The discardable channel's decoders on arbitrary bytes: none may panic; a decoded frame
//! never claims more bytes than it was given, re-encodes to exactly those bytes, and a
//! stream of frames decodes one after the other the way the service reads it.
#![no_main]

use gpucache_discardable::proto::{decode_client, decode_reply, encode_client, encode_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while let Ok(Some((m, used))) = decode_client(&data[at..]) {
        assert!(used <= data.len() - at);
        let mut again = Vec::new();
        encode_client(&m, &mut again);
        assert_eq!(again, &data[at..at + used]);
        let _ = m.clone();
        if let gpucache_discardable::ClientMessage::Initialize { desc, .. } = m {
            let _ = desc.byte_size();
        }
        at += used;
    }
    if let Ok(Some((r, used))) = decode_reply(data) {
        let mut again = Vec::new();
        encode_reply(&r, &mut again);
        assert_eq!(again, &data[..used]);
    }
});
