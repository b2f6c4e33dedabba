//! A stream of beats (postcard, as lightyear hands them to a client): decoding never panics, a
//! beat that decodes re-encodes to bytes that decode to it again, the client's validity check
//! holds every figure it lets through to its range, and the sequence numbers of the beats it
//! takes unwrap to an increasing count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_core::SeqUnwrapper;
use unlag_net::{MAX_REPORTED_DELAY, NetBeat};

fuzz_target!(|data: &[u8]| {
    let mut beats = SeqUnwrapper::default();
    let mut rest = data;
    while let Ok((beat, tail)) = postcard::take_from_bytes::<NetBeat>(rest) {
        rest = tail;
        let bytes = postcard::to_allocvec(&beat).expect("encodes");
        let again: NetBeat = postcard::from_bytes(&bytes).expect("re-encoded decodes");
        assert_eq!(postcard::to_allocvec(&again).expect("encodes"), bytes);
        if !beat.is_valid() {
            continue;
        }
        assert!(beat.server_time.is_finite() && beat.server_time >= 0.0);
        assert!(beat.update_rate_hz.is_finite() && beat.update_rate_hz > 0.0);
        assert!(f64::from(beat.frame_us) / 1e6 <= 1.0 && f64::from(beat.rtt_us) / 1e6 <= 1.0);
        assert!(f64::from(beat.long_frame_us) / 1e6 <= 1.0);
        assert!(f64::from(beat.delay_cap_us) / 1e6 <= MAX_REPORTED_DELAY);
        let previous = beats.latest();
        if let Some(n) = beats.unwrap(beat.seq) {
            assert!(beats.latest() >= previous);
            assert!(beats.latest() >= Some(n));
        }
    }
});
