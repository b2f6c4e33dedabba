//! Proxy updates as lightyear hands them to a client (postcard): decoding never panics; every
//! state is either refused by the client's buffer or sampled to a finite pose in every
//! smoothing mode, and pruning keeps a state to draw from and never reads a rate of 0 or
//! less; a state's quantised values round-trip within their step; a delta state decodes
//! against a kept state without panicking, and what it decodes to is encoded again against the
//! same baseline into a delta that decodes to it once more.
#![no_main]

use bevy::prelude::*;
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use unlag_core::{SmoothingMode, StateBuffer};
use unlag_smoothing::{DeltaProxyState, ProxyUpdates, StatesKind, WireProxyState};

const TICK: f64 = 1.0 / 60.0;

fuzz_target!(|data: &[u8]| {
    let mut buffers: HashMap<Entity, StateBuffer> = HashMap::new();
    let mut rest = data;
    let mut server_now = 0.0_f64;
    // The states of the messages so far, by entity and tick: the deltas' baselines.
    let mut kept: HashMap<(Entity, u32), WireProxyState> = HashMap::new();
    let tick_us = unlag_core::quantize::tick_micros(TICK);
    while let Ok((updates, tail)) = postcard::take_from_bytes::<ProxyUpdates>(rest) {
        rest = tail;
        let time = f64::from(updates.tick) * TICK;
        server_now = server_now.max(time);
        let mut states: Vec<WireProxyState> = updates.states.iter().take(64).cloned().collect();
        for delta in updates.deltas.iter().take(64) {
            let baseline = updates
                .tick
                .checked_sub(delta.back)
                .and_then(|at| kept.get(&(delta.entity, at)));
            let Some(baseline) = baseline else { continue };
            let Some(decoded) = delta.apply(baseline, tick_us) else {
                continue;
            };
            assert_eq!(decoded.flags & 0x80, 0, "a delta never carries a teleport");
            let again = DeltaProxyState::between(baseline, &decoded, delta.back, tick_us)
                .expect("what a delta decodes to is a delta of its baseline");
            assert_eq!(again.apply(baseline, tick_us).as_ref(), Some(&decoded));
            states.push(decoded);
        }
        if kept.len() < 256 {
            for wire in &states {
                let mut base = wire.clone();
                base.flags &= !0x80;
                kept.insert((wire.entity, updates.tick), base);
            }
        }
        for wire in states.iter() {
            let mut state = wire.to_state(updates.tick, time);
            state.off_grid = updates.kind == StatesKind::OffGrid;
            if state.is_valid() && state.position.abs().max_element() < 4096.0 {
                let again = WireProxyState::new(
                    wire.entity,
                    state.position,
                    state.rotation,
                    state.velocity,
                    state.flags,
                    state.teleport,
                );
                assert_eq!(again.position, wire.position);
                // (-32768 is on the wire's range but not the encoder's, which is symmetric.)
                assert_eq!(again.velocity, wire.velocity.map(|v| v.max(-32_767)));
                assert_eq!(again.flags, wire.flags);
                let back = again.to_state(updates.tick, time);
                assert!(back.rotation.dot(state.rotation).abs() > 1.0 - 1e-3);
            }
            if buffers.len() >= 8 && !buffers.contains_key(&wire.entity) {
                continue;
            }
            let buffer = buffers.entry(wire.entity).or_insert_with(|| StateBuffer::new(8));
            let _ = buffer.push(state, server_now);
        }
        for buffer in buffers.values() {
            for view in [time - 0.2, time - 0.05, time, time + 0.1, time + 5.0] {
                for mode in [
                    SmoothingMode::Snap,
                    SmoothingMode::Linear,
                    SmoothingMode::Hermite,
                    SmoothingMode::Extrapolate,
                ] {
                    if let Some(sample) = buffer.sample(view, mode, 0.25) {
                        assert!(sample.position.is_finite(), "{mode:?} at {view}: {sample:?}");
                        assert!(sample.rotation.is_finite());
                    }
                }
            }
        }
        for buffer in buffers.values_mut() {
            let before = buffer.states().len();
            buffer.prune(time - 0.1);
            assert!(buffer.states().len() >= before.min(2));
            assert!(buffer.recent_interval().is_none_or(|i| i > 0.0));
        }
    }
});
