//! The view contract: what a client drew of each simulated proxy, and the states the server
//! sent it. Proxy smoothing writes it (the server records each state it sends, a client each
//! pose it draws); the rewind and the hit validation read it to judge a shot against exactly
//! what its shooter saw. It lives here, beside the wire, so that neither reader depends on the
//! other.

use bevy::prelude::*;
use unlag_core::{ProxyState, SampleKind, SmoothingMode, StateShown};

/// System sets of proxy smoothing (`unlag_smoothing` puts its systems in them; the rewind orders
/// its recording after `Send` and its capture of drawn poses after `Place`).
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProxySmoothingSystems {
    /// `FixedPostUpdate` on the server: sample proxies after the tick and send the due ones.
    Send,
    /// `PreUpdate` on a client, after the net clock: buffer received states.
    Receive,
    /// `PostUpdate` on a client, before transform propagation: place proxies at view time.
    Place,
    /// `PostUpdate` on a client, in [`NetSystems::EveryPacket`](crate::NetSystems::EveryPacket):
    /// asks for full states when a delta state could not be decoded, riding in a packet that
    /// leaves anyway. Other plugins' systems of that set that may make the frame's packet leave
    /// (a reload's copies) order themselves before it, so the executor never decides.
    Resync,
}

/// Insert on a server entity the game has just moved instantly (a respawn, a teleporter): its
/// next proxy state is flagged so that clients snap instead of sweeping through the world, and
/// the rewind records the tick as a teleport, however short the move. The rewind never
/// interpolates across a teleport, and the combat plugin answers a shot fired from the old
/// place before the client heard of the move as fired before it, not as a forged origin.
/// (Without the marker only a jump farther than the rewind's teleport distance, 3.84 m by
/// default, is a teleport to it: a respawn nearer where the body died is not.) Removed after
/// the tick it was seen in ([`TeleportsSeen`]).
#[derive(Component, Copy, Clone, Debug, Default)]
pub struct Teleported;

/// `FixedPostUpdate` on the server: where [`Teleported`] markers are removed, after proxy
/// smoothing has sent the flagged state ([`ProxySmoothingSystems::Send`]) and after every
/// system ordered before this set (the rewind's recording is) has seen them in that tick.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TeleportsSeen;

/// `FixedPostUpdate` on the server ([`TeleportsSeen`]): the tick's [`Teleported`] markers have
/// been read by everyone who needs them.
pub(crate) fn clear_teleported(mut commands: Commands, moved: Query<Entity, With<Teleported>>) {
    for entity in &moved {
        commands.entity(entity).remove::<Teleported>();
    }
}

/// What was on screen for a proxy this frame: which two states and blend factor, in which mode.
/// Shots carry it so the server can rebuild the exact pose the shooter saw.
#[derive(Component, Copy, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct RenderedPose {
    /// Tick of the state the pose starts from.
    pub from: u32,
    /// Tick of the state it goes towards.
    pub to: u32,
    /// Blend factor (see [`unlag_core::Sample::alpha`]).
    pub alpha: f32,
    /// The view time it was rendered at, server seconds.
    pub view_time: f64,
    /// The interpolation delay in effect for this proxy, seconds.
    pub delay: f64,
    /// The rendered position, metres: the curve at (`from`, `to`, `alpha`) plus `ease`.
    pub position: Vec3,
    /// The offset of the rendered position from the curve (the ease back onto it after a
    /// starved frame, or `Extrapolate`'s blend into a new state; zero otherwise), metres; part
    /// of what was on screen.
    pub ease: Vec3,
    /// The movement flags shown ([`ProxyFlags`] of the state in effect).
    pub flags: u8,
    /// What states `from` and `to` show besides the pose (the same twice when they are one
    /// state): a body drawn on the proxy is posed at each and blended by
    /// [`RenderedPose::body_blend`], as the server rebuilds it.
    #[reflect(ignore)]
    pub shown: [StateShown; 2],
    /// Whether the pose was interpolated, held or extrapolated.
    #[reflect(ignore, default = "interpolated")]
    pub kind: SampleKind,
    /// The smoothing mode it was rendered with (with `from`, `to` and `alpha`, what
    /// [`unlag_core::replay`] needs to rebuild the pose).
    #[reflect(ignore)]
    pub mode: SmoothingMode,
}

impl RenderedPose {
    /// How far a body drawn on the proxy is blended from its pose at state `from` to its pose
    /// at state `to`, 0–1 ([`unlag_core::body_blend`]).
    pub fn body_blend(&self) -> f32 {
        unlag_core::body_blend(self.from, self.to, self.alpha)
    }

    /// How far the proxy drawn with this pose may be from where the server's track had it,
    /// metres: half the span its curve guesses (the two states' interval, or the seconds it ran
    /// on past one) at the faster of their speeds; 0 for garbage. The server judges a proxy a
    /// shot did not claim where its track was, and a pellet that meets it there stops, a miss
    /// the shooter never saw: at 1 Hz a proxy drawn clear of the ray stood in it on the
    /// server. A shot claims the proxies it passed this close to, so the server poses them
    /// where the shooter saw them (0.15 m at 20 Hz and 6 m/s, 3 m at 1 Hz).
    pub fn off_track(&self) -> f32 {
        let span = if self.from == self.to {
            f64::from(self.alpha.max(0.0))
        } else {
            (self.shown[1].time - self.shown[0].time).abs()
        };
        let speed = self.shown[0]
            .velocity
            .length()
            .max(self.shown[1].velocity.length());
        let off = 0.5 * span as f32 * speed;
        if off.is_finite() { off } else { 0.0 }
    }
}

fn interpolated() -> SampleKind {
    SampleKind::Interpolated
}

/// Game movement flags shown with the proxy (bit 0: crouched by convention; bit 7 is reserved).
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct ProxyFlags(pub u8);

/// How long the server keeps the states it sent, seconds: longer than any view time a shot may
/// be judged at (the rewind window) plus the slowest proxy's interval.
pub const SENT_STATES_SECONDS: f64 = 6.0;

/// On the server, per smoothed proxy: the states sent to clients in the last
/// [`SENT_STATES_SECONDS`], exactly as clients decode them (quantised), oldest first. With the
/// (from, to, blend) a client reports from [`RenderedPose`] and
/// [`unlag_core::replay`], the server rebuilds the pose that client had on screen.
#[derive(Component, Clone, Debug, Default)]
pub struct SentStates {
    states: std::collections::VecDeque<ProxyState>,
    /// The state the proxy would be sent as at the latest tick sampled, when it may be sent
    /// later (a slow proxy's, sent off its grid where its motion bent, the tick after).
    sampled: Option<ProxyState>,
}

impl SentStates {
    /// The state sent for server tick `tick`, if it is still kept.
    pub fn get(&self, tick: u32) -> Option<&ProxyState> {
        let i = self.states.partition_point(|s| s.tick < tick);
        self.states.get(i).filter(|s| s.tick == tick)
    }

    /// The newest state sent.
    pub fn newest(&self) -> Option<&ProxyState> {
        self.states.back()
    }

    /// The state the proxy shows at server tick `tick`, exactly as clients decode it, if it
    /// was sent at that tick or may yet be sent as of it ([`sample`](Self::sample)): what the
    /// boxes recorded at that tick are posed from, so that a client posing from the state
    /// poses them bit for bit as recorded.
    pub fn shown_at(&self, tick: u32) -> Option<&ProxyState> {
        self.newest()
            .filter(|s| s.tick == tick)
            .or(self.sampled.as_ref().filter(|s| s.tick == tick))
    }

    /// Notes the state the proxy would be sent as at its tick, when it may be sent later (the
    /// smoothing server does it for slow proxies, whose states off their grid go the tick
    /// after they were sampled).
    pub fn sample(&mut self, state: ProxyState) {
        self.sampled = Some(state);
    }

    /// The states kept, oldest first.
    pub fn states(&self) -> impl Iterator<Item = &ProxyState> {
        self.states.iter()
    }

    /// Records a state sent (the smoothing server does it for every state it sends; tools and
    /// benchmarks that build a server world by hand may too), forgetting those older than
    /// [`SENT_STATES_SECONDS`] before it.
    pub fn push(&mut self, state: ProxyState) {
        while self
            .states
            .front()
            .is_some_and(|s| s.time < state.time - SENT_STATES_SECONDS)
        {
            self.states.pop_front();
        }
        self.states.push_back(state);
    }
}

/// The number of the App's current frame, counted from its start (a server's smoothing and
/// its transport read it to tell which frame a state message left in).
#[derive(Resource, Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NetFrame(pub u64);

/// First: counts the frame.
pub(crate) fn count_frame(mut frame: ResMut<NetFrame>) {
    frame.0 += 1;
}

/// How many of a client's latest state messages [`StatesSentTo`] remembers: at 60 due messages
/// a second and as many repeats, four seconds. [`StatesSentTo::heard`] reads the long spells
/// a client went without any (a burst of losses it was held through, and eased out of for up
/// to two seconds after) that far back; the masks reach the latest 64.
pub const STATE_MESSAGES_KEPT: usize = 512;

/// On a server's client link: the tick of each of its latest state messages and the frame it
/// left in ([`NetFrame`]); which proxies' states each carried, the smoothing server keeps per
/// proxy as a mask over these messages' numbers ([`StatesSentTo::frames_between`]). With the
/// server's own record of when the client acknowledged each frame's packets
/// ([`unlag_core::AckLedger::frame_acknowledged`]), it tells which states a client surely had
/// by a moment: a claim on two states that skips one it had when it drew is not what it drew.
#[derive(Component, Clone, Debug, Default)]
pub struct StatesSentTo {
    /// The latest [`STATE_MESSAGES_KEPT`] messages, oldest first.
    messages: std::collections::VecDeque<KeptMessage>,
    next: u32,
    /// The tick the newest message forgotten left at, if any was: every message that left
    /// later is kept.
    forgotten: Option<u32>,
    /// The tick the newest message noted left at.
    newest_sent: u32,
    /// The messages found acknowledged so far ([`StatesSentTo::acknowledged`]).
    known: AcknowledgedMessages,
    /// The number of the oldest message not found acknowledged when last asked whose frame
    /// the ledger still held: asked about again from there.
    unsure_from: u32,
}

/// The ticks at which a client's state messages it acknowledged left, as far back as
/// [`StatesSentTo`] keeps them ([`StatesSentTo::heard`]): a spell of ticks none of whose
/// messages it acknowledged is one it heard nothing in, whatever proxy's states they carried
/// (a burst of losses takes every datagram of a spell). A repeat of an older state counts at
/// the tick it left: it ended the spell when it came, not at its state's tick.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeardTicks {
    /// Every message that left after this tick is kept (none forgotten: `None`).
    forgotten: Option<u32>,
    /// The ticks the messages acknowledged left at, ascending, each once.
    heard: Vec<u32>,
}

impl HeardTicks {
    /// The first tick after `tick` at which a message the client acknowledged left:
    /// `Some(None)` if none is yet, `None` if a message that left after `tick` may have been
    /// forgotten (so not known).
    pub fn first_after(&self, tick: u32) -> Option<Option<u32>> {
        if self.forgotten.is_some_and(|f| f > tick) {
            return None;
        }
        let i = self.heard.partition_point(|&t| t <= tick);
        Some(self.heard.get(i).copied())
    }

    /// Whether a message that left at `tick` was acknowledged (as far as kept).
    pub fn heard_at(&self, tick: u32) -> bool {
        self.heard.binary_search(&tick).is_ok()
    }
}

/// One of a client's state messages, as [`StatesSentTo`] keeps it.
#[derive(Copy, Clone, Debug)]
struct KeptMessage {
    number: u32,
    tick: u32,
    /// The tick it left at, as near as the log knows: its own, or the newest of a message
    /// before it (a repeat, or an off-grid state sampled ticks before, leaves later).
    sent: u32,
    /// The server's frame it left in.
    frame: u64,
    /// Whether the client's acknowledgement of that frame was found when last asked.
    acknowledged: bool,
}

/// Which of a client's kept state messages it acknowledged ([`StatesSentTo::acknowledged`]),
/// and their ticks: per proxy, the newest it surely has is one line-up of masks.
#[derive(Clone, Debug)]
pub struct AcknowledgedMessages {
    /// The acknowledged messages' numbers (bit `i`: message `mask.latest − i`).
    mask: SentMask,
    /// The tick of message `n` at `n % 64`, where `mask` marks it (a ring: a newer message
    /// marked moves no other's).
    ticks: [u32; 64],
}

impl Default for AcknowledgedMessages {
    fn default() -> Self {
        Self {
            mask: SentMask::default(),
            ticks: [0; 64],
        }
    }
}

impl PartialEq for AcknowledgedMessages {
    /// The same messages marked, with the same ticks (however the masks are lined up).
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.mask.normalized(), other.mask.normalized());
        a == b
            && (0..64u32)
                .filter(|back| a.bits & (1 << back) != 0)
                .map(|back| (a.latest.wrapping_sub(back) % 64) as usize)
                .all(|i| self.ticks[i] == other.ticks[i])
    }
}

impl Eq for AcknowledgedMessages {}

impl AcknowledgedMessages {
    /// The tick of the newest acknowledged message that `sent` marks (one that carried a
    /// state of the proxy whose messages it marks).
    pub fn newest_tick(&self, sent: &SentMask) -> Option<u32> {
        let n = self.mask.newest_common(sent)?;
        Some(self.ticks[(n % 64) as usize])
    }

    /// Marks message `n` (of `tick`) acknowledged, newer or older than those marked (one more
    /// than 63 before the newest is not kept).
    fn mark(&mut self, n: u32, tick: u32) {
        let newer = n.wrapping_sub(self.mask.latest);
        if self.mask.bits == 0 || newer < 1 << 31 {
            let shift = if self.mask.bits == 0 { 64 } else { newer };
            self.mask.bits = if shift < 64 {
                self.mask.bits << shift
            } else {
                0
            } | 1;
            self.mask.latest = n;
        } else {
            let back = self.mask.latest.wrapping_sub(n);
            if back >= 64 {
                return;
            }
            self.mask.bits |= 1 << back;
        }
        self.ticks[(n % 64) as usize] = tick;
    }

    /// Unmarks message `n`.
    fn unmark(&mut self, n: u32) {
        let back = self.mask.latest.wrapping_sub(n);
        if back < 64 {
            self.mask.bits &= !(1 << back);
        }
    }

    /// Unmarks every message older than `oldest`.
    fn unmark_before(&mut self, oldest: u32) {
        let reach = self.mask.latest.wrapping_sub(oldest);
        if reach >= 1 << 31 {
            self.mask.bits = 0;
        } else if reach < 63 {
            self.mask.bits &= (1 << (reach + 1)) - 1;
        }
    }
}

/// Which of a client's state messages carried a state of one proxy: the number of the latest
/// that did, and bit `i` set when the message `i` before that did too.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SentMask {
    /// The number of the latest message with a state of the proxy.
    pub latest: u32,
    /// Bit `i`: message `latest − i` had one.
    pub bits: u64,
}

impl SentMask {
    /// Notes that message `message` (numbered by [`StatesSentTo::begin`], never older than
    /// the latest noted) carries a state of the proxy.
    pub fn note(&mut self, message: u32) {
        let shift = message.wrapping_sub(self.latest);
        self.bits = match shift {
            0 => self.bits | 1,
            1..64 => (self.bits << shift) | 1,
            _ => 1,
        };
        self.latest = message;
    }

    /// The same messages marked, lined up at the newest of them (all zero when none is).
    fn normalized(&self) -> Self {
        if self.bits == 0 {
            return Self::default();
        }
        let newest = self.bits.trailing_zeros();
        Self {
            latest: self.latest.wrapping_sub(newest),
            bits: self.bits >> newest,
        }
    }

    /// Whether message `message` carried a state of the proxy (as far as 64 messages back).
    pub fn has(&self, message: u32) -> bool {
        let back = self.latest.wrapping_sub(message);
        back < 64 && self.bits & (1 << back) != 0
    }

    /// The newest message both masks mark, as far back as both reach.
    pub fn newest_common(&self, other: &SentMask) -> Option<u32> {
        // Both masks lined up at the older of the two latest messages.
        let (newer, older) = if self.latest.wrapping_sub(other.latest) < 1 << 31 {
            (self, other)
        } else {
            (other, self)
        };
        let shift = newer.latest.wrapping_sub(older.latest);
        let lined = if shift < 64 { newer.bits >> shift } else { 0 };
        let common = lined & older.bits;
        (common != 0).then(|| older.latest.wrapping_sub(common.trailing_zeros()))
    }
}

impl StatesSentTo {
    /// The number of the next message, to note its states with ([`SentMask::note`]).
    pub fn begin(&mut self) -> u32 {
        let n = self.next;
        self.next = self.next.wrapping_add(1);
        n
    }

    /// Notes that message `message`, of `tick`, left in frame `frame`; forgets the oldest
    /// beyond [`STATE_MESSAGES_KEPT`].
    pub fn end(&mut self, message: u32, tick: u32, frame: u64) {
        self.newest_sent = self.newest_sent.max(tick);
        self.messages.push_back(KeptMessage {
            number: message,
            tick,
            sent: self.newest_sent,
            frame,
            acknowledged: false,
        });
        while self.messages.len() > STATE_MESSAGES_KEPT {
            if let Some(gone) = self.messages.pop_front() {
                // (The ticks messages left at never go back.)
                self.forgotten = Some(gone.sent);
            }
        }
    }

    /// The ticks the kept messages the client acknowledged in full by the server's `ledger`
    /// left at ([`unlag_core::AckLedger::frame_acknowledged`]; one still waiting counts as not
    /// heard). For a judge that asks once in a while (a claimed ease): it reads every kept
    /// message.
    pub fn heard(&self, ledger: &unlag_core::AckLedger) -> HeardTicks {
        let mut asked: Option<(u64, bool)> = None;
        let mut heard: Vec<u32> = Vec::new();
        for message in &self.messages {
            let acknowledged = match asked {
                Some((frame, answer)) if frame == message.frame => answer,
                _ => ledger.frame_acknowledged(message.frame).is_some(),
            };
            asked = Some((message.frame, acknowledged));
            // (In order: the ticks messages left at never go back.)
            if acknowledged && heard.last() != Some(&message.sent) {
                heard.push(message.sent);
            }
        }
        HeardTicks {
            forgotten: self.forgotten,
            heard,
        }
    }

    /// The kept messages whose frames the client acknowledged in full by the server's
    /// `ledger` ([`unlag_core::AckLedger::frame_acknowledged`]: the newest and those up to 63
    /// before it), with their ticks.
    ///
    /// A message found acknowledged is not asked about again while the ledger holds its
    /// frame (the answer cannot change then: [`unlag_core::AckLedger::oldest_frame`]), and the
    /// messages found so are kept marked from one call to the next: each call asks the ledger
    /// only about the messages from the oldest not found acknowledged whose frame it still
    /// holds (those lost, or acknowledged in part) up to the first in flight (after the newest
    /// frame it has any acknowledgement of), and unmarks those it forgot or that fell out of the
    /// latest 64. The server asks for each of its clients every tick it sends them states:
    /// asking about all 64 messages each time was a cache miss each, ~1 % of a 256-player
    /// server's update, and walking them all ~2 % with its states spread over three ticks of
    /// their interval.
    pub fn acknowledged(&mut self, ledger: &unlag_core::AckLedger) -> AcknowledgedMessages {
        let Some(held_from) = ledger.oldest_frame() else {
            // (An empty ledger holds no acknowledgement.)
            return AcknowledgedMessages::default();
        };
        let len = self.messages.len();
        // (The masks reach the latest 64 messages.)
        let reach = len.saturating_sub(64);
        // (Numbers run on by one through the kept messages.)
        let start = self.messages.front().map_or(len, |front| {
            let offset = self.unsure_from.wrapping_sub(front.number);
            if offset < 1 << 31 {
                (offset as usize).min(len)
            } else {
                0
            }
        });
        // (No frame after the newest any packet of which was acknowledged is acknowledged in
        // full: the messages in flight are not asked about, each a cache miss.)
        let in_flight_after = ledger.newest_acknowledged_frame();
        let mut asked: Option<(u64, bool)> = None;
        let mut unsure = None;
        for message in self.messages.range_mut(start.max(reach)..) {
            if message.acknowledged {
                continue;
            }
            let frame = message.frame;
            if in_flight_after.is_none_or(|newest| frame > newest) {
                // (Frames never go back: every later message is in flight too.)
                unsure = unsure.or(Some(message.number));
                break;
            }
            let acknowledged = match asked {
                Some((f, answer)) if f == frame => answer,
                _ => ledger.frame_acknowledged(frame).is_some(),
            };
            asked = Some((frame, acknowledged));
            if acknowledged {
                message.acknowledged = true;
                self.known.mark(message.number, message.tick);
            } else if unsure.is_none() && frame >= held_from {
                unsure = Some(message.number);
            }
        }
        self.unsure_from = unsure.unwrap_or(self.next);
        let mut known = self.known.clone();
        if let Some(oldest) = self.messages.get(reach) {
            known.unmark_before(oldest.number);
        }
        // Those whose frames the ledger forgot read unacknowledged (oldest first: frames
        // never go back).
        for message in self.messages.range(reach..) {
            if message.frame >= held_from {
                break;
            }
            known.unmark(message.number);
        }
        known
    }

    /// The ticks of the kept messages that `sent` marks (those that carried a state of one
    /// proxy, as far back as the mask reaches: the latest 64), oldest first.
    pub fn ticks_of(&self, sent: SentMask) -> impl Iterator<Item = u32> + '_ {
        self.messages
            .range(self.messages.len().saturating_sub(64)..)
            .filter(move |m| sent.has(m.number))
            .map(|m| m.tick)
    }

    /// The (tick, frame) of each kept message that carried a state of the proxy whose messages
    /// `sent` marks with a tick strictly between `after` and `before`.
    pub fn frames_between(
        &self,
        sent: SentMask,
        after: u32,
        before: u32,
    ) -> impl Iterator<Item = (u32, u64)> + '_ {
        // (The masks reach the latest 64 messages.)
        self.messages
            .range(self.messages.len().saturating_sub(64)..)
            .filter(move |m| m.tick > after && m.tick < before && sent.has(m.number))
            .map(|m| (m.tick, m.frame))
    }
}
