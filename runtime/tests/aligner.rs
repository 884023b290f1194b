//! The barrier aligner's guarantees, checked on random interleavings of records, barriers and
//! end of input over 1 to 4 channels (proptest), directly and through an `InputGate`.
//!
//! Each channel carries a script: records numbered per channel, barriers with increasing ids
//! (some ids skipped, as when an upstream task aborted a checkpoint and never forwarded its
//! barrier), and maybe end of input. A random schedule picks which channel to read next; blocked
//! and ended channels are not read, as in a gate. Invariants:
//!
//! - a checkpoint triggers only once every channel that has not ended delivered its barrier;
//! - at the trigger of checkpoint `k`, each channel has released exactly the records before its
//!   barrier `k` (all of them, if it ended): the exactly-once cut;
//! - no record that follows barrier `n` on a channel is released before `n` triggered, was
//!   aborted, or was ignored as stale;
//! - triggered ids increase; aborted ids increase; no id is both;
//! - nothing is lost or duplicated: what a channel released is its records in order, all of them
//!   once every script is read.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use streamtask_core::{CheckpointBarrier, StreamElement, StreamRecord};
use streamtask_runtime::channel::{AlignerAction, BarrierAligner, InputEvent, InputGate, bounded};

#[path = "common/scripts.rs"]
mod scripts;
use scripts::{Item, records_before, script};

fn scripts() -> impl Strategy<Value = Vec<Vec<Item>>> {
    prop::collection::vec(script(), 1..=4)
}

fn records_of(script: &[Item]) -> Vec<u32> {
    script
        .iter()
        .filter_map(|item| match item {
            Item::Record(r) => Some(*r),
            _ => None,
        })
        .collect()
}

/// Drives a `BarrierAligner` like a gate would and checks every invariant as it goes.
struct Model<'a> {
    scripts: &'a [Vec<Item>],
    aligner: BarrierAligner,
    pos: Vec<usize>,
    released: Vec<Vec<u32>>,
    last_barrier: Vec<Option<u64>>,
    ended: Vec<bool>,
    /// Checkpoints that can no longer hold a record back: triggered, aborted or ignored.
    decided: BTreeSet<u64>,
    triggered: Vec<u64>,
    aborted: Vec<u64>,
    /// The `now` of each alignment's first barrier.
    started: Vec<(u64, Instant)>,
    clock: Instant,
}

impl<'a> Model<'a> {
    fn new(scripts: &'a [Vec<Item>]) -> Self {
        let n = scripts.len();
        Model {
            scripts,
            aligner: BarrierAligner::new(n),
            pos: vec![0; n],
            released: vec![Vec::new(); n],
            last_barrier: vec![None; n],
            ended: vec![false; n],
            decided: BTreeSet::new(),
            triggered: Vec::new(),
            aborted: Vec::new(),
            started: Vec::new(),
            clock: Instant::now(),
        }
    }

    /// Reads one item of channel `c` if it may be read and has one.
    fn step(&mut self, c: usize) -> bool {
        if !self.aligner.is_readable(c) || self.pos[c] == self.scripts[c].len() {
            return false;
        }
        let item = self.scripts[c][self.pos[c]];
        self.pos[c] += 1;
        self.clock += Duration::from_micros(1);
        let now = self.clock;
        match item {
            Item::Record(r) => {
                if let Some(n) = self.last_barrier[c] {
                    assert!(
                        self.decided.contains(&n),
                        "channel {c} released record {r} behind undecided barrier {n}"
                    );
                }
                self.released[c].push(r);
            }
            Item::Barrier(id) => {
                self.last_barrier[c] = Some(id);
                let newest_before = self.newest();
                match self
                    .aligner
                    .on_barrier(c, CheckpointBarrier::new(id, 0), now)
                {
                    AlignerAction::Block => {
                        assert_eq!(self.aligner.pending().map(|b| b.id), Some(id));
                        assert!(self.aligner.is_blocked(c));
                        if !self.started.iter().any(|(k, _)| *k == id) {
                            self.started.push((id, now));
                        }
                    }
                    AlignerAction::Trigger(aligned) => {
                        assert_eq!(aligned.barrier.id, id);
                        assert_eq!(aligned.completed_at, now);
                        let started = self.start_of(id).unwrap_or(now);
                        assert_eq!(aligned.started_at, started);
                        self.on_trigger(id);
                    }
                    AlignerAction::Superseded { aborted, current } => {
                        assert_eq!(current.id, id);
                        assert!(aborted.id < id);
                        assert!(self.aligner.is_blocked(c));
                        assert!(!self.triggered.contains(&aborted.id));
                        assert!(self.aborted.last().is_none_or(|&a| a < aborted.id));
                        self.aborted.push(aborted.id);
                        self.decided.insert(aborted.id);
                        self.started.push((id, now));
                    }
                    AlignerAction::Ignore => {
                        assert!(
                            newest_before.is_some_and(|newest| id <= newest),
                            "barrier {id} ignored but nothing newer was seen"
                        );
                        self.decided.insert(id);
                    }
                }
            }
            Item::End => {
                self.ended[c] = true;
                if let Some(aligned) = self.aligner.on_end_of_input(c, now) {
                    let id = aligned.barrier.id;
                    assert_eq!(aligned.started_at, self.start_of(id).expect("started"));
                    self.on_trigger(id);
                }
            }
        }
        true
    }

    fn newest(&self) -> Option<u64> {
        self.decided
            .iter()
            .copied()
            .chain(self.aligner.pending().map(|b| b.id))
            .max()
    }

    fn start_of(&self, id: u64) -> Option<Instant> {
        self.started
            .iter()
            .rev()
            .find(|(k, _)| *k == id)
            .map(|(_, t)| *t)
    }

    fn on_trigger(&mut self, k: u64) {
        assert!(
            self.triggered.last().is_none_or(|&t| t < k),
            "ids must increase"
        );
        assert!(!self.aborted.contains(&k));
        for c in 0..self.scripts.len() {
            assert!(
                self.ended[c] || self.last_barrier[c] == Some(k),
                "checkpoint {k} triggered but channel {c} neither ended nor delivered it"
            );
            let expected = if self.ended[c] {
                records_of(&self.scripts[c])
            } else {
                records_before(&self.scripts[c], k)
            };
            assert_eq!(
                self.released[c], expected,
                "cut of checkpoint {k} on channel {c}"
            );
            assert!(!self.aligner.is_blocked(c), "every channel is released");
        }
        self.triggered.push(k);
        self.decided.insert(k);
    }

    /// Reads whatever can still be read, channel by channel.
    fn drain(&mut self) {
        loop {
            let mut progress = false;
            for c in 0..self.scripts.len() {
                while self.step(c) {
                    progress = true;
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn check_end(&self) {
        let n = self.scripts.len();
        for c in 0..n {
            let all = records_of(&self.scripts[c]);
            assert_eq!(
                self.released[c][..],
                all[..self.released[c].len()],
                "channel {c} released out of order or duplicated"
            );
            let consumed = self.pos[c] == self.scripts[c].len();
            assert!(
                consumed || self.aligner.is_blocked(c),
                "channel {c} is stuck without being blocked"
            );
        }
        if (0..n).any(|c| self.aligner.is_blocked(c)) {
            // Stuck only because an open channel ran out before delivering the barrier.
            assert!(self.aligner.pending().is_some());
            assert!(
                (0..n).any(|c| self.aligner.is_readable(c) && self.pos[c] == self.scripts[c].len())
            );
        }
        if self.scripts.iter().all(|s| s.last() == Some(&Item::End)) {
            assert!(self.aligner.all_ended());
            assert_eq!(self.aligner.pending(), None);
            for c in 0..n {
                assert_eq!(
                    self.released[c],
                    records_of(&self.scripts[c]),
                    "channel {c} lost records"
                );
            }
        }
    }
}

#[test]
fn smoke() {
    let scripts = vec![
        vec![
            Item::Record(0),
            Item::Barrier(1),
            Item::Record(1),
            Item::End,
        ],
        vec![Item::Record(0), Item::Barrier(1), Item::End],
    ];
    let mut model = Model::new(&scripts);
    assert!(model.step(0)); // record 0
    assert!(model.step(0)); // barrier 1: blocked
    assert!(!model.step(0));
    assert!(model.step(1)); // record 0
    assert!(model.step(1)); // barrier 1: trigger
    assert_eq!(model.triggered, [1]);
    model.drain();
    model.check_end();
}

/// An abort from outside of a checkpoint older than the pending one leaves the pending
/// alignment alone (its channels stay held); aborting the pending one releases them.
#[test]
fn aborting_an_older_checkpoint_keeps_the_pending_alignment() {
    let now = Instant::now();
    let mut aligner = BarrierAligner::new(2);
    assert!(matches!(
        aligner.on_barrier(0, CheckpointBarrier::new(2, 0), now),
        AlignerAction::Block
    ));
    assert_eq!(aligner.abort(1), None, "checkpoint 1 is not pending");
    assert!(aligner.is_blocked(0), "checkpoint 2's alignment goes on");
    assert_eq!(aligner.abort(2).map(|b| b.id), Some(2));
    assert!(!aligner.is_blocked(0));
    assert!(aligner.is_readable(0));
}

/// End of input marks just that channel ended (no longer readable), and shows in `Debug`.
#[test]
fn end_of_input_ends_only_its_channel() {
    let now = Instant::now();
    let mut aligner = BarrierAligner::new(2);
    assert!(!aligner.is_ended(0));
    assert!(aligner.on_end_of_input(0, now).is_none());
    assert!(aligner.is_ended(0));
    assert!(!aligner.is_readable(0));
    assert!(!aligner.is_ended(1));
    assert!(!aligner.all_ended());
    let debug = format!("{aligner:?}");
    assert!(
        debug.contains("BarrierAligner") && debug.contains("Ended"),
        "{debug}"
    );
}

proptest! {
    #[test]
    fn the_aligner_keeps_every_invariant(
        scripts in scripts(),
        schedule in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut model = Model::new(&scripts);
        for pick in schedule {
            model.step(usize::from(pick) % scripts.len());
        }
        model.drain();
        model.check_end();
    }

    #[test]
    fn the_gate_cuts_every_checkpoint_exactly_once(scripts in scripts()) {
        // The same scripts through real channels and an `InputGate` (its own round-robin order).
        let n = scripts.len();
        let (senders, receivers): (Vec<_>, Vec<_>) =
            scripts.iter().map(|s| bounded(s.len() + 1).unwrap()).unzip();
        for (c, script) in scripts.iter().enumerate() {
            for item in script {
                let element = match *item {
                    Item::Record(r) => StreamElement::Record(StreamRecord::new((c, r))),
                    Item::Barrier(id) => StreamElement::Barrier(CheckpointBarrier::new(id, 0)),
                    Item::End => StreamElement::EndOfInput,
                };
                senders[c].try_send(element).unwrap();
            }
        }
        let mut gate = InputGate::new(receivers).unwrap();
        let mut released = vec![Vec::new(); n];
        let mut triggered: Vec<u64> = Vec::new();
        let mut aborted: Vec<u64> = Vec::new();
        loop {
            match gate.poll_next().unwrap() {
                InputEvent::Record(r) => released[r.value.0].push(r.value.1),
                InputEvent::Barrier(b) => {
                    prop_assert!(triggered.last().is_none_or(|&t| t < b.id));
                    for c in 0..n {
                        let cut = if gate.is_ended(c) {
                            records_of(&scripts[c])
                        } else {
                            records_before(&scripts[c], b.id)
                        };
                        prop_assert_eq!(&released[c], &cut, "checkpoint {} channel {}", b.id, c);
                    }
                    triggered.push(b.id);
                }
                InputEvent::Superseded { id } => {
                    prop_assert!(aborted.last().is_none_or(|&a| a < id));
                    aborted.push(id);
                }
                InputEvent::Watermark(_) | InputEvent::Status(_) => {}
                InputEvent::UnalignedBarrier(_) | InputEvent::ChannelState { .. } => {
                    prop_assert!(false, "aligned barriers only")
                }
                InputEvent::InputEnded(n) => prop_assert!(false, "a one-input gate ended input {n}"),
                InputEvent::Nothing | InputEvent::EndOfInput => break,
            }
        }
        prop_assert!(triggered.iter().all(|t| !aborted.contains(t)));
        for c in 0..n {
            let all = records_of(&scripts[c]);
            prop_assert_eq!(&released[c][..], &all[..released[c].len()]);
            prop_assert!(released[c].len() == all.len() || gate.is_blocked(c));
        }
        drop(senders);
    }
}
