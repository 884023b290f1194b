//! Channels between tasks: the bounded channel and its availability notices, the input gates
//! (round robin, barrier alignment, watermark combination, end of input, failures) and the
//! record writer (partitioning, broadcasting, backpressure, availability).

use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::atomic::{AtomicUsize, Ordering};
use streamtask_core::sync::thread;
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamElement, StreamRecord, StreamStatus, Watermark,
    operator::Output, operator::TaskOutput, task::TaskError,
};
use streamtask_runtime::channel::{
    ChannelError, GateError, InputClosed, InputEvent, InputGate, Partitioner, RecordWriter,
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
    TwoInputGate, TwoInputRecord, WriterError, bounded,
};

/// Counts how often it was woken.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl CountingWaker {
    fn new() -> (Arc<Self>, Waker) {
        let counter = Arc::new(CountingWaker::default());
        let waker = Waker::from(Arc::clone(&counter));
        (counter, waker)
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn rec<T>(value: T) -> StreamElement<T> {
    StreamElement::Record(StreamRecord::new(value))
}

fn barrier(id: u64) -> CheckpointBarrier {
    CheckpointBarrier::new(id, 0)
}

fn bar<T>(id: u64) -> StreamElement<T> {
    StreamElement::Barrier(barrier(id))
}

fn wm<T>(t: i64) -> StreamElement<T> {
    StreamElement::Watermark(Watermark(t))
}

fn record<T>(value: T) -> InputEvent<StreamRecord<T>> {
    InputEvent::Record(StreamRecord::new(value))
}

/// `n` channels of capacity 16 and a gate over them.
fn gate<T>(
    n: usize,
) -> (
    Vec<streamtask_runtime::channel::Sender<StreamElement<T>>>,
    InputGate<T>,
) {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| bounded(16).unwrap()).unzip();
    (senders, InputGate::new(receivers).unwrap())
}

/// Polls until `Nothing` or `EndOfInput` (included), collecting the events.
fn drain<T>(gate: &mut InputGate<T>) -> Vec<InputEvent<StreamRecord<T>>> {
    let mut events = Vec::new();
    loop {
        let event = gate.poll_next().unwrap();
        let stop = matches!(event, InputEvent::Nothing | InputEvent::EndOfInput);
        events.push(event);
        if stop {
            return events;
        }
    }
}

#[test]
fn smoke() {
    let (tx, rx) = bounded(4).unwrap();
    let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
    writer.collect(StreamRecord::new(1)).unwrap();
    writer.broadcast_barrier(barrier(1)).unwrap();
    writer.end_of_input().unwrap();
    let mut gate = InputGate::new(vec![rx]).unwrap();
    assert_eq!(
        drain(&mut gate),
        [
            record(1),
            InputEvent::Barrier(barrier(1)),
            InputEvent::Watermark(Watermark::MAX),
            InputEvent::EndOfInput
        ]
    );
}

// ---- the bounded channel ----

#[test]
fn elements_arrive_in_the_order_they_were_sent() {
    let (tx, rx) = bounded(8).unwrap();
    for i in 0..8 {
        tx.try_send(i).unwrap();
    }
    assert_eq!(rx.len(), 8);
    let got: Vec<_> = (0..8).map(|_| rx.try_recv().unwrap()).collect();
    assert_eq!(got, (0..8).collect::<Vec<_>>());
    assert!(rx.is_empty());
}

#[test]
fn zero_capacity_is_an_error_naming_the_fix() {
    let err = bounded::<u8>(0).unwrap_err();
    assert_eq!(err, ChannelError::ZeroCapacity);
    assert!(err.to_string().contains("capacity >= 1"), "{err}");
}

#[test]
fn a_full_channel_refuses_and_hands_the_value_back() {
    let (tx, rx) = bounded(2).unwrap();
    tx.try_send("a").unwrap();
    tx.try_send("b").unwrap();
    assert!(tx.is_full());
    let err = tx.try_send("c").unwrap_err();
    assert!(err.is_full());
    assert_eq!(err.into_inner(), "c");
    let err = tx.send_timeout("d", Duration::from_millis(1)).unwrap_err();
    assert!(matches!(err, SendTimeoutError::Timeout("d")));
    assert_eq!(rx.try_recv(), Ok("a"));
    assert!(!tx.is_full());
    tx.try_send("c").unwrap();
}

#[test]
fn send_blocks_on_a_full_channel_until_a_receive_frees_space() {
    let (tx, rx) = bounded(1).unwrap();
    tx.send(1).unwrap();
    assert!(tx.try_send(0).unwrap_err().is_full());
    let producer = thread::spawn(move || {
        tx.send(2).unwrap();
        tx.send(3).unwrap();
    });
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.recv(), Ok(3));
    producer.join().unwrap();
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn recv_timeout_on_an_empty_channel_times_out() {
    let (tx, rx) = bounded::<u8>(1).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout)
    );
    tx.send(7).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Ok(7));
    drop(tx);
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Disconnected)
    );
}

#[test]
fn dropping_the_receiver_fails_sends_and_hands_the_payload_back() {
    let (tx, rx) = bounded(1).unwrap();
    drop(rx);
    assert!(tx.is_disconnected());
    assert!(!tx.is_full());
    let err = tx.try_send(String::from("x")).unwrap_err();
    assert!(err.is_disconnected());
    assert_eq!(err.into_inner(), "x");
    let SendError(back) = tx.send(String::from("y")).unwrap_err();
    assert_eq!(back, "y");
    let err = tx
        .send_timeout(String::from("z"), Duration::from_secs(30))
        .unwrap_err();
    assert_eq!(err.into_inner(), "z");
}

#[test]
fn dropping_the_receiver_drops_the_queued_elements() {
    let payload = Arc::new(());
    let (tx, rx) = bounded(4).unwrap();
    tx.send(Arc::clone(&payload)).unwrap();
    tx.send(Arc::clone(&payload)).unwrap();
    assert_eq!(Arc::strong_count(&payload), 3);
    drop(rx);
    assert_eq!(Arc::strong_count(&payload), 1);
    assert!(tx.is_empty());
}

#[test]
fn the_receiver_drains_what_is_left_after_every_sender_dropped() {
    let (tx, rx) = bounded(4).unwrap();
    let tx2 = tx.clone();
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    drop(tx);
    assert!(!rx.is_disconnected());
    drop(tx2);
    assert!(rx.is_disconnected());
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn a_blocked_recv_returns_when_the_last_sender_drops() {
    let (tx, rx) = bounded::<u8>(1).unwrap();
    let consumer = thread::spawn(move || rx.recv());
    drop(tx);
    assert_eq!(consumer.join().unwrap(), Err(RecvError));
}

#[test]
fn a_blocked_send_returns_the_payload_when_the_receiver_drops() {
    let (tx, rx) = bounded(1).unwrap();
    tx.send(1).unwrap();
    let producer = thread::spawn(move || tx.send(2));
    // Whether the producer already waits or not, it must fail and hand 2 back.
    drop(rx);
    assert_eq!(producer.join().unwrap().unwrap_err().into_inner(), 2);
}

#[test]
fn the_data_waker_fires_once_when_data_arrives_after_an_empty_try() {
    let (tx, rx) = bounded(4).unwrap();
    let (count, waker) = CountingWaker::new();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    rx.register_data_waker(&waker);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(count.count(), 0, "nothing arrived yet");
    tx.send(1).unwrap();
    assert_eq!(count.count(), 1);
    tx.send(2).unwrap();
    assert_eq!(
        count.count(),
        1,
        "a notice fires once; register again to hear more"
    );
    // Registering while data is queued wakes at once.
    rx.register_data_waker(&waker);
    assert_eq!(count.count(), 2);
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
}

#[test]
fn the_data_waker_fires_when_the_last_sender_drops() {
    let (tx, rx) = bounded::<u8>(4).unwrap();
    let (count, waker) = CountingWaker::new();
    rx.register_data_waker(&waker);
    let tx2 = tx.clone();
    drop(tx);
    assert_eq!(count.count(), 0);
    drop(tx2);
    assert_eq!(count.count(), 1);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    rx.register_data_waker(&waker);
    assert_eq!(
        count.count(),
        2,
        "registering on a disconnected channel wakes at once"
    );
}

#[test]
fn only_the_latest_data_waker_is_kept() {
    let (tx, rx) = bounded(4).unwrap();
    let (first, first_waker) = CountingWaker::new();
    let (second, second_waker) = CountingWaker::new();
    rx.register_data_waker(&first_waker);
    rx.register_data_waker(&second_waker);
    tx.send(1).unwrap();
    assert_eq!((first.count(), second.count()), (0, 1));
}

#[test]
fn the_space_waker_fires_once_when_space_frees_after_a_full_try() {
    let (tx, rx) = bounded(1).unwrap();
    let (count, waker) = CountingWaker::new();
    tx.send(1).unwrap();
    assert!(tx.try_send(2).unwrap_err().is_full());
    tx.register_space_waker(&waker);
    tx.register_space_waker(&waker); // the same waker is kept once
    assert!(tx.try_send(2).unwrap_err().is_full());
    assert_eq!(count.count(), 0);
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(count.count(), 1);
    tx.send(2).unwrap();
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(count.count(), 1, "a notice fires once");
    // Registering while there is space wakes at once.
    tx.register_space_waker(&waker);
    assert_eq!(count.count(), 2);
}

#[test]
fn every_producer_waiting_for_space_is_told() {
    let (tx, rx) = bounded(1).unwrap();
    let tx2 = tx.clone();
    let (a, waker_a) = CountingWaker::new();
    let (b, waker_b) = CountingWaker::new();
    tx.send(0).unwrap();
    tx.register_space_waker(&waker_a);
    tx2.register_space_waker(&waker_b);
    rx.recv().unwrap();
    assert_eq!((a.count(), b.count()), (1, 1));
}

#[test]
fn the_space_waker_fires_when_the_receiver_drops() {
    let (tx, rx) = bounded(1).unwrap();
    let (count, waker) = CountingWaker::new();
    tx.send(1).unwrap();
    tx.register_space_waker(&waker);
    drop(rx);
    assert_eq!(count.count(), 1);
    assert!(tx.try_send(2).unwrap_err().is_disconnected());
}

struct Opaque;

#[test]
fn errors_print_without_the_payload_being_debug() {
    assert_eq!(format!("{:?}", TrySendError::Full(Opaque)), "Full(..)");
    assert_eq!(
        format!("{:?}", TrySendError::Disconnected(Opaque)),
        "Disconnected(..)"
    );
    assert_eq!(format!("{:?}", SendError(Opaque)), "SendError(..)");
    assert_eq!(
        format!("{:?}", SendTimeoutError::Timeout(Opaque)),
        "Timeout(..)"
    );
    let (tx, rx) = bounded::<Opaque>(1).unwrap();
    assert!(format!("{tx:?} {rx:?}").contains("capacity: 1"));
    // Display is a lowercase phrase naming what to do.
    for message in [
        TrySendError::Full(Opaque).to_string(),
        SendError(Opaque).to_string(),
        TryRecvError::Empty.to_string(),
        RecvError.to_string(),
    ] {
        assert!(message.starts_with("the "), "{message}");
        assert!(message.contains(';'), "{message}");
    }
}

#[test]
fn public_types_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<streamtask_runtime::channel::Sender<StreamElement<String>>>();
    send_sync::<streamtask_runtime::channel::Receiver<StreamElement<String>>>();
    send_sync::<InputGate<String>>();
    send_sync::<TwoInputGate<String, u8>>();
    send::<RecordWriter<String>>();
    send_sync::<streamtask_runtime::channel::BarrierAligner>();
    send_sync::<streamtask_runtime::channel::WatermarkValve>();
}

// ---- the input gate ----

#[test]
fn a_gate_without_channels_is_an_error() {
    let err = InputGate::<u8>::new(Vec::new()).unwrap_err();
    assert_eq!(err, GateError::NoChannels);
    assert!(err.to_string().contains("at least one channel"));
}

#[test]
fn the_gate_reads_channels_round_robin() {
    let (tx, mut gate) = gate(3);
    for (ch, sender) in tx.iter().enumerate() {
        for i in 0..2 {
            sender.send(rec((ch, i))).unwrap();
        }
    }
    // Channel 1 gets a third record: once the others are empty it is read on its own.
    tx[1].send(rec((1, 2))).unwrap();
    assert_eq!(
        drain(&mut gate),
        [
            record((0, 0)),
            record((1, 0)),
            record((2, 0)),
            record((0, 1)),
            record((1, 1)),
            record((2, 1)),
            record((1, 2)),
            InputEvent::Nothing
        ]
    );
}

#[test]
fn an_empty_gate_wakes_the_registered_waker_when_any_channel_gets_data() {
    let (tx, mut gate) = gate::<u8>(3);
    let (count, waker) = CountingWaker::new();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    gate.register_waker(&waker);
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    assert_eq!(count.count(), 0);
    tx[2].send(rec(9)).unwrap();
    assert_eq!(count.count(), 1);
    assert_eq!(gate.poll_next().unwrap(), record(9));
}

#[test]
fn the_gate_waker_is_not_registered_on_blocked_channels() {
    let (tx, mut gate) = gate(2);
    tx[0].send(bar(1)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    assert!(gate.is_blocked(0));
    let (count, waker) = CountingWaker::new();
    gate.register_waker(&waker);
    tx[0].send(rec("after the barrier")).unwrap();
    assert_eq!(
        count.count(),
        0,
        "a blocked channel cannot produce an event"
    );
    tx[1].send(bar(1)).unwrap();
    assert_eq!(count.count(), 1);
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert_eq!(gate.poll_next().unwrap(), record("after the barrier"));
}

#[test]
fn alignment_holds_back_a_channel_until_every_channel_delivered_the_barrier() {
    let (tx, mut gate) = gate(2);
    for e in [rec("a1"), bar(1), rec("a2")] {
        tx[0].send(e).unwrap();
    }
    for e in [rec("b1"), rec("b2"), bar(1), rec("b3")] {
        tx[1].send(e).unwrap();
    }
    assert_eq!(gate.poll_next().unwrap(), record("a1"));
    assert_eq!(gate.poll_next().unwrap(), record("b1"));
    // Channel 0 delivers barrier 1 and is held back: "a2" belongs to the next checkpoint.
    assert_eq!(gate.poll_next().unwrap(), record("b2"));
    assert!(gate.is_blocked(0));
    assert_eq!(gate.pending_checkpoint(), Some(barrier(1)));
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert!(!gate.is_blocked(0));
    assert_eq!(
        drain(&mut gate),
        [record("a2"), record("b3"), InputEvent::Nothing]
    );
}

#[test]
fn a_newer_barrier_supersedes_and_aborts_the_unfinished_alignment() {
    let (tx, mut gate) = gate(2);
    for e in [bar(1), rec("x"), bar(2)] {
        tx[0].send(e).unwrap();
    }
    // Channel 1's upstream aborted checkpoint 1 and never forwards its barrier.
    for e in [bar(2), rec("y")] {
        tx[1].send(e).unwrap();
    }
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Superseded { id: 1 });
    // Channel 0 is released (it owes barrier 2), channel 1 is held for checkpoint 2.
    assert!(!gate.is_blocked(0) && gate.is_blocked(1));
    assert_eq!(gate.poll_next().unwrap(), record("x"));
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(2)));
    assert_eq!(drain(&mut gate), [record("y"), InputEvent::Nothing]);
}

#[test]
fn a_barrier_older_than_the_current_one_is_ignored() {
    let (tx, mut gate) = gate(2);
    tx[0].send(bar(2)).unwrap();
    for e in [bar(1), rec("r"), bar(2)] {
        tx[1].send(e).unwrap();
    }
    assert_eq!(gate.poll_next().unwrap(), record("r"));
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(2)));
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
}

#[test]
fn end_of_input_on_a_channel_counts_as_aligned() {
    let (tx, mut gate) = gate(2);
    for e in [bar(1), rec("after 1")] {
        tx[0].send(e).unwrap();
    }
    tx[1].send(StreamElement::EndOfInput).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert_eq!(gate.poll_next().unwrap(), record("after 1"));
    // From now on channel 0 alone aligns.
    tx[0].send(bar(2)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(2)));
    assert!(gate.is_ended(1));
}

#[test]
fn a_single_channel_aligns_at_once() {
    let (tx, mut gate) = gate(1);
    for e in [rec(1), bar(5), rec(2)] {
        tx[0].send(e).unwrap();
    }
    assert_eq!(
        drain(&mut gate),
        [
            record(1),
            InputEvent::Barrier(barrier(5)),
            record(2),
            InputEvent::Nothing
        ]
    );
}

#[test]
fn the_coordinator_can_abort_an_alignment() {
    let (tx, mut gate) = gate(2);
    for e in [bar(3), rec("held")] {
        tx[0].send(e).unwrap();
    }
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    assert_eq!(gate.abort_checkpoint(3), Some(barrier(3)));
    assert_eq!(gate.poll_next().unwrap(), record("held"));
    // The late barrier of the aborted checkpoint does not block channel 1.
    for e in [bar(3), rec("free")] {
        tx[1].send(e).unwrap();
    }
    assert_eq!(gate.poll_next().unwrap(), record("free"));
    assert_eq!(gate.pending_checkpoint(), None);
}

#[test]
fn the_gate_emits_the_minimum_watermark_only_when_it_advances() {
    let (tx, mut gate) = gate::<u8>(2);
    tx[0].send(wm(5)).unwrap();
    tx[1].send(wm(3)).unwrap();
    tx[0].send(wm(9)).unwrap();
    tx[1].send(wm(7)).unwrap();
    assert_eq!(
        drain(&mut gate),
        [
            InputEvent::Watermark(Watermark(3)),
            InputEvent::Watermark(Watermark(7)),
            InputEvent::Nothing
        ]
    );
    assert_eq!(gate.watermark(), Watermark(7));
}

#[test]
fn idle_channels_are_left_out_and_all_idle_makes_the_gate_idle() {
    let (tx, mut gate) = gate::<u8>(2);
    tx[0].send(wm(10)).unwrap();
    tx[1]
        .send(StreamElement::Status(StreamStatus::Idle))
        .unwrap();
    tx[0]
        .send(StreamElement::Status(StreamStatus::Idle))
        .unwrap();
    tx[0]
        .send(StreamElement::Status(StreamStatus::Active))
        .unwrap();
    assert_eq!(
        drain(&mut gate),
        [
            InputEvent::Watermark(Watermark(10)),
            InputEvent::Status(StreamStatus::Idle),
            InputEvent::Status(StreamStatus::Active),
            InputEvent::Nothing
        ]
    );
    assert_eq!(gate.status(), StreamStatus::Active);
}

#[test]
fn when_every_channel_ended_the_gate_ends_for_good() {
    let (tx, mut gate) = gate::<u8>(2);
    tx[0].send(wm(4)).unwrap();
    tx[0].send(StreamElement::EndOfInput).unwrap();
    tx[1].send(rec(1)).unwrap();
    tx[1].send(StreamElement::EndOfInput).unwrap();
    drop(tx); // upstream finished: disconnecting after end of input is normal
    assert_eq!(
        drain(&mut gate),
        [
            record(1),
            InputEvent::Watermark(Watermark::MAX),
            InputEvent::EndOfInput
        ]
    );
    assert_eq!(gate.poll_next().unwrap(), InputEvent::EndOfInput);
    let (count, waker) = CountingWaker::new();
    gate.register_waker(&waker);
    assert_eq!(count.count(), 1, "an ended gate has an event at once");
}

#[test]
fn a_channel_closed_without_end_of_input_fails_the_task() {
    let (mut tx, mut gate) = gate::<u8>(3);
    tx[1].send(rec(1)).unwrap();
    drop(tx.remove(1));
    // What was sent before the failure is still delivered, then the failure.
    assert_eq!(gate.poll_next().unwrap(), record(1));
    let err = gate.poll_next().unwrap_err();
    assert_eq!(err, InputClosed { channel: 1 });
    assert!(err.to_string().contains("upstream task is gone"));
    assert!(matches!(
        TaskError::from(err),
        TaskError::InputClosed { channel: 1 }
    ));
}

#[test]
fn next_blocking_parks_until_data_arrives() {
    let (tx, mut gate) = gate::<u32>(2);
    let producers: Vec<_> = tx
        .into_iter()
        .enumerate()
        .map(|(ch, sender)| {
            thread::spawn(move || {
                for i in 0..200 {
                    sender.send(rec(i * 2 + ch as u32)).unwrap();
                    if i % 16 == 0 {
                        thread::yield_now();
                    }
                }
                sender.send(StreamElement::EndOfInput).unwrap();
            })
        })
        .collect();
    let mut got = Vec::new();
    loop {
        match gate.next_blocking().unwrap() {
            InputEvent::Record(r) => got.push(r.value),
            InputEvent::Watermark(w) => assert!(w.is_max()),
            InputEvent::EndOfInput => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    for producer in producers {
        producer.join().unwrap();
    }
    got.sort_unstable();
    assert_eq!(got, (0..400).collect::<Vec<_>>());
}

#[test]
fn next_timeout_reports_nothing_when_nothing_came() {
    let (tx, mut gate) = gate::<u8>(1);
    assert_eq!(
        gate.next_timeout(Duration::from_millis(1)).unwrap(),
        InputEvent::Nothing
    );
    tx[0].send(rec(3)).unwrap();
    assert_eq!(
        gate.next_timeout(Duration::from_secs(30)).unwrap(),
        record(3)
    );
}

#[test]
fn the_gate_records_alignment_time_for_several_channels() {
    let metrics = Arc::new(TaskMetrics::new("t"));
    let (tx, rx): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(4).unwrap()).unzip();
    let mut gate = InputGate::<u8>::new(rx)
        .unwrap()
        .with_metrics(Arc::clone(&metrics));
    tx[0].send(bar(1)).unwrap();
    tx[1].send(bar(1)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert_eq!(metrics.alignment.count(), 1);

    let single = Arc::new(TaskMetrics::new("single"));
    let (tx, rx) = bounded(4).unwrap();
    let mut gate = InputGate::<u8>::new(vec![rx])
        .unwrap()
        .with_metrics(Arc::clone(&single));
    tx.send(bar(1)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert_eq!(single.alignment.count(), 0, "one channel never aligns");
}

// ---- the two-input gate ----

type Two = (
    Vec<streamtask_runtime::channel::Sender<StreamElement<u32>>>,
    Vec<streamtask_runtime::channel::Sender<StreamElement<String>>>,
    TwoInputGate<u32, String>,
);

fn two_input(n1: usize, n2: usize) -> Two {
    let (tx1, rx1): (Vec<_>, Vec<_>) = (0..n1).map(|_| bounded(16).unwrap()).unzip();
    let (tx2, rx2): (Vec<_>, Vec<_>) = (0..n2).map(|_| bounded(16).unwrap()).unzip();
    (tx1, tx2, TwoInputGate::new(rx1, rx2).unwrap())
}

#[test]
fn a_two_input_gate_needs_channels_on_both_inputs() {
    let (_tx, rx) = bounded::<StreamElement<u8>>(1).unwrap();
    let err = TwoInputGate::<u8, u8>::new(vec![rx], Vec::new()).unwrap_err();
    assert_eq!(err, GateError::EmptyInput { input: 2 });
}

#[test]
fn two_input_alignment_spans_both_inputs() {
    let (tx1, tx2, mut gate) = two_input(2, 1);
    for sender in &tx1 {
        sender.send(bar(1)).unwrap();
        sender.send(rec(1)).unwrap();
    }
    tx2[0]
        .send(StreamElement::Record(StreamRecord::new("before".into())))
        .unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(TwoInputRecord::Second(StreamRecord::new("before".into())))
    );
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    assert!(gate.is_blocked(0) && gate.is_blocked(1) && !gate.is_blocked(2));
    tx2[0].send(bar(1)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier(1)));
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(TwoInputRecord::First(StreamRecord::new(1)))
    );
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(TwoInputRecord::First(StreamRecord::new(1)))
    );
}

#[test]
fn the_two_input_watermark_is_the_minimum_of_both_inputs() {
    let (tx1, tx2, mut gate) = two_input(2, 1);
    tx1[0].send(wm(10)).unwrap();
    tx1[1].send(wm(12)).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    assert_eq!(gate.input_watermark(1), Watermark(10));
    tx2[0].send(wm(4)).unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Watermark(Watermark(4))
    );
    tx2[0].send(wm(40)).unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Watermark(Watermark(10))
    );
    assert_eq!(gate.input_watermark(2), Watermark(40));
    // An idle input does not hold the other back.
    tx2[0]
        .send(StreamElement::Status(StreamStatus::Idle))
        .unwrap();
    tx1[0].send(wm(20)).unwrap();
    tx1[1].send(wm(20)).unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Watermark(Watermark(12))
    );
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Watermark(Watermark(20))
    );
    assert_eq!(gate.watermark(), Watermark(20));
}

#[test]
fn the_two_input_gate_reports_each_input_ending() {
    let (tx1, tx2, mut gate) = two_input(1, 2);
    tx1[0].send(StreamElement::EndOfInput).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::InputEnded(1));
    assert!(gate.is_input_ended(1) && !gate.is_input_ended(2));
    tx2[0].send(StreamElement::EndOfInput).unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Nothing);
    tx2[1].send(StreamElement::EndOfInput).unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Watermark(Watermark::MAX)
    );
    assert_eq!(gate.poll_next().unwrap(), InputEvent::InputEnded(2));
    assert_eq!(gate.poll_next().unwrap(), InputEvent::EndOfInput);
    assert_eq!(gate.poll_next().unwrap(), InputEvent::EndOfInput);
}

// ---- the record writer ----

/// Everything queued in `rx` now.
fn queued<T>(
    rx: &streamtask_runtime::channel::Receiver<StreamElement<T>>,
) -> Vec<StreamElement<T>> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[test]
fn forward_needs_exactly_one_channel() {
    let (a, _ra) = bounded::<StreamElement<u8>>(1).unwrap();
    let (b, _rb) = bounded::<StreamElement<u8>>(1).unwrap();
    let err = RecordWriter::new(vec![a, b], Partitioner::Forward).unwrap_err();
    assert_eq!(err, WriterError::ForwardNeedsOneChannel { channels: 2 });
    assert!(err.to_string().contains("round robin"));
    let err = RecordWriter::<u8>::new(Vec::new(), Partitioner::RoundRobin).unwrap_err();
    assert_eq!(err, WriterError::NoChannels);
}

#[test]
fn hash_partitioning_sends_equal_keys_to_the_same_channel() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..4).map(|_| bounded(64).unwrap()).unzip();
    let mut writer =
        RecordWriter::new(tx, Partitioner::by_key(|(key, _): &(u32, u32)| *key)).unwrap();
    for round in 0..2 {
        for key in 0..20 {
            writer.collect(StreamRecord::new((key, round))).unwrap();
        }
    }
    let mut channel_of_key = std::collections::HashMap::new();
    for (ch, rx) in rx.iter().enumerate() {
        for element in queued(rx) {
            let StreamElement::Record(r) = element else {
                panic!("only records were sent");
            };
            let previous = channel_of_key.insert(r.value.0, ch);
            assert!(
                previous.is_none() || previous == Some(ch),
                "key {} split",
                r.value.0
            );
        }
    }
    assert_eq!(channel_of_key.len(), 20);
    let used: std::collections::HashSet<_> = channel_of_key.values().collect();
    assert!(used.len() > 1, "20 keys all hashed to one channel");
}

#[test]
fn key_partitioning_sends_a_key_to_the_owner_of_its_key_group() {
    use streamtask_core::keygroup::{KeyGroupRange, key_group_of};
    let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(64).unwrap()).unzip();
    let mut writer = RecordWriter::new(
        tx,
        Partitioner::by_key_with_max_parallelism(16, |key: &u64| *key),
    )
    .unwrap();
    for key in 0..30u64 {
        writer.collect(StreamRecord::new(key)).unwrap();
    }
    for (ch, rx) in rx.iter().enumerate() {
        let range = KeyGroupRange::for_operator(16, 3, ch as u32);
        for element in queued(rx) {
            let StreamElement::Record(r) = element else {
                panic!("only records were sent");
            };
            assert!(
                range.contains(key_group_of(&r.value, 16)),
                "key {}",
                r.value
            );
        }
    }
}

#[test]
fn a_hash_function_picks_hash_modulo_channels() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(8).unwrap()).unzip();
    let mut writer = RecordWriter::new(tx, Partitioner::hash(|v: &u64| *v)).unwrap();
    for v in [0u64, 1, 2, 3, 4, 5] {
        writer.collect(StreamRecord::new(v)).unwrap();
    }
    assert_eq!(queued(&rx[0]), [rec(0), rec(3)]);
    assert_eq!(queued(&rx[1]), [rec(1), rec(4)]);
    assert_eq!(queued(&rx[2]), [rec(2), rec(5)]);
}

#[test]
fn round_robin_takes_turns() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(8).unwrap()).unzip();
    let mut writer = RecordWriter::new(tx, Partitioner::RoundRobin).unwrap();
    for v in 0..5 {
        writer.collect(StreamRecord::new(v)).unwrap();
    }
    assert_eq!(queued(&rx[0]), [rec(0), rec(2), rec(4)]);
    assert_eq!(queued(&rx[1]), [rec(1), rec(3)]);
}

#[test]
fn a_custom_partitioner_picks_the_channel_and_wraps_past_the_last() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(8).unwrap()).unzip();
    let mut writer =
        RecordWriter::new(tx, Partitioner::custom(|v: &u32, _channels| *v as usize)).unwrap();
    for v in [2, 0, 4] {
        writer.collect(StreamRecord::new(v)).unwrap();
    }
    assert_eq!(queued(&rx[0]), [rec(0)]);
    assert_eq!(queued(&rx[1]), [rec(4)]);
    assert_eq!(queued(&rx[2]), [rec(2)]);
}

#[test]
fn global_sends_everything_to_the_first_channel_and_shuffle_is_seeded() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(8).unwrap()).unzip();
    let mut writer = RecordWriter::new(tx, Partitioner::global()).unwrap();
    for v in 0..3 {
        writer.collect(StreamRecord::new(v)).unwrap();
    }
    assert_eq!(queued(&rx[0]), [rec(0), rec(1), rec(2)]);
    assert!(queued(&rx[1]).is_empty());

    let draw = |seed| {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(64).unwrap()).unzip();
        let mut writer = RecordWriter::new(tx, Partitioner::shuffle(seed)).unwrap();
        for v in 0..30 {
            writer.collect(StreamRecord::new(v)).unwrap();
        }
        rx.iter().map(|rx| queued(rx).len()).collect::<Vec<_>>()
    };
    let counts = draw(7);
    assert_eq!(counts.iter().sum::<usize>(), 30);
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    assert_eq!(draw(7), counts, "the same seed draws the same channels");
}

#[test]
fn broadcast_copies_every_record_to_every_channel() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(8).unwrap()).unzip();
    let metrics = Arc::new(TaskMetrics::new("b"));
    let mut writer = RecordWriter::new(tx, Partitioner::broadcast())
        .unwrap()
        .with_metrics(Arc::clone(&metrics));
    writer
        .collect(StreamRecord::with_timestamp(String::from("x"), 7))
        .unwrap();
    for rx in &rx {
        assert_eq!(
            queued(rx),
            [StreamElement::Record(StreamRecord::with_timestamp(
                String::from("x"),
                7
            ))]
        );
    }
    assert_eq!(
        metrics.records_out.get(),
        1,
        "a broadcast record counts once"
    );
}

#[test]
fn everything_but_records_goes_to_every_channel() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(8).unwrap()).unzip();
    let mut writer = RecordWriter::<u8>::new(tx, Partitioner::RoundRobin).unwrap();
    writer.emit_watermark(Watermark(1)).unwrap();
    writer.emit_status(StreamStatus::Idle).unwrap();
    writer.broadcast_barrier(barrier(2)).unwrap();
    writer.end_of_input().unwrap();
    for rx in &rx {
        assert_eq!(
            queued(rx),
            [
                wm(1),
                StreamElement::Status(StreamStatus::Idle),
                bar(2),
                StreamElement::EndOfInput
            ]
        );
    }
}

#[test]
fn a_full_channel_blocks_the_writer_until_space_frees() {
    let (tx, rx) = bounded(1).unwrap();
    let metrics = Arc::new(TaskMetrics::new("w"));
    let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward)
        .unwrap()
        .with_metrics(Arc::clone(&metrics));
    writer.collect(StreamRecord::new(1)).unwrap();
    assert!(!writer.is_available());
    let producer = thread::spawn(move || {
        writer.collect(StreamRecord::new(2)).unwrap();
        writer.end_of_input().unwrap();
    });
    let got: Vec<_> = std::iter::from_fn(|| rx.recv().ok()).collect();
    producer.join().unwrap();
    assert_eq!(got, [rec(1), rec(2), StreamElement::EndOfInput]);
    assert_eq!(metrics.records_out.get(), 2);
}

#[test]
fn a_gone_receiver_is_output_closed() {
    let (tx, rx) = bounded(1).unwrap();
    let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
    drop(rx);
    assert!(matches!(
        writer.collect(StreamRecord::new(1)),
        Err(OperatorError::OutputClosed)
    ));
    assert!(matches!(
        writer.broadcast_barrier(barrier(1)),
        Err(OperatorError::OutputClosed)
    ));
    assert!(
        writer.is_available(),
        "a send fails at once, so it does not block"
    );
}

#[test]
fn a_full_writer_is_told_when_it_can_write_again() {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(1).unwrap()).unzip();
    let mut writer = RecordWriter::new(tx, Partitioner::RoundRobin).unwrap();
    let (count, waker) = CountingWaker::new();
    writer.register_availability_waker(&waker);
    assert_eq!(count.count(), 1, "nothing is full: woken at once");

    writer.collect(StreamRecord::new(0)).unwrap(); // channel 0 now full
    assert!(!writer.is_available());
    writer.register_availability_waker(&waker);
    assert_eq!(count.count(), 1);
    assert_eq!(rx[1].try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        count.count(),
        1,
        "channel 1 was not full: no notice from it"
    );
    rx[0].try_recv().unwrap();
    assert_eq!(count.count(), 2);
    assert!(writer.is_available());
}
