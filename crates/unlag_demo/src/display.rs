//! Whether a window can open here: the examples draw through X11 only (so they need no system
//! packages), and winit panics with a stack trace when there is no X server. The examples ask
//! first and say what is missing in one line.

/// Why an X11 display named `display` (the `DISPLAY` variable) cannot be reached, if it cannot.
pub fn display_problem(display: Option<&str>) -> Result<(), String> {
    let display = display
        .filter(|d| !d.trim().is_empty())
        .ok_or("DISPLAY is not set")?;
    let (host, rest) = display
        .rsplit_once(':')
        .ok_or_else(|| format!("DISPLAY={display:?} is not HOST:NUMBER"))?;
    let number: u16 = rest
        .split('.')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("DISPLAY={display:?} has no display number"))?;
    let reachable = if host.starts_with('/') {
        // A socket path (XQuartz's launchd socket): the whole variable names the socket.
        std::os::unix::net::UnixStream::connect(display).is_ok() || x_socket_answers(number)
    } else if host.is_empty() || host == "unix" {
        x_socket_answers(number)
    } else {
        use std::net::ToSocketAddrs;
        let port = 6000u16
            .checked_add(number)
            .ok_or_else(|| format!("DISPLAY={display:?}: display number out of range"))?;
        (host, port)
            .to_socket_addrs()
            .ok()
            .into_iter()
            .flatten()
            .any(|a| {
                std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
            })
    };
    if reachable {
        Ok(())
    } else {
        Err(format!("no X server answers on DISPLAY={display}"))
    }
}

/// Whether the local X server `:number` accepts a connection on its socket (the file, or
/// on Linux the abstract one X servers open beside it).
fn x_socket_answers(number: u16) -> bool {
    use std::os::unix::net::UnixStream;
    let path = format!("/tmp/.X11-unix/X{number}");
    if UnixStream::connect(&path).is_ok() {
        return true;
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(address) = std::os::unix::net::SocketAddr::from_abstract_name(path.as_bytes())
            && UnixStream::connect_addr(&address).is_ok()
        {
            return true;
        }
    }
    false
}
