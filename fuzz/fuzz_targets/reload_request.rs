//! A stream of reload requests (postcard, as lightyear hands them to the server) against one
//! armory with the shipped weapon table: decoding never panics, a request that decodes
//! re-encodes to bytes that decode to it again, a request the server does not take leaves the armory exactly
//! as it was, and no weapon ever holds more than its magazine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_combat::{ReloadRequest, ServerArmory, WeaponTable};

fn table() -> WeaponTable {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/weapons.ron");
    let text = std::fs::read_to_string(path).expect("the shipped weapon table");
    WeaponTable::from_ron(&text, path).expect("the shipped table parses")
}

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static TABLE: WeaponTable = table();
    }
    TABLE.with(|table| {
        let mut armory = ServerArmory::new(&table.weapons, 0.01);
        // The first 32 bytes: the server's estimate of the view time, its tolerance, the view
        // time of the last packet heard before and how much newer than the estimate the view
        // may be; then one request after another, as they come off the wire.
        let Some((head, mut rest)) = data.split_at_checked(32) else {
            return;
        };
        let expected = f64::from_le_bytes(head[..8].try_into().unwrap());
        let tolerance = f64::from_le_bytes(head[8..16].try_into().unwrap());
        let heard = f64::from_le_bytes(head[16..24].try_into().unwrap());
        let newer = f64::from_le_bytes(head[24..].try_into().unwrap());
        while let Ok((request, tail)) = postcard::take_from_bytes::<ReloadRequest>(rest) {
            let bytes = postcard::to_allocvec(&request).expect("encodes");
            let again: ReloadRequest = postcard::from_bytes(&bytes).expect("re-encoded decodes");
            assert_eq!(postcard::to_allocvec(&again).expect("encodes"), bytes);
            assert!(bytes.len() <= rest.len() - tail.len());
            rest = tail;
            let before = format!("{armory:?}");
            if !armory.take_reload_request(&request, table, (expected, newer, tolerance), heard) {
                assert_eq!(format!("{armory:?}"), before, "an ignored request changed state");
            }
            for (id, spec) in table.weapons.iter().enumerate() {
                assert!(armory.ammo(id as u8).is_some_and(|a| a <= spec.magazine));
            }
        }
    });
});
