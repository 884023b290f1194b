//! Chaining: two operators joined with no channel between them.

use std::fmt;

use super::{Context, Operator, OperatorEvent, Output, TaskServices};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::state::TaskSnapshot;
use crate::time::Timer;

/// `head` followed by `tail`: what `head` emits, `tail` processes in the same call.
///
/// Indices: `head`'s operators come first, `tail`'s follow. Nest chains to build longer ones
/// ([`OperatorExt::then`] does it for you).
pub struct Chain<A, B> {
    head: A,
    tail: B,
}

impl<A, B> Chain<A, B>
where
    A: Operator,
    B: Operator<In = A::Out>,
{
    /// Chains `tail` behind `head`.
    pub fn new(head: A, tail: B) -> Self {
        Chain { head, tail }
    }

    /// The head (sub)chain.
    pub fn head(&self) -> &A {
        &self.head
    }

    /// The tail (sub)chain.
    pub fn tail(&self) -> &B {
        &self.tail
    }

    /// Both halves.
    pub fn into_parts(self) -> (A, B) {
        (self.head, self.tail)
    }
}

impl<A: fmt::Debug, B: fmt::Debug> fmt::Debug for Chain<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .finish()
    }
}

/// The [`Output`] the head of a chain emits to: it drives the next operator.
pub struct ChainOutput<'a, B: Operator> {
    next: &'a mut B,
    out: &'a mut dyn Output<B::Out>,
    services: &'a TaskServices,
    index: usize,
}

impl<'a, B: Operator> ChainOutput<'a, B> {
    /// An output that feeds `next` (at chain index `index`), which emits to `out`.
    pub fn new(
        next: &'a mut B,
        out: &'a mut dyn Output<B::Out>,
        services: &'a TaskServices,
        index: usize,
    ) -> Self {
        ChainOutput {
            next,
            out,
            services,
            index,
        }
    }

    fn ctx(&mut self) -> (&mut B, Context<'_, B::Out>) {
        (
            &mut *self.next,
            Context::new(&mut *self.out, self.services, self.index),
        )
    }
}

impl<B: Operator> ChainOutput<'_, B> {
    /// Runs `call` on the next operator, reporting it as the running one (see
    /// [`RunningOperator`](super::RunningOperator)): the caller, the operator just before it,
    /// runs again once the call returned `Ok`.
    #[inline]
    fn call(
        &mut self,
        call: impl FnOnce(&mut B, &mut Context<'_, B::Out>) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let (index, services) = (self.index, self.services);
        services.running().enter(index);
        let (next, mut ctx) = self.ctx();
        let result = call(next, &mut ctx);
        if result.is_ok() {
            services.running().enter(index.saturating_sub(1));
        }
        result
    }
}

impl<B: Operator> Output<B::In> for ChainOutput<'_, B> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<B::In>) -> Result<(), OperatorError> {
        self.call(|next, ctx| next.process_element(record, ctx))
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.call(|next, ctx| next.process_watermark(watermark, ctx))
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.call(|next, ctx| next.process_status(status, ctx))
    }
}

impl<B: Operator> fmt::Debug for ChainOutput<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainOutput")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Runs `f` on the head with an output that feeds the tail.
macro_rules! with_head {
    ($self:ident, $ctx:ident, |$head:ident, $hctx:ident| $body:expr) => {{
        let base = $ctx.operator_index();
        let tail_index = base + $self.head.chain_len();
        let (out, services, _) = $ctx.reborrow().into_parts();
        let mut chain_out = ChainOutput::new(&mut $self.tail, out, services, tail_index);
        let mut $hctx = Context::new(&mut chain_out, services, base);
        let $head = &mut $self.head;
        $body
    }};
}

/// Runs `f` on the tail with the chain's own output.
macro_rules! with_tail {
    ($self:ident, $ctx:ident, |$tail:ident, $tctx:ident| $body:expr) => {{
        let tail_index = $ctx.operator_index() + $self.head.chain_len();
        let (out, services, _) = $ctx.reborrow().into_parts();
        let mut $tctx = Context::new(out, services, tail_index);
        let $tail = &mut $self.tail;
        $body
    }};
}

impl<A, B> Chain<A, B>
where
    A: Operator,
    B: Operator<In = A::Out>,
{
    /// Runs `f` on the head with a context whose output feeds the tail; `ctx` is the chain's.
    /// For a runtime that reaches its head operator with typed calls (an async head's
    /// completions) rather than erased events.
    pub fn with_head<R>(
        &mut self,
        ctx: &mut Context<'_, B::Out>,
        f: impl FnOnce(&mut A, &mut Context<'_, A::Out>) -> R,
    ) -> R {
        with_head!(self, ctx, |head, hctx| f(head, &mut hctx))
    }
}

impl<A, B> Operator for Chain<A, B>
where
    A: Operator,
    B: Operator<In = A::Out>,
{
    type In = A::In;
    type Out = B::Out;

    fn name(&self) -> &str {
        self.head.name()
    }

    fn open(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        // Tail first: the head may emit from `open` (an async operator replaying restored
        // elements), and what it emits to must already be open.
        with_tail!(self, ctx, |tail, tctx| tail.open(&mut tctx))?;
        with_head!(self, ctx, |head, hctx| head.open(&mut hctx))
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<Self::In>,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        with_head!(self, ctx, |head, hctx| head
            .process_element(record, &mut hctx))
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        with_head!(self, ctx, |head, hctx| head
            .process_watermark(watermark, &mut hctx))
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        with_head!(self, ctx, |head, hctx| head
            .process_status(status, &mut hctx))
    }

    fn accepts_input(&self) -> bool {
        self.head.accepts_input() && self.tail.accepts_input()
    }

    fn waits_for_own_events(&self) -> bool {
        self.head.waits_for_own_events() || self.tail.waits_for_own_events()
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        // Head first, so what the head flushes reaches the tail before the tail flushes.
        with_head!(self, ctx, |head, hctx| head
            .prepare_snapshot_pre_barrier(checkpoint_id, &mut hctx))?;
        with_tail!(self, ctx, |tail, tctx| tail
            .prepare_snapshot_pre_barrier(checkpoint_id, &mut tctx))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.head.notify_checkpoint_complete(checkpoint_id)?;
        self.tail.notify_checkpoint_complete(checkpoint_id)
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.head.notify_checkpoint_aborted(checkpoint_id)?;
        self.tail.notify_checkpoint_aborted(checkpoint_id)
    }

    fn end_input(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        with_head!(self, ctx, |head, hctx| head.end_input(&mut hctx))?;
        with_tail!(self, ctx, |tail, tctx| tail.end_input(&mut tctx))
    }

    fn finish(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        with_head!(self, ctx, |head, hctx| head.finish(&mut hctx))?;
        with_tail!(self, ctx, |tail, tctx| tail.finish(&mut tctx))
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Close both even if the head fails; report the first error.
        let head = self.head.close();
        let tail = self.tail.close();
        head.and(tail)
    }

    fn chain_len(&self) -> usize {
        self.head.chain_len() + self.tail.chain_len()
    }

    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        if timer.operator < ctx.operator_index() + self.head.chain_len() {
            with_head!(self, ctx, |head, hctx| head
                .dispatch_timer(timer, &mut hctx))
        } else {
            with_tail!(self, ctx, |tail, tctx| tail
                .dispatch_timer(timer, &mut tctx))
        }
    }

    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        if operator < ctx.operator_index() + self.head.chain_len() {
            with_head!(self, ctx, |head, hctx| head
                .dispatch_event(operator, event, &mut hctx))
        } else {
            with_tail!(self, ctx, |tail, tctx| tail
                .dispatch_event(operator, event, &mut tctx))
        }
    }

    fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        if operator < ctx.operator_index() + self.head.chain_len() {
            with_head!(self, ctx, |head, hctx| head
                .end_input_at(operator, &mut hctx))
        } else {
            with_tail!(self, ctx, |tail, tctx| tail
                .end_input_at(operator, &mut tctx))
        }
    }

    fn restore_chain(
        &mut self,
        snapshot: Option<&TaskSnapshot>,
        base: usize,
    ) -> Result<(), OperatorError> {
        self.head.restore_chain(snapshot, base)?;
        self.tail
            .restore_chain(snapshot, base + self.head.chain_len())
    }

    fn snapshot_chain(
        &mut self,
        checkpoint_id: u64,
        base: usize,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        self.head.snapshot_chain(checkpoint_id, base, into)?;
        self.tail
            .snapshot_chain(checkpoint_id, base + self.head.chain_len(), into)
    }

    fn chain_names(&self) -> Vec<String> {
        let mut names = self.head.chain_names();
        names.extend(self.tail.chain_names());
        names
    }
}

/// `.then(next)` on every operator: chains `next` behind it.
pub trait OperatorExt: Operator + Sized {
    /// Chains `next` behind `self`.
    fn then<B: Operator<In = Self::Out>>(self, next: B) -> Chain<Self, B> {
        Chain::new(self, next)
    }
}

impl<O: Operator> OperatorExt for O {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{FlatMap, Map};
    use crate::testing::OperatorHarness;

    /// Records which lifecycle calls reached it, in a shared log.
    struct Probe {
        name: &'static str,
        log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        state: u32,
    }

    impl Probe {
        fn record(&self, what: &str) {
            self.log
                .lock()
                .unwrap()
                .push(format!("{}:{what}", self.name));
        }
    }

    impl Operator for Probe {
        type In = u32;
        type Out = u32;
        fn name(&self) -> &str {
            self.name
        }
        fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
            if let Some(bytes) = restored {
                self.state = crate::state::decode(bytes).unwrap();
            }
            self.record(&format!("init={}", self.state));
            Ok(())
        }
        fn open(&mut self, ctx: &mut Context<'_, u32>) -> Result<(), OperatorError> {
            self.record("open");
            ctx.register_timer(10, ctx.operator_index() as u64)?;
            Ok(())
        }
        fn process_element(
            &mut self,
            record: StreamRecord<u32>,
            ctx: &mut Context<'_, u32>,
        ) -> Result<(), OperatorError> {
            self.state += record.value;
            ctx.collect(record)
        }
        fn on_processing_time(
            &mut self,
            timer: Timer,
            ctx: &mut Context<'_, u32>,
        ) -> Result<(), OperatorError> {
            self.record(&format!("timer@{}", ctx.operator_index()));
            assert_eq!(timer.tag as usize, ctx.operator_index());
            ctx.collect(StreamRecord::new(1000 + timer.tag as u32))
        }
        fn on_event(
            &mut self,
            event: OperatorEvent,
            ctx: &mut Context<'_, u32>,
        ) -> Result<(), OperatorError> {
            let v = *event.downcast::<u32>().unwrap();
            self.record(&format!("event={v}"));
            ctx.collect(StreamRecord::new(v))
        }
        fn snapshot_state(&mut self, _id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
            Ok(Some(crate::state::encode(&self.state).unwrap()))
        }
        fn end_input(&mut self, _ctx: &mut Context<'_, u32>) -> Result<(), OperatorError> {
            self.record("end_input");
            Ok(())
        }
        fn finish(&mut self, _ctx: &mut Context<'_, u32>) -> Result<(), OperatorError> {
            self.record("finish");
            Ok(())
        }
        fn close(&mut self) -> Result<(), OperatorError> {
            self.record("close");
            Ok(())
        }
    }

    fn probes(
        log: &std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ) -> Chain<Chain<Probe, Probe>, Probe> {
        let p = |name| Probe {
            name,
            log: log.clone(),
            state: 0,
        };
        p("a").then(p("b")).then(p("c"))
    }

    #[test]
    fn lifecycle_order_opens_tail_first_and_ends_head_first() {
        let log = Default::default();
        let mut h = OperatorHarness::new(probes(&log));
        h.open().unwrap();
        h.end_input().unwrap();
        h.close().unwrap();
        let got = log.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                "a:init=0",
                "b:init=0",
                "c:init=0",
                "c:open",
                "b:open",
                "a:open",
                "a:end_input",
                "b:end_input",
                "c:end_input",
                "a:finish",
                "b:finish",
                "c:finish",
                "a:close",
                "b:close",
                "c:close"
            ]
        );
    }

    #[test]
    fn end_input_at_ends_one_operator_at_a_time() {
        let log = Default::default();
        let mut chain = probes(&log);
        let services = crate::testing::HarnessServices::new("t").services;
        let mut out: Vec<crate::operator::Emitted<u32>> = Vec::new();
        for i in 0..3 {
            let mut ctx = Context::new(&mut out, &services, 0);
            chain.end_input_at(i, &mut ctx).unwrap();
        }
        let got = log.lock().unwrap().clone();
        assert_eq!(got, vec!["a:end_input", "b:end_input", "c:end_input"]);
    }

    #[test]
    fn timers_and_events_reach_the_operator_they_name() {
        let log = Default::default();
        let mut h = OperatorHarness::new(probes(&log));
        h.open().unwrap();
        assert_eq!(h.chain_len(), 3);
        h.advance_processing_time(11).unwrap();
        // Same timestamp, so registration order: `open` ran tail first (c, b, a). Each timer's
        // output flows through the operators behind the one it fired on.
        assert_eq!(h.output_values(), vec![1002, 1001, 1000]);
        h.send_event(1, 7u32).unwrap();
        assert_eq!(h.output_values().last(), Some(&7));
        assert!(log.lock().unwrap().contains(&"b:event=7".to_string()));
    }

    #[test]
    fn snapshot_and_restore_key_state_by_chain_index() {
        let log = Default::default();
        let mut h = OperatorHarness::new(probes(&log));
        h.open().unwrap();
        h.process(5).unwrap();
        let snap = h.snapshot(1).unwrap();
        assert_eq!(snap.len(), 3);
        assert_eq!(
            snap.get_value::<u32>(&TaskSnapshot::operator_key(2))
                .unwrap(),
            Some(5)
        );
        let log2 = Default::default();
        let mut restored = OperatorHarness::restored(probes(&log2), &snap);
        restored.open().unwrap();
        assert!(log2.lock().unwrap().contains(&"c:init=5".to_string()));
    }

    #[test]
    fn boxed_chains_behave_like_static_ones() {
        let boxed: crate::operator::BoxOperator<u32, String> = Box::new(
            Map::new("inc", |x: u32| x + 1)
                .then(FlatMap::new("dup", |x: u32, out: &mut Vec<u32>| {
                    out.push(x);
                    out.push(x);
                }))
                .then(Map::new("str", |x: u32| x.to_string())),
        );
        assert_eq!(boxed.chain_names(), vec!["inc", "dup", "str"]);
        let mut h = OperatorHarness::new(boxed);
        h.open().unwrap();
        h.process(1).unwrap();
        assert_eq!(h.output_values(), vec!["2", "2"]);
    }
}
