//! A simulated network path for one direction of one link: delay, jitter and loss, seeded.
//!
//! Packets enter with [`LinkSimulator::send`] and come out of [`LinkSimulator::receive_due`]
//! once their delivery time has come. Each packet gets `latency ± jitter` of delay, uniformly
//! spread (the convention of netem, Clumsy and game engines' lag simulators), so jitter can
//! reorder packets as it does on real networks, and is lost with probability `loss`. The mean
//! delay stays `latency`: since no packet can arrive before it is sent, the jitter is capped at
//! the latency (at zero latency there is no jitter). Changing the conditions affects only packets sent afterwards: packets
//! already in flight keep their delivery time, as on a real path whose delay changes.

use crate::rng::SplitMix64;
use core::time::Duration;
use heap::Heap;

mod heap {
    //! A binary min-heap on `(due, order)` keys, so equal due times leave in sending order.
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    pub(super) struct Entry<T> {
        pub due: f64,
        pub order: u64,
        pub packet: T,
    }

    impl<T> PartialEq for Entry<T> {
        fn eq(&self, other: &Self) -> bool {
            self.due == other.due && self.order == other.order
        }
    }
    impl<T> Eq for Entry<T> {}
    impl<T> PartialOrd for Entry<T> {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl<T> Ord for Entry<T> {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.due
                .total_cmp(&other.due)
                .then(self.order.cmp(&other.order))
        }
    }

    pub(super) type Heap<T> = BinaryHeap<Reverse<Entry<T>>>;
}

/// Delay, jitter and loss of one direction of a simulated link.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct PathConditions {
    /// Fixed delay of every packet.
    pub latency: Duration,
    /// Largest deviation of each packet's delay from the latency, either way (uniform; capped
    /// at the latency, see the module docs).
    pub jitter: Duration,
    /// Probability (0–1) that a packet is lost.
    pub loss: f64,
    /// Mean length of a burst of losses, packets. At most 1: each packet is lost on its own
    /// with probability `loss`. Above 1: Gilbert–Elliott losses — a good state that loses
    /// nothing and a bad state that loses everything, left with probability `1 / burst` per
    /// packet and entered so that the share lost stays `loss`.
    pub burst: f64,
}

/// Counters of a [`LinkSimulator`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkSimulatorStats {
    /// Packets handed to [`LinkSimulator::send`].
    pub sent: u64,
    /// Packets dropped to simulate loss.
    pub lost: u64,
    /// Packets delivered by [`LinkSimulator::receive_due`].
    pub delivered: u64,
}

/// One direction of a simulated link (see the module docs).
pub struct LinkSimulator<T> {
    conditions: PathConditions,
    rng: SplitMix64,
    /// Gilbert–Elliott: whether the path is in its losing state.
    bad: bool,
    queue: Heap<T>,
    next_order: u64,
    stats: LinkSimulatorStats,
}

impl<T> LinkSimulator<T> {
    /// A simulator with the given conditions whose randomness comes from `seed`.
    pub fn new(conditions: PathConditions, seed: u64) -> Self {
        Self {
            conditions,
            rng: SplitMix64::new(seed),
            bad: false,
            queue: Heap::new(),
            next_order: 0,
            stats: LinkSimulatorStats::default(),
        }
    }

    /// The conditions applied to packets sent from now on.
    pub fn conditions(&self) -> &PathConditions {
        &self.conditions
    }

    /// Changes the conditions for packets sent from now on; packets in flight are kept.
    pub fn set_conditions(&mut self, conditions: PathConditions) {
        self.conditions = conditions;
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkSimulatorStats {
        self.stats
    }

    /// Packets in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Sends `packet` at time `now` (seconds): it is either lost or queued for delivery.
    /// Returns whether it was queued.
    pub fn send(&mut self, now: f64, packet: T) -> bool {
        self.stats.sent += 1;
        // Draw both numbers for every packet so the sequence of delays does not depend on loss.
        let draw = self.rng.next_f64();
        let (loss, burst) = (self.conditions.loss, self.conditions.burst);
        let lost = if burst > 1.0 && loss > 0.0 && loss < 1.0 {
            let leave = 1.0 / burst;
            let enter = (loss * leave / (1.0 - loss)).min(1.0);
            self.bad = if self.bad {
                draw >= leave
            } else {
                draw < enter
            };
            self.bad
        } else {
            draw < loss
        };
        let noise = self.rng.next_f64();
        if lost {
            self.stats.lost += 1;
            return false;
        }
        let latency = self.conditions.latency.as_secs_f64();
        let spread = self.conditions.jitter.as_secs_f64().min(latency);
        let delay = (latency + (2.0 * noise - 1.0) * spread).max(0.0);
        self.queue.push(std::cmp::Reverse(heap::Entry {
            due: now + delay,
            order: self.next_order,
            packet,
        }));
        self.next_order += 1;
        true
    }

    /// Takes the next packet whose delivery time is at or before `now` (seconds), earliest
    /// first.
    pub fn receive_due(&mut self, now: f64) -> Option<T> {
        if self.queue.peek().is_some_and(|e| e.0.due <= now) {
            self.stats.delivered += 1;
            self.queue.pop().map(|e| e.0.packet)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(sim: &mut LinkSimulator<u32>, now: f64) -> Vec<u32> {
        std::iter::from_fn(|| sim.receive_due(now)).collect()
    }

    #[test]
    fn fixed_latency_delivers_in_order_on_time() {
        let c = PathConditions {
            latency: Duration::from_millis(50),
            ..Default::default()
        };
        let mut sim = LinkSimulator::new(c, 1);
        for i in 0..10 {
            sim.send(f64::from(i) * 0.01, i);
        }
        assert!(drain(&mut sim, 0.049).is_empty());
        assert_eq!(drain(&mut sim, 0.05), vec![0]);
        assert_eq!(drain(&mut sim, 0.075), vec![1, 2]);
        assert_eq!(drain(&mut sim, 1.0), (3..10).collect::<Vec<_>>());
    }

    #[test]
    fn loss_rate_matches() {
        let c = PathConditions {
            loss: 0.05,
            ..Default::default()
        };
        let mut sim = LinkSimulator::new(c, 2);
        for i in 0..100_000 {
            sim.send(0.0, i);
        }
        let lost = sim.stats().lost as f64 / 100_000.0;
        assert!((lost - 0.05).abs() < 0.005, "{lost}");
        assert_eq!(
            drain(&mut sim, 0.0).len() as u64,
            100_000 - sim.stats().lost
        );
    }

    #[test]
    fn jitter_spreads_delay_uniformly_around_latency() {
        let c = PathConditions {
            latency: Duration::from_millis(100),
            jitter: Duration::from_millis(20),
            loss: 0.0,
            burst: 1.0,
        };
        let mut sim = LinkSimulator::new(c, 3);
        let n = 20_000;
        for i in 0..n {
            sim.send(0.0, i);
        }
        // Sample the delivery times by stepping a clock in 1 ms steps.
        let mut delays = Vec::new();
        let mut t = 0.0;
        while delays.len() < n as usize {
            for _ in drain(&mut sim, t) {
                delays.push(t);
            }
            t += 0.001;
        }
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        let (lo, hi) = delays
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        assert!((mean - 0.1005).abs() < 0.002, "{mean}");
        assert!(lo >= 0.0799 && hi <= 0.1211, "{lo} {hi}");
        assert!(lo < 0.082 && hi > 0.118, "spread reaches ±20 ms: {lo} {hi}");
    }

    #[test]
    fn jitter_never_moves_the_mean_below_or_above_latency() {
        let c = PathConditions {
            latency: Duration::ZERO,
            jitter: Duration::from_millis(20),
            loss: 0.0,
            burst: 1.0,
        };
        let mut sim = LinkSimulator::new(c, 5);
        for i in 0..100 {
            sim.send(1.0, i);
        }
        assert_eq!(drain(&mut sim, 1.0).len(), 100, "no delay at zero latency");
    }

    #[test]
    fn changing_conditions_keeps_packets_in_flight() {
        let mut sim = LinkSimulator::new(
            PathConditions {
                latency: Duration::from_millis(500),
                ..Default::default()
            },
            4,
        );
        sim.send(0.0, 1);
        sim.set_conditions(PathConditions::default());
        sim.send(0.1, 2);
        assert_eq!(drain(&mut sim, 0.1), vec![2]);
        assert_eq!(sim.in_flight(), 1);
        assert_eq!(drain(&mut sim, 0.5), vec![1]);
    }

    #[test]
    fn bursty_loss_keeps_the_rate_and_lengthens_the_bursts() {
        // (loss, mean burst) → measured share lost and mean run of consecutive losses.
        let measure = |loss: f64, burst: f64| {
            let c = PathConditions {
                loss,
                burst,
                ..Default::default()
            };
            let mut sim = LinkSimulator::new(c, 11);
            let (mut runs, mut run, mut lost) = (Vec::new(), 0u32, 0u32);
            for i in 0..200_000 {
                if sim.send(0.0, i) {
                    if run > 0 {
                        runs.push(run);
                    }
                    run = 0;
                } else {
                    lost += 1;
                    run += 1;
                }
            }
            let mean_run = f64::from(runs.iter().sum::<u32>()) / runs.len() as f64;
            (f64::from(lost) / 200_000.0, mean_run)
        };
        let (rate, run) = measure(0.05, 1.0);
        assert!(
            (rate - 0.05).abs() < 0.003 && run < 1.1,
            "independent: {rate} {run}"
        );
        for burst in [3.0, 8.0] {
            let (rate, run) = measure(0.05, burst);
            assert!((rate - 0.05).abs() < 0.005, "burst {burst}: rate {rate}");
            assert!(
                (run - burst).abs() < 0.1 * burst,
                "burst {burst}: mean run {run}"
            );
        }
    }

    #[test]
    fn same_seed_same_fate() {
        let c = PathConditions {
            latency: Duration::from_millis(30),
            jitter: Duration::from_millis(10),
            loss: 0.2,
            burst: 1.0,
        };
        let run = |seed| {
            let mut sim = LinkSimulator::new(c, seed);
            for i in 0..200 {
                sim.send(f64::from(i) * 0.005, i);
            }
            drain(&mut sim, 10.0)
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }
}
