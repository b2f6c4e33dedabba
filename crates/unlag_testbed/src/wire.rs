//! [`Wire`]: the simulated network between the testbed's server and one client.
//!
//! Each App sends and receives through a crossbeam channel, as lightyear's in-process
//! transport does; the testbed sits between the two channels of each direction. It takes what
//! an App sent when that App's frame ends, stamped with the frame's time, runs it through a
//! [`LinkSimulator`] (latency, jitter, loss in bursts), and hands it to the other App before
//! the first of its frames that starts at or after the datagram's arrival. So each datagram
//! arrives when its simulated trip ends and waits to be read as on a real link, whatever
//! either App's frames do: a client that hitches does not hold what it sent, and what reached
//! it meanwhile is read, stamped as it arrived, when the hitch ends. A link shaped inside an
//! App could only do either at that App's frames.

use std::collections::VecDeque;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use lightyear::crossbeam::CrossbeamIo;
use unlag_core::{LinkSimulator, PathConditions};

/// One direction of a [`Wire`]: the sender's channel end, the simulated path, the receiver's.
struct Direction {
    from: Receiver<Bytes>,
    to: Sender<Bytes>,
    sim: LinkSimulator<Bytes>,
    /// The latest datagrams sent: (time sent, seconds; whether it got through), oldest first,
    /// at most [`SENDS_KEPT`]. Kept for the client's direction only (what
    /// [`Wire::loss_hold`] reads).
    sends: Option<VecDeque<(f64, bool)>>,
}

/// Datagrams of the client's direction whose fate [`Wire::loss_hold`] can look back on (at
/// 500 a second, a 240-fps client's, 8 s).
const SENDS_KEPT: usize = 4096;

impl Direction {
    /// After the sender's frame at `now` (seconds): what it sent, on its way.
    fn collect(&mut self, now: f64) {
        for datagram in self.from.try_iter() {
            let through = self.sim.send(now, datagram);
            if let Some(sends) = &mut self.sends {
                if sends.len() == SENDS_KEPT {
                    sends.pop_front();
                }
                sends.push_back((now, through));
            }
        }
    }

    /// Before the receiver's frame at `now` (seconds): what has reached it.
    fn deliver(&mut self, now: f64) {
        while let Some(datagram) = self.sim.receive_due(now) {
            // The receiver's end lives as long as the testbed.
            let _ = self.to.send(datagram);
        }
    }
}

/// The two directions between the server and one client (see the module docs).
pub(crate) struct Wire {
    up: Direction,
    down: Direction,
    /// Conditions of the server-to-client direction instead of the client's own, when set.
    down_override: Option<PathConditions>,
}

impl Wire {
    /// A wire with no delay or loss, randomised from `seed`, and the transports of its client
    /// and of the server's side: (wire, client's, server's).
    pub(crate) fn new(seed: u64) -> (Self, CrossbeamIo, CrossbeamIo) {
        let (client_tx, from_client) = crossbeam_channel::unbounded();
        let (to_server, server_rx) = crossbeam_channel::unbounded();
        let (server_tx, from_server) = crossbeam_channel::unbounded();
        let (to_client, client_rx) = crossbeam_channel::unbounded();
        let none = PathConditions::default();
        let wire = Self {
            up: Direction {
                from: from_client,
                to: to_server,
                sim: LinkSimulator::new(none, seed),
                sends: Some(VecDeque::new()),
            },
            down: Direction {
                from: from_server,
                to: to_client,
                sim: LinkSimulator::new(none, seed ^ 0x5EED_F1A7),
                sends: None,
            },
            down_override: None,
        };
        (
            wire,
            CrossbeamIo::new(client_tx, client_rx),
            CrossbeamIo::new(server_tx, server_rx),
        )
    }

    /// Applies `each_way` to datagrams sent from now on, both directions (the server's to the
    /// client: the override instead, if one is set).
    pub(crate) fn set_conditions(&mut self, each_way: PathConditions) {
        let down = self.down_override.unwrap_or(each_way);
        if *self.up.sim.conditions() != each_way {
            self.up.sim.set_conditions(each_way);
        }
        if *self.down.sim.conditions() != down {
            self.down.sim.set_conditions(down);
        }
    }

    /// Sets (or, with `None`, clears) the server-to-client direction's own conditions.
    pub(crate) fn override_down(&mut self, down: Option<PathConditions>) {
        self.down_override = down;
    }

    /// Before the server's frame at `now` (seconds): what has reached it from this client.
    pub(crate) fn deliver_to_server(&mut self, now: f64) {
        self.up.deliver(now);
    }

    /// After the server's frame at `now` (seconds): what it sent this client, on its way.
    pub(crate) fn collect_from_server(&mut self, now: f64) {
        self.down.collect(now);
    }

    /// Before the client's frame at `now` (seconds): what has reached it from the server.
    pub(crate) fn deliver_to_client(&mut self, now: f64) {
        self.down.deliver(now);
    }

    /// After the client's frame at `now` (seconds): what it sent, on its way.
    pub(crate) fn collect_from_client(&mut self, now: f64) {
        self.up.collect(now);
    }

    /// How long the client's datagrams sent after `after` (seconds) were lost in a row: from
    /// the first of them sent to the first that got through, seconds (0 when the first got
    /// through). `None` while none got through, or when the kept sends no longer reach back.
    pub(crate) fn loss_hold(&self, after: f64) -> Option<f64> {
        let sends = self.up.sends.as_ref()?;
        if sends.front().is_none_or(|(t, _)| *t > after) {
            return None;
        }
        let mut later = sends.iter().filter(|(t, _)| *t > after);
        let (first, _) = *later.clone().next()?;
        let (through, _) = *later.find(|(_, through)| *through)?;
        Some(through - first)
    }

    /// Datagrams lost so far: (client to server, server to client).
    pub(crate) fn lost(&self) -> (u64, u64) {
        (self.up.sim.stats().lost, self.down.sim.stats().lost)
    }
}
