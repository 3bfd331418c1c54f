//! A kubelet under the test's control, for the agent: a process named `kubelet` (a copy of
//! `sleep`), a healthz endpoint over real HTTP on a fixed loopback port that is really closed when
//! the kubelet stops (connections are refused, as when the kubelet exits), and a kubelet binary
//! on disk whose `--version` the test sets (as the operator's binary swap does).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the healthz answers while the kubelet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Healthz {
    /// `200 ok`.
    Ok,
    /// `200 ok`, its status line split over two TCP segments 50 ms apart.
    Split,
    /// An answer only after this long.
    Slow(Duration),
    /// This status.
    Status(u16),
}

pub struct TestKubelet {
    dir: PathBuf,
    port: u16,
    process: Option<Child>,
    server: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    pub mode: Arc<Mutex<Healthz>>,
}

impl TestKubelet {
    /// A stopped kubelet whose binary reports `version`.
    pub fn new(dir: &Path, version: &str) -> TestKubelet {
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let k = TestKubelet {
            dir: dir.to_path_buf(),
            port,
            process: None,
            server: None,
            mode: Arc::new(Mutex::new(Healthz::Ok)),
        };
        k.set_binary(version);
        k
    }

    /// The binary path to give the agent (`--kubelet-binary`).
    pub fn binary(&self) -> PathBuf {
        self.dir.join("bin/kubelet")
    }

    /// Swaps the binary on disk for one that reports `version` (written aside, then renamed).
    pub fn set_binary(&self, version: &str) {
        let tmp = self.dir.join("bin/.kubelet.new");
        std::fs::write(&tmp, format!("#!/bin/sh\necho \"Kubernetes {version}\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, self.binary()).unwrap();
    }

    pub fn healthz_url(&self) -> String {
        format!("http://127.0.0.1:{}/healthz", self.port)
    }

    /// Starts the process and the healthz.
    pub fn start(&mut self) {
        self.start_process();
        self.start_healthz();
    }

    /// Stops both: the process is gone and the healthz port refuses connections.
    pub fn stop(&mut self) {
        self.stop_process();
        self.stop_healthz();
    }

    pub fn start_process(&mut self) {
        if self.process.is_none() {
            let exe = self.dir.join("kubelet");
            if !exe.exists() {
                std::fs::copy("/bin/sleep", &exe).unwrap();
            }
            self.process = Some(Command::new(&exe).arg("3600").spawn().unwrap());
        }
    }

    pub fn stop_process(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    pub fn start_healthz(&mut self) {
        if self.server.is_some() {
            return;
        }
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, mode) = (stop.clone(), self.mode.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let mode = *mode.lock().unwrap();
                        std::thread::spawn(move || {
                            let _ = stream.set_nonblocking(false);
                            let mut buf = [0u8; 1024];
                            let _ = stream.read(&mut buf);
                            let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                            match mode {
                                Healthz::Ok => {
                                    let _ = stream.write_all(ok.as_bytes());
                                }
                                Healthz::Split => {
                                    let _ = stream.write_all(&ok.as_bytes()[..10]);
                                    let _ = stream.flush();
                                    std::thread::sleep(Duration::from_millis(50));
                                    let _ = stream.write_all(&ok.as_bytes()[10..]);
                                }
                                Healthz::Slow(d) => {
                                    std::thread::sleep(d);
                                    let _ = stream.write_all(ok.as_bytes());
                                }
                                Healthz::Status(code) => {
                                    let _ = write!(stream, "HTTP/1.1 {code} X\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndown");
                                }
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        self.server = Some((stop, handle));
    }

    pub fn stop_healthz(&mut self) {
        if let Some((stop, handle)) = self.server.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = handle.join();
        }
    }
}

impl Drop for TestKubelet {
    fn drop(&mut self) {
        self.stop();
    }
}
