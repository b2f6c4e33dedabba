//! A `ServerMove` payload from a client, for both shipped movement models: decoding never
//! panics, with no move held and with every move held (a base the server holds: here the
//! default input, the duration from the sequence number); a payload that decodes re-encodes to
//! a payload that decodes to the same moves (the field deltas included), no longer; the end
//! position round-trips within its centimetre.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_core::Seq16;
use unlag_net::WholeBody;
use unlag_movement::{
    CharacterMovement, KartMovement, MAX_MOVES_PER_MESSAGE, MovementModel, ServerMove,
    decode_end, encode_end,
};

/// What the server "holds" of move `seq`: a made-up move, the same for a sequence number.
fn held<M: MovementModel>(seq: Seq16) -> Option<(M::Input, u16)> {
    Some((M::Input::default(), seq.0 | 1))
}

fn round_trip<M: MovementModel>(data: &[u8]) {
    let message = ServerMove::<M>::from_raw(data.to_vec());
    // Without any move held, a payload written against a base is refused.
    if let Ok(decoded) = message.decode() {
        assert!(decoded.base.is_none());
    }
    let Ok(decoded) = message.decode_with(held::<M>) else {
        return;
    };
    assert_eq!(decoded.base.is_some(), message.base_seq().is_some());
    assert!(!decoded.moves.is_empty() && decoded.moves.len() <= MAX_MOVES_PER_MESSAGE);
    assert!(decoded.moves.windows(2).all(|w| w[1].seq == w[0].seq.next()));
    let again = ServerMove::<M>::encode(&decoded);
    assert!(again.len() <= data.len(), "the canonical encoding is never longer");
    assert_eq!(
        again
            .decode_with(held::<M>)
            .expect("a re-encoded message decodes"),
        decoded
    );
    // On lightyear's wire the payload goes alone (`WholeBody`).
    let back = ServerMove::<M>::from_body(&again.body()).expect("any bytes are a body");
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
