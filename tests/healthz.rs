//! The kubelet healthz reader against real servers on loopback: `openssl s_server` for https (a
//! real TLS stack with a self-signed certificate, as a kubelet's serving certificate often is),
//! a plain listener for the three outcomes of http. Only a refused connection reads as "down".

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubehash::agent::kubelet_health::{healthz, Health};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn https_healthz_is_read_not_taken_for_down() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=kubelet",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl (Debian's openssl package) is installed");
    assert!(made.success());
    let port = free_port();
    let mut server = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &port.to_string()])
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/healthz");
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = healthz(&url).await;
    while got != Health::Up && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = healthz(&url).await;
    }
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(got, Health::Up);
    assert_eq!(
        healthz(&url).await,
        Health::Refused,
        "nothing listens any more"
    );
}

#[tokio::test]
async fn http_healthz_up_refused_and_unknown() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().take(3).enumerate() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let reply: &[u8] = match n {
                0 => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                1 => b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
                _ => b"garbage\r\n\r\n",
            };
            let _ = s.write_all(reply);
        }
    });
    let url = format!("http://{addr}/healthz");
    assert_eq!(healthz(&url).await, Health::Up);
    assert!(matches!(healthz(&url).await, Health::Unknown(w) if w.contains("500")));
    assert!(matches!(healthz(&url).await, Health::Unknown(_)));
    let closed = format!("http://127.0.0.1:{}/healthz", free_port());
    assert_eq!(healthz(&closed).await, Health::Refused);
    assert!(matches!(healthz("not a url").await, Health::Unknown(_)));
}
