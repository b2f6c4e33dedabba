//! The report as text: a two-column Markdown table, or one JSON object.

use crate::Report;
use std::collections::BTreeMap;

impl Report {
    /// The figures as a two-column Markdown table.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String)> = Vec::new();
        let mut row = |figure: &str, value: String| rows.push((figure.to_owned(), value));
        self.match_rows(&mut row);
        self.movement_rows(&mut row);
        self.proxy_rows(&mut row);
        self.combat_rows(&mut row);
        self.link_rows(&mut row);
        self.server_rows(&mut row);
        let mut out = String::from("| figure | value |\n| --- | --- |\n");
        for (figure, value) in rows {
            out.push_str(&format!("| {figure} | {value} |\n"));
        }
        out
    }

    /// The match: its size, conditions, seed, and the clients' and server's machines.
    fn match_rows(&self, row: &mut impl FnMut(&str, String)) {
        let o = &self.options;
        let get = |k: &str| o.get(k).cloned().unwrap_or_default();
        row(
            "match",
            format!(
                "{} bots, {} clients, {} s, RTT {} ms, jitter {} ms, loss {} % (bursts of {}), {} Hz, {}, seed {}",
                get("bots"),
                get("clients"),
                get("seconds"),
                get("rtt_ms"),
                get("jitter_ms"),
                get("loss_percent"),
                get("burst"),
                get("update_rate_hz"),
                get("smoothing"),
                get("seed")
            ),
        );
        row(
            "clients and server",
            format!(
                "client frames: {} fps, {} % jitter, hitches {}, cold start {}, a shot every {} s \
                 ({}); {} server, move playout {}",
                get("client_fps"),
                get("frame_jitter_percent"),
                get("hitches"),
                get("cold_start"),
                get("fire_interval"),
                get("weapon"),
                get("server"),
                get("playout")
            ),
        );
    }

    /// Movement: corrections per minute per client, and how far they moved the character.
    fn movement_rows(&self, row: &mut impl FnMut(&str, String)) {
        row(
            "corrections / min per client",
            self.corrections_per_min
                .iter()
                .map(|c| format!("{c:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        row(
            "correction distance (max, p99)",
            format!(
                "{:.3} m, {:.3} m ({} corrections)",
                self.correction_distance_m.max,
                self.correction_distance_m.p99,
                self.correction_distance_m.count
            ),
        );
    }

    /// Smoothing and time: the proxies' error, jumps, the clocks, the delay, starved frames and the peeker's advantage.
    fn proxy_rows(&self, row: &mut impl FnMut(&str, String)) {
        row(
            "proxy error at view time (RMS, p99)",
            format!(
                "{:.1} mm, {:.1} mm ({} proxy frames)",
                self.proxy_error_m.rms * 1e3,
                self.proxy_error_m.p99 * 1e3,
                self.proxy_error_m.count
            ),
        );
        row(
            "largest per-frame jump of the error (its growth beyond the character's own motion; \
             beyond its motion on the server's track alone)",
            format!(
                "{:.1} mm ({:.1} mm; {:.1} mm)",
                self.proxy_max_jump_m * 1e3,
                self.proxy_max_pop_m * 1e3,
                self.proxy_max_track_pop_m * 1e3
            ),
        );
        row(
            "clients' server-time estimate less the truth (mean, least, most)",
            format!(
                "{:.1} ms, {:.1} ms, {:.1} ms",
                self.clock_error_ms[0], self.clock_error_ms[1], self.clock_error_ms[2]
            ),
        );
        row(
            "interpolation delay (mean, max)",
            format!(
                "{:.1} ms, {:.1} ms",
                self.interpolation_delay_ms.mean, self.interpolation_delay_ms.max
            ),
        );
        row(
            "proxy frames held or extrapolated",
            format!("{:.2} %", self.starved_share * 100.0),
        );
        let p = &self.peek;
        row(
            "peeker's advantage (mean, p95)",
            format!(
                "{:.1} ms, {:.1} ms over {} peeks; parts: one-way up {:.1} + input wait {:.1} + up-link losses {:.1} + playout {:.1} + tick wait {:.1} + one-way down {:.1} + holder's delay {:.1} + holder starved {:.1} + frames {:.1} = {:.1} ms (state interval {:.1} ms, covered by the delay); measured up to the server's track {:.1} ms against its parts' {:.1}",
                p.advantage_ms.mean,
                p.advantage_ms.p95,
                p.peeks,
                p.one_way_up_ms,
                p.input_buffer_ms,
                p.loss_hold_ms,
                p.playout_ms,
                p.tick_wait_ms,
                p.one_way_down_ms,
                p.holder_delay_ms,
                p.down_starved_ms,
                p.frames_ms,
                p.parts_ms,
                p.send_interval_ms,
                p.up_measured_ms,
                p.up_parts_ms
            ),
        );
    }

    /// Combat: hit agreement per weapon, projectiles, refusals, claims judged other than drawn, rejected moves and the cheat.
    fn combat_rows(&self, row: &mut impl FnMut(&str, String)) {
        for a in &self.agreement {
            row(
                &format!("hit agreement: {}", a.weapon),
                format!(
                    "seen hits confirmed {:.2} % ({}/{}), seen misses confirmed {:.2} % ({}/{}), headshots {}/{}, {} shots",
                    a.hit_rate() * 100.0,
                    a.hits_confirmed,
                    a.seen_hits,
                    a.miss_rate() * 100.0,
                    a.misses_confirmed,
                    a.seen_misses,
                    a.headshots_agree,
                    a.headshots_seen,
                    a.shots
                ),
            );
        }
        let p = &self.projectiles;
        row(
            "projectiles",
            format!(
                "{} launched, {} impacts, {} direct hits, {} splash hits",
                p.launched, p.impacts, p.direct_hits, p.splash_hits
            ),
        );
        row("clients disconnected", self.disconnects.to_string());
        row(
            "rejected shots by reason",
            if self.rejected.is_empty() {
                "none".into()
            } else {
                self.rejected
                    .iter()
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        row(
            "claims not judged as drawn",
            format!(
                "{} held past their extrapolation (never hits), {} eases no starved frame explains (judged on the curve)",
                self.stale_claims, self.unexplained_eases
            ),
        );
        row(
            "claims on slower proxies",
            format!(
                "{} judged earlier than their shot, as drawn with a longer delay",
                self.claims_behind
            ),
        );
        row(
            "rejected moves, speed hacks flagged",
            format!("{}, {}", self.movement_rejected, self.speed_hacks_flagged),
        );
        let w = &self.warm_up;
        row(
            "before the measured span",
            format!(
                "{:.0} s: {} corrections, {} rejected moves, {} speed hacks flagged, {} shots refused",
                w.seconds,
                w.corrections.iter().sum::<u64>(),
                w.movement_rejected,
                w.speed_hacks_flagged,
                w.shots_refused
            ),
        );
        if let Some(cheat) = &self.cheat {
            row(
                "cheat (client 0)",
                format!(
                    "{cheat}: {} cheating shots sent, {} shots refused, {} speed hacks flagged, {:.1} corrections/min, {} held claims never hits, {} eases judged as none",
                    self.cheating_shots,
                    self.rejected.values().sum::<u64>(),
                    self.speed_hacks_flagged,
                    self.corrections_per_min.first().copied().unwrap_or(0.0),
                    self.stale_claims,
                    self.unexplained_eases
                ),
            );
        }
    }

    /// Bandwidth per client, up and down, on the wire and by message kind.
    fn link_rows(&self, row: &mut impl FnMut(&str, String)) {
        // Bytes, then messages a second: a kind's framing is paid per message.
        let kinds = |m: &BTreeMap<String, f64>, counts: &BTreeMap<String, f64>| {
            let mut v: Vec<_> = m.iter().collect();
            v.sort_by(|a, b| b.1.total_cmp(a.1));
            v.iter()
                .map(|(k, b)| {
                    let n = counts.get(*k).copied().unwrap_or(0.0);
                    format!("{k} {b:.0} in {n:.1}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        row(
            "upstream bytes/s per client",
            format!(
                "{:.0} on the wire in {:.1} datagrams/s; payload, bytes/s in messages/s: {}",
                self.bytes_up_per_sec,
                self.datagrams_up_per_sec,
                kinds(&self.up_by_kind, &self.up_messages_by_kind)
            ),
        );
        row(
            "downstream bytes/s per client",
            format!(
                "{:.0} on the wire in {:.1} datagrams/s; payload, bytes/s in messages/s: {}; proxy states off their \
                 grids {:.1}/s, as deltas {:.1}/s",
                self.bytes_down_per_sec,
                self.datagrams_down_per_sec,
                kinds(&self.down_by_kind, &self.down_messages_by_kind),
                self.off_grid_states_per_sec,
                self.delta_states_per_sec
            ),
        );
    }

    /// The server's cost per tick, the validation methods compared, and the run's speed.
    fn server_rows(&self, row: &mut impl FnMut(&str, String)) {
        let c = &self.server_cost;
        for (part, stat) in [
            ("movement", &c.movement_us),
            ("history recording", &c.record_us),
            ("shots and rewinds", &c.combat_us),
            ("proxy states", &c.proxy_states_us),
        ] {
            row(
                &format!("server µs per tick: {part} (mean, p99)"),
                format!("{:.1}, {:.1}", stat.mean, stat.p99),
            );
        }
        row(
            "server µs per tick: receiving, sending (means)",
            format!("{:.1}, {:.1}", c.receive_us.mean, c.send_us.mean),
        );
        let p = &c.send_parts;
        row(
            "server µs per tick, sending: replication, messages, transport, netcode, link (means)",
            format!(
                "{:.1}, {:.1}, {:.1}, {:.1}, {:.1}",
                p.replication_us.mean,
                p.messages_us.mean,
                p.transport_us.mean,
                p.netcode_us.mean,
                p.link_us.mean
            ),
        );
        row(
            "server µs per tick: whole update (mean, p99)",
            format!("{:.1}, {:.1}", c.total_us.mean, c.total_us.p99),
        );
        for m in &self.validation {
            row(
                &format!("validation: {}", m.method),
                format!(
                    "seen hits confirmed {:.2} % ({}/{}), seen misses confirmed {:.2} % ({}/{})",
                    m.hit_rate() * 100.0,
                    m.hits_confirmed,
                    m.seen_hits,
                    m.miss_rate() * 100.0,
                    m.misses_confirmed,
                    m.seen_misses
                ),
            );
        }
        row(
            "simulated seconds per wall second",
            format!("{:.1}", self.simulated_per_wall_second),
        );
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data")
    }
}
