//! A stream of delay reports (postcard, as lightyear hands them to the server), each arriving
//! at a server time the input advances, taken by the server's own [`ReportState::take`]: never
//! a panic; a refused report changes nothing but the refusal counters; the figures the shot
//! checks read stay finite and within their bounds whatever the client claims.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_net::{DelayReport, MAX_REPORTED_DELAY, RemoteClientClock, ReportContext, ReportState};

fuzz_target!(|data: &[u8]| {
    let mut remote = RemoteClientClock::default();
    remote.rtt = 0.1;
    remote.jitter = 0.01;
    let mut state = ReportState::default();
    let (mut server_time, mut real_time) = (100.0_f64, 10.0_f64);
    let mut rest = data;
    // Each step: one byte of elapsed time (0-255 ms), then a report.
    while let Some((&step, tail)) = rest.split_first() {
        let Ok((report, tail)) = postcard::take_from_bytes::<DelayReport>(tail) else {
            break;
        };
        rest = tail;
        server_time += f64::from(step) / 1000.0;
        real_time += f64::from(step) / 1000.0;
        let at = ReportContext {
            server_time,
            real_time,
            frame: 1.0 / 60.0,
            long_frame: 1.0 / 60.0,
            interval: 0.05,
            slower: None,
        };
        let remote_before = remote.clone();
        if state.take(&mut remote, &report, at).is_err() {
            let mut expected = remote_before.clone();
            expected.rejected_reports += 1;
            assert_eq!(format!("{remote:?}"), format!("{expected:?}"), "refused, yet changed");
        }
        // Its echo, timed from a beat sent 0.2 s before: taken or not, the window's round
        // trip stays finite and non-negative.
        if let Some(echo) = report.echo {
            remote.take_echo(server_time, echo, Some(server_time - 0.2));
            let rtt = remote.window_rtt(server_time - 2.0, server_time);
            assert!(rtt.is_finite() && rtt >= 0.0, "{rtt}");
        }
        assert!(remote.interpolation_delay.is_finite());
        assert!((0.0..=MAX_REPORTED_DELAY).contains(&remote.interpolation_delay));
        assert!(remote.delay_cap.is_finite() && remote.delay_cap >= 0.0);
        assert!(remote.client_frame.is_finite() && remote.client_frame >= 0.0);
        if let Some((least, most)) = remote.view_lag_range(server_time, 1.0 / 60.0) {
            assert!(least.is_finite() && most.is_finite() && least <= most);
        }
    }
});
