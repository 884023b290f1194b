//! The enrichment's customer rows behind a tokio TCP service on 127.0.0.1, and its async client
//! as a [`FutureAsyncFunction`]: the futures-based counterpart of the SQLite lookup on the
//! blocking pool (see MIGRATION.md, "Futures-based async functions", for why SQLite itself stays
//! on the pool).
//!
//! The protocol is one line each way: the client sends a customer id, the service answers
//! `<name>\t<tier>` or `-` for an unknown id. The service holds the rows the demo database holds
//! ([`Customer::of`]), so both enrichments give the same lines.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use streamtask_core::function::{AsyncError, AsyncFunction};
use streamtask_core::sync::Mutex;
use streamtask_runtime::{FutureAsyncFunction, TokioRuntime};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::data::{Customer, TotalEvent};

/// The customer service, running on a [`TokioRuntime`] until [`shutdown`](Self::shutdown).
pub struct CustomerService {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    acceptor: Option<JoinHandle<()>>,
    runtime: Arc<TokioRuntime>,
}

impl CustomerService {
    /// Serves customers `1..=customers` on an ephemeral port of 127.0.0.1, answering each
    /// request after `latency` (zero: at once).
    ///
    /// # Errors
    ///
    /// The listener's bind error.
    pub fn start(
        runtime: &Arc<TokioRuntime>,
        customers: u32,
        latency: Duration,
    ) -> io::Result<CustomerService> {
        let listener = runtime
            .handle()
            .block_on(TcpListener::bind(("127.0.0.1", 0)))?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let acceptor = runtime.handle().spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => match accepted {
                        // Connection tasks end when their client hangs up, or with the runtime.
                        Ok((stream, _)) => drop(tokio::spawn(serve(stream, customers, latency))),
                        Err(e) => log::warn!("customer service: accept failed: {e}"),
                    },
                }
            }
        });
        Ok(CustomerService {
            addr,
            stop: Some(stop),
            acceptor: Some(acceptor),
            runtime: Arc::clone(runtime),
        })
    }

    /// Where the service listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for the accept loop to end (connections end with their
    /// clients, or when the runtime shuts down). Idempotent.
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = self.runtime.handle().block_on(acceptor);
        }
    }
}

impl Drop for CustomerService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for CustomerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomerService")
            .field("addr", &self.addr)
            .field("running", &self.acceptor.is_some())
            .finish()
    }
}

async fn serve(stream: TcpStream, customers: u32, latency: Duration) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let answer = match line.trim().parse::<u32>() {
            Ok(id) if (1..=customers).contains(&id) => {
                let c = Customer::of(id);
                format!("{}\t{}\n", c.name, c.tier)
            }
            _ => "-\n".to_string(),
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            break;
        }
    }
}

/// One open connection to the service.
type Connection = BufReader<TcpStream>;

/// The enrichment as a futures-based async function: each event's customer is asked of the
/// service at `addr` over a connection checked out of a cache (a new one when none is free, so
/// there are never more connections than calls in flight), and the event becomes its line.
pub fn remote_enrichment(
    runtime: Arc<TokioRuntime>,
    addr: SocketAddr,
) -> impl AsyncFunction<In = TotalEvent, Out = String> + use<> {
    let cache: Arc<Mutex<Vec<Connection>>> = Arc::new(Mutex::new(Vec::new()));
    FutureAsyncFunction::new(runtime, move |event: TotalEvent| {
        let cache = Arc::clone(&cache);
        async move {
            let id = event.customer();
            let checked_out = cache.lock().pop();
            let mut conn = match checked_out {
                Some(conn) => conn,
                None => BufReader::new(TcpStream::connect(addr).await.map_err(|e| {
                    AsyncError::failed(format!("cannot reach the customer service at {addr}: {e}"))
                })?),
            };
            let customer = ask(&mut conn, id).await?;
            // Only a connection that answered goes back: a broken one is dropped.
            cache.lock().push(conn);
            Ok(vec![event.to_line(&customer)])
        }
    })
}

async fn ask(conn: &mut Connection, id: u32) -> Result<Customer, AsyncError> {
    let failed = |e: io::Error| AsyncError::failed(format!("customer lookup failed: {e}"));
    conn.get_mut()
        .write_all(format!("{id}\n").as_bytes())
        .await
        .map_err(failed)?;
    let mut line = String::new();
    if conn.read_line(&mut line).await.map_err(failed)? == 0 {
        return Err(AsyncError::failed("the customer service hung up"));
    }
    let answer = line.trim_end_matches('\n');
    let (name, tier) = answer
        .split_once('\t')
        .ok_or_else(|| AsyncError::failed(format!("customer {id} is not in the database")))?;
    let tier = match tier {
        "bronze" => "bronze",
        "silver" => "silver",
        "gold" => "gold",
        other => return Err(AsyncError::failed(format!("unknown tier {other:?}"))),
    };
    Ok(Customer {
        id,
        name: name.to_string(),
        tier,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::function::{AsyncOutcome, Completion, CompletionSink, ResultFuture};

    struct ToChannel(std::sync::Mutex<std::sync::mpsc::Sender<Completion<String>>>);

    impl CompletionSink<String> for ToChannel {
        fn deliver(&self, c: Completion<String>) {
            let _ = self.0.lock().unwrap().send(c);
        }
    }

    #[test]
    fn the_service_answers_what_the_database_holds() {
        let runtime = TokioRuntime::new("customer-service-test", 1).unwrap();
        let mut service = CustomerService::start(&runtime, 5, Duration::ZERO).unwrap();
        let mut f = remote_enrichment(Arc::clone(&runtime), service.addr());
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = Arc::new(ToChannel(std::sync::Mutex::new(tx)));
        let event = |customer| TotalEvent::Running {
            order: 1,
            customer,
            total_cents: 250,
        };
        f.invoke(&event(3), ResultFuture::new(0, 1, sink.clone()));
        let got = rx.recv().unwrap();
        assert_eq!(
            got.outcome,
            AsyncOutcome::Results(vec![event(3).to_line(&Customer::of(3))])
        );
        f.invoke(&event(9), ResultFuture::new(1, 1, sink));
        let got = rx.recv().unwrap();
        assert!(
            matches!(&got.outcome, AsyncOutcome::Failed(AsyncError::Failed(m)) if m.contains("9 is not")),
            "{:?}",
            got.outcome
        );
        service.shutdown();
        runtime.shutdown();
    }
}
