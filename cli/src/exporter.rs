//! Serving a [`MetricsRegistry`] while jobs run: an HTTP endpoint a scraper reads (`GET
//! /metrics`) and a file rewritten on an interval, for runs without a scraper.
//!
//! # Threads and shutdown
//!
//! Each part runs on a thread of its own, and [`MetricsExporter::stop`] (or dropping the
//! exporter) joins both:
//!
//! 1. The endpoint's thread blocks in `accept` and answers one connection at a time (a scrape
//!    is one small response; a client gets 2 s to send its request and take the answer). To
//!    stop it, the stop flag is set and the exporter connects to the listener itself: `accept`
//!    returns, the thread sees the flag and ends, closing the listener.
//! 2. The file's thread waits on a channel for the interval; a message (or the sender's drop)
//!    ends the wait early, and the thread writes the file a last time before it ends, so the
//!    file holds the values at the end of the run.
//!
//! The HTTP part is std's `TcpListener` and about forty lines of request handling: a scrape
//! endpoint needs one route, no keep-alive and no TLS, and a server crate would bring its
//! dependencies (and for most, an async runtime) into the command for that.
//!
//! The file is written whole to a temporary file beside it and renamed over it, so a reader
//! never sees half an exposition.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use streamtask::{MetricsRegistry, OPENMETRICS_CONTENT_TYPE};

/// How long a client of the endpoint may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause after a failed `accept` before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The longest request head the endpoint reads.
const MAX_REQUEST: usize = 8 * 1024;

/// What to serve, and where.
#[derive(Debug, Clone, Default)]
pub struct ExporterConfig {
    /// Serve `GET /metrics` on this address (port 0: a free port, see
    /// [`MetricsExporter::local_addr`]).
    pub addr: Option<SocketAddr>,
    /// Whether `addr` may be other than a loopback address.
    pub allow_remote: bool,
    /// Rewrite this file every `interval` and once at the end.
    pub file: Option<PathBuf>,
    /// How often `file` is rewritten.
    pub interval: Duration,
}

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// The endpoint's address is reachable from other machines and that was not allowed.
    #[error(
        "--metrics-addr {addr} is not a loopback address: anyone who can reach it could read \
         the job's metrics; give 127.0.0.1:PORT, or add --metrics-allow-remote to serve them \
         there anyway"
    )]
    NotLoopback {
        /// The address given.
        addr: SocketAddr,
    },
    /// The endpoint's address could not be bound.
    #[error(
        "--metrics-addr {addr}: cannot listen there ({source}); choose another port (0 picks a free one)"
    )]
    Bind {
        /// The address given.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// The metrics file could not be written.
    #[error("--metrics-file {}: cannot write it ({source}); give a path in a writable directory", path.display())]
    File {
        /// The file given.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The rewrite interval is zero.
    #[error("--metrics-interval-ms must be at least 1")]
    ZeroInterval,
}

/// The running endpoint and file writer of one [`MetricsRegistry`]; stops when dropped.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use std::time::Duration;
/// use streamtask::MetricsRegistry;
/// use streamtask_cli::exporter::{ExporterConfig, MetricsExporter};
///
/// let config = ExporterConfig {
///     addr: Some("127.0.0.1:0".parse().unwrap()),
///     interval: Duration::from_secs(1),
///     ..ExporterConfig::default()
/// };
/// let exporter = MetricsExporter::start(MetricsRegistry::new(), &config).unwrap();
/// let addr = exporter.local_addr().unwrap();
/// let mut scrape = std::net::TcpStream::connect(addr).unwrap();
/// scrape.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
/// let mut answer = String::new();
/// scrape.read_to_string(&mut answer).unwrap();
/// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
/// assert!(answer.ends_with("# EOF\n"));
/// exporter.stop();
/// ```
#[derive(Debug)]
pub struct MetricsExporter {
    registry: MetricsRegistry,
    endpoint: Option<Endpoint>,
    file: Option<FileWriter>,
}

impl MetricsExporter {
    /// Starts what `config` asks for: the endpoint's listener is bound and the file written
    /// once before this returns.
    ///
    /// # Errors
    ///
    /// [`ExporterError::NotLoopback`] for a non-loopback address without
    /// [`allow_remote`](ExporterConfig::allow_remote), [`ExporterError::Bind`] if the address
    /// cannot be bound, [`ExporterError::File`] if the file cannot be written,
    /// [`ExporterError::ZeroInterval`] for a zero interval with a file.
    pub fn start(
        registry: MetricsRegistry,
        config: &ExporterConfig,
    ) -> Result<MetricsExporter, ExporterError> {
        if let Some(addr) = config.addr
            && !addr.ip().is_loopback()
            && !config.allow_remote
        {
            return Err(ExporterError::NotLoopback { addr });
        }
        if config.file.is_some() && config.interval.is_zero() {
            return Err(ExporterError::ZeroInterval);
        }
        let file = match &config.file {
            Some(path) => Some(FileWriter::start(&registry, path, config.interval)?),
            None => None,
        };
        let endpoint = match config.addr {
            Some(addr) => Some(Endpoint::start(&registry, addr)?),
            None => None,
        };
        Ok(MetricsExporter {
            registry,
            endpoint,
            file,
        })
    }

    /// The registry served.
    pub fn registry(&self) -> &MetricsRegistry {
        &self.registry
    }

    /// The address the endpoint listens on (the port chosen for port 0); `None` without one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().map(|e| e.addr)
    }

    /// Stops the endpoint, writes the file a last time, and joins both threads.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(endpoint) = self.endpoint.take() {
            endpoint.stop();
        }
        if let Some(file) = self.file.take() {
            file.stop();
        }
    }
}

impl Drop for MetricsExporter {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The HTTP endpoint's thread.
#[derive(Debug)]
struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Endpoint {
    fn start(registry: &MetricsRegistry, addr: SocketAddr) -> Result<Endpoint, ExporterError> {
        let bind = |source| ExporterError::Bind { addr, source };
        let listener = TcpListener::bind(addr).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            let registry = registry.clone();
            std::thread::Builder::new()
                .name("metrics-endpoint".into())
                .spawn(move || serve(&listener, &registry, &stop))
                .map_err(bind)?
        };
        Ok(Endpoint { addr, stop, thread })
    }

    fn stop(self) {
        // Release: the thread that sees the flag after its accept also sees everything before.
        self.stop.store(true, Ordering::Release);
        // Wake the blocked accept with a connection of our own; an unspecified address
        // (0.0.0.0, ::) is reached through the loopback address of its family.
        let wake = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port())
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.addr.port())
            }
            _ => self.addr,
        };
        match TcpStream::connect_timeout(&wake, CLIENT_TIMEOUT) {
            Ok(_) => {
                if self.thread.join().is_err() {
                    log::error!("the metrics endpoint's thread panicked");
                }
            }
            // Without the wake-up the thread stays in accept until the process ends; joining
            // it would hang the command.
            Err(e) => log::error!(
                "cannot wake the metrics endpoint at {wake} to stop it ({e}); it ends with \
                 the process"
            ),
        }
    }
}

/// The endpoint's loop: one connection at a time until the stop flag is set.
fn serve(listener: &TcpListener, registry: &MetricsRegistry, stop: &AtomicBool) {
    for connection in listener.incoming() {
        // Acquire: pairs with the store in `Endpoint::stop`.
        if stop.load(Ordering::Acquire) {
            return;
        }
        match connection {
            Ok(stream) => {
                if let Err(e) = answer(stream, registry) {
                    log::debug!("metrics endpoint: a client's request failed: {e}");
                }
            }
            Err(e) => {
                log::debug!("metrics endpoint: accept failed: {e}");
                // A lasting error (no file descriptors left) would otherwise spin this thread.
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Reads one request and answers it: the exposition for `GET /metrics`, 404 or 405 else.
fn answer(mut stream: TcpStream, registry: &MetricsRegistry) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::new();
    let mut chunk = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut request_line = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (request_line.next(), request_line.next());
    let path = target.map(|t| t.split('?').next().unwrap_or(t));
    let (status, content_type, body) = match (method, path) {
        (Some("GET"), Some("/metrics")) => ("200 OK", OPENMETRICS_CONTENT_TYPE, registry.render()),
        (Some("GET"), _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics is served\n".to_string(),
        ),
    };
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// The file writer's thread.
#[derive(Debug)]
struct FileWriter {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl FileWriter {
    fn start(
        registry: &MetricsRegistry,
        path: &Path,
        interval: Duration,
    ) -> Result<FileWriter, ExporterError> {
        let file_error = |source| ExporterError::File {
            path: path.to_path_buf(),
            source,
        };
        // Once now, so a path that cannot be written is refused before any job runs.
        write_atomically(path, &registry.render()).map_err(file_error)?;
        let (stop, stopped) = mpsc::channel();
        let thread = {
            let registry = registry.clone();
            let path = path.to_path_buf();
            std::thread::Builder::new()
                .name("metrics-file".into())
                .spawn(move || {
                    let mut warned = false;
                    let mut write = || {
                        if let Err(e) = write_atomically(&path, &registry.render())
                            && !std::mem::replace(&mut warned, true)
                        {
                            log::warn!("cannot write the metrics to {}: {e}", path.display());
                        }
                    };
                    // A message or the sender's drop ends the wait: then the last write.
                    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval)
                    {
                        write();
                    }
                    write();
                })
                .map_err(file_error)?
        };
        Ok(FileWriter { stop, thread })
    }

    fn stop(self) {
        // The thread may have ended already only by a panic, which the join reports.
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            log::error!("the metrics file's thread panicked");
        }
    }
}

/// Writes `text` to a temporary file beside `path` and renames it over `path`.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut temporary = name.to_os_string();
    temporary.push(".tmp");
    let temporary = path.with_file_name(format!(".{}", temporary.to_string_lossy()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    fn endpoint() -> MetricsExporter {
        let config = ExporterConfig {
            addr: Some("127.0.0.1:0".parse().unwrap()),
            ..ExporterConfig::default()
        };
        MetricsExporter::start(MetricsRegistry::new(), &config).unwrap()
    }

    #[test]
    fn metrics_are_served_with_the_openmetrics_type() {
        let exporter = endpoint();
        let answer = get(
            exporter.local_addr().unwrap(),
            "GET /metrics HTTP/1.1\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}\r\n")));
        assert!(answer.ends_with("# EOF\n"));
        exporter.stop();
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        let exporter = endpoint();
        let addr = exporter.local_addr().unwrap();
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        let post = get(addr, "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(post.contains("Allow: GET\r\n"));
        exporter.stop();
    }

    #[test]
    fn a_stopped_endpoint_no_longer_listens() {
        let exporter = endpoint();
        let addr = exporter.local_addr().unwrap();
        exporter.stop();
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn a_remote_address_needs_to_be_allowed() {
        let mut config = ExporterConfig {
            addr: Some("0.0.0.0:0".parse().unwrap()),
            ..ExporterConfig::default()
        };
        let refused = MetricsExporter::start(MetricsRegistry::new(), &config).unwrap_err();
        assert!(
            matches!(refused, ExporterError::NotLoopback { .. }),
            "{refused}"
        );
        config.allow_remote = true;
        let exporter = MetricsExporter::start(MetricsRegistry::new(), &config).unwrap();
        assert!(exporter.local_addr().unwrap().ip().is_unspecified());
        exporter.stop();
    }

    #[test]
    fn the_file_is_written_at_start_and_at_the_end_without_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.txt");
        let config = ExporterConfig {
            file: Some(path.clone()),
            interval: Duration::from_secs(3600),
            ..ExporterConfig::default()
        };
        let exporter = MetricsExporter::start(MetricsRegistry::new(), &config).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("# EOF\n"));
        std::fs::remove_file(&path).unwrap();
        exporter.stop();
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("# EOF\n"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "only the file itself: {names:?}");
    }
}
