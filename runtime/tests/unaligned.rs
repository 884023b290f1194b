//! Unaligned checkpoints through real channels and an `InputGate`: barriers sent through the
//! priority lane are taken ahead of the records queued before them, and what they overtook is
//! the channel state. Checked on random scripts over 1 to 4 channels (proptest) and on the
//! cases one by one.
//!
//! The exactly-once cut of an unaligned checkpoint `k`, per channel: the records the task
//! processed before it snapshotted (at `UnalignedBarrier(k)`), followed by the channel state
//! `ChannelState { id: k }` stored for that channel, are exactly the records the channel carried
//! before its barrier `k` (all of them, if it ended first). Nothing is lost or duplicated: every
//! record is processed once, in its channel's order.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use proptest::prelude::*;
use streamtask_core::{Alignment, CheckpointBarrier, StreamElement, StreamRecord};
use streamtask_runtime::channel::{
    ChannelCodec, ChannelState, InputEvent, InputGate, Receiver, Sender, bounded,
};

#[path = "common/scripts.rs"]
mod scripts;
use scripts::{Item, records_before, script};

fn unaligned(id: u64) -> CheckpointBarrier {
    CheckpointBarrier::new(id, 0).with_alignment(Alignment::Unaligned)
}

type Rec = (usize, u32);

fn codec() -> ChannelCodec<Rec> {
    ChannelCodec::serde()
}

/// The records of `state`'s channel `c`.
fn state_records(state: &ChannelState, c: usize) -> Vec<u32> {
    let codec = codec();
    state
        .channel(c)
        .iter()
        .filter_map(|bytes| match codec.decode(bytes).unwrap() {
            StreamElement::Record(r) => Some(r.value.1),
            _ => None,
        })
        .collect()
}

type Ends = (
    Vec<Sender<StreamElement<Rec>>>,
    Vec<Receiver<StreamElement<Rec>>>,
);

fn channels(n: usize, capacity: usize) -> Ends {
    (0..n).map(|_| bounded(capacity).unwrap()).unzip()
}

proptest! {
    #[test]
    fn the_gate_cuts_every_unaligned_checkpoint_exactly_once(
        scripts in prop::collection::vec(script(), 1..=4),
    ) {
        let n = scripts.len();
        let (senders, receivers) = channels(n, 64);
        for (c, script) in scripts.iter().enumerate() {
            for item in script {
                match *item {
                    Item::Record(r) => senders[c]
                        .send(StreamElement::Record(StreamRecord::new((c, r))))
                        .unwrap(),
                    Item::Barrier(id) => senders[c]
                        .send_priority(StreamElement::Barrier(unaligned(id)))
                        .unwrap(),
                    Item::End => senders[c].send(StreamElement::EndOfInput).unwrap(),
                }
            }
        }
        let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
        let mut released = vec![Vec::new(); n];
        let mut snapshots: Vec<(u64, Vec<Vec<u32>>)> = Vec::new();
        let mut completed = BTreeSet::new();
        let mut aborted = BTreeSet::new();
        loop {
            match gate.poll_next().unwrap() {
                InputEvent::Record(r) => released[r.value.0].push(r.value.1),
                InputEvent::UnalignedBarrier(b) => {
                    prop_assert!(snapshots.last().is_none_or(|(id, _)| *id < b.id));
                    prop_assert!(b.is_unaligned());
                    snapshots.push((b.id, released.clone()));
                }
                InputEvent::ChannelState { id, state } => {
                    let state = state.unwrap();
                    let (_, taken) = snapshots
                        .iter()
                        .find(|(s, _)| *s == id)
                        .expect("channel state follows its barrier");
                    for c in 0..n {
                        let mut cut = taken[c].clone();
                        cut.extend(state_records(&state, c));
                        prop_assert_eq!(
                            cut,
                            records_before(&scripts[c], id),
                            "checkpoint {} channel {}", id, c
                        );
                    }
                    completed.insert(id);
                }
                InputEvent::Superseded { id } => {
                    aborted.insert(id);
                }
                InputEvent::Barrier(b) => prop_assert!(false, "aligned {b:?}"),
                InputEvent::InputEnded(n) => prop_assert!(false, "a one-input gate ended input {n}"),
                InputEvent::Watermark(_) | InputEvent::Status(_) => {}
                InputEvent::Nothing | InputEvent::EndOfInput => break,
            }
        }
        prop_assert!(completed.is_disjoint(&aborted));
        for c in 0..n {
            let all: Vec<u32> = records_before(&scripts[c], u64::MAX);
            if scripts[c].last() == Some(&Item::End) || gate.poll_next().is_ok() {
                prop_assert_eq!(&released[c], &all, "channel {} delivered once, in order", c);
            }
        }
        drop(senders);
    }
}

/// Counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// The barrier overtakes a full channel: the task snapshots before any of the queued records,
/// which become the channel state; the priority waker fires although nobody reads the gate.
#[test]
fn a_barrier_overtakes_a_full_channel_and_rings_the_waker() {
    let (senders, receivers) = channels(1, 4);
    let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
    let woken = Arc::new(Count(AtomicUsize::new(0)));
    gate.set_priority_waker(Waker::from(Arc::clone(&woken)));
    for r in 0..4 {
        senders[0]
            .send(StreamElement::Record(StreamRecord::new((0, r))))
            .unwrap();
    }
    assert!(senders[0].is_full());
    senders[0]
        .send_priority(StreamElement::Barrier(unaligned(1)))
        .unwrap();
    assert_eq!(woken.0.load(Ordering::Acquire), 1);
    assert!(gate.has_priority());
    assert_eq!(
        gate.poll_priority(),
        Some(InputEvent::UnalignedBarrier(unaligned(1)))
    );
    let Some(InputEvent::ChannelState { id: 1, state }) = gate.poll_priority() else {
        panic!("channel state expected");
    };
    assert_eq!(state_records(&state.unwrap(), 0), [0, 1, 2, 3]);
    assert_eq!(gate.poll_priority(), None);
    for r in 0..4 {
        assert_eq!(
            gate.poll_next().unwrap(),
            InputEvent::Record(StreamRecord::new((0, r)))
        );
    }
}

/// A record put back (the chain could not take it) and read again is stored once.
#[test]
fn a_record_put_back_is_stored_once() {
    let (senders, receivers) = channels(2, 8);
    let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
    senders[0]
        .send_priority(StreamElement::Barrier(unaligned(1)))
        .unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::UnalignedBarrier(unaligned(1))
    );
    // Channel 1's barrier has not arrived: what it delivers is stored.
    senders[1]
        .send(StreamElement::Record(StreamRecord::new((1, 7))))
        .unwrap();
    let InputEvent::Record(record) = gate.poll_next().unwrap() else {
        panic!("record expected");
    };
    gate.unread(record);
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(StreamRecord::new((1, 7)))
    );
    senders[1]
        .send_priority(StreamElement::Barrier(unaligned(1)))
        .unwrap();
    let InputEvent::ChannelState { id: 1, state } = gate.poll_next().unwrap() else {
        panic!("channel state expected");
    };
    let state = state.unwrap();
    assert_eq!(state_records(&state, 1), [7]);
    assert_eq!(state.elements(), 1);
}

/// A newer unaligned barrier supersedes one whose channel state is not complete.
#[test]
fn a_newer_barrier_supersedes_an_unfinished_unaligned_checkpoint() {
    let (senders, receivers) = channels(2, 8);
    let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
    senders[0]
        .send_priority(StreamElement::Barrier(unaligned(1)))
        .unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::UnalignedBarrier(unaligned(1))
    );
    senders[1]
        .send_priority(StreamElement::Barrier(unaligned(2)))
        .unwrap();
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Superseded { id: 1 });
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::UnalignedBarrier(unaligned(2))
    );
    senders[0]
        .send_priority(StreamElement::Barrier(unaligned(2)))
        .unwrap();
    assert!(matches!(
        gate.poll_next().unwrap(),
        InputEvent::ChannelState {
            id: 2,
            state: Ok(_)
        }
    ));
}

/// Without a codec a gate takes a priority barrier in order: aligned.
#[test]
fn a_gate_without_a_codec_aligns() {
    let (senders, receivers) = channels(1, 8);
    let mut gate = InputGate::new(receivers).unwrap();
    senders[0]
        .send(StreamElement::Record(StreamRecord::new((0, 1))))
        .unwrap();
    senders[0]
        .send_priority(StreamElement::Barrier(unaligned(1)))
        .unwrap();
    senders[0]
        .send(StreamElement::Record(StreamRecord::new((0, 2))))
        .unwrap();
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(StreamRecord::new((0, 1)))
    );
    assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(unaligned(1)));
    assert_eq!(
        gate.poll_next().unwrap(),
        InputEvent::Record(StreamRecord::new((0, 2)))
    );
}

/// An aligned barrier with a timeout waits in order until the timeout, then goes early.
#[test]
fn an_aligned_timeout_switches_an_alignment_to_unaligned() {
    let (senders, receivers) = channels(2, 8);
    let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
    let barrier = CheckpointBarrier::new(1, 0)
        .with_alignment(Alignment::AlignedTimeout(Duration::from_millis(20)));
    // Channel 0 delivers it in order and is held; channel 1's is queued behind a record.
    senders[0]
        .send_priority(StreamElement::Barrier(barrier))
        .unwrap();
    senders[1]
        .send(StreamElement::Record(StreamRecord::new((1, 5))))
        .unwrap();
    senders[1]
        .send_priority(StreamElement::Barrier(barrier))
        .unwrap();
    // Before the timeout: the record of channel 1 comes first, then the alignment completes.
    let first = gate.poll_next().unwrap();
    if first == InputEvent::Record(StreamRecord::new((1, 5))) {
        assert_eq!(gate.poll_next().unwrap(), InputEvent::Barrier(barrier));
        return;
    }
    // Or the timeout passed on a slow machine: then it switched, with the record as state.
    assert_eq!(
        first,
        InputEvent::UnalignedBarrier(barrier.with_alignment(Alignment::Unaligned))
    );
}

/// Past the timeout, a barrier held behind a backlog goes early with the backlog as state.
#[test]
fn past_its_aligned_timeout_a_barrier_goes_early() {
    let (senders, receivers) = channels(1, 8);
    let mut gate = InputGate::new(receivers).unwrap().with_codec(codec());
    let barrier = CheckpointBarrier::new(1, 0)
        .with_alignment(Alignment::AlignedTimeout(Duration::from_millis(5)));
    senders[0]
        .send(StreamElement::Record(StreamRecord::new((0, 1))))
        .unwrap();
    senders[0]
        .send_priority(StreamElement::Barrier(barrier))
        .unwrap();
    assert!(gate.has_priority());
    // Not yet due: the record comes in order (the gate saw the barrier now).
    let first = gate.poll_priority();
    std::thread::sleep(Duration::from_millis(10));
    if first.is_none() {
        assert_eq!(
            gate.poll_priority(),
            Some(InputEvent::UnalignedBarrier(
                barrier.with_alignment(Alignment::Unaligned)
            ))
        );
    }
    let Some(InputEvent::ChannelState { id: 1, state }) = gate.poll_priority() else {
        panic!("channel state expected");
    };
    assert_eq!(state_records(&state.unwrap(), 0), [1]);
}
