//! A fire request as lightyear hands it to the server (its bytes alone, `WholeBody`), judged
//! by the server's own [`ShotJudge`] in a real match: decoding never panics; a request that
//! decodes re-encodes to the same bytes; judging never panics; a refusal keeps the contract
//! [`ShotJudge::judge`] documents (garbage, copies and replays change nothing; a refused shot
//! never spends a round or starts a reload); an accepted one deals finite, non-negative
//! damage, from at most as many pellets as the weapon fires, to characters that exist.
#![no_main]

use bevy::ecs::system::SystemState;
use bevy::prelude::*;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use unlag_combat::{CombatStats, FireRequest, ServerArmory, ShotJudge, ShotVerdict, Weapons};
use unlag_fuzz::Match;
use unlag_net::{RemoteClientClock, WholeBody};

struct Harness {
    game: Match,
    judge: SystemState<ShotJudge<'static, 'static>>,
}

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

fn harness() -> Harness {
    let mut game = Match::start();
    let judge = SystemState::new(game.tb.server_world_mut());
    Harness { game, judge }
}

fuzz_target!(|data: &[u8]| {
    // Capturing (`fuzz/run.sh --capture`): the match is played whatever the input.
    if std::env::var_os("UNLAG_FUZZ_CAPTURE").is_some() {
        HARNESS.with_borrow_mut(|h| {
            h.get_or_insert_with(harness);
        });
    }
    let Ok(request) = FireRequest::from_body(data) else {
        return;
    };
    let bytes = request.body().into_owned();
    let again = FireRequest::from_body(&bytes).expect("re-encoded bytes decode");
    assert_eq!(again.body(), bytes);
    // serde's form (postcard: the same bytes after their length) reads back the same.
    let serde_form = postcard::to_allocvec(&request).expect("a decoded request encodes");
    let read: FireRequest = postcard::from_bytes(&serde_form).expect("serde's form decodes");
    assert_eq!(read.body(), bytes);
    HARNESS.with_borrow_mut(|harness| {
        let Harness { game, judge } = harness.get_or_insert_with(self::harness);
        let (link, shooter) = (game.link, game.shooter);
        let world = game.tb.server_world_mut();
        let remote = world
            .get::<RemoteClientClock>(link)
            .cloned()
            .expect("the link has its clock");
        let mut armory = world
            .get::<ServerArmory>(shooter)
            .cloned()
            .expect("the shooter is armed");
        let position = world.get::<Transform>(shooter).expect("placed").translation;
        let table = world.resource::<Weapons>().table.clone();
        let pellets_most = table
            .as_ref()
            .and_then(|t| t.get(request.weapon))
            .map_or(0, |w| w.pellets());
        let magazines: Vec<u32> = table
            .as_ref()
            .map(|t| t.weapons.iter().map(|w| w.magazine).collect())
            .unwrap_or_default();
        let (before, previous) = (format!("{armory:?}"), armory.clone());
        let mut stats = CombatStats::default();
        let verdict = judge
            .get(world)
            .expect("the judge's resources are there")
            .judge(
                &request,
                shooter,
                link,
                &remote,
                &mut armory,
                position,
                &mut stats,
            );
        let garbage = !(request.origin.is_finite()
            && request.aim.is_finite()
            && request.view_time.is_finite()
            && request.judged_time.is_finite());
        if garbage {
            assert!(verdict.is_err(), "a non-finite shot was judged");
            assert_eq!(armory.last_fire_index(), previous.last_fire_index());
        }
        match verdict {
            Err(_) if armory.last_fire_index() == previous.last_fire_index() => {
                // Refused before its fire index was taken: garbage, a copy or a replay.
                assert_eq!(
                    format!("{armory:?}"),
                    before,
                    "a dropped shot changed state"
                );
            }
            Err(rejection) => {
                assert!(
                    request.fire_index > previous.last_fire_index(),
                    "{rejection:?}: a copy or replay took an index"
                );
                assert_eq!(armory.last_fire_index(), request.fire_index);
                for (w, &magazine) in magazines.iter().enumerate() {
                    let w = w as u8;
                    let (now, was) = (armory.ammo(w), previous.ammo(w));
                    assert!(now >= was, "{rejection:?}: a refused shot spent a round");
                    if now > was {
                        // Only a reload the shot's view time is past refills a magazine.
                        assert_eq!(previous.is_reloading(w), Some(true));
                        assert_eq!(armory.is_reloading(w), Some(false));
                        assert_eq!(now, Some(magazine));
                    }
                    assert!(
                        armory.is_reloading(w) != Some(true)
                            || previous.is_reloading(w) == Some(true),
                        "{rejection:?}: a refused shot started a reload"
                    );
                }
            }
            Ok(ShotVerdict::Hits { hits, ends }) => {
                assert!(ends.len() <= pellets_most);
                assert!(ends.iter().all(|e| e.is_finite()));
                let pellets: usize = hits.iter().map(|h| usize::from(h.pellets)).sum();
                assert!(pellets <= pellets_most);
                for hit in &hits {
                    assert!(hit.damage.is_finite() && hit.damage >= 0.0);
                    assert!(world.get_entity(hit.target).is_ok());
                }
            }
            Ok(ShotVerdict::Launch(projectile)) => {
                let launch = projectile.launch;
                assert!(launch.position.is_finite() && launch.velocity.is_finite());
                assert!(projectile.launch_time.is_finite());
            }
        }
    });
});
