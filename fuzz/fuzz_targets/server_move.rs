//! A `ServerMove` payload from a client, for both shipped movement models: decoding never
//! panics; a payload that decodes re-encodes to a payload that decodes to the same moves (the
//! field deltas included); the end position round-trips within its centimetre.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_movement::{
    CharacterMovement, KartMovement, MAX_MOVES_PER_MESSAGE, MovementModel, ServerMove,
    decode_end, encode_end,
};

fn round_trip<M: MovementModel>(data: &[u8]) {
    let message = ServerMove::<M>::from_raw(data.to_vec());
    let Ok(decoded) = message.decode() else {
        return;
    };
    assert!(!decoded.moves.is_empty() && decoded.moves.len() <= MAX_MOVES_PER_MESSAGE);
    assert!(decoded.moves.windows(2).all(|w| w[1].seq == w[0].seq.next()));
    let again = ServerMove::<M>::encode(&decoded);
    assert!(again.len() <= data.len(), "the canonical encoding is never longer");
    assert_eq!(again.decode().expect("a re-encoded message decodes"), decoded);
    // Through lightyear's serializer too (the payload is a byte vector in postcard).
    let wire = postcard::to_allocvec(&again).expect("serializes");
    let back: ServerMove<M> = postcard::from_bytes(&wire).expect("deserializes");
    assert_eq!(back.payload(), again.payload());
    // The end position, quantised to the centimetre, is where it decodes to.
    let end = decode_end(decoded.end);
    if end.is_finite() && end.abs().max_element() < 1.0e4 {
        assert_eq!(encode_end(end), decoded.end);
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<CharacterMovement>(data);
    round_trip::<KartMovement>(data);
});
