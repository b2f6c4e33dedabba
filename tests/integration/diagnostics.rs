//! The net graph on a live match: it keeps the last 10 s of every figure, and each figure
//! follows what happens on the link.

use crate::movement::{MovementTestPlugin, character_of, movement_testbed};
use core::time::Duration;
use unlag::CharacterProxyPlugin;
use unlag::diagnostics::{NetGraph, NetGraphPlugin, NetSeries};
use unlag::movement::{CharacterMovement, MovementState};
use unlag::net::LinkConditions;
use unlag::smoothing::ProxySmoothingPlugin;

#[test]
fn the_net_graph_keeps_ten_seconds_of_every_figure() {
    // 100 ms RTT, 10 ms jitter, 5 % loss each way; two players who see each other as proxies.
    let conditions =
        LinkConditions::new(Duration::from_millis(100), Duration::from_millis(10), 0.05);
    let mut tb = movement_testbed(
        2,
        conditions,
        (
            MovementTestPlugin::default(),
            ProxySmoothingPlugin::default(),
            CharacterProxyPlugin,
            NetGraphPlugin::default(),
        ),
    );
    tb.run_for(Duration::from_secs(12));
    let graph = tb.client_world(0).resource::<NetGraph>();
    // Ten seconds kept, sampled every 0.1 s.
    let span = graph.span();
    assert!((9.8..=10.0).contains(&span), "{span}");
    for s in NetSeries::ALL {
        let n = graph.series(s).count();
        assert!((98..=101).contains(&n), "{s:?}: {n} samples");
    }
    let mean = |s| graph.mean(s).unwrap();
    let rtt = mean(NetSeries::Rtt);
    assert!((90.0..=125.0).contains(&rtt), "RTT {rtt} ms");
    assert!(mean(NetSeries::Jitter) > 0.5, "{}", mean(NetSeries::Jitter));
    let loss = mean(NetSeries::Loss);
    assert!((1.0..=12.0).contains(&loss), "loss {loss} %");
    // An honest player is never corrected.
    assert_eq!(graph.range(NetSeries::Corrections), Some((0.0, 0.0)));
    // Moves go up at 30 Hz, states and beats come down.
    assert!(
        mean(NetSeries::BytesUp) > 1000.0,
        "{}",
        mean(NetSeries::BytesUp)
    );
    assert!(
        mean(NetSeries::BytesDown) > 1000.0,
        "{}",
        mean(NetSeries::BytesDown)
    );
    let starved = graph.range(NetSeries::Starved).unwrap();
    assert!(starved.0 >= 0.0 && starved.1 <= 100.0, "{starved:?}");
    // The server drags client 0's character 1 m: a correction, shown on the graph.
    let character = character_of(&mut tb, 0);
    tb.server_world_mut()
        .get_mut::<MovementState<CharacterMovement>>(character)
        .unwrap()
        .0
        .feet
        .x += 1.0;
    tb.run_for(Duration::from_secs(1));
    let graph = tb.client_world(0).resource::<NetGraph>();
    let (_, most) = graph.range(NetSeries::Corrections).unwrap();
    assert!(
        most >= 5.0,
        "a correction in 0.1 s is 10 per second: {most}"
    );
    // Loss stops: the curve falls (the graph's loss remembers the server's datagrams over
    // about `LOSS_MEMORY`, 2 s) and the window shows the whole fall.
    tb.set_conditions(LinkConditions::new(
        Duration::from_millis(100),
        Duration::ZERO,
        0.0,
    ))
    .unwrap();
    tb.run_for(Duration::from_secs(12));
    let graph = tb.client_world(0).resource::<NetGraph>();
    let loss: Vec<f64> = graph.series(NetSeries::Loss).map(|s| s.1).collect();
    let (first, last) = (loss[0], *loss.last().unwrap());
    assert!(last < 1.0, "loss still {last} % 12 s after it stopped");
    assert!(
        first > 3.0 * last,
        "the window lost the fall: {first} → {last}"
    );
    assert!(loss.windows(2).all(|w| w[1] <= w[0] + 1e-9), "{loss:?}");
    // The server has no graph samples: it is a client's view.
    assert_eq!(tb.server_world().resource::<NetGraph>().span(), 0.0);
}

#[test]
fn the_drawn_net_graph_follows_the_samples() {
    use bevy::prelude::*;
    use unlag::diagnostics::{NetGraphBar, NetGraphLabel, NetGraphUiPlugin, scale_top};

    let conditions = LinkConditions::new(Duration::from_millis(150), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(
        1,
        conditions,
        (
            MovementTestPlugin::default(),
            ProxySmoothingPlugin::default(),
            CharacterProxyPlugin,
            NetGraphPlugin::default(),
            NetGraphUiPlugin {
                toggle: None,
                visible: true,
            },
        ),
    );
    tb.run_for(Duration::from_secs(4));
    let world = tb.client_world_mut(0);
    let rtt = world.resource::<NetGraph>().latest(NetSeries::Rtt).unwrap();
    let top = scale_top(
        NetSeries::Rtt,
        world
            .resource::<NetGraph>()
            .range(NetSeries::Rtt)
            .unwrap()
            .1,
    );
    assert_eq!(top, 200.0, "150 ms is drawn on a 0–200 ms scale");
    // The newest RTT bar stands at RTT / top of its strip; bars older than the samples are flat.
    let mut bars = world.query::<(&NetGraphBar, &Node)>();
    let mut height = |series, index| {
        bars.iter(world)
            .find(|(b, _)| b.series == series && b.index == index)
            .map(|(_, n)| n.height)
            .unwrap()
    };
    let Val::Percent(newest) = height(NetSeries::Rtt, 0) else {
        panic!("bar heights are percentages");
    };
    assert!(
        (f64::from(newest) - rtt / top * 100.0).abs() < 0.5,
        "{newest} % for {rtt} ms"
    );
    assert_eq!(
        height(NetSeries::Rtt, 99),
        Val::Percent(0.0),
        "4 s: no sample 9.9 s ago yet"
    );
    assert_eq!(height(NetSeries::Loss, 0), Val::Percent(0.0), "no loss");
    let mut labels = world.query::<(&NetGraphLabel, &Text)>();
    let label = labels
        .iter(world)
        .find(|(l, _)| l.0 == NetSeries::Rtt)
        .map(|(_, t)| t.0.clone())
        .unwrap();
    assert!(label.starts_with(&format!("RTT {rtt:.0} ms")), "{label}");
}
